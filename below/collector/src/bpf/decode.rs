// Copyright (c) Facebook, Inc. and its affiliates.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! From a record to cgroupfs's stat structs: plain functions over the
//! record's bytes, in the units and encodings the text files use. Nothing
//! here needs a loaded program (tests build records by hand).

use std::collections::BTreeSet;
use std::collections::HashMap;

use cgroupfs::CgroupStat;
use cgroupfs::CpuMax;
use cgroupfs::CpuStat;
use cgroupfs::Cpuset;
use cgroupfs::MemNodes;

use super::contract::*;
use super::cputime::cputime_adjust;
use super::kernel::LoadConfig;
use super::layer;
use crate::MemoryEvents;
use crate::MemoryEventsLocal;
use crate::MemoryStat;

/// `PID_MAX_LIMIT + 1` on 64-bit kernels without CONFIG_BASE_SMALL (the
/// only ones the program is built and tested for): pids.max prints "max"
/// at or above it.
pub(crate) const PIDS_MAX: u64 = 4 * 1024 * 1024 + 1;
/// cfs_bandwidth quota without a limit.
pub(crate) const RUNTIME_INF: u64 = u64::MAX;

/// What decoding needs besides the record: the load config.
pub(crate) struct Decoder {
    /// nr_cpu_ids, nr_node_ids: mask bits past them are not shown; None
    /// where sysfs does not list them.
    pub(crate) cpus: Option<usize>,
    pub(crate) nodes: Option<usize>,
    pub(crate) page_size: u64,
}

/// Last scaled (utime, stime) per cgroup id: the split the next sample
/// starts from unless a text reader moved the kernel's past it.
pub(crate) type PrevCputime = HashMap<u64, (u64, u64)>;

impl Decoder {
    /// For the records of a pass: the config the program was loaded with.
    pub(crate) fn new(config: &LoadConfig) -> Self {
        Decoder {
            cpus: config.cpus,
            nodes: config.nodes,
            page_size: layer::page_size(),
        }
    }

    /// cpuset.cpus(.effective) from its mask words; None where the
    /// record cannot tell (CPUs unknown, or more than it holds).
    pub(crate) fn cpus(&self, words: &[u64]) -> Option<Cpuset> {
        let cpus = self.cpus.filter(|&n| n <= CPU_WORDS * 64)?;
        Some(Cpuset {
            cpus: bits(words, cpus),
        })
    }

    /// cpuset.mems(.effective) from its mask; None as for [`Self::cpus`].
    pub(crate) fn mems(&self, word: u64) -> Option<MemNodes> {
        let nodes = self.nodes.filter(|&n| n <= 64)?;
        Some(MemNodes {
            nodes: bits(&[word], nodes),
        })
    }

    /// Bytes of a page counter (pages), or -1 for "max" (PAGE_COUNTER_MAX).
    pub(crate) fn limit(&self, pages: u64) -> i64 {
        if pages == i64::MAX as u64 / self.page_size {
            -1
        } else {
            self.bytes(pages)
        }
    }

    /// memory.zswap.max, if the kernel has it.
    pub(crate) fn zswap_max(&self, r: &Record) -> Option<i64> {
        (r.zswap_max != ABSENT).then(|| self.limit(r.zswap_max))
    }

    /// Bytes of a page count.
    pub(crate) fn bytes(&self, pages: u64) -> i64 {
        i64::try_from(pages.saturating_mul(self.page_size)).unwrap_or(i64::MAX)
    }
}

/// Whether the record holds the groups of `flag` (a CGB_HAS_* bit).
pub(crate) fn has(r: &Record, flag: u32) -> bool {
    r.flags & flag != 0
}

pub(crate) fn cgroup_stat(r: &Record) -> CgroupStat {
    CgroupStat {
        nr_descendants: Some(r.nr_descendants),
        nr_dying_descendants: Some(r.nr_dying_descendants),
    }
}

/// pids.max: -1 for "max".
pub(crate) fn pids_max(r: &Record) -> i64 {
    if r.pids_limit >= PIDS_MAX {
        -1
    } else {
        r.pids_limit as i64
    }
}

