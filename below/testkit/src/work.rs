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
        unsafe { child(&procs, file.as_ref(), disk.as_ref(), work, ready_w) }
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
        0 => {
            reap(pid);
            Ok(None)
        }
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

fn reap(pid: libc::pid_t) {
    // SAFETY: waiting for our own child; the status is not needed.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

/// The worker: join `procs`' cgroup, put the load in place, write one byte
/// to `ready`, then wait to be killed (cycling, spinning or asleep). Exits
/// 1 when it cannot join.
unsafe fn child(
    procs: &CString,
    file: Option<&(CString, usize)>,
    disk: Option<&CString>,
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
