//! What the verifier does with each form of our programs on this kernel
//! (`bstats-check verifier`): below main's `cgroup_stats` and the fork's
//! `bstats`, each as the cgroup iterator and as the walk under RCU
//! ([`Walk`]), loaded as the backend loads them (the kernel's
//! [`LoadConfig`], the maps sized for [`FIRST_CAPACITY`] records, rodata
//! set by [`Loaded::prepare`], attached by [`Loaded::attach`]): the
//! verifier's work depends on all of them. Per form, the open and load
//! (`layer::load`: ELF, CO-RE against the kernel's BTF, maps, the
//! verifier) is timed, and the kernel's `bpf_prog_info` read; then the
//! form is loaded again with the verifier's statistics in its log
//! (BPF_LOG_STATS): its own time and states.

use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::Result;
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::Skel;
use libbpf_rs::AsRawLibbpf;
use libbpf_rs::OpenObject;

use super::contract::skel::CgroupBpfSkelBuilder;
use super::kernel::Kernel;
use super::kernel::CPUS_POSSIBLE;
use super::layer;
use super::layer::KernelBtf;
pub use super::layer::ProgInfo;
use super::load::Loaded;
use super::load::NoRcuWalk;
use super::load::Walk;
use super::load::FIRST_CAPACITY;
use super::numa::NumaKernel;
use super::program;
use super::program::skel::BstatsSkelBuilder;
use super::program::ForkConfig;
use super::program::ForkLoaded;

/// Whose program an object holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whose {
    /// below main's `cgroup_bpf.bpf.o` (the patch series carries it).
    BelowMain,
    /// The fork's `bstats.bpf.o`: cgroup_stats with pressure and top-N.
    Fork,
}

impl Whose {
    /// The object file.
    pub fn object(self) -> &'static str {
        match self {
            Whose::BelowMain => "cgroup_bpf.bpf.o",
            Whose::Fork => "bstats.bpf.o",
        }
    }

    /// The program's name in it (the cgroup iterator's form).
    pub fn program(self) -> &'static str {
        match self {
            Whose::BelowMain => "cgroup_stats",
            Whose::Fork => program::PROGRAM,
        }
    }

    /// Loads its object through its skeleton, `setup` run before.
    fn load(
        self,
        setup: impl FnMut(&mut OpenObject) -> Result<()>,
    ) -> Result<Box<dyn Skel<'static>>> {
        Ok(match self {
            Whose::BelowMain => {
                Box::new(layer::load(CgroupBpfSkelBuilder::default(), None, setup)?)
            }
            Whose::Fork => Box::new(layer::load(BstatsSkelBuilder::default(), None, setup)?),
        })
    }

    /// Before the load of `self`'s object, as the backend does.
    fn prepare(
        self,
        open: &mut OpenObject,
        prog: &str,
        root: BorrowedFd,
        config: &ForkConfig,
    ) -> Result<()> {
        match self {
            Whose::BelowMain => Loaded::prepare(open, prog, root, FIRST_CAPACITY, &config.core),
            Whose::Fork => ForkLoaded::prepare(open, prog, root, FIRST_CAPACITY, config),
        }
    }

    /// After the load: attaches as the backend does (and drops it).
    fn attach(
        self,
        skel: Box<dyn Skel<'static>>,
        prog: &str,
        root: BorrowedFd,
        config: ForkConfig,
        walk: Walk,
    ) -> Result<()> {
        let cap = FIRST_CAPACITY;
        match self {
            Whose::BelowMain => {
                Loaded::attach(skel, prog, root, cap, config.core, walk, None).map(drop)
            }
            Whose::Fork => ForkLoaded::attach(skel, prog, root, cap, config, walk, None).map(drop),
        }
    }
}

/// What became of one form's loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not tried on this kernel: why (a kfunc it lacks).
    NotApplicable(String),
    /// A load (or its attach) failed: why (the verifier's verdict, else
    /// libbpf's).
    Failed(String),
    Loaded(Loads),
}

