//! Writing samples in below-store's format (our writer, `writer.rs`) with
//! below's retention and size limits, and a record of which backend served
//! each cgroup file.
//!
//! below's store format has no room for collector metadata, so the backend
//! plan of each `record` run goes in a side file in the store directory
//! (below's retention only removes `index_*`/`data_*` files).

use std::fs::File;
use std::io::BufRead;
use std::io::BufReader;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use bstats_collector::Plan;
use model::Sample;
use serde::de::IntoDeserializer;
use serde::Deserialize;
use serde::Serialize;
use slog::info;
use slog::warn;
use store::CompressionMode;

pub mod clean;
pub mod escape;
mod failures;
pub mod private;
pub mod reader;
pub mod snapshot;
mod sync;
#[doc(hidden)]
pub mod test_support;
pub mod tmp;
mod writer;

use sync::Syncer;
use writer::Writer;

pub use sync::StoreSync;
/// The checksum of index entries and frames (for tests that craft stores).
pub use writer::crc32;

pub use failures::FailureKind;
pub use failures::FailureLog;

/// Name of the side file holding one [`BackendRecord`] per line.
pub const BACKENDS_FILE: &str = "cgroup_backends.jsonl";

/// below's `--compress` / `--dict-compress-chunk-size` (frames per
/// dictionary chunk: a power of two from 2 to 32768).
pub fn compression_mode(compress: bool, dict_chunk: Option<u32>) -> Result<CompressionMode> {
    match (compress, dict_chunk) {
        (false, _) => Ok(CompressionMode::None),
        (true, None) => Ok(CompressionMode::Zstd),
        (true, Some(k)) => {
            if k < 2 || !k.is_power_of_two() || k > store::MAX_CHUNK_COMPRESS_SIZE {
                bail!(
                    "--dict-compress-chunk-size must be a power of two from 2 to {}",
                    store::MAX_CHUNK_COMPRESS_SIZE
                );
            }
            Ok(CompressionMode::ZstdDictionary(store::ChunkSizePo2(
                k.trailing_zeros(),
            )))
        }
    }
}

/// Writes samples like below's `record`: a failed write is logged (see
/// [`FailureLog`]) and recording goes on; the next sample reopens the store
/// (recreating a vanished directory), so samples land again as soon as the
/// store can be written. Retention and the size limit run after every
/// sample, written or not: dropping old shards may be what frees the space.
pub struct Recorder {
    logger: slog::Logger,
    dir: PathBuf,
    mode: CompressionMode,
    writer: Option<Writer>,
    /// Makes written samples durable off the sampling thread (none with
    /// `StoreSync::None`).
    syncer: Option<Arc<Syncer>>,
    /// Device and inode of `dir` when `writer` was opened.
    dir_id: (u64, u64),
    /// The last write failed: reopen before the next one (fresh file
    /// lengths and compressor state, as after a restart).
    stale: bool,
    retention: Option<Duration>,
    size_limit: Option<u64>,
    /// The current shard alone exceeds the size limit (warned once).
    over_size_limit: bool,
    write_failures: FailureLog,
    cleanup_failures: FailureLog,
}

impl Recorder {
    /// Fails if the store cannot be opened at all (e.g. another `record`
    /// holds it): at start that is fatal, as in below. Each sample is
    /// made durable ([`StoreSync::Sample`]); see [`Recorder::with_sync`].
    pub fn new(
        logger: slog::Logger,
        dir: &Path,
        mode: CompressionMode,
        retention: Option<Duration>,
        size_limit: Option<u64>,
    ) -> Result<Self> {
        Self::with_sync(logger, dir, mode, retention, size_limit, StoreSync::Sample)
    }

