//! Our reader of below-store's format (see `writer.rs` for the format),
//! for stores we did not write ourselves: a snapshot someone handed us, a
//! store directory others could write. below-store 0.9's cursor trusts
//! what it reads: an entry without the CBOR flag panics it, a zstd header
//! declaring 2^62 bytes aborts the process (it allocates what the header
//! says), a FIFO named `index_*` blocks it forever and a sparse index is
//! mapped whole. This reader
//!
//! - opens each file without following a link and without blocking, and
//!   reads only regular files (`O_NOFOLLOW|O_NONBLOCK`, then `fstat`);
//! - reads an index only up to [`MAX_INDEX_BYTES`], in blocks, keeping
//!   the entries that are valid: checksum, known flags, CBOR, a chunk size
//!   below-store can write, a frame inside the data file as it is;
//! - reads a frame with `pread` (no mapping), checks its checksum, and
//!   decompresses it only if its header declares a size, at most
//!   [`MAX_FRAME_BYTES`];
//! - skips what is not valid with a warning, as below skips a corrupt
//!   entry, and goes on with the next entry or shard.
//!
//! `replay` and `dump` read history through it and hand below's view and
//! dump a store rewritten by our writer (see `clean.rs`), so below-store's
//! own cursor only ever reads what we wrote.

use std::collections::HashSet;
use std::fs::File;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use slog::warn;
use store::DataFrame;
use store::Direction;

use crate::writer::crc32;

/// Above any index a store holds: a day at one sample a second is 2.7 MB.
pub const MAX_INDEX_BYTES: u64 = 256 << 20;
/// Above any frame, compressed or not: a sample of 100k processes with
/// long command lines is tens of MB.
pub const MAX_FRAME_BYTES: usize = 128 << 20;

const ENTRY: usize = 32;
const SHARD_SECS: u64 = 24 * 60 * 60;
const COMPRESSED: u32 = 0x1;
const CBOR: u32 = 0x2;
const CHUNK_SHIFT: u32 = 2;
const CHUNK_MASK: u32 = 0xf << CHUNK_SHIFT;
/// below-store's largest chunk: 2^15 frames.
const MAX_CHUNK_PO2: u32 = 15;

/// Opens a store file for reading: a link is not followed, a FIFO or
/// device not read (nor waited on). `None` if there is no such file.
pub fn open_regular(path: &Path) -> Result<Option<(File, u64)>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            bail!("{} is a symbolic link: not read", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("Failed to open {}", path.display())),
    };
    let meta = file
        .metadata()
        .with_context(|| format!("Failed to stat {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file: not read", path.display());
    }
    Ok(Some((file, meta.len())))
}

/// A valid index entry and its position (in entries) in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub pos: u64,
    pub ts: u64,
    offset: u64,
    len: u32,
    flags: u32,
    data_crc: u32,
}

impl Entry {
    fn chunk_po2(&self) -> u32 {
        (self.flags & CHUNK_MASK) >> CHUNK_SHIFT
    }
}

/// Why an index entry is not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BadEntry {
    /// Zeroed padding (dictionary chunks are aligned): not an entry.
    Padding,
    Checksum,
    Flags(u32),
    /// Its frame is not inside the data file.
    OutOfData,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Parses the entry at `pos` from its 32 bytes, checked against the data
/// file's length.
pub fn parse_entry(raw: &[u8; ENTRY], pos: u64, data_len: u64) -> Result<Entry, BadEntry> {
    if raw.iter().all(|b| *b == 0) {
        return Err(BadEntry::Padding);
    }
    if crc32(&raw[..ENTRY - 4]) != u32_at(raw, 28) {
        return Err(BadEntry::Checksum);
    }
    let e = Entry {
        pos,
        ts: u64_at(raw, 0),
        offset: u64_at(raw, 8),
        len: u32_at(raw, 16),
        flags: u32_at(raw, 20),
        data_crc: u32_at(raw, 24),
    };
    let known = COMPRESSED | CBOR | CHUNK_MASK;
    if e.flags & !known != 0 || e.flags & CBOR == 0 || e.chunk_po2() > MAX_CHUNK_PO2 {
        return Err(BadEntry::Flags(e.flags));
    }
    let end = e.offset.checked_add(u64::from(e.len));
    if end.is_none_or(|end| end > data_len) || e.len as usize > MAX_FRAME_BYTES {
        return Err(BadEntry::OutOfData);
    }
    Ok(e)
}

