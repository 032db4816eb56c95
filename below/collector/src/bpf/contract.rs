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

//! The contract with the BPF program. cgroup_bpf_record.h is its one source:
//! bindgen turns its record, enums and constants into Rust (build.rs, as
//! below main's; fbcode: rust_bindgen_library), and the lists below name
//! each entry of a C list by its enum constant. The compiler checks each
//! list against C (every constant once, in the enum's order, named after
//! its key), so neither side can change alone.

use crate::MemoryEvents;
use crate::MemoryEventsLocal;
use crate::MemoryStat;

// libbpf-cargo's output: its unwrap()s are not ours to change.
#[cfg(not(fbcode_build))]
#[allow(clippy::unwrap_used)]
pub(crate) mod skel {
    include!(concat!(env!("OUT_DIR"), "/cgroup_bpf.skel.rs"));
}
// bindgen's output, with the lints rust_bindgen_library allows.
#[cfg(not(fbcode_build))]
#[allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all)]
mod h {
    include!(concat!(env!("OUT_DIR"), "/cgroup_bpf_record.rs"));
}

// fbcode builds the skeleton and the bindings from the same files, as
// below main's TARGETS do: the crates `cgroup_bpf` and `cgroup_bpf_record`.
#[cfg(fbcode_build)]
pub(crate) use ::cgroup_bpf as skel;
#[cfg(fbcode_build)]
use ::cgroup_bpf_record as h;

pub(crate) use h::cgroup_bpf_record as Record;
pub(crate) use h::*;

/// A value the kernel does not have (bindgen types a macro by its value:
/// `~0ULL` comes as -1).
pub(crate) const ABSENT: u64 = h::CGB_ABSENT as u64;
pub(crate) const CPU_WORDS: usize = h::CGB_CPU_WORDS as usize;

