//! The program loads on a kernel that lacks any one of the KERNEL_FACTS,
//! and the plan sends exactly the files that need it to plain read, with
//! the reason. The kernel lacking it is this one with the member renamed,
//! or the enum value removed, in a copy of its BTF, which libbpf relocates
//! against (btf_custom_path).
//! Also the memory.stat keys that a config prints, told by BTF the same
//! way. Needs root (loading BPF); skipped with a line otherwise.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use super::btf_edit::edit;
use super::btf_edit::Edit;
use super::contract::*;
use super::layer::VMLINUX_BTF as BTF_PATH;
use super::probe::fact_files;
use super::probe::probe_with;
use crate::plan::BackendChoice;
use crate::plan::BackendKind;
use crate::plan::Plan;
use crate::FileSet;
use crate::StatFile;

/// What probing against `btf` found: the plan's files by backend, the
/// reasons, the facts the program reported.
struct Probe {
    plan: Plan,
    facts: u64,
}

fn probe_against(root: &File, btf: &Path) -> Probe {
    let probe = probe_with(root.as_fd(), Some(btf));
    let plan = Plan::choose(
        BackendChoice::Auto,
        &probe.capability,
        &Err(crate::NotServed::NotAskedFor),
    )
    .unwrap();
    let cap = probe.capability.as_ref().map(|_| ());
    let mut backend = probe
        .backend
        .unwrap_or_else(|| panic!("the program did not load: {cap:?}"));
    let facts = backend.program.run().expect("a pass").facts;
    Probe { plan, facts }
}

fn write(dir: &Path, name: &str, raw: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, raw).unwrap();
    path
}

fn read_files(plan: &Plan) -> FileSet {
    plan.files_of(BackendKind::Read)
}

/// Why BPF does not serve `f`.
fn why_not(plan: &Plan, f: StatFile) -> &crate::NotServed {
    let c = plan.files.iter().find(|c| c.file == f).unwrap();
    &c.not_served
        .iter()
        .find(|r| r.backend == BackendKind::Bpf)
        .unwrap()
        .why
}

/// What the tests that edit the kernel's BTF need: root, the cgroup2 mount,
/// the kernel's BTF and a directory for the edited copies; None (said why)
/// where one is missing.
fn btf_edit_setup() -> Option<(File, Vec<u8>, tempfile::TempDir)> {
    if bstats_testkit::skip_unless_root("loads BPF") {
        return None;
    }
    let (Ok(root), Ok(raw)) = (crate::find_cgroup2_mount(), std::fs::read(BTF_PATH)) else {
        println!("skipped: no cgroup2 mount or no {BTF_PATH}");
        return None;
    };
    Some((File::open(root).unwrap(), raw, tempfile::tempdir().unwrap()))
}

#[test]
fn loads_without_each_optional_fact() {
    let Some((root, raw, dir)) = btf_edit_setup() else {
        return;
    };
    let base = probe_against(&root, &write(dir.path(), "base", &raw));
    let mut tried = 0;
    for (i, fact) in KERNEL_FACTS.iter().enumerate() {
        if base.facts & (1 << i) == 0 {
            println!("{}: this kernel lacks it already", fact.name);
            continue;
        }
        let e = match fact.kind {
            FactKind::Field | FactKind::Cpumask => Edit::Member {
                ty: fact.ty,
                member: fact.member,
            },
            // Removed, not renamed: a renamed controller id is one the
            // record has no bit for.
            FactKind::Enumval => Edit::RemoveEnumVal {
                ty: fact.ty,
                value: fact.member,
            },
        };
        let without = write(dir.path(), fact.name, &edit(&raw, e).unwrap());
        let found = probe_against(&root, &without);
        assert_eq!(found.facts, base.facts & !(1 << i), "{}: facts", fact.name);
        let needs: FileSet = fact_files(fact).collect();
        assert_eq!(
            read_files(&found.plan),
            read_files(&base.plan).union(needs),
            "{}: files read",
            fact.name
        );
        for f in needs.difference(read_files(&base.plan)).iter() {
            let crate::NotServed::MissingFact(what) = why_not(&found.plan, f) else {
                panic!("{}: {f}: {:?}", fact.name, why_not(&found.plan, f));
            };
            assert!(
                what.ends_with(&format!(" {}.{}", fact.ty, fact.member)),
                "{}: {f}: {what}",
                fact.name
            );
        }
        tried += 1;
    }
    println!(
        "{tried} of {} facts taken away, one at a time",
        KERNEL_FACTS.len()
    );
    assert!(
        tried > KERNEL_FACTS.len() / 2,
        "too few facts on this kernel"
    );

    // Facts user space reads from BTF: no rstat kfunc, no memcg flush
    // kfunc (memcg's css is flushed with css_rstat_flush() then: nothing
    // more is read).
    for (e, files) in [
        (
            Edit::Func {
                name: "css_rstat_flush",
            },
            &[StatFile::CpuStat][..],
        ),
        (
            Edit::Func {
                name: "bpf_mem_cgroup_flush_stats",
            },
            &[][..],
        ),
    ] {
        let Ok(raw) = edit(&raw, e) else {
            println!("{e:?}: this kernel lacks it already");
            continue;
        };
        let found = probe_against(&root, &write(dir.path(), "func", &raw));
        let needs: FileSet = files.iter().copied().collect();
        assert_eq!(
            read_files(&found.plan),
            read_files(&base.plan).union(needs),
            "{e:?}: files read"
        );
    }
}

/// The memory.stat keys the walk root's record has (not ABSENT); empty
/// when it has no memory.stat (no memcg kfuncs or memory controller).
fn memstat_keys_against(root: &File, btf: &Path) -> BTreeSet<&'static str> {
    let probe = probe_with(root.as_fd(), Some(btf));
    let cap = probe.capability.as_ref().map(|_| ());
    let mut backend = probe
        .backend
        .unwrap_or_else(|| panic!("the program did not load: {cap:?}"));
    backend.program.run().expect("a pass");
    let r = &backend.program.loaded().records(1)[0];
    if r.flags & CGB_HAS_MEMSTAT == 0 {
        return BTreeSet::new();
    }
    (MEMSTAT_KEYS.iter().zip(r.memstat))
        .filter(|&(_, v)| v != ABSENT)
        .map(|(k, _)| *k)
        .collect()
}

#[test]
fn memstat_keys_follow_the_config_that_prints_them() {
    let Some((root, raw, dir)) = btf_edit_setup() else {
        return;
    };
    let base = memstat_keys_against(&root, &write(dir.path(), "base", &raw));
    if base.is_empty() {
        println!("skipped: the program serves no memory.stat here");
        return;
    }
    // The items of these keys are in the enums without the config; the
    // vm event is not, as the keys are not in memory.stat.
    for (event, keys) in [
        (
            "THP_FAULT_ALLOC",
            &["anon_thp", "file_thp", "shmem_thp", "thp_fault_alloc"][..],
        ),
        ("ZSWPOUT", &["zswap", "zswapped"][..]),
    ] {
        let keys: BTreeSet<&str> = keys.iter().copied().collect();
        let e = Edit::RemoveEnumVal {
            ty: "vm_event_item",
            value: event,
        };
        let Ok(without) = edit(&raw, e) else {
            println!("{event}: this kernel lacks it already");
            assert!(base.is_disjoint(&keys), "{event}: {base:?}");
            continue;
        };
        assert!(base.is_superset(&keys), "{event}: {base:?}");
        let found = memstat_keys_against(&root, &write(dir.path(), event, &without));
        assert_eq!(found, &base - &keys, "{event}");
    }
}
