//! below, with a cgroup collector that reads stats through a BPF cgroup
//! iterator, kernel-flushed stream files, or plain text reads, chosen per
//! file. Everything after collection is below's own model, store, view and
//! dump.

use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use below_config::BelowConfig;
use bpf_stats::BackendChoice;
use clap::Parser;
use clap::Subcommand;
use serde::Deserialize;
use slog::debug;
use slog::error;
use slog::info;
use slog::o;
use slog::Drain;

#[derive(Debug, Parser)]
#[clap(
    version,
    about = "below: record, replay and watch system and cgroup stats"
)]
struct Opt {
    #[clap(long, default_value = below_config::BELOW_DEFAULT_CONF)]
    config: PathBuf,
    #[clap(short, long)]
    debug: bool,
    /// Where cgroup stats come from: bpf (iterator + kfuncs), stream
    /// (kernel-flushed *.stat.stream files), read (text files), or auto (per
    /// file, the first that works in that order). Config key: cgroup_backend.
    #[clap(long, global = true)]
    cgroup_backend: Option<BackendChoice>,
    /// cgroup2 directory to sample [default: config cgroup_root, else the
    /// cgroup2 mount found in /proc/self/mountinfo]
    #[clap(long, global = true)]
    cgroup_root: Option<PathBuf>,
    /// Store directory [default: config store_dir]
    #[clap(long, global = true)]
    store_dir: Option<PathBuf>,
    #[clap(subcommand)]
    cmd: Option<Command>,
}

#[derive(Debug, clap::Args)]
struct CompressOpts {
    /// Enable zstd data file compression
    #[clap(long)]
    compress: bool,
    /// With --compress: zstd dictionary compression in aligned chunks of
    /// this many frames (a power of two, 2 to 32768)
    #[clap(long, requires("compress"))]
    dict_compress_chunk_size: Option<u32>,
}

/// Top-N: bounded cost with very many cgroups.
#[derive(Debug, Default, clap::Args)]
struct TopOpts {
    /// Keep only the N cgroups with the highest rate since the previous
    /// sample (plus their ancestors and --cgroup-top-keep matches); the
    /// rest are counted, not stored. Config key: cgroup_top.
    #[clap(long)]
    cgroup_top: Option<usize>,
    /// What --cgroup-top ranks by: cpu, memory, io or pressure [default:
    /// cpu]. Config key: cgroup_top_by.
    #[clap(long)]
    cgroup_top_by: Option<bpf_stats::TopBy>,
    /// With --cgroup-top: cgroups whose path (relative to the cgroup root)
    /// matches this regex are always kept. Config key: cgroup_top_keep.
    #[clap(long)]
    cgroup_top_keep: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Display live system data (interactive) (default)
    Live {
        #[clap(short, long, default_value = "5")]
        interval_s: u64,
        #[clap(flatten)]
        top: TopOpts,
    },
    /// Record local system data (daemon mode)
    Record {
        #[clap(short, long, default_value = "5")]
        interval_s: u64,
        /// Store data for this many seconds, discarding older
        #[clap(long)]
        retain_for_s: Option<u64>,
        /// Keep the store below this many bytes, discarding the oldest shards
        #[clap(long)]
        store_size_limit: Option<u64>,
        /// Collect io.stat for cgroups
        #[clap(long)]
        collect_io_stat: bool,
        /// Disable disk stat collection
        #[clap(long)]
        disable_disk_stat: bool,
        /// Stop after this many samples (default: run until interrupted)
        #[clap(long)]
        count: Option<u64>,
        #[clap(flatten)]
        compress_opts: CompressOpts,
        #[clap(flatten)]
        top: TopOpts,
    },
    /// Replay historical data (interactive)
    Replay {
        /// Time to start replay at: 100 sec ago, 2h ago, 2006-02-01 15:00, …
        #[clap(short, long)]
        time: String,
        /// Days adjuster, same as y, for yesterday: y, yy, 3y …
        #[clap(short = 'r')]
        yesterdays: Option<String>,
    },
    /// Dump historical data into parseable text format
    Dump {
        #[clap(subcommand)]
        cmd: Box<below_dump::command::DumpCommand>,
    },
    /// Show which backend serves each cgroup stat file, and why: as recorded
    /// in the store, or (--now) as probed on this kernel
    Backends {
        #[clap(long)]
        now: bool,
        #[clap(long)]
        json: bool,
    },
}

