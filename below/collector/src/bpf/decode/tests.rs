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

//! Decoding synthetic records into the files' values and units: every
//! field of a full record, values the kernel lacks (ABSENT), the kernel's
//! encodings. The fixtures serve the tests of what assembles a cgroup's
//! stats from these (a record's flags, the root).

use std::collections::BTreeSet;

use super::*;
use crate::MemoryStat;

pub(crate) const PAGE: u64 = 4096;

pub(crate) fn decoder() -> Decoder {
    Decoder {
        cpus: Some(4),
        nodes: Some(2),
        page_size: PAGE,
    }
}

pub(crate) fn slot(keys: &[&str], key: &str) -> usize {
    keys.iter()
        .position(|k| *k == key)
        .expect("a key of the list")
}

/// A non-root cgroup with every controller's state.
pub(crate) fn full() -> Record {
    let mut r = Record {
        id: 42,
        parent_id: 1,
        level: 1,
        flags: CGB_HAS_MEMCG
            | CGB_HAS_MEMSTAT
            | CGB_HAS_CPU
            | CGB_HAS_PIDS
            | CGB_HAS_CPUSET
            | CGB_HAS_BSTAT,
        controllers: 0b10_1011,
        subtree_control: 0b10,
        nr_descendants: 3,
        nr_dying_descendants: 1,
        usage_ns: 4_000_000,
        utime_ns: 3_000,
        stime_ns: 1_000,
        nr_periods: 10,
        nr_throttled: 2,
        throttled_ns: 5_000,
        weight: 1024 << 10,
        quota_ns: 50_000_000,
        period_ns: 100_000_000,
        pids_current: 7,
        pids_limit: 100,
        mem_usage: 10,
        swap_usage: 2,
        mem_min: 0,
        mem_low: 1,
        mem_high: i64::MAX as u64 / PAGE,
        mem_max: 20,
        swap_max: i64::MAX as u64 / PAGE,
        zswap_max: 3,
        events: [1, 2, 3, 4, 5, 6],
        events_local: [6, 7, 8, 9, 10, 11],
        mems: 0b11,
        mems_effective: 0b101,
        ..Default::default()
    };
    r.cpus[0] = 0b1_0011;
    r.cpus_effective[0] = 0b1;
    r.memstat = std::array::from_fn(|i| 100 + i as u64);
    r.memstat[slot(MEMSTAT_KEYS, "zswap")] = ABSENT;
    r
}

pub(crate) fn set(bits: &[u32]) -> BTreeSet<u32> {
    bits.iter().copied().collect()
}

#[test]
fn full_record_decodes_in_the_files_units() {
    let (d, r) = (decoder(), full());
    let cg = cgroup_stat(&r);
    assert_eq!(
        (cg.nr_descendants, cg.nr_dying_descendants),
        (Some(3), Some(1))
    );
    assert_eq!(
        controller_names(r.controllers),
        BTreeSet::from(["cpuset", "cpu", "memory", "pids"].map(String::from))
    );

    let cpu = cpu_stat(&r, &mut PrevCputime::new());
    assert_eq!(cpu.usage_usec, Some(4000));
    assert_eq!((cpu.user_usec, cpu.system_usec), (Some(3000), Some(1000)));
    assert_eq!(
        (cpu.nr_periods, cpu.nr_throttled, cpu.throttled_usec),
        (Some(10), Some(2), Some(5))
    );
    assert_eq!(cpu_weight(r.weight), Some(100));
    let max = cpu_max(&r).expect("cpu.max");
    assert_eq!((max.max_usec, max.period_usec), (50_000, 100_000));

    assert_eq!(pids_max(&r), 100);
    assert_eq!(d.cpus(&r.cpus).unwrap().cpus, set(&[0, 1])); // bit 4 >= nr_cpu_ids
    assert_eq!(d.cpus(&r.cpus_effective).unwrap().cpus, set(&[0]));
    assert_eq!(d.mems(r.mems).unwrap().nodes, set(&[0, 1]));
    assert_eq!(d.mems(r.mems_effective).unwrap().nodes, set(&[0])); // node 2 >= nr_node_ids

    let ms = memory_stat(&r);
    assert_eq!(ms.anon, Some(100 + slot(MEMSTAT_KEYS, "anon") as u64));
    assert_eq!(ms.pgscan, Some(100 + slot(MEMSTAT_KEYS, "pgscan") as u64));
    assert_eq!(ms.zswap, None, "ABSENT");
    // Read by BPF under memory_hugetlb_accounting only (IF_HUGETLB): its slot.
    assert_eq!(ms.hugetlb, Some(100 + slot(MEMSTAT_KEYS, "hugetlb") as u64));

    assert_eq!(d.bytes(r.mem_usage), 10 * PAGE as i64);
    assert_eq!(d.limit(r.mem_min), 0);
    assert_eq!(d.limit(r.mem_low), PAGE as i64);
    assert_eq!(d.limit(r.mem_high), -1, "PAGE_COUNTER_MAX is max");
    assert_eq!(d.limit(r.mem_max), 20 * PAGE as i64);
    assert_eq!(d.zswap_max(&r), Some(3 * PAGE as i64));
    let ev = memory_events(&r);
    assert_eq!(
        (ev.low, ev.high, ev.max, ev.oom, ev.oom_kill),
        (Some(1), Some(2), Some(3), Some(4), Some(5))
    );
    let ev = memory_events_local(&r);
    assert_eq!((ev.low, ev.oom_kill), (Some(6), Some(10)));
}

