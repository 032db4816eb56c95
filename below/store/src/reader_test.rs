use std::os::unix::fs::FileExt;
use std::sync::mpsc;

use store::CompressionMode;

use super::*;
use crate::test_support::edit_index_entry;
use crate::writer::Writer;

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

/// A day's first second: one shard.
const BASE: u64 = 86400 * 20000;

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

/// A store with a frame at BASE + each of `secs`, memory_current = that.
fn store_with(dir: &Path, mode: CompressionMode, secs: &[u64]) {
    let mut w = Writer::new(logger(), dir, mode, at(BASE)).unwrap();
    for s in secs {
        let mut sample = model::Sample::default();
        sample.cgroup.memory_current = Some(*s as i64);
        w.put(at(BASE + s), &sample).unwrap();
    }
}

fn index_path(dir: &Path) -> PathBuf {
    dir.join(format!("index_{BASE:011}"))
}

/// Every sample our reader finds, forward from the start.
fn read_all(dir: &Path) -> Vec<(u64, Option<i64>)> {
    let mut s = SafeStore::new(logger(), dir.to_path_buf(), true);
    let mut out = vec![];
    let mut t = 0;
    while let Some((ts, f)) = s.find(t, Direction::Forward).unwrap() {
        out.push((ts - BASE, f.sample.cgroup.memory_current));
        t = ts + 1;
    }
    out
}

/// Runs `f` on another thread; fails if it takes more than 10 s.
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the reader hung")
}

#[test]
fn reads_what_below_writes_in_every_mode() {
    for mode in [
        CompressionMode::None,
        CompressionMode::Zstd,
        CompressionMode::ZstdDictionary(store::ChunkSizePo2(2)),
    ] {
        let d = tempfile::tempdir().unwrap();
        let secs = [1, 2, 5, 6, 7, 9, 10];
        store_with(d.path(), mode, &secs);
        let want: Vec<_> = secs.iter().map(|s| (*s, Some(*s as i64))).collect();
        assert_eq!(read_all(d.path()), want, "{mode:?}");
        let mut s = SafeStore::new(logger(), d.path().to_path_buf(), false);
        let (ts, _) = s.find(BASE + 8, Direction::Reverse).unwrap().unwrap();
        assert_eq!(ts, BASE + 7, "{mode:?}");
        assert!(s.find(BASE + 11, Direction::Forward).unwrap().is_none());
        assert!(s.find(BASE, Direction::Reverse).unwrap().is_none());
    }
}

/// The size counts what a reader reads: padding and invalid entries are
/// not samples.
#[test]
fn store_size_counts_readable_samples() {
    let d = tempfile::tempdir().unwrap();
    let dict = CompressionMode::ZstdDictionary(store::ChunkSizePo2(2));
    store_with(d.path(), dict, &[1, 2, 3]);
    // A second writer starts a new chunk: the index is padded up to it.
    store_with(d.path(), dict, &[4, 5]);
    let index_len = std::fs::metadata(index_path(d.path())).unwrap().len();
    assert!(index_len > 5 * 32, "no padding to skip");
    let data_len = std::fs::metadata(d.path().join(format!("data_{BASE:011}")))
        .unwrap()
        .len();
    let size = |dir: &Path| store_size(dir).unwrap();
    assert_eq!(
        size(d.path()),
        StoreSize {
            samples: 5,
            data_bytes: data_len
        }
    );
    edit_index_entry(&index_path(d.path()), 0, |raw| {
        raw[20..24].copy_from_slice(&0u32.to_ne_bytes())
    });
    assert_eq!(size(d.path()).samples, 4, "an entry without the CBOR flag");
    assert!(store_size(&d.path().join("none")).is_err());
}

/// below-store's cursor panics ("Unexpected format") on an entry without
/// the CBOR flag; ours skips that entry and reads the next.
#[test]
fn an_entry_without_the_cbor_flag_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    store_with(d.path(), CompressionMode::Zstd, &[1, 2]);
    edit_index_entry(&index_path(d.path()), 0, |raw| {
        let flags = u32_at(raw, 20) & !CBOR;
        raw[20..24].copy_from_slice(&flags.to_ne_bytes());
    });
    let dir = d.path().to_path_buf();
    let below = std::panic::catch_unwind(|| {
        store::read_next_sample(&dir, at(BASE), Direction::Forward, logger())
    });
    assert!(below.is_err(), "below-store 0.9 panics on this store");
    assert_eq!(read_all(d.path()), [(2, Some(2))]);
}

/// A frame whose zstd header declares 2^62 bytes: below-store allocates
/// that and aborts; ours refuses the frame.
#[test]
fn a_frame_declaring_2_62_bytes_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    store_with(d.path(), CompressionMode::Zstd, &[1, 2]);
    let data = d.path().join(format!("data_{BASE:011}"));
    let offset = std::fs::metadata(&data).unwrap().len();
    // Magic, single segment with an 8-byte content size, an empty last
    // raw block.
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
    frame.extend((1u64 << 62).to_le_bytes());
    frame.extend([0x01, 0x00, 0x00]);
    OpenOptions::new()
        .append(true)
        .open(&data)
        .unwrap()
        .write_all_at(&frame, offset)
        .unwrap();
    edit_index_entry(&index_path(d.path()), 0, |raw| {
        raw[8..16].copy_from_slice(&offset.to_ne_bytes());
        raw[16..20].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        raw[24..28].copy_from_slice(&crc32(&frame).to_ne_bytes());
    });
    assert_eq!(
        zstd_safe::get_frame_content_size(&frame).unwrap(),
        Some(1 << 62)
    );
    assert_eq!(read_all(d.path()), [(2, Some(2))]);
    let bytes = std::fs::read(&data).unwrap();
    let mut s = Shard::new(
        vec![parse_entry(
            &std::fs::read(index_path(d.path())).unwrap()[..32]
                .try_into()
                .unwrap(),
            0,
            offset + frame.len() as u64,
        )
        .unwrap()],
        bytes.as_slice(),
    );
    let e = s.frame(0).unwrap_err();
    assert!(
        format!("{e:#}").contains("declares 4611686018427387904 bytes"),
        "{e:#}"
    );
}

