//! Compiles the cgroup_mutex wait tracer (src/lock_wait) and its skeleton.

fn main() {
    bstats_bpf_build::build_program("src/lock_wait", "lock_wait");
}
