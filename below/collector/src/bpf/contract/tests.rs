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

//! The C side of each table, as compiled into the BPF object (its BTF),
//! against the Rust side: names, order, values, and the record's array
//! lengths. One drift in either side fails here.

use libbpf_rs::btf::types;
use libbpf_rs::btf::Btf;

use super::*;

/// `enum name` of the compiled object: (member, value) in order.
fn c_enum(name: &str) -> Vec<(String, i64)> {
    enum_in(OBJECT, name)
}

/// `enum name` of the BPF object `object`: (member, value) in order.
pub(crate) fn enum_in(object: &[u8], name: &str) -> Vec<(String, i64)> {
    let btf = Btf::from_raw("object", object)
        .expect("reading the object's BTF")
        .expect("the object has BTF");
    let e = btf
        .type_by_name::<types::Enum>(name)
        .unwrap_or_else(|| panic!("enum {name} is not in the object's BTF"));
    e.iter()
        .map(|m| {
            (
                m.name
                    .expect("enumerators have names")
                    .to_string_lossy()
                    .into_owned(),
                m.value,
            )
        })
        .collect()
}

/// What a list enum of C must be: `<prefix><entry>` = index, then `count`.
fn indexed(prefix: &str, entries: &[&str], count: &str) -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = (0..)
        .zip(entries)
        .map(|(i, e)| (format!("{prefix}{e}"), i))
        .collect();
    v.push((count.to_owned(), entries.len() as i64));
    v
}

fn flags(list: &[(&str, u32)]) -> Vec<(String, i64)> {
    list.iter()
        .map(|&(n, v)| (n.to_owned(), v.into()))
        .collect()
}

#[test]
fn bits_agree() {
    assert_eq!(c_enum("has_flag"), flags(HAS_FLAGS));
    assert_eq!(c_enum("feat_flag"), flags(FEAT_FLAGS));
    assert_eq!(c_enum("kf_flag"), flags(KF_FLAGS));
    assert_eq!(c_enum("ctrl_bit"), indexed("CTRL_", CONTROLLERS, "NR_CTRL"));
}

#[test]
fn record_slots_agree() {
    let r = Record::default();
    assert_eq!(
        c_enum("memstat_slot"),
        indexed("MS_", MEMSTAT_KEYS, "NR_MS")
    );
    assert_eq!(r.memstat.len(), MEMSTAT_KEYS.len());

    assert_eq!(
        c_enum("numa_item"),
        indexed("NUMA_", NUMA_KEYS, "NR_NUMA_STATS")
    );
    assert_eq!(NumaRow::default().v.len(), NUMA_ITEMS.len());
    assert_eq!(NUMA_KEYS.len(), NUMA_ITEMS.len());

    assert_eq!(
        c_enum("memcg_event"),
        indexed("EV_", MEMCG_EVENT_KEYS, "NR_EVENTS")
    );
    assert_eq!(r.events.len(), MEMCG_EVENT_KEYS.len());
    assert_eq!(r.events_local.len(), MEMCG_EVENT_KEYS.len());

    assert_eq!(r.cpus.len(), CPU_WORDS);
    assert_eq!(r.cpus_effective.len(), CPU_WORDS);
}

/// Every field of `T` set by `fill` from slots all 1: the list covers
/// what below keeps.
fn covers<T: Default + serde::Serialize>(fill: fn(&mut T, &[u64]), keys: &[&str]) {
    let mut s = T::default();
    fill(&mut s, &vec![1; keys.len()]);
    let json = serde_json::to_value(&s).expect("serializable");
    let unset: Vec<_> = json
        .as_object()
        .expect("a struct")
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.clone())
        .collect();
    assert!(unset.is_empty(), "not in the list: {unset:?}");
}

#[test]
fn lists_cover_below_fields() {
    covers(fill_memory_stat, MEMSTAT_KEYS);
    covers(fill_numa_stat, NUMA_KEYS);
    covers(fill_memory_events, MEMCG_EVENT_KEYS);
    covers(fill_memory_events_local, MEMCG_EVENT_KEYS);
}

#[test]
fn facts_agree() {
    let names: Vec<&str> = KERNEL_FACTS.iter().map(|f| f.name).collect();
    assert_eq!(c_enum("fact_bit"), indexed("FACT_", &names, "NR_FACTS"));
    assert!(KERNEL_FACTS.len() <= 64, "facts is a u64");
}
