//! Hostile cgroup names against real cgroups, every backend this kernel
//! offers: names that are not UTF-8 (siblings that looked alike once made
//! UTF-8 merged into one, and later cgroups took other cgroups' samples),
//! a name made again with a new id, and cgroup2's refusal to rename. Needs
//! root; the `facts` guest stage runs it on a kernel with every BPF file.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bstats_testkit::Controllers;
use bstats_testkit::Fixture;
use model::CgroupSample;

use crate::BackendChoice;
use crate::CgroupCollector;
use crate::Options;

/// (raw name, parent's raw name or None for the fixture's top).
const NAMES: &[(&[u8], Option<&[u8]>)] = &[
    (b"n\xff", None),
    (b"c1", Some(b"n\xff")),
    (b"n\xfe", None),
    (b"c2", Some(b"n\xfe")),
    // Shows as `n\xff` does: a UTF-8 name chosen to collide.
    (b"n\\xff", None),
    // What lossy conversion made of both `n\xff` and `n\xfe`.
    ("n\u{fffd}".as_bytes(), None),
];

/// The real directories under `top`: inode -> (parent inode, raw name).
fn real_tree(top: &Path) -> HashMap<u64, (u64, OsString)> {
    fn walk(dir: &Path, ino: u64, out: &mut HashMap<u64, (u64, OsString)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                let child = e.metadata().unwrap().ino();
                out.insert(child, (ino, e.file_name()));
                walk(&e.path(), child, out);
            }
        }
    }
    let mut out = HashMap::new();
    walk(top, std::fs::metadata(top).unwrap().ino(), &mut out);
    out
}

/// The sampled subtree under `node`: inode -> (parent inode, name).
fn sampled_tree(node: &CgroupSample, out: &mut HashMap<u64, (u64, String)>) {
    let ino = node.inode_number.unwrap() as u64;
    for (name, c) in node.children.iter().flatten() {
        let child = c.inode_number.unwrap() as u64;
        assert!(
            out.insert(child, (ino, name.clone())).is_none(),
            "cgroup {child} twice"
        );
        sampled_tree(c, out);
    }
}

/// Checks one sample's tree against the directories under `top`: the same
/// cgroups (by id) under the same parents, each named as it is shown.
fn check(tree: &CgroupSample, top: &Path, what: &str) {
    let top_name = top.file_name().unwrap().to_str().unwrap();
    let mut node = tree;
    let rel = top
        .strip_prefix(crate::find_cgroup2_mount().unwrap())
        .unwrap();
    for part in rel.iter() {
        node = &node.children.as_ref().unwrap()[part.to_str().unwrap()];
    }
    let real = real_tree(top);
    let mut sampled = HashMap::new();
    sampled_tree(node, &mut sampled);
    assert_eq!(
        sampled.len(),
        real.len(),
        "{what}: {top_name}: {sampled:?} vs {real:?}"
    );
    for (ino, (parent, raw)) in &real {
        let (s_parent, name) = sampled
            .get(ino)
            .unwrap_or_else(|| panic!("{what}: cgroup {ino} ({raw:?}) missing: {sampled:?}"));
        assert_eq!(s_parent, parent, "{what}: {raw:?} under another parent");
        let shown = crate::table::display_name(raw);
        assert!(
            *name == shown || *name == format!("{shown}#{ino}"),
            "{what}: {raw:?} shown as {name:?}"
        );
    }
}

fn collector(root: &Path, backend: BackendChoice) -> Option<CgroupCollector> {
    let opts = Options {
        root: root.to_owned(),
        backend,
        collect_io_stat: false,
        filter: None,
        // Streams on while this runs, where the kernel has them.
        stream_interval: Some(std::time::Duration::from_millis(200)),
        top: None,
    };
    match CgroupCollector::new(&opts) {
        Ok(c) => Some(c),
        Err(e) => {
            println!("{backend:?}: not on this kernel: {e:#}");
            None
        }
    }
}

#[test]
fn names_that_are_not_utf8_stay_distinct_cgroups() {
    if bstats_testkit::skip_unless_root("makes cgroups") {
        return;
    }
    let root = crate::find_cgroup2_mount().unwrap();
    let mut fx = Fixture::new(&root, "names", Controllers::Only(&[])).unwrap();
    for &(name, parent) in NAMES {
        let rel = match parent {
            Some(p) => Path::new(OsStr::from_bytes(p)).join(OsStr::from_bytes(name)),
            None => Path::new(OsStr::from_bytes(name)).to_owned(),
        };
        fx.mkdir(&rel).unwrap();
    }
    // cgroup2 cannot rename (the table learns a name once per id).
    let err = std::fs::rename(fx.top().join("n\\xff"), fx.top().join("m")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");

    let mut ran = 0;
    for backend in [
        BackendChoice::Read,
        BackendChoice::Auto,
        BackendChoice::Stream,
    ] {
        let Some(mut c) = collector(&root, backend) else {
            continue;
        };
        ran += 1;
        let what = format!("{backend:?}");
        let mut tree = CgroupSample::default();
        for i in 0..3 {
            if i == 2 {
                // The same name, another cgroup.
                let c2 = fx.top().join(OsStr::from_bytes(b"n\xfe")).join("c2");
                std::fs::remove_dir(&c2).unwrap();
                std::fs::create_dir(&c2).unwrap();
            }
            c.sample(&mut tree);
            check(&tree, fx.top(), &format!("{what}, sample {i}"));
        }
    }
    assert!(ran >= 2, "plain read and auto always run");
}
