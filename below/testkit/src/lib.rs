//! Test scaffolding shared by the Rust tests, the benchmark and the guest
//! acceptance driver (`bstats-check`): one cgroup-tree fixture, and
//! one syscall counter.

mod fixture;
mod syscalls;
mod work;

pub use fixture::Controllers;
pub use fixture::Fixture;
pub use syscalls::SyscallCounter;
pub use work::Cpu;
pub use work::Cycle;
pub use work::Work;

/// For tests that need root (cgroups, BPF, mounts): true, after one line
/// saying the test was skipped and why, when not root. Use as
/// `if skip_unless_root("creates cgroups") { return; }`.
pub fn skip_unless_root(needs: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("skipped: not root ({needs})");
    }
    !root
}
