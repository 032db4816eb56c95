//! What a backend serves, in a sample's terms: the plan's files, the
//! `CgroupSample` field each fills, and samples by cgroup path.

use std::collections::BTreeMap;

use bstats_collector::BackendChoice;
use bstats_collector::BackendKind;
use bstats_collector::CgroupCollector;
use bstats_collector::FileSet;
use bstats_collector::FlatSample;
use bstats_collector::StatFile;

pub fn by_path(s: &FlatSample) -> BTreeMap<String, &model::CgroupSample> {
    (0..s.nodes.len())
        .map(|i| (s.path_of(i), &s.nodes[i].sample))
        .collect()
}

/// The backend a check is about: streams for `stream`, BPF otherwise.
pub fn kind_of(backend: BackendChoice) -> BackendKind {
    match backend {
        BackendChoice::Stream => BackendKind::Stream,
        _ => BackendKind::Bpf,
    }
}

/// The files `c` reads each sample that its plan gives to `kind`.
pub fn served(c: &CgroupCollector, kind: BackendKind) -> FileSet {
    c.plan().files_of(kind).intersection(c.wanted())
}

/// The CgroupSample field a file fills.
pub fn field_of(f: StatFile) -> &'static str {
    match f {
        StatFile::CpuStat => "cpu_stat",
        StatFile::IoStat => "io_stat",
        StatFile::PidsCurrent => "tids_current",
        StatFile::PidsMax => "tids_max",
        StatFile::MemoryCurrent => "memory_current",
        StatFile::MemoryStat => "memory_stat",
        StatFile::CpuPressure | StatFile::IoPressure | StatFile::MemoryPressure => "pressure",
        StatFile::MemorySwapCurrent => "memory_swap_current",
        StatFile::MemoryMin => "memory_min",
        StatFile::MemoryLow => "memory_low",
        StatFile::MemoryHigh => "memory_high",
        StatFile::MemoryMax => "memory_max",
        StatFile::MemorySwapMax => "memory_swap_max",
        StatFile::MemoryZswapMax => "memory_zswap_max",
        StatFile::MemoryEvents => "memory_events",
        StatFile::MemoryEventsLocal => "memory_events_local",
        StatFile::CgroupStat => "cgroup_stat",
        StatFile::MemoryNumaStat => "memory_numa_stat",
        StatFile::CpusetCpus => "cpuset_cpus",
        StatFile::CpusetCpusEffective => "cpuset_cpus_effective",
        StatFile::CpusetMems => "cpuset_mems",
        StatFile::CpusetMemsEffective => "cpuset_mems_effective",
        StatFile::CpuWeight => "cpu_weight",
        StatFile::CpuMax => "cpu_max",
        StatFile::CgroupControllers => "cgroup_controllers",
        StatFile::CgroupSubtreeControl => "cgroup_subtree_control",
    }
}

/// The file a value of a sample came from, by its dotted path in the
/// sample's JSON ("memory_stat.anon", "pressure.io.some.avg10").
pub fn file_of_value(path: &str) -> Option<StatFile> {
    let mut parts = path.split('.');
    let field = parts.next()?;
    if field == "pressure" {
        return match parts.next()? {
            "cpu" => Some(StatFile::CpuPressure),
            "io" => Some(StatFile::IoPressure),
            "memory" => Some(StatFile::MemoryPressure),
            _ => None,
        };
    }
    StatFile::ALL
        .iter()
        .copied()
        .find(|f| !f.is_pressure() && field_of(*f) == field)
}
