//! Snapshots in below's format: a tar holding one directory, `store/`, that
//! is a below store (index/data shards, zstd-dictionary compressed) with the
//! frames of a time range. `replay`/`dump --snapshot` read it as a store.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use store::ChunkSizePo2;
use store::CompressionMode;
use store::Direction;
use store::Store;
use tempfile::TempDir;

use crate::private;
use crate::writer::Writer;

/// below's snapshot compression: zstd with a dictionary per 16 frames.
pub const SNAPSHOT_COMPRESSION: CompressionMode = CompressionMode::ZstdDictionary(ChunkSizePo2(4));

/// The directory name inside the tar.
const STORE_IN_TAR: &str = "store";

/// Copies the frames with `begin <= t <= end` from `from` to a store at
/// `to` written with `mode` (by our writer: private files); returns how
/// many.
pub fn copy_frames(
    logger: &slog::Logger,
    from: &mut dyn Store<SampleType = store::DataFrame>,
    to: &Path,
    mode: CompressionMode,
    begin: SystemTime,
    end: SystemTime,
) -> Result<u64> {
    let mut writer = Writer::new(logger.clone(), to, mode, SystemTime::now())
        .with_context(|| format!("Failed to open store {}", to.display()))?;
    let mut t = begin;
    let mut n = 0;
    while t <= end {
        let Some((ts, frame)) = from.get_sample_at_timestamp(t, Direction::Forward)? else {
            break;
        };
        if ts > end {
            break;
        }
        writer
            .put(ts, &frame)
            .with_context(|| format!("Failed to write to {}", to.display()))?;
        n += 1;
        // The store's resolution is one second.
        t = ts + Duration::from_secs(1);
    }
    Ok(n)
}

/// The file name below gives a snapshot when no output is named, before
/// its random suffix.
pub fn default_name(begin: SystemTime, end: SystemTime) -> String {
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    };
    format!("snapshot_{:011}_{:011}", secs(begin), secs(end))
}

/// Writes a snapshot of `store_dir`'s frames in `[begin, end]` to `output`,
/// or with none to a new file in the current directory named after the
/// range with a random suffix; returns the number of frames and the file.
/// Fails, writing nothing, if there are no frames. The file is 0600 (it
/// holds command lines); a symbolic link at `output` is refused, and a
/// regular file there is overwritten, as by below, and made private.
pub fn create(
    logger: &slog::Logger,
    store_dir: &Path,
    begin: SystemTime,
    end: SystemTime,
    output: Option<&Path>,
) -> Result<(u64, PathBuf)> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{}.", default_name(begin, end)))
        .permissions(private::dir_permissions())
        .tempdir()
        .context("Failed to create a temporary directory for the snapshot")?;
    let mut from = store::LocalStore::new(logger.clone(), store_dir.to_path_buf());
    let n = copy_frames(
        logger,
        &mut from,
        tmp.path(),
        SNAPSHOT_COMPRESSION,
        begin,
        end,
    )?;
    if n == 0 {
        bail!(
            "No samples in {} between {} and {}",
            store_dir.display(),
            humantime::format_rfc3339_seconds(begin),
            humantime::format_rfc3339_seconds(end)
        );
    }
    // fsync fails (EINVAL) on a FIFO or /dev/null: a regular file only.
    let write_tar = |file: &File, regular: bool| -> std::io::Result<()> {
        let mut tar = tar::Builder::new(file);
        tar.append_dir_all(STORE_IN_TAR, tmp.path())?;
        tar.into_inner()?;
        if regular {
            file.sync_all()?;
        }
        Ok(())
    };
    let Some(output) = output else {
        // A new file (O_EXCL) with a name nobody can guess: the current
        // directory may be one others write to.
        let file = tempfile::Builder::new()
            .prefix(&format!("{}.", default_name(begin, end)))
            .rand_bytes(8)
            .permissions(std::fs::Permissions::from_mode(private::FILE_MODE))
            .tempfile_in(".")
            .context("Failed to create a snapshot file in the current directory")?;
        write_tar(file.as_file(), true)
            .with_context(|| format!("Failed to write snapshot file {}", file.path().display()))?;
        let (_, path) = file.keep().context("Failed to keep the snapshot file")?;
        return Ok((n, path));
    };
    let file = private::open_no_follow(output, private::file_options().write(true).create(true))
        .context("Failed to create snapshot file")?;
    // A regular file is made private, then truncated: one we may not chmod
    // stays as it was. A device or FIFO (/dev/null) is only written to:
    // never chmodded, truncated or removed.
    let regular = file
        .metadata()
        .with_context(|| format!("Failed to stat {}", output.display()))?
        .is_file();
    if regular {
        private::tighten(&file, output)?;
        file.set_len(0)
            .with_context(|| format!("Failed to truncate {}", output.display()))?;
    }
    if let Err(e) = write_tar(&file, regular) {
        if regular {
            let _ = std::fs::remove_file(output);
        }
        return Err(e)
            .with_context(|| format!("Failed to write snapshot file {}", output.display()));
    }
    Ok((n, output.to_path_buf()))
}

