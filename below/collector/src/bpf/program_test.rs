//! The fork's program is loaded, run and read by below main's loader,
//! which writes its .rodata and reads its .bss through the types of
//! cgroup_stats's skeleton: the fork's object must lay those sections out
//! as cgroup_stats's does (the compiler orders a section's globals as it
//! likes, so a variable added to either file can move the others).

use libbpf_rs::btf::types;
use libbpf_rs::btf::Btf;

use super::contract;
use super::program;

/// Each variable of `section` in `object`'s BTF: (name, offset, size).
fn layout(object: &[u8], section: &str) -> Vec<(String, u32, usize)> {
    let btf = Btf::from_raw("object", object).unwrap().unwrap();
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
        let core = layout(contract::OBJECT, section);
        assert!(!core.is_empty(), "{section}: no variables");
        assert_eq!(core, layout(program::OBJECT, section), "{section}");
    }
}
