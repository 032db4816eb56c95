//! Plain read: today's cgroupfs text files, the backend of last resort.
//!
//! Files are opened relative to a kept directory fd (`openat`) and read into
//! one reused buffer; the parsers walk borrowed slices of it.

use std::collections::HashMap;
use std::ffi::CStr;
use std::ffi::CString;
use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use anyhow::Context;
use anyhow::Result;
use model::CgroupSample;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::OFlag;
use nix::sys::stat::fstatat;

use crate::fd::inode_of;
use crate::fd::open_at;
use crate::fd::open_cgroup_at;
use crate::fd::open_dir_at;
use crate::fd::read_to_end;
use crate::parse;
use crate::table::Table;
use crate::FileError;
use crate::FileSet;
use crate::FlatSample;
use crate::PressureLines;
use crate::StatFile;

pub(crate) fn open_root(root: &Path) -> Result<OwnedFd> {
    let c = CString::new(root.as_os_str().as_encoded_bytes())
        .with_context(|| format!("Invalid cgroup root {}", root.display()))?;
    open_dir_at(None, &c).with_context(|| format!("Failed to open cgroup root {}", root.display()))
}

/// Counters of the work a reader did, for tests and the benchmark.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadCounters {
    pub files_opened: u64,
    pub dirs_opened: u64,
    /// Stream files opened (kept across samples).
    pub streams_opened: u64,
}

/// Reads cgroup files into a reused buffer.
#[derive(Default)]
pub struct PlainReader {
    buf: Vec<u8>,
    pub counters: ReadCounters,
}

/// What reading one file gave.
enum Content<'a> {
    Text(&'a str),
    /// Not there: the file does not exist for this cgroup (controller not
    /// enabled, root), the cgroup went away (ENODEV), or pressure is
    /// disabled (EOPNOTSUPP).
    Absent,
}

/// Reads a cgroup file whole into `buf`.
fn text_of<'a>(fd: BorrowedFd, buf: &'a mut Vec<u8>) -> io::Result<Content<'a>> {
    match read_to_end(fd, buf) {
        Ok(()) => std::str::from_utf8(buf)
            .map(Content::Text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(Errno::ENODEV | Errno::EOPNOTSUPP) => Ok(Content::Absent),
        Err(e) => Err(e.into()),
    }
}

/// Whether a cgroup could be read, or was removed while we read it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a cgroup removed while read is no cgroup with empty files"]
pub enum Liveness {
    Alive,
    Gone,
}

impl PlainReader {
    fn read(&mut self, dir: BorrowedFd, file: StatFile) -> io::Result<Content<'_>> {
        let fd = match open_at(Some(dir), file.path(), OFlag::O_RDONLY) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ENODEV) => return Ok(Content::Absent),
            Err(e) => return Err(e.into()),
        };
        self.counters.files_opened += 1;
        text_of(fd.as_fd(), &mut self.buf)
    }

    /// Reads `files` of the cgroup open at `dir` into `s`.
    ///
    /// Returns [`Liveness::Gone`] when the cgroup was removed while being
    /// read, so the caller can drop it rather than report an empty cgroup.
    pub fn read_cgroup(
        &mut self,
        dir: BorrowedFd,
        cgroup: &str,
        files: FileSet,
        s: &mut CgroupSample,
        errors: &mut Vec<FileError>,
    ) -> Liveness {
        let mut absent = false;
        let mut pressure = PressureParts::default();
        for file in files.iter() {
            let content = self.read(dir, file);
            absent |= matches!(content, Ok(Content::Absent));
            fill(file, content, cgroup, s, &mut pressure, errors);
        }
        pressure.assemble(s, cgroup, errors);
        // A missing file is normal (controller off); a missing
        // cgroup.controllers, which every cgroup has, means it is gone.
        if absent && !cgroup.is_empty() && !exists_at(dir, StatFile::CgroupControllers.path()) {
            return Liveness::Gone;
        }
        Liveness::Alive
    }
}

/// Parses what reading `file` gave into `s`; an error goes to `errors`.
fn fill(
    file: StatFile,
    content: io::Result<Content>,
    cgroup: &str,
    s: &mut CgroupSample,
    pressure: &mut PressureParts,
    errors: &mut Vec<FileError>,
) {
    let error = match content {
        Ok(Content::Text(text)) => match apply(file, text, s, pressure) {
            Ok(()) => return,
            Err(e) => e.to_string(),
        },
        Ok(Content::Absent) => return,
        Err(e) => e.to_string(),
    };
    errors.push(FileError {
        cgroup: cgroup.to_owned(),
        file,
        error,
    });
}

/// The root's files that BPF cannot serve, kept open and read with pread:
/// the kernel fills the root's cpu.stat and pressure from per-CPU and
/// system-wide state no cgroup iterator sees.
pub(crate) struct RootText {
    fds: Vec<(StatFile, Option<OwnedFd>)>,
    buf: Vec<u8>,
}

