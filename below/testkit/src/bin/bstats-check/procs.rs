//! Processes: the BPF task-iterator backend (bstats-procs) against
//! fb_procfs, below 0.9's reader. `frozen`: varied processes stopped with
//! SIGSTOP must give equal `PidInfo`s, field for field. The processes are
//! this binary re-executed as `procs-child` (so their command lines,
//! threads and IO are ours to choose).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::io::BufReader;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::ensure;
use anyhow::Context;
use anyhow::Result;
use bstats_procs::ProcessBackend;
use bstats_procs::Processes;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;

use crate::cgroup_root;

/// What a `procs-child` does before it reports ready and waits.
#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// Threads besides the main one.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Each thread spins this long (user time) and makes syscalls as long
    /// (system time).
    #[arg(long, default_value_t = 0)]
    spin_ms: u64,
    /// Write a file of this many KiB (fsync'ed), read it back, remove it.
    #[arg(long)]
    io_kib: Option<usize>,
    /// MiB of anonymous memory touched and held.
    #[arg(long, default_value_t = 0)]
    anon_mib: usize,
    /// The main thread exits once the others run (a zombie leader).
    #[arg(long)]
    leader_exits: bool,
    /// Overwrite the argument area like setproctitle(3), the NUL that ended
    /// it included.
    #[arg(long)]
    proctitle: Option<String>,
    /// Arguments that only make the command line odd or long.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<std::ffi::OsString>,
}

fn spin(ms: u64) {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut x = 0u64;
    while Instant::now() < end {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        // SAFETY: getppid has no preconditions.
        std::hint::black_box(unsafe { libc::getppid() });
    }
}

/// Overwrites [arg_start, arg_end) (from /proc/self/stat) with `title`, a
/// NUL, and non-NUL filler to the end: what setproctitle(3) leaves.
fn set_proctitle(title: &str) -> Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after = &stat[stat.rfind(')').context("no ) in stat")? + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 48 and 49 (1-based) of the line: the 46th and 47th after comm.
    let start: usize = f[45].parse()?;
    let end: usize = f[46].parse()?;
    let len = end - start;
    ensure!(title.len() + 2 <= len, "title longer than the arguments");
    let mut area = title.as_bytes().to_vec();
    area.push(0);
    area.resize(len, b'x');
    // SAFETY: [start, end) is this process's own argument area (writable
    // stack memory the kernel set up at exec); nothing reads it as Rust
    // data (std copied the arguments at startup).
    unsafe { std::ptr::copy_nonoverlapping(area.as_ptr(), start as *mut u8, len) };
    Ok(())
}

pub fn child(a: ChildArgs) -> Result<()> {
    std::hint::black_box(&a.rest);
    let mem: Vec<u8> = vec![1; a.anon_mib << 20];
    std::hint::black_box(&mem);
    if let Some(kib) = a.io_kib {
        use std::io::Write;
        let p = std::env::temp_dir().join(format!("procs-child-{}", std::process::id()));
        let mut f = std::fs::File::create(&p)?;
        f.write_all(&vec![7u8; kib << 10])?;
        f.sync_all()?;
        drop(f);
        std::hint::black_box(std::fs::read(&p)?);
        std::fs::remove_file(&p)?;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..a.threads {
        let tx = tx.clone();
        let ms = a.spin_ms;
        std::thread::spawn(move || {
            spin(ms);
            let _ = tx.send(());
            loop {
                std::thread::park();
            }
        });
    }
    spin(a.spin_ms);
    for _ in 0..a.threads {
        rx.recv()?;
    }
    if let Some(t) = &a.proctitle {
        set_proctitle(t)?;
    }
    println!("ready");
    if a.leader_exits {
        // SAFETY: the exit syscall (not exit_group) ends only this thread,
        // with no unwinding; the others keep the process.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
    loop {
        std::thread::park();
    }
}

/// Children killed and reaped on drop (before the fixture removes their
/// cgroups).
#[derive(Default)]
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    /// Starts `procs-child ARGS` in `cgroup`; returns once it is ready.
    fn start(&mut self, cgroup: &Path, args: &[std::ffi::OsString]) -> Result<i32> {
        let mut c = Command::new(std::env::current_exe()?)
            .arg("procs-child")
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .context("starting procs-child")?;
        let pid = c.id() as i32;
        std::fs::write(cgroup.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} to {}", cgroup.display()))?;
        let out = c.stdout.take().context("no stdout")?;
        self.0.push(c);
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        ensure!(line == "ready\n", "procs-child {args:?} did not get ready");
        Ok(pid)
    }
}

/// Every thread of `pid` stopped ('T'), or a zombie.
fn stopped(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    dir.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| s.rfind(") ").map(|i| s[i + 2..].starts_with(['T', 'Z'])))
            .unwrap_or(false)
    })
}

fn os(s: &str) -> std::ffi::OsString {
    s.into()
}

