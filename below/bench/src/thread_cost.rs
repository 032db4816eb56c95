//! Per-thread cost probes: CPU time (getrusage RUSAGE_THREAD), read
//! syscalls (/proc/thread-self/io syscr); exact counts are
//! bstats_testkit::SyscallCounter's.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use anyhow::Context;
use anyhow::Result;

/// user/sys split from getrusage; `total` from the thread CPU clock, which
/// is exact where rusage's split is scaled from ticks and can stall.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cpu {
    pub user: Duration,
    pub sys: Duration,
    pub total: Duration,
}

impl Cpu {
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
            total: self.total.saturating_sub(earlier.total),
        }
    }

    pub fn add(&mut self, d: Cpu) {
        self.user += d.user;
        self.sys += d.sys;
        self.total += d.total;
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> Cpu {
    // SAFETY: getrusage only writes the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    Cpu {
        user: tv(ru.ru_utime),
        sys: tv(ru.ru_stime),
        total: bstats_model::thread_cpu_time(),
    }
}

/// Peak resident set of the process, in KiB.
pub fn max_rss_kib() -> u64 {
    // SAFETY: as above.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    ru.ru_maxrss as u64
}

/// The calling thread's `syscr`. Each probe is itself one pread, counted
/// by the next probe: [`SysCr::delta`] takes it off.
pub struct SysCr {
    file: File,
    buf: Vec<u8>,
    own_cost: u64,
}

impl SysCr {
    /// Must be created on the thread it measures.
    pub fn new() -> Result<Self> {
        let file = File::open("/proc/thread-self/io")
            .context("Failed to open /proc/thread-self/io (CONFIG_TASK_IO_ACCOUNTING?)")?;
        let mut s = SysCr {
            file,
            buf: vec![0; 512],
            own_cost: 0,
        };
        let a = s.read()?;
        let b = s.read()?;
        s.own_cost = b - a;
        Ok(s)
    }

    pub fn read(&mut self) -> Result<u64> {
        let n = self.file.read_at(&mut self.buf, 0)?;
        let text = std::str::from_utf8(&self.buf[..n])?;
        text.lines()
            .find_map(|l| l.strip_prefix("syscr:"))
            .and_then(|v| v.trim().parse().ok())
            .context("no syscr in /proc/thread-self/io")
    }

    /// Read syscalls between two probes, without the probes' own.
    pub fn delta(&self, before: u64, after: u64) -> u64 {
        (after - before).saturating_sub(self.own_cost)
    }
}