impl RootText {
    pub(crate) fn open(root: BorrowedFd, files: FileSet) -> Self {
        let fds = files
            .iter()
            .map(|f| (f, open_at(Some(root), f.path(), OFlag::O_RDONLY).ok()))
            .collect();
        RootText {
            fds,
            buf: Vec::new(),
        }
    }

    /// Reads the kept files into the root's sample `s`.
    pub(crate) fn fill(&mut self, s: &mut CgroupSample, errors: &mut Vec<FileError>) {
        let mut pressure = PressureParts::default();
        for (file, fd) in &self.fds {
            let Some(fd) = fd else { continue };
            let content = text_of(fd.as_fd(), &mut self.buf);
            fill(*file, content, "", s, &mut pressure, errors);
        }
        pressure.assemble(s, "", errors);
    }
}

/// The three pressure files, kept until all are read: below holds them as
/// one field.
#[derive(Default)]
pub(crate) struct PressureParts {
    cpu: Option<PressureLines>,
    io: Option<PressureLines>,
    memory: Option<PressureLines>,
}

impl PressureParts {
    pub(crate) fn assemble(self, s: &mut CgroupSample, cgroup: &str, errors: &mut Vec<FileError>) {
        if let (Some(cpu), Some(io), Some(mem)) = (self.cpu, self.io, self.memory) {
            s.pressure = crate::assemble_pressure(cpu, io, mem, cgroup, errors);
        }
    }
}

/// Parses the text of `file` into its field of `s` (pressure files into
/// `p`, see [`PressureParts::assemble`]).
pub(crate) fn apply(
    file: StatFile,
    text: &str,
    s: &mut CgroupSample,
    p: &mut PressureParts,
) -> parse::Result<()> {
    match file {
        StatFile::CpuStat => s.cpu_stat = Some(parse::cpu_stat(text)?),
        StatFile::IoStat => s.io_stat = Some(parse::io_stat(text)?),
        StatFile::PidsCurrent => s.tids_current = Some(parse::single_u64(text)?),
        StatFile::PidsMax => s.tids_max = Some(parse::u64_or_max(text)?),
        StatFile::MemoryCurrent => s.memory_current = Some(parse::single_i64(text)?),
        StatFile::MemoryStat => s.memory_stat = Some(parse::memory_stat(text)?),
        StatFile::CpuPressure => p.cpu = Some(parse::pressure(text)?),
        StatFile::IoPressure => p.io = Some(parse::pressure(text)?),
        StatFile::MemoryPressure => p.memory = Some(parse::pressure(text)?),
        StatFile::MemorySwapCurrent => s.memory_swap_current = Some(parse::single_i64(text)?),
        StatFile::MemoryMin => s.memory_min = Some(parse::u64_or_max(text)?),
        StatFile::MemoryLow => s.memory_low = Some(parse::u64_or_max(text)?),
        StatFile::MemoryHigh => s.memory_high = Some(parse::u64_or_max(text)?),
        StatFile::MemoryMax => s.memory_max = Some(parse::u64_or_max(text)?),
        StatFile::MemorySwapMax => s.memory_swap_max = Some(parse::u64_or_max(text)?),
        StatFile::MemoryZswapMax => s.memory_zswap_max = Some(parse::u64_or_max(text)?),
        StatFile::MemoryEvents => s.memory_events = Some(parse::memory_events(text)?),
        StatFile::MemoryEventsLocal => {
            s.memory_events_local = Some(parse::memory_events_local(text)?)
        }
        StatFile::CgroupStat => s.cgroup_stat = Some(parse::cgroup_stat(text)?),
        StatFile::MemoryNumaStat => s.memory_numa_stat = Some(parse::numa_stat(text)?),
        StatFile::CpusetCpus => s.cpuset_cpus = Some(parse::cpuset(text)?),
        StatFile::CpusetCpusEffective => s.cpuset_cpus_effective = Some(parse::cpuset(text)?),
        StatFile::CpusetMems => s.cpuset_mems = Some(parse::mem_nodes(text)?),
        StatFile::CpusetMemsEffective => s.cpuset_mems_effective = Some(parse::mem_nodes(text)?),
        StatFile::CpuWeight => s.cpu_weight = Some(parse::single_u32(text)?),
        StatFile::CpuMax => s.cpu_max = Some(parse::cpu_max(text)?),
        StatFile::CgroupControllers => s.cgroup_controllers = Some(parse::controllers(text)?),
        StatFile::CgroupSubtreeControl => {
            s.cgroup_subtree_control = Some(parse::controllers(text)?)
        }
    }
    Ok(())
}

fn exists_at(dir: BorrowedFd, name: &CStr) -> bool {
    nix::unistd::faccessat(
        Some(dir.as_raw_fd()),
        name,
        nix::unistd::AccessFlags::F_OK,
        nix::fcntl::AtFlags::empty(),
    )
    .is_ok()
}

/// The plain-read walk: readdir from the root, read each cgroup's files.
pub struct Walker {
    root_fd: OwnedFd,
    pub(crate) reader: PlainReader,
}

