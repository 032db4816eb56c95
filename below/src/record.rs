//! `below record`: sample every interval into the store, like below's
//! daemon. A failed sample or store write is logged and recording goes on.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use slog::debug;
use slog::error;
use slog::info;
use slog::warn;

use crate::Config;

#[derive(Debug, clap::Args)]
pub struct CompressOpts {
    /// Enable zstd data file compression
    ///
    /// Depending on typical data, expect around 10x smaller data files, and
    /// more with --dict-compress-chunk-size.
    #[clap(long)]
    pub compress: bool,
    /// Only valid with --compress. A power of two from 2 to 32768.
    ///
    /// zstd dictionary compression in aligned chunks of this many frames:
    /// the first frame of each chunk is the dictionary for the rest.
    #[clap(long, requires("compress"))]
    pub dict_compress_chunk_size: Option<u32>,
}

impl CompressOpts {
    pub fn mode(&self) -> Result<store::CompressionMode> {
        bstats_store::compression_mode(self.compress, self.dict_compress_chunk_size)
    }
}

#[derive(Debug, clap::Args)]
pub struct RecordOpts {
    #[clap(short, long, default_value = "5")]
    pub interval_s: u64,
    /// Store retention in seconds. Data is stored in 24 hour shards; a shard
    /// entirely outside the retention period is discarded.
    #[clap(long)]
    pub retain_for_s: Option<u64>,
    /// Store size limit in bytes: older 24 hour shards are discarded, oldest
    /// first, to stay under it (the active shard is never discarded)
    #[clap(long)]
    pub store_size_limit: Option<u64>,
    /// Whether or not to collect io.stat for cgroups which could be expensive
    #[clap(long)]
    pub collect_io_stat: bool,
    /// Port for remote viewing (below's open-source build serves none;
    /// accepted for compatibility)
    #[clap(long)]
    pub port: Option<u16>,
    /// Threshold for how long data collection takes to trigger warnings
    #[clap(long, default_value = "500")]
    pub skew_detection_threshold_ms: u64,
    /// Flag to disable disk_stat collection
    #[clap(long)]
    pub disable_disk_stat: bool,
    /// Flag to disable eBPF-based exitstats
    #[clap(long)]
    pub disable_exitstats: bool,
    /// Stop after this many samples (default: run until interrupted)
    #[clap(long)]
    pub count: Option<u64>,
    #[clap(flatten)]
    pub compress_opts: CompressOpts,
    /// When a written sample is made durable: `sample` (default: fsynced
    /// by a sync thread right after it is written, so a power cut loses
    /// at most the sample being written), `interval:N` (every N seconds:
    /// fewer fsyncs, up to N s lost) or `none` (never, as below: up to
    /// ~30 s lost). Config key `store_sync`.
    #[clap(long, value_name = "POLICY")]
    pub store_sync: Option<bstats_store::StoreSync>,
    /// Serve the latest sample as OpenMetrics on http://ADDR/metrics
    /// (e.g. 127.0.0.1:9749); config key `listen`, limits in `[metrics]`.
    /// Default: listen nowhere.
    #[clap(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// TLS, basic auth and headers for --listen, from a web config file in
    /// the format node_exporter and Prometheus read (--web.config.file);
    /// config key `web_config_file`. Re-read when it changes.
    #[clap(long, value_name = "FILE")]
    pub web_config_file: Option<std::path::PathBuf>,
    #[clap(flatten)]
    pub top: crate::top::TopOpts,
    /// Append where each written sample's time went to FILE, one JSON
    /// object a line (`--debug` logs the same as text)
    // A file, not the metrics endpoint: the benchmark wants every sample's
    // phases, not the latest, and a scrape would add the HTTP server's CPU
    // to the process whose CPU it measures; one write per sample costs what
    // the debug line did.
    #[clap(long, value_name = "FILE")]
    pub phase_times: Option<std::path::PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Sleeps until `deadline` or a stop signal.
fn sleep_until(deadline: Instant) {
    while !STOP.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(100)));
    }
}

/// Seconds since this process started (its exec), from /proc: how long a
/// restarted recorder was blind before its first sample.
fn since_exec() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // starttime is field 22; the command name (field 2) may hold spaces.
    let after_comm = stat.rsplit_once(')')?.1;
    let start_ticks: f64 = after_comm.split_whitespace().nth(19)?.parse().ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let uptime: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(uptime - start_ticks / hz as f64)
}

/// below's skew warning: a collection slower than the threshold.
fn check_skew(logger: &slog::Logger, took: Duration, threshold: Duration) {
    if took >= threshold {
        warn!(
            logger,
            "data collection took {} ms (>= {} ms)",
            took.as_millis(),
            threshold.as_millis()
        );
    }
}

