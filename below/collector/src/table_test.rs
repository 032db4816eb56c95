use std::collections::BTreeMap;
use std::collections::HashMap;

use super::*;

/// (id, parent position, name) in pre-order, but not by name: "b" before
/// "a", "y" before "x".
const TREE: &[(u64, Option<usize>, &str)] = &[
    (1, None, ""),
    (6, Some(0), "b"),
    (2, Some(0), "a"),
    (5, Some(2), "y"),
    (3, Some(2), "x"),
    (4, Some(4), "deep"),
];

/// One index of `cgroups`; each position's sample gets its id as the
/// inode number and `tids` as tids_current. Returns how many names were
/// asked for (cgroups new to the table).
fn index(t: &mut Table, cgroups: &[(u64, Option<usize>, &str)], tids: u64) -> usize {
    let mut named = 0;
    t.begin();
    let mut pos_of = HashMap::new();
    for (i, &(id, parent, name)) in cgroups.iter().enumerate() {
        let parent = parent.and_then(|p| pos_of.get(&p).copied());
        if parent.is_none() && i > 0 {
            continue;
        }
        let visited = t.visit(id, parent, || {
            named += 1;
            name.into()
        });
        if let Some(pos) = visited {
            pos_of.insert(i, pos);
            *t.sample_mut(pos) = CgroupSample {
                inode_number: Some(id as i64),
                tids_current: Some(tids),
                ..Default::default()
            };
        }
    }
    t.end();
    named
}

/// A tree filled anew.
fn tree(t: &mut Table) -> CgroupSample {
    let mut tree = CgroupSample::default();
    t.fill_tree(&mut tree);
    tree
}

fn node<'a>(t: &'a CgroupSample, path: &[&str]) -> &'a CgroupSample {
    let mut n = t;
    for p in path {
        n = &n.children.as_ref().unwrap()[*p];
    }
    n
}

#[test]
fn builds_nested_tree_from_preorder() {
    let mut t = Table::default();
    index(&mut t, TREE, 0);
    let root = tree(&mut t);
    assert_eq!(root.inode_number, Some(1));
    let top = root.children.as_ref().unwrap();
    assert_eq!(top.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        node(&root, &["a"])
            .children
            .as_ref()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["x", "y"]
    );
    assert_eq!(node(&root, &["a", "x", "deep"]).inode_number, Some(4));
    // Leaves have an empty children map, as below's collector gives.
    assert_eq!(top["b"].children, Some(BTreeMap::new()));
}

#[test]
fn empty_table_gives_empty_root() {
    let mut t = Table::default();
    index(&mut t, &[], 0);
    assert_eq!(t.len(), 0);
    assert_eq!(tree(&mut t), CgroupSample::default());
}

#[test]
fn rows_are_learnt_once_and_forgotten_when_gone() {
    let mut t = Table::default();
    assert_eq!(index(&mut t, TREE, 0), 6);
    assert_eq!(index(&mut t, TREE, 0), 0, "every cgroup known by id");
    assert_eq!(t.row(5).path, "a/x/deep");
    assert!(t.knows(4));
    // "deep" gone for one index, back under the same id: learnt anew.
    index(&mut t, &TREE[..5], 0);
    assert!(!t.knows(4));
    assert_eq!(t.position(4), None);
    assert_eq!(index(&mut t, TREE, 0), 1);
    assert_eq!(t.position(4), Some(5));
}

#[test]
fn the_filter_skips_subtrees_and_keep_marks_paths() {
    let filter = Regex::new("^a/x$").unwrap();
    let keep = Regex::new("^a/y$").unwrap();
    let mut t = Table::new(Some(filter), Some(keep));
    index(&mut t, TREE, 0);
    let paths: Vec<&str> = (0..t.len()).map(|p| t.row(p).path.as_str()).collect();
    assert_eq!(paths, ["", "b", "a", "a/y"]);
    let always: Vec<bool> = (0..t.len()).map(|p| t.row(p).always).collect();
    assert_eq!(always, [false, false, false, true]);
    assert_eq!(t.position(4), None, "under a filtered cgroup");
}

#[test]
fn same_cgroups_update_the_tree_in_place() {
    let mut t = Table::default();
    index(&mut t, TREE, 7);
    let mut root = CgroupSample::default();
    assert_eq!(t.fill_tree(&mut root), TreeBuild::New);
    index(&mut t, TREE, 8);
    // The positions hold what an earlier sample left (the tree's nodes
    // swap with them): a backend may reuse it.
    assert_eq!(t.sample(0).tids_current, Some(8));
    assert_eq!(t.fill_tree(&mut root), TreeBuild::InPlace);
    assert_eq!(node(&root, &["a", "x", "deep"]).tids_current, Some(8));
    assert_eq!(node(&root, &["b"]).tids_current, Some(8));
    assert_eq!(node(&root, &["a", "y"]).inode_number, Some(5));
    assert_eq!(t.sample(5).tids_current, Some(7), "swapped, not dropped");
    assert_eq!(node(&root, &["b"]).children, Some(BTreeMap::new()));
}

