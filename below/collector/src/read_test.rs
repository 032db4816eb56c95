use std::fs;
use std::path::Path;

use super::*;
use regex::Regex;

use crate::FlatSample;

/// One walk of `root` into a new table, as a flat list.
fn walk(root: &Path, filter: Option<Regex>, files: FileSet) -> FlatSample {
    let mut table = Table::new(filter, None);
    let mut snap = FlatSample::default();
    Walker::new(root)
        .unwrap()
        .walk(&mut table, files, &mut snap.report.errors);
    snap.nodes = table.take_nodes();
    snap
}

/// Makes a fake cgroup directory with the given files (tempdir fixture).
fn cgroup(dir: &Path, files: &[(&str, &str)]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap();
    }
}

const PRESSURE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2\n";

fn fixture() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    cgroup(
        t.path(),
        &[
            ("cpu.stat", "usage_usec 100\n"),
            ("cgroup.stat", "nr_descendants 3\n"),
        ],
    );
    cgroup(
        &t.path().join("a"),
        &[
            ("cpu.stat", "usage_usec 10\nuser_usec 6\nsystem_usec 4\n"),
            ("memory.current", "8192\n"),
            ("memory.max", "max\n"),
            ("memory.stat", "anon 4096\nfile 4096\n"),
            ("pids.current", "2\n"),
            ("pids.max", "100\n"),
            ("cpu.pressure", PRESSURE),
            ("io.pressure", PRESSURE),
            ("memory.pressure", PRESSURE),
            ("io.stat", "8:0 rbytes=1 wbytes=2\n"),
        ],
    );
    cgroup(
        &t.path().join("a/b"),
        &[
            ("memory.stat", "anon 1\nfile oops\n"),
            ("memory.current", "4096\n"),
            ("cpu.max", "max 100000\n"),
        ],
    );
    cgroup(&t.path().join("c"), &[("cpu.stat", "usage_usec 1\n")]);
    t
}

fn all_but_io() -> FileSet {
    let mut f = FileSet::all();
    f.remove(StatFile::IoStat);
    f
}

#[test]
fn walks_tree_in_preorder_with_parents() {
    let t = fixture();
    let snap = walk(t.path(), None, all_but_io());
    let paths: Vec<String> = (0..snap.nodes.len()).map(|i| snap.path_of(i)).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(sorted, ["", "a", "a/b", "c"]);
    for (i, n) in snap.nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            assert!(p < i, "parent after child");
        }
    }
    let root = &snap.nodes[0];
    assert_eq!(root.parent, None);
    assert_eq!(root.sample.cpu_stat.as_ref().unwrap().usage_usec, Some(100));
    assert_eq!(root.sample.memory_current, None);
    assert!(root.sample.inode_number.is_some());
}

#[test]
fn reads_fields_and_max() {
    let t = fixture();
    let snap = walk(t.path(), None, all_but_io());
    let a = &snap.nodes.iter().find(|n| n.name == "a").unwrap().sample;
    assert_eq!(a.memory_current, Some(8192));
    assert_eq!(a.memory_max, Some(-1));
    assert_eq!(a.tids_current, Some(2));
    assert_eq!(a.tids_max, Some(100));
    assert_eq!(a.memory_stat.as_ref().unwrap().anon, Some(4096));
    assert_eq!(a.pressure.as_ref().unwrap().io.full.total, Some(2));
    assert_eq!(a.cgroup_controllers.as_ref().unwrap().len(), 3);
    // io.stat was not asked for.
    assert_eq!(a.io_stat, None);
}

#[test]
fn io_stat_only_when_asked() {
    let t = fixture();
    let snap = walk(t.path(), None, FileSet::all());
    let a = &snap.nodes.iter().find(|n| n.name == "a").unwrap().sample;
    assert_eq!(a.io_stat.as_ref().unwrap()["8:0"].wbytes, Some(2));
}

#[test]
fn malformed_file_fails_that_file_only() {
    let t = fixture();
    let snap = walk(t.path(), None, all_but_io());
    let b = &snap.nodes.iter().find(|n| n.name == "b").unwrap().sample;
    assert_eq!(b.memory_stat, None);
    assert_eq!(b.memory_current, Some(4096));
    assert_eq!(b.cpu_max.as_ref().unwrap().max_usec, -1);
    assert_eq!(snap.report.errors.len(), 1, "{:?}", snap.report.errors);
    let e = snap.report.errors[0].to_string();
    assert_eq!(e, "a/b/memory.stat: line 2: invalid number \"oops\"");
}

#[test]
fn partial_pressure_gives_no_pressure() {
    let t = fixture();
    fs::write(
        t.path().join("a/io.pressure"),
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    )
    .unwrap();
    let snap = walk(t.path(), None, all_but_io());
    let a = &snap.nodes.iter().find(|n| n.name == "a").unwrap().sample;
    assert_eq!(a.pressure, None);
    assert_eq!(snap.report.errors[0].file, StatFile::IoPressure);
}

#[test]
fn filter_skips_subtrees() {
    let t = fixture();
    let re = Regex::new("^a$").unwrap();
    let snap = walk(t.path(), Some(re), all_but_io());
    let names: Vec<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"c"));
}

#[test]
fn vanished_cgroup_is_skipped() {
    let t = fixture();
    // A directory without cgroup.controllers whose files are missing looks
    // like a cgroup removed mid-read.
    fs::create_dir(t.path().join("gone")).unwrap();
    let snap = walk(t.path(), None, all_but_io());
    assert!(snap.nodes.iter().all(|n| n.name != "gone"));
    assert!(snap
        .report
        .errors
        .iter()
        .all(|e| !e.cgroup.starts_with("gone")));
}

#[test]
fn counts_opens() {
    let t = fixture();
    let mut w = Walker::new(t.path()).unwrap();
    w.walk(
        &mut Table::default(),
        FileSet::from_iter([StatFile::CpuStat]),
        &mut Vec::new(),
    );
    // cpu.stat exists in root, a and c; b has none.
    assert_eq!(w.reader.counters.files_opened, 3);
    assert_eq!(w.reader.counters.dirs_opened, 3);
}

#[test]
fn missing_root_is_an_error() {
    let e = Walker::new(Path::new("/nonexistent/cgroup")).err().unwrap();
    assert!(format!("{:#}", e).contains("/nonexistent/cgroup"));
}

/// Names by id come from the cgroup's own directory listing: its child
/// directories only, names kept as bytes, nothing for a cgroup gone.
#[test]
fn children_by_id_lists_child_directories() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    let dir = tempfile::tempdir().unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    for d in [Path::new("a/x"), Path::new(odd)] {
        fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    fs::write(dir.path().join("cgroup.procs"), "").unwrap();
    let ino = |p: &Path| fs::metadata(dir.path().join(p)).unwrap().ino();
    let root = open_root(dir.path()).unwrap();
    let top = children_by_id(root.as_fd(), Path::new(""));
    let want = [
        (ino(Path::new("a")), "a".into()),
        (ino(Path::new(odd)), odd.to_owned()),
    ];
    assert_eq!(top, want.into_iter().collect());
    let under_a = children_by_id(root.as_fd(), Path::new("a"));
    assert_eq!(
        under_a,
        [(ino(Path::new("a/x")), "x".into())].into_iter().collect()
    );
    assert!(children_by_id(root.as_fd(), Path::new("gone")).is_empty());
}
