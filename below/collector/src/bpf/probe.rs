//! What this kernel lets the BPF backend do, from its BTF (kernel.rs) and
//! a trial pass: per stat file whether BPF serves it (and why not).

use std::os::fd::BorrowedFd;
use std::path::Path;

use super::contract::*;
use super::kernel::swap_files_this_boot;
use super::kernel::Kernel;
use super::kernel::CPUS_POSSIBLE;
use super::kernel::NODES_POSSIBLE;
use super::layer::KernelBtf;
use super::load::Walk;
use super::numa::NumaKernel;
use super::numa::NUMA_NODES;
use super::program::ForkConfig;
use super::program::Program;
use super::psi::PsiPass;
use super::psi::FEAT_PSI;
use super::BpfBackend;
use crate::plan::Support;
use crate::FileSet;
use crate::Freshness;
use crate::NotServed;
use crate::PassWalk;
use crate::Served;
use crate::StatFile;

/// What probing found: the backend and what it serves.
pub(crate) struct Probe {
    pub capability: crate::Capability,
    pub backend: Option<BpfBackend>,
}

pub(crate) fn probe(root_fd: BorrowedFd) -> Probe {
    probe_with(root_fd, None)
}

/// `BSTATS_BPF_WALK=locked` loads the cgroup iterator where the walk under
/// RCU would run: the benchmark measures both on one kernel.
const WALK_ENV: &str = "BSTATS_BPF_WALK";
const LOCKED_BY_ENV: &str = "BSTATS_BPF_WALK=locked";

/// Why the program cannot read through a missing kernel fact.
fn missing(fact: &Fact) -> NotServed {
    let what = match fact.kind {
        FactKind::Field | FactKind::Cpumask => "struct member",
        FactKind::Enumval => "enum value",
    };
    NotServed::MissingFact(format!("{what} {}.{}", fact.ty, fact.member))
}

/// What probing learned of a kernel on which BPF runs: its BTF, this boot's
/// cgroups and a trial pass. The files BPF serves, and why not the others,
/// are a function of it alone ([`support`]).
#[derive(Clone, Debug)]
pub(crate) struct Probed {
    /// This machine's possible CPUs and NUMA nodes (None: sysfs does not
    /// list them).
    pub(crate) cpus: Option<usize>,
    pub(crate) nodes: Option<usize>,
    /// CONFIG_NUMA: memory.numa_stat exists.
    pub(crate) has_numa_stat: bool,
    /// Whether BTF tells where memory.numa_stat's values are, or why not.
    pub(crate) numa_layout: Result<(), String>,
    /// Whether the trial pass read memory.numa_stat, or why the program
    /// that reads it did not load.
    pub(crate) numa_read: Result<bool, String>,
    /// memory.swap.* exist on this boot (CONFIG_SWAP, not turned off), or
    /// why not.
    pub(crate) swap_files: Result<(), String>,
    /// The memcg kfuncs the kernel has, or which it lacks.
    pub(crate) memcg_kfuncs: Result<(), String>,
    /// Whether the record has a bit for each controller the kernel has, or
    /// why not.
    pub(crate) controllers: Result<(), String>,
    /// Whether the cgroup2 mount accounts hugetlb to memcg is known (the
    /// record's memory.stat follows it), or why not.
    pub(crate) hugetlb_accounting: Result<(), String>,
    /// The trial pass's CGB_FEAT_* bits.
    pub(crate) features: u32,
    /// The trial pass's KERNEL_FACTS bits.
    pub(crate) facts: u64,
    /// What the trial pass found of pressure, or why the program that has
    /// it did not load.
    pub(crate) psi: Result<PsiPass, String>,
    /// How the pass walks the tree.
    pub(crate) walk: Walk,
}

