//! Acceptance checks for the cgroup backends, run as root on a real kernel
//! (tests/bpf/run-vm-tests.sh and tests/stream/run.sh run them in QEMU
//! guests). Each exits non-zero when its check fails. Trees are fixtures
//! under the cgroup2 mount, removed after.

mod churn;
mod compare;
mod cost;
mod frozen;
mod parity;
mod procs;
mod psi;
mod served;
mod verifier;

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use anyhow::Result;
use bstats_collector::BackendChoice;
use bstats_collector::BackendKind;
use bstats_collector::CgroupCollector;
use bstats_collector::Options;
use clap::Parser;
use clap::Subcommand;

#[derive(Parser)]
#[command(
    name = "bstats-check",
    about = "Acceptance checks for the cgroup backends"
)]
struct Args {
    #[command(subcommand)]
    check: Check,
}

#[derive(Subcommand)]
enum Check {
    /// Print the plan for BACKEND, or why it cannot run; fail unless each
    /// --bpf FILE is served by BPF and each --read FILE=WHY[:DETAIL] is read
    /// as text, BPF's refusal that variant (its JSON `why`, and `detail`)
    Plan {
        // Help stays one line an argument; a wrong BACKEND's error lists
        // the values.
        #[arg(default_value = "auto", hide_possible_values = true)]
        backend: BackendChoice,
        #[arg(long = "bpf", value_name = "FILE")]
        bpf: Vec<String>,
        #[arg(long = "read", value_name = "FILE=WHY[:DETAIL]")]
        read: Vec<String>,
    },
    /// Loaded, frozen tree of N cgroups: what BACKEND serves == plain read
    Compare {
        #[arg(default_value_t = 60)]
        n: usize,
        #[arg(default_value = "auto", hide_possible_values = true)]
        backend: BackendChoice,
    },
    /// Live tree, SAMPLES per run: every value BACKEND serves lies where
    /// the text read just before and after the sample puts it; without
    /// and with --top N, then once per --plant, which must be caught
    Parity {
        #[arg(default_value_t = 20)]
        samples: usize,
        #[arg(long)]
        top: Option<usize>,
        #[arg(long, default_value = "auto", hide_possible_values = true)]
        backend: BackendChoice,
        #[arg(long, value_enum)]
        plant: Vec<parity::Plant>,
    },
    /// mkdir/rmdir while sampling with BPF for SECONDS
    Churn {
        #[arg(default_value_t = 10)]
        seconds: u64,
    },
    /// Syscalls per BPF sample: 10 vs 200 cgroups, no opens
    Syscalls,
    /// CPU per sample at N cgroups, BPF vs plain read, over SAMPLES
    Bench {
        #[arg(default_value_t = 1000)]
        n: usize,
        #[arg(default_value_t = 20)]
        samples: u32,
    },
    /// A cgroup under memory pressure, then idle: sampled pressure == the
    /// file read right after (averages within 0.5), under BACKEND
    PsiIdle {
        #[arg(long, default_value_t = 12)]
        pressure: u64,
        #[arg(long, default_value_t = 40)]
        idle: u64,
        #[arg(default_value = "auto", hide_possible_values = true)]
        backend: BackendChoice,
    },
    /// Tasks contending for the CPUs and moving between cgroups: every
    /// pressure total BACKEND samples lies between the file's reads just
    /// before and after, SAMPLES times
    PsiTotals {
        #[arg(default_value_t = 1500)]
        samples: u32,
        #[arg(default_value = "auto", hide_possible_values = true)]
        backend: BackendChoice,
    },
    /// Varied processes stopped with SIGSTOP: the BPF process backend ==
    /// fb_procfs, every PidInfo field
    ProcsFrozen,
    /// Running processes: every BPF value where fb_procfs's reads just
    /// before and after put it, SAMPLES times
    ProcsParity {
        #[arg(default_value_t = 12)]
        samples: usize,
    },
    /// Time per read of every process, fb_procfs vs BPF, with N more
    /// processes running, over SAMPLES reads each
    ProcsBench {
        #[arg(default_value_t = 1000)]
        n: usize,
        #[arg(default_value_t = 10)]
        samples: u32,
    },
    /// What the BPF verifier does with each form of our programs on this
    /// kernel (loaded as the backend loads them, LOADS times each): one
    /// markdown table
    Verifier {
        /// The cgroup2 directory the passes walk (default: the mount)
        #[arg(long, value_name = "CGROUP2_ROOT")]
        root: Option<PathBuf>,
        #[arg(long, default_value_t = 5)]
        loads: usize,
    },
    /// A process for procs-frozen (re-executed by it)
    #[command(hide = true)]
    ProcsChild(procs::ChildArgs),
    /// Run CMD while a small loaded tree stands frozen (for guest scripts)
    #[command(hide = true)]
    FrozenTree {
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Run CMD while parity's live tree stands and is stirred
    #[command(hide = true)]
    LiveTree {
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
}

fn main() -> Result<()> {
    match Args::parse().check {
        Check::Plan { backend, bpf, read } => plan(backend, &bpf, &read),
        Check::Compare { n, backend } => compare::compare(n, backend),
        Check::Parity {
            samples,
            top,
            backend,
            plant,
        } => parity::parity(samples, top, backend, &plant),
        Check::Churn { seconds } => churn::churn(seconds),
        Check::Syscalls => cost::syscalls(),
        Check::Bench { n, samples } => cost::bench(n, samples),
        Check::PsiIdle {
            pressure,
            idle,
            backend,
        } => psi::idle_after_pressure(pressure, idle, backend),
        Check::PsiTotals { samples, backend } => psi::totals_while_moving(samples, backend),
        Check::FrozenTree { cmd } => frozen::frozen_tree(&cmd),
        Check::LiveTree { cmd } => parity::live_tree(&cmd),
        Check::ProcsFrozen => procs::frozen(),
        Check::ProcsParity { samples } => procs::parity(samples),
        Check::ProcsBench { n, samples } => procs::bench(n, samples),
        Check::ProcsChild(a) => procs::child(a),
        Check::Verifier { root, loads } => verifier::verifier(root.as_deref(), loads),
    }
}

fn cgroup_root() -> Result<PathBuf> {
    bstats_collector::find_cgroup2_mount()
}

fn options(root: &Path, backend: BackendChoice) -> Options {
    Options {
        root: root.to_owned(),
        backend,
        collect_io_stat: false,
        filter: None,
        // Turns kernel streaming on (if off) for the stream backend.
        stream_interval: Some(Duration::from_millis(100)),
        top: None,
    }
}

fn plan(backend: BackendChoice, bpf: &[String], read: &[String]) -> Result<()> {
    let c = CgroupCollector::new(&options(&cgroup_root()?, backend))?;
    let plan = c.plan();
    print!("{plan}");
    let mut wrong = Vec::new();
    // `why`: BPF's refusal as its JSON tag and detail ("missing_kfunc:NAME").
    let mut expect = |file: &str, kind: BackendKind, why: &str| {
        let Some(c) = plan.files.iter().find(|c| c.file.name() == file) else {
            wrong.push(format!("{file}: not in the plan"));
            return;
        };
        let refused = |(tag, detail): (&str, Option<&str>)| {
            c.not_served.iter().any(|r| {
                let v = serde_json::to_value(&r.why).unwrap_or_default();
                r.backend == BackendKind::Bpf
                    && v["why"] == tag
                    && detail.is_none_or(|d| v["detail"] == d)
            })
        };
        let why_ok = why.is_empty()
            || refused(
                why.split_once(':')
                    .map_or((why, None), |(t, d)| (t, Some(d))),
            );
        if c.backend != kind || !why_ok {
            wrong.push(format!(
                "{file}: {} ({}), not {kind} ({why})",
                c.backend, c.reason
            ));
        }
    };
    for f in bpf {
        expect(f, BackendKind::Bpf, "");
    }
    for r in read {
        let (f, why) = r.split_once('=').unwrap_or((r, ""));
        expect(f, BackendKind::Read, why);
    }
    if !wrong.is_empty() {
        bail!("unexpected plan: {}", wrong.join("; "));
    }
    Ok(())
}