/// A form's loads, each as the backend loads it, then again with the
/// verifier's statistics asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loads {
    pub loads: Vec<Load>,
    /// The loads with BPF_LOG_STATS (a log of the verifier's totals
    /// only), not timed: what the verifier says of its work; else why
    /// not.
    pub stats: std::result::Result<Vec<VerifierLog>, String>,
}

/// One load of a form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Open and load (`layer::load`), not the attach.
    pub wall: Duration,
    pub info: ProgInfo,
}

/// What the verifier's log says of a load with BPF_LOG_STATS (None:
/// this kernel's log does not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifierLog {
    /// "verification time N usec": the verifier's own time.
    pub time: Option<Duration>,
    /// "processed N insns".
    pub processed: Option<u32>,
    /// "total_states N": states the verifier kept.
    pub total_states: Option<u32>,
    /// "peak_states N": most states kept at once.
    pub peak_states: Option<u32>,
}

impl VerifierLog {
    /// The statistics of a log of BPF_LOG_STATS, e.g.
    /// "verification time 4707 usec\nstack depth 64\nprocessed 2035 insns
    /// (limit 1000000) max_states_per_insn 4 total_states 143 peak_states
    /// 143 mark_read 31".
    pub fn parse(log: &str) -> Self {
        let words: Vec<&str> = log.split_ascii_whitespace().collect();
        let after = |pattern: &[&str]| -> Option<u64> {
            words
                .windows(pattern.len() + 1)
                .find(|w| w[..pattern.len()] == *pattern)
                .and_then(|w| w[pattern.len()].parse().ok())
        };
        let u32_after = |pattern: &[&str]| after(pattern).and_then(|v| u32::try_from(v).ok());
        VerifierLog {
            time: after(&["verification", "time"]).map(Duration::from_micros),
            processed: u32_after(&["processed"]),
            total_states: u32_after(&["total_states"]),
            peak_states: u32_after(&["peak_states"]),
        }
    }
}

/// One form of one program on this kernel.
#[derive(Clone, Debug)]
pub struct FormStats {
    pub whose: Whose,
    /// The BPF program: `cgroup_stats`, `cgroup_stats_rcu`, `bstats`,
    /// `bstats_rcu`.
    pub program: String,
    /// Whether it is the walk under RCU (else the cgroup iterator).
    pub rcu: bool,
    pub outcome: Outcome,
}

/// The verifier's work on this kernel, per form.
#[derive(Clone, Debug)]
pub struct VerifierStats {
    /// `uname -r`.
    pub kernel: String,
    /// The CPUs the programs are loaded for (nr_cpu_ids, from
    /// /sys/devices/system/cpu/possible).
    pub cpus_possible: usize,
    /// Online CPUs (/sys/devices/system/cpu/online).
    pub cpus_online: usize,
    /// The cgroup2 directory the passes walk.
    pub root: PathBuf,
    pub forms: Vec<FormStats>,
}

/// Loads each form of each program `loads` times under `root` (a cgroup2
/// directory), in the order below main's, the fork's; the cgroup iterator,
/// the walk under RCU. Fails only when no program can be tried (no BTF, no
/// root).
pub fn verifier_stats(root: &Path, loads: usize) -> Result<VerifierStats> {
    crate::check_cgroup2_root(root)?;
    let root_fd = crate::read::open_root(root)?;
    let btf = KernelBtf::open(None)?;
    let mut core = Kernel::read(&btf).config;
    // As the backend sets them (bpf::probe).
    core.hugetlb_accounting = crate::mount::hugetlb_accounting()?;
    let config = ForkConfig {
        core,
        numa: core.nodes.and_then(|n| NumaKernel::read(&btf).config(n)),
    };
    let mut forms = Vec::new();
    for whose in [Whose::BelowMain, Whose::Fork] {
        for rcu in [false, true] {
            let walk = match (rcu, core.rcu_walk) {
                (false, _) => {
                    Walk::Locked(NoRcuWalk::Unavailable("measured as the cgroup iterator"))
                }
                (true, Ok(())) => Walk::Rcu,
                (true, Err(why)) => {
                    forms.push(FormStats {
                        whose,
                        program: format!("{}_rcu", whose.program()),
                        rcu,
                        outcome: Outcome::NotApplicable(why.to_owned()),
                    });
                    continue;
                }
            };
            let program = walk.program(whose.program());
            let outcome = match load_times(whose, root_fd.as_fd(), config, &walk, &program, loads) {
                Ok(loads) => Outcome::Loaded(loads),
                Err(e) => Outcome::Failed(format!("{e:#}")),
            };
            forms.push(FormStats {
                whose,
                program,
                rcu,
                outcome,
            });
        }
    }
    Ok(VerifierStats {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .context("Failed to read /proc/sys/kernel/osrelease")?
            .trim()
            .to_owned(),
        cpus_possible: core
            .cpus
            .with_context(|| format!("Failed to read the possible CPUs from {CPUS_POSSIBLE}"))?,
        cpus_online: std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|l| cpu_count(&l))
            .unwrap_or(0),
        root: root.to_owned(),
        forms,
    })
}

