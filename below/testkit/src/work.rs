//! Load processes for test cgroups. A worker is a fork of the calling
//! process (no exec), so any binary — a test harness included — can load
//! its cgroups without a helper mode of its own. Between fork and death the
//! child makes raw syscalls only: the parent may be multithreaded, and
//! another thread may have held a lock (malloc's, stdout's) at the fork.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::Result;

/// What a worker does in its cgroup before it reports ready.
#[derive(Clone, Debug, Default)]
pub struct Work {
    /// MiB of anonymous memory touched and held.
    pub anon_mib: usize,
    /// A file of this many MiB written (page cache, or shmem on tmpfs).
    pub file: Option<(PathBuf, usize)>,
    pub cpu: Cpu,
    /// Kept up once ready, until killed (instead of sleeping or spinning).
    pub cycle: Option<Cycle>,
    /// Idle threads started besides the main one, as a host's daemons have.
    pub threads: usize,
    /// The command line (space-separated) /proc shows, its first word's
    /// basename as comm, as a host's processes differ; None: the parent's.
    pub cmdline: Option<String>,
}

/// Load that keeps changing, for checks on cgroups sampled while they move.
#[derive(Clone, Debug)]
pub enum Cycle {
    /// Anonymous memory growing by `step_mib` every `step` up to `max_mib`,
    /// then shrinking the same way to none, over and over.
    Memory {
        max_mib: usize,
        step_mib: usize,
        step: Duration,
    },
    /// Direct (uncached) 64 KiB writes and reads of a block device's first
    /// 16 MiB, one pair every 20 ms: io.stat and io.pressure move.
    Disk(PathBuf),
}

#[derive(Clone, Copy, Debug, Default)]
pub enum Cpu {
    /// Sleeps once its memory is in place.
    #[default]
    Idle,
    /// Spins this long, then sleeps.
    For(Duration),
    /// Spins until killed.
    Spin,
}

/// Forks a worker into `cgroup`. Ok(Some(pid)) once its load is in place;
/// Ok(None) when it died first (e.g. OOM-killed under a low memory.max),
/// reaped.
pub(crate) fn spawn(cgroup: &Path, work: &Work) -> Result<Option<libc::pid_t>> {
    let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).context("NUL in a path");
    let procs = cstr(&cgroup.join("cgroup.procs"))?;
    let file = match &work.file {
        Some((p, mib)) => Some((cstr(p)?, *mib)),
        None => None,
    };
    let disk = match &work.cycle {
        Some(Cycle::Disk(p)) => Some(cstr(p)?),
        _ => None,
    };
    let looks = work.cmdline.as_deref().map(Looks::new).transpose()?;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    let [ready_r, ready_w] = fds;
    // SAFETY: the child runs `child`, which makes raw syscalls only and
    // never returns.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the fork's child, with arguments prepared before it.
        unsafe {
            child(
                &procs,
                file.as_ref(),
                disk.as_ref(),
                looks.as_ref(),
                work,
                ready_w,
            )
        }
    }
    let fork_err = std::io::Error::last_os_error();
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(ready_w) };
    if pid < 0 {
        // SAFETY: closing the read end we own.
        unsafe { libc::close(ready_r) };
        return Err(fork_err).context("fork");
    }
    let mut b = 0u8;
    // SAFETY: reading one byte into `b`.
    let n = unsafe { libc::read(ready_r, (&mut b as *mut u8).cast(), 1) };
    let read_err = std::io::Error::last_os_error();
    // SAFETY: closing the read end we own.
    unsafe { libc::close(ready_r) };
    match n {
        1 => Ok(Some(pid)),
        0 => match reap(pid) {
            5 => anyhow::bail!(
                "worker could not set its command line (PR_SET_MM: CAP_SYS_RESOURCE?)"
            ),
            6 => anyhow::bail!("worker could not start its threads (clone)"),
            _ => Ok(None),
        },
        _ => {
            kill(pid);
            Err(read_err).with_context(|| format!("waiting for worker {pid}"))
        }
    }
}

pub(crate) fn kill(pid: libc::pid_t) {
    // SAFETY: signalling and reaping our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reap(pid);
}

