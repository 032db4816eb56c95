use std::collections::BTreeMap;

use super::*;

fn node(parent: Option<usize>, name: &str, ino: i64) -> Node {
    Node {
        parent,
        name: name.into(),
        sample: CgroupSample {
            inode_number: Some(ino),
            ..Default::default()
        },
    }
}

/// Pre-order, but not by name: "b" before "a", "y" before "x".
fn snapshot() -> Vec<Node> {
    vec![
        node(None, "", 1),
        node(Some(0), "b", 6),
        node(Some(0), "a", 2),
        node(Some(2), "y", 5),
        node(Some(2), "x", 3),
        node(Some(4), "deep", 4),
    ]
}

fn ino(t: &CgroupSample, path: &[&str]) -> Option<i64> {
    let mut n = t;
    for p in path {
        n = &n.children.as_ref().unwrap()[*p];
    }
    n.inode_number
}

#[test]
fn builds_nested_tree_from_preorder() {
    let root = build_tree(snapshot());
    assert_eq!(root.inode_number, Some(1));
    let top = root.children.as_ref().unwrap();
    assert_eq!(top.keys().collect::<Vec<_>>(), ["a", "b"]);
    let a = &top["a"].children.as_ref().unwrap();
    assert_eq!(a.keys().collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(ino(&root, &["a", "x", "deep"]), Some(4));
    // Leaves have an empty children map, as below's collector gives.
    assert_eq!(top["b"].children, Some(BTreeMap::new()));
}

#[test]
fn empty_snapshot_gives_empty_root() {
    assert_eq!(build_tree(Vec::new()), CgroupSample::default());
    let mut t = Tree::default();
    t.set(Vec::new());
    assert!(t.is_empty());
    assert_eq!(t.take(), CgroupSample::default());
}

#[test]
fn same_cgroups_update_in_place_by_snapshot_index() {
    let mut t = Tree::default();
    t.set(snapshot());
    let shape: Vec<_> = snapshot().into_iter().map(|n| (n.parent, n.name)).collect();
    assert!(t.same_shape(shape.iter().map(|(p, n)| (*p, n.as_str()))));
    // Each node gets the value of its snapshot index: the tree's pre-order
    // (by name) is not the snapshot's.
    let mut seen = Vec::new();
    t.update(|i, s| {
        assert!(s.children.is_none(), "children are out during the call");
        seen.push(i);
        s.tids_current = Some(i as u64);
    });
    assert_eq!(seen, [0, 2, 4, 5, 3, 1]);
    let root = t.take();
    let tids = |path: &[&str]| {
        let mut n = &root;
        for p in path {
            n = &n.children.as_ref().unwrap()[*p];
        }
        n.tids_current
    };
    assert_eq!(tids(&["a", "x", "deep"]), Some(5));
    assert_eq!(tids(&["b"]), Some(1));
    assert_eq!(ino(&root, &["a", "y"]), Some(5), "the rest of a node stays");
    assert_eq!(
        root.children.as_ref().unwrap()["b"].children,
        Some(BTreeMap::new())
    );
}

#[test]
fn set_moves_samples_into_the_kept_nodes() {
    let mut t = Tree::default();
    t.set(snapshot());
    let mut next = snapshot();
    next[5].sample.tids_current = Some(42);
    t.set(next);
    let root = t.take();
    assert_eq!(ino(&root, &["a", "x", "deep"]), Some(4));
    let deep = &root.children.as_ref().unwrap()["a"]
        .children
        .as_ref()
        .unwrap()["x"]
        .children
        .as_ref()
        .unwrap()["deep"];
    assert_eq!(deep.tids_current, Some(42));
}

#[test]
fn a_taken_tree_or_other_cgroups_build_anew() {
    let mut t = Tree::default();
    t.set(snapshot());
    let same =
        |t: &Tree, nodes: &[Node]| t.same_shape(nodes.iter().map(|n| (n.parent, n.name.as_str())));
    let root = t.take();
    assert!(
        !same(&t, &snapshot()),
        "out for a sample: not updated in place"
    );
    t.give_back(root);
    assert!(same(&t, &snapshot()));
    // A cgroup gone, one renamed (a new one in its place), one moved.
    let mut gone = snapshot();
    gone.pop();
    assert!(!same(&t, &gone));
    let mut other = snapshot();
    other[1].name = "c".into();
    assert!(!same(&t, &other));
    let mut moved = snapshot();
    moved[5].parent = Some(3);
    assert!(!same(&t, &moved));
    t.set(other);
    assert_eq!(t.len(), 6);
    let root = t.take();
    assert_eq!(
        root.children.as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["a", "c"]
    );
}