/// Our keys in below's config file; below's own keys are read by below-config.
#[derive(Debug, Default, Deserialize)]
struct ExtraConfig {
    cgroup_backend: Option<BackendChoice>,
    cgroup_root: Option<PathBuf>,
    cgroup_top: Option<usize>,
    cgroup_top_by: Option<bpf_stats::TopBy>,
    cgroup_top_keep: Option<String>,
}

struct Config {
    below: BelowConfig,
    backend: BackendChoice,
    cgroup_root: PathBuf,
    debug: bool,
    /// From the config file; flags override each key.
    top: TopOpts,
}

fn load_config(opt: &Opt) -> Result<Config> {
    let mut below = BelowConfig::load(&opt.config)?;
    let extra: ExtraConfig = match std::fs::read_to_string(&opt.config) {
        Ok(s) => toml::from_str(&s)
            .with_context(|| format!("Failed to parse config file {}", opt.config.display()))?,
        Err(_) => ExtraConfig::default(),
    };
    if let Some(d) = &opt.store_dir {
        below.store_dir = d.clone();
    }
    let cgroup_root = match (&opt.cgroup_root, extra.cgroup_root) {
        (Some(r), _) => r.clone(),
        (None, Some(r)) => r,
        (None, None) => bpf_stats::find_cgroup2_mount()?,
    };
    Ok(Config {
        below,
        backend: opt
            .cgroup_backend
            .or(extra.cgroup_backend)
            .unwrap_or_default(),
        cgroup_root,
        debug: opt.debug,
        top: TopOpts {
            cgroup_top: extra.cgroup_top,
            cgroup_top_by: extra.cgroup_top_by,
            cgroup_top_keep: extra.cgroup_top_keep,
        },
    })
}

fn log_level(debug: bool) -> slog::Level {
    if debug {
        slog::Level::Debug
    } else {
        slog::Level::Info
    }
}

fn stderr_logger(debug: bool) -> slog::Logger {
    let decorator = slog_term::TermDecorator::new().stderr().build();
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    let drain = std::sync::Mutex::new(drain.filter_level(log_level(debug))).fuse();
    slog::Logger::root(drain, o!())
}

