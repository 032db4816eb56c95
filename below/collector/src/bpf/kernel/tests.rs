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

//! memory.numa_stat's layout from a kernel's `enum node_stat_item` and
//! `lruvec_stats.state[]` length: a kernel this code knows, and what it
//! must refuse. The id limits from sysfs lists; the controllers the record
//! has bits for.

use super::*;

/// A kernel's enum: the items in memcg_node_stat_items[] in their order,
/// then the others, less `without`; and the array's length.
fn kernel(without: &[&str]) -> (Vec<(String, i64)>, usize) {
    let names = MEMCG_NODE_STAT_ITEMS
        .iter()
        .chain(&NOT_MEMCG_NODE_STAT_ITEMS)
        .filter(|n| !without.contains(n));
    let items: Vec<(String, i64)> = (0..).zip(names).map(|(v, n)| (n.to_string(), v)).collect();
    let len = MEMCG_NODE_STAT_ITEMS
        .iter()
        .filter(|n| !without.contains(n))
        .count();
    (items, len)
}

fn at(layout: &NumaLayout, item: &str) -> u32 {
    layout[NUMA_ITEMS
        .iter()
        .position(|it| it.item == item)
        .expect("a numa_stat item")]
}

#[test]
fn numa_items_are_memcg_node_stat_items() {
    for it in NUMA_ITEMS {
        assert!(MEMCG_NODE_STAT_ITEMS.contains(&it.item), "{}", it.item);
    }
    for thp in THP_ITEMS {
        assert!(NUMA_ITEMS.iter().any(|it| it.item == thp), "{thp}");
    }
}

#[test]
fn known_layout() {
    let (items, len) = kernel(&[]);
    let layout = layout_of(&items, len, true).expect("a known layout");
    for (i, it) in NUMA_ITEMS.iter().enumerate() {
        let want = MEMCG_NODE_STAT_ITEMS.iter().position(|&m| m == it.item);
        assert_eq!(Some(layout[i] as usize), want, "{}", it.item);
    }
}

#[test]
fn an_item_not_in_the_enum_moves_the_rest() {
    // No CONFIG_SWAP: NR_SWAPCACHE gone from the enum and the array.
    let full = layout_of(&kernel(&[]).0, kernel(&[]).1, true).expect("a known layout");
    let (items, len) = kernel(&["NR_SWAPCACHE"]);
    let layout = layout_of(&items, len, true).expect("a layout without swap");
    let swap = at(&full, "NR_SWAPCACHE");
    for (i, it) in NUMA_ITEMS.iter().enumerate() {
        let want = match full[i] {
            _ if it.item == "NR_SWAPCACHE" => NUMA_NO_IDX,
            v if v > swap => v - 1,
            v => v,
        };
        assert_eq!(layout[i], want, "{}", it.item);
    }
}

#[test]
fn thp_lines_only_where_printed() {
    let (items, len) = kernel(&[]);
    let layout = layout_of(&items, len, false).expect("a known layout");
    for thp in THP_ITEMS {
        assert_eq!(at(&layout, thp), NUMA_NO_IDX, "{thp}");
    }
    assert_ne!(at(&layout, "NR_ANON_MAPPED"), NUMA_NO_IDX);
}

#[test]
fn a_new_item_is_refused() {
    let (mut items, len) = kernel(&[]);
    items.insert(3, ("NR_SOMETHING_NEW".to_string(), 3));
    let why = layout_of(&items, len, true)
        .expect_err("a new item")
        .to_string();
    assert!(why.contains("NR_SOMETHING_NEW is new"), "{why}");
}

#[test]
fn another_length_or_order_is_refused() {
    let (items, len) = kernel(&[]);
    let why = layout_of(&items, len + 1, true)
        .expect_err("another length")
        .to_string();
    assert!(why.contains("expected"), "{why}");
    let mut swapped = items.clone();
    swapped.swap(0, 1);
    (swapped[0].1, swapped[1].1) = (0, 1);
    let why = layout_of(&swapped, len, true)
        .expect_err("another order")
        .to_string();
    assert!(why.contains("before"), "{why}");
}

#[test]
fn id_limits_from_sysfs_lists() {
    assert_eq!(ids_in("0\n"), Some(1));
    assert_eq!(ids_in("0-63\n"), Some(64));
    assert_eq!(ids_in("0-3,8\n"), Some(9));
    // No guess where the list is not one.
    assert_eq!(ids_in(""), None);
    assert_eq!(ids_in("0-"), None);
    assert_eq!(ids_in("possible\n"), None);
}

#[test]
fn controllers_the_record_has_bits_for() {
    // 7.3's enum cgroup_subsys_id (Debian's config).
    let ids = [
        "cpuset_cgrp_id",
        "cpu_cgrp_id",
        "cpuacct_cgrp_id",
        "io_cgrp_id",
        "memory_cgrp_id",
        "devices_cgrp_id",
        "freezer_cgrp_id",
        "net_cls_cgrp_id",
        "perf_event_cgrp_id",
        "net_prio_cgrp_id",
        "hugetlb_cgrp_id",
        "pids_cgrp_id",
        "rdma_cgrp_id",
        "misc_cgrp_id",
        "dmem_cgrp_id",
        "CGROUP_SUBSYS_COUNT",
    ];
    assert!(unknown_controllers(ids.into_iter()).is_empty());
    // One this code does not know, and debug (shown with cgroup_debug).
    let more = ids.into_iter().chain(["foo_cgrp_id", "debug_cgrp_id"]);
    assert_eq!(unknown_controllers(more), ["foo", "debug"]);
}
