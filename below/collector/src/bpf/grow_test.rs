//! The records map: sized for the tree at the first load, and, where it
//! cannot grow, the failed reload (a verifier pass) and the pass are not
//! tried again in the next sample. Needs root; skipped otherwise.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsFd;

use anyhow::bail;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;

use super::kernel::Kernel;
use super::layer::KernelBtf;
use super::load::capacity_for;
use super::load::first_capacity;
use super::load::Loaded;
use super::load::FIRST_CAPACITY;
use super::program::run_growing;

#[test]
fn the_first_load_fits_the_tree_and_a_failed_growth_waits() {
    let Some(mount) = crate::mount::test_cgroup2("loads BPF") else {
        return;
    };
    let mut fx = Fixture::new(&mount, "grow", Controllers::Only(&[])).unwrap();
    // With the top, more cgroups than the room of a load that cannot
    // read the tree's size.
    let n = FIRST_CAPACITY + 10;
    for i in 0..n {
        fx.mkdir(format!("c{i}")).unwrap();
    }
    let top = File::open(fx.top()).unwrap();
    assert_eq!(first_capacity(top.as_fd()), capacity_for(n + 1));
    let config = Kernel::read(&KernelBtf::open(None).unwrap()).config;
    let mut loaded = Loaded::first(top.as_fd(), config, None).unwrap();
    let runs = Cell::new(0);
    let reloads = Cell::new(0);
    let sample = |loaded: &mut Loaded| {
        let refuse = |_: &Loaded, _| -> anyhow::Result<Loaded> {
            reloads.set(reloads.get() + 1);
            bail!("refused")
        };
        let run = |l: &mut Loaded| {
            runs.set(runs.get() + 1);
            Ok((l.run()?, ()))
        };
        run_growing(loaded, |l| l, run, refuse).map(|(pass, ())| pass.cgroups)
    };
    assert_eq!(
        sample(&mut loaded).unwrap(),
        n + 1,
        "fits at the first load"
    );
    assert_eq!(reloads.get(), 0);

    // Past the room of that load: the growth is refused.
    let room = capacity_for(n + 1);
    for i in n..room {
        fx.mkdir(format!("c{i}")).unwrap();
    }
    let first = format!("{:#}", sample(&mut loaded).unwrap_err());
    assert!(
        first.contains("Failed to grow the records map to") && first.contains("refused"),
        "{first}"
    );
    let second = format!("{:#}", sample(&mut loaded).unwrap_err());
    assert!(
        second.contains(&format!(
            "has room for {room} of {} cgroups and growing it failed",
            room + 1
        )),
        "{second}"
    );
    assert_eq!(reloads.get(), 1, "reloaded again within a minute");
    assert_eq!(
        runs.get(),
        2,
        "a pass ran while the growth was known to fail"
    );
}
