//! Making samples durable without making sampling wait for the disk.
//!
//! The sampling thread appends a frame to `data_*` (page cache only) and
//! hands its index entry to a sync thread, which fdatasyncs the data
//! files, then appends the entries to `index_*` and fdatasyncs those. An
//! index entry thus reaches the disk only after its frame: after a power
//! cut the index is never ahead of its data, and a sample is either whole
//! or absent. A slow disk delays durability, never the next sample (the
//! lag is logged).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::Condvar;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use slog::debug;
use slog::info;
use slog::warn;

/// When samples are made durable (config key `store_sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StoreSync {
    /// Each sample, as soon as it is written (`"sample"`, the default).
    #[default]
    Sample,
    /// Every N seconds, with the samples written since (`"interval:N"`).
    Interval(Duration),
    /// Never: the kernel writes back when it likes, as below does
    /// (`"none"`; up to ~30 s of samples die with the host).
    None,
}

impl FromStr for StoreSync {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "sample" => Ok(StoreSync::Sample),
            "none" => Ok(StoreSync::None),
            _ => match s.strip_prefix("interval:").map(str::parse::<u64>) {
                Some(Ok(n)) if n > 0 => Ok(StoreSync::Interval(Duration::from_secs(n))),
                _ => bail!(
                    "store sync `{s}`: expected \"sample\", \"interval:N\" (N seconds > 0) or \"none\""
                ),
            },
        }
    }
}

impl<'de> serde::Deserialize<'de> for StoreSync {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One index entry waiting for its frame to be durable.
pub(crate) struct Pending {
    pub data: Arc<File>,
    pub index: Arc<File>,
    /// The store directory, to fsync once when a shard's files are new.
    pub dir: Option<Arc<File>>,
    /// Where the entry goes: the index is padded with zeros up to here.
    pub at: u64,
    pub entry: [u8; 32],
    /// The sample's timestamp (seconds), for the log.
    pub t: u64,
}

#[derive(Default)]
struct State {
    queue: Vec<Pending>,
    /// The sync thread holds a batch (and its files' fds and flocks).
    busy: bool,
    stop: bool,
    /// Sync the queue now, not at the next tick (a drain waits).
    now: bool,
    /// The sync thread's last error, handed to the next `push`.
    failed: Option<anyhow::Error>,
    /// A sample was pushed before the one before it was durable.
    lagging: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// The sync thread and its queue.
pub(crate) struct Syncer {
    logger: slog::Logger,
    /// Entries wait for the tick in interval mode: not a lag.
    every: Option<Duration>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// `every`: None syncs each batch at once; Some(d) at most every d.
    pub fn start(logger: slog::Logger, every: Option<Duration>) -> Result<Syncer> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let (s, l) = (shared.clone(), logger.clone());
        let thread = std::thread::Builder::new()
            .name("store-sync".into())
            .spawn(move || run(&l, &s, every))
            .context("Failed to start the store sync thread")?;
        Ok(Syncer {
            logger,
            every,
            shared,
            thread: Some(thread),
        })
    }

    /// Queues an entry; fails with the sync thread's error if the last
    /// batch failed (its entries are lost: the writer must reopen).
    pub fn push(&self, p: Pending) -> Result<()> {
        let mut s = self.shared.state.lock().expect("sync state");
        if let Some(e) = s.failed.take() {
            return Err(e);
        }
        let behind = self.every.is_none() && (!s.queue.is_empty() || s.busy);
        if behind && !s.lagging {
            warn!(
                self.logger,
                "Store sync is behind: the previous sample is not durable yet (slow disk); sampling goes on"
            );
        } else if !behind && s.lagging {
            info!(self.logger, "Store sync caught up");
        }
        s.lagging = behind;
        s.queue.push(p);
        self.shared.cv.notify_all();
        Ok(())
    }