#[test]
fn another_tree_or_other_cgroups_build_anew() {
    let mut t = Table::default();
    index(&mut t, TREE, 1);
    let kept = tree(&mut t);
    // A default tree (the one filled last was moved out): built anew.
    index(&mut t, TREE, 2);
    let mut root = CgroupSample::default();
    assert_eq!(t.fill_tree(&mut root), TreeBuild::New);
    assert_eq!(node(&root, &["a", "x", "deep"]).tids_current, Some(2));
    assert_eq!(node(&kept, &["a", "x", "deep"]).tids_current, Some(1));
    // "b" gone and "c" in its place: another shape.
    let mut other = TREE.to_vec();
    other[1] = (9, Some(0), "c");
    index(&mut t, &other, 3);
    assert_eq!(t.fill_tree(&mut root), TreeBuild::New, "another shape");
    assert_eq!(
        root.children.as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["a", "c"]
    );
    assert_eq!(node(&root, &["c"]).tids_current, Some(3));
}

#[test]
fn retain_keeps_positions_parents_and_samples() {
    let mut t = Table::default();
    index(&mut t, TREE, 0);
    // Keep root, "a", "x", "deep": positions 0, 2, 4, 5.
    t.retain(&[true, false, true, false, true, true]);
    assert_eq!(t.len(), 4);
    assert_eq!(t.dropped(), 2);
    assert_eq!(t.parents(), [None, Some(0), Some(1), Some(2)]);
    let ids: Vec<u64> = (0..4).map(|p| t.id(p)).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    let inos: Vec<Option<i64>> = (0..4).map(|p| t.sample(p).inode_number).collect();
    assert_eq!(inos, [Some(1), Some(2), Some(3), Some(4)]);
    assert_eq!(t.position(3), Some(2));
    assert_eq!(t.position(6), None, "left out");
    assert!(t.knows(6), "but still seen: its rate history stays");
    let root = tree(&mut t);
    assert_eq!(node(&root, &["a", "x", "deep"]).inode_number, Some(4));
    assert!(!root.children.as_ref().unwrap().contains_key("b"));
}

#[test]
fn truncate_takes_back_a_removed_subtree() {
    let mut t = Table::default();
    t.begin();
    let root = t.visit(1, None, OsString::new).unwrap();
    let a = t.visit(2, Some(root), || "a".into()).unwrap();
    t.visit(3, Some(a), || "x".into()).unwrap();
    t.truncate(a);
    let b = t.visit(4, Some(root), || "b".into()).unwrap();
    t.end();
    assert_eq!(b, 1);
    assert_eq!(t.len(), 2);
    assert!(!t.knows(2) && !t.knows(3), "not in the index: forgotten");
}

#[test]
fn names_that_are_not_utf8_show_escaped_and_distinct() {
    use std::os::unix::ffi::OsStrExt;
    let show = |b: &[u8]| display_name(OsStr::from_bytes(b)).into_owned();
    assert_eq!(show(b"web.slice"), "web.slice");
    assert_eq!(
        show(b"a\\x2db"),
        "a\\x2db",
        "UTF-8 (systemd's escapes) as it is"
    );
    assert_eq!(show(b"n\xff"), "n\\xff");
    assert_eq!(show(b"caf\xc3\xa9\xff"), "caf\u{e9}\\xff");
    // A backslash in a name that is not UTF-8 is escaped too: these two
    // would otherwise both show as `a\xff\xfe`.
    assert_eq!(show(b"a\\xff\xfe"), "a\\\\xff\\xfe");
    assert_eq!(show(b"a\xff\xfe"), "a\\xff\\xfe");
}

/// Siblings that show alike (`n\xff` not UTF-8, `n\xff` spelt out) stay two
/// cgroups with their own samples, sample after sample (the tree updated in
/// place): the lower id keeps the name, whichever is seen first.
#[test]
fn siblings_that_show_alike_stay_apart() {
    use std::os::unix::ffi::OsStrExt;
    let raw = OsStr::from_bytes(b"n\xff");
    let run = |t: &mut Table, ids: &[u64], tids: u64| {
        t.begin();
        let root = t.visit(1, None, OsString::new).unwrap();
        for &id in ids {
            let name = if id % 2 == 0 {
                raw.to_owned()
            } else {
                "n\\xff".into()
            };
            let pos = t.visit(id, Some(root), || name).unwrap();
            *t.sample_mut(pos) = CgroupSample {
                inode_number: Some(id as i64),
                tids_current: Some(tids + id),
                ..Default::default()
            };
        }
        t.end();
    };
    let mut t = Table::default();
    let mut root = CgroupSample::default();
    for tids in [100, 200] {
        run(&mut t, &[3, 2], tids);
        let how = t.fill_tree(&mut root);
        let children = root.children.as_ref().unwrap();
        assert_eq!(children.len(), 2, "{children:?}");
        assert_eq!(children["n\\xff"].inode_number, Some(2));
        assert_eq!(children["n\\xff#3"].inode_number, Some(3));
        assert_eq!(children["n\\xff#3"].tids_current, Some(tids + 3));
        assert_eq!(how == TreeBuild::InPlace, tids == 200);
    }
    run(&mut t, &[5, 4], 300);
    let children = tree(&mut t).children.unwrap();
    assert_eq!(children["n\\xff"].inode_number, Some(4));
    assert_eq!(children["n\\xff#5"].inode_number, Some(5));
}

/// A cgroup removed and made again under its name (a new id) shows under
/// that name, not as a second one.
#[test]
fn a_name_made_again_keeps_its_name() {
    let mut t = Table::default();
    let cgroups = |id| [(1, None, ""), (id, Some(0), "c0")];
    index(&mut t, &cgroups(2), 0);
    index(&mut t, &cgroups(3), 0);
    let root = tree(&mut t);
    assert_eq!(root.children.as_ref().unwrap().len(), 1);
    assert_eq!(node(&root, &["c0"]).inode_number, Some(3));
}
