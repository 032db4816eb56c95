//! Compiles the exit program (its object is what loads) and generates its
//! libbpf-rs skeleton (the event's Rust type).
//!
//! Compiler, flags and vmlinux.h from bstats-bpf-build, as for bpf_stats
//! (vmlinux.h is generated from 7.3's BTF; CO-RE relocates to the running
//! kernel).

fn main() {
    bstats_bpf_build::build_program("src/bpf", "exitstats");
}
