//! The one BPF layer of our programs: `layer`'s items (carried into
//! below main's cgroupfs as its module `layer`, so only what its reader
//! uses), and here what only our crates use: libbpf's warnings kept for a
//! failed load's error, a tracepoint probe, names as strings, CPU clocks
//! and what the kernel says of a loaded program.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::Context;
use anyhow::Result;
use libbpf_rs::btf::types;
use libbpf_rs::btf::BtfType;
use libbpf_rs::libbpf_sys;
use libbpf_rs::ProgramMut;

pub use self::cputime::cputime_adjust;
pub use self::layer::*;
use self::says::libbpf_says;

pub mod cputime;
mod layer;
mod says;

/// [`layer::load`] with libbpf's warnings kept for its error, not printed
/// ([`says`]). Named like it so that it shadows the glob re-export: every
/// load of ours goes through it, the shared code's `layer::load` included.
pub fn load<B: libbpf_rs::skel::SkelBuilder<'static>>(
    builder: B,
    btf: Option<&std::path::Path>,
    setup: impl FnMut(&mut libbpf_rs::OpenObject) -> Result<()>,
) -> Result<Skeleton<B>> {
    libbpf_says(|| layer::load(builder, btf, setup))
}

impl KernelBtf {
    /// Whether a typedef (a tracepoint's `btf_trace_<name>`) is in the BTF.
    pub fn has_typedef(&self, name: &str) -> bool {
        self.btf.type_by_name::<types::Typedef>(name).is_some()
    }

    /// The type of `member` of struct `name`, modifiers and typedefs
    /// skipped; None where the kernel has no such member.
    pub fn member_type(&self, name: &str, member: &str) -> Option<BtfType<'_>> {
        let s = self.btf.type_by_name::<types::Struct>(name)?;
        let m = s.iter().find(|m| m.name == Some(OsStr::new(member)))?;
        Some(
            self.btf
                .type_by_id::<BtfType>(m.ty)?
                .skip_mods_and_typedefs(),
        )
    }
}

/// The bytes of a NUL-terminated C char array before the NUL (`c_char`
/// is i8 or u8 by target).
pub fn c_bytes(chars: &[std::ffi::c_char]) -> Vec<u8> {
    chars
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect()
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

/// What the kernel says of a loaded program (its `bpf_prog_info`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgInfo {
    /// Instructions the verifier processed (its log's "processed N
    /// insns"; `verified_insns`, 5.16+).
    pub verified_insns: u32,
    /// BPF instructions after the verifier's rewrites (`xlated_prog_len`
    /// / 8).
    pub xlated_insns: u32,
    /// Bytes of JIT-compiled code (0 without the JIT).
    pub jited_bytes: u32,
}

/// Bytes of one BPF instruction.
const INSN_BYTES: u32 = 8;

/// [`ProgInfo`] of `prog`, loaded. The sizes are 0 to a caller without
/// CAP_BPF (the kernel hides them).
pub fn prog_info(prog: &ProgramMut) -> Result<ProgInfo> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a bpf_prog_info of `len` bytes with no buffer
    // pointers set: the kernel writes only into it.
    let ret = unsafe {
        libbpf_sys::bpf_prog_get_info_by_fd(prog.as_fd().as_raw_fd(), &mut info, &mut len)
    };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(-ret))
            .context("BPF_OBJ_GET_INFO_BY_FD failed");
    }
    Ok(ProgInfo {
        verified_insns: info.verified_insns,
        xlated_insns: info.xlated_prog_len / INSN_BYTES,
        jited_bytes: info.jited_prog_len,
    })
}
