//! A pass's records into the table: names from the pass's `names` map,
//! else (below main's program alone) from the parent's directory, listed
//! once per parent; a cgroup gone since the pass is left out with its
//! subtree.

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::contract::Record;
use super::program::CgroupName;
use super::protocol::Rows;
use super::protocol::TreeIndex;
use super::Indexed;
use crate::read::open_root;
use crate::table::Table;

fn record(id: u64, parent_id: u64) -> Record {
    Record {
        id,
        parent_id,
        ..Default::default()
    }
}

fn name(s: &str) -> CgroupName {
    let mut n = CgroupName::default();
    for (d, c) in n.name.iter_mut().zip(s.bytes()) {
        *d = c as _;
    }
    n
}

/// `records` indexed into a new table under the cgroup root `root`: the
/// table and the visible records.
fn index(root: &Path, records: &[Record], names: &[CgroupName]) -> (Table, Vec<usize>) {
    let root = open_root(root).unwrap();
    let mut table = Table::default();
    let mut visible = Vec::new();
    Indexed {
        table: &mut table,
        records: &mut visible,
        root: root.as_fd(),
    }
    .index(Rows {
        records,
        pressure: &[],
        names,
    });
    (table, visible)
}

/// The table's paths in pre-order.
fn paths(table: &Table) -> Vec<String> {
    (0..table.len())
        .map(|p| table.row(p).path.clone())
        .collect()
}

#[test]
fn names_come_from_the_directories_without_a_names_map() {
    let dir = tempfile::tempdir().unwrap();
    for d in ["a/x", "b"] {
        fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let ino = |p: &str| fs::metadata(dir.path().join(p)).unwrap().ino();
    let (gone, under_gone) = (u64::MAX - 1, u64::MAX - 2);
    let records = [
        record(ino(""), 0),
        record(ino("a"), ino("")),
        record(ino("a/x"), ino("a")),
        record(gone, ino("")),
        record(under_gone, gone),
        record(ino("b"), ino("")),
    ];
    let (table, visible) = index(dir.path(), &records, &[]);
    assert_eq!(visible, [0, 1, 2, 5]);
    assert_eq!(paths(&table), ["", "a", "a/x", "b"]);
    assert_eq!(table.row(2).raw, Path::new("a/x"));
}

#[test]
fn names_come_from_the_names_map_first() {
    let records = [record(1, 0), record(2, 1), record(3, 2)];
    let names = [name(""), name("web.slice"), name("app")];
    // No such directory: the map's names are used, nothing is listed.
    let dir = tempfile::tempdir().unwrap();
    let (table, _) = index(dir.path(), &records, &names);
    assert_eq!(paths(&table), ["", "web.slice", "web.slice/app"]);
}
