//! What this kernel lets the BPF backend do, from its BTF (kernel.rs) and
//! a trial pass: per stat file whether BPF serves it (and why not).

use std::os::fd::BorrowedFd;
use std::path::Path;

use super::contract::*;
use super::kernel::swap_files_this_boot;
use super::kernel::Kernel;
use super::layer::KernelBtf;
use super::load::Loaded;
use super::load::Walk;
use super::psi;
use super::BpfBackend;
use crate::plan::Support;
use crate::FileSet;
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

/// `BSTATS_PSI_CLOCK=off` takes the pass's clock away, as on a kernel
/// whose kallsyms lacks the scheduler's symbols: the live parity check
/// runs that path on kernels that have them.
pub(crate) fn psi_clock_off() -> bool {
    std::env::var_os("BSTATS_PSI_CLOCK").is_some_and(|v| v == "off")
}

/// Why the program cannot read through a missing kernel fact.
fn missing(fact: &Fact) -> String {
    let what = match fact.kind {
        FactKind::Field | FactKind::Cpumask => "struct member",
        FactKind::Enumval => "enum value",
    };
    format!("kernel lacks {what} {}.{}", fact.ty, fact.member)
}

/// What probing learned of a kernel on which BPF runs: its BTF, this boot's
/// cgroups and a trial pass. The files BPF serves, and why not the others,
/// are a function of it alone ([`support`]).
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// This machine's possible CPUs and NUMA nodes.
    pub(crate) cpus: usize,
    pub(crate) nodes: usize,
    /// CONFIG_NUMA: memory.numa_stat exists.
    pub(crate) has_numa_stat: bool,
    /// Whether BTF tells where memory.numa_stat's values are, or why not.
    pub(crate) numa_layout: Result<(), String>,
    /// memory.swap.* exist on this boot (CONFIG_SWAP, not turned off), or
    /// why not.
    pub(crate) swap_files: Result<(), String>,
    /// The trial pass's FEAT_* bits.
    pub(crate) features: u32,
    /// The trial pass's KERNEL_FACTS bits.
    pub(crate) facts: u64,
    /// PSI_NO_*: why the pass has no PSI clock (with FEAT_PSI_CLOCK unset).
    pub(crate) psi_no_clock: usize,
    /// How the pass walks the tree.
    pub(crate) walk: Walk,
}

