//! Files and directories only their owner can read. `record` runs as root
//! and its store holds every process's command line, which can carry
//! secrets: whatever we create is 0600 (directories 0700), whatever the
//! umask.

use std::fs::DirBuilder;
use std::fs::File;
use std::fs::OpenOptions;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::anyhow;
use anyhow::Context;
use anyhow::Result;

pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;

/// For `tempfile`'s directories, which otherwise follow the umask.
pub fn dir_permissions() -> std::fs::Permissions {
    std::fs::Permissions::from_mode(DIR_MODE)
}

/// Options that create a file 0600.
pub fn file_options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// Creates `dir` 0700 if it is missing. Parents created on the way are
/// 0700 too; existing ones are left alone (they are not ours to tighten).
pub fn create_dir_all(dir: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .with_context(|| format!("Failed to create directory {}", dir.display()))
}

/// Opens `path` with `opts`, refusing a symbolic link there: a path the
/// user names may lie in a directory others can write (/tmp), where a
/// planted link would send what we write, as root, anywhere.
pub fn open_no_follow(path: &Path, opts: &mut OpenOptions) -> Result<File> {
    opts.custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => anyhow!(
                "{} is a symbolic link: refusing to write through it",
                path.display()
            ),
            _ => anyhow::Error::new(e).context(format!("Failed to open {}", path.display())),
        })
}

/// Clears the group and other bits of an open file or directory that has
/// them (one that existed before we opened it); true if it did.
pub fn tighten(file: &File, path: &Path) -> Result<bool> {
    let mode = file
        .metadata()
        .with_context(|| format!("Failed to stat {}", path.display()))?
        .mode();
    if mode & 0o077 == 0 {
        return Ok(false);
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))
        .with_context(|| {
            format!(
                "Failed to remove group and other access to {}",
                path.display()
            )
        })?;
    Ok(true)
}

/// What the tests of modes share.
#[cfg(test)]
pub(crate) mod test_util {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::path::PathBuf;

    /// The usual umask, under which a file created without a mode is 0644
    /// and a directory 0755. (Process-wide: every test that sets it sets
    /// this value.)
    pub fn usual_umask() {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    }

    /// Permission bits, of a link itself if `p` is one.
    pub fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// `dir` and everything under it, with their modes.
    pub fn modes_under(dir: &Path) -> Vec<(PathBuf, u32)> {
        let mut v = vec![(dir.to_path_buf(), mode(dir))];
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                v.extend(modes_under(&p));
            } else {
                v.push((p.clone(), mode(&p)));
            }
        }
        v
    }

    /// Asserts `dir` and what it holds are 0700 directories and 0600 files.
    pub fn assert_private(dir: &Path) {
        for (p, m) in modes_under(dir) {
            let want = if p.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(m, want, "{} is {:o}", p.display(), m);
        }
    }
}

#[cfg(test)]
mod test {
    use std::os::unix::fs::symlink;

    use super::test_util::*;
    use super::*;

    #[test]
    fn creates_private_whatever_the_umask() {
        usual_umask();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("a/b");
        create_dir_all(&dir).unwrap();
        file_options()
            .write(true)
            .create(true)
            .open(dir.join("f"))
            .unwrap();
        assert_private(&d.path().join("a"));
        // An existing directory keeps its mode.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir_all(&dir).unwrap();
        assert_eq!(mode(&dir), 0o755);
    }

    #[test]
    fn refuses_a_link_and_leaves_its_target() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = d.path().join("link");
        symlink(&target, &link).unwrap();
        let e = open_no_follow(&link, file_options().write(true).truncate(true)).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            format!(
                "{} is a symbolic link: refusing to write through it",
                link.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // A dangling link too: nothing is created at its target.
        let dangling = d.path().join("dangling");
        symlink(d.path().join("nothing"), &dangling).unwrap();
        assert!(open_no_follow(&dangling, file_options().write(true).create(true)).is_err());
        assert!(!d.path().join("nothing").exists());
        // Another error names the path.
        let e = open_no_follow(&d.path().join("no/such"), file_options().read(true)).unwrap_err();
        assert!(format!("{e:#}").contains("Failed to open"), "{e:#}");
    }

    #[test]
    fn tightens_an_open_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
        let f = File::open(&p).unwrap();
        assert!(tighten(&f, &p).unwrap());
        assert_eq!(mode(&p), 0o600);
        assert!(!tighten(&f, &p).unwrap(), "already private");
    }
}
