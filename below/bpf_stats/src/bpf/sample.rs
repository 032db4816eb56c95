//! A record as below 0.9's `CgroupSample`, and its top-N value: the files
//! the plan gives BPF, decoded (decode.rs) where the record holds them.

use std::collections::BTreeSet;

use cgroupfs::Cpuset;
use cgroupfs::MemNodes;
use model::CgroupSample;

use super::contract::*;
use super::decode::*;
use crate::FileSet;
use crate::StatFile;
use crate::TopBy;

impl Decoder {
    /// `s` becomes the sample of `files` the record holds. The root's
    /// cpu.stat and pressure are left out (the kernel fills them from
    /// system-wide state). Of what `s` held before, only the sets that still
    /// have the same members are kept (not allocated again); every other
    /// field is the record's or `None`.
    pub(crate) fn fill(
        &self,
        r: &Record,
        files: FileSet,
        prev: &mut PrevCputime,
        s: &mut CgroupSample,
    ) {
        let mut old = std::mem::take(s);
        let want = |f| files.contains(f);
        let has = |flag| has(r, flag);
        let root = r.level == 0;
        s.inode_number = Some(r.id as i64);
        if want(StatFile::CgroupStat) {
            s.cgroup_stat = Some(cgroup_stat(r));
        }
        if want(StatFile::CgroupControllers) {
            s.cgroup_controllers = Some(controllers(r.controllers, old.cgroup_controllers.take()));
        }
        if want(StatFile::CgroupSubtreeControl) {
            s.cgroup_subtree_control = Some(controllers(
                r.subtree_control,
                old.cgroup_subtree_control.take(),
            ));
        }
        if want(StatFile::CpuStat) && !root && has(HAS_BSTAT) {
            s.cpu_stat = Some(cpu_stat(r, prev));
        }
        if want(StatFile::CpuPressure) && !root && has(HAS_PSI) {
            s.pressure = Some(pressure(r));
        }
        if !root && has(HAS_PIDS) {
            if want(StatFile::PidsCurrent) {
                s.tids_current = Some(r.pids_current);
            }
            if want(StatFile::PidsMax) {
                s.tids_max = Some(pids_max(r));
            }
        }
        if !root && has(HAS_CPU) {
            if want(StatFile::CpuWeight) {
                s.cpu_weight = Some(cpu_weight(r.weight));
            }
            if want(StatFile::CpuMax) {
                s.cpu_max = cpu_max(r);
            }
        }
        if has(HAS_CPUSET) {
            self.cpuset(r, files, s, &mut old);
        }
        if want(StatFile::MemoryStat) && has(HAS_MEMSTAT) {
            s.memory_stat = Some(memory_stat(r));
        }
        if want(StatFile::MemoryNumaStat) && has(HAS_NUMA) {
            s.memory_numa_stat = self.numa_stat(r);
        }
        if !root && has(HAS_MEMCG) {
            self.memcg(r, files, s);
        }
    }

    /// The value top-N ranks `r` by, in the units of [`TopBy::value`];
    /// `None` for what the record does not hold (io.stat) or the cgroup
    /// does not have. The root is never ranked.
    pub(crate) fn rank_value(&self, r: &Record, by: TopBy) -> Option<u64> {
        let has = |flag| has(r, flag) && r.level != 0;
        match by {
            TopBy::Cpu => has(HAS_BSTAT).then_some(r.usage_ns / 1000),
            TopBy::Memory => has(HAS_MEMCG).then(|| r.mem_usage * self.page_size),
            TopBy::Pressure => has(HAS_PSI).then(|| {
                let t = PsiRows::from_fn(|i| r.psi_total_ns[i] / 1000);
                t.cpu_some + t.io_some + t.memory_some
            }),
            TopBy::Io => None,
        }
    }

    fn cpuset(&self, r: &Record, files: FileSet, s: &mut CgroupSample, old: &mut CgroupSample) {
        let root = r.level == 0;
        let cpus = |words: &[u64], old: Option<Cpuset>| match old {
            Some(o) if same_bits(&o.cpus, words, self.cpus) => o,
            _ => self.cpus(words),
        };
        let mems = |word: u64, old: Option<MemNodes>| match old {
            Some(o) if same_bits(&o.nodes, &[word], self.nodes) => o,
            _ => self.mems(word),
        };
        if files.contains(StatFile::CpusetCpus) && !root {
            s.cpuset_cpus = Some(cpus(&r.cpus, old.cpuset_cpus.take()));
        }
        if files.contains(StatFile::CpusetCpusEffective) {
            s.cpuset_cpus_effective =
                Some(cpus(&r.cpus_effective, old.cpuset_cpus_effective.take()));
        }
        if files.contains(StatFile::CpusetMems) && !root {
            s.cpuset_mems = Some(mems(r.mems, old.cpuset_mems.take()));
        }
        if files.contains(StatFile::CpusetMemsEffective) {
            s.cpuset_mems_effective =
                Some(mems(r.mems_effective, old.cpuset_mems_effective.take()));
        }
    }

    /// The memcg's page counters and event arrays.
    fn memcg(&self, r: &Record, files: FileSet, s: &mut CgroupSample) {
        let want = |f| files.contains(f);
        if want(StatFile::MemoryCurrent) {
            s.memory_current = Some(self.bytes(r.mem_usage));
        }
        if want(StatFile::MemorySwapCurrent) {
            s.memory_swap_current = Some(self.bytes(r.swap_usage));
        }
        if want(StatFile::MemoryMin) {
            s.memory_min = Some(self.limit(r.mem_min));
        }
        if want(StatFile::MemoryLow) {
            s.memory_low = Some(self.limit(r.mem_low));
        }
        if want(StatFile::MemoryHigh) {
            s.memory_high = Some(self.limit(r.mem_high));
        }
        if want(StatFile::MemoryMax) {
            s.memory_max = Some(self.limit(r.mem_max));
        }
        if want(StatFile::MemorySwapMax) {
            s.memory_swap_max = Some(self.limit(r.swap_max));
        }
        if want(StatFile::MemoryZswapMax) {
            s.memory_zswap_max = self.zswap_max(r);
        }
        if want(StatFile::MemoryEvents) {
            s.memory_events = Some(memory_events(r));
        }
        if want(StatFile::MemoryEventsLocal) {
            s.memory_events_local = Some(memory_events_local(r));
        }
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
#[path = "sample_test.rs"]
mod test;
