//! The user's bill: real `below record -i 1` processes, one at a time on
//! the same cgroup tree, each over a window of the same length: whole
//! process CPU per sample actually written, samples written against
//! expected, store bytes per sample, peak RSS; and, from `--phase-times`,
//! where our recorder's CPU goes. A "floor" recorder does only what no cgroup
//! collector can avoid (below's other collectors, the BPF pass, the store
//! write of a same-sized tree) to measure our part against.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use model::CgroupSample;
use serde::Serialize;

use crate::overhead::proc_cpu;

/// One row of the bill: a recorder's command line, `{config}`, `{store}`,
/// `{root}` and `{phases}` (its `--phase-times` file) filled in per run, and what its config file holds besides
/// store_dir, log_dir and cgroup_root.
#[derive(Debug, Clone, Serialize)]
pub struct Recorder {
    /// Short name for `--recorders`.
    pub key: String,
    /// Row label.
    pub name: String,
    pub argv: Vec<String>,
    pub config: String,
}

/// Binaries the rows are made of; a missing one drops its rows.
pub struct Binaries<'a> {
    pub below09: Option<&'a Path>,
    pub below_main: Option<&'a Path>,
    /// below main with patches/below applied.
    pub below_main_series: Option<&'a Path>,
    pub ours: Option<&'a Path>,
}

fn row(key: &str, name: &str, bin: &Path, args: &[&str], config: &str) -> Recorder {
    let mut argv = vec![bin.display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    Recorder {
        key: key.into(),
        name: name.into(),
        argv,
        config: config.into(),
    }
}

/// Every recorder of the bill, each with and without `--compress`.
pub fn recorders(b: &Binaries) -> Result<Vec<Recorder>> {
    let rec = ["--config", "{config}", "record", "-i", "1"];
    let mut plain = Vec::new();
    if let Some(p) = b.below09 {
        let a = [&rec[..], &["--disable-exitstats"]].concat();
        plain.push(row("below09", "below 0.9 (exitstats off)", p, &a, ""));
    }
    if let Some(p) = b.below_main {
        let a = [&rec[..], &["--disable-exitstats"]].concat();
        plain.push(row("main-files", "below main, files", p, &a, ""));
        plain.push(row(
            "main-bpf",
            "below main, enable_cgroup_bpf",
            p,
            &a,
            "enable_cgroup_bpf = true\n",
        ));
    }
    if let Some(p) = b.below_main_series {
        let a = [&rec[..], &["--disable-exitstats"]].concat();
        plain.push(row(
            "main-series",
            "below main + patches/below, enable_cgroup_bpf",
            p,
            &a,
            "enable_cgroup_bpf = true\n",
        ));
    }
    if let Some(p) = b.ours {
        // Exitstats off, as every other row: the same work compared.
        let off = "--disable-exitstats";
        let rec = [&rec[..], &["--phase-times", "{phases}"]].concat();
        for (be, label) in [("bpf", "BPF"), ("read", "plain read"), ("stream", "stream")] {
            let a = [&["--cgroup-backend", be][..], &rec[..], &[off]].concat();
            plain.push(row(be, &format!("ours, {label}"), p, &a, ""));
        }
        // What making each sample durable (the default) costs.
        let a = [&["--cgroup-backend", "bpf"][..], &rec[..], &[off]].concat();
        let nosync = "store_sync = \"none\"\n";
        plain.push(row(
            "bpf-nosync",
            "ours, BPF, store_sync none",
            p,
            &a,
            nosync,
        ));
        // What exitstats (on by default) adds.
        let a = [&["--cgroup-backend", "bpf"][..], &rec[..]].concat();
        plain.push(row("bpf-exitstats", "ours, BPF, exitstats on", p, &a, ""));
        // Top-N: the cost at many cgroups should be that of the N kept.
        let a = [&rec[..], &["--cgroup-top", "200", off]].concat();
        plain.push(row("bpf-top200", "ours, BPF, --cgroup-top 200", p, &a, ""));
    }
    let me = std::env::current_exe()?;
    plain.push(row(
        "floor",
        "floor: below's collectors + BPF pass + store write",
        &me,
        &["__record-floor", "{store}", "{root}", "{phases}"],
        "",
    ));
    let mut all = Vec::new();
    for r in plain {
        let mut z = r.clone();
        z.key.push_str("-z");
        z.name.push_str(", --compress");
        z.argv.push("--compress".into());
        all.extend([r, z]);
    }
    Ok(all)
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct BillRow {
    pub key: String,
    pub recorder: String,
    pub command: String,
    pub status: String,
    pub window_s: f64,
    pub expected: u64,
    pub written: u64,
    /// Whole-process CPU (utime + stime) over the window ÷ samples written.
    pub cpu_ms_per_sample: f64,
    /// What systemd would charge the service: the CPU of the recorder's own
    /// cgroup (`cpu.stat` usage_usec: its children included) ÷ samples written.
    pub service_cpu_ms_per_sample: f64,
    pub store_bytes_per_sample: f64,
    pub peak_rss_kib: u64,
    /// Cgroups in the last stored sample (root included).
    pub cgroups_stored: usize,
    /// Processes in the last stored sample.
    pub processes_stored: usize,
    /// Processes the recorder started (its descendants that exited) over
    /// the window ÷ samples written; None without process accounting.
    pub spawned_per_sample: Option<f64>,
    /// Those processes by name, over the whole window.
    pub spawned: BTreeMap<String, u64>,
    /// Mean thread-CPU ms per phase from the recorder's `--phase-times`
    /// (first sample left out), and the process CPU of the same samples
    /// ("process").
    pub phases: BTreeMap<String, f64>,
    /// Whole-window CPU ms per written sample by thread name (comm).
    pub threads: BTreeMap<String, f64>,
    /// With several rounds: service CPU ms per written sample of each run
    /// that measured, lowest first (this row is the median one), and the
    /// same runs' process CPU, in the same order.
    pub rounds_service_ms: Vec<f64>,
    pub rounds_cpu_ms: Vec<f64>,
}

/// One recorder's runs as one row: the median run by service CPU per
/// sample (the bill; the lower of the middle two), with every run's CPU;
/// the first run when none measured.
pub fn median(mut runs: Vec<BillRow>) -> BillRow {
    let mut ok: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].ok()).collect();
    ok.sort_by(|&a, &b| {
        runs[a]
            .service_cpu_ms_per_sample
            .total_cmp(&runs[b].service_cpu_ms_per_sample)
    });
    let service: Vec<f64> = ok
        .iter()
        .map(|&i| runs[i].service_cpu_ms_per_sample)
        .collect();
    let cpu: Vec<f64> = ok.iter().map(|&i| runs[i].cpu_ms_per_sample).collect();
    let pick = ok.get(ok.len().saturating_sub(1) / 2).copied().unwrap_or(0);
    let mut row = runs.swap_remove(pick);
    if ok.len() > 1 {
        row.rounds_service_ms = service;
        row.rounds_cpu_ms = cpu;
    }
    row
}