/// The valid entries of an index held in memory (the fuzz target's way
/// in; files are read in blocks by [`Shard::open`]).
pub fn parse_index(index: &[u8], data_len: u64) -> Vec<Entry> {
    index
        .chunks_exact(ENTRY)
        .enumerate()
        .filter_map(|(i, raw)| parse_entry(raw.try_into().expect("32"), i as u64, data_len).ok())
        .collect()
}

/// Decompresses one zstd frame, if its header declares a size no larger
/// than [`MAX_FRAME_BYTES`]; with `dict`, against that dictionary.
fn decompress(
    dctx: &mut zstd_safe::DCtx<'static>,
    frame: &[u8],
    dict: Option<&zstd_safe::DDict<'static>>,
) -> Result<Vec<u8>> {
    let size = match zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) => n,
        Ok(None) => bail!("zstd frame does not declare its size"),
        Err(_) => bail!("not a zstd frame"),
    };
    if size > MAX_FRAME_BYTES as u64 {
        bail!("zstd frame declares {size} bytes, more than {MAX_FRAME_BYTES}");
    }
    let mut out = Vec::with_capacity(size as usize);
    let r = match dict {
        Some(d) => dctx.decompress_using_ddict(&mut out, frame, d),
        None => dctx.decompress(&mut out, frame),
    };
    r.map_err(|c| anyhow!("zstd: {}", zstd_safe::get_error_name(c)))?;
    Ok(out)
}

/// Where a shard's frames are read from: its data file, or memory.
pub trait Data {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
}

impl Data for File {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.read_exact_at(&mut buf, offset)
            .context("Failed to read a frame")?;
        Ok(buf)
    }
}

impl Data for &[u8] {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| self.get(o..o.checked_add(len)?))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| anyhow!("frame beyond the data"))
    }
}

