//! The user's bill: real `below record -i 1` processes, one at a time on
//! the same cgroup tree, each over a window of the same length: whole
//! process CPU per sample actually written, samples written against
//! expected, store bytes per sample, peak RSS; and, from `--phase-times`,
//! where our recorder's CPU goes. The recorders are in `recorders.rs`
//! (among them the floor, what no cgroup collector can avoid, to measure
//! our part against); running one is `runner.rs`.

use std::collections::BTreeMap;
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
use crate::recorders::RecorderSpec;
use crate::runner::sh_join;
use crate::runner::status_kib;
use crate::runner::Cpus;
use crate::runner::Running;
use crate::status::Status;

#[derive(Debug, Default, Clone, Serialize)]
pub struct BillRow {
    pub key: String,
    pub recorder: String,
    pub command: String,
    pub status: Status,
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
        self.status == Status::Ok
    }
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
    r: &RecorderSpec,
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
        Ok(()) => row.status = Status::Ok,
        Err(e) => row.status = Status::NotAvailable(format!("{e:#}")),
    }
    row
}

fn measure_inner(
    r: &RecorderSpec,
    root: &Path,
    window: Duration,
    warmup: Duration,
    perf: Option<&Perf>,
    cpus: Cpus,
    row: &mut BillRow,
) -> Result<()> {
    row.command = sh_join(&r.argv);
    let mut run = Running::start(r, root, cpus)?;
    run.wait_for_samples(2, warmup)?;
    let pid = run.child.id();
    let profile = perf.map(|p| p.start(pid, &r.key)).transpose()?;
    // Without accounting the row still measures, with no spawn count.
    let acct = crate::spawns::Accounting::start(&run.dir.path().join("acct")).ok();
    let th0 = threads_cpu(pid);
    let (c0, s0) = (proc_cpu(pid)?, run.service_cpu()?);
    let (k0, t0) = (run.store_size().samples, Instant::now());
    run.watch(window)?;
    let (c1, s1) = (proc_cpu(pid)?, run.service_cpu()?);
    let k1 = run.store_size().samples;
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
    let size = run.store_size();
    row.store_bytes_per_sample = size.data_bytes as f64 / size.samples.max(1) as f64;
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
    use crate::runner::read_phase_times;

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
        let run = |service: f64, status: Option<&str>| BillRow {
            service_cpu_ms_per_sample: service,
            cpu_ms_per_sample: service / 2.0,
            status: status.map_or(Status::Ok, |why| Status::NotAvailable(why.into())),
            ..Default::default()
        };
        let m = median(vec![
            run(30.0, None),
            run(10.0, None),
            run(0.0, Some("x")),
            run(20.0, None),
        ]);
        assert_eq!(m.service_cpu_ms_per_sample, 20.0);
        assert_eq!(m.rounds_service_ms, [10.0, 20.0, 30.0]);
        assert_eq!(m.rounds_cpu_ms, [5.0, 10.0, 15.0]);
        let m = median(vec![run(40.0, None), run(10.0, None)]);
        assert_eq!(
            m.service_cpu_ms_per_sample, 10.0,
            "the lower of the middle two"
        );
        let m = median(vec![run(0.0, Some("a")), run(0.0, Some("b"))]);
        assert_eq!(m.status, Status::NotAvailable("a".into()));
        assert!(m.rounds_cpu_ms.is_empty());
        let m = median(vec![run(5.0, None)]);
        assert!(m.rounds_service_ms.is_empty(), "one run: no spread to show");
    }
}
