//! Check 3 on a kernel without the memcg kfuncs (this project's hosts):
//! `auto` falls back per file with the reason, forcing bpf fails with it.
//! Skipped (with a message) when not root or when the kernel has the
//! kfuncs; the VM script runs the same check in a 6.1 guest.

use bpf_stats::BackendChoice;
use bpf_stats::BackendKind;
use bpf_stats::CgroupCollector;
use bpf_stats::Options;
use bpf_stats::StatFile;

fn options(backend: BackendChoice) -> Option<Options> {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: loading BPF needs root");
        return None;
    }
    let Ok(root) = bpf_stats::find_cgroup2_mount() else {
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
fn auto_falls_back_per_file_and_forced_bpf_fails() {
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
    assert!(memstat.reason.contains("bpf: "), "{}", memstat.reason);
    let io = choice(StatFile::IoStat);
    assert_eq!(io.backend, BackendKind::Read);

    let snap = c.collect();
    assert!(!snap.nodes.is_empty());
    assert!(snap.nodes[0].parent.is_none());

    let bpf_reason = memstat.reason.split("bpf: ").nth(1).unwrap();
    let bpf_reason = bpf_reason.split(';').next().unwrap();
    let forced = options(BackendChoice::Bpf).unwrap();
    match CgroupCollector::new(&forced) {
        Ok(_) => panic!("--cgroup-backend bpf must fail when memory.stat cannot be served"),
        Err(e) => {
            let e = format!("{e:#}");
            println!("forced bpf: {e}");
            assert!(e.contains(bpf_reason), "{e} lacks {bpf_reason:?}");
        }
    }
}
