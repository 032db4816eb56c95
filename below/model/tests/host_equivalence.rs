//! Acceptance: on this host's cgroup2 mount, our plain-read tree equals the
//! one below-model 0.9's own `Collector` builds, field by field, for frozen
//! test cgroups. Needs root (it creates cgroups).

use std::path::Path;

use bstats_collector::BackendChoice;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;
use bstats_testkit::Work;
use model::CgroupSample;

/// Test cgroups with idle processes in three of the leaves.
fn tree() -> Fixture {
    let root = bstats_collector::find_cgroup2_mount().expect("cgroup2 mount");
    let mut t = Fixture::new(&root, "eq", Controllers::All).expect("test cgroups (are you root?)");
    for d in ["a", "a/x", "a/y", "a/y/deep", "b", "c"] {
        t.mkdir(d).unwrap();
    }
    for d in ["a/x", "a/y/deep", "b"] {
        let cg = t.top().join(d);
        t.spawn(&cg, &Work::default()).unwrap();
    }
    t
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
    let mut c = bstats_collector::CgroupCollector::new(&bstats_collector::Options {
        root: root.to_path_buf(),
        backend: BackendChoice::Read,
        collect_io_stat: true,
        filter: None,
        stream_interval: None,
        top: None,
    })
    .unwrap();
    let mut t = CgroupSample::default();
    let report = c.sample(&mut t);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
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
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    let tree = tree();
    tree.freeze().unwrap();
    // A concurrent flush can land between two reads; the same state read
    // twice by us around below's read rules that out.
    for _ in 0..5 {
        let before = ours(tree.top());
        let theirs = belows(tree.top());
        let after = ours(tree.top());
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
