//! Compiles the exit program (its object is what loads) and generates its
//! libbpf-rs skeleton (the event's Rust type).
//!
//! Compiler, flags and vmlinux.h from bstats-bpf-build, as for bpf_stats
//! (vmlinux.h is generated from 7.3's BTF; CO-RE relocates to the running
//! kernel).

use std::env;
use std::path::PathBuf;

const SRC: &str = "src/bpf/exitstats.bpf.c";

fn main() {
    println!("cargo:rerun-if-changed=src/bpf/exitstats.h");
    let clang = bstats_bpf_build::clang();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bstats_bpf_build::skeleton(SRC, &clang, &["src/bpf"])
        .obj(out.join("exitstats.bpf.o"))
        .build_and_generate(out.join("exitstats.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} with {clang} failed: {e:#}"));
}
