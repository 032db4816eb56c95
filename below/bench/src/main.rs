//! cgroup-bench: below 0.9's cgroup collection against our backends, side
//! by side in one run, on real cgroups. Prints markdown tables (each with
//! the command reproducing it) and optionally writes them and JSON.

mod alloc;
mod bench;
mod bill;
mod child;
mod collectors;
mod floor;
mod overhead;
mod recorders;
mod report;
mod runner;
mod soak;
mod spawns;
mod stats;
mod status;
mod thread_cost;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use bstats_testkit as fixture;
use clap::Parser;
use nix::sys::signal::signal;
use nix::sys::signal::SigHandler;
use nix::sys::signal::Signal;

use crate::collectors::Kind;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Fails once SIGINT/SIGTERM arrived, so the run unwinds and removes its
/// cgroups instead of dying with them in place.
pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "cgroup-bench",
    about = "below 0.9's cgroup collection vs our backends"
)]
pub struct Args {
    /// cgroup2 root to sample [default: the cgroup2 mount]
    #[arg(long)]
    root: Option<PathBuf>,
    /// Sections to run: collect, parallel, overhead, bill, soak
    #[arg(
        long,
        default_value = "collect,parallel,overhead",
        value_delimiter = ','
    )]
    sections: Vec<String>,
    /// bill: cgroups to create (3 levels deep), one table each
    #[arg(long, default_value = "1000,5000,10000", value_delimiter = ',')]
    bill_sizes: Vec<usize>,
    /// bill: seconds each recorder is measured, per size (the last
    /// repeats)
    #[arg(long, default_value = "20,30,40", value_delimiter = ',')]
    bill_secs: Vec<f64>,
    /// bill: rounds per size (the last repeats): with more than one, every
    /// recorder runs once per round, rounds one after the other, and its
    /// row is its median run (rows of identical work vary between runs)
    #[arg(long, default_value = "1", value_delimiter = ',')]
    bill_rounds: Vec<usize>,
    /// bill: CPUs each recorder (all its threads) is confined to, e.g. 1;
    /// every recorder alike. Under TCG a hand-off between threads on two
    /// vCPUs can spin for a whole time slice of the other vCPU
    #[arg(long, value_delimiter = ',')]
    bill_cpus: Vec<usize>,
    /// bill: processes spread over the tree besides the holders, as a
    /// host's (daemons' command lines, some with threads; testkit's
    /// `Fixture::populate`)
    #[arg(long, default_value_t = 0)]
    procs: usize,
    /// bill, soak: seconds a recorder may take for its first two samples
    #[arg(long, default_value_t = 300.0)]
    warmup_s: f64,
    /// bill: recorders to run, by key (below09, bpf, read, stream, floor,
    /// main-files, main-bpf, main-series, bpf-before; a "-z" suffix: with
    /// --compress)
    /// [default: all
    /// whose binary is given]
    #[arg(long, value_delimiter = ',')]
    recorders: Vec<String>,
    /// below 0.9.0 from crates.io (tests/reference/below09.sh) for bill
    #[arg(long)]
    below09: Option<PathBuf>,
    /// An upstream below main build, for its bill rows
    #[arg(long)]
    below_main: Option<PathBuf>,
    /// below main with patches/below applied, for its bill row
    #[arg(long)]
    below_main_series: Option<PathBuf>,
    /// Another build of ours to compare against (e.g. before a change), for
    /// the bill row bpf-before: the bpf row's command line with this binary
    #[arg(long)]
    below_before: Option<PathBuf>,
    /// bill: profile each recorder's window with this perf binary, reports
    /// in --perf-out (perf's sampling adds to the CPU measured)
    #[arg(long)]
    perf: Option<PathBuf>,
    /// bill: where --perf writes perf-<recorder>.txt
    #[arg(long, default_value = ".")]
    perf_out: PathBuf,
    /// soak: cgroups in the tree
    #[arg(long, default_value_t = 5000)]
    soak_cgroups: usize,
    /// soak: seconds to record
    #[arg(long, default_value_t = 600.0)]
    soak_secs: f64,
    /// soak: seconds between RSS readings
    #[arg(long, default_value_t = 30.0)]
    soak_every_s: f64,
    /// soak: cgroups removed and created again each churn period
    #[arg(long, default_value_t = 100)]
    soak_churn: usize,
    /// soak: milliseconds a churned tree lives
    #[arg(long, default_value_t = 2000)]
    soak_churn_ms: u64,
    /// soak: the recorder, a bill key
    #[arg(long, default_value = "bpf")]
    soak_recorder: String,
    /// Cgroups to create (3 levels deep), one table each
    #[arg(long, default_value = "10,100,1000,5000", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Collectors to compare; unavailable ones are shown as n/a
    #[arg(
        long,
        default_value = "baseline,read,stream,bpf",
        value_delimiter = ','
    )]
    collectors: Vec<String>,
    /// Samples per cell: at least this many …
    #[arg(long, default_value_t = 5)]
    min_samples: usize,
    /// … and at most this many …
    #[arg(long, default_value_t = 200)]
    max_samples: usize,
    /// … stopping after this many seconds once the minimum is reached
    #[arg(long, default_value_t = 3.0)]
    budget_s: f64,
    /// Processes holding memory in leaf cgroups (one per leaf)
    #[arg(long, default_value_t = 32)]
    holders: usize,
    /// MiB each holder touches
    #[arg(long, default_value_t = 2)]
    hold_mb: usize,
    /// Parallel readers to run at once, one table row each
    #[arg(long, default_value = "1,4,8", value_delimiter = ',')]
    readers: Vec<usize>,
    /// Cgroups for the parallel-reader and overhead sections
    #[arg(long, default_value_t = 1000)]
    cgroups: usize,
    /// Seconds of workload per overhead measurement
    #[arg(long, default_value_t = 10.0)]
    overhead_secs: f64,
    /// Alternating alone/with rounds per recorder
    #[arg(long, default_value_t = 2)]
    overhead_rounds: usize,
    /// Our `below` binary (package bstats-below) for the overhead section
    #[arg(long)]
    below: Option<PathBuf>,
    /// Stream backend: kernel flush interval in ms, set for the run if
    /// streaming is off (a stream sample waits for the next flush)
    #[arg(long, default_value_t = 100)]
    stream_interval_ms: u64,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown tables here
    #[arg(long)]
    md: Option<PathBuf>,
}

