//! Compiles the BPF cgroup iterator, generates its libbpf-rs skeleton (the
//! record layout), and hands the tables of `cgroup_stats.h` to Rust: all
//! of them to the contract, the key lists also to the text parsers.
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

/// The lists whose keys the text parsers also look up (src/parse/keys.rs).
const TEXT_KEY_LISTS: &[&str] = &["memstat_keys!", "memcg_events!", "numa_items!"];

fn main() {
    for f in [HEADER, "src/bpf/contract_gen.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let header = std::fs::read_to_string(HEADER).expect("reading the contract header");
    let contract = contract(HEADER, &header, ABSENT_IN_CGROUPFS);
    let text_keys: String = contract
        .lines()
        .filter(|l| TEXT_KEY_LISTS.iter().any(|list| l.starts_with(list)))
        .map(|l| format!("{l}\n"))
        .collect();
    for (file, rust) in [("contract.rs", &contract), ("text_keys.rs", &text_keys)] {
        std::fs::write(out_dir.join(file), rust).expect("writing the generated contract");
    }

    // The object is loaded from its bytes, and read by the contract test
    // (its BTF).
    bstats_bpf_build::build_program("src/bpf", "cgroup_stats");
}
