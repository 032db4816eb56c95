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
    /// Once ready, keep changing: threads spin in bursts, the main thread
    /// allocates and frees memory and writes a file, until killed.
    #[arg(long)]
    busy: bool,
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

/// One round of a busy child's main thread: memory allocated and freed,
/// a file written.
fn churn() -> Result<()> {
    use std::io::Write;
    let v: Vec<u8> = vec![3; 16 << 20];
    std::hint::black_box(&v);
    drop(v);
    let p = std::env::temp_dir().join(format!("procs-busy-{}", std::process::id()));
    let mut f = std::fs::File::create(&p)?;
    f.write_all(&[5u8; 256 << 10])?;
    f.sync_all()?;
    std::fs::remove_file(&p)?;
    std::thread::sleep(Duration::from_millis(10));
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
        let (ms, busy) = (a.spin_ms, a.busy);
        std::thread::spawn(move || {
            spin(ms);
            let _ = tx.send(());
            loop {
                if busy {
                    spin(20);
                    std::thread::sleep(Duration::from_millis(30));
                } else {
                    std::thread::park();
                }
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
    if a.busy {
        loop {
            churn()?;
        }
    }
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
        let mut text = reader.read_all_pids()?;
        let second = bpf.read_all_pids(&reader)?;
        if uptime() != up0 && attempt < 5 {
            continue;
        }
        let mut wrong = 0;
        for &pid in &watched {
            let want = text
                .get_mut(&pid)
                .with_context(|| format!("procfs lacks {pid}"))?;
            // fb_procfs drops a command line its thread pool did not read
            // within 20 ms (a busy machine): ask again (the zombies have
            // none).
            if want.cmdline_vec.is_none() && pid != zpid && pid != zleader {
                println!("{pid}: fb_procfs dropped the command line (its 20 ms timeout)");
                for _ in 0..20 {
                    want.cmdline_vec = reader.read_pid_cmdline(pid as u32)?;
                    if want.cmdline_vec.is_some() {
                        break;
                    }
                }
            }
            let want = &*want;
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
        kernel_thread_names(&mut bpf, &reader)?;
        break;
    }
    drop(kids);
    Ok(())
}

/// A thread's name as procfs and BPF gave it.
type Names = (Option<String>, Option<String>);

/// Kernel threads' names (workqueue workers with their description, long
/// kthread names) as /proc prints them: each that /proc shows the same
/// just before and after a pass must be the pass's. A worker can start and
/// finish a work item between the reads (its '+' comes and goes), so only
/// a thread that differs in 3 rounds in a row fails.
fn kernel_thread_names(bpf: &mut Processes, reader: &procfs::ProcReader) -> Result<()> {
    let mut suspects: Option<BTreeMap<i32, Names>> = None;
    let mut same = 0;
    for _ in 0..3 {
        let before = reader.read_all_pids()?;
        let got = bpf.read_all_pids(reader)?;
        let after = reader.read_all_pids()?;
        let mut differ = BTreeMap::new();
        same = 0;
        for (pid, g) in &got {
            let (Some(b), Some(a)) = (before.get(pid), after.get(pid)) else {
                continue;
            };
            if *pid != 2 && b.stat.ppid != Some(2) || b.stat.comm != a.stat.comm {
                continue;
            }
            if b.stat.comm == g.stat.comm {
                same += 1;
            } else if suspects.as_ref().is_none_or(|s| s.contains_key(pid)) {
                differ.insert(*pid, (b.stat.comm.clone(), g.stat.comm.clone()));
            }
        }
        if differ.is_empty() {
            println!("kernel threads: {same} names equal");
            return Ok(());
        }
        suspects = Some(differ);
    }
    bail!("kernel thread names differ 3 rounds in a row (pid: procfs, bpf): {suspects:?} ({same} equal)")
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

/// Running processes sampled `samples` times: each BPF read against
/// fb_procfs's reads just before and after it. Counters between the two
/// (user and system: not below the read before, their sum within the sum
/// after, one tick for the rounding of each); gauges between the two;
/// what did not change between the two equal. Fails on a value out at 3
/// samples in a row (a gauge can move and come back between reads).
pub fn parity(samples: usize) -> Result<()> {
    let root = cgroup_root()?;
    let mut t = Fixture::new(&root, "procs-live", Controllers::Only(&[]))?;
    let a = t.mkdir("a")?;
    let mut kids = Children::default();
    for i in 0..4 {
        let cg = if i % 2 == 0 {
            t.top().to_path_buf()
        } else {
            a.clone()
        };
        kids.start(
            &cg,
            &["--threads", "3", "--busy", "--", "busy child"].map(os),
        )?;
    }
    let mut bpf = Processes::new(ProcessBackend::Bpf, &root)?;
    let reader = procfs::ProcReader::new();
    let mut streak: BTreeMap<(i32, &'static str), usize> = BTreeMap::new();
    let mut checked = 0usize;
    let mut worst = 0usize;
    for n in 0..samples {
        let before = reader.read_all_pids()?;
        let got = bpf.read_all_pids(&reader)?;
        let after = reader.read_all_pids()?;
        let mut out = Vec::new();
        for (pid, b) in &before {
            let (Some(g), Some(a)) = (got.get(pid), after.get(pid)) else {
                continue;
            };
            // A pid reused between the reads is another process.
            if b.stat.running_secs.is_none()
                || a.stat.comm != b.stat.comm && a.cmdline_vec != b.cmdline_vec
            {
                continue;
            }
            checked += 1;
            for what in violations(b, g, a) {
                out.push((*pid, what));
            }
        }
        let now: std::collections::BTreeSet<_> = out.iter().cloned().collect();
        streak.retain(|k, _| now.contains(k));
        for k in now {
            *streak.entry(k).or_default() += 1;
        }
        let max = streak.values().copied().max().unwrap_or(0);
        worst = worst.max(max);
        println!(
            "sample {n}: {} processes, {} values out ({:?}), longest streak {max}",
            got.len(),
            out.len(),
            out.iter().take(4).collect::<Vec<_>>()
        );
        if max >= 3 {
            let (k, _) = streak.iter().find(|(_, v)| **v >= 3).unwrap();
            let show = |m: &procfs::PidMap| {
                m.get(&k.0)
                    .map(|p| format!("{:?} {:?} {:?}", p.stat, p.status, p.io))
            };
            bail!(
                "{:?} out 3 samples in a row:\n before {:?}\n bpf    {:?}\n after  {:?}",
                k,
                show(&before),
                show(&got),
                show(&after)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    ensure!(
        checked > samples * 4,
        "too few processes checked ({checked})"
    );
    println!("live processes: {checked} process samples within fb_procfs's reads (longest streak {worst})");
    drop(kids);
    Ok(())
}

/// The fields of `g` (BPF) out of where `b` and `a` (procfs before and
/// after) put them.
fn violations(b: &procfs::PidInfo, g: &procfs::PidInfo, a: &procfs::PidInfo) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut counter = |name, b: Option<u64>, g: Option<u64>, a: Option<u64>| {
        if let (Some(b), Some(g), Some(a)) = (b, g, a) {
            if g < b || g > a {
                out.push(name);
            }
        } else if b.is_some() && a.is_some() {
            out.push(name);
        }
    };
    counter("minflt", b.stat.minflt, g.stat.minflt, a.stat.minflt);
    counter("majflt", b.stat.majflt, g.stat.majflt, a.stat.majflt);
    counter("rbytes", b.io.rbytes, g.io.rbytes, a.io.rbytes);
    counter("wbytes", b.io.wbytes, g.io.wbytes, a.io.wbytes);
    counter(
        "running_secs",
        b.stat.running_secs,
        g.stat.running_secs,
        a.stat.running_secs,
    );
    // One tick per value: each is rounded down on its own.
    let tick = 1_000_000 / 100;
    let sum = |p: &procfs::PidInfo| {
        p.stat
            .user_usecs
            .zip(p.stat.system_usecs)
            .map(|(u, s)| u + s)
    };
    match (
        b.stat.user_usecs,
        g.stat.user_usecs,
        g.stat.system_usecs,
        sum(a),
    ) {
        (Some(bu), Some(gu), Some(gs), Some(asum)) => {
            if gu < bu || gs < b.stat.system_usecs.unwrap_or(0) || gu + gs > asum + tick {
                out.push("cputime");
            }
        }
        _ => out.push("cputime"),
    }
    let mut gauge = |name, b: Option<u64>, g: Option<u64>, a: Option<u64>| {
        if let (Some(b), Some(a)) = (b, a) {
            if !g.is_some_and(|g| g >= b.min(a) && g <= b.max(a)) {
                out.push(name);
            }
        }
    };
    gauge("rss", b.stat.rss_bytes, g.stat.rss_bytes, a.stat.rss_bytes);
    gauge(
        "num_threads",
        b.stat.num_threads,
        g.stat.num_threads,
        a.stat.num_threads,
    );
    let (bs, gs, as_) = (&b.status, &g.status, &a.status);
    gauge("vm_size", bs.vm_size, gs.vm_size, as_.vm_size);
    gauge("lock", bs.lock, gs.lock, as_.lock);
    gauge("pin", bs.pin, gs.pin, as_.pin);
    gauge("anon", bs.anon, gs.anon, as_.anon);
    gauge("file", bs.file, gs.file, as_.file);
    gauge("shmem", bs.shmem, gs.shmem, as_.shmem);
    gauge("pte", bs.pte, gs.pte, as_.pte);
    gauge("swap", bs.swap, gs.swap, as_.swap);
    gauge("huge_tlb", bs.huge_tlb, gs.huge_tlb, as_.huge_tlb);
    let mut same = |name, eq_ba: bool, eq_bg: bool| {
        if eq_ba && !eq_bg {
            out.push(name);
        }
    };
    same(
        "comm",
        b.stat.comm == a.stat.comm,
        b.stat.comm == g.stat.comm,
    );
    same(
        "ppid",
        b.stat.ppid == a.stat.ppid,
        b.stat.ppid == g.stat.ppid,
    );
    same(
        "pgrp",
        b.stat.pgrp == a.stat.pgrp,
        b.stat.pgrp == g.stat.pgrp,
    );
    same(
        "session",
        b.stat.session == a.stat.session,
        b.stat.session == g.stat.session,
    );
    same(
        "ns_tgid",
        bs.ns_tgid == as_.ns_tgid,
        bs.ns_tgid == gs.ns_tgid,
    );
    same("cgroup", b.cgroup == a.cgroup, b.cgroup == g.cgroup);
    same(
        "cmdline",
        b.cmdline_vec == a.cmdline_vec,
        b.cmdline_vec == g.cmdline_vec,
    );
    same("exe", b.exe_path == a.exe_path, b.exe_path == g.exe_path);
    out
}

/// Wall and CPU time per read of every process, fb_procfs vs BPF, with
/// `n` more (idle, 2-thread) processes than the system has.
pub fn bench(n: usize, samples: u32) -> Result<()> {
    let root = cgroup_root()?;
    let mut kids = Children::default();
    for _ in 0..n {
        kids.start(&root, &["--threads", "1", "--", "bench child"].map(os))?;
    }
    let reader = procfs::ProcReader::new();
    let mut bpf = Processes::new(ProcessBackend::Bpf, &root)?;
    let mut count = 0;
    let mut time = |name: &str, f: &mut dyn FnMut() -> Result<procfs::PidMap>| -> Result<()> {
        f()?;
        let (w0, c0) = (Instant::now(), bstats_bpf::process_cpu_time());
        for _ in 0..samples {
            count = f()?.len();
        }
        let (w, c) = (
            w0.elapsed() / samples,
            (bstats_bpf::process_cpu_time() - c0) / samples,
        );
        println!(
            "{name}: {count} processes, per read {:.2} ms wall, {:.2} ms CPU",
            w.as_secs_f64() * 1e3,
            c.as_secs_f64() * 1e3
        );
        Ok(())
    };
    time("fb_procfs read_all_pids", &mut || {
        Ok(reader.read_all_pids()?)
    })?;
    time("BPF task iterator", &mut || bpf.read_all_pids(&reader))?;
    drop(kids);
    Ok(())
}