/// As [`probe`], relocating against `btf` (a file standing for the
/// kernel's BTF) when given.
pub(crate) fn probe_with(root_fd: BorrowedFd, btf: Option<&Path>) -> Probe {
    let fail = |why: String| Probe {
        capability: Err(NotServed::Unavailable(why)),
        backend: None,
    };
    let read = |btf: KernelBtf| (Kernel::read(&btf), NumaKernel::read(&btf));
    let (
        Kernel {
            config,
            lacking_memcg_kfuncs,
            controllers,
        },
        numa,
    ) = match KernelBtf::open(btf).map(read) {
        Ok(kernel) => kernel,
        Err(e) => return fail(format!("{e:#}")),
    };
    let (cpus, nodes) = (config.cpus, config.nodes);
    let mut config = config;
    if std::env::var_os(WALK_ENV).is_some_and(|v| v == "locked") {
        config.rcu_walk = Err(LOCKED_BY_ENV);
    }
    let hugetlb_accounting = crate::mount::hugetlb_accounting();
    config.hugetlb_accounting = *hugetlb_accounting.as_ref().unwrap_or(&false);
    let config = ForkConfig {
        core: config,
        numa: nodes.and_then(|n| numa.config(n)),
    };
    let (mut program, no_fork) = match Program::first(root_fd, config, btf) {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot load the cgroup iterator: {e:#}")),
    };
    let pass = match program.run() {
        Ok(pass) => pass,
        Err(e) => return fail(format!("the cgroup iterator failed: {e:#}")),
    };
    let no_fork = no_fork.map(|why| format!("program bstats did not load: {why}"));
    let psi = match &no_fork {
        None => Ok(program.psi().expect("the fork's program has pressure")),
        Some(why) => Err(why.clone()),
    };
    let found = Probed {
        cpus,
        nodes,
        has_numa_stat: numa.has_numa_stat,
        numa_layout: numa.layout.map(|_| ()).map_err(|e| format!("{e:#}")),
        numa_read: match no_fork {
            None => Ok(program.numa(0).is_some()),
            Some(why) => Err(why),
        },
        memcg_kfuncs: match lacking_memcg_kfuncs.is_empty() {
            true => Ok(()),
            false => Err(lacking_memcg_kfuncs.join(", ")),
        },
        controllers: controllers.map_err(|e| format!("{e:#}")),
        swap_files: swap_files_this_boot(root_fd).map_err(|e| format!("{e:#}")),
        hugetlb_accounting: hugetlb_accounting
            .map(|_| ())
            .map_err(|e| format!("cannot tell whether memory.stat prints hugetlb: {e:#}")),
        features: pass.features,
        facts: pass.facts,
        psi,
        walk: program.loaded().walk().clone(),
    };
    Probe {
        capability: Ok(support(&found)),
        backend: Some(BpfBackend::new(program, btf.map(Path::to_path_buf))),
    }
}

/// The files BPF serves on a kernel where it runs: why not the others,
/// and how fresh each one it serves is.
pub(crate) fn support(found: &Probed) -> Support {
    let &Probed {
        cpus,
        nodes,
        has_numa_stat,
        features,
        facts,
        ..
    } = found;
    let mut files = FileSet::all();
    let mut not_served = Vec::new();
    // The first reason a file is not served is the one shown.
    let mut never = |f: StatFile, why: NotServed, files: &mut FileSet| {
        if files.contains(f) {
            files.remove(f);
            not_served.push((f, why));
        }
    };
    never(StatFile::IoStat, NotServed::IoNotFlushable, &mut files);
    // What this kernel lacks (config, version): its files as text, which
    // shows them as the kernel has them.
    for (i, fact) in KERNEL_FACTS.iter().enumerate() {
        if facts & (1 << i) != 0 {
            continue;
        }
        for f in fact_files(fact) {
            never(f, missing(fact), &mut files);
        }
    }
    if let Err(why) = &found.hugetlb_accounting {
        never(
            StatFile::MemoryStat,
            NotServed::HugetlbAccounting(why.clone()),
            &mut files,
        );
    }
    if let Err(why) = &found.controllers {
        for f in [StatFile::CgroupControllers, StatFile::CgroupSubtreeControl] {
            never(f, NotServed::UnknownControllers(why.clone()), &mut files);
        }
    }
    if let Err(why) = &found.swap_files {
        for f in [
            StatFile::MemorySwapCurrent,
            StatFile::MemorySwapMax,
            StatFile::MemoryZswapMax,
        ] {
            never(f, NotServed::NoSwapFiles(why.clone()), &mut files);
        }
    }
    if !has_numa_stat {
        never(StatFile::MemoryNumaStat, NotServed::NoNumaStat, &mut files);
    } else if nodes.is_none_or(|n| n > NUMA_NODES) {
        let why = match nodes {
            None => NotServed::NoPossibleIds(NODES_POSSIBLE.to_owned()),
            Some(_) => NotServed::TooManyNumaNodes(NUMA_NODES),
        };
        never(StatFile::MemoryNumaStat, why, &mut files);
    }
    let cpus_gap = match cpus {
        None => Some(NotServed::NoPossibleIds(CPUS_POSSIBLE.to_owned())),
        Some(n) if n > CPU_WORDS * 64 => Some(NotServed::TooManyCpus),
        Some(_) => None,
    };
    if let Some(why) = cpus_gap {
        never(StatFile::CpusetCpus, why.clone(), &mut files);
        never(StatFile::CpusetCpusEffective, why, &mut files);
    }
    let nodes_gap = match nodes {
        None => Some(NotServed::NoPossibleIds(NODES_POSSIBLE.to_owned())),
        Some(n) if n > 64 => Some(NotServed::TooManyNodes),
        Some(_) => None,
    };
    if let Some(why) = nodes_gap {
        never(StatFile::CpusetMems, why.clone(), &mut files);
        never(StatFile::CpusetMemsEffective, why, &mut files);
    }
    // The loader lets the pass use the memcg kfuncs where BTF has all.
    let no_memcg_kfuncs =
        (found.memcg_kfuncs.as_ref().err()).map(|lacking| NotServed::MissingKfunc(lacking.clone()));
    // Still in `files`: the kernel has the file and a record holds its nodes.
    let numa_gap = match (&found.numa_layout, &found.numa_read) {
        _ if !files.contains(StatFile::MemoryNumaStat) => None,
        (_, Ok(true)) => None,
        (Err(why), _) => Some(NotServed::NumaLayout(why.clone())),
        (Ok(_), Err(why)) => Some(NotServed::NoForkProgram(why.clone())),
        (Ok(_), Ok(false)) if no_memcg_kfuncs.is_some() => no_memcg_kfuncs.clone(),
        (Ok(_), Ok(false)) => Some(NotServed::MissingKsym("node_states".to_owned())),
    };
    if let Some(why) = no_memcg_kfuncs {
        never(StatFile::MemoryStat, why, &mut files);
    }
    if let Some(why) = numa_gap {
        never(StatFile::MemoryNumaStat, why, &mut files);
    }
    if features & CGB_FEAT_CPU_FLUSH == 0 {
        let why = NotServed::MissingKfunc(
            "css_rstat_flush (nor cgroup_rstat_flush, bpf_cgroup_rstat_flush)".to_owned(),
        );
        never(StatFile::CpuStat, why, &mut files);
    }
    let pressure = [
        StatFile::CpuPressure,
        StatFile::IoPressure,
        StatFile::MemoryPressure,
    ];
    // Without the clock only, BPF still serves the groups whose files need
    // none (PsiPass::exact) and the rest are read per cgroup.
    let (psi_gap, no_clock) = match &found.psi {
        _ if cpus.is_none() => (
            Some(NotServed::NoPossibleIds(CPUS_POSSIBLE.to_owned())),
            None,
        ),
        Err(why) => (Some(NotServed::NoPsi(why.clone())), None),
        Ok(p) => match p.left_to_files() {
            None => (None, None),
            Some(why) if p.features & FEAT_PSI == 0 => (Some(NotServed::NoPsi(why)), None),
            Some(why) => {
                let why = NotServed::PsiNoClock(why);
                (Some(why.clone()), Some(why))
            }
        },
    };
    if let (Some(why), None) = (&psi_gap, &no_clock) {
        for f in pressure {
            never(f, why.clone(), &mut files);
        }
    }
    // How fresh what BPF serves is, and whether the host's cgroup
    // operations wait for the pass.
    let walk = match &found.walk {
        Walk::Rcu => PassWalk::Rcu(found.walk.to_string()),
        Walk::Locked(_) => PassWalk::CgroupMutex(found.walk.to_string()),
    };
    let served = files
        .iter()
        .map(|f| {
            let fresh = match f {
                StatFile::CpuStat => Freshness::FlushedPerPass,
                StatFile::MemoryStat | StatFile::MemoryNumaStat => Freshness::FlushedRateLimited,
                _ if f.is_pressure() => match &no_clock {
                    None => Freshness::PressureAsRead,
                    Some(why) => Freshness::PressureIdleOnly(why.clone()),
                },
                _ => Freshness::ReadAtPass,
            };
            let how = Served {
                fresh,
                root_as_text: super::ROOT_AS_TEXT.contains(&f),
                walk: Some(walk.clone()),
            };
            (f, how)
        })
        .collect();
    Support {
        files,
        served,
        not_served,
    }
}

/// Files the program serves that below 0.9's `CgroupSample` has no field
/// for: no sample of ours reads them.
const NOT_IN_THE_MODEL: &[&str] = &["memory.zswap.writeback"];

/// The stat files that need `fact`.
pub(crate) fn fact_files(fact: &'static Fact) -> impl Iterator<Item = StatFile> {
    fact.files
        .split_whitespace()
        .filter(|name| !NOT_IN_THE_MODEL.contains(name))
        .map(|name| {
            StatFile::by_name(name)
                .unwrap_or_else(|| panic!("{}.{}: no stat file {name}", fact.ty, fact.member))
        })
}

#[cfg(test)]
mod test {
    use std::fs::File;
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn every_fact_names_stat_files() {
        for f in KERNEL_FACTS {
            // Panics on a name that is neither a stat file nor one the model lacks.
            let outside = f
                .files
                .split_whitespace()
                .filter(|n| NOT_IN_THE_MODEL.contains(n));
            assert!(fact_files(f).count() + outside.count() > 0, "{}", f.name);
        }
    }

    /// A directory standing for a cgroup root: the check looks at files.
    #[test]
    fn swap_files_from_a_memory_cgroup() {
        let root = tempfile::tempdir().unwrap();
        let check = || swap_files_this_boot(File::open(root.path()).unwrap().as_fd());
        std::fs::create_dir(root.path().join("no-memory")).unwrap();
        let why = check().unwrap_err().to_string();
        assert!(why.contains("cannot tell"), "no memory cgroup: {why}");
        let child = root.path().join("a.slice");
        std::fs::create_dir(&child).unwrap();
        std::fs::write(child.join("memory.current"), "0\n").unwrap();
        let why = check().unwrap_err().to_string();
        assert!(why.contains("none in a.slice"), "{why}");
        std::fs::write(child.join("memory.swap.current"), "0\n").unwrap();
        assert!(check().is_ok());
    }
}
