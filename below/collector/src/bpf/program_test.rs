//! The fork's program is loaded, run and read by below main's loader,
//! which writes its .rodata and reads its .bss through the types of
//! cgroup_stats's skeleton: the fork's object must lay those sections out
//! as cgroup_stats's does (the compiler orders a section's globals as it
//! likes, so a variable added to either file can move the others). Its
//! names map holds each record's cgroup's name, though a pass writes a
//! name only where another cgroup took the slot.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bstats_testkit::Controllers;
use bstats_testkit::Fixture;
use libbpf_rs::btf::types;
use libbpf_rs::btf::Btf;

use super::contract::skel::CgroupBpfSkelBuilder;
use super::contract::tests::object_btf;
use super::kernel::Kernel;
use super::layer::KernelBtf;
use super::program;
use super::program::skel::BstatsSkelBuilder;
use super::program::CgroupName;
use super::program::ForkConfig;
use super::program::PassRunner;
use super::program::Program;
use super::program::PASS_FULL;
use super::program::PASS_RANK;
use super::protocol::Passes;

/// Each variable of `section` in an object's BTF: (name, offset, size).
fn layout(btf: &Btf, section: &str) -> Vec<(String, u32, usize)> {
    let sec = (btf.type_by_name::<types::DataSec>(section))
        .unwrap_or_else(|| panic!("no section {section}"));
    let mut vars: Vec<_> = sec
        .iter()
        .map(|v| {
            let var = btf.type_by_id::<types::Var>(v.ty).expect("a variable");
            let name = var.name().expect("named").to_string_lossy().into_owned();
            (name, v.offset, v.size)
        })
        .collect();
    vars.sort();
    vars
}

#[test]
fn fork_object_lays_out_the_loaders_sections_alike() {
    for section in [".bss", ".rodata"] {
        let core = object_btf(CgroupBpfSkelBuilder::default(), |b| layout(b, section));
        assert!(!core.is_empty(), "{section}: no variables");
        let fork = object_btf(BstatsSkelBuilder::default(), |b| layout(b, section));
        assert_eq!(core, fork, "{section}");
    }
}

fn entry(bytes: &[u8]) -> CgroupName {
    let mut n = CgroupName::default();
    for (d, c) in n.name.iter_mut().zip(bytes) {
        *d = *c as _;
    }
    n
}

#[test]
fn names_stop_at_nul() {
    assert_eq!(program::name(&entry(b"web.slice\0junk")), "web.slice");
}

#[test]
fn names_keep_bytes_that_are_not_utf8() {
    let name = program::name(&entry(b"caf\xe9\0"));
    assert_eq!(name.as_bytes(), b"caf\xe9");
}

/// `top` and its children by id, as their directories name them.
fn names_on_disk(top: &Path) -> HashMap<u64, OsString> {
    let mut names = HashMap::new();
    let own = top.file_name().unwrap().to_owned();
    names.insert(std::fs::metadata(top).unwrap().ino(), own);
    for e in std::fs::read_dir(top).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            names.insert(e.metadata().unwrap().ino(), e.file_name());
        }
    }
    names
}

/// Every record's name is its cgroup's after passes of each mode in each
/// walk form, as cgroups leave and come and records change slots: a slot
/// keeping its cgroup is not written again.
#[test]
fn each_record_has_its_cgroups_name_as_slots_change() {
    let Some(mount) = crate::mount::test_cgroup2("loads BPF") else {
        return;
    };
    let mut fx = Fixture::new(&mount, "names", Controllers::Only(&[])).unwrap();
    for n in ["a", "b", "c"] {
        fx.mkdir(n).unwrap();
    }
    fx.mkdir(OsStr::from_bytes(b"caf\xe9")).unwrap();
    let top = File::open(fx.top()).unwrap();
    let kernel = Kernel::read(&KernelBtf::open(None).unwrap());
    let mut forms = vec![kernel.config];
    forms[0].rcu_walk = Err("tested as the cgroup iterator");
    if kernel.config.rcu_walk.is_ok() {
        forms.push(kernel.config);
    }
    for (form, core) in forms.into_iter().enumerate() {
        let config = ForkConfig { core, numa: None };
        let (mut program, no_fork) = Program::first(top.as_fd(), config, None).unwrap();
        if let Some(why) = no_fork {
            println!("skipped: the fork's program does not load here: {why}");
            return;
        }
        let mut runner = PassRunner {
            program: &mut program,
            root: top.as_fd(),
            btf: None,
        };
        // A name per form, so the slots move between the forms' passes.
        let (gone, new) = [("a", "d"), ("b", "e")][form];
        for step in 0..3 {
            match step {
                1 => std::fs::remove_dir(fx.top().join(gone)).unwrap(),
                2 => drop(fx.mkdir(new).unwrap()),
                _ => {}
            }
            for mode in [PASS_FULL, PASS_RANK] {
                let (pass, _) = runner.run_all(mode, 0).unwrap();
                let rows = runner.rows(pass.cgroups);
                let disk = names_on_disk(fx.top());
                assert_eq!(rows.records.len(), disk.len(), "step {step}");
                for (r, n) in rows.records.iter().zip(rows.names) {
                    assert_eq!(
                        Some(&program::name(n)),
                        disk.get(&r.id),
                        "form {form}, step {step}, mode {mode}"
                    );
                }
            }
        }
    }
}
