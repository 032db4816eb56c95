//! A record as below 0.9's `CgroupSample`, and its top-N value: the files
//! the plan gives BPF, decoded (decode.rs, the record's side shared with
//! below main) where the record holds them.

use std::collections::BTreeSet;

use cgroupfs::Cpuset;
use cgroupfs::MemNodes;
use model::CgroupSample;

use super::contract::*;
use super::decode;
use super::decode::*;
use super::numa::NumaRow;
use super::numa::HAS_NUMA;
use super::program::NumaRows;
use super::psi::PressureRow;
use super::psi::PsiPass;
use super::psi::PsiRows;
use super::psi::HAS_PSI;
use crate::cgroupfs_ext::numa_stat_09;
use crate::FileSet;
use crate::StatFile;
use crate::TopBy;

/// `s` becomes the sample of `files` the record (with its numa rows where
/// the pass read them, and its pressure row with the pass's pressure state
/// where the program has pressure) holds. The root's
/// cpu.stat and pressure are left out (the kernel fills them from
/// system-wide state). Of what `s` held before, only the sets that still
/// have the same members are kept (not allocated again); every other
/// field is the record's or `None`, and `children` is left to the tree.
pub(crate) fn fill(
    d: &Decoder,
    r: &Record,
    numa: Option<(&NumaRows, &[NumaRow])>,
    psi: Option<(&PsiPass, &PressureRow)>,
    files: FileSet,
    prev: &mut PrevCputime,
    s: &mut CgroupSample,
) {
    // Each field is written where it is: the pattern names every one
    // (no `..`), so a field below adds fails to compile until set here.
    let CgroupSample {
        cpu_stat,
        io_stat,
        tids_current,
        tids_max,
        memory_current,
        memory_stat,
        pressure,
        children: _,
        memory_swap_current,
        memory_zswap_current,
        memory_min,
        memory_low,
        memory_high,
        memory_max,
        memory_swap_max,
        memory_zswap_max,
        memory_events,
        memory_events_local,
        inode_number,
        cgroup_stat,
        memory_numa_stat,
        cpuset_cpus,
        cpuset_cpus_effective,
        cpuset_mems,
        cpuset_mems_effective,
        cpu_weight,
        cpu_max,
        cgroup_controllers,
        cgroup_subtree_control,
    } = s;
    let want = |f| files.contains(f);
    let has = |flag| has(r, flag);
    let root = r.level == 0;
    // Read as text for the root (RootText).
    let root_text = |f| root && super::ROOT_AS_TEXT.contains(&f);
    *inode_number = Some(r.id as i64);
    *cgroup_stat = want(StatFile::CgroupStat).then(|| decode::cgroup_stat(r));
    *cgroup_controllers = want(StatFile::CgroupControllers)
        .then(|| controllers(r.controllers, cgroup_controllers.take()));
    *cgroup_subtree_control = want(StatFile::CgroupSubtreeControl)
        .then(|| controllers(r.subtree_control, cgroup_subtree_control.take()));
    *cpu_stat = (want(StatFile::CpuStat) && !root_text(StatFile::CpuStat) && has(CGB_HAS_BSTAT))
        .then(|| decode::cpu_stat(r, prev));
    *pressure = psi
        .filter(|(pass, row)| {
            want(StatFile::CpuPressure)
                && !root_text(StatFile::CpuPressure)
                && has(HAS_PSI)
                && pass.exact(r, row)
        })
        .map(|(pass, row)| pass.pressure(row));
    let pids = !root && decode::shows(r, CGB_HAS_PIDS, CGB_CTRL_pids);
    *tids_current = (pids && want(StatFile::PidsCurrent)).then_some(r.pids_current);
    *tids_max = (pids && want(StatFile::PidsMax)).then(|| pids_max(r));
    let cpu = !root && decode::shows(r, CGB_HAS_CPU, CGB_CTRL_cpu);
    *cpu_weight = (cpu && want(StatFile::CpuWeight))
        .then(|| decode::cpu_weight(r.weight))
        .flatten();
    *cpu_max = (cpu && want(StatFile::CpuMax))
        .then(|| decode::cpu_max(r))
        .flatten();
    let cpuset = |f| decode::shows(r, CGB_HAS_CPUSET, CGB_CTRL_cpuset) && want(f);
    // Served only where the masks are known to fit (probe), so the
    // decoder always tells them.
    let cpus = |words: &[u64], old: Option<Cpuset>| match (old, d.cpus) {
        (Some(o), Some(n)) if same_bits(&o.cpus, words, n) => Some(o),
        _ => d.cpus(words),
    };
    let mems = |word: u64, old: Option<MemNodes>| match (old, d.nodes) {
        (Some(o), Some(n)) if same_bits(&o.nodes, &[word], n) => Some(o),
        _ => d.mems(word),
    };
    *cpuset_cpus = (cpuset(StatFile::CpusetCpus) && !root)
        .then(|| cpus(&r.cpus, cpuset_cpus.take()))
        .flatten();
    *cpuset_cpus_effective = cpuset(StatFile::CpusetCpusEffective)
        .then(|| cpus(&r.cpus_effective, cpuset_cpus_effective.take()))
        .flatten();
    *cpuset_mems = (cpuset(StatFile::CpusetMems) && !root)
        .then(|| mems(r.mems, cpuset_mems.take()))
        .flatten();
    *cpuset_mems_effective = cpuset(StatFile::CpusetMemsEffective)
        .then(|| mems(r.mems_effective, cpuset_mems_effective.take()))
        .flatten();
    let memory_files = decode::shows(r, CGB_HAS_MEMCG, CGB_CTRL_memory);
    *memory_stat = (want(StatFile::MemoryStat) && memory_files && has(CGB_HAS_MEMSTAT))
        .then(|| decode::memory_stat(r).into());
    *memory_numa_stat = numa
        .filter(|_| want(StatFile::MemoryNumaStat) && memory_files && has(HAS_NUMA))
        .map(|(pass, rows)| numa_stat_09(pass.numa.stat(rows, pass.memory_nodes, d.page_size)));
    // The memcg's page counters and event arrays.
    let memcg = |f| !root && memory_files && want(f);
    *memory_current = memcg(StatFile::MemoryCurrent).then(|| d.bytes(r.mem_usage));
    *memory_swap_current = memcg(StatFile::MemorySwapCurrent).then(|| d.bytes(r.swap_usage));
    *memory_min = memcg(StatFile::MemoryMin).then(|| d.limit(r.mem_min));
    *memory_low = memcg(StatFile::MemoryLow).then(|| d.limit(r.mem_low));
    *memory_high = memcg(StatFile::MemoryHigh).then(|| d.limit(r.mem_high));
    *memory_max = memcg(StatFile::MemoryMax).then(|| d.limit(r.mem_max));
    *memory_swap_max = memcg(StatFile::MemorySwapMax).then(|| d.limit(r.swap_max));
    *memory_zswap_max = memcg(StatFile::MemoryZswapMax)
        .then(|| d.zswap_max(r))
        .flatten();
    *memory_events = memcg(StatFile::MemoryEvents).then(|| decode::memory_events(r).into());
    *memory_events_local =
        memcg(StatFile::MemoryEventsLocal).then(|| decode::memory_events_local(r).into());
    // Not in the record: text files fill them after this.
    *io_stat = None;
    *memory_zswap_current = None;
}

