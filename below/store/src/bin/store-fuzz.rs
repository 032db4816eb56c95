//! Fuzzing of the store reader's decoder (`reader::decode_shard`: index
//! entries, frames, zstd with and without dictionaries, CBOR, escaping):
//! `store-fuzz [--seconds N] [--seed N] [--crashes DIR]`; `store-fuzz
//! --replay DIR/crash-N` checks a saved input again.
//!
//! Coverage-guided fuzzers need a nightly compiler or an instrumented
//! rebuild of every dependency; this runs on stable with the build we
//! already have. It is structure-aware instead: it starts from shards
//! below-store writes (each compression mode, names with escape sequences)
//! and mutates what the format is made of (entry fields and flags, frame
//! offsets and lengths, zstd headers declaring huge sizes, bytes of
//! frames and of their CBOR), usually fixing the checksums afterwards so
//! the mutations reach the decompressor and the decoder instead of dying
//! at the first CRC. Each input must decode without panicking, and every
//! sample it yields must hold no control character in any string. An
//! allocation beyond the reader's bounds aborts the process: run it under
//! a memory limit (`ulimit -v`) to make that a failure too.

use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use bstats_store::crc32;
use bstats_store::escape::has_control;
use bstats_store::reader::decode_shard;
use serde_cbor::Value;
use store::CompressionMode;

/// xorshift64*: reproducible from `--seed`, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A shard: index and data bytes.
#[derive(Clone)]
struct Shard {
    index: Vec<u8>,
    data: Vec<u8>,
}

/// Shards written by below-store: each mode, names and argv with escapes.
fn seeds() -> Vec<Shard> {
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let base = 86400 * 20000;
    let mut out = vec![];
    for mode in [
        CompressionMode::None,
        CompressionMode::Zstd,
        CompressionMode::ZstdDictionary(store::ChunkSizePo2(1)),
        CompressionMode::ZstdDictionary(store::ChunkSizePo2(2)),
    ] {
        let d = tempfile::tempdir().expect("tempdir");
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let mut w = store::StoreWriter::new_with_timestamp(
            logger.clone(),
            d.path(),
            at(base),
            mode,
            store::Format::Cbor,
        )
        .expect("store writer");
        for i in 0..5u64 {
            let mut sample = model::Sample::default();
            let child = model::CgroupSample {
                memory_current: Some(i as i64),
                ..Default::default()
            };
            sample.cgroup.children = Some(
                [
                    (format!("c{i}\x1b]0;T\x07"), child),
                    ("ok".into(), Default::default()),
                ]
                .into(),
            );
            let pid = procfs::PidInfo {
                cmdline_vec: Some(vec!["sh".into(), format!("\x1b[2J{i}\u{9b}")]),
                ..Default::default()
            };
            sample.processes.insert(i as i32 + 1, pid);
            w.put(at(base + i), &store::DataFrame { sample })
                .expect("put");
        }
        let name = |k: &str| d.path().join(format!("{k}_{base:011}"));
        out.push(Shard {
            index: std::fs::read(name("index")).expect("index"),
            data: std::fs::read(name("data")).expect("data"),
        });
    }
    out
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_ne_bytes());
    }
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(s) = b.get_mut(at..at + 8) {
        s.copy_from_slice(&v.to_ne_bytes());
    }
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8")))
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_ne_bytes(s.try_into().expect("4")))
}

/// A value likely to matter for a length, offset or size field.
fn interesting(r: &mut Rng) -> u64 {
    const V: [u64; 12] = [
        0,
        1,
        31,
        32,
        0x7fff_ffff,
        0xffff_ffff,
        1 << 32,
        1 << 62,
        u64::MAX,
        u64::MAX - 31,
        4096,
        128 << 20,
    ];
    if r.chance(50) {
        V[r.below(V.len())]
    } else {
        r.next()
    }
}

/// One mutation of the shard.
fn mutate(r: &mut Rng, s: &mut Shard) {
    let entries = s.index.len() / 32;
    let e = r.below(entries.max(1)) * 32;
    match r.below(14) {
        0 => {
            let b = if r.chance(50) {
                &mut s.index
            } else {
                &mut s.data
            };
            if !b.is_empty() {
                let i = r.below(b.len());
                b[i] ^= 1 << r.below(8);
            }
        }
        1 => {
            let b = if r.chance(30) {
                &mut s.index
            } else {
                &mut s.data
            };
            if !b.is_empty() {
                let i = r.below(b.len());
                b[i] = r.next() as u8;
            }
        }
        // Flags: random, CBOR cleared, another chunk size.
        2 => put_u32(&mut s.index, e + 20, r.next() as u32),
        3 => {
            let f = get_u32(&s.index, e + 20);
            put_u32(&mut s.index, e + 20, f & !0x2);
        }
        4 => {
            let f = get_u32(&s.index, e + 20);
            put_u32(
                &mut s.index,
                e + 20,
                (f & 0x3) | ((r.below(20) as u32) << 2),
            );
        }
        // Offset and length of the frame.
        5 => put_u64(&mut s.index, e + 8, interesting(r)),
        6 => put_u32(&mut s.index, e + 16, interesting(r) as u32),
        7 => put_u64(&mut s.index, e, interesting(r)),
        // A zstd header declaring a huge (or any) size where a frame starts.
        8 => {
            let off = get_u64(&s.index, e + 8) as usize;
            let size = interesting(r);
            if let Some(b) = off.checked_add(13).and_then(|end| s.data.get_mut(off..end)) {
                b[..5].copy_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 0xe0]);
                b[5..13].copy_from_slice(&size.to_le_bytes());
            }
        }
        // Truncation, duplication, zeroed entries.
        9 => {
            let n = r.below(s.index.len() + 1);
            s.index.truncate(n);
        }
        10 => {
            let n = r.below(s.data.len() + 1);
            s.data.truncate(n);
        }
        11 => {
            if entries > 0 {
                let from = r.below(entries) * 32;
                let raw: Vec<u8> = s.index[from..from + 32].to_vec();
                s.index[e..e + 32].copy_from_slice(&raw);
            }
        }
        12 => {
            if let Some(b) = s.index.get_mut(e..e + 32) {
                b.fill(0);
            }
        }
        // Bytes inserted into a frame (shifting the rest).
        _ => {
            let at = r.below(s.data.len() + 1);
            let n = 1 + r.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            s.data.splice(at..at, bytes);
        }
    }
}

