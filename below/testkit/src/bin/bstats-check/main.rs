//! Acceptance checks for the cgroup backends, run as root on a real kernel
//! (tests/bpf/run-vm-tests.sh and tests/stream/run.sh run them in QEMU
//! guests). Each exits non-zero when its check fails. Trees are fixtures
//! under the cgroup2 mount, removed after.

mod churn;
mod compare;
mod cost;
mod frozen;
mod psi;

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use bpf_stats::BackendChoice;
use bpf_stats::CgroupCollector;
use bpf_stats::Options;
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
    /// Print the plan for BACKEND, or why it cannot run
    Plan {
        #[arg(default_value = "auto")]
        backend: BackendChoice,
    },
    /// Loaded, frozen tree of N cgroups: what BACKEND serves == plain read
    Compare {
        #[arg(default_value_t = 60)]
        n: usize,
        #[arg(default_value = "auto")]
        backend: BackendChoice,
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
        #[arg(default_value = "auto")]
        backend: BackendChoice,
    },
    /// Run CMD while a small loaded tree stands frozen (for guest scripts)
    #[command(hide = true)]
    FrozenTree {
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
}

fn main() -> Result<()> {
    match Args::parse().check {
        Check::Plan { backend } => plan(backend),
        Check::Compare { n, backend } => compare::compare(n, backend),
        Check::Churn { seconds } => churn::churn(seconds),
        Check::Syscalls => cost::syscalls(),
        Check::Bench { n, samples } => cost::bench(n, samples),
        Check::PsiIdle {
            pressure,
            idle,
            backend,
        } => psi::idle_after_pressure(pressure, idle, backend),
        Check::FrozenTree { cmd } => frozen::frozen_tree(&cmd),
    }
}

fn cgroup_root() -> Result<PathBuf> {
    bpf_stats::find_cgroup2_mount()
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

fn plan(backend: BackendChoice) -> Result<()> {
    let c = CgroupCollector::new(&options(&cgroup_root()?, backend))?;
    print!("{}", c.plan());
    Ok(())
}
