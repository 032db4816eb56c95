//! The one BPF layer of our programs: `layer`'s items (carried into
//! below main's cgroupfs as its module `layer`, so only what its reader
//! uses), and here what only our crates use: a tracepoint probe, names as
//! strings and CPU clocks.

use std::time::Duration;

use libbpf_rs::btf::types;

pub use self::layer::*;

mod layer;

impl KernelBtf {
    /// Whether a typedef (a tracepoint's `btf_trace_<name>`) is in the BTF.
    pub fn has_typedef(&self, name: &str) -> bool {
        self.btf().type_by_name::<types::Typedef>(name).is_some()
    }
}

/// A NUL-terminated C char array (a skeleton's `[i8; N]`) as a string,
/// invalid UTF-8 replaced: for names shown, not for paths.
pub fn c_string(chars: &[i8]) -> String {
    String::from_utf8_lossy(&c_bytes(chars)).into_owned()
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the struct we pass.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of the calling thread (user + system), from the thread CPU
/// clock: exact, unlike tick-based rusage, and unlike wall time not
/// inflated when the machine (or an emulated guest) is busy.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (all threads), same clock family.
pub fn process_cpu_time() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}
