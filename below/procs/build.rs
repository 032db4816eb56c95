//! Compiles the task iterator: the object is embedded and loaded with
//! libbpf-rs's Object API (src/load.rs); the skeleton is generated only
//! for the record types (`skel::types`), which come from the object's BTF.
//!
//! Compiler, flags and vmlinux.h from bstats-bpf-build (vmlinux.h is
//! generated from 7.3's BTF; CO-RE relocates to the running kernel).

fn main() {
    bstats_bpf_build::build_program("src/bpf", "task_stats");
}