    /// [`Recorder::new`] with a durability policy.
    pub fn with_sync(
        logger: slog::Logger,
        dir: &Path,
        mode: CompressionMode,
        retention: Option<Duration>,
        size_limit: Option<u64>,
        sync: StoreSync,
    ) -> Result<Self> {
        let syncer = match sync {
            StoreSync::Sample => Some(Arc::new(Syncer::start(logger.clone(), None)?)),
            StoreSync::Interval(d) => Some(Arc::new(Syncer::start(logger.clone(), Some(d))?)),
            StoreSync::None => None,
        };
        let (writer, dir_id) = open_writer(&logger, dir, mode, syncer.clone())?;
        // Once: a directory recreated later is ours and 0700.
        tighten_store_dir(&logger, dir);
        Ok(Recorder {
            logger,
            dir: dir.to_path_buf(),
            mode,
            writer: Some(writer),
            syncer,
            dir_id,
            stale: false,
            retention,
            size_limit,
            over_size_limit: false,
            write_failures: FailureLog::new("Store write"),
            cleanup_failures: FailureLog::new("Store cleanup (retention, size limit)"),
        })
    }

    /// Appends a sample, then applies retention and the size limit. A
    /// failed write is logged here (the first of a kind, then a count, as
    /// [`FailureLog`] does) and returned.
    pub fn put(&mut self, timestamp: SystemTime, sample: &Sample) -> Result<()> {
        let written = match self.write(timestamp, sample) {
            Ok(()) => {
                self.write_failures.succeed(&self.logger);
                Ok(())
            }
            Err((kind, e)) => {
                self.stale = true;
                self.write_failures.fail(&self.logger, kind, &e);
                Err(e)
            }
        };
        match self.cleanup(timestamp) {
            Ok(()) => self.cleanup_failures.succeed(&self.logger),
            Err(e) => self
                .cleanup_failures
                .fail(&self.logger, FailureKind::of(&e), &e),
        }
        written
    }

    fn write(
        &mut self,
        timestamp: SystemTime,
        sample: &Sample,
    ) -> std::result::Result<(), (FailureKind, anyhow::Error)> {
        let classify = |e: anyhow::Error| (FailureKind::of(&e), e);
        if self.writer.is_some() && dir_id(&self.dir).ok() != Some(self.dir_id) {
            // Writes would go on "succeeding" into unlinked files: count it
            // and write this sample to a recreated directory.
            self.writer = None;
            let e = anyhow!(
                "Store directory {} was removed or replaced; recreating it",
                self.dir.display()
            );
            self.write_failures
                .fail(&self.logger, FailureKind::Vanished, &e);
        }
        if self.stale || self.writer.is_none() {
            // Drop first, and let the syncer finish with the old files:
            // the new writer takes the same flocks.
            self.writer = None;
            self.wait_durable();
            let (w, id) = open_writer(&self.logger, &self.dir, self.mode, self.syncer.clone())
                .map_err(classify)?;
            self.writer = Some(w);
            self.dir_id = id;
            self.stale = false;
        }
        let w = self.writer.as_mut().expect("opened above");
        w.put(timestamp, sample)
            .context("Failed to write sample to the store")
            .map_err(classify)?;
        Ok(())
    }

    /// Waits until every sample written so far is durable (or its sync
    /// failed, which the next `put` reports).
    pub fn wait_durable(&self) {
        if let Some(s) = &self.syncer {
            s.drain();
        }
    }

    fn cleanup(&mut self, timestamp: SystemTime) -> Result<()> {
        let Some(w) = &self.writer else {
            return Ok(());
        };
        if let Some(r) = self.retention {
            if let Some(t) = timestamp.checked_sub(r) {
                w.discard_earlier(t)?;
            }
        }
        if let Some(limit) = self.size_limit {
            let fits = w.try_discard_until_size(limit)?;
            if !fits && !self.over_size_limit {
                warn!(
                    self.logger,
                    "Store is larger than --store-size-limit {} even after discarding all older shards (the current shard is never discarded)",
                    limit
                );
            }
            self.over_size_limit = !fits;
        }
        Ok(())
    }
}

fn dir_id(dir: &Path) -> std::io::Result<(u64, u64)> {
    let m = std::fs::metadata(dir)?;
    Ok((m.dev(), m.ino()))
}

fn open_writer(
    logger: &slog::Logger,
    dir: &Path,
    mode: CompressionMode,
    syncer: Option<Arc<Syncer>>,
) -> Result<(Writer, (u64, u64))> {
    private::create_dir_all(dir)?;
    let id = dir_id(dir).with_context(|| format!("Failed to stat {}", dir.display()))?;
    let writer = Writer::with_syncer(logger.clone(), dir, mode, SystemTime::now(), syncer)
        .with_context(|| format!("Failed to open store {}", dir.display()))?;
    Ok((writer, id))
}

