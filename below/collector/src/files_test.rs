//! `StatFile::controller` against a real cgroup2 tree: a controller's
//! files never exist where it is off (the BPF backend skips reading them
//! there), and core files exist everywhere. Needs root and a cgroup2
//! mount; its full check needs controllers there (the guests' facts stage).

use std::collections::BTreeSet;
use std::path::Path;

use bstats_testkit::Controllers;
use bstats_testkit::Fixture;

use crate::StatFile;

fn exists(dir: &Path, f: StatFile) -> bool {
    dir.join(f.name()).exists()
}

#[test]
fn a_controllers_files_exist_only_where_it_is_on() {
    let Some(root) = crate::mount::test_cgroup2("creates cgroups") else {
        return;
    };
    let mut fx = Fixture::new(&root, "files", Controllers::All).unwrap();
    let on = fx.mkdir("on").unwrap();
    // `on` turns nothing on for its children.
    let off = fx.mkdir("on/off").unwrap();
    let enabled: BTreeSet<String> = std::fs::read_to_string(on.join("cgroup.controllers"))
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(
        std::fs::read_to_string(off.join("cgroup.controllers"))
            .unwrap()
            .trim(),
        ""
    );
    for &f in StatFile::ALL {
        match f.controller() {
            Some(c) => {
                assert!(!exists(&off, f), "{f} exists without {c}");
                if !enabled.contains(c) {
                    assert!(!exists(&on, f), "{f} exists without {c}");
                }
            }
            // Pressure files are core but absent with psi off.
            None if f.is_pressure() && !exists(&root.join(fx.name()), f) => {}
            None => {
                assert!(exists(&on, f) && exists(&off, f), "core file {f} missing");
            }
        }
    }
    // Not vacuous where controllers are on: their files are there.
    for (c, f) in [
        ("memory", StatFile::MemoryCurrent),
        ("pids", StatFile::PidsCurrent),
        ("io", StatFile::IoStat),
        ("cpu", StatFile::CpuWeight),
    ] {
        if enabled.contains(c) {
            assert!(exists(&on, f), "{f} missing with {c} on");
        } else {
            println!("{c} not available here: its files checked only for absence");
        }
    }
}