/// As [`probe`], relocating against `btf` (a file standing for the
/// kernel's BTF) when given.
pub(crate) fn probe_with(root_fd: BorrowedFd, btf: Option<&Path>) -> Probe {
    let fail = |why: String| Probe {
        capability: Err(why),
        backend: None,
    };
    let Kernel {
        config,
        has_numa_stat,
        numa_layout,
        swap_files,
    } = match KernelBtf::open(btf) {
        Ok(btf) => Kernel::read(&btf),
        Err(e) => return fail(format!("{e:#}")),
    };
    let (cpus, nodes) = (config.cpus, config.nodes);
    let mut config = config;
    if std::env::var_os(WALK_ENV).is_some_and(|v| v == "locked") {
        config.rcu_walk = Err(LOCKED_BY_ENV);
    }
    let mut loaded = match Loaded::first(root_fd, config, btf) {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot load the cgroup iterator: {e:#}")),
    };
    let (features, facts, psi_no_clock, cgroups) = match loaded.run() {
        Ok(pass) if psi_clock_off() => (
            pass.features & !FEAT_PSI_CLOCK,
            pass.facts,
            PSI_NO_SYMBOLS,
            pass.cgroups,
        ),
        Ok(pass) => (pass.features, pass.facts, pass.psi_no_clock, pass.cgroups),
        Err(e) => return fail(format!("the cgroup iterator failed: {e:#}")),
    };
    let found = Found {
        cpus,
        nodes,
        has_numa_stat,
        numa_layout: numa_layout.map(|_| ()).map_err(|e| format!("{e:#}")),
        swap_files: swap_files
            .and_then(|()| swap_files_this_boot(root_fd))
            .map_err(|e| format!("{e:#}")),
        features,
        facts,
        psi_no_clock,
        walk: loaded.walk().clone(),
    };
    Probe {
        capability: Ok(support(&found)),
        backend: Some(BpfBackend::new(loaded, cgroups, btf.map(Path::to_path_buf))),
    }
}

/// The files BPF serves on a kernel where it runs, and for every file why
/// not or how fresh.
pub(crate) fn support(found: &Found) -> Support {
    let &Found {
        cpus,
        nodes,
        has_numa_stat,
        features,
        facts,
        psi_no_clock,
        ..
    } = found;
    let mut files = FileSet::all();
    let mut reasons = Vec::new();
    let mut never = |f: StatFile, why: &str, files: &mut FileSet| {
        files.remove(f);
        reasons.push((f, why.to_owned()));
    };
    never(
        StatFile::IoStat,
        "io.stat: BPF cannot flush the io css",
        &mut files,
    );
    // What this kernel lacks (config, version): its files as text, which
    // shows them as the kernel has them.
    for (i, fact) in KERNEL_FACTS.iter().enumerate() {
        if facts & (1 << i) != 0 {
            continue;
        }
        for f in fact_files(fact) {
            if files.contains(f) {
                never(f, &missing(fact), &mut files);
            }
        }
    }
    if let Err(why) = &found.swap_files {
        for f in [
            StatFile::MemorySwapCurrent,
            StatFile::MemorySwapMax,
            StatFile::MemoryZswapMax,
        ] {
            if files.contains(f) {
                never(f, why, &mut files);
            }
        }
    }
    if !has_numa_stat {
        never(
            StatFile::MemoryNumaStat,
            "kernel has no memory.numa_stat (CONFIG_NUMA)",
            &mut files,
        );
    } else if nodes > NUMA_NODES {
        never(
            StatFile::MemoryNumaStat,
            &format!("more than {NUMA_NODES} NUMA nodes: the program reads {NUMA_NODES}"),
            &mut files,
        );
    }
    if cpus > CPU_WORDS * 64 {
        never(
            StatFile::CpusetCpus,
            "more CPUs than a record holds",
            &mut files,
        );
        never(
            StatFile::CpusetCpusEffective,
            "more CPUs than a record holds",
            &mut files,
        );
    }
    if nodes > 64 {
        never(
            StatFile::CpusetMems,
            "more nodes than a record holds",
            &mut files,
        );
        never(
            StatFile::CpusetMemsEffective,
            "more nodes than a record holds",
            &mut files,
        );
    }
    // Still in `files`: the kernel has the file and a record holds its nodes.
    let numa_gap = match &found.numa_layout {
        _ if !files.contains(StatFile::MemoryNumaStat) || features & FEAT_NUMA != 0 => None,
        Err(why) => Some(why.clone()),
        Ok(_) if features & FEAT_MEMCG_KFUNCS == 0 => {
            Some("kernel lacks kfunc bpf_mem_cgroup_flush_stats".to_owned())
        }
        Ok(_) => Some("kernel symbol node_states not in kallsyms".to_owned()),
    };
    let mut gap = |f: StatFile, why: &str| {
        files.remove(f);
        reasons.push((f, why.to_owned()));
    };
    if features & FEAT_MEMCG_KFUNCS == 0 {
        gap(
            StatFile::MemoryStat,
            "kernel lacks kfunc bpf_mem_cgroup_page_state",
        );
    }
    if let Some(why) = numa_gap {
        gap(StatFile::MemoryNumaStat, &why);
    }
    if features & FEAT_CPU_FLUSH == 0 {
        gap(StatFile::CpuStat, "kernel lacks kfunc css_rstat_flush");
    }
    let pressure = [
        StatFile::CpuPressure,
        StatFile::IoPressure,
        StatFile::MemoryPressure,
    ];
    // Without the clock only, BPF still serves the groups whose files need
    // none (sample::pressure_exact) and the rest are read per cgroup.
    let psi_gap = psi::left_to_files(features, psi_no_clock);
    let no_clock = psi_gap.as_ref().filter(|_| features & FEAT_PSI != 0);
    for f in pressure {
        if let (Some(why), None) = (&psi_gap, no_clock) {
            gap(f, why);
        }
    }
    // How fresh what BPF serves is (the plan shows it as the reason).
    let root = |f: StatFile| super::ROOT_AS_TEXT.contains(&f);
    let root_note = |f| if root(f) { "; root cgroup: text" } else { "" };
    reasons.push((
        StatFile::CpuStat,
        format!(
            "flushed once per pass at the walk root, as a read flushes{}",
            root_note(StatFile::CpuStat)
        ),
    ));
    for f in [StatFile::MemoryStat, StatFile::MemoryNumaStat] {
        reasons.push((
            f,
            "flushed once per pass at the walk root with the flush a read does (rate-limited: \
             up to ~2 s old, as the text)"
                .to_owned(),
        ));
    }
    let psi_note = |f| match no_clock {
        None => format!(
            "as a read of the file at the pass would print them: totals with the per-CPU \
             buckets, averages decayed or updated to the pass's sched_clock (the sampling \
             CPU's scheduler clock, at most a tick old){}",
            root_note(f)
        ),
        Some(why) => format!(
            "groups idle since the kernel last folded their per-CPU buckets, with averages \
             at 0 (what a read prints of them needs no clock); the others{}: text, as BPF \
             {why}",
            if root(f) { " and the root cgroup" } else { "" }
        ),
    };
    for f in pressure {
        reasons.push((f, psi_note(f)));
    }
    for &f in StatFile::ALL {
        if !reasons.iter().any(|(g, _)| *g == f) {
            reasons.push((f, "read at the pass".to_owned()));
        }
    }
    // Whether the host's cgroup operations wait for the pass.
    for (f, note) in &mut reasons {
        if files.contains(*f) {
            *note = format!("{note}; {}", found.walk);
        }
    }
    Support { files, reasons }
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
