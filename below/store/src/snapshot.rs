//! Snapshots in below's format: a tar holding one directory, `store/`, that
//! is a below store (index/data shards, zstd-dictionary compressed) with the
//! frames of a time range. `replay`/`dump --snapshot` read it as a store.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Component;
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

use crate::private;
use crate::tmp::TempDir;
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
    // Opened at the first frame's time: opened now, it would also make
    // today's shard, empty, which below's reader warns about.
    let mut writer: Option<Writer> = None;
    let mut t = begin;
    let mut n = 0;
    while t <= end {
        let Some((ts, frame)) = from.get_sample_at_timestamp(t, Direction::Forward)? else {
            break;
        };
        if ts > end {
            break;
        }
        let w = match &mut writer {
            Some(w) => w,
            None => writer.insert(
                Writer::new(logger.clone(), to, mode, ts)
                    .with_context(|| format!("Failed to open store {}", to.display()))?,
            ),
        };
        w.put(ts, &frame.sample)
            .with_context(|| format!("Failed to write to {}", to.display()))?;
        n += 1;
        // The store's resolution is one second.
        t = ts + Duration::from_secs(1);
    }
    if writer.is_none() {
        private::create_dir_all(to)?;
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
    let tmp = crate::tmp::private_tempdir(&format!("{}.", default_name(begin, end)))
        .context("Failed to create a temporary directory for the snapshot")?;
    let mut from = crate::reader::SafeStore::new(logger.clone(), store_dir.to_path_buf(), false);
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

/// A snapshot unpacked to a temporary store, removed on drop (and when the
/// process ends, whatever ends it: see `tmp`).
pub struct Unpacked {
    _tmp: TempDir,
    store: PathBuf,
}

impl Unpacked {
    pub fn store_dir(&self) -> &Path {
        &self.store
    }
}

/// What unpacking a snapshot may write. A snapshot is a few shards of a
/// few MB; the limits only stop one made to fill the disk.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub entries: u64,
    pub bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Two files a day for years.
            entries: 10_000,
            bytes: 4 << 30,
        }
    }
}

/// Unpacks a snapshot (ours or below's) with the default [`Limits`].
pub fn open(path: &Path) -> Result<Unpacked> {
    open_with(path, Limits::default())
}

/// Unpacks a snapshot: one top-level directory (below names it `store`)
/// of regular files, nothing else. Links, devices, FIFOs, sparse files,
/// nested directories and entries beyond `limits` are refused, naming the
/// entry; what is written is 0700/0600 whatever the tar says, into a
/// private temporary directory.
pub fn open_with(path: &Path, limits: Limits) -> Result<Unpacked> {
    open_in(path, limits, &std::env::temp_dir())
}

fn open_in(path: &Path, limits: Limits, tmp_parent: &Path) -> Result<Unpacked> {
    let file = File::open(path)
        .with_context(|| format!("Failed to open snapshot file {}", path.display()))?;
    let tmp = crate::tmp::private_tempdir_in(tmp_parent, "snapshot_replay.")
        .context("Failed to create a temporary directory for the snapshot")?;
    let store = unpack(file, tmp.path(), limits)
        .with_context(|| format!("Failed to unpack snapshot {}", path.display()))?;
    Ok(Unpacked { _tmp: tmp, store })
}

