//! Snapshots in below's format: a tar holding one directory, `store/`, that
//! is a below store (index/data shards, zstd-dictionary compressed) with the
//! frames of a time range. `replay`/`dump --snapshot` read it as a store.

use std::fs::File;
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
use store::StoreWriter;
use tempfile::TempDir;

/// below's snapshot compression: zstd with a dictionary per 16 frames.
pub const SNAPSHOT_COMPRESSION: CompressionMode = CompressionMode::ZstdDictionary(ChunkSizePo2(4));

/// The directory name inside the tar.
const STORE_IN_TAR: &str = "store";

/// Copies the frames with `begin <= t <= end` from `from` to a store at
/// `to` written with `mode`; returns how many.
pub fn copy_frames(
    logger: &slog::Logger,
    from: &mut dyn Store<SampleType = store::DataFrame>,
    to: &Path,
    mode: CompressionMode,
    begin: SystemTime,
    end: SystemTime,
) -> Result<u64> {
    let mut writer = StoreWriter::new(logger.clone(), to, mode, store::Format::Cbor)
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

/// The file name below gives a snapshot when no output is named.
pub fn default_name(begin: SystemTime, end: SystemTime) -> String {
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    };
    format!("snapshot_{:011}_{:011}", secs(begin), secs(end))
}

/// Writes a snapshot of `store_dir`'s frames in `[begin, end]` to `output`;
/// returns the number of frames. Fails, writing nothing, if there are none.
pub fn create(
    logger: &slog::Logger,
    store_dir: &Path,
    begin: SystemTime,
    end: SystemTime,
    output: &Path,
) -> Result<u64> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{}.", default_name(begin, end)))
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
    let file = File::create(output)
        .with_context(|| format!("Failed to create snapshot file {}", output.display()))?;
    let mut tar = tar::Builder::new(file);
    let written = tar
        .append_dir_all(STORE_IN_TAR, tmp.path())
        .and_then(|()| tar.into_inner()?.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(output);
        return Err(e)
            .with_context(|| format!("Failed to write snapshot file {}", output.display()));
    }
    Ok(n)
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
        .tempdir()
        .context("Failed to create a temporary directory for the snapshot")?;
    tar::Archive::new(file)
        .unpack(tmp.path())
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
            StoreWriter::new(logger(), dir, CompressionMode::None, store::Format::Cbor).unwrap();
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
        let n = create(&logger(), &store, at(base - 5), at(base + 8), &out).unwrap();
        assert_eq!(n, 3);
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
        let e = create(&logger(), &store, at(2000), at(3000), &out).unwrap_err();
        assert!(format!("{:#}", e).contains("No samples"), "{:#}", e);
        assert!(!out.exists());
        std::fs::write(&out, b"not a tar").unwrap();
        assert!(open(&out).is_err());
        let e = open(&d.path().join("missing")).err().unwrap();
        assert!(format!("{:#}", e).contains("Failed to open snapshot file"));
    }
}