/// Starts the varied processes, stops them and compares.
pub fn frozen() -> Result<()> {
    let root = cgroup_root()?;
    let mut t = Fixture::new(&root, "procs", Controllers::Only(&[]))?;
    let a = t.mkdir("a")?;
    let ab = t.mkdir("a/b.scope")?;
    let mut kids = Children::default();
    let long: String = "L".repeat(3000);
    let invalid = std::ffi::OsString::from_vec(vec![b'b', 0xff, b'x']);
    let plain = kids.start(t.top(), &[])?;
    let threaded = kids.start(&a, &["--threads", "7", "--spin-ms", "150"].map(os))?;
    let long_cmd = kids.start(&ab, &[os("--"), os(&long), os(&long), os("tail")])?;
    let odd = kids.start(
        &ab,
        &[
            os("--"),
            os("with space"),
            os(""),
            os("ünï"),
            os("new\nline"),
            invalid,
        ],
    )?;
    let io = kids.start(
        &a,
        &["--io-kib", "2048", "--anon-mib", "32", "--spin-ms", "50"].map(os),
    )?;
    let zleader = kids.start(
        &a,
        &["--threads", "2", "--spin-ms", "30", "--leader-exits"].map(os),
    )?;
    let title = kids.start(
        &ab,
        &["--proctitle", "my title", "--", "padding-padding"].map(os),
    )?;
    let pids = [plain, threaded, long_cmd, odd, io, zleader, title];
    // A zombie too: exits at once, not reaped until the end.
    let zombie = Command::new("/bin/sh").args(["-c", "exit 0"]).spawn()?;
    let zpid = zombie.id() as i32;
    kids.0.push(zombie);
    for &pid in &pids {
        // SAFETY: kill has no memory preconditions; the pid is our child.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pids.iter().chain([&zpid]).all(|&p| stopped(p)) {
        ensure!(Instant::now() < deadline, "children did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut bpf = Processes::new(ProcessBackend::Bpf, &root)?;
    println!(
        "process backend: {} ({})",
        bpf.plan().backend,
        bpf.plan().reason
    );
    let reader = procfs::ProcReader::new();
    let watched: Vec<i32> = pids.iter().copied().chain([zpid]).collect();
    // BPF first (signal->prev_cputime not yet updated by a read of
    // /proc/PID/stat), then procfs, then BPF again; retried when the
    // seconds of uptime changed in between (running_secs).
    for attempt in 0.. {
        let up0 = uptime();
        let first = bpf.read_all_pids(&reader)?;
        let text = reader.read_all_pids()?;
        let second = bpf.read_all_pids(&reader)?;
        if uptime() != up0 && attempt < 5 {
            continue;
        }
        let mut wrong = 0;
        for &pid in &watched {
            let want = text
                .get(&pid)
                .with_context(|| format!("procfs lacks {pid}"))?;
            for (what, got) in [("first", &first), ("second", &second)] {
                match got.get(&pid) {
                    None => {
                        println!("FAIL {pid}: missing from the {what} BPF pass");
                        wrong += 1;
                    }
                    Some(g) if g != want => {
                        println!("FAIL {pid} ({what} BPF pass):");
                        for d in diff(want, g) {
                            println!("  {d}");
                        }
                        wrong += 1;
                    }
                    Some(_) => {}
                }
            }
            println!(
                "{pid}: {:?} {:?} threads={:?} utime={:?}us stime={:?}us",
                want.stat.comm,
                want.cmdline_vec
                    .as_ref()
                    .map(|v| v.iter().map(|a| a.len().min(20)).collect::<Vec<_>>()),
                want.stat.num_threads,
                want.stat.user_usecs,
                want.stat.system_usecs
            );
        }
        let pids_seen = first.len();
        println!(
            "{} processes from BPF, {} from procfs",
            pids_seen,
            text.len()
        );
        if wrong > 0 {
            bail!("{wrong} differences between BPF and procfs");
        }
        println!(
            "frozen processes: BPF == procfs, every field ({} processes)",
            watched.len()
        );
        break;
    }
    drop(kids);
    Ok(())
}

fn uptime() -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split('.').next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Differing fields of two PidInfos, by their Debug rendering.
fn diff(want: &procfs::PidInfo, got: &procfs::PidInfo) -> Vec<String> {
    let fields = |p: &procfs::PidInfo| -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("stat", format!("{:?}", p.stat)),
            ("status", format!("{:?}", p.status)),
            ("io", format!("{:?}", p.io)),
            ("cgroup", p.cgroup.clone()),
            ("cmdline", format!("{:?}", p.cmdline_vec)),
            ("exe", format!("{:?}", p.exe_path)),
        ])
    };
    let (w, g) = (fields(want), fields(got));
    w.iter()
        .filter(|(k, v)| g[*k] != **v)
        .map(|(k, v)| format!("{k}: procfs {v}\n       bpf {}", g[k]))
        .collect()
}
