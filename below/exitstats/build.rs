//! Compiles the exit program and generates its libbpf-rs skeleton.
//!
//! Compiler and flags from bstats-bpf-build, as for bpf_stats, and its
//! vmlinux.h (below/bpf_stats/src/bpf/vmlinux.h, generated from 7.3's BTF;
//! CO-RE relocates to the running kernel).

use std::env;
use std::path::PathBuf;

const SRC: &str = "src/bpf/exitstats.bpf.c";
const VMLINUX_DIR: &str = "../bpf_stats/src/bpf";

fn main() {
    for f in [
        SRC,
        "src/bpf/exitstats.h",
        &format!("{VMLINUX_DIR}/vmlinux.h"),
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let clang = bstats_bpf_build::clang();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"))
        .join("exitstats.skel.rs");
    bstats_bpf_build::skeleton(SRC, &clang, &["src/bpf", VMLINUX_DIR])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {SRC} with {clang} failed: {e:#}"));
}
