//! Compiles the BPF cgroup iterator, generates its libbpf-rs skeleton (the
//! record layout), and hands the tables of `cgroup_stats.h` to Rust: all
//! of them to the contract, the key lists also to the text parsers. The
//! same for the fork's top-N program (cgroup_rank.bpf.c, which includes the
//! iterator) and its pass modes (`cgroup_rank.h`).
//!
//! The BPF compiler and its flags: bstats-bpf-build.

use std::env;
use std::path::PathBuf;

const HEADER: &str = "src/bpf/cgroup_stats.h";
const RANK_HEADER: &str = "src/bpf/cgroup_rank.h";

include!("src/bpf/contract_gen.rs");

/// Keys of the header's lists (by the generated macro) that
/// below-cgroupfs 0.9.0's structs have no field for (newer cgroupfs has
/// them): handed over as `(absent key, ...)`.
const ABSENT_IN_CGROUPFS: &[(&str, &str)] = &[
    ("memstat_keys!", "swapcached"),
    ("memstat_keys!", "file_thp"),
    ("memstat_keys!", "shmem_thp"),
    ("numa_items!", "hugetlb"),
    ("memcg_events!", "sock_throttled"),
];

/// The generated contract with the entries of ABSENT_IN_CGROUPFS marked.
fn mark_absent(mut rust: String) -> String {
    for (list, key) in ABSENT_IN_CGROUPFS {
        let line = 1 + rust
            .find(&format!("\n{list} {{"))
            .unwrap_or_else(|| panic!("the contract has no list {list}"));
        let end = line + rust[line..].find('\n').expect("lines end with a newline");
        let at = line
            + rust[line..end]
                .find(&format!(" ({key},"))
                .unwrap_or_else(|| panic!("{list} has no key {key}"));
        rust.insert_str(at + " (".len(), "absent ");
    }
    rust
}

/// The lists whose keys the text parsers also look up (src/parse/keys.rs).
const TEXT_KEY_LISTS: &[&str] = &["memstat_keys!", "memcg_events!", "numa_items!"];

fn main() {
    for f in [HEADER, RANK_HEADER, "src/bpf/contract_gen.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let header = std::fs::read_to_string(HEADER).expect("reading the contract header");
    let rank_header = std::fs::read_to_string(RANK_HEADER).expect("reading the top-N header");
    let rank = contract(RANK_HEADER, &rank_header);
    let contract = mark_absent(contract(HEADER, &header));
    let text_keys: String = contract
        .lines()
        .filter(|l| TEXT_KEY_LISTS.iter().any(|list| l.starts_with(list)))
        .map(|l| format!("{l}\n"))
        .collect();
    for (file, rust) in [
        ("contract.rs", &contract),
        ("text_keys.rs", &text_keys),
        ("rank_contract.rs", &rank),
    ] {
        std::fs::write(out_dir.join(file), rust).expect("writing the generated contract");
    }

    // The object is loaded from its bytes, and read by the contract test
    // (its BTF).
    bstats_bpf_build::build_program("src/bpf", "cgroup_stats");
    bstats_bpf_build::build_program("src/bpf", "cgroup_rank");
}
