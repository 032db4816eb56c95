//! Compiles the task iterator: the object is embedded and loaded with
//! libbpf-rs's Object API (src/load.rs); the skeleton is generated only
//! for the record types (`skel::types`), which come from the object's BTF.
//!
//! Compiler, flags and vmlinux.h from bstats-bpf-build (vmlinux.h is
//! generated from 7.3's BTF; CO-RE relocates to the running kernel).

use std::env;
use std::path::PathBuf;

const SRC: &str = "src/bpf/task_stats.bpf.c";

fn main() {
    println!("cargo:rerun-if-changed=src/bpf/task_stats.h");
    let clang = bstats_bpf_build::clang();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bstats_bpf_build::skeleton(SRC, &clang, &["src/bpf"])
        .obj(out.join("task_stats.bpf.o"))
        .build_and_generate(out.join("task_stats.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} with {clang} failed: {e:#}"));
}