pub fn record(logger: &slog::Logger, cfg: &Config, opts: RecordOpts) -> Result<()> {
    let interval = Duration::from_secs(opts.interval_s);
    let skew_threshold = Duration::from_millis(opts.skew_detection_threshold_ms);
    let mode = opts.compress_opts.mode()?;
    if let Some(port) = opts.port {
        info!(
            logger,
            "--port {}: no remote viewing server in this build (as in below's open-source build)",
            port
        );
    }
    let top = crate::top::top_n(cfg, &opts.top)?;
    if top
        .as_ref()
        .is_some_and(|t| t.by == bstats_collector::TopBy::Io)
        && !opts.collect_io_stat
    {
        bail!("--cgroup-top-by io ranks by io.stat: it needs --collect-io-stat");
    }
    // Probe and plan before touching the store: a forced backend the kernel
    // lacks must not leave an empty store behind.
    // `_exits` is kept until recording ends: it fills the collector's exit_data.
    let (mut collector, _exits) = crate::new_collector(
        logger,
        cfg,
        interval,
        crate::CollectOpts {
            collect_io_stat: opts.collect_io_stat,
            disable_disk_stat: opts.disable_disk_stat,
            disable_exitstats: opts.disable_exitstats,
        },
        top,
    )?;
    // Before the store too: a port in use is a clear error, not an empty store.
    let web_config = opts
        .web_config_file
        .as_ref()
        .or(cfg.web_config_file.as_ref());
    let exporter = match opts.listen.or(cfg.listen) {
        Some(addr) => {
            let x = bstats_metrics::Exporter::start(
                logger.clone(),
                addr,
                &cfg.metrics,
                web_config.map(|p| p.as_path()),
            )?;
            info!(logger, "Serving metrics on {}", x.url());
            Some(x)
        }
        None if opts.web_config_file.is_some() => {
            bail!("--web-config-file secures the metrics endpoint: it needs --listen")
        }
        None => None,
    };
    let store_dir = &cfg.below.store_dir;
    let mut recorder = bstats_store::Recorder::with_sync(
        logger.clone(),
        store_dir,
        mode,
        opts.retain_for_s.map(Duration::from_secs),
        opts.store_size_limit,
        opts.store_sync.or(cfg.store_sync).unwrap_or_default(),
    )?;
    bstats_store::append_backend_record(
        store_dir,
        &crate::backend_record(cfg, collector.cgroups().plan(), collector.processes_plan()),
    )?;
    use nix::sys::signal::signal;
    use nix::sys::signal::SigHandler;
    use nix::sys::signal::Signal;
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { signal(sig, SigHandler::Handler(on_stop_signal)) }
            .context("Failed to install signal handler")?;
    }
    info!(
        logger,
        "Recording to {} every {:?}",
        store_dir.display(),
        interval
    );
    let mut phase_times = match &opts.phase_times {
        Some(p) => Some(bstats_store::private::open_no_follow(
            p,
            bstats_store::private::file_options()
                .create(true)
                .append(true),
        )?),
        None => None,
    };
    let mut n = 0u64;
    // Per-phase CPU for --debug and --phase-times: what a sample costs, and where.
    let mut lap = bstats_model::Lap::start();
    let mut process = bstats_model::process_cpu_time();
    while !STOP.load(Ordering::SeqCst) && opts.count.is_none_or(|c| n < c) {
        // The loop outside the phases: sleeping, logging.
        let idle = lap.lap();
        let start = Instant::now();
        let sample = collector.collect_sample();
        let t = SystemTime::now();
        check_skew(logger, start.elapsed(), skew_threshold);
        match sample {
            Ok(sample) => {
                lap.lap();
                if let Some(x) = &exporter {
                    x.publish(t, sample);
                }
                let publish = lap.lap();
                let written = recorder.put(t, sample);
                let write = lap.lap();
                if written.is_ok() {
                    if n == 0 {
                        if let Some(s) = since_exec() {
                            info!(logger, "First sample written {:.2} s after start", s);
                        }
                    }
                    let now = bstats_model::process_cpu_time();
                    let c = &collector.times;
                    let cost = bstats_model::SampleCost {
                        sample: n,
                        below: c.below,
                        below_parts: collector.below_times(),
                        pass: c.pass,
                        cgroups: Some(c.cgroups),
                        tree: Some(c.tree),
                        tree_build: c.tree_build,
                        publish: Some(publish),
                        store: write,
                        drop: c.drop,
                        idle,
                        process_cpu: now - process,
                    };
                    process = now;
                    debug!(logger, "{}", cost);
                    if let Some(f) = &mut phase_times {
                        if let Err(e) = cost
                            .json_line()
                            .and_then(|l| Ok(f.write_all(l.as_bytes())?))
                        {
                            warn!(logger, "--phase-times: {:#}", e);
                        }
                    }
                }
            }
            // below skips a failed sample and keeps recording.
            Err(e) => error!(logger, "Sample skipped: {:#}", e),
        }
        n += 1;
        if opts.count.is_some_and(|c| n >= c) {
            break;
        }
        // As below: at least 1 s apart, the store's time resolution.
        sleep_until((start + interval).max(Instant::now() + Duration::from_secs(1)));
    }
    info!(logger, "Recorded {} samples", n);
    Ok(())
}