/// For the TUIs: log to a file (and the terminal until the view starts);
/// the view's status bar shows the last message.
fn tui_logger(log_dir: &Path, debug: bool) -> Result<slog::Logger> {
    std::fs::create_dir_all(log_dir)
        .with_context(|| format!("Failed to create log directory {}", log_dir.display()))?;
    let path = log_dir.join("error.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("Failed to open log file {}", path.display()))?;
    let decorator = below_common::logutil::CompoundDecorator::new(file, std::io::stderr());
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    let drain =
        below_common::logutil::CommandPaletteDrain::new(drain.filter_level(log_level(debug)))
            .fuse();
    Ok(slog::Logger::root(
        std::sync::Mutex::new(drain).fuse(),
        o!(),
    ))
}

/// The top-N options: each flag, else its config key.
fn top_n(cfg: &Config, flags: &TopOpts) -> Result<Option<bpf_stats::TopN>> {
    let by = flags.cgroup_top_by.or(cfg.top.cgroup_top_by);
    let keep = flags
        .cgroup_top_keep
        .as_ref()
        .or(cfg.top.cgroup_top_keep.as_ref());
    let Some(n) = flags.cgroup_top.or(cfg.top.cgroup_top) else {
        if by.is_some() || keep.is_some() {
            bail!("--cgroup-top-by and --cgroup-top-keep need --cgroup-top N");
        }
        return Ok(None);
    };
    Ok(Some(bpf_stats::TopN {
        n,
        by: by.unwrap_or_default(),
        keep: keep
            .map(|k| regex::Regex::new(k).context("Invalid --cgroup-top-keep"))
            .transpose()?,
    }))
}

/// `stream_interval`: the stream flush interval to set if streaming is off.
fn cgroup_options(
    cfg: &Config,
    collect_io_stat: bool,
    stream_interval: Option<Duration>,
    top: Option<bpf_stats::TopN>,
) -> Result<bpf_stats::Options> {
    bpf_stats::check_cgroup2_root(&cfg.cgroup_root)?;
    let filter = if cfg.below.cgroup_filter_out.is_empty() {
        None
    } else {
        Some(
            regex::Regex::new(&cfg.below.cgroup_filter_out)
                .context("Invalid cgroup_filter_out in the config file")?,
        )
    };
    Ok(bpf_stats::Options {
        root: cfg.cgroup_root.clone(),
        backend: cfg.backend,
        collect_io_stat,
        filter,
        stream_interval,
        top,
    })
}

fn below_options(cfg: &Config, disable_disk_stat: bool) -> model::CollectorOptions {
    let b = &cfg.below;
    model::CollectorOptions {
        disable_disk_stat,
        enable_btrfs_stats: b.enable_btrfs_stats,
        enable_ethtool_stats: b.enable_ethtool_stats,
        enable_ksm_stats: b.enable_ksm_stats,
        enable_resctrl_stats: b.enable_resctrl_stats,
        btrfs_samples: b.btrfs_samples,
        btrfs_min_pct: b.btrfs_min_pct,
        ..Default::default()
    }
}

fn new_collector(
    logger: &slog::Logger,
    cfg: &Config,
    interval: Duration,
    collect_io_stat: bool,
    disable_disk_stat: bool,
    top: Option<bpf_stats::TopN>,
) -> Result<bstats_model::Collector> {
    let c = bstats_model::Collector::new(
        logger.clone(),
        &cgroup_options(cfg, collect_io_stat, Some(interval), top)?,
        below_options(cfg, disable_disk_stat),
    )?;
    info!(
        logger,
        "cgroup root {}; backend per cgroup file (--cgroup-backend {}):\n{}",
        cfg.cgroup_root.display(),
        cfg.backend,
        c.cgroups().plan()
    );
    Ok(c)
}

fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default()
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

fn record(logger: &slog::Logger, cfg: &Config, interval: Duration, args: RecordArgs) -> Result<()> {
    let mode = bstats_store::compression_mode(args.compress, args.dict_chunk)?;
    if args
        .top
        .as_ref()
        .is_some_and(|t| t.by == bpf_stats::TopBy::Io)
        && !args.collect_io_stat
    {
        bail!("--cgroup-top-by io ranks by io.stat: it needs --collect-io-stat");
    }
    // Probe and plan before touching the store: a forced backend the kernel
    // lacks must not leave an empty store behind.
    let mut collector = new_collector(
        logger,
        cfg,
        interval,
        args.collect_io_stat,
        args.disable_disk_stat,
        args.top,
    )?;
    let store_dir = &cfg.below.store_dir;
    let mut recorder = bstats_store::Recorder::new(
        logger.clone(),
        store_dir,
        mode,
        args.retain_for_s.map(Duration::from_secs),
        args.store_size_limit,
    )?;
    bstats_store::append_backend_record(
        store_dir,
        &bstats_store::BackendRecord {
            since: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            kernel: kernel_release(),
            cgroup_root: cfg.cgroup_root.clone(),
            plan: collector.cgroups().plan().clone(),
        },
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
    let start = Instant::now();
    let mut n = 0u64;
    // Per-phase CPU for --debug: what a sample costs, and where.
    let mut lap = bstats_model::Lap::start();
    let mut process = bstats_model::process_cpu_time();
    while !STOP.load(Ordering::SeqCst) && args.count.is_none_or(|c| n < c) {
        // The loop outside the phases: sleeping, logging.
        let idle = lap.lap();
        let t = SystemTime::now();
        match collector.collect_sample() {
            Ok(sample) => {
                lap.lap();
                let frame = store::DataFrame { sample };
                let put = recorder.put(t, &frame);
                let write = lap.lap();
                drop(frame);
                let free = lap.lap();
                put?;
                let now = bstats_model::process_cpu_time();
                let c = &collector.times;
                debug!(
                    logger,
                    "sample {} written; {}; process cpu ms {:.2}",
                    n,
                    bstats_model::PhaseLog(
                        &[
                            ("below", c.rest),
                            ("cgroups", c.cgroups),
                            ("tree", c.tree),
                            ("store", write),
                            ("drop", free),
                            ("idle", idle),
                        ]
                        .into_iter()
                        // The BPF pass is part of "cgroups".
                        .chain(c.pass.map(|p| ("pass", p)))
                        .collect::<Vec<_>>()
                    ),
                    (now - process).as_secs_f64() * 1e3,
                );
                process = now;
            }
            // below skips a failed sample and keeps recording.
            Err(e) => error!(logger, "Sample skipped: {:#}", e),
        }
        n += 1;
        sleep_until(start + interval * n as u32);
    }
    info!(logger, "Recorded {} samples", n);
    Ok(())
}

struct RecordArgs {
    retain_for_s: Option<u64>,
    store_size_limit: Option<u64>,
    collect_io_stat: bool,
    disable_disk_stat: bool,
    count: Option<u64>,
    compress: bool,
    dict_chunk: Option<u32>,
    top: Option<bpf_stats::TopN>,
}

fn backends(cfg: &Config, now: bool, json: bool) -> Result<()> {
    if now {
        let c = bpf_stats::CgroupCollector::new(&cgroup_options(cfg, true, None, None)?)?;
        if json {
            println!("{}", serde_json::to_string_pretty(c.plan())?);
        } else {
            println!(
                "cgroup root {} (kernel {}):",
                cfg.cgroup_root.display(),
                kernel_release()
            );
            print!("{}", c.plan());
        }
        return Ok(());
    }
    let dir = &cfg.below.store_dir;
    let recs = bstats_store::read_backend_records(dir)?;
    if recs.is_empty() {
        bail!(
            "{} has no record of cgroup backends (not recorded by this below?)",
            dir.display()
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&recs)?);
        return Ok(());
    }
    for r in recs {
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(r.since);
        println!(
            "recording since {} (kernel {}, cgroup root {}):",
            humantime::format_rfc3339_seconds(since),
            r.kernel,
            r.cgroup_root.display()
        );
        print!("{}", r.plan);
    }
    Ok(())
}

fn run(opt: Opt) -> Result<()> {
    let cfg = load_config(&opt)?;
    let store_dir = cfg.below.store_dir.clone();
    match opt.cmd.unwrap_or(Command::Live {
        interval_s: 5,
        top: TopOpts::default(),
    }) {
        Command::Live { interval_s, top } => {
            let logger = tui_logger(&cfg.below.log_dir, cfg.debug)?;
            let top = top_n(&cfg, &top)?;
            // Fail before the TUI starts if the root is unusable.
            cgroup_options(&cfg, true, None, None)?;
            let thread_logger = logger.clone();
            let interval = Duration::from_secs(interval_s);
            bstats_view::run_live(logger, store_dir, interval, move || {
                let mut c = new_collector(&thread_logger, &cfg, interval, true, false, top)?;
                Ok(move || c.collect_and_update_model().map(|(_, m)| m))
            })
        }
        Command::Record {
            interval_s,
            retain_for_s,
            store_size_limit,
            collect_io_stat,
            disable_disk_stat,
            count,
            compress_opts,
            top,
        } => record(
            &stderr_logger(cfg.debug),
            &cfg,
            Duration::from_secs(interval_s),
            RecordArgs {
                retain_for_s,
                store_size_limit,
                collect_io_stat,
                disable_disk_stat,
                count,
                compress: compress_opts.compress,
                dict_chunk: compress_opts.dict_compress_chunk_size,
                top: top_n(&cfg, &top)?,
            },
        ),
        Command::Replay { time, yesterdays } => {
            let logger = tui_logger(&cfg.below.log_dir, cfg.debug)?;
            bstats_view::run_replay(logger, store_dir, &time, yesterdays.as_deref())
        }
        Command::Dump { cmd } => {
            let (_errs_tx, errs) = std::sync::mpsc::channel();
            below_dump::run(
                stderr_logger(cfg.debug),
                errs,
                store_dir,
                None,
                None,
                None,
                *cmd,
            )
        }
        Command::Backends { now, json } => backends(&cfg, now, json),
    }
}

fn main() {
    let opt = Opt::parse();
    if let Err(e) = run(opt) {
        eprintln!("below: {:#}", e);
        std::process::exit(1);
    }
}