/// CPU ticks so far of each of `pid`'s threads, summed by thread name.
fn threads_cpu(pid: u32) -> BTreeMap<String, Duration> {
    let mut m = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return m;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let Ok(tid) = t.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(c) = proc_cpu_task(pid, tid) {
            *m.entry(comm.trim().to_owned()).or_default() += c;
        }
    }
    m
}

fn proc_cpu_task(pid: u32, tid: u32) -> Result<Duration> {
    crate::overhead::stat_cpu(&format!("/proc/{pid}/task/{tid}/stat"))
}

impl BillRow {
    pub fn ok(&self) -> bool {
        self.status == "ok"
    }
}

/// Samples in a store directory and its data bytes; none before the
/// recorder made it.
pub fn store_size(dir: &Path) -> (u64, u64) {
    let size = bstats_store::reader::store_size(dir).unwrap_or_default();
    (size.samples, size.data_bytes)
}

/// A `/proc/<pid>/status` field in KiB (VmHWM, VmRSS).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn count_cgroups(c: &CgroupSample) -> usize {
    1 + c
        .children
        .iter()
        .flatten()
        .map(|(_, c)| count_cgroups(c))
        .sum::<usize>()
}

/// Per-phase means of thread CPU ms over `costs` (and of the whole
/// process's as "process"), leaving out the first sample (startup).
pub fn phase_means(costs: &[bstats_model::SampleCost]) -> BTreeMap<String, f64> {
    let mut sum: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for c in costs.iter().skip(1) {
        let process = ("process", ms(c.process_cpu));
        for (k, v) in c
            .named()
            .iter()
            .map(|(k, p)| (*k, ms(p.cpu)))
            .chain([process])
        {
            let e = sum.entry(k.to_owned()).or_default();
            e.0 += v;
            e.1 += 1;
        }
    }
    sum.into_iter()
        .map(|(k, (s, n))| (k, s / n as f64))
        .collect()
}

/// The records of a `--phase-times` file; none when there is no file (a
/// recorder that does not write one).
pub fn read_phase_times(path: &Path) -> Result<Vec<bstats_model::SampleCost>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("Failed to read {}", path.display())),
    };
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: malformed record", path.display(), i + 1))
        })
        .collect()
}

