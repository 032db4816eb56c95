//! Top-N over the BPF records on this host's kernel: the fork's program
//! (bstats) runs its pass modes through the verifier, keeps the busiest
//! cgroup, and what it keeps is read in full, also after
//! the tree moved every record slot behind a new cgroup (a RANK pass whose
//! wanted slot holds another cgroup, then a WANTED pass).
//! Skipped (with a message) when not root or when BPF does not serve
//! cpu.stat here.

use std::path::Path;
use std::time::Duration;

use bstats_collector::BackendChoice;
use bstats_collector::BackendKind;
use bstats_collector::CgroupCollector;
use bstats_collector::FlatSample;
use bstats_collector::Options;
use bstats_collector::StatFile;
use bstats_collector::TopBy;
use bstats_collector::TopN;
use bstats_testkit::Controllers;
use bstats_testkit::Cpu;
use bstats_testkit::Fixture;
use bstats_testkit::Work;

/// usage_usec in `cgroup`'s cpu.stat.
fn usage_usec(cgroup: &Path) -> u64 {
    let text = std::fs::read_to_string(cgroup.join("cpu.stat")).expect("cpu.stat");
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.parse().ok())
        .expect("usage_usec in cpu.stat")
}

/// One sample; checks it kept the root and `busy` only, `busy`'s usage
/// where the file's reads around it put it, and the root's cgroup.stat
/// (a field of the full record only) as the tree has it.
fn sample(c: &mut CgroupCollector, busy: &Path, cgroups: usize) -> FlatSample {
    let before = usage_usec(busy);
    let snap = c.collect();
    let after = usage_usec(busy);
    let names: Vec<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["", "busy"], "notes: {:?}", snap.report.notes);
    assert_eq!(snap.report.dropped, cgroups - 2);
    let usage = snap.nodes[1]
        .sample
        .cpu_stat
        .as_ref()
        .and_then(|s| s.usage_usec);
    let usage = usage.expect("busy's cpu.stat read in full");
    assert!(
        (before..=after).contains(&usage),
        "busy's usage_usec {usage} outside the file's {before}..={after}"
    );
    let stat = snap.nodes[0].sample.cgroup_stat.as_ref();
    assert_eq!(
        stat.and_then(|s| s.nr_descendants),
        Some(cgroups as u32 - 1),
        "the root's cgroup.stat"
    );
    snap
}

#[test]
fn top_n_over_the_records_keeps_the_busiest_read_in_full() {
    if bstats_testkit::skip_unless_root("loads BPF") {
        return;
    }
    let Ok(root) = bstats_collector::find_cgroup2_mount() else {
        println!("skipped: no cgroup2 mount");
        return;
    };
    let mut fx = Fixture::new(&root, "top", Controllers::Only(&["cpu"])).expect("fixture");
    for leaf in ["a", "c"] {
        fx.mkdir(leaf).expect("mkdir");
    }
    let busy = fx.mkdir("busy").expect("mkdir");
    let spin = Work {
        cpu: Cpu::Spin,
        ..Work::default()
    };
    fx.spawn(&busy, &spin).expect("a spinning worker");
    let opts = Options {
        root: fx.top().to_path_buf(),
        backend: BackendChoice::Bpf,
        collect_io_stat: false,
        filter: None,
        stream_interval: None,
        top: Some(TopN {
            n: 1,
            by: TopBy::Cpu,
            keep: None,
        }),
    };
    let mut c = CgroupCollector::new(&opts).expect("the BPF backend");
    let cpu = c.plan().files.iter().find(|f| f.file == StatFile::CpuStat);
    if cpu.is_none_or(|f| f.backend != BackendKind::Bpf) {
        println!("skipped: BPF does not serve cpu.stat here ({cpu:?})");
        return;
    }
    // The first sample ranks over a pass with nothing wanted yet; the
    // ones after find the kept cgroups in full in the rank pass.
    for _ in 0..3 {
        sample(&mut c, &busy, 4);
        std::thread::sleep(Duration::from_millis(200));
    }
    // A cgroup ahead of `busy` in the walk: every slot from there on holds
    // another cgroup than the one wanted in it.
    fx.mkdir("a/x").expect("mkdir");
    for _ in 0..3 {
        sample(&mut c, &busy, 5);
        std::thread::sleep(Duration::from_millis(200));
    }
}
