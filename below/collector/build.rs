//! Compiles the BPF cgroup iterator and the fork's program that includes
//! it (bstats.bpf.c), with their libbpf-rs skeletons, and generates the
//! Rust of their headers with bindgen: cgroup_bpf_record.h's record, enums and
//! constants as below main's build.rs does (`cgroup_bpf_record.rs`), and the
//! fork's pressure, memory.numa_stat, names and pass modes
//! (`cgroup_psi.h`, `cgroup_numa.h`, `cgroup_name.h`, `cgroup_rank.h`:
//! `bstats_h.rs`).
//!
//! The BPF compiler and its flags: bstats-bpf-build.

use std::env;
use std::path::Path;
use std::path::PathBuf;

const HEADER: &str = "src/bpf/cgroup_bpf_record.h";
const FORK_HEADERS: [&str; 4] = [
    "src/bpf/cgroup_psi.h",
    "src/bpf/cgroup_numa.h",
    "src/bpf/cgroup_name.h",
    "src/bpf/cgroup_rank.h",
];

/// bindgen as below main's build.rs runs it; `headers` after `context` are
/// parsed together, the items of `headers` kept.
fn bindings(context: &[&str], headers: &[&str], out: &Path) {
    let mut builder = bindgen::Builder::default()
        .derive_default(true)
        .prepend_enum_name(false);
    for h in context.iter().chain(headers) {
        builder = builder.header(*h);
        println!("cargo:rerun-if-changed={h}");
    }
    if !context.is_empty() {
        for h in headers {
            builder = builder.allowlist_file(format!(".*{h}"));
        }
    }
    builder
        .generate()
        .unwrap_or_else(|e| panic!("bindgen of {headers:?}: {e}"))
        .write_to_file(out)
        .expect("writing the bindings");
}

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bindings(&[], &[HEADER], &out_dir.join("cgroup_bpf_record.rs"));
    bindings(&[HEADER], &FORK_HEADERS, &out_dir.join("bstats_h.rs"));
    // Included by bstats.bpf.c only.
    println!("cargo:rerun-if-changed=src/bpf/cgroup_psi.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf/cgroup_numa.bpf.c");

    // Loaded through their skeletons.
    bstats_bpf_build::build_program("src/bpf", "cgroup_bpf");
    bstats_bpf_build::build_program("src/bpf", "bstats");
    // Tests only: what holds cgroup_mutex while the pass runs (walk_test.rs).
    bstats_bpf_build::build_program("src/bpf", "mutex_holder");
}
