//! Compiles the exit program and generates its libbpf-rs skeleton.
//!
//! Same compiler choice and flags as below/bpf_stats/build.rs, and the same
//! vmlinux.h (below/bpf_stats/src/bpf/vmlinux.h, generated from 7.3's BTF;
//! CO-RE relocates to the running kernel).

use std::env;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/exitstats.bpf.c";
const VMLINUX_DIR: &str = "../bpf_stats/src/bpf";

fn works(clang: &str) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    for f in [
        SRC,
        "src/bpf/exitstats.h",
        &format!("{VMLINUX_DIR}/vmlinux.h"),
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let clang = env::var("BPF_CLANG").ok().unwrap_or_else(|| {
        ["clang-19", "clang"]
            .into_iter()
            .find(|c| works(c))
            .unwrap_or("clang-19")
            .to_owned()
    });
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"))
        .join("exitstats.skel.rs");
    SkeletonBuilder::new()
        .source(SRC)
        .clang(&clang)
        .clang_args([
            "-Isrc/bpf",
            &format!("-I{VMLINUX_DIR}"),
            "-fms-extensions",
            "-Wno-microsoft-anon-tag",
            "-Wall",
            "-Werror",
        ])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {SRC} with {clang} failed: {e:#}"));
}