/// A recorder process with its own store, config, log and cgroup; stopped
/// (and its cgroup removed) on drop.
pub struct Running {
    pub child: Child,
    pub dir: tempfile::TempDir,
    cgroup: PathBuf,
}

/// The CPUs every recorder is confined to (`--bill-cpus`; none: any).
#[derive(Clone, Copy, Default)]
pub struct Cpus(Option<libc::cpu_set_t>);

impl Cpus {
    pub fn new(cpus: &[usize]) -> Result<Cpus> {
        if cpus.is_empty() {
            return Ok(Cpus(None));
        }
        let max = libc::CPU_SETSIZE as usize;
        if let Some(c) = cpus.iter().find(|&&c| c >= max) {
            bail!("--bill-cpus: CPU {c} is beyond the {max} a CPU set holds");
        }
        // SAFETY: a zeroed cpu_set_t is the empty set, and every index set
        // is within it (checked above).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        Ok(Cpus(Some(set)))
    }
}

impl Running {
    /// Starts `r` on `root`, confined to `cpus`.
    pub fn start(r: &Recorder, root: &Path, cpus: Cpus) -> Result<Running> {
        let dir = tempfile::tempdir()?;
        let store = dir.path().join("store");
        let config = dir.path().join("below.conf");
        let phases = dir.path().join("phases.jsonl");
        std::fs::write(
            &config,
            format!(
                "store_dir = {:?}\nlog_dir = {:?}\ncgroup_root = {:?}\n{}",
                store,
                dir.path().join("log"),
                root,
                r.config
            ),
        )?;
        let fill = |a: &String| {
            a.replace("{config}", &config.display().to_string())
                .replace("{store}", &store.display().to_string())
                .replace("{root}", &root.display().to_string())
                .replace("{phases}", &phases.display().to_string())
        };
        let argv: Vec<String> = r.argv.iter().map(fill).collect();
        let mut cmd = Command::new(&argv[0]);
        // Its own cgroup from before exec, so every process it starts is
        // charged to it, as systemd charges a service.
        let cgroup = root.join(format!("bstats-bill-{}-{}", std::process::id(), r.key));
        std::fs::create_dir(&cgroup)
            .with_context(|| format!("Failed to create cgroup {}", cgroup.display()))?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(cgroup.join("cgroup.procs"))?;
        let procs_fd = procs.as_raw_fd();
        // SAFETY: write(2) is async-signal-safe; the fd stays open until
        // spawn returns (`procs` lives past it). "0" moves the writer.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        if let Some(set) = cpus.0 {
            // SAFETY: sched_setaffinity is async-signal-safe and `set` is
            // a copy owned by the closure.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        }
        let child = cmd
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr"))?)
            .spawn()
            .with_context(|| format!("Failed to start {}", argv[0]));
        drop(procs);
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir(&cgroup);
                return Err(e);
            }
        };
        Ok(Running { child, dir, cgroup })
    }

    /// CPU of the recorder's cgroup so far, its children included.
    pub fn service_cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(self.cgroup.join("cpu.stat"))?;
        let usec = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .context("cpu.stat has no usage_usec")?
            .trim()
            .parse()?;
        Ok(Duration::from_micros(usec))
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Its `--phase-times` records so far.
    pub fn phase_times(&self) -> Result<Vec<bstats_model::SampleCost>> {
        read_phase_times(&self.dir.path().join("phases.jsonl"))
    }

    /// Fails with the recorder's last words if it exited.
    pub fn check_alive(&mut self) -> Result<()> {
        crate::child::check_alive(&mut self.child, &self.dir.path().join("stderr"))
    }

    /// Waits until the store holds `n` samples.
    pub fn wait_for_samples(&mut self, n: u64, timeout: Duration) -> Result<()> {
        let t = Instant::now();
        while store_size(&self.store()).0 < n {
            crate::check_interrupted()?;
            self.check_alive()?;
            if t.elapsed() > timeout {
                bail!("fewer than {n} samples after {} s", timeout.as_secs());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Sleeps `d`, failing early if the recorder dies or we are interrupted.
    pub fn watch(&mut self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            crate::check_interrupted()?;
            self.check_alive()?;
            std::thread::sleep((end - Instant::now()).min(Duration::from_millis(200)));
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL after a minute (a large sample may be late).
    fn stop(&mut self) {
        crate::child::stop(&mut self.child, Duration::from_secs(60));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
        // Empty once the recorder is reaped (its children exit with it).
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// `perf record` of a recorder over the window, for a profile (perf's
/// sampling costs CPU in the profiled process: profile in a run of its own).
pub struct Perf<'a> {
    pub bin: &'a Path,
    /// Gets `perf-<key>.txt`: `perf report` by thread and symbol.
    pub out: &'a Path,
}

impl Perf<'_> {
    fn start(&self, pid: u32, key: &str) -> Result<(Child, PathBuf)> {
        let data = self.out.join(format!("perf-{key}.data"));
        let child = Command::new(self.bin)
            .args(["record", "-q", "-e", "cpu-clock", "-F", "499", "-o"])
            .arg(&data)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("Failed to start perf")?;
        Ok((child, data))
    }

    fn finish(&self, mut child: Child, data: &Path, key: &str) -> Result<()> {
        // SAFETY: signalling our own child; perf writes its data on SIGINT.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        child.wait()?;
        let report = Command::new(self.bin)
            .args([
                "report",
                "--stdio",
                "--no-children",
                "--sort",
                "comm,dso,sym",
                "-i",
            ])
            .arg(data)
            .stderr(Stdio::inherit())
            .output()
            .context("Failed to run perf report")?;
        std::fs::write(self.out.join(format!("perf-{key}.txt")), report.stdout)?;
        let _ = std::fs::remove_file(data);
        Ok(())
    }
}

/// Runs one recorder: start, wait for its first two samples (start-up is
/// not the bill), then measure over `window`.
pub fn measure(
    r: &Recorder,
    root: &Path,
    window: Duration,
    warmup: Duration,
    perf: Option<&Perf>,
    cpus: Cpus,
) -> BillRow {
    let mut row = BillRow {
        key: r.key.clone(),
        recorder: r.name.clone(),
        ..Default::default()
    };
    match measure_inner(r, root, window, warmup, perf, cpus, &mut row) {
        Ok(()) => row.status = "ok".into(),
        Err(e) => row.status = format!("n/a: {e:#}"),
    }
    row
}

fn measure_inner(
    r: &Recorder,
    root: &Path,
    window: Duration,
    warmup: Duration,
    perf: Option<&Perf>,
    cpus: Cpus,
    row: &mut BillRow,
) -> Result<()> {
    row.command = crate::report::sh_join(&r.argv);
    let mut run = Running::start(r, root, cpus)?;
    run.wait_for_samples(2, warmup)?;
    let pid = run.child.id();
    let profile = perf.map(|p| p.start(pid, &r.key)).transpose()?;
    // Without accounting the row still measures, with no spawn count.
    let acct = crate::spawns::Accounting::start(&run.dir.path().join("acct")).ok();
    let th0 = threads_cpu(pid);
    let (c0, s0) = (proc_cpu(pid)?, run.service_cpu()?);
    let (k0, t0) = (store_size(&run.store()).0, Instant::now());
    run.watch(window)?;
    let (c1, s1) = (proc_cpu(pid)?, run.service_cpu()?);
    let k1 = store_size(&run.store()).0;
    let th1 = threads_cpu(pid);
    let spawned = acct.map(|a| a.finish(pid)).transpose()?;
    if let (Some(p), Some((child, data))) = (perf, profile) {
        p.finish(child, &data, &r.key)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    row.peak_rss_kib = status_kib(pid, "VmHWM").unwrap_or(0);
    run.stop();
    row.window_s = secs;
    row.expected = secs.floor() as u64;
    row.written = k1 - k0;
    if row.written == 0 {
        bail!("no sample written in {secs:.0} s");
    }
    let per_sample = |d: Duration| d.as_secs_f64() * 1e3 / row.written as f64;
    if let Some(by_name) = spawned {
        row.spawned_per_sample = Some(by_name.values().sum::<u64>() as f64 / row.written as f64);
        row.spawned = by_name;
    }
    row.cpu_ms_per_sample = per_sample(c1 - c0);
    row.service_cpu_ms_per_sample = per_sample(s1.saturating_sub(s0));
    row.threads = th1
        .iter()
        .map(|(k, v)| {
            let before = th0.get(k).copied().unwrap_or_default();
            (k.clone(), per_sample(v.saturating_sub(before)))
        })
        .collect();
    let (total, bytes) = store_size(&run.store());
    row.store_bytes_per_sample = bytes as f64 / total.max(1) as f64;
    row.phases = phase_means(&run.phase_times()?);
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    // The newest sample, as below reads it back.
    let (_, frame) = store::read_next_sample(
        run.store(),
        SystemTime::now(),
        store::Direction::Reverse,
        logger,
    )?
    .context("the store has no readable sample")?;
    row.cgroups_stored = count_cgroups(&frame.sample.cgroup);
    row.processes_stored = frame.sample.processes.len();
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn phase_means_skip_the_first_sample() {
        let ms = Duration::from_millis;
        let cost = |below: u64, pass: Option<u64>, process: u64| bstats_model::SampleCost {
            below: bstats_model::Phase {
                cpu: ms(below),
                wall: ms(100),
            },
            pass: pass.map(|p| bstats_model::Phase {
                cpu: ms(p),
                wall: ms(p),
            }),
            store: bstats_model::Phase {
                cpu: ms(1),
                wall: ms(1),
            },
            process_cpu: ms(process),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("phases.jsonl");
        let costs = [
            cost(90, Some(90), 990),
            cost(2, Some(4), 7),
            cost(4, None, 9),
        ];
        let lines: String = costs.iter().map(|c| c.json_line().unwrap()).collect();
        std::fs::write(&path, lines).unwrap();
        let read = read_phase_times(&path).unwrap();
        assert_eq!(read, costs, "the file gives back what was written");
        let m = phase_means(&read);
        assert_eq!(m["below"], 3.0);
        assert_eq!(m["pass"], 4.0, "averaged over the samples that had one");
        assert_eq!(m["process"], 8.0);
        assert_eq!(m["store"], 1.0);
        assert_eq!(m["procs"], 0.0);
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["below", "drop", "idle", "net", "pass", "process", "procs", "store", "system"]
        );
        assert!(read_phase_times(&dir.path().join("none"))
            .unwrap()
            .is_empty());
        std::fs::write(&path, "{\"sample\": 1}\n").unwrap();
        let e = read_phase_times(&path).unwrap_err();
        assert!(
            format!("{e:#}").contains("phases.jsonl:1: malformed"),
            "{e:#}"
        );
    }

    #[test]
    fn median_run_is_the_row() {
        let run = |service: f64, status: &str| BillRow {
            service_cpu_ms_per_sample: service,
            cpu_ms_per_sample: service / 2.0,
            status: status.into(),
            ..Default::default()
        };
        let m = median(vec![
            run(30.0, "ok"),
            run(10.0, "ok"),
            run(0.0, "n/a: x"),
            run(20.0, "ok"),
        ]);
        assert_eq!(m.service_cpu_ms_per_sample, 20.0);
        assert_eq!(m.rounds_service_ms, [10.0, 20.0, 30.0]);
        assert_eq!(m.rounds_cpu_ms, [5.0, 10.0, 15.0]);
        let m = median(vec![run(40.0, "ok"), run(10.0, "ok")]);
        assert_eq!(
            m.service_cpu_ms_per_sample, 10.0,
            "the lower of the middle two"
        );
        let m = median(vec![run(0.0, "n/a: a"), run(0.0, "n/a: b")]);
        assert_eq!((m.status.as_str(), m.rounds_cpu_ms.len()), ("n/a: a", 0));
        let m = median(vec![run(5.0, "ok")]);
        assert!(m.rounds_service_ms.is_empty(), "one run: no spread to show");
    }

    #[test]
    fn every_recorder_has_a_compressed_twin() {
        let b = Binaries {
            below09: Some(Path::new("/b09")),
            below_main: None,
            below_main_series: None,
            ours: Some(Path::new("/ours")),
        };
        let r = recorders(&b).unwrap();
        let keys: Vec<&str> = r.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "below09",
                "below09-z",
                "bpf",
                "bpf-z",
                "read",
                "read-z",
                "stream",
                "stream-z",
                "bpf-nosync",
                "bpf-nosync-z",
                "bpf-exitstats",
                "bpf-exitstats-z",
                "bpf-top200",
                "bpf-top200-z",
                "floor",
                "floor-z"
            ]
        );
        assert!(r[1]
            .argv
            .ends_with(&["--disable-exitstats".into(), "--compress".into()]));
        assert_eq!(r[2].argv[..3], ["/ours", "--cgroup-backend", "bpf"]);
        for r in r
            .iter()
            .filter(|r| r.key.starts_with("bpf") || r.key.starts_with("floor"))
        {
            assert!(
                r.argv.iter().any(|a| a == "{phases}"),
                "{}: no phase times",
                r.key
            );
        }
        // Exitstats off everywhere but the row that shows its cost.
        let off = "--disable-exitstats".to_string();
        for r in &r {
            assert_eq!(
                r.argv.contains(&off),
                !r.key.starts_with("bpf-exitstats") && !r.key.starts_with("floor"),
                "{}",
                r.key
            );
        }
    }
}
