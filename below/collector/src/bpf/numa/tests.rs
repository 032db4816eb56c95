//! memory.numa_stat's layout from a kernel's `enum node_stat_item` and
//! `lruvec_stats.state[]` length: a kernel this code knows, and what it
//! must refuse; rows decoded into the file's nodes and units.

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

pub(crate) const PAGE: u64 = 4096;

/// Rows of a record on a kernel that prints only the first two items:
/// node 0's values count up, node 1's are never printed (not among the
/// memory nodes).
pub(crate) fn two_nodes() -> (Numa, [NumaRow; 2], u64) {
    let mut layout = [NUMA_NO_IDX; NUMA_ITEMS.len()];
    (layout[0], layout[1]) = (0, 1);
    let rows = [
        NumaRow {
            v: std::array::from_fn(|i| 10 + i as u64),
        },
        NumaRow {
            v: [99; NUMA_ITEMS.len()],
        },
    ];
    (Numa { nodes: 2, layout }, rows, 0b01)
}

#[test]
fn rows_decode_in_the_files_units() {
    let (numa, rows, memory_nodes) = two_nodes();
    let stat = numa.stat(&rows, memory_nodes, PAGE);
    // Node 0 only (memory_nodes), the two items this kernel prints, scaled.
    assert_eq!(stat.keys().copied().collect::<Vec<_>>(), [0]);
    let n0 = &stat[&0];
    assert_eq!((n0.anon, n0.file), (Some(10 * PAGE), Some(11 * PAGE)));
    assert_eq!(n0.kernel_stack, None);
}

#[test]
fn lines_cover_below_fields() {
    let mut s = MemoryNumaStat::default();
    fill_numa_stat(&mut s, &[1; NUMA_ITEMS.len()]);
    let json = serde_json::to_value(&s).unwrap();
    let unset: Vec<_> = (json.as_object().unwrap().iter())
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.clone())
        .collect();
    assert!(
        unset.is_empty(),
        "MemoryNumaStat fields no line fills: {unset:?}"
    );
}