impl Walker {
    pub fn new(root: &Path) -> Result<Self> {
        Ok(Walker {
            root_fd: open_root(root)?,
            reader: PlainReader::default(),
        })
    }

    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Reads `files` of the cgroup at position `pos` of `table` by its
    /// path, without walking: for files a faster backend could not serve
    /// this time. Nothing is read when it is gone or another cgroup has
    /// its name now.
    pub(crate) fn read_row(
        &mut self,
        table: &mut Table,
        pos: usize,
        files: FileSet,
        errors: &mut Vec<FileError>,
    ) {
        if files.is_empty() {
            return;
        }
        let id = table.id(pos);
        let (row, s) = table.row_and_sample_mut(pos);
        let owned;
        let dir = if row.raw.as_os_str().is_empty() {
            self.root_fd.as_fd()
        } else {
            match open_cgroup_at(self.root_fd.as_fd(), &row.raw, id) {
                Some(fd) => {
                    owned = fd;
                    owned.as_fd()
                }
                None => return,
            }
        };
        let n_errors = errors.len();
        if self.reader.read_cgroup(dir, &row.path, files, s, errors) == Liveness::Gone {
            // Removed since the pass saw it: what it gave stands, its
            // files were not there to read.
            errors.truncate(n_errors);
        }
    }

    /// `files` of every cgroup as plain text, as a flat list: the files as
    /// they read now, for checking what a backend gave.
    pub fn read_all(&mut self, files: FileSet) -> FlatSample {
        let mut table = Table::default();
        let mut snap = FlatSample::default();
        self.walk(&mut table, files, &mut snap.report.errors);
        snap.nodes = table.take_nodes();
        snap
    }

    /// Indexes the whole tree into `table`, reading `files` of every
    /// cgroup.
    pub(crate) fn walk(&mut self, table: &mut Table, files: FileSet, errors: &mut Vec<FileError>) {
        table.begin();
        let mut w = Walk {
            reader: &mut self.reader,
            files,
            table,
            errors,
        };
        w.visit(self.root_fd.as_fd(), None, OsString::new());
        table.end();
    }
}

/// One walk's state.
struct Walk<'a> {
    reader: &'a mut PlainReader,
    files: FileSet,
    table: &'a mut Table,
    errors: &'a mut Vec<FileError>,
}

impl Walk<'_> {
    fn visit(&mut self, dir: BorrowedFd, parent: Option<usize>, name: OsString) {
        let inode = inode_of(dir);
        // Without an inode (fstat failed) the cgroup is new to the table.
        let id = inode.unwrap_or(u64::MAX - self.table.len() as u64);
        // Filtered out (with its subtree).
        let Some(pos) = self.table.visit(id, parent, || name) else {
            return;
        };
        let n_errors = self.errors.len();
        let (row, sample) = self.table.row_and_sample_mut(pos);
        *sample = CgroupSample {
            inode_number: inode.map(|i| i as i64),
            ..Default::default()
        };
        if self
            .reader
            .read_cgroup(dir, &row.path, self.files, sample, self.errors)
            == Liveness::Gone
        {
            self.errors.truncate(n_errors);
            self.table.truncate(pos);
            return;
        }
        let Ok(children) = subdirs(dir) else {
            // Removed between reading its files and listing it: drop it.
            if parent.is_some() {
                self.table.truncate(pos);
                self.errors.truncate(n_errors);
            }
            return;
        };
        for child in children {
            // ENOENT: removed since readdir.
            if let Ok(fd) = open_dir_at(Some(dir), &child) {
                self.reader.counters.dirs_opened += 1;
                let name = OsString::from_vec(child.into_bytes());
                self.visit(fd.as_fd(), Some(pos), name);
            }
        }
    }
}

/// The child cgroups of the cgroup at `raw` under `root` (empty: the
/// root), by id (their directory's inode number), for a tree whose names
/// are not known; empty when it is gone.
pub(crate) fn children_by_id(root: BorrowedFd, raw: &Path) -> HashMap<u64, OsString> {
    let owned;
    let dir = if raw.as_os_str().is_empty() {
        root
    } else {
        let Ok(path) = CString::new(raw.as_os_str().as_bytes()) else {
            return HashMap::new();
        };
        match open_dir_at(Some(root), &path) {
            Ok(fd) => {
                owned = fd;
                owned.as_fd()
            }
            Err(_) => return HashMap::new(),
        }
    };
    let children = subdirs(dir).unwrap_or_default();
    (children.into_iter())
        .filter_map(|child| {
            let st = fstatat(
                Some(dir.as_raw_fd()),
                child.as_c_str(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .ok()?;
            Some((st.st_ino, OsString::from_vec(child.into_bytes())))
        })
        .collect()
}

/// Names of the subdirectories (child cgroups) of `dir`.
fn subdirs(dir: BorrowedFd) -> nix::Result<Vec<CString>> {
    let mut d = nix::dir::Dir::from(open_dir_at(Some(dir), c".")?)?;
    let mut out = Vec::new();
    for entry in d.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type() == Some(nix::dir::Type::Directory) && name != c"." && name != c".." {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "read_test.rs"]
mod test;
