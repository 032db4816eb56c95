//! Setters by key for the text files whose keys are lists of
//! cgroup_bpf_record.h (memory.stat, memory.events[.local], memory.numa_stat),
//! from the lists the record's fills are made of (contract.rs's and
//! numa.rs's `*_list!` macros): the text and the record name the same fields.

use crate::cgroupfs_ext::MemoryEvents;
use crate::cgroupfs_ext::MemoryEventsLocal;
use crate::cgroupfs_ext::MemoryNumaStat;
use crate::cgroupfs_ext::MemoryStat;

/// `$set(s, key, v)` sets the field of `$ty` that `key` names; false for a
/// key not in the list.
macro_rules! setter {
    ($set:ident, $ty:ty, $($key:ident)*) => {
        pub fn $set(s: &mut $ty, key: &str, v: u64) -> bool {
            match key {
                $(stringify!($key) => s.$key = Some(v),)*
                _ => return false,
            }
            true
        }
    };
}

macro_rules! memstat_setter {
    ($($key:ident => $c:ident,)*) => {
        setter!(set_memory_stat, MemoryStat, $($key)*);
    };
}
memstat_keys_list!(memstat_setter);

macro_rules! events_setters {
    ($($key:ident => $c:ident,)*) => {
        setter!(set_memory_events, MemoryEvents, $($key)*);
        setter!(set_memory_events_local, MemoryEventsLocal, $($key)*);
    };
}
memcg_events_list!(events_setters);

macro_rules! numa_setter {
    ($($key:ident => $c:ident: $item:ident, $unit:ident,)*) => {
        setter!(set_numa_stat, MemoryNumaStat, $($key)*);
    };
}
numa_items_list!(numa_setter);
#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::contract::*;
    use crate::bpf::numa::fill_numa_stat;
    use crate::bpf::numa::NUMA_KEYS;

    /// Slot i alone written by `fill` is the field key i sets; ABSENT
    /// slots are None.
    fn agree<T: Default + PartialEq + std::fmt::Debug>(
        fill: fn(&mut T, &[u64]),
        set: fn(&mut T, &str, u64) -> bool,
        keys: &[&str],
    ) {
        for (i, key) in keys.iter().enumerate() {
            let mut slots = vec![ABSENT; keys.len()];
            slots[i] = 7;
            let (mut a, mut b) = (T::default(), T::default());
            fill(&mut a, &slots);
            set(&mut b, key, 7);
            assert_eq!(a, b, "{key}");
        }
        assert!(!set(&mut T::default(), "no_such_key", 7));
    }

    #[test]
    fn setters_agree_with_fills() {
        agree(fill_memory_stat, set_memory_stat, MEMSTAT_KEYS);
        agree(fill_numa_stat, set_numa_stat, NUMA_KEYS);
        agree(fill_memory_events, set_memory_events, MEMCG_EVENT_KEYS);
        agree(
            fill_memory_events_local,
            set_memory_events_local,
            MEMCG_EVENT_KEYS,
        );
    }
}
