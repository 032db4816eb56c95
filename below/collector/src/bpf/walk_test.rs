//! The pass under RCU takes no cgroup_mutex: it runs to its end while
//! another cgroup iterator holds the mutex (mutex_holder.bpf.c, which
//! spins until released). A pass that needed the mutex would wait for the
//! holder's deadline instead. Needs root and a kernel that walks under RCU
//! (6.7+); skipped with a line otherwise.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;
use std::time::Instant;

use bstats_testkit::Controllers;
use bstats_testkit::Fixture;
use libbpf_rs::skel::Skel;
use libbpf_rs::CgroupIterOpts;
use libbpf_rs::CgroupIterOrder;
use libbpf_rs::IterOpts;
use libbpf_rs::MapCore;
use libbpf_rs::MapFlags;
use libbpf_rs::MapHandle;

use super::kernel::Kernel;
use super::layer;
use super::layer::KernelBtf;
use super::layer::Pod;
use super::load::Loaded;
use super::load::Walk;

// libbpf-cargo's output: its unwrap()s are not ours to change.
#[allow(clippy::unwrap_used)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/mutex_holder.skel.rs"));
}
use skel::types::bss as HolderBss;

// SAFETY: the skeleton's #[repr(C)] type of a data section: integers.
unsafe impl Pod for HolderBss {}

fn holder_state(bss: &MapHandle) -> HolderBss {
    let bytes = bss
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .unwrap()
        .unwrap();
    layer::read::<HolderBss>(&bytes).unwrap()
}

#[test]
fn the_rcu_pass_runs_while_cgroup_mutex_is_held() {
    let Some(root) = crate::mount::test_cgroup2("loads BPF") else {
        return;
    };
    let root = File::open(root).unwrap();
    let kernel = Kernel::read(&KernelBtf::open(None).unwrap());
    if let Err(why) = kernel.config.rcu_walk {
        println!("skipped: {why}");
        return;
    }
    let mut loaded = Loaded::first(root.as_fd(), kernel.config, None).unwrap();
    assert_eq!(loaded.walk(), &Walk::Rcu);

    let holder = layer::load(skel::MutexHolderSkelBuilder::default(), None, |_| Ok(())).unwrap();
    let mut opts = CgroupIterOpts::from_fd(root.as_fd());
    opts.order = CgroupIterOrder::SelfOnly;
    let link = layer::prog(holder.object(), "hold")
        .unwrap()
        .attach_iter_with_opts(IterOpts::Cgroup(opts))
        .unwrap();
    let bss = MapHandle::try_from(&layer::map(holder.object(), ".bss").unwrap()).unwrap();
    let holding = std::thread::spawn(move || layer::run_iter(&link, &mut Vec::new()));
    let start = Instant::now();
    while holder_state(&bss).holding == 0 {
        if holding.is_finished() {
            panic!("the holder ended first: {:?}", holding.join());
        }
        assert!(
            start.elapsed() < Duration::from_secs(12),
            "the holder never ran"
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    let pass = loaded.run().unwrap();
    let held_throughout = holder_state(&bss).holding == 1;
    let release = HolderBss {
        holding: 1,
        released: 1,
        timed_out: 0,
    };
    // SAFETY: HolderBss is u32s with no padding, all initialized.
    let bytes = unsafe {
        std::slice::from_raw_parts((&raw const release).cast::<u8>(), size_of::<HolderBss>())
    };
    bss.update(&0u32.to_ne_bytes(), bytes, MapFlags::ANY)
        .unwrap();
    holding.join().unwrap().unwrap();

    assert!(pass.cgroups > 0, "the pass saw no cgroup");
    assert_eq!(
        holder_state(&bss).timed_out,
        0,
        "the holder was not released"
    );
    assert!(
        held_throughout,
        "the pass ended after cgroup_mutex was let go"
    );
}

/// A walk of one cgroup (a walk root with no children) is a pass of one
/// record, in both forms and pass after pass: the iterator's last call
/// comes with seq_num 0 after one cgroup as after none, and a pass that
/// took it for an empty walk left the sample without its cgroup.
#[test]
fn a_walk_of_one_cgroup_is_one_record() {
    let Some(mount) = crate::mount::test_cgroup2("loads BPF") else {
        return;
    };
    let fx = Fixture::new(&mount, "walk1", Controllers::Only(&[])).unwrap();
    let leaf = File::open(fx.top()).unwrap();
    let id = std::fs::metadata(fx.top()).unwrap().ino();
    let kernel = Kernel::read(&KernelBtf::open(None).unwrap());
    let mut configs = vec![kernel.config];
    configs[0].rcu_walk = Err("tested as the cgroup iterator");
    if kernel.config.rcu_walk.is_ok() {
        configs.push(kernel.config);
    }
    for config in configs {
        let mut loaded = Loaded::first(leaf.as_fd(), config, None).unwrap();
        for _ in 0..2 {
            let pass = loaded.run().unwrap();
            let walk = loaded.walk();
            assert_eq!(pass.cgroups, 1, "{walk}");
            assert_eq!(loaded.records(1)[0].id, id, "{walk}");
        }
    }
}
