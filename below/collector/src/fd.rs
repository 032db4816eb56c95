//! The ways we touch a cgroup file: open it relative to a kept directory
//! fd (or a cgroup's directory by its path, checking it is still that
//! cgroup), and read it whole into a reused buffer.

use std::ffi::CStr;
use std::ffi::CString;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Opens `path` relative to `dir` (or the working directory, for absolute
/// paths), close-on-exec.
pub(crate) fn open_at(dir: Option<BorrowedFd>, path: &CStr, flags: OFlag) -> nix::Result<OwnedFd> {
    let fd = nix::fcntl::openat(
        dir.map(|d| d.as_raw_fd()),
        path,
        flags | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SAFETY: `fd` was just returned by openat(2) and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory read-only, relative to `dir` (or absolute).
pub(crate) fn open_dir_at(dir: Option<BorrowedFd>, path: &CStr) -> nix::Result<OwnedFd> {
    open_at(dir, path, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
}

/// The inode number of an open file (a cgroup directory's is its id).
pub(crate) fn inode_of(fd: BorrowedFd) -> Option<u64> {
    nix::sys::stat::fstat(fd.as_raw_fd())
        .ok()
        .map(|st| st.st_ino)
}

/// The directory of cgroup `id` at `path` under `root`, or None when it is
/// gone — or when the directory there now is another cgroup (removed and
/// made again under the same name since `id` was seen), whose values must
/// not be credited to `id`.
pub(crate) fn open_cgroup_at(root: BorrowedFd, path: &Path, id: u64) -> Option<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let fd = open_dir_at(Some(root), &c).ok()?;
    (inode_of(fd.as_fd()) == Some(id)).then_some(fd)
}

/// Reads the file from offset 0 to EOF into `buf` (cleared first). pread
/// at 0 makes a kept cgroup file generate its text (or a stream file its
/// next record) afresh, so fds can stay open across samples.
pub(crate) fn read_to_end(fd: BorrowedFd, buf: &mut Vec<u8>) -> nix::Result<()> {
    buf.clear();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(buf.capacity().max(4096));
        }
        let len = buf.len();
        let spare = buf.spare_capacity_mut();
        // SAFETY: pread(2) writes at most `spare.len()` bytes into the
        // vector's spare capacity; the length grows by exactly what it wrote.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                len as libc::off_t,
            )
        };
        match n {
            0 => return Ok(()),
            n if n < 0 => match Errno::last() {
                Errno::EINTR => continue,
                e => return Err(e),
            },
            // SAFETY: see above.
            n => unsafe { buf.set_len(len + n as usize) },
        }
    }
}
