//! The text files whose keys are lists of cgroup_stats.h (memory.stat,
//! memory.events[.local], memory.numa_stat) are read into the record's
//! slots by the contract's key lists and written out by the record's fills:
//! the text and the record name the same fields.

use crate::bpf::contract::*;
use crate::cgroupfs_ext::MemoryEvents;
use crate::cgroupfs_ext::MemoryEventsLocal;
use crate::cgroupfs_ext::MemoryNumaStat;
use crate::cgroupfs_ext::MemoryStat;

/// The values of one list's keys, by slot (ABSENT: not in the text).
pub struct Slots {
    keys: &'static [&'static str],
    values: Vec<u64>,
}

impl Slots {
    fn new(keys: &'static [&'static str]) -> Self {
        Slots {
            keys,
            values: vec![ABSENT; keys.len()],
        }
    }

    /// false for a key not in the list.
    pub fn set(&mut self, key: &str, v: u64) -> bool {
        match self.keys.iter().position(|&k| k == key) {
            Some(i) => {
                self.values[i] = v;
                true
            }
            None => false,
        }
    }

    fn fill<T: Default>(&self, fill: fn(&mut T, &[u64])) -> T {
        let mut s = T::default();
        fill(&mut s, &self.values);
        s
    }
}

pub fn memory_stat_slots() -> Slots {
    Slots::new(MEMSTAT_KEYS)
}

pub fn memory_events_slots() -> Slots {
    Slots::new(MEMCG_EVENT_KEYS)
}

pub fn numa_stat_slots() -> Slots {
    Slots::new(NUMA_KEYS)
}

impl From<&Slots> for MemoryStat {
    fn from(s: &Slots) -> Self {
        s.fill(fill_memory_stat)
    }
}

impl From<&Slots> for MemoryEvents {
    fn from(s: &Slots) -> Self {
        s.fill(fill_memory_events)
    }
}

impl From<&Slots> for MemoryEventsLocal {
    fn from(s: &Slots) -> Self {
        s.fill(fill_memory_events_local)
    }
}

impl From<&Slots> for MemoryNumaStat {
    fn from(s: &Slots) -> Self {
        s.fill(fill_numa_stat)
    }
}
