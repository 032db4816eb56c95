//! Counting the calling thread's syscalls exactly, through a perf
//! tracepoint event. An enabled syscall tracepoint slows every syscall on
//! the machine: keep counters off timed samples.

use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

/// Counts entries of one syscall tracepoint by the thread that made it.
pub struct SyscallCounter {
    fd: OwnedFd,
}

/// The leading part of `struct perf_event_attr` (PERF_ATTR_SIZE_VER5);
/// zeroed flags mean enabled, counting user and kernel.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    rest: [u64; 12],
}

const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

impl SyscallCounter {
    /// `event` under tracefs' events/: "raw_syscalls/sys_enter" counts
    /// every syscall, "syscalls/sys_enter_openat" one.
    pub fn new(event: &str) -> Result<Self> {
        let id = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .find_map(|t| std::fs::read_to_string(format!("{t}/events/{event}/id")).ok())
            .with_context(|| {
                format!("no tracepoint {event} (tracefs not mounted, or CONFIG_FTRACE_SYSCALLS=n)")
            })?;
        let attr = PerfEventAttr {
            type_: PERF_TYPE_TRACEPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: id.trim().parse().context("bad tracepoint id")?,
            rest: [0; 12],
        };
        // SAFETY: perf_event_open reads `attr` (its size given inside);
        // pid 0 and cpu -1 count the calling thread on any CPU.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            bail!(
                "perf_event_open({event}): {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a new fd owned by no one else.
        Ok(SyscallCounter {
            fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        })
    }

    /// The count so far (this read's own entry included for an event
    /// that counts reads).
    pub fn read(&self) -> Result<u64> {
        let mut v = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        if n != 8 {
            bail!("perf counter read: {}", std::io::Error::last_os_error());
        }
        Ok(u64::from_ne_bytes(v))
    }
}
