//! What below's view and dump read. Both take a store directory and read
//! it with below-store's cursor, which a hostile store crashes or hangs,
//! and they print names as they are. So `replay` and `dump` read history
//! through our reader (`reader.rs`: hostile files and entries skipped,
//! every string escaped for the terminal) and write what it reads, with
//! our writer, to a private temporary store that below's code then reads:
//! it only ever reads what we wrote.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::Context;
use anyhow::Result;
use store::CompressionMode;
use store::Direction;
use store::Store;

use crate::reader::SafeStore;
use crate::snapshot::copy_frames;
use crate::tmp::TempDir;

/// A rewritten store, removed on drop (and however the process ends).
pub struct Clean {
    _tmp: TempDir,
    dir: PathBuf,
    frames: u64,
}

impl Clean {
    pub fn store_dir(&self) -> &Path {
        &self.dir
    }

    pub fn frames(&self) -> u64 {
        self.frames
    }
}

/// Rewrites the samples of `from` in `[begin, end]`, and the one before
/// `begin` (below's dump and view take rates against the previous
/// sample), into a temporary store.
pub fn rewrite(
    logger: &slog::Logger,
    from: &Path,
    begin: SystemTime,
    end: SystemTime,
) -> Result<Clean> {
    let mut src = SafeStore::new(logger.clone(), from.to_path_buf(), true);
    let start = begin
        .checked_sub(Duration::from_secs(1))
        .and_then(|t| {
            src.get_sample_at_timestamp(t, Direction::Reverse)
                .transpose()
        })
        .transpose()?
        .map_or(begin, |(t, _)| t);
    let tmp = crate::tmp::private_tempdir("below_history.")
        .context("Failed to create a temporary directory for history")?;
    let dir = tmp.path().join("store");
    // zstd without dictionaries: much faster to write than below's
    // snapshot mode, and a fraction of the uncompressed size in $TMPDIR.
    let frames = copy_frames(logger, &mut src, &dir, CompressionMode::Zstd, start, end)
        .with_context(|| format!("Failed to read history from {}", from.display()))?;
    Ok(Clean {
        _tmp: tmp,
        dir,
        frames,
    })
}

/// [`rewrite`] of `[begin, end]`, then, in the background while below's
/// view reads the result, of what follows up to `more`: below-store's
/// cursor sees frames appended to a shard it reads. (Frames are only ever
/// appended: history before `begin` cannot be added later.)
pub fn rewrite_and_follow(
    logger: &slog::Logger,
    from: &Path,
    begin: SystemTime,
    end: SystemTime,
    more: SystemTime,
    background_logger: slog::Logger,
) -> Result<Clean> {
    let clean = rewrite(logger, from, begin, end)?;
    let (from, dir) = (from.to_path_buf(), clean.dir.clone());
    std::thread::Builder::new()
        .name("history_rewrite".into())
        .spawn(move || {
            let l = background_logger;
            let mut src = SafeStore::new(l.clone(), from, true);
            let next = end + Duration::from_secs(1);
            if let Err(e) = copy_frames(&l, &mut src, &dir, CompressionMode::Zstd, next, more) {
                slog::warn!(l, "History after the first part not read: {:#}", e);
            }
        })
        .context("Failed to start reading history in the background")?;
    Ok(clean)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::writer::Writer;

    fn logger() -> slog::Logger {
        slog::Logger::root(slog::Discard, slog::o!())
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    /// The range and the sample before it, names escaped; below-store's own
    /// reader reads the result.
    #[test]
    fn rewrites_the_range_escaped() {
        let d = tempfile::tempdir().unwrap();
        let base = 86400 * 20000;
        let mut w = Writer::new(logger(), d.path(), CompressionMode::Zstd, at(base)).unwrap();
        for s in [1, 5, 6, 9] {
            let mut sample = model::Sample::default();
            let c = model::CgroupSample {
                memory_current: Some(s),
                ..Default::default()
            };
            sample.cgroup.children = Some([("x\x1b[2J".to_string(), c)].into());
            w.put(at(base + s as u64), &sample).unwrap();
        }
        let c = rewrite(&logger(), d.path(), at(base + 5), at(base + 6)).unwrap();
        assert_eq!(c.frames(), 3, "5, 6 and the sample before them (1)");
        let mut t = at(0);
        let mut got = vec![];
        while let Some((ts, f)) =
            store::read_next_sample(c.store_dir(), t, Direction::Forward, logger()).unwrap()
        {
            let (name, child) = f.sample.cgroup.children.unwrap().pop_first().unwrap();
            got.push((ts, name, child.memory_current));
            t = ts + Duration::from_secs(1);
        }
        let want: Vec<_> = [1, 5, 6]
            .iter()
            .map(|s| (at(base + s), "x\\x1b[2J".to_string(), Some(*s as i64)))
            .collect();
        assert_eq!(got, want);
        let tmp = c.store_dir().parent().unwrap().to_path_buf();
        drop(c);
        assert!(!tmp.exists());
    }
}