/// `n` loads of `prog` as the backend loads it, each timed and attached,
/// then `n` with BPF_LOG_STATS.
fn load_times(
    whose: Whose,
    root: BorrowedFd,
    config: ForkConfig,
    walk: &Walk,
    prog: &str,
    n: usize,
) -> Result<Loads> {
    let loads = (0..n)
        .map(|_| {
            let start = Instant::now();
            let skel = whose.load(|open| whose.prepare(open, prog, root, &config))?;
            let wall = start.elapsed();
            let info = layer::prog_info(&layer::prog(skel.object(), prog)?)?;
            whose
                .attach(skel, prog, root, config, walk.clone())
                .context("loaded, but did not attach")?;
            Ok(Load { wall, info })
        })
        .collect::<Result<_>>()?;
    let stats = (0..n)
        .map(|_| verifier_log(whose, root, &config, prog))
        .collect::<Result<_>>()
        .map_err(|e| format!("{e:#}"));
    Ok(Loads { loads, stats })
}

/// BPF_LOG_STATS: the verifier logs its totals only.
const BPF_LOG_STATS: u32 = 4;

/// A load of `prog` with the verifier's statistics in its log (not
/// attached).
fn verifier_log(
    whose: Whose,
    root: BorrowedFd,
    config: &ForkConfig,
    prog: &str,
) -> Result<VerifierLog> {
    let mut log = vec![0u8; 64 << 10];
    let (buf, size) = (log.as_mut_ptr(), log.len());
    whose.load(|open| {
        whose.prepare(open, prog, root, config)?;
        let mut p = open
            .progs_mut()
            .find(|p| p.name() == prog)
            .with_context(|| format!("Failed to find program {prog} in the BPF object"))?;
        p.set_log_level(BPF_LOG_STATS);
        // SAFETY: an opened program; libbpf keeps the pointer and writes
        // at most `size` bytes to it during the load, which `log` outlives.
        let ret = unsafe {
            libbpf_sys::bpf_program__set_log_buf(
                p.as_libbpf_object().as_ptr(),
                buf.cast(),
                size as u64,
            )
        };
        anyhow::ensure!(ret == 0, "bpf_program__set_log_buf failed: {ret}");
        Ok(())
    })?;
    let len = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Ok(VerifierLog::parse(&String::from_utf8_lossy(&log[..len])))
}

/// CPUs in a kernel CPU list ("0-3,8" is 5); None when malformed.
pub(crate) fn cpu_count(list: &str) -> Option<usize> {
    let list = list.trim();
    if list.is_empty() {
        return Some(0);
    }
    list.split(',')
        .map(|range| match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                b.checked_sub(a).map(|d| d + 1)
            }
            None => range.parse::<usize>().ok().map(|_| 1),
        })
        .sum()
}

/// The median of `times` (of an even count, the mean of the middle
/// two), the least and the most; None without any.
pub fn median_range(
    times: impl IntoIterator<Item = Duration>,
) -> Option<(Duration, Duration, Duration)> {
    let mut times: Vec<Duration> = times.into_iter().collect();
    times.sort();
    let n = times.len();
    let median = match n {
        0 => return None,
        _ if n % 2 == 1 => times[n / 2],
        _ => (times[n / 2 - 1] + times[n / 2]) / 2,
    };
    Some((median, times[0], times[n - 1]))
}