/// A store recorded before its files were private (or a directory made by
/// hand) may be open to others: its directory is ours to close, which
/// closes the files in it. Not fatal: a store we do not own can still be
/// recorded to, as before.
fn tighten_store_dir(logger: &slog::Logger, dir: &Path) {
    let tightened = File::open(dir)
        .with_context(|| format!("Failed to open {}", dir.display()))
        .and_then(|d| private::tighten(&d, dir));
    match tightened {
        Ok(true) => info!(
            logger,
            "Store directory {} was open to other users: now 0700",
            dir.display()
        ),
        Ok(false) => {}
        Err(e) => warn!(
            logger,
            "Store directory {} is open to other users: {:#}",
            dir.display(),
            e
        ),
    }
}

/// Which backend served each cgroup file during one `record` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendRecord {
    /// Seconds since the epoch when recording started.
    pub since: u64,
    pub kernel: String,
    pub cgroup_root: PathBuf,
    pub plan: Plan,
    /// The process backend and why; absent in older records.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "process_plan"
    )]
    pub processes: Option<bstats_procs::Plan>,
}

/// A recorded process plan: an object, or in records written before it
/// was one, its display line ("bpf: why").
fn process_plan<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<bstats_procs::Plan>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Recorded {
        Plan(bstats_procs::Plan),
        Line(String),
    }
    let line = match Option::<Recorded>::deserialize(d)? {
        None => return Ok(None),
        Some(Recorded::Plan(p)) => return Ok(Some(p)),
        Some(Recorded::Line(l)) => l,
    };
    let (backend, reason) = line
        .split_once(": ")
        .ok_or_else(|| serde::de::Error::custom(format!("process plan {line:?}")))?;
    Ok(Some(bstats_procs::Plan {
        backend: bstats_procs::ProcessBackend::deserialize(backend.into_deserializer())?,
        reason: reason.to_owned(),
    }))
}

pub fn append_backend_record(dir: &Path, rec: &BackendRecord) -> Result<()> {
    let path = dir.join(BACKENDS_FILE);
    let mut f = private::file_options()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("Failed to open {}", path.display()))?;
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    f.write_all(&line)
        .with_context(|| format!("Failed to write {}", path.display()))?;
    // Once per record run: the plan of the samples a power cut leaves.
    f.sync_data()
        .with_context(|| format!("Failed to sync {}", path.display()))
}

