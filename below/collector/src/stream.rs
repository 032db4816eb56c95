//! Stream backend: the kernel's `*.stat.stream` files (patches/).
//!
//! The kernel flushes the whole hierarchy once per `cpu.stat.stream_interval`
//! and publishes a record to every stream file; readers wait for the next
//! record instead of each forcing a flush. We keep one fd per cgroup and
//! stream file across samples, wait once per sample (poll on the root's
//! `cpu.stat.stream`), then read every kept fd without blocking.

use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;

use crate::fd::open_at;
use crate::fd::open_cgroup_at;
use crate::fd::read_to_end;
use crate::plan::Support;
use crate::FileSet;
use crate::Freshness;
use crate::NotServed;
use crate::Served;
use crate::StatFile;

const INTERVAL_KNOB: &CStr = c"cpu.stat.stream_interval";

/// The files with a stream variant, and its name.
const STREAM_FILES: [(StatFile, &CStr); 3] = [
    (StatFile::CpuStat, c"cpu.stat.stream"),
    (StatFile::MemoryStat, c"memory.stat.stream"),
    (StatFile::IoStat, c"io.stat.stream"),
];

/// The kernel's bounds for a non-zero interval, in ms.
const INTERVAL_MS: std::ops::RangeInclusive<u64> = 10..=60_000;

fn slot_of(file: StatFile) -> Option<usize> {
    STREAM_FILES.iter().position(|(f, _)| *f == file)
}

/// Why there is no stream backend on a kernel without our patches.
pub(crate) const NO_STREAM_FILES: &str =
    "the kernel has no stream files (no cpu.stat.stream_interval)";

fn read_interval(root: BorrowedFd) -> Result<u64, String> {
    let fd = open_at(Some(root), INTERVAL_KNOB, OFlag::O_RDONLY).map_err(|e| match e {
        Errno::ENOENT => NO_STREAM_FILES.to_owned(),
        e => format!("cannot open cpu.stat.stream_interval: {}", e),
    })?;
    let mut buf = Vec::new();
    read_to_end(fd.as_fd(), &mut buf)
        .map_err(|e| format!("cannot read cpu.stat.stream_interval: {}", e))?;
    std::str::from_utf8(&buf)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| "malformed cpu.stat.stream_interval".to_owned())
}

fn write_interval(root: BorrowedFd, ms: u64) -> nix::Result<()> {
    let fd = open_at(Some(root), INTERVAL_KNOB, OFlag::O_WRONLY | OFlag::O_TRUNC)?;
    nix::unistd::write(fd, ms.to_string().as_bytes()).map(drop)
}