impl Args {
    fn has(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    // Helper modes run as child processes of the benchmark.
    match argv.get(1).map(String::as_str) {
        Some("__work") if argv.len() == 5 => {
            return overhead::work(argv[2].parse()?, argv[3].parse()?, argv[4].parse()?)
        }
        Some("__record-baseline") if argv.len() == 4 => {
            return overhead::record_baseline(argv[2].as_ref(), argv[3].as_ref())
        }
        Some("__record-floor") if argv.len() == 5 || argv.len() == 6 => {
            let compress = argv.get(5).map(String::as_str) == Some("--compress");
            return floor::record_floor(
                argv[2].as_ref(),
                argv[3].as_ref(),
                argv[4].as_ref(),
                compress,
            );
        }
        Some("__churn") if argv.len() == 5 => {
            let period = std::time::Duration::from_millis(argv[4].parse()?);
            return soak::churn(argv[2].as_ref(), argv[3].parse()?, period);
        }
        _ => {}
    }
    let args = Args::parse();
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { signal(sig, SigHandler::Handler(on_interrupt)) }
            .context("Failed to install a signal handler")?;
    }
    let root = match &args.root {
        Some(r) => r.clone(),
        None => bstats_collector::find_cgroup2_mount()?,
    };
    bstats_collector::check_cgroup2_root(&root)?;
    let kinds = args
        .collectors
        .iter()
        .map(|s| Kind::parse(s))
        .collect::<Result<Vec<_>>>()?;
    for s in &args.sections {
        if !["collect", "parallel", "overhead", "bill", "soak"].contains(&s.as_str()) {
            bail!("unknown section {s:?} (collect, parallel, overhead, bill, soak)");
        }
    }
    let target = collectors::Target {
        root: root.clone(),
        stream_interval: std::time::Duration::from_millis(args.stream_interval_ms),
    };
    let mut rep = report::Report::new(&root);
    if args.has("collect") {
        let budget = bench::Budget {
            min: args.min_samples,
            max: args.max_samples,
            budget_s: args.budget_s,
        };
        for &n in &args.sizes {
            let fx = fixture::Fixture::create(&root, n, args.holders, args.hold_mb)?;
            let mut rows = Vec::new();
            for &k in &kinds {
                eprintln!("cgroup-bench: {n} cgroups: {}", k.label());
                rows.push(bench::collect_cell(k, &target, budget)?);
            }
            rep.add_collect(&args, fx.created(), rows);
            drop(fx);
            rep.print_last();
        }
    }
    if args.has("parallel") || args.has("overhead") {
        let fx = fixture::Fixture::create(&root, args.cgroups, args.holders, args.hold_mb)?;
        if args.has("parallel") {
            let budget = bench::Budget {
                min: args.min_samples,
                max: args.max_samples,
                budget_s: args.budget_s,
            };
            let mut rows = Vec::new();
            for &k in &kinds {
                for &r in &args.readers {
                    eprintln!("cgroup-bench: {r} parallel readers: {}", k.label());
                    rows.push(bench::parallel_cell(k, &target, r, budget)?);
                }
            }
            rep.add_parallel(&args, fx.created(), rows);
            rep.print_last();
        }
        if args.has("overhead") {
            let cfg = overhead::Config {
                secs: args.overhead_secs,
                rounds: args.overhead_rounds,
                threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
                mb_per_thread: 32,
            };
            eprintln!(
                "cgroup-bench: overhead on a workload ({} s per run)",
                cfg.secs
            );
            let rows = overhead::run(&kinds, args.below.as_deref(), &root, &cfg)?;
            rep.add_overhead(&args, fx.created(), cfg, rows);
            rep.print_last();
        }
    }
    if args.has("bill") || args.has("soak") {
        let all = recorders::recorders(&recorders::Binaries {
            below09: args.below09.as_deref(),
            below_main: args.below_main.as_deref(),
            below_main_series: args.below_main_series.as_deref(),
            ours: args.below.as_deref(),
            ours_before: args.below_before.as_deref(),
        })?;
        let warmup = std::time::Duration::from_secs_f64(args.warmup_s);
        let cpus = runner::Cpus::new(&args.bill_cpus)?;
        if args.has("bill") {
            let chosen: Vec<&recorders::RecorderSpec> = if args.recorders.is_empty() {
                all.iter().collect()
            } else {
                args.recorders
                    .iter()
                    .map(|k| {
                        all.iter()
                            .find(|r| &r.key == k)
                            .with_context(|| format!("no recorder {k:?} (or its binary not given)"))
                    })
                    .collect::<Result<_>>()?
            };
            for (i, &n) in args.bill_sizes.iter().enumerate() {
                let secs = *args
                    .bill_secs
                    .get(i)
                    .or(args.bill_secs.last())
                    .context("--bill-secs is empty")?;
                let rounds = *args
                    .bill_rounds
                    .get(i)
                    .or(args.bill_rounds.last())
                    .context("--bill-rounds is empty")?;
                let mut fx = fixture::Fixture::create(&root, n, args.holders, args.hold_mb)?;
                fx.populate(args.procs)?;
                let guest = report::Population::now();
                let window = std::time::Duration::from_secs_f64(secs);
                let perf = args.perf.as_deref().map(|bin| bill::Perf {
                    bin,
                    out: &args.perf_out,
                });
                let mut runs = vec![Vec::new(); chosen.len()];
                for round in 1..=rounds.max(1) {
                    for (r, runs) in chosen.iter().zip(&mut runs) {
                        eprintln!(
                            "cgroup-bench: bill, {n} cgroups, round {round}/{rounds}: {} ({secs} s)",
                            r.name
                        );
                        runs.push(bill::measure(r, &root, window, warmup, perf.as_ref(), cpus));
                        check_interrupted()?;
                    }
                }
                let rows = runs.into_iter().map(bill::median).collect();
                rep.add_bill(&args, fx.created(), guest, secs, rounds, rows);
                drop(fx);
                rep.print_last();
            }
        }
        if args.has("soak") {
            let r = all
                .iter()
                .find(|r| r.key == args.soak_recorder)
                .with_context(|| format!("no recorder {:?}", args.soak_recorder))?;
            let fx =
                fixture::Fixture::create(&root, args.soak_cgroups, args.holders, args.hold_mb)?;
            let cfg = soak::SoakConfig {
                secs: args.soak_secs,
                every: std::time::Duration::from_secs_f64(args.soak_every_s),
                churn: args.soak_churn,
                churn_period: std::time::Duration::from_millis(args.soak_churn_ms),
                warmup,
            };
            eprintln!(
                "cgroup-bench: soak, {} cgroups: {} ({} s)",
                fx.created(),
                r.name,
                cfg.secs
            );
            let res = soak::soak(r, &root, &cfg);
            rep.add_soak(&args, fx.created(), res);
            drop(fx);
            rep.print_last();
        }
    }
    rep.finish();
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&rep)?)
            .with_context(|| format!("Failed to write {}", p.display()))?;
    }
    if let Some(p) = &args.md {
        std::fs::write(p, rep.markdown())
            .with_context(|| format!("Failed to write {}", p.display()))?;
    }
    Ok(())
}