/// A snapshot unpacked to a temporary store, removed on drop.
pub struct Unpacked {
    _tmp: TempDir,
    store: PathBuf,
}

impl Unpacked {
    pub fn store_dir(&self) -> &Path {
        &self.store
    }
}

/// Unpacks a snapshot (ours or below's). below names the directory
/// `store`; any single top-level directory is accepted.
pub fn open(path: &Path) -> Result<Unpacked> {
    let file = File::open(path)
        .with_context(|| format!("Failed to open snapshot file {}", path.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("snapshot_replay.")
        .permissions(private::dir_permissions())
        .tempdir()
        .context("Failed to create a temporary directory for the snapshot")?;
    let mut tar = tar::Archive::new(file);
    // The tar's modes without group and other bits (below 0.9's snapshots
    // hold 0644 files): at most 0600 and 0700, as any store of ours.
    tar.set_mask(0o077);
    tar.unpack(tmp.path())
        .with_context(|| format!("Failed to unpack snapshot {}", path.display()))?;
    let dirs: Vec<PathBuf> = std::fs::read_dir(tmp.path())?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    match &dirs[..] {
        [d] if d.is_dir() => Ok(Unpacked {
            store: d.clone(),
            _tmp: tmp,
        }),
        _ => bail!(
            "{} is not a below snapshot (expected one store directory in the tar)",
            path.display()
        ),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn logger() -> slog::Logger {
        slog::Logger::root(slog::Discard, slog::o!())
    }

    /// A store with one frame per `secs`, memory_current = the second.
    fn store_with(dir: &Path, secs: &[u64]) {
        let mut w =
            store::StoreWriter::new(logger(), dir, CompressionMode::None, store::Format::Cbor)
                .unwrap();
        for s in secs {
            let mut sample = model::Sample::default();
            sample.cgroup.memory_current = Some(*s as i64);
            w.put(
                SystemTime::UNIX_EPOCH + Duration::from_secs(*s),
                &store::DataFrame { sample },
            )
            .unwrap();
        }
    }

    fn frames(dir: &Path) -> Vec<(u64, Option<i64>)> {
        let mut s = store::LocalStore::new(logger(), dir.to_path_buf());
        let mut t = SystemTime::UNIX_EPOCH;
        let mut out = vec![];
        while let Some((ts, f)) = s.get_sample_at_timestamp(t, Direction::Forward).unwrap() {
            let secs = ts.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
            out.push((secs, f.sample.cgroup.memory_current));
            t = ts + Duration::from_secs(1);
        }
        out
    }

    #[test]
    fn snapshot_holds_the_range_and_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let store = d.path().join("store");
        // Shards are days: span two.
        let base = 86400 * 20000;
        store_with(
            &store,
            &[base - 10, base - 5, base + 3, base + 8, base + 20],
        );
        let out = d.path().join("snap");
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let (n, path) = create(&logger(), &store, at(base - 5), at(base + 8), Some(&out)).unwrap();
        assert_eq!((n, path), (3, out.clone()));
        let names: Vec<String> = tar::Archive::new(File::open(&out).unwrap())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert!(names.iter().all(|n| n.starts_with("store")), "{:?}", names);
        let u = open(&out).unwrap();
        assert_eq!(
            frames(u.store_dir()),
            [
                (base - 5, Some(base as i64 - 5)),
                (base + 3, Some(base as i64 + 3)),
                (base + 8, Some(base as i64 + 8))
            ]
        );
        let tmp = u.store_dir().parent().unwrap().to_path_buf();
        drop(u);
        assert!(!tmp.exists(), "unpacked snapshot removed on drop");
    }

    #[test]
    fn empty_range_and_bad_files_fail_clearly() {
        let d = tempfile::tempdir().unwrap();
        let store = d.path().join("store");
        store_with(&store, &[1000]);
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let out = d.path().join("snap");
        let e = create(&logger(), &store, at(2000), at(3000), Some(&out)).unwrap_err();
        assert!(format!("{:#}", e).contains("No samples"), "{:#}", e);
        assert!(!out.exists());
        std::fs::write(&out, b"not a tar").unwrap();
        assert!(open(&out).is_err());
        let e = open(&d.path().join("missing")).err().unwrap();
        assert!(format!("{:#}", e).contains("Failed to open snapshot file"));
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    /// The snapshot, the store in it and the store unpacked from it are
    /// 0600/0700 under the usual umask; so is one unpacked from a tar of
    /// 0644/0755 files, as below 0.9 writes them.
    #[test]
    fn snapshots_are_private() {
        use crate::private::test_util::*;
        usual_umask();
        let d = tempfile::tempdir().unwrap();
        let store = d.path().join("store");
        store_with(&store, &[1000, 1001]);
        assert_eq!(mode(&store), 0o755, "below-store follows the umask");
        let out = d.path().join("snap");
        create(&logger(), &store, at(1000), at(1001), Some(&out)).unwrap();
        assert_eq!(mode(&out), 0o600);
        for e in tar::Archive::new(File::open(&out).unwrap())
            .entries()
            .unwrap()
        {
            let e = e.unwrap();
            let m = e.header().mode().unwrap();
            assert_eq!(m & 0o077, 0, "{:?} is {:o} in the tar", e.path(), m);
        }
        let u = open(&out).unwrap();
        assert_private(u.store_dir().parent().unwrap());
        assert_eq!(frames(u.store_dir()).len(), 2);

        let open_tar = d.path().join("open.tar");
        let mut b = tar::Builder::new(File::create(&open_tar).unwrap());
        b.append_dir_all(STORE_IN_TAR, &store).unwrap();
        b.into_inner().unwrap();
        let u = open(&open_tar).unwrap();
        assert_private(u.store_dir().parent().unwrap());
        assert_eq!(frames(u.store_dir()).len(), 2);
    }

    /// A link planted at the output is refused, its target untouched; a
    /// file there is overwritten (as by below) and made private.
    #[test]
    fn output_link_refused_file_overwritten() {
        use crate::private::test_util::*;
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let store = d.path().join("store");
        store_with(&store, &[1000]);
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let out = d.path().join("snap");
        std::os::unix::fs::symlink(&target, &out).unwrap();
        let e = create(&logger(), &store, at(1000), at(1000), Some(&out)).unwrap_err();
        assert!(format!("{e:#}").contains("is a symbolic link"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(mode(&target), 0o644, "the target keeps its mode too");

        std::fs::remove_file(&out).unwrap();
        std::fs::write(
            &out,
            "an older file, longer than a tar header block ".repeat(20),
        )
        .unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
        create(&logger(), &store, at(1000), at(1000), Some(&out)).unwrap();
        assert_eq!(mode(&out), 0o600);
        assert_eq!(frames(open(&out).unwrap().store_dir()).len(), 1);
    }

    /// A FIFO (or device) at the output is written to and keeps its mode:
    /// only regular files are made private (and synced).
    #[test]
    fn a_fifo_output_keeps_its_mode() {
        use crate::private::test_util::*;
        usual_umask();
        let d = tempfile::tempdir().unwrap();
        let store = d.path().join("store");
        store_with(&store, &[1000]);
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        create(&logger(), &store, at(1000), at(1000), Some(&fifo)).unwrap();
        let tar = reader.join().unwrap();
        assert!(tar.len() > 1024, "{} bytes through the FIFO", tar.len());
        assert_eq!(mode(&fifo), 0o644);
    }
}
