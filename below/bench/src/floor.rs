//! The bill's floor recorder: what no cgroup collector can avoid, to
//! measure ours against.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::Context;
use anyhow::Result;

/// The `__record-floor STORE ROOT PHASES [--compress]` mode: each second
/// below's own collectors (processes by the task iterator pass), the BPF
/// cgroup iterator pass (no decoding, no tree) and the
/// store write of a cgroup tree built once at start, so the written frames
/// are as large as a real recorder's; each sample's phases appended to
/// PHASES as `record --phase-times` does.
pub fn record_floor(store_dir: &Path, root: &Path, phases: &Path, compress: bool) -> Result<()> {
    static STOP: AtomicBool = AtomicBool::new(false);
    extern "C" fn on_term(_: libc::c_int) {
        STOP.store(true, Ordering::SeqCst);
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGTERM,
            nix::sys::signal::SigHandler::Handler(on_term),
        )
    }?;
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut c = bstats_model::Collector::new(
        logger.clone(),
        &bstats_collector::Options {
            root: root.to_path_buf(),
            backend: bstats_collector::BackendChoice::Bpf,
            collect_io_stat: false,
            filter: None,
            stream_interval: None,
            top: None,
        },
        model::CollectorOptions::default(),
    )?;
    // The other pass: processes through the task iterator.
    let mount = bstats_collector::find_cgroup2_mount().unwrap_or_else(|_| root.to_path_buf());
    let procs = bstats_procs::Processes::new(bstats_procs::ProcessBackend::Bpf, &mount)?;
    c.set_processes(procs);
    // Each sample: below's parts anew, this cgroup tree.
    let mut sample = c.collect_sample()?.clone();
    let mode = bstats_store::compression_mode(compress, None)?;
    let mut w = bstats_store::Recorder::new(logger, store_dir, mode, None, None)?;
    let mut phases = std::fs::File::create(phases)
        .with_context(|| format!("Failed to create {}", phases.display()))?;
    let start = Instant::now();
    let mut lap = bstats_model::Lap::start();
    let mut process = bstats_model::process_cpu_time();
    for n in 0u32.. {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        let idle = lap.lap();
        let t = SystemTime::now();
        let parts = c.collect_below()?;
        let below = lap.lap();
        sample = model::Sample {
            cgroup: std::mem::take(&mut sample.cgroup),
            ..parts
        };
        let free = lap.lap();
        c.cgroups_mut()
            .bpf_pass()
            .context("no stat file is planned for BPF")??;
        let pass = lap.lap();
        w.put(t, &sample).context("floor: store write failed")?;
        let write = lap.lap();
        let now = bstats_model::process_cpu_time();
        let cost = bstats_model::SampleCost {
            sample: n.into(),
            below,
            below_parts: c.below_times(),
            pass: Some(pass),
            store: write,
            drop: free,
            idle,
            process_cpu: now - process,
            ..Default::default()
        };
        phases.write_all(cost.json_line()?.as_bytes())?;
        process = now;
        let next = start + Duration::from_secs(u64::from(n) + 1);
        while !STOP.load(Ordering::SeqCst) && Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(100)));
        }
    }
    Ok(())
}