    /// Waits until every queued entry is durable (or failed) and the sync
    /// thread holds no file of the store.
    pub fn drain(&self) {
        let mut s = self.shared.state.lock().expect("sync state");
        while !s.queue.is_empty() || s.busy {
            // Interval mode: sync now rather than at the next tick.
            s.now = true;
            self.shared.cv.notify_all();
            s = self.shared.cv.wait(s).expect("sync state");
        }
    }
}

impl Drop for Syncer {
    /// Makes the last samples durable (whatever the policy) and stops.
    fn drop(&mut self) {
        self.shared.state.lock().expect("sync state").stop = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(e) = self.shared.state.lock().expect("sync state").failed.take() {
            warn!(self.logger, "Store sync failed at exit: {:#}", e);
        }
    }
}

fn run(logger: &slog::Logger, shared: &Shared, every: Option<Duration>) {
    let mut last = Instant::now();
    loop {
        let batch = {
            let mut s = shared.state.lock().expect("sync state");
            loop {
                if !s.queue.is_empty() {
                    let due = every.map_or(Duration::ZERO, |d| d.saturating_sub(last.elapsed()));
                    if s.stop || s.now || due.is_zero() {
                        break;
                    }
                    s = shared.cv.wait_timeout(s, due).expect("sync state").0;
                } else if s.stop {
                    return;
                } else {
                    s = shared.cv.wait(s).expect("sync state");
                }
            }
            s.busy = true;
            s.now = false;
            std::mem::take(&mut s.queue)
        };
        let result = apply(&batch);
        last = Instant::now();
        let through = batch.last().map(|p| p.t);
        // The files' fds (and flocks) go before a drain returns.
        drop(batch);
        let mut s = shared.state.lock().expect("sync state");
        s.busy = false;
        match result {
            Ok(n) => debug!(
                logger,
                "Store durable through {} ({} samples)",
                through.unwrap_or(0),
                n
            ),
            Err(e) => s.failed = Some(e),
        }
        shared.cv.notify_all();
    }
}

/// The same file twice in a batch is synced once.
fn unique<'a>(files: impl Iterator<Item = &'a Arc<File>>) -> Vec<&'a Arc<File>> {
    let mut v: Vec<&Arc<File>> = Vec::new();
    for f in files {
        if !v.iter().any(|g| Arc::ptr_eq(g, f)) {
            v.push(f);
        }
    }
    v
}

/// Data, then the directory, then the index: each step durable before
/// the next is written.
fn apply(batch: &[Pending]) -> Result<usize> {
    for f in unique(batch.iter().map(|p| &p.data)) {
        f.sync_data().context("Failed to sync data file")?;
    }
    for d in unique(batch.iter().filter_map(|p| p.dir.as_ref())) {
        d.sync_all().context("Failed to sync store directory")?;
    }
    for p in batch {
        let len = p.index.metadata()?.len();
        if len > p.at {
            return Err(anyhow!(
                "Index is {} bytes, longer than expected ({}): another writer?",
                len,
                p.at
            ));
        }
        if len < p.at {
            p.index.set_len(p.at).context("Failed to pad index file")?;
        }
        // Append mode: the entry lands at `at`.
        (&*p.index)
            .write_all(&p.entry)
            .context("Failed to write entry to index file")?;
    }
    for f in unique(batch.iter().map(|p| &p.index)) {
        f.sync_data().context("Failed to sync index file")?;
    }
    Ok(batch.len())
}

/// Cuts index entries at the end of `index` whose frame is not in
/// `data` (a crash after the entry but before its frame reached the
/// disk: only stores written without our sync, e.g. by below or with
/// `store_sync = "none"`): past the data's end or not its checksum.
/// Torn entries (bad checksum) at the end go too;
/// zeroed padding stays. Returns how many bytes were cut.
pub(crate) fn repair_tail(index: &File, data: &File) -> Result<u64> {
    let data_len = data.metadata()?.len();
    let len = index.metadata()?.len();
    let mut end = len - len % 32;
    let mut entry = [0u8; 32];
    while end >= 32 {
        index
            .read_exact_at(&mut entry, end - 32)
            .context("Failed to read index file")?;
        if entry == [0u8; 32] {
            break;
        }
        let offset = u64::from_ne_bytes(entry[8..16].try_into().expect("8 bytes"));
        let n = u32::from_ne_bytes(entry[16..20].try_into().expect("4 bytes"));
        let own = u32::from_ne_bytes(entry[28..32].try_into().expect("4 bytes"));
        let frame_crc = u32::from_ne_bytes(entry[24..28].try_into().expect("4 bytes"));
        if crate::writer::crc32(&entry[..28]) == own && offset.saturating_add(n.into()) <= data_len
        {
            // In the file, but are its bytes the frame's (not zeros)?
            let mut frame = vec![0u8; n as usize];
            data.read_exact_at(&mut frame, offset)
                .context("Failed to read data file")?;
            if crate::writer::crc32(&frame) == frame_crc {
                break;
            }
        }
        end -= 32;
    }
    if end < len - len % 32 {
        index
            .set_len(end)
            .context("Failed to cut the index's torn tail")?;
    }
    Ok(len - len % 32 - end)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn parses_the_config_values() {
        assert_eq!("sample".parse::<StoreSync>().unwrap(), StoreSync::Sample);
        assert_eq!("none".parse::<StoreSync>().unwrap(), StoreSync::None);
        assert_eq!(
            "interval:30".parse::<StoreSync>().unwrap(),
            StoreSync::Interval(Duration::from_secs(30))
        );
        for bad in ["interval:0", "interval:", "interval:x", "always", ""] {
            assert!(bad.parse::<StoreSync>().is_err(), "{bad}");
        }
    }
}
