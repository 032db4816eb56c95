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

//! What the compiler cannot check of the contract: that the lists cover
//! below's fields, and that the kernel facts' types and members are the
//! ones C reads (in the object's BTF).

use std::mem::MaybeUninit;

use libbpf_rs::btf::types;
use libbpf_rs::btf::Btf;
use libbpf_rs::skel::OpenSkel;
use libbpf_rs::skel::SkelBuilder;
use libbpf_rs::AsRawLibbpf;

use super::*;

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
    covers(fill_memory_events, MEMCG_EVENT_KEYS);
    covers(fill_memory_events_local, MEMCG_EVENT_KEYS);
}

/// Member names of `struct name` or `enum name` in `btf`, if it has it.
fn members(btf: &Btf, name: &str) -> Option<Vec<String>> {
    let owned = |n: Option<&std::ffi::OsStr>| n.expect("named").to_string_lossy().into_owned();
    if let Some(s) = btf.type_by_name::<types::Struct>(name) {
        return Some(s.iter().map(|m| owned(m.name)).collect());
    }
    let e = btf.type_by_name::<types::Enum>(name)?;
    Some(e.iter().map(|m| owned(m.name)).collect())
}

/// `read` of the BTF of the object `builder` opens (not loaded: no
/// privilege needed).
// series: fn object_btf<T>(
pub(crate) fn object_btf<T>(
    builder: impl for<'o> SkelBuilder<'o>,
    read: impl FnOnce(&Btf) -> T,
) -> T {
    let mut storage = MaybeUninit::uninit();
    let open = builder.open(&mut storage).expect("opening the object");
    // SAFETY: the object stays open while the reference lives.
    let object = unsafe { open.open_object().as_libbpf_object().as_ref() };
    let btf = Btf::from_bpf_object(object)
        .expect("reading the object's BTF")
        .expect("the object has BTF");
    read(&btf)
}

#[test]
fn facts_are_what_c_reads() {
    object_btf(skel::CgroupBpfSkelBuilder::default(), facts_in);
}

fn facts_in(btf: &Btf) {
    for f in KERNEL_FACTS {
        let (flavors, member): (&[&str], _) = match f.kind {
            FactKind::Field => (&["___local"], f.member.to_owned()),
            FactKind::Cpumask => (&["___ptr", "___embedded"], f.member.to_owned()),
            FactKind::Enumval => (&["___local"], format!("{}___local", f.member)),
        };
        for flavor in flavors {
            let ty = format!("{}{flavor}", f.ty);
            let found = members(btf, &ty).unwrap_or_else(|| panic!("{}: no {ty}", f.name));
            assert!(found.contains(&member), "{}: {ty} has no {member}", f.name);
        }
    }
}