/// An `index_*` that is a FIFO (or a link to one): below-store blocks in
/// open(2) forever; ours does not read it and reads the other shards.
#[test]
fn a_fifo_or_link_index_is_not_read() {
    let d = tempfile::tempdir().unwrap();
    store_with(d.path(), CompressionMode::None, &[1]);
    let next = BASE + 86400;
    let fifo = d.path().join(format!("index_{next:011}"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::write(d.path().join(format!("data_{next:011}")), b"").unwrap();
    let dir = d.path().to_path_buf();
    let got = within_10s(move || read_all(&dir));
    assert_eq!(got, [(1, Some(1))]);
    let e = open_regular(&fifo).unwrap_err();
    assert!(format!("{e:#}").contains("is not a regular file"), "{e:#}");

    // The same shard as a link to the FIFO, and a link to a real index.
    std::fs::remove_file(&fifo).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("fifo");
    nix::unistd::mkfifo(&target, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::fs::symlink(&target, &fifo).unwrap();
    let dir = d.path().to_path_buf();
    assert_eq!(within_10s(move || read_all(&dir)), [(1, Some(1))]);
    let e = open_regular(&fifo).unwrap_err();
    assert!(format!("{e:#}").contains("is a symbolic link"), "{e:#}");
}

/// An 8 GiB sparse index (a few KB on disk) is not read, let alone mapped:
/// the shard is skipped, the others read, and memory stays small.
#[test]
fn a_huge_sparse_index_is_not_read() {
    let d = tempfile::tempdir().unwrap();
    store_with(d.path(), CompressionMode::None, &[1]);
    let next = BASE + 86400;
    let f = File::create(d.path().join(format!("index_{next:011}"))).unwrap();
    f.set_len(8 << 30).unwrap();
    std::fs::write(d.path().join(format!("data_{next:011}")), b"x").unwrap();
    assert_eq!(read_all(d.path()), [(1, Some(1))]);
    let e = Shard::open(&logger(), d.path(), next).err().unwrap();
    assert!(
        format!("{e:#}").contains("more than any store writes"),
        "{e:#}"
    );
}

/// Entries whose frame is outside the data file, and garbage, are not
/// entries; a zeroed one is padding.
#[test]
fn entries_are_checked_against_the_data() {
    let d = tempfile::tempdir().unwrap();
    store_with(d.path(), CompressionMode::Zstd, &[1, 2]);
    let data_len = std::fs::metadata(d.path().join(format!("data_{BASE:011}")))
        .unwrap()
        .len();
    let index = std::fs::read(index_path(d.path())).unwrap();
    let first: [u8; 32] = index[..32].try_into().unwrap();
    assert!(parse_entry(&first, 0, data_len).is_ok());
    assert_eq!(
        parse_entry(&first, 0, u64::from(u32_at(&first, 16)) - 1),
        Err(BadEntry::OutOfData)
    );
    assert_eq!(parse_entry(&[0; 32], 0, data_len), Err(BadEntry::Padding));
    let mut bad = first;
    bad[3] ^= 1;
    assert_eq!(parse_entry(&bad, 0, data_len), Err(BadEntry::Checksum));
    edit_index_entry(&index_path(d.path()), 1, |raw| {
        raw[20..24].copy_from_slice(&0x402u32.to_ne_bytes())
    });
    assert_eq!(read_all(d.path()), [(1, Some(1))], "unknown flag bits");
}

/// Whatever the bytes, decoding returns (the fuzz target's property, on
/// a few inputs every run).
#[test]
fn decoding_garbage_returns() {
    let d = tempfile::tempdir().unwrap();
    store_with(
        d.path(),
        CompressionMode::ZstdDictionary(store::ChunkSizePo2(1)),
        &[1, 2, 3],
    );
    let index = std::fs::read(index_path(d.path())).unwrap();
    let data = std::fs::read(d.path().join(format!("data_{BASE:011}"))).unwrap();
    assert_eq!(decode_shard(&index, &data).len(), 3);
    assert!(decode_shard(&index, &data).iter().all(|r| r.is_ok()));
    // The dictionary frame's data corrupted: the others fail, cleanly.
    let mut broken = data.clone();
    broken[4] ^= 0xff;
    let got = decode_shard(&index, &broken);
    assert!(
        got[0].is_err() && got[1].is_err() && got[2].is_ok(),
        "{got:?}"
    );
    for n in [0, 1, 31, 33, 64, 95] {
        decode_shard(&index[..n.min(index.len())], &data[..n.min(data.len())]);
    }
}
