//! Our writer of below's store format, byte for byte what below-store
//! 0.9's `StoreWriter` writes (the tests compare the files), with one
//! change: the CRC-32 of each frame is computed eight bytes at a time.
//! below-store's byte-at-a-time table loop was 40-50 % of a `put` (the
//! serialization the rest); the checksum's value is the same, so below
//! 0.9's and below main's readers read these stores unchanged.
//! Another difference, not in the bytes: the files are 0600 and a
//! directory it creates 0700 (see `private`), where below-store's follow
//! the umask.
//!
//! The format (facts of below-store 0.9): one `index_<shard>` and one
//! `data_<shard>` file per day (`shard` = the UTC day's first second, 11
//! digits), both append-only and exclusively flocked by their writer. A
//! frame is the CBOR of a `DataFrame`, zstd-compressed with `--compress`
//! (with dictionary chunks: the first frame of each chunk of 2^k index
//! entries is the dictionary of the rest, the index padded with zeroed
//! entries to a chunk boundary when a chunk starts afresh). Each frame
//! gets a 32-byte index entry: timestamp u64, data offset u64, length
//! u32, flags u32 (0x1 compressed, 0x2 CBOR, the chunk's k in bits 2-5),
//! the frame's CRC-32 u32 and the CRC-32 of the entry's first 28 bytes
//! u32, native-endian. The CRC is the IEEE polynomial (reflected
//! 0xEDB88320) from 0xFFFFFFFF without the final inversion.

use std::fs::DirBuilder;
use std::fs::File;
use std::io::ErrorKind;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::Context;
use anyhow::Result;
use model::Sample;
use serde::Serialize;
use slog::info;
use slog::warn;
use store::compression::Compressor;
use store::CompressionMode;

use crate::sync::Pending;
use crate::sync::Syncer;

const SHARD_SECS: u64 = 24 * 60 * 60;
const ENTRY: u64 = 32;
const ENTRY_PO2: u32 = 5;
const COMPRESSED: u32 = 0x1;
const CBOR: u32 = 0x2;
const CHUNK_SHIFT: u32 = 2;

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn shard_of(t: SystemTime) -> u64 {
    let s = secs(t);
    s - s % SHARD_SECS
}

/// CRC-32 tables for slicing by 8: `T[0]` is the byte-at-a-time table,
/// `T[k][b]` the CRC of byte `b` followed by `k` zero bytes.
const TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut i = 0;
        while i < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            i += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            b += 1;
        }
        k += 1;
    }
    t
};

/// below-store's checksum (see the module comment), 8 bytes a step.
pub fn crc32(data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut crc = 0xFFFF_FFFFu32;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = t[7][(lo & 0xFF) as usize]
            ^ t[6][((lo >> 8) & 0xFF) as usize]
            ^ t[5][((lo >> 16) & 0xFF) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xFF) as usize]
            ^ t[2][((hi >> 8) & 0xFF) as usize]
            ^ t[1][((hi >> 16) & 0xFF) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ b as u32) & 0xFF) as usize];
    }
    crc
}

/// below's `DataFrame` of a borrowed sample: its CBOR is the same bytes
/// (one field, `sample`), with no copy of the sample to own one.
#[derive(Serialize)]
struct Frame<'a> {
    sample: &'a Sample,
}

/// Appends frames to the current day's shard of one store directory.
pub struct Writer {
    logger: slog::Logger,
    dir: PathBuf,
    mode: CompressionMode,
    shard: u64,
    index: Arc<File>,
    data: Arc<File>,
    /// The index's length with the entries still queued for the syncer.
    index_len: u64,
    data_len: u64,
    /// Appends index entries once their frames are durable; None: the
    /// index is written at once and nothing is synced.
    syncer: Option<Arc<Syncer>>,
    /// The store directory, until the first entry asks the syncer to
    /// make this shard's file names durable.
    dir_to_sync: Option<Arc<File>>,
    /// Set once a compressed frame was written; holds the chunk's
    /// dictionary. Dropped on a failed write (the next starts afresh).
    compressor: Option<Compressor>,
}

