//! Thin glue over below-store: writing samples with below's retention and
//! size limits, and a record of which backend served each cgroup file.
//!
//! below's store format has no room for collector metadata, so the backend
//! plan of each `record` run goes in a side file in the store directory
//! (below's retention only removes `index_*`/`data_*` files).

use std::fs::File;
use std::fs::OpenOptions;
use std::io::BufRead;
use std::io::BufReader;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use bpf_stats::Plan;
use serde::Deserialize;
use serde::Serialize;
use slog::warn;
use store::CompressionMode;
use store::DataFrame;
use store::StoreWriter;

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

pub struct Recorder {
    logger: slog::Logger,
    writer: StoreWriter,
    retention: Option<Duration>,
    size_limit: Option<u64>,
}

impl Recorder {
    pub fn new(
        logger: slog::Logger,
        dir: &Path,
        mode: CompressionMode,
        retention: Option<Duration>,
        size_limit: Option<u64>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("Failed to create store directory {}", dir.display()))?;
        let writer = StoreWriter::new(logger.clone(), dir, mode, store::Format::Cbor)
            .with_context(|| format!("Failed to open store {}", dir.display()))?;
        Ok(Recorder {
            logger,
            writer,
            retention,
            size_limit,
        })
    }

    /// Appends a sample, then applies retention and the size limit. (The
    /// frame is borrowed so a caller can time dropping it on its own.)
    pub fn put(&mut self, timestamp: SystemTime, frame: &DataFrame) -> Result<()> {
        self.writer
            .put(timestamp, frame)
            .context("Failed to write sample to the store")?;
        if let Some(r) = self.retention {
            if let Some(t) = timestamp.checked_sub(r) {
                self.writer.discard_earlier(t)?;
            }
        }
        if let Some(limit) = self.size_limit {
            if !self.writer.try_discard_until_size(limit)? {
                warn!(
                    self.logger,
                    "Store is larger than --store-size-limit {} even after discarding all older shards",
                    limit
                );
            }
        }
        Ok(())
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
}

pub fn append_backend_record(dir: &Path, rec: &BackendRecord) -> Result<()> {
    let path = dir.join(BACKENDS_FILE);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("Failed to open {}", path.display()))?;
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    f.write_all(&line)
        .with_context(|| format!("Failed to write {}", path.display()))
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
    use bpf_stats::BackendChoice;

    use super::*;

    fn plan() -> Plan {
        Plan::choose(BackendChoice::Read, &Err("x".into()), &Err("y".into())).unwrap()
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
        r.put(
            t,
            &DataFrame {
                sample: sample.clone(),
            },
        )
        .unwrap();
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
}
