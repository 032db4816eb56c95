//! Acceptance: on this host's cgroup2 mount, our plain-read tree equals the
//! one below-model 0.9's own `Collector` builds, field by field, for frozen
//! test cgroups. Needs root (it creates cgroups).

use std::fs;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::time::Duration;

use bpf_stats::BackendChoice;
use model::CgroupSample;

/// Test cgroups under the real cgroup2 root, removed on drop.
struct TestTree {
    top: PathBuf,
    children: Vec<Child>,
}

impl TestTree {
    fn new(name: &str) -> TestTree {
        let root = bpf_stats::find_cgroup2_mount().expect("cgroup2 mount");
        let top = root.join(format!("{}-{}", name, std::process::id()));
        let mut t = TestTree {
            top,
            children: vec![],
        };
        for d in ["", "a", "a/x", "a/y", "a/y/deep", "b", "c"] {
            fs::create_dir(t.top.join(d)).expect("mkdir cgroup (are you root?)");
        }
        for d in ["a/x", "a/y/deep", "b"] {
            t.spawn_in(d);
        }
        t
    }

    fn spawn_in(&mut self, cg: &str) {
        let child = Command::new("sleep").arg("600").spawn().unwrap();
        fs::write(
            self.top.join(cg).join("cgroup.procs"),
            child.id().to_string(),
        )
        .unwrap();
        self.children.push(child);
    }

    fn freeze(&self) {
        fs::write(self.top.join("cgroup.freeze"), "1").unwrap();
        for _ in 0..100 {
            let events = fs::read_to_string(self.top.join("cgroup.events")).unwrap();
            if events.contains("frozen 1") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("test cgroups did not freeze");
    }
}

impl Drop for TestTree {
    fn drop(&mut self) {
        let _ = fs::write(self.top.join("cgroup.freeze"), "0");
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let mut dirs: Vec<PathBuf> = walk(&self.top);
        dirs.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for d in dirs {
            let _ = fs::remove_dir(d);
        }
    }
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    for e in fs::read_dir(p).into_iter().flatten().flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.extend(walk(&e.path()));
        }
    }
    out
}

/// Pressure averages decay even in frozen cgroups; totals do not.
fn without_pressure_avgs(s: &mut CgroupSample) {
    if let Some(p) = s.pressure.as_mut() {
        let mut metrics = vec![&mut p.cpu.some, &mut p.io.some, &mut p.io.full];
        metrics.extend([&mut p.memory.some, &mut p.memory.full]);
        metrics.extend(p.cpu.full.as_mut());
        for m in metrics {
            m.avg10 = None;
            m.avg60 = None;
            m.avg300 = None;
        }
    }
    for c in s.children.iter_mut().flat_map(|c| c.values_mut()) {
        without_pressure_avgs(c);
    }
}

fn ours(root: &Path) -> CgroupSample {
    let mut c = bpf_stats::CgroupCollector::new(&bpf_stats::Options {
        root: root.to_path_buf(),
        backend: BackendChoice::Read,
        collect_io_stat: true,
        filter: None,
        stream_interval: None,
        top: None,
    })
    .unwrap();
    let snap = c.collect();
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let mut t = bstats_model::build_tree(snap);
    without_pressure_avgs(&mut t);
    t
}

fn belows(root: &Path) -> CgroupSample {
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut c = model::Collector::new(
        logger,
        model::CollectorOptions {
            cgroup_root: root.to_path_buf(),
            collect_io_stat: true,
            ..Default::default()
        },
    );
    let mut t = c.collect_sample().unwrap().cgroup;
    without_pressure_avgs(&mut t);
    t
}

fn count(s: &CgroupSample) -> usize {
    1 + s
        .children
        .iter()
        .flat_map(|c| c.values())
        .map(count)
        .sum::<usize>()
}

#[test]
fn plain_read_equals_below_collector_on_frozen_cgroups() {
    let tree = TestTree::new("bstats-eq");
    tree.freeze();
    // A concurrent flush can land between two reads; the same state read
    // twice by us around below's read rules that out.
    for _ in 0..5 {
        let before = ours(&tree.top);
        let theirs = belows(&tree.top);
        let after = ours(&tree.top);
        if before != after {
            continue;
        }
        assert_eq!(count(&before), 7);
        assert!(before.cpu_stat.is_some());
        assert!(before.cgroup_stat.is_some());
        assert_eq!(
            format!("{:#?}", before),
            format!("{:#?}", theirs),
            "plain read and below's collector differ"
        );
        return;
    }
    panic!("frozen cgroups never read the same twice");
}