/// Waits for our child `pid`: its exit code, -1 when killed by a signal.
fn reap(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child into `status`.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// A worker's own command line and name, prepared before the fork.
struct Looks {
    /// The arguments, each NUL-terminated, as the kernel lays out argv.
    args: Vec<u8>,
    comm: CString,
}

impl Looks {
    fn new(cmdline: &str) -> Result<Looks> {
        let mut args = Vec::new();
        for a in cmdline.split_whitespace() {
            anyhow::ensure!(!a.contains('\0'), "NUL in a command line");
            args.extend_from_slice(a.as_bytes());
            args.push(0);
        }
        let argv0 = cmdline
            .split_whitespace()
            .next()
            .context("empty command line")?;
        let base = argv0.rsplit('/').next().unwrap_or(argv0);
        // comm holds 15 bytes.
        let comm = CString::new(&base.as_bytes()[..base.len().min(15)])?;
        Ok(Looks { args, comm })
    }

    /// Points the process's argv area (what /proc/<pid>/cmdline reads) at
    /// `args` and renames it (needs CAP_SYS_RESOURCE). In the worker.
    unsafe fn apply(&self) -> bool {
        let start = self.args.as_ptr() as libc::c_ulong;
        let end = start + self.args.len() as libc::c_ulong;
        let set = |what, v: libc::c_ulong| {
            libc::prctl(
                libc::PR_SET_MM,
                what as libc::c_ulong,
                v,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            ) == 0
        };
        // The kernel keeps start <= end at every step: which bound moves
        // first depends on where the new area lies.
        let moved = (set(libc::PR_SET_MM_ARG_START, start) && set(libc::PR_SET_MM_ARG_END, end))
            || (set(libc::PR_SET_MM_ARG_END, end) && set(libc::PR_SET_MM_ARG_START, start));
        moved && libc::prctl(libc::PR_SET_NAME, self.comm.as_ptr()) == 0
    }
}

/// A worker's extra thread: idle until the process is killed.
extern "C" fn idle_thread(_: *mut libc::c_void) -> libc::c_int {
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}

/// Starts `n` idle threads in the worker with clone(2) (no pthreads: the
/// worker makes raw syscalls only). Exits 6 when the kernel refuses.
unsafe fn start_threads(n: usize) {
    const STACK: usize = 64 << 10;
    let flags = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM;
    for _ in 0..n {
        let stack = map_anon(STACK);
        let top = stack.cast::<u8>().add(STACK).cast();
        if libc::clone(idle_thread, top, flags, std::ptr::null_mut()) < 0 {
            libc::_exit(6);
        }
    }
}

/// The worker: join `procs`' cgroup, take on its looks, put the load in
/// place, write one byte to `ready`, then wait to be killed (cycling,
/// spinning or asleep). Exits 1 when it cannot join, 5 when it cannot
/// change its command line.
unsafe fn child(
    procs: &CString,
    file: Option<&(CString, usize)>,
    disk: Option<&CString>,
    looks: Option<&Looks>,
    work: &Work,
    ready: libc::c_int,
) -> ! {
    // Dies with the test even if the fixture's Drop never runs.
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    // Keep no other fds of the parent (BPF links, other workers' pipes).
    if libc::dup2(ready, 3) == 3 {
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
    }
    let ready = 3;
    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
        libc::_exit(1);
    }
    libc::close(fd);
    if looks.is_some_and(|l| !l.apply()) {
        libc::_exit(5);
    }
    start_threads(work.threads);
    if work.anon_mib > 0 {
        let len = work.anon_mib << 20;
        let p = map_anon(len);
        for off in (0..len).step_by(4096) {
            p.cast::<u8>().add(off).write_volatile(1);
        }
    }
    if let Some((path, mib)) = file {
        static CHUNK: [u8; 1 << 16] = [7; 1 << 16];
        let fd = libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            0o600,
        );
        if fd < 0 {
            libc::_exit(3);
        }
        for _ in 0..(mib << 20) / CHUNK.len() {
            if libc::write(fd, CHUNK.as_ptr().cast(), CHUNK.len()) < 0 {
                libc::_exit(3);
            }
        }
        libc::close(fd);
    }
    let spin = |until: Option<Instant>| {
        let mut x = 1u64;
        while until.is_none_or(|t| Instant::now() < t) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    };
    if let Cpu::For(d) = work.cpu {
        spin(Some(Instant::now() + d));
    }
    libc::write(ready, b"r".as_ptr().cast(), 1);
    libc::close(ready);
    match (&work.cycle, disk) {
        (
            Some(Cycle::Memory {
                max_mib,
                step_mib,
                step,
            }),
            _,
        ) => memory_wave(max_mib << 20, step_mib << 20, *step),
        (_, Some(dev)) => disk_loop(dev),
        _ => {}
    }
    if let Cpu::Spin = work.cpu {
        spin(None);
    }
    loop {
        libc::pause();
    }
}

fn nap(d: Duration) {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a plain nanosleep; an early wake-up only shortens the nap.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// `len` bytes of private anonymous memory, in the worker (exits 2 when
/// the kernel refuses).
unsafe fn map_anon(len: usize) -> *mut libc::c_void {
    let p = libc::mmap(
        std::ptr::null_mut(),
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if p == libc::MAP_FAILED {
        libc::_exit(2);
    }
    p
}

/// [`Cycle::Memory`], in the worker (raw syscalls only).
unsafe fn memory_wave(max: usize, step: usize, every: Duration) -> ! {
    let step = step.clamp(4096, max.max(4096));
    let p = map_anon(max);
    let (mut held, mut growing) = (0, true);
    loop {
        if growing {
            let end = (held + step).min(max);
            for off in (held..end).step_by(4096) {
                p.cast::<u8>().add(off).write_volatile(1);
            }
            held = end;
            growing = held < max;
        } else {
            let start = held.saturating_sub(step);
            // Gives the pages back: anon and memory.current go down.
            libc::madvise(
                p.cast::<u8>().add(start).cast(),
                held - start,
                libc::MADV_DONTNEED,
            );
            held = start;
            growing = held == 0;
        }
        nap(every);
    }
}

/// [`Cycle::Disk`], in the worker (raw syscalls only).
unsafe fn disk_loop(dev: &CString) -> ! {
    const CHUNK: usize = 64 << 10;
    let fd = libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_DIRECT);
    if fd < 0 {
        libc::_exit(4);
    }
    // O_DIRECT needs an aligned buffer: a page-aligned mapping is one.
    let buf = map_anon(CHUNK);
    let mut off = 0;
    loop {
        libc::pwrite(fd, buf, CHUNK, off as libc::off_t);
        libc::pread(fd, buf, CHUNK, off as libc::off_t);
        off = (off + CHUNK) % (16 << 20);
        nap(Duration::from_millis(20));
    }
}