/// Makes every entry's checksums right again, so mutations get past them.
fn fix_checksums(s: &mut Shard) {
    for e in (0..s.index.len() / 32).map(|i| i * 32) {
        let off = get_u64(&s.index, e + 8);
        let len = get_u32(&s.index, e + 16) as u64;
        if let Some(frame) = off
            .checked_add(len)
            .filter(|end| *end <= s.data.len() as u64)
            .map(|end| &s.data[off as usize..end as usize])
        {
            let c = crc32(frame);
            put_u32(&mut s.index, e + 24, c);
        }
        let c = crc32(&s.index[e..e + 28]);
        put_u32(&mut s.index, e + 28, c);
    }
}

/// Any string of the value (map keys too) with a control character.
fn control_in(v: &Value) -> Option<String> {
    match v {
        Value::Text(s) if has_control(s) => Some(s.clone()),
        Value::Array(a) => a.iter().find_map(control_in),
        Value::Map(m) => m
            .iter()
            .find_map(|(k, v)| control_in(k).or_else(|| control_in(v))),
        Value::Tag(_, v) => control_in(v),
        _ => None,
    }
}

/// Why `s` fails the fuzz target's properties, if it does.
fn check(s: &Shard, st: &mut Stats) -> Option<String> {
    match std::panic::catch_unwind(|| decode_shard(&s.index, &s.data)) {
        Err(_) => Some("panic".to_string()),
        Ok(frames) => frames.iter().find_map(|f| match f {
            Ok((_, frame)) => {
                st.samples += 1;
                let v = serde_cbor::value::to_value(frame).expect("encodes");
                control_in(&v).map(|c| format!("control character left in {c:?}"))
            }
            Err(_) => {
                st.errors += 1;
                None
            }
        }),
    }
}

#[derive(Default)]
struct Stats {
    iterations: u64,
    samples: u64,
    errors: u64,
    crashes: u64,
}

fn main() {
    let mut seconds = 60u64;
    let mut seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut crashes_dir: Option<PathBuf> = None;
    let mut replay: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("a value after the flag");
        match a.as_str() {
            "--seconds" => seconds = value().parse().expect("seconds"),
            "--seed" => seed = value().parse::<u64>().expect("seed") | 1,
            "--crashes" => crashes_dir = Some(value().into()),
            "--replay" => replay = Some(value()),
            _ => {
                eprintln!("usage: store-fuzz [--seconds N] [--seed N] [--crashes DIR]");
                std::process::exit(2);
            }
        }
    }
    if let Some(base) = replay {
        let read = |ext: &str| std::fs::read(format!("{base}.{ext}")).expect("a saved input");
        let s = Shard {
            index: read("index"),
            data: read("data"),
        };
        let mut st = Stats::default();
        match check(&s, &mut st) {
            Some(why) => {
                println!("store-fuzz: {base}: {why}");
                std::process::exit(1);
            }
            None => println!("store-fuzz: {base}: ok ({} samples)", st.samples),
        }
        return;
    }
    // Failures are counted and saved, not printed per panic.
    std::panic::set_hook(Box::new(|_| {}));
    let seeds = seeds();
    let mut r = Rng(seed);
    let mut st = Stats::default();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        for _ in 0..64 {
            let mut s = seeds[r.below(seeds.len())].clone();
            for _ in 0..1 + r.below(6) {
                mutate(&mut r, &mut s);
            }
            if r.chance(85) {
                fix_checksums(&mut s);
            }
            st.iterations += 1;
            if let Some(why) = check(&s, &mut st) {
                st.crashes += 1;
                eprintln!("store-fuzz: failure ({why}) at iteration {}", st.iterations);
                if let Some(dir) = &crashes_dir {
                    let _ = std::fs::create_dir_all(dir);
                    let n = st.crashes;
                    let _ = std::fs::write(dir.join(format!("crash-{n}.index")), &s.index);
                    let _ = std::fs::write(dir.join(format!("crash-{n}.data")), &s.data);
                }
            }
        }
    }
    println!(
        "store-fuzz: {} iterations in {} s (seed {}): {} samples decoded, {} frames refused, crashes: {}",
        st.iterations, seconds, seed, st.samples, st.errors, st.crashes
    );
    if st.crashes > 0 {
        std::process::exit(1);
    }
}