/// Whether `list` (key, the constant's name, its value) is a C enum's
/// entries `<prefix><key>` = 0, 1, ... `nr - 1`: each once, in order.
pub(crate) const fn is_c_enum(list: &[(&str, &str, u32)], prefix: &str, nr: u32) -> bool {
    if list.len() != nr as usize {
        return false;
    }
    let mut i = 0;
    while i < list.len() {
        let (key, name, value) = list[i];
        let (key, name, prefix) = (key.as_bytes(), name.as_bytes(), prefix.as_bytes());
        if value as usize != i || name.len() != prefix.len() + key.len() {
            return false;
        }
        let mut j = 0;
        while j < name.len() {
            let want = if j < prefix.len() {
                prefix[j]
            } else {
                key[j - prefix.len()]
            };
            if name[j] != want {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// `key => CONSTANT` per entry of a C list, checked at compile time
/// ([`is_c_enum`]).
macro_rules! check_c_enum {
    ($prefix:literal, $nr:expr, $($key:ident => $c:ident),*) => {
        const _: () = assert!(
            is_c_enum(&[$((stringify!($key), stringify!($c), $c)),*], $prefix, $nr),
            concat!("not the C enum of ", $prefix, "*")
        );
    };
}

/// A writer of the fields of `$ty` named by the keys from record slots in
/// list order (ABSENT: None; straight-line code, not a call per field).
macro_rules! keyed_fields {
    ($ty:ty, $fill:ident, $($key:ident)*) => {
        pub(crate) fn $fill(s: &mut $ty, slots: &[u64]) {
            let mut slots = slots.iter().copied();
            $(s.$key = slots.next().filter(|&v| v != ABSENT);)*
        }
    };
}

/// memory.stat keys: `record.memstat[]` (`enum cgroup_bpf_memstat_slot`).
macro_rules! memstat_keys {
    ($($key:ident => $c:ident,)*) => {
        check_c_enum!("CGB_MS_", CGB_NR_MS, $($key => $c),*);
        keyed_fields!(MemoryStat, fill_memory_stat, $($key)*);
        #[cfg(test)]
        pub(crate) const MEMSTAT_KEYS: &[&str] = &[$(stringify!($key),)*];
    };
}

/// The memory.stat keys in their enum's order, handed to `$m!`.
macro_rules! memstat_keys_list {
    ($m:ident) => {
        $m! {
            anon => CGB_MS_anon,
            file => CGB_MS_file,
            kernel => CGB_MS_kernel,
            kernel_stack => CGB_MS_kernel_stack,
            sock => CGB_MS_sock,
            shmem => CGB_MS_shmem,
            zswap => CGB_MS_zswap,
            zswapped => CGB_MS_zswapped,
            file_mapped => CGB_MS_file_mapped,
            file_dirty => CGB_MS_file_dirty,
            file_writeback => CGB_MS_file_writeback,
            swapcached => CGB_MS_swapcached,
            anon_thp => CGB_MS_anon_thp,
            file_thp => CGB_MS_file_thp,
            shmem_thp => CGB_MS_shmem_thp,
            inactive_anon => CGB_MS_inactive_anon,
            active_anon => CGB_MS_active_anon,
            inactive_file => CGB_MS_inactive_file,
            active_file => CGB_MS_active_file,
            unevictable => CGB_MS_unevictable,
            hugetlb => CGB_MS_hugetlb,
            slab_reclaimable => CGB_MS_slab_reclaimable,
            slab_unreclaimable => CGB_MS_slab_unreclaimable,
            slab => CGB_MS_slab,
            pgfault => CGB_MS_pgfault,
            pgmajfault => CGB_MS_pgmajfault,
            workingset_refault_anon => CGB_MS_workingset_refault_anon,
            workingset_refault_file => CGB_MS_workingset_refault_file,
            workingset_activate_anon => CGB_MS_workingset_activate_anon,
            workingset_activate_file => CGB_MS_workingset_activate_file,
            workingset_restore_anon => CGB_MS_workingset_restore_anon,
            workingset_restore_file => CGB_MS_workingset_restore_file,
            workingset_nodereclaim => CGB_MS_workingset_nodereclaim,
            pgrefill => CGB_MS_pgrefill,
            pgscan => CGB_MS_pgscan,
            pgsteal => CGB_MS_pgsteal,
            pgactivate => CGB_MS_pgactivate,
            pgdeactivate => CGB_MS_pgdeactivate,
            pglazyfree => CGB_MS_pglazyfree,
            pglazyfreed => CGB_MS_pglazyfreed,
            thp_fault_alloc => CGB_MS_thp_fault_alloc,
            thp_collapse_alloc => CGB_MS_thp_collapse_alloc,
        }
    };
}
memstat_keys_list!(memstat_keys);

/// memory.events keys: `record.events[]`, `.events_local[]`
/// (`enum cgroup_bpf_memcg_event`).
macro_rules! memcg_events {
    ($($key:ident => $c:ident,)*) => {
        check_c_enum!("CGB_EV_", CGB_NR_EVENTS, $($key => $c),*);
        keyed_fields!(MemoryEvents, fill_memory_events, $($key)*);
        keyed_fields!(MemoryEventsLocal, fill_memory_events_local, $($key)*);
        #[cfg(test)]
        pub(crate) const MEMCG_EVENT_KEYS: &[&str] = &[$(stringify!($key),)*];
    };
}

/// The memory.events keys in their enum's order, handed to `$m!`.
macro_rules! memcg_events_list {
    ($m:ident) => {
        $m! {
            low => CGB_EV_low,
            high => CGB_EV_high,
            max => CGB_EV_max,
            oom => CGB_EV_oom,
            oom_kill => CGB_EV_oom_kill,
            sock_throttled => CGB_EV_sock_throttled,
        }
    };
}
memcg_events_list!(memcg_events);

/// cgroup.controllers names by bit (`enum cgroup_bpf_ctrl_bit`).
macro_rules! controllers {
    ($($name:ident => $c:ident,)*) => {
        check_c_enum!("CGB_CTRL_", CGB_NR_CTRL, $($name => $c),*);
        pub(crate) const CONTROLLERS: &[&str] = &[$(stringify!($name),)*];
    };
}
controllers! {
    cpuset => CGB_CTRL_cpuset,
    cpu => CGB_CTRL_cpu,
    io => CGB_CTRL_io,
    memory => CGB_CTRL_memory,
    hugetlb => CGB_CTRL_hugetlb,
    pids => CGB_CTRL_pids,
    rdma => CGB_CTRL_rdma,
    misc => CGB_CTRL_misc,
    dmem => CGB_CTRL_dmem,
}

/// How the program checks a kernel fact (KERNEL_FACTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FactKind {
    /// A member of a struct.
    Field,
    /// A struct member that is a cpumask_var_t (pointer or embedded).
    Cpumask,
    /// A value of an enum.
    Enumval,
}

/// What the program reads beyond the basics, and the files that need it.
pub(crate) struct Fact {
    /// As in C: the tests' handle on it.
    #[cfg(test)]
    pub(crate) name: &'static str,
    pub(crate) kind: FactKind,
    /// The struct or enum, and its member or value (C's KERNEL_FACTS; the
    /// test at the end finds them in the object).
    pub(crate) ty: &'static str,
    pub(crate) member: &'static str,
    /// Stat file names, space-separated.
    pub(crate) files: &'static str,
}

/// The kernel facts: bit CGB_FACT_fact of a pass's `facts` is KERNEL_FACTS[i].
macro_rules! kernel_facts {
    ($($name:ident => $c:ident: $kind:ident, $ty:ident.$member:ident, $($files:literal)+,)*) => {
        check_c_enum!("CGB_FACT_", CGB_NR_FACTS, $($name => $c),*);
        pub(crate) const KERNEL_FACTS: &[Fact] = &[$(Fact {
            #[cfg(test)]
            name: stringify!($name),
            kind: FactKind::$kind,
            ty: stringify!($ty),
            member: stringify!($member),
            files: concat!($($files),+),
        },)*];
    };
}
kernel_facts! {
    cpu_ctrl => CGB_FACT_cpu_ctrl: Enumval, cgroup_subsys_id.cpu_cgrp_id, "cpu.weight cpu.max",
    cpu_shares => CGB_FACT_cpu_shares: Field, task_group.shares, "cpu.weight",
    cpu_bandwidth => CGB_FACT_cpu_bandwidth: Field, task_group.cfs_bandwidth, "cpu.max cpu.stat",
    cfs_period => CGB_FACT_cfs_period: Field, cfs_bandwidth.period, "cpu.max",
    cfs_quota => CGB_FACT_cfs_quota: Field, cfs_bandwidth.quota, "cpu.max",
    cfs_nr_periods => CGB_FACT_cfs_nr_periods: Field, cfs_bandwidth.nr_periods, "cpu.stat",
    cfs_nr_throttled => CGB_FACT_cfs_nr_throttled: Field, cfs_bandwidth.nr_throttled, "cpu.stat",
    cfs_throttled_time => CGB_FACT_cfs_throttled_time: Field, cfs_bandwidth.throttled_time, "cpu.stat",
    pids_ctrl => CGB_FACT_pids_ctrl: Enumval, cgroup_subsys_id.pids_cgrp_id, "pids.current pids.max",
    pids_counter => CGB_FACT_pids_counter: Field, pids_cgroup.counter, "pids.current",
    pids_limit => CGB_FACT_pids_limit: Field, pids_cgroup.limit, "pids.max",
    cpuset_ctrl => CGB_FACT_cpuset_ctrl: Enumval, cgroup_subsys_id.cpuset_cgrp_id,
        "cpuset.cpus cpuset.cpus.effective cpuset.mems cpuset.mems.effective",
    cpuset_cpus => CGB_FACT_cpuset_cpus: Cpumask, cpuset.cpus_allowed, "cpuset.cpus",
    cpuset_cpus_effective => CGB_FACT_cpuset_cpus_effective: Cpumask, cpuset.effective_cpus,
        "cpuset.cpus.effective",
    cpuset_mems => CGB_FACT_cpuset_mems: Field, cpuset.mems_allowed, "cpuset.mems",
    cpuset_mems_effective => CGB_FACT_cpuset_mems_effective: Field, cpuset.effective_mems,
        "cpuset.mems.effective",
    memory_ctrl => CGB_FACT_memory_ctrl: Enumval, cgroup_subsys_id.memory_cgrp_id,
        "memory.current memory.stat memory.swap.current memory.min memory.low memory.high "
        "memory.max memory.swap.max memory.zswap.max memory.zswap.writeback memory.events "
        "memory.events.local",
    memcg_memory => CGB_FACT_memcg_memory: Field, mem_cgroup.memory,
        "memory.current memory.min memory.low memory.high memory.max",
    memcg_swap => CGB_FACT_memcg_swap: Field, mem_cgroup.swap, "memory.swap.current memory.swap.max",
    memcg_zswap_max => CGB_FACT_memcg_zswap_max: Field, mem_cgroup.zswap_max, "memory.zswap.max",
    memcg_zswap_writeback => CGB_FACT_memcg_zswap_writeback: Field, mem_cgroup.zswap_writeback,
        "memory.zswap.writeback",
    page_counter_usage => CGB_FACT_page_counter_usage: Field, page_counter.usage,
        "memory.current memory.swap.current",
    page_counter_min => CGB_FACT_page_counter_min: Field, page_counter.min, "memory.min",
    page_counter_low => CGB_FACT_page_counter_low: Field, page_counter.low, "memory.low",
    page_counter_high => CGB_FACT_page_counter_high: Field, page_counter.high, "memory.high",
    page_counter_max => CGB_FACT_page_counter_max: Field, page_counter.max,
        "memory.max memory.swap.max",
    memcg_events => CGB_FACT_memcg_events: Field, mem_cgroup.memory_events, "memory.events",
    memcg_events_local => CGB_FACT_memcg_events_local: Field, mem_cgroup.memory_events_local,
        "memory.events.local",
}
const _: () = assert!(KERNEL_FACTS.len() <= 64, "facts is a u64");

#[cfg(test)]
pub(crate) mod tests;
