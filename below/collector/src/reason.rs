//! Why a backend does not serve a stat file, and how fresh what it serves
//! is: the data the plan, `below backends` (text and `--json`) and the
//! store's records are built from. The words people read are these
//! types' `Display`; code and tests look at the variants.

use std::fmt;

use serde::Deserialize;
use serde::Serialize;

use crate::StatFile;

/// Why a backend does not serve a file (or, as a backend's capability,
/// why it cannot run at all).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", content = "detail", rename_all = "snake_case")]
pub enum NotServed {
    /// The backend cannot run on this kernel: the error.
    Unavailable(String),
    /// Another backend was asked for.
    NotAskedFor,
    /// io.stat: BPF cannot flush the io css.
    IoNotFlushable,
    /// The kernel lacks a struct member or enum value the program reads
    /// (e.g. "struct member mem_cgroup.zswap_max").
    MissingFact(String),
    /// The kfuncs the kernel lacks, comma-separated.
    MissingKfunc(String),
    /// A kernel symbol the program needs is not in kallsyms.
    MissingKsym(String),
    /// memory.swap.* are absent, or cannot be told present, on this boot.
    NoSwapFiles(String),
    /// Whether memory.stat prints hugetlb (the cgroup2 mount's
    /// memory_hugetlb_accounting) cannot be told.
    HugetlbAccounting(String),
    /// cgroup.controllers, .subtree_control: the kernel has controllers the
    /// record has no bit for (which ones).
    UnknownControllers(String),
    /// No memory.numa_stat (CONFIG_NUMA).
    NoNumaStat,
    /// Where memory.numa_stat's values are is not known from BTF.
    NumaLayout(String),
    /// More NUMA nodes than the program reads.
    TooManyNumaNodes(usize),
    /// The fork's program, which reads the file, did not load (why); below
    /// main's program runs.
    NoForkProgram(String),
    /// More CPUs than a record's cpumask holds.
    TooManyCpus,
    /// sysfs does not list the possible CPUs or nodes (this file).
    NoPossibleIds(String),
    /// More memory nodes than a record's nodemask holds.
    TooManyNodes,
    /// No cgroup PSI (CONFIG_PSI) or an unknown psi_group layout (as the
    /// program's side says it).
    NoPsi(String),
    /// The pass cannot bring the pressure averages to its moment (as the
    /// program's side says why).
    PsiNoClock(String),
    /// The kernel has no `<file>.stream`.
    NoStreamFile(StatFile),
}

impl fmt::Display for NotServed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotServed::Unavailable(why) => f.write_str(why),
            NotServed::NotAskedFor => f.write_str("not asked for"),
            NotServed::IoNotFlushable => f.write_str("io.stat: BPF cannot flush the io css"),
            NotServed::MissingFact(what) => write!(f, "kernel lacks {what}"),
            NotServed::MissingKfunc(name) => write!(f, "kernel lacks kfunc {name}"),
            NotServed::MissingKsym(name) => write!(f, "kernel symbol {name} not in kallsyms"),
            NotServed::NoSwapFiles(why)
            | NotServed::NumaLayout(why)
            | NotServed::HugetlbAccounting(why)
            | NotServed::UnknownControllers(why)
            | NotServed::NoForkProgram(why)
            | NotServed::NoPsi(why)
            | NotServed::PsiNoClock(why) => f.write_str(why),
            NotServed::NoNumaStat => f.write_str("kernel has no memory.numa_stat (CONFIG_NUMA)"),
            NotServed::TooManyNumaNodes(n) => {
                write!(f, "more than {n} NUMA nodes: the program reads {n}")
            }
            NotServed::TooManyCpus => f.write_str("more CPUs than a record holds"),
            NotServed::TooManyNodes => f.write_str("more nodes than a record holds"),
            NotServed::NoPossibleIds(list) => write!(f, "cannot read the possible ids from {list}"),
            NotServed::NoStreamFile(file) => write!(f, "the kernel has no {file}.stream"),
        }
    }
}

/// How fresh what a backend serves is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fresh", content = "detail", rename_all = "snake_case")]
pub enum Freshness {
    /// cpu.stat: flushed once per pass, as a read flushes.
    FlushedPerPass,
    /// memory.stat, memory.numa_stat: the flush a read does, rate-limited.
    FlushedRateLimited,
    /// Pressure as a read at the pass would print it.
    PressureAsRead,
    /// Without the pass's clock: the groups idle since the kernel last
    /// folded their buckets (the others as text), and why.
    PressureIdleOnly(NotServed),
    /// A value read at the pass.
    ReadAtPass,
    /// As of the kernel's last interval flush (stream files).
    StreamInterval,
}

/// How the BPF pass walks the tree: whether the host's cgroup operations
/// wait for it (each as the program's side says it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "walk", content = "detail", rename_all = "snake_case")]
pub enum PassWalk {
    /// Listed under RCU, read by id: no cgroup lock.
    Rcu(String),
    /// The cgroup iterator, under cgroup_mutex for the whole walk, and why
    /// not under RCU.
    CgroupMutex(String),
}

impl fmt::Display for PassWalk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassWalk::Rcu(says) | PassWalk::CgroupMutex(says) => f.write_str(says),
        }
    }
}

/// What a backend says of a file it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    pub fresh: Freshness,
    /// The root cgroup's values are read as text.
    pub root_as_text: bool,
    /// How the BPF pass walks (None: not served by a pass).
    pub walk: Option<PassWalk>,
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.fresh {
            Freshness::FlushedPerPass => {
                f.write_str("flushed once per pass at the walk root, as a read flushes")?
            }
            Freshness::FlushedRateLimited => f.write_str(
                "flushed once per pass at the walk root with the flush a read does \
                 (rate-limited: up to ~2 s old, as the text)",
            )?,
            Freshness::PressureAsRead => f.write_str(
                "as a read of the file at the pass would print them: totals with the per-CPU \
                 buckets, averages decayed or updated to the pass's sched_clock (the sampling \
                 CPU's scheduler clock, at most a tick old)",
            )?,
            Freshness::PressureIdleOnly(why) => write!(
                f,
                "groups idle since the kernel last folded their per-CPU buckets, with averages \
                 at 0 (what a read prints of them needs no clock); the others{}: text, as BPF \
                 {why}",
                if self.root_as_text {
                    " and the root cgroup"
                } else {
                    ""
                }
            )?,
            Freshness::ReadAtPass => f.write_str("read at the pass")?,
            Freshness::StreamInterval => {
                f.write_str("as of the kernel's last interval flush (cpu.stat.stream_interval)")?
            }
        }
        if self.root_as_text && !matches!(self.fresh, Freshness::PressureIdleOnly(_)) {
            f.write_str("; root cgroup: text")?;
        }
        match &self.walk {
            Some(walk) => write!(f, "; {walk}"),
            None => Ok(()),
        }
    }
}
