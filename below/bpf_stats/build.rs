//! Compiles the BPF cgroup iterator and generates its libbpf-rs skeleton.
//!
//! The BPF compiler is `$BPF_CLANG`, else `clang-19`, else `clang`: the
//! vmlinux.h generated from 7.x BTF needs `-fms-extensions`, which clang
//! accepts for the BPF target.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/cgroup_stats.bpf.c";

fn works(clang: &str) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    for f in [SRC, "src/bpf/cgroup_stats.h", "src/bpf/vmlinux.h"] {
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
        .join("cgroup_stats.skel.rs");
    SkeletonBuilder::new()
        .source(SRC)
        .clang(&clang)
        .clang_args([
            "-Isrc/bpf",
            "-fms-extensions",
            "-Wno-microsoft-anon-tag",
            "-Wall",
            "-Werror",
        ])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {SRC} with {clang} failed: {e:#}"));
}