/// Up to three fds stay open per cgroup: lift the soft fd limit to the
/// hard one, and both to fs.nr_open where we may (root).
fn raise_fd_limit() {
    use nix::sys::resource::getrlimit;
    use nix::sys::resource::setrlimit;
    use nix::sys::resource::Resource;
    let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(hard)
        .max(hard);
    if setrlimit(Resource::RLIMIT_NOFILE, nr_open, nr_open).is_err() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// The files streams serve, and why not the others.
pub(crate) fn support() -> Support {
    let files: FileSet = STREAM_FILES.iter().map(|(f, _)| *f).collect();
    let served = files
        .iter()
        .map(|f| {
            let how = Served {
                fresh: Freshness::StreamInterval,
                root_as_text: false,
                walk: None,
            };
            (f, how)
        })
        .collect();
    let not_served = StatFile::ALL
        .iter()
        .filter(|f| !files.contains(**f))
        .map(|&f| (f, NotServed::NoStreamFile(f)))
        .collect();
    Support {
        files,
        served,
        not_served,
    }
}

/// Why a stream read gave nothing: the caller reads the plain file instead.
#[derive(Debug)]
pub(crate) enum Stale {
    /// No record newer than this fd's last (a flush was missed) or
    /// streaming was switched off.
    NoRecord,
    Io(io::Error),
}

/// What reading a stream file gave.
pub(crate) enum StreamRead<'a> {
    Text(&'a str),
    /// The file does not exist for this cgroup, or the cgroup is gone.
    Absent,
}

struct Kept {
    fds: [Option<OwnedFd>; STREAM_FILES.len()],
    seen: u64,
}

pub(crate) struct Streams {
    root: OwnedFd,
    /// The root's cpu.stat.stream, polled once per sample.
    waiter: OwnedFd,
    interval: Duration,
    /// The interval we set, to turn streaming off again when we stop.
    set_by_us: Option<u64>,
    kept: HashMap<u64, Kept>,
    sample: u64,
    buf: Vec<u8>,
    /// Stream files opened so far.
    pub(crate) opened: u64,
}

impl Streams {
    /// Starts reading streams; turns streaming on at `want` if it is off,
    /// and leaves an interval someone else set alone.
    pub(crate) fn start(root: BorrowedFd, want: Option<Duration>) -> Result<Self, String> {
        raise_fd_limit();
        let mut ms = read_interval(root)?;
        let mut set_by_us = None;
        if ms == 0 {
            let want = want.ok_or("streaming is off (cpu.stat.stream_interval is 0)")?;
            ms = (want.as_millis() as u64).clamp(*INTERVAL_MS.start(), *INTERVAL_MS.end());
            write_interval(root, ms)
                .map_err(|e| format!("cannot set cpu.stat.stream_interval: {}", e))?;
            set_by_us = Some(ms);
        }
        let waiter = open_at(
            Some(root),
            STREAM_FILES[0].1,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK,
        )
        .map_err(|e| format!("cannot open cpu.stat.stream: {}", e))?;
        Ok(Streams {
            root: root
                .try_clone_to_owned()
                .map_err(|e| format!("cannot dup the cgroup root fd: {}", e))?,
            waiter,
            interval: Duration::from_millis(ms),
            set_by_us,
            kept: HashMap::new(),
            sample: 0,
            buf: Vec::new(),
            opened: 0,
        })
    }

    /// Waits for the next record; `Err` says why there is none, so the
    /// sample falls back to plain reads.
    pub(crate) fn wait(&mut self) -> Result<(), String> {
        self.sample += 1;
        let timeout = self.interval * 2;
        let mut fds = [nix::poll::PollFd::new(
            self.waiter.as_fd(),
            nix::poll::PollFlags::POLLIN | nix::poll::PollFlags::POLLPRI,
        )];
        let ms = nix::poll::PollTimeout::try_from(timeout.as_millis() as i32)
            .unwrap_or(nix::poll::PollTimeout::MAX);
        match nix::poll::poll(&mut fds, ms) {
            Ok(0) => {
                return Err(format!(
                    "no stream record within 2 intervals ({:?})",
                    timeout
                ))
            }
            Ok(_) => {}
            Err(e) => return Err(format!("poll on cpu.stat.stream failed: {}", e)),
        }
        // Consume the record so the next poll waits for a newer one.
        match read_to_end(self.waiter.as_fd(), &mut self.buf) {
            Ok(()) => Ok(()),
            Err(Errno::ENODATA) => {
                Err("streaming was switched off (cpu.stat.stream_interval is 0)".to_owned())
            }
            Err(e) => Err(format!("reading cpu.stat.stream failed: {}", e)),
        }
    }

    /// Reads the current record of `file` for the cgroup `id`, opening its
    /// stream file (in its directory at `path()` relative to the root,
    /// while that is still cgroup `id`) the first time.
    pub(crate) fn read(
        &mut self,
        id: u64,
        path: impl FnOnce() -> PathBuf,
        file: StatFile,
    ) -> Result<StreamRead<'_>, Stale> {
        let slot = slot_of(file).expect("only stream files are read from streams");
        let sample = self.sample;
        let kept = self.kept.entry(id).or_insert_with(|| Kept {
            fds: Default::default(),
            seen: sample,
        });
        kept.seen = sample;
        if kept.fds[slot].is_none() {
            let path = path();
            let dir = match path.as_os_str().is_empty() {
                true => None,
                false => match open_cgroup_at(self.root.as_fd(), &path, id) {
                    Some(dir) => Some(dir),
                    // Gone, or another cgroup has its name now.
                    None => return Ok(StreamRead::Absent),
                },
            };
            let dir = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
            match open_at(
                Some(dir),
                STREAM_FILES[slot].1,
                OFlag::O_RDONLY | OFlag::O_NONBLOCK,
            ) {
                Ok(fd) => {
                    kept.fds[slot] = Some(fd);
                    self.opened += 1;
                }
                // Controller off here (a later sample retries), or gone.
                Err(Errno::ENOENT | Errno::ENODEV) => return Ok(StreamRead::Absent),
                Err(e) => return Err(Stale::Io(e.into())),
            }
        }
        let fd = kept.fds[slot].as_ref().expect("opened above");
        match read_to_end(fd.as_fd(), &mut self.buf) {
            Ok(()) => std::str::from_utf8(&self.buf)
                .map(StreamRead::Text)
                .map_err(|e| Stale::Io(io::Error::new(io::ErrorKind::InvalidData, e))),
            Err(Errno::ENODEV) => Ok(StreamRead::Absent),
            Err(Errno::EAGAIN | Errno::ENODATA) => Err(Stale::NoRecord),
            Err(e) => Err(Stale::Io(e.into())),
        }
    }

    /// Closes the fds of cgroups not seen in this sample (removed).
    pub(crate) fn end_sample(&mut self) {
        let sample = self.sample;
        self.kept.retain(|_, k| k.seen == sample);
    }

    pub(crate) fn kept_cgroups(&self) -> usize {
        self.kept.len()
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        // Turn streaming off only if nobody changed the interval since.
        if let Some(ms) = self.set_by_us {
            if read_interval(self.root.as_fd()) == Ok(ms) {
                let _ = write_interval(self.root.as_fd(), 0);
            }
        }
    }
}

#[cfg(test)]
#[path = "stream_test.rs"]
mod test;