/// The valid entries of one shard and its data, with the dictionary of the
/// chunk read last.
pub struct Shard<D> {
    entries: Vec<Entry>,
    data: D,
    dctx: zstd_safe::DCtx<'static>,
    /// Position of a chunk's first entry and the chunk's dictionary.
    dict: Option<(u64, zstd_safe::DDict<'static>)>,
}

impl<D: Data> Shard<D> {
    pub fn new(entries: Vec<Entry>, data: D) -> Self {
        Shard {
            entries,
            data,
            dctx: zstd_safe::DCtx::create(),
            dict: None,
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The checked, uncompressed bytes of the frame of `e`.
    fn raw(&mut self, e: &Entry) -> Result<Vec<u8>> {
        let bytes = self.data.read_at(e.offset, e.len as usize)?;
        if crc32(&bytes) != e.data_crc {
            bail!("frame checksum mismatch");
        }
        Ok(bytes)
    }

    fn single(&mut self, e: &Entry) -> Result<Vec<u8>> {
        let bytes = self.raw(e)?;
        if e.flags & COMPRESSED == 0 {
            return Ok(bytes);
        }
        decompress(&mut self.dctx, &bytes, None)
    }

    /// The serialized (CBOR) frame of entry `i` of [`Self::entries`].
    pub fn frame(&mut self, i: usize) -> Result<Vec<u8>> {
        let e = *self.entries.get(i).ok_or_else(|| anyhow!("no entry {i}"))?;
        let k = e.chunk_po2();
        if k == 0 {
            return self.single(&e);
        }
        // The first frame of a chunk is the dictionary of the others.
        let first = e.pos & !((1u64 << k) - 1);
        if e.pos == first {
            return self.single(&e);
        }
        if self.dict.as_ref().map(|(p, _)| *p) != Some(first) {
            self.dict = None;
            let key = self
                .entries
                .binary_search_by_key(&first, |x| x.pos)
                .map(|j| self.entries[j])
                .map_err(|_| anyhow!("the dictionary frame of its chunk is missing"))?;
            if key.chunk_po2() == 0 {
                bail!("the first frame of its chunk is not a dictionary");
            }
            let dict = self.single(&key).context("dictionary frame")?;
            self.dict = Some((first, zstd_safe::DDict::create(&dict)));
        }
        let bytes = self.raw(&e)?;
        let (_, dict) = self.dict.as_ref().expect("loaded above");
        decompress(&mut self.dctx, &bytes, Some(dict))
    }

    /// The sample of entry `i`, its strings escaped if `escape`.
    pub fn sample(&mut self, i: usize, escape: bool) -> Result<DataFrame> {
        let bytes = self.frame(i)?;
        if escape {
            crate::escape::frame_from_cbor(&bytes)
        } else {
            serde_cbor::from_slice(&bytes).context("Malformed CBOR frame")
        }
    }
}

impl Shard<File> {
    /// Reads the index of shard `id` in blocks (never more than
    /// [`MAX_INDEX_BYTES`]) and keeps its valid entries. `None` if the
    /// shard has no index or no data file.
    pub fn open(logger: &slog::Logger, dir: &Path, id: u64) -> Result<Option<Self>> {
        let index_path = dir.join(format!("index_{id:011}"));
        let data_path = dir.join(format!("data_{id:011}"));
        let Some((index, index_len)) = open_regular(&index_path)? else {
            return Ok(None);
        };
        let Some((data, data_len)) = open_regular(&data_path)? else {
            return Ok(None);
        };
        if index_len > MAX_INDEX_BYTES {
            bail!(
                "{} holds {index_len} bytes, more than any store writes ({MAX_INDEX_BYTES})",
                index_path.display()
            );
        }
        let mut entries = vec![];
        let (mut bad, mut block) = (0u64, vec![0u8; 2048 * ENTRY]);
        let whole = index_len - index_len % ENTRY as u64;
        let mut at = 0u64;
        while at < whole {
            let n = block.len().min((whole - at) as usize);
            index
                .read_exact_at(&mut block[..n], at)
                .with_context(|| format!("Failed to read {}", index_path.display()))?;
            for (i, raw) in block[..n].chunks_exact(ENTRY).enumerate() {
                let pos = at / ENTRY as u64 + i as u64;
                match parse_entry(raw.try_into().expect("32"), pos, data_len) {
                    Ok(e) => entries.push(e),
                    Err(BadEntry::Padding) => {}
                    Err(_) => bad += 1,
                }
            }
            at += n as u64;
        }
        if bad > 0 {
            warn!(
                logger,
                "{}: {} index entries not valid (checksum, flags or frame outside {}), skipped",
                index_path.display(),
                bad,
                data_path.display()
            );
        }
        Ok(Some(Shard::new(entries, data)))
    }
}

/// The shards of a store directory, oldest first: `index_<number>` files
/// (as below-store, which reads `index_<number as 11 digits>`).
pub fn shards(dir: &Path) -> Result<Vec<u64>> {
    let mut v: Vec<u64> = std::fs::read_dir(dir)
        .with_context(|| format!("Failed to read store directory {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("index_")?
                .parse::<u64>()
                .ok()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// What a store directory holds, as [`store_size`] counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreSize {
    /// Valid index entries: the samples a reader finds.
    pub samples: u64,
    /// Bytes of the `data_*` files.
    pub data_bytes: u64,
}

/// The samples a store directory indexes and the bytes of its data files,
/// for a caller watching a store fill (the benchmark). Entries that are not
/// valid are not counted, and not warned about.
pub fn store_size(dir: &Path) -> Result<StoreSize> {
    let quiet = slog::Logger::root(slog::Discard, slog::o!());
    let mut size = StoreSize::default();
    for id in shards(dir)? {
        if let Some(shard) = Shard::open(&quiet, dir, id)? {
            size.samples += shard.entries().len() as u64;
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_name().to_string_lossy().starts_with("data_") {
            size.data_bytes += e.metadata()?.len();
        }
    }
    Ok(size)
}

/// A store read through this module: below-store's `Store` trait, for
/// `copy_frames` and below's `Advance`-free readers.
pub struct SafeStore {
    logger: slog::Logger,
    dir: PathBuf,
    escape: bool,
    /// The shard read last, with its index length then.
    current: Option<(u64, u64, Shard<File>)>,
    /// Shards not read (warned once each).
    bad: HashSet<u64>,
}

impl SafeStore {
    /// With `escape`, every string of every sample is escaped for the
    /// terminal ([`crate::escape`]).
    pub fn new(logger: slog::Logger, dir: PathBuf, escape: bool) -> Self {
        SafeStore {
            logger,
            dir,
            escape,
            current: None,
            bad: HashSet::new(),
        }
    }

    fn shard(&mut self, id: u64) -> Option<&mut Shard<File>> {
        if self.bad.contains(&id) {
            return None;
        }
        // A shard being recorded grows: read again when its index has.
        let len = std::fs::symlink_metadata(self.dir.join(format!("index_{id:011}")))
            .map_or(0, |m| m.len());
        let fresh = matches!(&self.current, Some((i, l, _)) if *i == id && *l == len);
        if !fresh {
            self.current = None;
            match Shard::open(&self.logger, &self.dir, id) {
                Ok(Some(s)) => self.current = Some((id, len, s)),
                Ok(None) => return None,
                Err(e) => {
                    warn!(self.logger, "Shard {} skipped: {:#}", id, e);
                    self.bad.insert(id);
                    return None;
                }
            }
        }
        self.current.as_mut().map(|(_, _, s)| s)
    }

    /// The first readable sample at or after `t` (forward) or at or before
    /// it (reverse).
    pub fn find(&mut self, t: u64, direction: Direction) -> Result<Option<(u64, DataFrame)>> {
        let mut ids = shards(&self.dir)?;
        let forward = matches!(direction, Direction::Forward);
        if forward {
            ids.retain(|s| s.saturating_add(SHARD_SECS) > t);
        } else {
            ids.retain(|s| *s <= t);
            ids.reverse();
        }
        let (escape, logger) = (self.escape, self.logger.clone());
        for id in ids {
            let Some(shard) = self.shard(id) else {
                continue;
            };
            // Entries are in time order in any store below writes; in one
            // that is not, this still ends.
            let candidates: Vec<usize> = if forward {
                (shard.entries().partition_point(|e| e.ts < t)..shard.entries().len()).collect()
            } else {
                (0..shard.entries().partition_point(|e| e.ts <= t))
                    .rev()
                    .collect()
            };
            for i in candidates {
                let ts = shard.entries()[i].ts;
                match shard.sample(i, escape) {
                    Ok(f) => return Ok(Some((ts, f))),
                    Err(e) => warn!(logger, "Shard {} frame at {} skipped: {:#}", id, ts, e),
                }
            }
        }
        Ok(None)
    }
}

impl store::Store for SafeStore {
    type SampleType = DataFrame;

    fn get_sample_at_timestamp(
        &mut self,
        timestamp: SystemTime,
        direction: Direction,
    ) -> Result<Option<(SystemTime, DataFrame)>> {
        let t = timestamp
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(self
            .find(t, direction)?
            .map(|(ts, f)| (SystemTime::UNIX_EPOCH + Duration::from_secs(ts), f)))
    }
}

/// Every sample a shard held in memory yields, or why not (the fuzz
/// target: it must return, whatever the bytes).
pub fn decode_shard(index: &[u8], data: &[u8]) -> Vec<Result<(u64, DataFrame)>> {
    let mut shard = Shard::new(parse_index(index, data.len() as u64), data);
    (0..shard.entries().len())
        .map(|i| {
            let ts = shard.entries()[i].ts;
            shard.sample(i, true).map(|f| (ts, f))
        })
        .collect()
}

#[cfg(test)]
#[path = "reader_test.rs"]
mod test;
