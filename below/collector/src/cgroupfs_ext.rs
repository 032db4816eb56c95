//! The structs the key lists of cgroup_bpf_record.h write (the BPF record's
//! fills and the text parsers' setters): below-cgroupfs 0.9.0's, plus the
//! keys newer cgroupfs has fields for and 0.9.0 does not. Each derefs to
//! its 0.9.0 struct, so `s.anon` is 0.9.0's field and `s.swapcached` the
//! wrapper's; `into()` gives the 0.9.0 struct below's model holds.
//!
//! The crate root imports them: the shared BPF files name them `crate::`,
//! which is cgroupfs itself in below main, whose structs have every key.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::ops::DerefMut;

macro_rules! with_keys {
    ($(#[$doc:meta])* $name:ident { $($key:ident),+ }) => {
        $(#[$doc])*
        #[derive(Default, Debug, PartialEq, Eq)]
        // The contract tests read every field by name.
        #[cfg_attr(test, derive(serde::Serialize))]
        pub(crate) struct $name {
            #[cfg_attr(test, serde(flatten))]
            base: cgroupfs::$name,
            $(pub(crate) $key: Option<u64>,)+
        }

        impl Deref for $name {
            type Target = cgroupfs::$name;
            fn deref(&self) -> &Self::Target {
                &self.base
            }
        }

        impl DerefMut for $name {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.base
            }
        }

        /// below 0.9.0's model has no place for the wrapper's keys.
        impl From<$name> for cgroupfs::$name {
            fn from(s: $name) -> Self {
                s.base
            }
        }
    };
}

with_keys! {
    /// memory.stat.
    MemoryStat { swapcached, file_thp, shmem_thp, hugetlb }
}
with_keys! {
    /// memory.events.
    MemoryEvents { sock_throttled }
}
with_keys! {
    /// memory.events.local.
    MemoryEventsLocal { sock_throttled }
}
with_keys! {
    /// One node of memory.numa_stat.
    MemoryNumaStat { hugetlb }
}

/// memory.numa_stat per node as below 0.9.0's model holds it.
pub(crate) fn numa_stat_09(
    nodes: BTreeMap<u32, MemoryNumaStat>,
) -> BTreeMap<u32, cgroupfs::MemoryNumaStat> {
    nodes.into_iter().map(|(n, s)| (n, s.into())).collect()
}
