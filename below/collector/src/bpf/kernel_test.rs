//! kernel.rs's probing on this machine's BTF edited into the variants no
//! guest kernel has (the editor is ours alone, so these tests are not in
//! the file below main's series carries).

use super::btf_edit::edit;
use super::btf_edit::Edit;

use super::layer::KernelBtf;
use super::layer::VMLINUX_BTF as BTF_PATH;
use super::numa::*;

/// This machine's BTF with `edits`, in a file (dir/vmlinux); None
/// (with a line) when this machine has no BTF.
fn edited_file(edits: &[Edit]) -> Option<tempfile::TempDir> {
    let Ok(mut raw) = std::fs::read(BTF_PATH) else {
        println!("skipped: no {BTF_PATH}");
        return None;
    };
    for e in edits {
        raw = edit(&raw, *e).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vmlinux"), raw).unwrap();
    Some(dir)
}

fn edited(edits: &[Edit]) -> Option<KernelBtf> {
    let dir = edited_file(edits)?;
    Some(KernelBtf::open(Some(&dir.path().join("vmlinux"))).unwrap())
}

/// This machine's node_stat_item with the memcg items of a kernel
/// whose lruvec_stats.state[] holds exactly the ones we know: the
/// 7.3 layout, whatever this kernel's array is.
fn known_layout() -> Vec<Edit<'static>> {
    let Some(btf) = edited(&[]) else {
        return Vec::new();
    };
    let items = btf.enum_values("node_stat_item").unwrap();
    let present = (MEMCG_NODE_STAT_ITEMS.iter())
        .filter(|i| items.iter().any(|(n, _)| n == *i))
        .count();
    // Items this code does not know are removed, as an older config would.
    let mut edits: Vec<Edit> = (items.iter())
        .filter(|(n, _)| {
            !MEMCG_NODE_STAT_ITEMS.contains(&n.as_str())
                && !NOT_MEMCG_NODE_STAT_ITEMS.contains(&n.as_str())
        })
        .map(|(n, _)| Edit::RemoveEnumVal {
            ty: "node_stat_item",
            value: n.clone().leak(),
        })
        .collect();
    edits.push(Edit::ArrayLen {
        ty: "lruvec_stats",
        member: "state",
        len: present as u32,
    });
    edits
}

#[test]
fn numa_layout_by_names() {
    let base = known_layout();
    let Some(btf) = edited(&base) else { return };
    let layout = numa_layout(&btf).expect("the known layout");
    let at = |item: &str| {
        let i = NUMA_ITEMS.iter().position(|it| it.item == item).unwrap();
        layout[i]
    };
    assert_eq!(at("NR_ANON_MAPPED"), 14);

    // Same count, one name this code does not know: not served.
    let mut e = base.clone();
    e.push(Edit::EnumVal {
        ty: "node_stat_item",
        value: "NR_DIRTIED",
    });
    let why = numa_layout(&edited(&e).unwrap()).unwrap_err().to_string();
    assert!(why.contains("bstats_gone_NR_DIRTIED is new"), "{why}");

    // No CONFIG_SWAP: NR_SWAPCACHE gone from the enum and the array,
    // the items after it one place earlier.
    let mut e = base.clone();
    let mut len = 0;
    if let Some(Edit::ArrayLen { len: l, .. }) = e.pop() {
        len = l;
    }
    e.push(Edit::RemoveEnumVal {
        ty: "node_stat_item",
        value: "NR_SWAPCACHE",
    });
    e.push(Edit::ArrayLen {
        ty: "lruvec_stats",
        member: "state",
        len: len - 1,
    });
    let no_swap = numa_layout(&edited(&e).unwrap()).expect("layout without swap");
    for (i, it) in NUMA_ITEMS.iter().enumerate() {
        let before = at(it.item);
        let want = match it.item {
            "NR_SWAPCACHE" => NUMA_NO_IDX,
            _ if before > at("NR_SWAPCACHE") => before - 1,
            _ => before,
        };
        assert_eq!(no_swap[i], want, "{}", it.item);
    }

    // The array one longer than the items: not served.
    let mut e = base.clone();
    e.pop();
    e.push(Edit::ArrayLen {
        ty: "lruvec_stats",
        member: "state",
        len: len + 1,
    });
    let why = numa_layout(&edited(&e).unwrap()).unwrap_err().to_string();
    assert!(why.contains("expected"), "{why}");
}
