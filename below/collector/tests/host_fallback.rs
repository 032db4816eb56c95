//! Check 3 on a kernel without the memcg kfuncs (this project's hosts):
//! `auto` falls back per file with the reason; forcing bpf serves what BPF
//! can and reads the rest, with the same reason.
//! Skipped (with a message) when not root or when the kernel has the
//! kfuncs; the VM script runs the same check in a 6.1 guest.

use bstats_collector::BackendChoice;
use bstats_collector::BackendKind;
use bstats_collector::CgroupCollector;
use bstats_collector::Options;
use bstats_collector::StatFile;

fn options(backend: BackendChoice) -> Option<Options> {
    if bstats_testkit::skip_unless_root("loads BPF") {
        return None;
    }
    let Ok(root) = bstats_collector::find_cgroup2_mount() else {
        println!("skipped: no cgroup2 mount");
        return None;
    };
    Some(Options {
        root,
        backend,
        collect_io_stat: false,
        filter: None,
        stream_interval: None,
        top: None,
    })
}

#[test]
fn auto_and_forced_bpf_fall_back_per_file() {
    let Some(auto) = options(BackendChoice::Auto) else {
        return;
    };
    let mut c = CgroupCollector::new(&auto).expect("auto always works");
    let plan = c.plan().clone();
    println!("{plan}");
    let choice = |f| plan.files.iter().find(|c| c.file == f).unwrap().clone();
    let memstat = choice(StatFile::MemoryStat);
    if memstat.backend == BackendKind::Bpf {
        println!("skipped: this kernel has the memcg kfuncs (the 7.3 guest checks cover it)");
        return;
    }
    assert_eq!(memstat.backend, BackendKind::Read);
    let bpf_refusal = |c: &bstats_collector::FileChoice| {
        c.not_served
            .iter()
            .find(|r| r.backend == BackendKind::Bpf)
            .map(|r| r.why.clone())
    };
    let bpf_why = bpf_refusal(&memstat).unwrap_or_else(|| panic!("{memstat:?}"));
    let io = choice(StatFile::IoStat);
    assert_eq!(io.backend, BackendKind::Read);

    let snap = c.collect();
    assert!(!snap.nodes.is_empty());
    assert!(snap.nodes[0].parent.is_none());

    let forced = options(BackendChoice::Bpf).unwrap();
    let mut c = CgroupCollector::new(&forced).expect("forced bpf serves what it can");
    let forced_plan = c.plan().clone();
    println!("forced bpf:\n{forced_plan}");
    for (a, f) in plan.files.iter().zip(&forced_plan.files) {
        assert_eq!(a.file, f.file);
        // auto's stream tier is off here: the same backend per file.
        assert_eq!(a.backend, f.backend, "{}", f.file);
    }
    let memstat = forced_plan
        .files
        .iter()
        .find(|c| c.file == StatFile::MemoryStat)
        .unwrap();
    assert_eq!(bpf_refusal(memstat), Some(bpf_why), "{memstat:?}");
    assert!(!c.collect().nodes.is_empty());
}
