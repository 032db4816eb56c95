//! Test scaffolding shared by the Rust tests, the benchmark and the guest
//! acceptance driver (`bstats-check`): one cgroup-tree fixture.

mod fixture;
mod work;

pub use fixture::Controllers;
pub use fixture::Fixture;
pub use work::Cpu;
pub use work::Work;
