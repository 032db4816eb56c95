//! Compiles the BPF cgroup iterator, generates its libbpf-rs skeleton (the
//! record layout), and hands the tables of `cgroup_stats.h` to Rust.
//!
//! The BPF compiler and its flags: bstats-bpf-build.

use std::env;
use std::path::PathBuf;

const HEADER: &str = "src/bpf/cgroup_stats.h";

include!("src/bpf/contract_gen.rs");

/// Keys of the header's lists that below-cgroupfs 0.9.0's structs have no
/// field for (newer cgroupfs has them).
const ABSENT_IN_CGROUPFS: &[(&str, &str)] = &[
    ("MEMSTAT_KEYS", "swapcached"),
    ("MEMSTAT_KEYS", "file_thp"),
    ("MEMSTAT_KEYS", "shmem_thp"),
    ("MEMCG_EVENTS", "sock_throttled"),
];

fn main() {
    for f in [HEADER, "src/bpf/contract_gen.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let header = std::fs::read_to_string(HEADER).expect("reading the contract header");
    std::fs::write(
        out_dir.join("contract.rs"),
        contract(HEADER, &header, ABSENT_IN_CGROUPFS),
    )
    .expect("writing the generated contract");

    // The object is loaded from its bytes, and read by the contract test
    // (its BTF).
    bstats_bpf_build::build_program("src/bpf", "cgroup_stats");
}
