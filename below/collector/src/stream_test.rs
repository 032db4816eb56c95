//! The stream backend's bookkeeping on tempdir fixtures (regular files
//! poll readable and pread like a stream with a record ready); the kernel
//! side is tested in the patched guest.

use std::fs;
use std::path::Path;

use crate::BackendChoice;
use crate::BackendKind;
use crate::CgroupCollector;
use crate::Options;
use crate::StatFile;

fn cgroup(dir: &Path, files: &[(&str, &str)]) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("cgroup.controllers"), "cpu memory\n").unwrap();
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap();
    }
}

fn fixture(interval: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    cgroup(
        t.path(),
        &[
            ("cpu.stat.stream_interval", interval),
            ("cpu.stat", "usage_usec 1\n"),
            ("cpu.stat.stream", "usage_usec 5\n"),
        ],
    );
    cgroup(
        &t.path().join("a"),
        &[
            ("cpu.stat", "usage_usec 2\n"),
            ("cpu.stat.stream", "usage_usec 7\n"),
            ("memory.stat", "anon 1\n"),
            ("memory.stat.stream", "anon 3\n"),
            ("memory.current", "4096\n"),
        ],
    );
    t
}

fn options(root: &Path, interval: Option<std::time::Duration>) -> Options {
    Options {
        root: root.to_path_buf(),
        backend: BackendChoice::Stream,
        collect_io_stat: false,
        filter: None,
        stream_interval: interval,
        top: None,
    }
}

#[test]
fn stream_files_come_from_streams_and_fds_follow_cgroups() {
    let t = fixture("100\n");
    let mut c = CgroupCollector::new(&options(t.path(), None)).unwrap();
    let backend = |f| c.plan().files.iter().find(|x| x.file == f).unwrap().backend;
    assert_eq!(backend(StatFile::CpuStat), BackendKind::Stream);
    assert_eq!(backend(StatFile::MemoryStat), BackendKind::Stream);
    assert_eq!(backend(StatFile::MemoryCurrent), BackendKind::Read);

    let snap = c.collect();
    assert!(
        snap.report.errors.is_empty() && snap.report.notes.is_empty(),
        "{:?}",
        snap
    );
    let a = &snap.nodes.iter().find(|n| n.name == "a").unwrap().sample;
    assert_eq!(
        snap.nodes[0].sample.cpu_stat.as_ref().unwrap().usage_usec,
        Some(5)
    );
    assert_eq!(a.cpu_stat.as_ref().unwrap().usage_usec, Some(7));
    assert_eq!(a.memory_stat.as_ref().unwrap().anon, Some(3));
    assert_eq!(a.memory_current, Some(4096));
    assert_eq!(c.stream_fds_kept(), 2);
    // root: cpu.stat; a: cpu.stat, memory.stat
    assert_eq!(c.read_counters().streams_opened, 3);

    // Kept fds are reused: later samples open no stream file again.
    c.collect();
    c.collect();
    assert_eq!(c.read_counters().streams_opened, 3);

    // A removed cgroup's fds are closed; a new one's are opened.
    fs::remove_dir_all(t.path().join("a")).unwrap();
    cgroup(
        &t.path().join("b"),
        &[("cpu.stat.stream", "usage_usec 9\n")],
    );
    let snap = c.collect();
    assert_eq!(c.stream_fds_kept(), 2);
    assert_eq!(c.read_counters().streams_opened, 4);
    let b = &snap.nodes.iter().find(|n| n.name == "b").unwrap().sample;
    assert_eq!(b.cpu_stat.as_ref().unwrap().usage_usec, Some(9));
    assert!(snap.nodes.iter().all(|n| n.name != "a"));
}

#[test]
fn malformed_stream_record_fails_that_file() {
    let t = fixture("100\n");
    fs::write(t.path().join("a/memory.stat.stream"), "anon x\n").unwrap();
    let mut c = CgroupCollector::new(&options(t.path(), None)).unwrap();
    let snap = c.collect();
    assert_eq!(snap.report.errors.len(), 1);
    assert_eq!(
        snap.report.errors[0].to_string(),
        "a/memory.stat: line 1: invalid number \"x\""
    );
    let a = &snap.nodes.iter().find(|n| n.name == "a").unwrap().sample;
    assert_eq!(a.cpu_stat.as_ref().unwrap().usage_usec, Some(7));
}

#[test]
fn streaming_off_without_interval_is_unavailable() {
    let t = fixture("0\n");
    let e = CgroupCollector::new(&options(t.path(), None))
        .err()
        .unwrap();
    assert!(e.to_string().contains("streaming is off"), "{}", e);
    // auto falls back to plain read, saying why.
    let mut o = options(t.path(), None);
    o.backend = BackendChoice::Auto;
    let c = CgroupCollector::new(&o).unwrap();
    assert_eq!(c.plan().files[0].backend, BackendKind::Read);
    let refused = &c.plan().files[0].not_served;
    let stream = refused.iter().find(|r| r.backend == BackendKind::Stream);
    assert!(
        matches!(stream, Some(crate::Refusal { why: crate::NotServed::Unavailable(e), .. }) if e.contains("streaming is off")),
        "{refused:?}"
    );
}

#[test]
fn sets_interval_when_off_and_restores_it() {
    let t = fixture("0\n");
    let knob = t.path().join("cpu.stat.stream_interval");
    let c =
        CgroupCollector::new(&options(t.path(), Some(std::time::Duration::from_secs(1)))).unwrap();
    assert_eq!(fs::read_to_string(&knob).unwrap(), "1000");
    drop(c);
    assert_eq!(fs::read_to_string(&knob).unwrap(), "0");

    // Someone else's interval is left alone.
    fs::write(&knob, "250\n").unwrap();
    let c =
        CgroupCollector::new(&options(t.path(), Some(std::time::Duration::from_secs(1)))).unwrap();
    drop(c);
    assert_eq!(fs::read_to_string(&knob).unwrap(), "250\n");
}

#[test]
fn no_stream_files_on_this_kernel() {
    let t = fixture("100\n");
    fs::remove_file(t.path().join("cpu.stat.stream_interval")).unwrap();
    let e = CgroupCollector::new(&options(t.path(), None))
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("the kernel has no stream files"),
        "{}",
        e
    );
}

#[test]
fn top_n_ranks_streamed_values_not_the_text() {
    let t = fixture("100\n");
    // By its text c is the busiest; by its stream (what is served), a.
    cgroup(
        &t.path().join("c"),
        &[
            ("cpu.stat", "usage_usec 50\n"),
            ("cpu.stat.stream", "usage_usec 1\n"),
        ],
    );
    let mut opts = options(t.path(), None);
    opts.top = Some(crate::TopN {
        n: 1,
        by: crate::TopBy::Cpu,
        keep: None,
    });
    let mut c = CgroupCollector::new(&opts).unwrap();
    let snap = c.collect();
    let names: Vec<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["", "a"]);
    assert_eq!(snap.report.dropped, 1);
    let a = &snap.nodes[1].sample;
    assert_eq!(a.cpu_stat.as_ref().unwrap().usage_usec, Some(7));
    assert_eq!(a.memory_current, Some(4096));
}