fn unpack(file: File, into: &Path, limits: Limits) -> Result<PathBuf> {
    let mut tar = tar::Archive::new(file);
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut top: Option<PathBuf> = None;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let name = entry.path()?.into_owned();
        entries += 1;
        if entries > limits.entries {
            bail!("more than {} entries", limits.entries);
        }
        // `store/x` and `./store/x` alike; `..` and `/` never.
        let mut parts = vec![];
        for c in name.components() {
            match c {
                Component::CurDir => {}
                Component::Normal(p) => parts.push(p.to_owned()),
                _ => bail!("entry {} leaves the snapshot", name.display()),
            }
        }
        let kind = entry.header().entry_type();
        let is_dir = kind.is_dir();
        let is_file = kind.is_file() || kind.is_contiguous();
        if !is_dir && !is_file {
            bail!(
                "entry {} is not a regular file or directory ({:?}): not a below snapshot",
                name.display(),
                kind
            );
        }
        let (dir, file_name) = match (&parts[..], is_dir) {
            ([d], true) => (d, None),
            ([d, f], false) => (d, Some(f)),
            _ => bail!(
                "entry {} is not in one store directory: not a below snapshot",
                name.display()
            ),
        };
        match &top {
            Some(t) if t.as_os_str() != dir => bail!(
                "more than one top-level directory ({} and {}): not a below snapshot",
                t.display(),
                dir.to_string_lossy()
            ),
            Some(_) => {}
            None => {
                private::create_dir_all(&into.join(dir))?;
                top = Some(PathBuf::from(dir));
            }
        }
        let Some(file_name) = file_name else {
            continue;
        };
        let size = entry.size();
        bytes = bytes.saturating_add(size);
        if bytes > limits.bytes {
            bail!("more than {} bytes", limits.bytes);
        }
        let dest = into.join(dir).join(file_name);
        let mut out =
            private::open_no_follow(&dest, private::file_options().write(true).create_new(true))
                .with_context(|| format!("entry {}", name.display()))?;
        // At most what the header says, and only what the tar holds.
        let copied = std::io::copy(&mut (&mut entry).take(size), &mut out)
            .with_context(|| format!("Failed to write {}", dest.display()))?;
        if copied != size {
            bail!("entry {} is cut short", name.display());
        }
    }
    match top {
        Some(t) => Ok(into.join(t)),
        None => bail!("no store directory in the tar: not a below snapshot"),
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::test_support::crafted_tar;
    use crate::test_support::Crafted;

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

    fn refused(path: &Path, limits: Limits) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let e = open_in(path, limits, tmp.path()).err().expect("refused");
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        format!("{e:#}")
    }

    /// Links (`store` itself, or an index linking to a FIFO), FIFOs,
    /// devices, sparse files, paths out of the tar and nested directories
    /// are refused with the entry's name; so is a tar over its limits.
    #[test]
    fn hostile_snapshots_are_refused() {
        use tar::EntryType as T;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("snap");
        let dir: Crafted = ("store/", T::Directory, 0o755, b"");
        let file = |name| -> Crafted { (name, T::Regular, 0o644, b"x") };
        let index = "store/index_00000000000";
        let cases: &[(&[Crafted], &str)] = &[
            (
                &[("store", T::Symlink, 0o777, b"")],
                "entry store is not a regular file",
            ),
            (
                &[dir, (index, T::Symlink, 0o777, b"")],
                "entry store/index_00000000000 is not a regular file",
            ),
            (&[dir, (index, T::Fifo, 0o644, b"")], "(Fifo)"),
            (&[("store/data_1", T::Char, 0o644, b"")], "(Char)"),
            (
                &[("store/index_1", T::GNUSparse, 0o644, &[1; 512])],
                "(GNUSparse)",
            ),
            (&[("store/hard", T::Link, 0o644, b"")], "(Link)"),
            (&[file("../store/x")], "leaves the snapshot"),
            (&[file("/store/x")], "leaves the snapshot"),
            (&[file("store/a/b")], "not in one store directory"),
            (&[file("x")], "not in one store directory"),
            (
                &[file("a/x"), file("b/x")],
                "more than one top-level directory",
            ),
            (
                &[file("store/x"), ("store/x", T::Regular, 0o644, b"y")],
                "entry store/x",
            ),
            (&[], "no store directory"),
        ];
        for (entries, want) in cases {
            crafted_tar(&p, entries, Path::new("/etc"));
            let e = refused(&p, Limits::default());
            assert!(e.contains(want), "{entries:?}: {e}");
        }
        let four: &[Crafted] = &[
            ("store/a", T::Regular, 0o644, b"0123"),
            ("store/b", T::Regular, 0o644, b"0123"),
        ];
        crafted_tar(&p, four, Path::new("/etc"));
        for (entries, bytes, want) in [
            (1, 100, "more than 1 entries"),
            (10, 7, "more than 7 bytes"),
        ] {
            let e = refused(&p, Limits { entries, bytes });
            assert!(e.contains(want), "{e}");
        }
        assert!(open_with(
            &p,
            Limits {
                entries: 2,
                bytes: 8
            }
        )
        .is_ok());
    }

    /// A tar of 0777 entries unpacks to 0700/0600.
    #[test]
    fn modes_of_the_tar_are_not_kept() {
        use crate::private::test_util::*;
        use tar::EntryType as T;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("snap");
        crafted_tar(
            &p,
            &[
                ("store/", T::Directory, 0o777, b""),
                ("store/index_1", T::Regular, 0o777, b""),
                ("store/data_1", T::Regular, 0o4777, b"x"),
            ],
            Path::new("/etc"),
        );
        let u = open(&p).unwrap();
        assert_private(u.store_dir().parent().unwrap());
        assert_eq!(std::fs::read(u.store_dir().join("data_1")).unwrap(), b"x");
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