/// All records of a store, oldest first. A store recorded by upstream
/// below has none.
pub fn read_backend_records(dir: &Path) -> Result<Vec<BackendRecord>> {
    let path = dir.join(BACKENDS_FILE);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("Failed to open {}", path.display())),
    };
    BufReader::new(f)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .map(|(i, l)| {
            let l = l.with_context(|| format!("Failed to read {}", path.display()))?;
            serde_json::from_str(&l)
                .with_context(|| format!("{}:{}: malformed record", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod test {
    use bstats_collector::BackendChoice;

    use super::*;

    fn plan() -> Plan {
        let why = bstats_collector::NotServed::NotAskedFor;
        Plan::choose(BackendChoice::Read, &Err(why.clone()), &Err(why)).unwrap()
    }

    #[test]
    fn backend_records_round_trip() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_backend_records(d.path()).unwrap().is_empty());
        let rec = BackendRecord {
            since: 1,
            kernel: "7.3.4".into(),
            cgroup_root: "/sys/fs/cgroup".into(),
            plan: plan(),
            processes: Some(bstats_procs::Plan {
                backend: bstats_procs::ProcessBackend::Bpf,
                reason: "task iterator".into(),
            }),
        };
        append_backend_record(d.path(), &rec).unwrap();
        append_backend_record(
            d.path(),
            &BackendRecord {
                since: 2,
                ..rec.clone()
            },
        )
        .unwrap();
        let got = read_backend_records(d.path()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], rec);
        assert_eq!(got[1].since, 2);
        let line = std::fs::read_to_string(d.path().join(BACKENDS_FILE)).unwrap();
        assert!(
            line.contains(r#""processes":{"backend":"bpf","reason":"task iterator"}"#),
            "{line}"
        );
    }

    #[test]
    fn process_plan_of_older_records() {
        let d = tempfile::tempdir().unwrap();
        let mut v = serde_json::to_value(BackendRecord {
            since: 1,
            kernel: "6.1".into(),
            cgroup_root: "/sys/fs/cgroup".into(),
            plan: plan(),
            processes: None,
        })
        .unwrap();
        let mut lines = serde_json::to_string(&v).unwrap() + "\n";
        v["processes"] = "procfs: kernel lacks task_struct.__state: x".into();
        lines += &(serde_json::to_string(&v).unwrap() + "\n");
        std::fs::write(d.path().join(BACKENDS_FILE), &lines).unwrap();
        let got = read_backend_records(d.path()).unwrap();
        assert_eq!(got[0].processes, None);
        let p = got[1].processes.as_ref().unwrap();
        assert_eq!(p.backend, bstats_procs::ProcessBackend::Procfs);
        assert_eq!(p.reason, "kernel lacks task_struct.__state: x");
        v["processes"] = "what".into();
        std::fs::write(
            d.path().join(BACKENDS_FILE),
            serde_json::to_string(&v).unwrap(),
        )
        .unwrap();
        assert!(read_backend_records(d.path()).is_err());
    }

    #[test]
    fn malformed_record_names_the_line() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(BACKENDS_FILE), "{}\n").unwrap();
        let e = read_backend_records(d.path()).unwrap_err();
        assert!(format!("{:#}", e).contains(":1: malformed"), "{:#}", e);
    }

    #[test]
    fn writes_readable_samples() {
        let d = tempfile::tempdir().unwrap();
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mode = compression_mode(true, Some(16)).unwrap();
        let mut r = Recorder::new(logger.clone(), d.path(), mode, None, None).unwrap();
        let mut sample = model::Sample::default();
        sample.cgroup.memory_current = Some(42);
        let t = SystemTime::now();
        r.put(t, &sample.clone()).unwrap();
        r.wait_durable();
        let (_, frame) = store::read_next_sample(
            d.path(),
            t - Duration::from_secs(5),
            store::Direction::Forward,
            logger,
        )
        .unwrap()
        .expect("a sample");
        assert_eq!(frame.sample.cgroup.memory_current, Some(42));
        assert!(compression_mode(true, Some(3)).is_err());
        assert!(compression_mode(true, Some(1)).is_err());
    }

    /// An index entry is written only once its frame is durable: with a
    /// sync every hour nothing is indexed yet; a recorder that stops
    /// syncs what it wrote, and every sample reads back.
    #[test]
    fn entries_are_indexed_after_their_sync() {
        let d = tempfile::tempdir().unwrap();
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let hour = StoreSync::Interval(Duration::from_secs(3600));
        let mode = CompressionMode::Zstd;
        let mut r = Recorder::with_sync(logger.clone(), d.path(), mode, None, None, hour).unwrap();
        let t0 = SystemTime::now();
        for i in 0..3 {
            r.put(t0 + Duration::from_secs(i), &model::Sample::default())
                .unwrap();
        }
        let index_bytes = || -> u64 {
            std::fs::read_dir(d.path())
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("index_"))
                .map(|e| e.metadata().unwrap().len())
                .sum()
        };
        let data_bytes: u64 = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("data_"))
            .map(|e| e.metadata().unwrap().len())
            .sum();
        assert!(data_bytes > 0);
        assert_eq!(index_bytes(), 0, "indexed before the sync");
        drop(r);
        assert_eq!(index_bytes(), 3 * 32);
        let mut t = t0;
        for _ in 0..3 {
            let (ts, _) =
                store::read_next_sample(d.path(), t, store::Direction::Forward, logger.clone())
                    .unwrap()
                    .expect("a sample");
            t = ts + Duration::from_secs(1);
        }
    }

    /// A sync that fails (here: the index grew behind the writer's back,
    /// with a torn entry) fails the next write; the one after reopens the
    /// shard, cuts the torn entry and lands.
    #[test]
    fn a_failed_sync_fails_the_next_write_then_recording_goes_on() {
        let d = tempfile::tempdir().unwrap();
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let hour = StoreSync::Interval(Duration::from_secs(3600));
        let mode = CompressionMode::None;
        let mut r = Recorder::with_sync(logger.clone(), d.path(), mode, None, None, hour).unwrap();
        let t0 = SystemTime::now();
        r.put(t0, &model::Sample::default()).unwrap();
        let index = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("index_"))
            .unwrap()
            .path();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&index)
            .unwrap()
            .write_all(&[0xff; 32])
            .unwrap();
        r.wait_durable();
        assert!(r
            .put(t0 + Duration::from_secs(1), &model::Sample::default())
            .is_err());
        let mut sample = model::Sample::default();
        sample.cgroup.memory_current = Some(9);
        r.put(t0 + Duration::from_secs(2), &sample).unwrap();
        r.wait_durable();
        assert_eq!(
            std::fs::metadata(&index).unwrap().len(),
            32,
            "torn entry cut"
        );
        let (_, f) = store::read_next_sample(d.path(), t0, store::Direction::Forward, logger)
            .unwrap()
            .expect("the sample after the failure");
        assert_eq!(f.sample.cgroup.memory_current, Some(9));
    }

    #[test]
    fn samples_land_in_a_recreated_store_directory() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("store");
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut r = Recorder::new(logger.clone(), &dir, CompressionMode::Zstd, None, None).unwrap();
        let t0 = SystemTime::now();
        r.put(t0, &model::Sample::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let mut sample = model::Sample::default();
        sample.cgroup.memory_current = Some(7);
        r.put(t0 + Duration::from_secs(1), &sample).unwrap();
        r.wait_durable();
        let (_, frame) = store::read_next_sample(&dir, t0, store::Direction::Forward, logger)
            .unwrap()
            .expect("the sample after the removal");
        assert_eq!(frame.sample.cgroup.memory_current, Some(7));
    }

    /// A new store, its side file and its missing parents: 0700 and 0600
    /// under the usual umask; the existing parent keeps its mode.
    #[test]
    fn store_is_private() {
        use private::test_util::*;
        use std::os::unix::fs::PermissionsExt;
        usual_umask();
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = d.path().join("log/store");
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut r = Recorder::new(logger, &dir, CompressionMode::Zstd, None, None).unwrap();
        r.put(SystemTime::now(), &model::Sample::default()).unwrap();
        append_backend_record(
            &dir,
            &BackendRecord {
                since: 1,
                kernel: "7.3.4".into(),
                cgroup_root: "/sys/fs/cgroup".into(),
                plan: plan(),
                processes: None,
            },
        )
        .unwrap();
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for want in ["index_", "data_", BACKENDS_FILE] {
            assert!(names.iter().any(|n| n.starts_with(want)), "{names:?}");
        }
        assert_private(&d.path().join("log"));
        assert_eq!(mode(d.path()), 0o755);
    }

    /// A store recorded before files were private: its directory is closed
    /// (which closes its files) when recording starts.
    #[test]
    fn an_open_store_directory_is_closed() {
        use private::test_util::*;
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("store");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        Recorder::new(logger, &dir, CompressionMode::None, None, None).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    fn shards(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("index_"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn retention_and_size_limit_drop_old_shards() {
        let d = tempfile::tempdir().unwrap();
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let day = Duration::from_secs(86400);
        // Days ahead: the writer also opens today's shard, which must be the
        // oldest.
        let t0 = SystemTime::now() + day;
        let shard = |i: u32| {
            let secs = (t0 + day * i)
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            format!("index_{:011}", secs - secs % 86400)
        };
        let dir = d.path().join("retention");
        let mut r =
            Recorder::new(logger.clone(), &dir, CompressionMode::None, Some(day), None).unwrap();
        for i in 0..4 {
            r.put(t0 + day * i, &model::Sample::default()).unwrap();
        }
        // At day 3, day 2's shard still holds samples newer than a day ago.
        assert_eq!(shards(&dir), [shard(2), shard(3)]);

        let dir = d.path().join("size");
        let mut r = Recorder::new(logger, &dir, CompressionMode::None, None, Some(1)).unwrap();
        for i in 0..3 {
            r.put(t0 + day * i, &model::Sample::default()).unwrap();
        }
        assert_eq!(shards(&dir), [shard(2)], "only the active shard");
        assert!(r.over_size_limit);
    }
}