fn open_locked(path: &Path) -> Result<File> {
    let f = crate::private::file_options()
        // Read: the index's tail is checked against the data at open.
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("Failed to open {}", path.display()))?;
    // A process of ours forked between its fork and its exec holds a copy
    // of every descriptor, so a lock we just released can stay held for
    // that moment: wait for it a little before calling the shard taken.
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on an fd we own; the lock lives as long as `f`.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) || Instant::now() >= deadline {
            return Err(e)
                .with_context(|| format!("Failed to acquire file lock on {}", path.display()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long [`open_locked`] waits for a shard another holder releases.
const LOCK_WAIT: Duration = Duration::from_secs(2);

impl Writer {
    /// Opens (creating) the shard of `now` in `dir`.
    pub fn new(
        logger: slog::Logger,
        dir: &Path,
        mode: CompressionMode,
        now: SystemTime,
    ) -> Result<Writer> {
        Self::open(logger, dir, mode, shard_of(now), None)
    }

    /// [`Writer::new`] whose index entries `syncer` appends once their
    /// frames are durable (None: at once, never synced).
    pub fn with_syncer(
        logger: slog::Logger,
        dir: &Path,
        mode: CompressionMode,
        now: SystemTime,
        syncer: Option<Arc<Syncer>>,
    ) -> Result<Writer> {
        Self::open(logger, dir, mode, shard_of(now), syncer)
    }

    fn open(
        logger: slog::Logger,
        dir: &Path,
        mode: CompressionMode,
        shard: u64,
        syncer: Option<Arc<Syncer>>,
    ) -> Result<Writer> {
        if !dir.is_dir() {
            DirBuilder::new()
                .mode(crate::private::DIR_MODE)
                .create(dir)
                .with_context(|| format!("Failed to create store path: {}", dir.display()))?;
        }
        let index = open_locked(&dir.join(format!("index_{shard:011}")))?;
        let data = open_locked(&dir.join(format!("data_{shard:011}")))?;
        let cut = crate::sync::repair_tail(&index, &data)
            .with_context(|| format!("Failed to check the index of shard {shard:011}"))?;
        if cut > 0 {
            warn!(
                logger,
                "Index of shard {:011} ended in {} entries whose data never reached the disk (a crash?): removed",
                shard,
                cut / ENTRY
            );
        }
        let data_len = data.metadata()?.len();
        let index_len = index.metadata()?.len();
        let dir_to_sync = match syncer {
            Some(_) => Some(Arc::new(File::open(dir).with_context(|| {
                format!("Failed to open store directory {}", dir.display())
            })?)),
            None => None,
        };
        Ok(Writer {
            logger,
            dir: dir.to_path_buf(),
            mode,
            shard,
            index: Arc::new(index),
            data: Arc::new(data),
            index_len,
            data_len,
            syncer,
            dir_to_sync,
            compressor: None,
        })
    }

    /// Appends `sample` at `t`, in a new shard when `t` is in another day.
    pub fn put(&mut self, t: SystemTime, sample: &Sample) -> Result<()> {
        let frame = Frame { sample };
        let shard = shard_of(t);
        if shard != self.shard {
            // The old shard stays locked until the new one holds a frame.
            let mut next = Self::open(
                self.logger.clone(),
                &self.dir,
                self.mode,
                shard,
                self.syncer.clone(),
            )?;
            next.append(t, &frame)?;
            *self = next;
            return Ok(());
        }
        self.append(t, &frame)
    }

    fn append(&mut self, t: SystemTime, frame: &Frame) -> Result<()> {
        // Entries of a dictionary chunk, as a power of two (0: no chunks).
        let chunk_po2 = match self.mode {
            CompressionMode::ZstdDictionary(k) => k.0,
            _ => 0,
        };
        let chunk_bytes_po2 = if chunk_po2 > 0 {
            chunk_po2 + ENTRY_PO2
        } else {
            0
        };
        // A new chunk starts at a chunk boundary; otherwise whole entries.
        let align_po2 = if chunk_bytes_po2 > 0 && self.compressor.is_none() {
            chunk_bytes_po2
        } else {
            ENTRY_PO2
        };
        let len = match self.syncer {
            Some(_) => self.index_len,
            None => self.index.metadata()?.len(),
        };
        let mask = (1u64 << align_po2) - 1;
        let aligned = (len + mask) & !mask;
        if aligned != len {
            // With a syncer it pads, before the entry.
            if self.syncer.is_none() {
                self.index
                    .set_len(aligned)
                    .context("Failed to pad index file")?;
            }
            if align_po2 == ENTRY_PO2 {
                warn!(
                    self.logger,
                    "Index length not a multiple of fixed index entry size: {}. Padded to size: {}",
                    len,
                    aligned
                );
            } else {
                info!(
                    self.logger,
                    "Padded index so that first entry of block is aligned. Previous len: {}. New len: {}",
                    len,
                    aligned
                );
            }
        }
        let mut compressor = self.compressor.take();
        let cbor = serde_cbor::to_vec(frame).context("Failed to serialize data frame")?;
        let mut flags = CBOR;
        let bytes: Vec<u8> = match self.mode {
            CompressionMode::None => cbor,
            CompressionMode::Zstd => {
                flags |= COMPRESSED;
                compressor
                    .get_or_insert_with(Compressor::new)
                    .compress_with_dict_reset(&cbor)?
                    .to_vec()
            }
            CompressionMode::ZstdDictionary(k) => {
                flags |= COMPRESSED | (k.0 << CHUNK_SHIFT);
                let c = compressor.get_or_insert_with(Compressor::new);
                if aligned.trailing_zeros() >= chunk_bytes_po2 {
                    // The chunk's first frame: compressed alone, then its
                    // dictionary.
                    let out = c.compress_with_dict_reset(&cbor)?.to_vec();
                    c.load_dict(&cbor)?;
                    out
                } else {
                    c.compress_with_loaded_dict(&cbor)?.to_vec()
                }
            }
        };
        // A partial append may have grown the file: trust its length.
        let data_len = self.data.metadata()?.len();
        if data_len != self.data_len {
            warn!(
                self.logger,
                "Data length mismatch: {} (expect {})", data_len, self.data_len
            );
            self.data_len = data_len;
        }
        let offset = self.data_len;
        (&*self.data)
            .write_all(&bytes)
            .context("Failed to write entry to data file")?;
        self.data_len += bytes.len() as u64;
        let mut entry = [0u8; ENTRY as usize];
        entry[0..8].copy_from_slice(&secs(t).to_ne_bytes());
        entry[8..16].copy_from_slice(&offset.to_ne_bytes());
        let n = u32::try_from(bytes.len())
            .with_context(|| format!("Serialized len={} overflows u32", bytes.len()))?;
        entry[16..20].copy_from_slice(&n.to_ne_bytes());
        entry[20..24].copy_from_slice(&flags.to_ne_bytes());
        entry[24..28].copy_from_slice(&crc32(&bytes).to_ne_bytes());
        let own = crc32(&entry[..28]);
        entry[28..32].copy_from_slice(&own.to_ne_bytes());
        match &self.syncer {
            Some(s) => s.push(Pending {
                data: self.data.clone(),
                index: self.index.clone(),
                dir: self.dir_to_sync.take(),
                at: aligned,
                entry,
                t: secs(t),
            })?,
            None => (&*self.index)
                .write_all(&entry)
                .context("Failed to write entry to index file")?,
        }
        self.index_len = aligned + ENTRY;
        self.compressor = compressor;
        Ok(())
    }

    /// Removes whole shards older than `t`'s (never the current one).
    pub fn discard_earlier(&self, t: SystemTime) -> Result<()> {
        let keep_from = shard_of(t);
        self.discard_until(|shard| shard >= keep_from)?;
        Ok(())
    }

    /// Removes the oldest shards until the directory holds at most
    /// `limit` bytes; false when the current shard alone is larger.
    pub fn try_discard_until_size(&self, limit: u64) -> Result<bool> {
        self.discard_until(|_| dir_size(&self.dir) <= limit)
    }

    /// Oldest first: stops at the first shard for which `done` holds
    /// (true) or at the current shard (false); removes the ones before.
    fn discard_until(&self, done: impl Fn(u64) -> bool) -> Result<bool> {
        let mut shards: Vec<u64> = std::fs::read_dir(&self.dir)
            .with_context(|| format!("Failed to read directory {}", self.dir.display()))?
            .filter_map(|e| {
                let name = e.ok()?.file_name();
                let shard = name.to_str()?.strip_prefix("index_")?.parse().ok();
                if shard.is_none() {
                    warn!(self.logger, "Invalid index file name: {:?}", name);
                }
                shard
            })
            .collect();
        shards.sort_unstable();
        for shard in shards {
            if done(shard) {
                return Ok(true);
            }
            if shard >= self.shard {
                return Ok(false);
            }
            for kind in ["index", "data"] {
                let p = self.dir.join(format!("{kind}_{shard:011}"));
                match std::fs::remove_file(&p) {
                    Err(e) if e.kind() != ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("Failed to remove {}", p.display()));
                    }
                    _ => {}
                }
            }
        }
        Ok(false)
    }
}

/// Bytes of the regular files under `dir`, recursively.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod test {
    use super::*;

    /// below-store's checksum, byte at a time, to hold ours against.
    fn crc32_bytewise(data: &[u8]) -> u32 {
        data.iter().fold(0xFFFF_FFFF, |c, &b| {
            (c >> 8) ^ TABLES[0][((c ^ b as u32) & 0xFF) as usize]
        })
    }

    #[test]
    fn crc_matches_bytewise() {
        let data: Vec<u8> = (0..10_007u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 1, 7, 8, 9, 63, 64, 65, 1000, 10_007] {
            assert_eq!(crc32(&data[..len]), crc32_bytewise(&data[..len]), "{len}");
        }
        // CRC-32 of "123456789" is 0xCBF43926 after the final inversion.
        assert_eq!(!crc32(b"123456789"), 0xCBF4_3926);
    }

    fn frames() -> Vec<store::DataFrame> {
        (0..5u64)
            .map(|i| {
                let mut f = store::DataFrame::default();
                f.sample.system.hostname = format!("host-{i}");
                f.sample.system.kernel_version = Some("7.3.4".repeat(i as usize + 1));
                f
            })
            .collect()
    }

    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The same frames give the same files as below-store's writer, in
    /// every compression mode, across a shard change and a restart.
    #[test]
    fn writes_what_below_store_writes() {
        let modes = [
            CompressionMode::None,
            CompressionMode::Zstd,
            CompressionMode::ZstdDictionary(store::ChunkSizePo2(2)),
        ];
        let day = SystemTime::UNIX_EPOCH + Duration::from_secs(20_000 * SHARD_SECS);
        let times: Vec<SystemTime> = [10, 11, SHARD_SECS - 1, SHARD_SECS + 5, SHARD_SECS + 6]
            .iter()
            .map(|&s| day + Duration::from_secs(s))
            .collect();
        let log = || slog::Logger::root(slog::Discard, slog::o!());
        // Index entries written at once, and by the sync thread.
        for (mode, sync) in modes.into_iter().flat_map(|m| [(m, false), (m, true)]) {
            let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let syncer = sync.then(|| Arc::new(Syncer::start(log(), None).unwrap()));
            // Two runs, as a restart: the second pads to a new chunk. Both
            // writers open today's shard first, as at a real start.
            for run in [0..3, 3..5] {
                if let Some(s) = &syncer {
                    s.drain();
                }
                let mut w = Writer::with_syncer(
                    log(),
                    ours.path(),
                    mode,
                    SystemTime::now(),
                    syncer.clone(),
                )
                .unwrap();
                let mut b =
                    store::StoreWriter::new(log(), theirs.path(), mode, store::Format::Cbor)
                        .unwrap();
                for i in run {
                    w.put(times[i], &frames()[i].sample).unwrap();
                    b.put(times[i], &frames()[i]).unwrap();
                }
            }
            if let Some(s) = &syncer {
                s.drain();
            }
            assert_eq!(files(ours.path()), files(theirs.path()), "{mode:?} {sync}");
            assert_eq!(files(ours.path()).len(), 6, "two shards and today's");
            // And below reads ours back.
            let (_, back) =
                store::read_next_sample(ours.path(), times[4], store::Direction::Reverse, log())
                    .unwrap()
                    .unwrap();
            assert_eq!(back.sample.system.hostname, "host-4");
        }
    }

    #[test]
    fn discards_old_shards_but_the_current() {
        let log = slog::Logger::root(slog::Discard, slog::o!());
        let dir = tempfile::tempdir().unwrap();
        let day = |d: u64| SystemTime::UNIX_EPOCH + Duration::from_secs((20_000 + d) * SHARD_SECS);
        let mut w = Writer::new(log, dir.path(), CompressionMode::None, day(0)).unwrap();
        for d in 0..3 {
            w.put(day(d), &frames()[0].sample).unwrap();
        }
        assert_eq!(files(dir.path()).len(), 6);
        w.discard_earlier(day(1)).unwrap();
        assert_eq!(files(dir.path()).len(), 4);
        assert!(
            !w.try_discard_until_size(0).unwrap(),
            "the current shard stays"
        );
        assert_eq!(files(dir.path()).len(), 2);
        assert!(w.try_discard_until_size(1 << 20).unwrap());
    }

    /// A shard we closed opens again while a child forked in between
    /// still holds a copy of its descriptor (other threads spawn
    /// processes); a writer that keeps it open is still refused.
    #[test]
    fn a_forked_copy_of_the_lock_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index_00000000001");
        let f = open_locked(&path).unwrap();
        // SAFETY: the child only sleeps and exits (async-signal-safe).
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            unsafe {
                libc::usleep(300_000);
                libc::_exit(0);
            }
        }
        drop(f);
        let again = open_locked(&path);
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        let again = again.unwrap();

        let err = open_locked(&path).unwrap_err();
        assert!(
            format!("{err:#}").contains("Failed to acquire file lock"),
            "{err:#}"
        );
        drop(again);
    }

    /// An index entry whose frame is not in the data file (past its end,
    /// or zeros where the frame should be) is cut when the shard is
    /// opened; whole entries and the padding before them stay, and
    /// below reads every sample that is left.
    #[test]
    fn index_entries_without_their_data_are_cut_at_open() {
        let log = || slog::Logger::root(slog::Discard, slog::o!());
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(20_000 * SHARD_SECS + 100);
        let mode = CompressionMode::ZstdDictionary(store::ChunkSizePo2(2));
        for damage in ["short", "zeros"] {
            let dir = tempfile::tempdir().unwrap();
            let mut w = Writer::new(log(), dir.path(), mode, t0).unwrap();
            for (i, f) in frames().iter().enumerate() {
                w.put(t0 + Duration::from_secs(i as u64), &f.sample)
                    .unwrap();
            }
            drop(w);
            let shard = shard_of(t0);
            let data_path = dir.path().join(format!("data_{shard:011}"));
            let index_path = dir.path().join(format!("index_{shard:011}"));
            let data = std::fs::read(&data_path).unwrap();
            let index = std::fs::read(&index_path).unwrap();
            // The last two frames: lost (short) or zeroed (a file size
            // that reached the disk before the blocks).
            let last2 = u64::from_ne_bytes(index[index.len() - 64 + 8..][..8].try_into().unwrap());
            let mut damaged = data.clone();
            match damage {
                "short" => damaged.truncate(last2 as usize),
                _ => damaged[last2 as usize..].fill(0),
            }
            std::fs::write(&data_path, &damaged).unwrap();
            let mut w = Writer::new(log(), dir.path(), mode, t0).unwrap();
            assert_eq!(
                std::fs::read(&index_path).unwrap(),
                index[..index.len() - 64],
                "{damage}"
            );
            // And the store takes samples again, after the cut.
            w.put(t0 + Duration::from_secs(10), &frames()[1].sample)
                .unwrap();
            drop(w);
            let mut seen = Vec::new();
            let mut t = t0;
            while let Some((ts, f)) =
                store::read_next_sample(dir.path(), t, store::Direction::Forward, log()).unwrap()
            {
                seen.push(f.sample.system.hostname);
                t = ts + Duration::from_secs(1);
            }
            assert_eq!(seen, ["host-0", "host-1", "host-2", "host-1"], "{damage}");
        }
    }
}
