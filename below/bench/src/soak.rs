//! The soak: one recorder over a long window while another process churns
//! cgroups, its RSS read as it goes.

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use serde::Serialize;

use crate::recorders::RecorderSpec;
use crate::runner::sh_join;
use crate::runner::status_kib;
use crate::runner::Cpus;
use crate::runner::Running;
use crate::status::Status;

/// The `__churn ROOT N PERIOD_MS` mode: a tree of N cgroups created,
/// kept for PERIOD_MS, removed, again and again, until stdin closes.
pub fn churn(root: &Path, n: usize, period: Duration) -> Result<()> {
    static EOF: AtomicBool = AtomicBool::new(false);
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        EOF.store(true, Ordering::SeqCst);
    });
    while !EOF.load(Ordering::SeqCst) {
        let fx = crate::fixture::Fixture::create(root, n, 0, 0)?;
        let end = Instant::now() + period;
        while !EOF.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(fx);
    }
    Ok(())
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct SoakPoint {
    pub t_s: f64,
    pub rss_kib: u64,
    pub samples: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct SoakResult {
    pub recorder: String,
    pub command: String,
    pub status: Status,
    pub churn_cgroups: usize,
    pub churn_period_ms: u64,
    pub points: Vec<SoakPoint>,
    pub peak_rss_kib: u64,
}

pub struct SoakConfig {
    pub secs: f64,
    pub every: Duration,
    pub churn: usize,
    pub churn_period: Duration,
    pub warmup: Duration,
}

/// Records with `r` for `cfg.secs` while another process churns cgroups,
/// reading the recorder's RSS every `cfg.every`.
pub fn soak(r: &RecorderSpec, root: &Path, cfg: &SoakConfig) -> SoakResult {
    let mut res = SoakResult {
        recorder: r.name.clone(),
        churn_cgroups: cfg.churn,
        churn_period_ms: cfg.churn_period.as_millis() as u64,
        ..Default::default()
    };
    match soak_inner(r, root, cfg, &mut res) {
        Ok(()) => res.status = Status::Ok,
        Err(e) => res.status = Status::NotAvailable(format!("{e:#}")),
    }
    res
}

fn soak_inner(r: &RecorderSpec, root: &Path, cfg: &SoakConfig, res: &mut SoakResult) -> Result<()> {
    let mut churn = Command::new(std::env::current_exe()?)
        .arg("__churn")
        .arg(root)
        .arg(cfg.churn.to_string())
        .arg(cfg.churn_period.as_millis().to_string())
        .stdin(Stdio::piped())
        .spawn()
        .context("Failed to start the churn process")?;
    let out = (|| -> Result<()> {
        res.command = sh_join(&r.argv);
        let mut run = Running::start(r, root, Cpus::default())?;
        run.wait_for_samples(1, cfg.warmup)?;
        let pid = run.child.id();
        let t0 = Instant::now();
        loop {
            res.points.push(SoakPoint {
                t_s: t0.elapsed().as_secs_f64(),
                rss_kib: status_kib(pid, "VmRSS").context("no VmRSS")?,
                samples: run.store_size().samples,
            });
            eprintln!("cgroup-bench: soak {:?}", res.points.last());
            if t0.elapsed().as_secs_f64() >= cfg.secs {
                break;
            }
            run.watch(cfg.every)?;
        }
        res.peak_rss_kib = status_kib(pid, "VmHWM").unwrap_or(0);
        Ok(())
    })();
    drop(churn.stdin.take());
    let st = churn.wait()?;
    out?;
    if !st.success() {
        bail!("the churn process failed: {st}");
    }
    Ok(())
}
