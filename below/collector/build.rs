//! Compiles the BPF cgroup iterator, generates its libbpf-rs skeleton (the
//! record layout), and hands the tables of `cgroup_stats.h` to Rust: all
//! of them to the contract, the key lists also to the text parsers. The
//! same for the fork's program (bstats.bpf.c, which includes the iterator),
//! its pressure (`cgroup_psi.h`) and its pass modes (`cgroup_rank.h`).
//!
//! The BPF compiler and its flags: bstats-bpf-build.

use std::env;
use std::path::PathBuf;

const HEADER: &str = "src/bpf/cgroup_stats.h";
const RANK_HEADER: &str = "src/bpf/cgroup_rank.h";
const PSI_HEADER: &str = "src/bpf/cgroup_psi.h";

include!("src/bpf/contract_gen.rs");

/// The lists whose keys the text parsers also look up (src/parse/keys.rs).
const TEXT_KEY_LISTS: &[&str] = &["memstat_keys!", "memcg_events!", "numa_items!"];

fn main() {
    // cgroup_psi.bpf.c: included by bstats.bpf.c only.
    for f in [
        HEADER,
        RANK_HEADER,
        PSI_HEADER,
        "src/bpf/cgroup_psi.bpf.c",
        "src/bpf/contract_gen.rs",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let header = std::fs::read_to_string(HEADER).expect("reading the contract header");
    let read = |path| std::fs::read_to_string(path).expect("reading a contract header");
    let rank = contract(RANK_HEADER, &read(RANK_HEADER));
    let psi = contract(PSI_HEADER, &read(PSI_HEADER));
    let contract = contract(HEADER, &header);
    let text_keys: String = contract
        .lines()
        .filter(|l| TEXT_KEY_LISTS.iter().any(|list| l.starts_with(list)))
        .map(|l| format!("{l}\n"))
        .collect();
    for (file, rust) in [
        ("contract.rs", &contract),
        ("text_keys.rs", &text_keys),
        ("rank_contract.rs", &rank),
        ("psi_contract.rs", &psi),
    ] {
        std::fs::write(out_dir.join(file), rust).expect("writing the generated contract");
    }

    // The object is loaded from its bytes, and read by the contract test
    // (its BTF).
    bstats_bpf_build::build_program("src/bpf", "cgroup_stats");
    bstats_bpf_build::build_program("src/bpf", "bstats");
    // Tests only: what holds cgroup_mutex while the pass runs (walk_test.rs).
    bstats_bpf_build::build_program("src/bpf", "mutex_holder");
}