/// cpu.max, if the kernel has cfs bandwidth.
pub(crate) fn cpu_max(r: &Record) -> Option<CpuMax> {
    (r.period_ns != ABSENT).then_some(CpuMax {
        max_usec: if r.quota_ns == RUNTIME_INF {
            -1
        } else {
            (r.quota_ns / 1000) as i64
        },
        period_usec: r.period_ns / 1000,
    })
}

pub(crate) fn memory_events(r: &Record) -> MemoryEvents {
    filled(fill_memory_events, &r.events)
}

pub(crate) fn memory_events_local(r: &Record) -> MemoryEventsLocal {
    filled(fill_memory_events_local, &r.events_local)
}

pub(crate) fn memory_stat(r: &Record) -> MemoryStat {
    filled(fill_memory_stat, &r.memstat)
}

/// A below struct from record slots through its contract writer.
fn filled<T: Default>(fill: fn(&mut T, &[u64]), slots: &[u64]) -> T {
    let mut s = T::default();
    fill(&mut s, slots);
    s
}

pub(crate) fn cpu_stat(r: &Record, prev: &mut PrevCputime) -> CpuStat {
    let (utime, stime) = if r.prev_utime_ns == ABSENT {
        // No prev_cputime (CONFIG_VIRT_CPU_ACCOUNTING_NATIVE): the file
        // shows the times unscaled.
        (r.utime_ns, r.stime_ns)
    } else {
        // Start from the newer of the kernel's prev_cputime (moved by text
        // readers) and ours, as the text would: a text reader's newer split
        // may have a part below ours, and the file then prints it too.
        let kernel = (r.prev_utime_ns, r.prev_stime_ns);
        let ours = prev.entry(r.id).or_insert(kernel);
        let start = match *ours {
            o if o.0 + o.1 > kernel.0 + kernel.1 => o,
            _ => kernel,
        };
        *ours = cputime_adjust(r.usage_ns, r.utime_ns, r.stime_ns, start);
        *ours
    };
    let extra = |v: u64| (r.flags & CGB_HAS_CPU != 0 && v != ABSENT).then_some(v);
    CpuStat {
        usage_usec: Some(r.usage_ns / 1000),
        user_usec: Some(utime / 1000),
        system_usec: Some(stime / 1000),
        nr_periods: extra(r.nr_periods),
        nr_throttled: extra(r.nr_throttled),
        throttled_usec: extra(r.throttled_ns).map(|v| v / 1000),
    }
}

/// cpu.weight, as the kernel prints scale_load_down(shares). None where
/// that rounds to 0 (a cpu.idle group): some kernels print 0, later ones
/// clamp it to 1 (sched_weight_to_cgroup()), and BTF does not tell which,
/// so that cgroup's file is read. Saturating: ABSENT (no
/// task_group.shares) decodes without overflow, and the caller leaves the
/// file to the reader.
pub(crate) fn cpu_weight(shares: u64) -> Option<u32> {
    let w = if shares == 0 {
        0
    } else {
        (shares >> 10).max(2)
    };
    let weight = w.saturating_mul(100).saturating_add(512) / 1024;
    (weight > 0).then(|| weight.min(10000) as u32)
}

/// Whether the cgroup shows the files of the record's group `flag`, of
/// the controller `ctrl` (a CGB_CTRL_* bit): the record has the group, and
/// cgroup.controllers lists the controller. A css the kernel keeps without
/// that shows no files: a memcg made because io depends on memory, a
/// controller being disabled, the root's of one disabled at boot.
pub(crate) fn shows(r: &Record, flag: u32, ctrl: u32) -> bool {
    has(r, flag) && r.controllers & (1 << ctrl) != 0
}

pub(crate) fn controller_names(mask: u32) -> BTreeSet<String> {
    CONTROLLERS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| (*n).to_owned())
        .collect()
}

/// Set bits below `limit`.
pub(crate) fn bits(words: &[u64], limit: usize) -> BTreeSet<u32> {
    (0..limit.min(words.len() * 64))
        .filter(|&b| words[b / 64] & (1 << (b % 64)) != 0)
        .map(|b| b as u32)
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
