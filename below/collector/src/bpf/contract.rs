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

//! The contract with the BPF program, all generated from cgroup_stats.h:
//! the record layout through the libbpf-rs skeleton, the tables through
//! build.rs, which hands each X-macro list to the macro of the same name
//! below (`memstat_keys! { (anon, <C source>) ... }`). The test at the end
//! checks the enums C compiled into the object against these tables.

use crate::MemoryEvents;
use crate::MemoryEventsLocal;
use crate::MemoryNumaStat;
use crate::MemoryStat;

// The skeleton, the compiled object and the tables (at the end) are
// build.rs's output in the open-source build; fbcode builds them with buck:
// the skeleton as the crate `cgroup_stats`, the other two as the files its
// rule names in CGROUP_STATS_BPF_O and CGROUP_STATS_CONTRACT.
#[cfg(fbcode_build)]
pub(crate) use ::cgroup_stats as skel;
// libbpf-cargo's output: its unwrap()s are not ours to change.
#[cfg(not(fbcode_build))]
#[allow(clippy::unwrap_used)]
pub(crate) mod skel {
    include!(concat!(env!("OUT_DIR"), "/cgroup_stats.skel.rs"));
}

/// The compiled BPF object: what is loaded, and its BTF.
#[cfg(fbcode_build)]
pub(crate) const OBJECT: &[u8] = include_bytes!(env!("CGROUP_STATS_BPF_O"));
#[cfg(not(fbcode_build))]
pub(crate) const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cgroup_stats.bpf.o"));

pub(crate) use skel::types::numa_row as NumaRow;
pub(crate) use skel::types::record as Record;

/// Per entry, a `u32` bit in list order (`enum <tag>_flag` of C).
macro_rules! bits {
    ($mod:ident, $list:ident, $($flag:ident)*) => {
        mod $mod {
            #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
            enum Pos { $($flag,)* }
            $(pub(crate) const $flag: u32 = 1 << Pos::$flag as u32;)*
            #[cfg(test)]
            pub(crate) const $list: &[(&str, u32)] = &[$((stringify!($flag), $flag),)*];
        }
        pub(crate) use $mod::*;
    };
}

macro_rules! has_flags {
    ($(($flag:ident))*) => { bits!(has, HAS_FLAGS, $($flag)*); };
}
macro_rules! feat_flags {
    ($(($flag:ident))*) => { bits!(feat, FEAT_FLAGS, $($flag)*); };
}
macro_rules! kf_flags {
    ($(($flag:ident))*) => { bits!(kf, KF_FLAGS, $($flag)*); };
}

/// cgroup.controllers names by bit (`enum ctrl_bit`).
macro_rules! controllers {
    ($(($name:ident))*) => {
        pub(crate) const CONTROLLERS: &[&str] = &[$(stringify!($name),)*];
    };
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
    /// The struct or enum, and its member or value.
    pub(crate) ty: &'static str,
    pub(crate) member: &'static str,
    /// Stat file names, space-separated.
    pub(crate) files: &'static str,
}

/// The kernel facts: bit i of a pass's `facts` is KERNEL_FACTS[i].
macro_rules! kernel_facts {
    ($(($name:ident, $kind:ident, $ty:ident, $member:ident, $($files:literal)+))*) => {
        pub(crate) const KERNEL_FACTS: &[Fact] = &[$(Fact {
            #[cfg(test)]
            name: stringify!($name),
            kind: fact_kind!($kind),
            ty: stringify!($ty),
            member: stringify!($member),
            files: concat!($($files),+),
        },)*];
    };
}

macro_rules! fact_kind {
    (FIELD) => {
        FactKind::Field
    };
    (CPUMASK) => {
        FactKind::Cpumask
    };
    (ENUMVAL) => {
        FactKind::Enumval
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

/// memory.stat keys: `record.memstat[]` (`enum memstat_slot`).
macro_rules! memstat_keys {
    ($(($key:ident, $($c:tt)*))*) => {
        keyed_fields!(MemoryStat, fill_memory_stat, $($key)*);
        #[cfg(test)]
        pub(crate) const MEMSTAT_KEYS: &[&str] = &[$(stringify!($key),)*];
    };
}

/// memory.events keys: `record.events[]`, `.events_local[]`.
macro_rules! memcg_events {
    ($(($key:ident, $event:ident))*) => {
        keyed_fields!(MemoryEvents, fill_memory_events, $($key)*);
        keyed_fields!(MemoryEventsLocal, fill_memory_events_local, $($key)*);
        #[cfg(test)]
        pub(crate) const MEMCG_EVENT_KEYS: &[&str] = &[$(stringify!($key),)*];
    };
}

/// memcg_page_state_output_unit(): what one unit of a raw state item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Page,
    /// Bytes (slab) or plain counts (workingset events).
    One,
    KiB,
}

/// A memory.numa_stat line's `enum node_stat_item` item and unit.
pub(crate) struct NumaItem {
    pub(crate) item: &'static str,
    pub(crate) unit: Unit,
}

/// memory.numa_stat lines: `numa_row.v[]` (`enum numa_item`).
macro_rules! numa_items {
    ($(($key:ident, $item:ident, $unit:ident))*) => {
        keyed_fields!(MemoryNumaStat, fill_numa_stat, $($key)*);
        pub(crate) const NUMA_ITEMS: &[NumaItem] = &[$(NumaItem {
            item: stringify!($item),
            unit: Unit::$unit,
        },)*];
        #[cfg(test)]
        pub(crate) const NUMA_KEYS: &[&str] = &[$(stringify!($key),)*];
    };
}

#[cfg(fbcode_build)]
include!(env!("CGROUP_STATS_CONTRACT"));
#[cfg(not(fbcode_build))]
include!(concat!(env!("OUT_DIR"), "/contract.rs"));

#[cfg(test)]
pub(crate) mod tests;