#[test]
fn absent_values_are_none() {
    let mut r = full();
    // No CFS bandwidth, no zswap, pids.max and cpu.max "max".
    r.nr_periods = ABSENT;
    r.nr_throttled = ABSENT;
    r.throttled_ns = ABSENT;
    r.period_ns = ABSENT;
    r.zswap_max = ABSENT;
    r.memstat.fill(ABSENT);
    r.events.fill(ABSENT);
    let cpu = cpu_stat(&r, &mut PrevCputime::new());
    assert_eq!(
        (cpu.nr_periods, cpu.nr_throttled, cpu.throttled_usec),
        (None, None, None)
    );
    assert_eq!(cpu_max(&r), None);
    assert_eq!(decoder().zswap_max(&r), None);
    assert_eq!(memory_stat(&r), MemoryStat::default());
    assert_eq!(memory_events(&r).oom_kill, None);

    r.pids_limit = PIDS_MAX;
    r.period_ns = 100_000_000;
    r.quota_ns = RUNTIME_INF;
    assert_eq!(pids_max(&r), -1);
    assert_eq!(cpu_max(&r).expect("cpu.max").max_usec, -1);
}

#[test]
fn cputime_is_unscaled_without_prev_cputime() {
    let mut prev = PrevCputime::new();
    let mut r = full();
    r.usage_ns = 5_000_000;
    r.utime_ns = 3_000_000;
    r.stime_ns = 1_500_000;
    r.prev_utime_ns = ABSENT;
    r.prev_stime_ns = ABSENT;
    let cpu = cpu_stat(&r, &mut prev);
    assert_eq!((cpu.user_usec, cpu.system_usec), (Some(3000), Some(1500)));
    assert!(prev.is_empty());
}

#[test]
fn cputime_stays_monotonic_across_samples() {
    let mut prev = PrevCputime::new();
    let mut r = full();
    cpu_stat(&r, &mut prev);
    assert_eq!(prev[&42], (3_000_000, 1_000_000));
    // Raw ratio flips, but system time may not shrink.
    r.usage_ns = 5_000_000;
    r.utime_ns = 9_000;
    r.stime_ns = 1;
    let cpu = cpu_stat(&r, &mut prev);
    assert_eq!((cpu.user_usec, cpu.system_usec), (Some(4000), Some(1000)));
}

#[test]
fn converts_kernel_encodings() {
    assert_eq!(cpu_weight(1024 << 10), Some(100));
    assert_eq!(cpu_weight(10240 << 10), Some(1000));
    assert_eq!(cpu_weight(6 << 10), Some(1));
    // cpu.idle (WEIGHT_IDLEPRIO, 3): 0 or 1 by kernel, left to the file.
    assert_eq!(cpu_weight(3 << 10), None);
    // No task_group.shares: no overflow (a debug build would panic).
    assert_eq!(cpu_weight(ABSENT), Some(10000));
    assert_eq!(bits(&[0b101, 1], 128), BTreeSet::from([0, 2, 64]));
    assert_eq!(bits(&[0b101, 1], 2), BTreeSet::from([0]));
    assert_eq!(
        controller_names(0b1010),
        BTreeSet::from(["cpu".to_owned(), "memory".to_owned()])
    );
}

/// Masks the record cannot tell are None, for the files to give: CPUs or
/// nodes sysfs does not list, or more than the record holds.
#[test]
fn masks_it_cannot_tell_are_none() {
    let words = [1u64; CPU_WORDS];
    for (cpus, nodes) in [(None, None), (Some(CPU_WORDS * 64 + 1), Some(65))] {
        let d = Decoder {
            cpus,
            nodes,
            ..decoder()
        };
        assert_eq!(d.cpus(&words), None, "{cpus:?}");
        assert_eq!(d.mems(1), None, "{nodes:?}");
    }
    let d = Decoder {
        cpus: Some(CPU_WORDS * 64),
        nodes: Some(64),
        ..decoder()
    };
    assert_eq!(d.cpus(&words).unwrap().cpus.len(), CPU_WORDS);
    assert_eq!(d.mems(u64::MAX).unwrap().nodes.len(), 64);
}

#[test]
fn files_need_their_controller_listed() {
    let mut r = full();
    assert!(shows(&r, CGB_HAS_MEMCG, CGB_CTRL_memory));
    assert!(shows(&r, CGB_HAS_CPUSET, CGB_CTRL_cpuset));
    // io on without memory: the kernel makes a memcg, whose files hide.
    r.controllers = 1 << CGB_CTRL_io;
    assert!(!shows(&r, CGB_HAS_MEMCG, CGB_CTRL_memory));
    // Listed, without the group in the record.
    r.controllers = 1 << CGB_CTRL_memory;
    r.flags = 0;
    assert!(!shows(&r, CGB_HAS_MEMCG, CGB_CTRL_memory));
}
