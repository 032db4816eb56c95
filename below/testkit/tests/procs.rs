//! The process backend on this machine's kernel: SIGSTOPped processes read
//! by BPF equal fb_procfs's, field for field (bstats-check procs-frozen,
//! which the VM suite runs in guests too).

use std::process::Command;

#[test]
fn frozen_processes_equal_procfs() {
    if bstats_testkit::skip_unless_root("loads BPF, creates cgroups") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_bstats-check"))
        .arg("procs-frozen")
        .output()
        .expect("running bstats-check");
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "procs-frozen failed");
    assert!(
        text.contains("process backend: bpf"),
        "BPF must serve on this kernel"
    );
}
