//! Overhead on a running workload: throughput of a fixed CPU/memory
//! workload alone, and while a recorder samples every second.

use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use serde::Serialize;

use crate::collectors::Kind;
use crate::stats::median;
use crate::status::Status;

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub secs: f64,
    pub rounds: usize,
    pub threads: usize,
    pub mb_per_thread: usize,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct OverheadRow {
    pub monitor: String,
    pub status: Status,
    /// Median workload throughput (MiB processed per second).
    pub ops_per_s: f64,
    /// Throughput lost against the workload alone, in percent.
    pub overhead_pct: Option<f64>,
    /// CPU the monitor itself used, ms per second of workload.
    pub monitor_cpu_ms_per_s: Option<f64>,
    pub rounds: usize,
}

/// The `__work` mode: `threads` threads stream over their own buffers for
/// `secs`; prints MiB processed.
pub fn work(secs: f64, threads: usize, mb: usize) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let total: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let mut buf = vec![1u64; mb << 17];
                    let mut done = 0u64;
                    'run: loop {
                        // One op = one MiB: a cache line written per step.
                        for chunk in buf.chunks_mut(1 << 17) {
                            if Instant::now() >= end {
                                break 'run;
                            }
                            for (i, w) in chunk.iter_mut().enumerate().step_by(8) {
                                *w = w.wrapping_mul(31).wrapping_add(i as u64);
                            }
                            done += 1;
                        }
                    }
                    std::hint::black_box(&buf);
                    done
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker")).sum()
    });
    println!("{total}");
    Ok(())
}

fn run_workload(cfg: &Config) -> Result<f64> {
    let out = Command::new(std::env::current_exe()?)
        .args(["__work", &cfg.secs.to_string(), &cfg.threads.to_string()])
        .arg(cfg.mb_per_thread.to_string())
        .stderr(Stdio::inherit())
        .output()
        .context("Failed to run the workload")?;
    if !out.status.success() {
        bail!("workload failed: {}", out.status);
    }
    let ops: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok(ops / cfg.secs)
}

/// User + system CPU of a process so far.
pub fn proc_cpu(pid: u32) -> Result<Duration> {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// User + system CPU from a /proc `stat` file (a process's or a thread's).
pub fn stat_cpu(path: &str) -> Result<Duration> {
    let stat = std::fs::read_to_string(path)?;
    // Fields after the command name (which may hold spaces) in parens.
    let rest = &stat[stat.rfind(')').context("bad /proc/pid/stat")? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_millis(ticks * 1000 / hz))
}

struct Monitor {
    child: Child,
    _store: tempfile::TempDir,
    stderr: PathBuf,
}

impl Monitor {
    fn start(kind: Kind, below: Option<&Path>, root: &Path) -> Result<Monitor> {
        let store = tempfile::tempdir()?;
        let stderr = store.path().join("stderr");
        let mut cmd = match kind {
            Kind::Baseline => {
                let mut c = Command::new(std::env::current_exe()?);
                c.arg("__record-baseline")
                    .arg(store.path().join("store"))
                    .arg(root);
                c
            }
            _ => {
                let below = below.context("no below binary given (--below)")?;
                let mut c = Command::new(below);
                c.args(["--cgroup-backend", kind.name(), "--cgroup-root"])
                    .arg(root)
                    .arg("--store-dir")
                    .arg(store.path().join("store"))
                    .args(["record", "--interval-s", "1"]);
                c
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("Failed to start the recorder")?;
        let mut m = Monitor {
            child,
            _store: store,
            stderr,
        };
        // Let it probe and take its first sample; a backend that cannot
        // run here exits with the reason.
        std::thread::sleep(Duration::from_millis(1500));
        crate::child::check_alive(&mut m.child, &m.stderr)?;
        Ok(m)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        crate::child::stop(&mut self.child, Duration::from_secs(5));
    }
}

/// One measurement with `kind` recording: workload throughput and the
/// recorder's CPU per second.
fn with_monitor(kind: Kind, below: Option<&Path>, root: &Path, cfg: &Config) -> Result<(f64, f64)> {
    let m = Monitor::start(kind, below, root)?;
    let c0 = proc_cpu(m.child.id())?;
    let t0 = Instant::now();
    let ops = run_workload(cfg)?;
    let cpu = proc_cpu(m.child.id())?.saturating_sub(c0);
    Ok((ops, cpu.as_secs_f64() * 1e3 / t0.elapsed().as_secs_f64()))
}

/// Rounds of: workload alone, then with each monitor in turn.
pub fn run(
    kinds: &[Kind],
    below: Option<&Path>,
    root: &Path,
    cfg: &Config,
) -> Result<Vec<OverheadRow>> {
    let mut alone = Vec::new();
    let mut with: Vec<(Vec<f64>, Vec<f64>, Option<String>)> =
        kinds.iter().map(|_| (vec![], vec![], None)).collect();
    for _ in 0..cfg.rounds {
        crate::check_interrupted()?;
        alone.push(run_workload(cfg)?);
        for (i, k) in kinds.iter().enumerate() {
            if with[i].2.is_some() {
                continue;
            }
            crate::check_interrupted()?;
            match with_monitor(*k, below, root, cfg) {
                Ok((ops, cpu)) => {
                    with[i].0.push(ops);
                    with[i].1.push(cpu);
                }
                Err(e) => with[i].2 = Some(format!("{e:#}")),
            }
        }
    }
    let base = median(&alone);
    let mut rows = vec![OverheadRow {
        monitor: "none (workload alone)".into(),
        status: Status::Ok,
        ops_per_s: base,
        rounds: alone.len(),
        ..Default::default()
    }];
    for (k, (ops, cpu, err)) in kinds.iter().zip(with) {
        let label = match k {
            Kind::Baseline => "below 0.9 record loop (model::Collector + store)".to_owned(),
            _ => format!("below record --cgroup-backend {}", k.name()),
        };
        rows.push(match err {
            Some(e) => OverheadRow {
                monitor: label,
                status: Status::NotAvailable(e.to_string()),
                ..Default::default()
            },
            None => {
                let m = median(&ops);
                OverheadRow {
                    monitor: label,
                    status: Status::Ok,
                    ops_per_s: m,
                    overhead_pct: (base > 0.0).then(|| (1.0 - m / base) * 100.0),
                    monitor_cpu_ms_per_s: Some(median(&cpu)),
                    rounds: ops.len(),
                }
            }
        });
    }
    Ok(rows)
}

/// The `__record-baseline` mode: below 0.9's record loop (its own
/// collector: cgroups, procfs, system; uncompressed store) every second.
pub fn record_baseline(store_dir: &Path, root: &Path) -> Result<()> {
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut collector = model::Collector::new(
        logger.clone(),
        model::CollectorOptions {
            cgroup_root: root.to_path_buf(),
            collect_io_stat: false,
            ..Default::default()
        },
    );
    std::fs::create_dir_all(store_dir)?;
    let mut writer = store::StoreWriter::new(
        logger,
        store_dir,
        store::CompressionMode::None,
        store::Format::Cbor,
    )?;
    let start = Instant::now();
    for n in 1.. {
        // As below 0.9's record: collect, write; no model.
        let frame = store::DataFrame {
            sample: collector.collect_sample()?,
        };
        writer.put(std::time::SystemTime::now(), &frame)?;
        let next = start + Duration::from_secs(n);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(())
}