/// The value top-N ranks `r` by, in the units of [`TopBy::value`];
/// `None` for what the record does not hold (io.stat) or the cgroup
/// does not have. The root is never ranked.
/// `pressure`: its pressure row, where the program has pressure.
pub(crate) fn rank_value(
    d: &Decoder,
    r: &Record,
    pressure: Option<&PressureRow>,
    by: TopBy,
) -> Option<u64> {
    let has = |flag| has(r, flag) && r.level != 0;
    match by {
        TopBy::Cpu => has(CGB_HAS_BSTAT).then_some(r.usage_ns / 1000),
        // ABSENT: a kernel whose page counter the program cannot read.
        TopBy::Memory => (r.level != 0
            && decode::shows(r, CGB_HAS_MEMCG, CGB_CTRL_memory)
            && r.mem_usage != ABSENT)
            .then(|| r.mem_usage * d.page_size),
        TopBy::Pressure => pressure.filter(|_| has(HAS_PSI)).map(|p| {
            let t = PsiRows::from_fn(|i| p.total_ns[i] / 1000);
            t.cpu_some + t.io_some + t.memory_some
        }),
        TopBy::Io => None,
    }
}

/// `old` if it names the controllers of `mask`, else the names of `mask`.
fn controllers(mask: u32, old: Option<BTreeSet<String>>) -> BTreeSet<String> {
    let in_mask = |name: &String| {
        (CONTROLLERS.iter().position(|c| c == name)).is_some_and(|i| mask & (1 << i) != 0)
    };
    match old {
        Some(o) if o.len() == mask.count_ones() as usize && o.iter().all(in_mask) => o,
        _ => controller_names(mask),
    }
}

/// Whether `set` holds exactly the bits of `words` below `limit`.
fn same_bits(set: &BTreeSet<u32>, words: &[u64], limit: usize) -> bool {
    let is_set =
        |b: usize| b < limit && words.get(b / 64).is_some_and(|w| w & (1 << (b % 64)) != 0);
    let (whole, part) = (limit / 64, limit % 64);
    let count: u32 = words
        .iter()
        .take(whole)
        .map(|w| w.count_ones())
        .sum::<u32>()
        + words
            .get(whole)
            .map_or(0, |w| (w & ((1u64 << part) - 1)).count_ones());
    set.len() == count as usize && set.iter().all(|&b| is_set(b as usize))
}

#[cfg(test)]
#[path = "fill_test.rs"]
mod test;
