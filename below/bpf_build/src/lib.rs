//! For the build scripts of our BPF programs (the cgroup collector, exitstats, procs,
//! the layer's test program): one compiler choice, one flag set and the
//! headers every program may include: the one vmlinux.h, and
//! task_usage.h, the usage of a task as the process programs report it.
//!
//! The BPF compiler is `$BPF_CLANG`, else `clang-19`, else `clang`: the
//! vmlinux.h generated from 7.x BTF (`include/vmlinux.h` here) needs
//! `-fms-extensions`, which clang accepts for the BPF target.

use std::env;
use std::path::PathBuf;
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
fn clang() -> String {
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
/// headers (vmlinux.h, task_usage.h) and `-I` for each of `include`; tells
/// cargo to rerun when `src` or a shared header changes.
fn skeleton(src: &str, clang: &str, include: &[&str]) -> SkeletonBuilder {
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed={INCLUDE}");
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

/// For a build script: compiles `dir/name.bpf.c` (headers from `dir` and
/// the shared ones) into `$OUT_DIR/name.bpf.o` and generates
/// `$OUT_DIR/name.skel.rs`, the skeleton that embeds it and that the crate
/// loads it through (bstats_bpf::load); reruns
/// when the program, its `dir/name.h` or a shared header changes; panics
/// with the compiler's message.
pub fn build_program(dir: &str, name: &str) {
    let header = format!("{dir}/{name}.h");
    // A missing file would rerun the script every build.
    if std::path::Path::new(&header).exists() {
        println!("cargo:rerun-if-changed={header}");
    }
    let clang = clang();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let src = format!("{dir}/{name}.bpf.c");
    skeleton(&src, &clang, &[dir])
        .obj(out.join(format!("{name}.bpf.o")))
        .build_and_generate(out.join(format!("{name}.skel.rs")))
        .unwrap_or_else(|e| panic!("building {src} with {clang} failed: {e:#}"));
}
