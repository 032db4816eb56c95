//! For the build scripts of our BPF programs (bpf_stats, exitstats, the
//! layer's test program): one compiler choice, one flag set and the one
//! vmlinux.h every program includes.
//!
//! The BPF compiler is `$BPF_CLANG`, else `clang-19`, else `clang`: the
//! vmlinux.h generated from 7.x BTF (`include/vmlinux.h` here) needs
//! `-fms-extensions`, which clang accepts for the BPF target.

use std::env;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

/// The directory of the shared vmlinux.h.
const INCLUDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");

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

/// A skeleton builder for `src` with `clang`, our flags, the shared
/// vmlinux.h and `-I` for each of `include`; tells cargo to rerun when
/// `src` or vmlinux.h change.
pub fn skeleton(src: &str, clang: &str, include: &[&str]) -> SkeletonBuilder {
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed={INCLUDE}/vmlinux.h");
    let mut args: Vec<String> = [INCLUDE]
        .iter()
        .chain(include)
        .map(|d| format!("-I{d}"))
        .collect();
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
