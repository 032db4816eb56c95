//! For the build scripts of our BPF programs (bpf_stats, exitstats): one
//! compiler choice and one flag set.
//!
//! The BPF compiler is `$BPF_CLANG`, else `clang-19`, else `clang`: the
//! vmlinux.h generated from 7.x BTF (below/bpf_stats/src/bpf/vmlinux.h)
//! needs `-fms-extensions`, which clang accepts for the BPF target.

use std::env;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

fn works(clang: &str) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The BPF compiler; tells cargo to rerun when `$BPF_CLANG` changes.
pub fn clang() -> String {
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    env::var("BPF_CLANG").ok().unwrap_or_else(|| {
        ["clang-19", "clang"]
            .into_iter()
            .find(|c| works(c))
            .unwrap_or("clang-19")
            .to_owned()
    })
}

/// A skeleton builder for `src` with `clang`, our flags and `-I` for each
/// of `include`.
pub fn skeleton(src: &str, clang: &str, include: &[&str]) -> SkeletonBuilder {
    let mut args: Vec<String> = include.iter().map(|d| format!("-I{d}")).collect();
    args.extend(
        [
            "-fms-extensions",
            "-Wno-microsoft-anon-tag",
            "-Wall",
            "-Werror",
        ]
        .map(String::from),
    );
    let mut b = SkeletonBuilder::new();
    b.source(src).clang(clang).clang_args(args);
    b
}
