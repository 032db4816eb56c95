//! What this kernel lets the BPF backend do, from its BTF (kernel.rs) and
//! a trial pass: per stat file whether BPF serves it (and why not).

use std::os::fd::BorrowedFd;

use regex::Regex;

use super::contract::*;
use super::kernel::Kernel;
use super::load::Loaded;
use super::BpfBackend;
use crate::plan::Support;
use crate::FileSet;
use crate::StatFile;

/// What probing found: the backend, what it serves, and the files a
/// capable kernel would serve that this one cannot (forcing bpf fails on
/// those).
pub(crate) struct Probe {
    pub capability: crate::Capability,
    pub backend: Option<BpfBackend>,
    pub gaps: Vec<(StatFile, String)>,
}

pub(crate) fn probe(root_fd: BorrowedFd, filter: Option<Regex>) -> Probe {
    let fail = |why: String| Probe {
        capability: Err(why),
        backend: None,
        gaps: Vec::new(),
    };
    let Kernel {
        limits,
        has_numa_stat,
        numa_layout,
    } = match Kernel::read() {
        Ok(k) => k,
        Err(why) => return fail(why),
    };
    let mut loaded = match Loaded::first(root_fd, limits) {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot load the cgroup iterator: {e:#}")),
    };
    let (features, psi_no_clock) = match loaded.run(PASS_FULL, 0) {
        Ok(pass) => (pass.features, pass.psi_no_clock),
        Err(e) => return fail(format!("the cgroup iterator failed: {e:#}")),
    };

    let mut files = FileSet::all();
    let mut reasons = Vec::new();
    let mut gaps = Vec::new();
    let mut never = |f: StatFile, why: &str, files: &mut FileSet| {
        files.remove(f);
        reasons.push((f, why.to_owned()));
    };
    never(
        StatFile::IoStat,
        "io.stat: BPF cannot flush the io css",
        &mut files,
    );
    if !has_numa_stat {
        never(
            StatFile::MemoryNumaStat,
            "kernel has no memory.numa_stat (CONFIG_NUMA)",
            &mut files,
        );
    } else if limits.nodes > NUMA_NODES {
        never(
            StatFile::MemoryNumaStat,
            &format!("more than {NUMA_NODES} NUMA nodes: a record holds {NUMA_NODES}"),
            &mut files,
        );
    }
    if limits.cpus > CPU_WORDS * 64 {
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
    if limits.nodes > 64 {
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
    let numa_gap = match &numa_layout {
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
        gaps.push((f, why.to_owned()));
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
    let psi_gap = if features & FEAT_PSI == 0 {
        Some("kernel has no cgroup PSI (CONFIG_PSI) or an unknown psi_group layout".to_owned())
    } else if features & FEAT_PSI_CLOCK == 0 {
        // Without the clock an idle group's averages stay where they
        // were when it went idle: no stale values, text instead.
        let why = match psi_no_clock {
            PSI_NO_SYMBOLS => {
                "kernel symbols psi_period, runqueues, __per_cpu_offset (x86: \
                 __sched_clock_offset, __sched_clock_stable, sched_clock_data) not all in \
                 kallsyms (CONFIG_KALLSYMS_ALL)"
            }
            PSI_ODD_HZ => "HZ does not divide 10^6 (psi_period is not 2 s and a whole jiffy)",
            PSI_NO_RQ_CLOCK => "this CPU's rq->clock read as 0",
            PSI_CPU_LAYOUT => "unknown psi_group_cpu layout",
            _ => "unknown reason",
        };
        Some(format!(
            "cannot bring the averages to the sample's moment: {why}"
        ))
    } else {
        None
    };
    for f in pressure {
        if let Some(why) = &psi_gap {
            gap(f, why);
        }
    }
    // How fresh what BPF serves is (the plan shows it as the reason).
    reasons.push((
        StatFile::CpuStat,
        "flushed once per pass at the walk root, as a read flushes; root cgroup: text".to_owned(),
    ));
    for f in [StatFile::MemoryStat, StatFile::MemoryNumaStat] {
        reasons.push((
            f,
            "flushed once per pass at the walk root with the flush a read does (rate-limited: \
             up to ~2 s old, as the text)"
                .to_owned(),
        ));
    }
    for f in pressure {
        reasons.push((
            f,
            "as a read of the file at the pass would print them: totals with the per-CPU \
             buckets, averages decayed or updated to the pass's sched_clock (the sampling \
             CPU's scheduler clock, at most a tick old); root cgroup: text"
                .to_owned(),
        ));
    }
    for &f in StatFile::ALL {
        if !reasons.iter().any(|(g, _)| *g == f) {
            reasons.push((f, "read at the pass".to_owned()));
        }
    }
    Probe {
        capability: Ok(Support { files, reasons }),
        backend: Some(BpfBackend::new(loaded, filter)),
        gaps,
    }
}
