//! A records map that cannot grow: the failed reload (a verifier pass) is
//! not tried again in the next sample. Needs root; skipped otherwise.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsFd;

use anyhow::bail;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;

use super::kernel::Kernel;
use super::layer::KernelBtf;
use super::load::run_growing;
use super::load::Loaded;
use super::load::FIRST_CAPACITY;

#[test]
fn a_failed_growth_is_not_tried_again_in_the_next_sample() {
    let Some(mount) = crate::mount::test_cgroup2("loads BPF") else {
        return;
    };
    let mut fx = Fixture::new(&mount, "grow", Controllers::Only(&[])).unwrap();
    // With the top, one more cgroup than the first load has room for.
    for i in 0..FIRST_CAPACITY {
        fx.mkdir(format!("c{i}")).unwrap();
    }
    let top = File::open(fx.top()).unwrap();
    let config = Kernel::read(&KernelBtf::open(None).unwrap())
        .unwrap()
        .config;
    let mut loaded = Loaded::first(top.as_fd(), config, None).unwrap();
    let reloads = Cell::new(0);
    let mut sample = || {
        let refuse = |_: &Loaded, _| -> anyhow::Result<Loaded> {
            reloads.set(reloads.get() + 1);
            bail!("refused")
        };
        run_growing(&mut loaded, |l| l, |l| Ok((l.run()?, ())), refuse)
            .map(drop)
            .unwrap_err()
    };
    let first = format!("{:#}", sample());
    assert!(
        first.contains("cannot grow the records map to") && first.contains("refused"),
        "{first}"
    );
    let second = format!("{:#}", sample());
    assert!(
        second.contains("has room for 256 of 257 cgroups: growing it failed"),
        "{second}"
    );
    assert_eq!(reloads.get(), 1, "reloaded again within a minute");
}
