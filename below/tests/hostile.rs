//! Host integration tests of what a hostile name, argv, store or snapshot
//! can do to the reader: names and command lines reach `dump` and `replay`
//! with their control characters escaped; a crafted store or snapshot
//! makes `dump` neither panic, abort, hang nor eat memory, and its
//! temporary directory is gone however `dump` ends.

use std::fs;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

mod common;

use bstats_store::crc32;
use bstats_store::test_support::crafted_tar;
use bstats_store::test_support::edit_index_entry;
use bstats_store::test_support::Crafted;
use bstats_testkit::skip_unless_root;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;
use common::now_secs;
use common::stderr_of;
use common::wait_until;
use common::Env;
use common::BELOW;

const TITLE: &str = "\x1b]0;TITLE\x07\x1b[31m";
const ARGV: &str = "\x1b]0;pwned\x07\x1b[2J";

/// Bytes a terminal acts on: C0 but newline, DEL, and C1 (as UTF-8).
fn control_bytes(out: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    text.chars()
        .filter(|c| c.is_control() && *c != '\n')
        .map(|c| format!("{:?}", c))
        .collect()
}

fn dump(env: &Env, args: &[&str]) -> Output {
    let out = env.below(args).output().unwrap();
    assert!(out.status.success(), "dump {args:?}: {}", stderr_of(&out));
    out
}

/// A cgroup named with a title-setting and a colour sequence, and a
/// process whose argv clears the screen: recorded, then dumped as
/// escaped text, never as the sequences.
#[test]
fn names_and_argv_are_dumped_escaped() {
    if skip_unless_root("creates cgroups") {
        return;
    }
    let root = bstats_collector::find_cgroup2_mount().unwrap();
    let mut fx = Fixture::new(&root, "esc", Controllers::All).unwrap();
    let evil = fx.mkdir(format!("evil{TITLE}")).unwrap();
    let mut sleeper = Command::new("sh")
        .args(["-c", "sleep 60; :", ARGV])
        .spawn()
        .unwrap();
    fs::write(evil.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
    let env = Env::new();
    let begin = now_secs();
    env.run(&["record", "--interval-s", "1", "--count", "2"]);
    let end = now_secs();
    let (b, e) = (begin.to_string(), end.to_string());
    let range = ["-b", &b, "-e", &e];
    let cg = dump(
        &env,
        &[
            &["dump", "cgroup"][..],
            &range,
            &["-f", "name", "full_path"],
        ]
        .concat(),
    );
    let procs = dump(
        &env,
        &[
            &["dump", "process"][..],
            &range,
            &["-f", "pid", "comm", "cgroup", "cmdline"],
        ]
        .concat(),
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    for (what, out) in [("cgroup", &cg), ("process", &procs)] {
        let bad = control_bytes(&out.stdout);
        assert!(bad.is_empty(), "dump {what} printed {bad:?}");
    }
    let cg = String::from_utf8_lossy(&cg.stdout);
    assert!(cg.contains("evil\\x1b]0;TITLE\\x07\\x1b[31m"), "{cg}");
    let procs = String::from_utf8_lossy(&procs.stdout);
    assert!(procs.contains("\\x1b]0;pwned\\x07\\x1b[2J"), "{procs}");
    assert!(procs.contains("/evil\\x1b]0;TITLE"), "its cgroup: {procs}");
}

/// A day's first second: one shard, well in the past.
const BASE: u64 = 86400 * 20000;

/// A store of three empty samples at BASE + 1, 2, 3 (zstd-compressed
/// frames), written by below-store itself.
fn three_samples(dir: &Path) {
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut w = store::StoreWriter::new_with_timestamp(
        logger,
        dir,
        SystemTime::UNIX_EPOCH + Duration::from_secs(BASE),
        store::CompressionMode::Zstd,
        store::Format::Cbor,
    )
    .unwrap();
    for s in 1..=3 {
        w.put(
            SystemTime::UNIX_EPOCH + Duration::from_secs(BASE + s),
            &store::DataFrame::default(),
        )
        .unwrap();
    }
}

fn shard_file(dir: &Path, kind: &str, shard: u64) -> PathBuf {
    dir.join(format!("{kind}_{shard:011}"))
}

/// `dump system` of the store in `env` over the three samples: it must
/// end within 20 s, neither killed by a signal nor panicking (101).
fn dump_times(env: &Env, extra: &[&str]) -> (Output, Vec<u64>) {
    let (b, e) = ((BASE + 1).to_string(), (BASE + 3).to_string());
    let mut cmd = env.below(
        &[
            extra,
            &[
                "dump",
                "system",
                "-b",
                &b,
                "-e",
                &e,
                "-f",
                "timestamp",
                "-O",
                "csv",
            ],
        ]
        .concat(),
    );
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let done = wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    if !done {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(done, "dump (pid {pid}) hung: {}", stderr_of(&out));
    assert_eq!(out.status.signal(), None, "killed: {}", stderr_of(&out));
    assert_ne!(
        out.status.code(),
        Some(101),
        "panicked: {}",
        stderr_of(&out)
    );
    let times = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(',').parse().ok())
        .collect();
    (out, times)
}

/// below-store 0.9 panics on an entry without the CBOR flag ("Unexpected
/// format", exit 101): the entry is skipped, the others dumped.
#[test]
fn an_entry_without_the_cbor_flag() {
    let env = Env::new();
    three_samples(&env.store());
    edit_index_entry(&shard_file(&env.store(), "index", BASE), 1, |raw| {
        let flags = u32::from_ne_bytes(raw[20..24].try_into().unwrap()) & !0x2;
        raw[20..24].copy_from_slice(&flags.to_ne_bytes());
    });
    let (out, times) = dump_times(&env, &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(times, [BASE + 1, BASE + 3]);
}

/// A frame whose zstd header declares 2^62 bytes aborted the process
/// (below-store allocates what the header says): the frame is skipped.
#[test]
fn a_frame_declaring_2_62_bytes() {
    let env = Env::new();
    three_samples(&env.store());
    let data = shard_file(&env.store(), "data", BASE);
    let offset = fs::metadata(&data).unwrap().len();
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
    frame.extend((1u64 << 62).to_le_bytes());
    frame.extend([0x01, 0x00, 0x00]);
    fs::OpenOptions::new()
        .append(true)
        .open(&data)
        .unwrap()
        .write_all_at(&frame, offset)
        .unwrap();
    edit_index_entry(&shard_file(&env.store(), "index", BASE), 1, |raw| {
        raw[8..16].copy_from_slice(&offset.to_ne_bytes());
        raw[16..20].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        raw[24..28].copy_from_slice(&crc32(&frame).to_ne_bytes());
    });
    let (out, times) = dump_times(&env, &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(times, [BASE + 1, BASE + 3]);
}

/// An `index_*` that is a FIFO hung `dump` in open(2); so did one that is
/// a link to a FIFO. Neither is read; the other shard is. (The day before
/// the samples: dump looks there for the sample before its range.)
#[test]
fn an_index_that_is_a_fifo_or_a_link_to_one() {
    let env = Env::new();
    three_samples(&env.store());
    let next = BASE - 86400;
    fs::write(shard_file(&env.store(), "data", next), b"").unwrap();
    let fifo = shard_file(&env.store(), "index", next);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (out, times) = dump_times(&env, &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(times, [BASE + 1, BASE + 2, BASE + 3]);

    fs::remove_file(&fifo).unwrap();
    let elsewhere = env.dir().join("fifo");
    nix::unistd::mkfifo(&elsewhere, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &fifo).unwrap();
    let (out, times) = dump_times(&env, &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(times, [BASE + 1, BASE + 2, BASE + 3]);
}

/// Runs `dump --snapshot` with `$TMPDIR` private to the test; returns its
/// output and the peak RSS in KiB.
// The child is reaped by wait4, for its own peak RSS.
#[allow(clippy::zombie_processes)]
fn dump_snapshot(env: &Env, snapshot: &Path, tmpdir: &Path) -> (Output, i64) {
    let mut cmd = env.below(&[
        "dump",
        "--snapshot",
        snapshot.to_str().unwrap(),
        "system",
        "-b",
        "0",
    ]);
    let child = cmd
        .env("TMPDIR", tmpdir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.unwrap();
    let mut stderr = child.stderr.unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = vec![];
        std::io::Read::read_to_end(&mut stderr, &mut v).unwrap();
        v
    });
    let mut out = vec![];
    std::io::Read::read_to_end(&mut stdout, &mut out).unwrap();
    let err = reader.join().unwrap();
    // wait4 for this child's own peak RSS (getrusage would mix in every
    // child of the test process).
    let mut status = 0;
    // SAFETY: plain out-parameters.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    let out = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out,
        stderr: err,
    };
    (out, usage.ru_maxrss)
}

/// A snapshot whose `store` is a link out of it, whose index links to a
/// FIFO, or that holds an 8 GiB sparse index in a few KB: refused with
/// the reason, at once, in little memory, nothing left in `$TMPDIR`.
#[test]
fn hostile_snapshots_are_refused() {
    use tar::EntryType as T;
    let env = Env::new();
    let outside = env.dir().join("outside");
    three_samples(&outside);
    let fifo = env.dir().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let tmpdir = tempfile::tempdir().unwrap();
    let snap = env.dir().join("snap");
    let cases: &[(&[Crafted], &Path, &str)] = &[
        (
            &[("store", T::Symlink, 0o777, b"")],
            &outside,
            "entry store is not a regular file or directory",
        ),
        (
            &[
                ("store/", T::Directory, 0o777, b""),
                ("store/index_01728000000", T::Symlink, 0o777, b""),
            ],
            &fifo,
            "entry store/index_01728000000 is not a regular file or directory",
        ),
        (
            &[
                ("store/", T::Directory, 0o777, b""),
                ("store/index_01728000000", T::GNUSparse, 0o777, &[7; 512]),
            ],
            &fifo,
            "(GNUSparse)",
        ),
    ];
    for (entries, target, want) in cases {
        crafted_tar(&snap, entries, target);
        let start = Instant::now();
        let (out, rss_kib) = dump_snapshot(&env, &snap, tmpdir.path());
        assert_eq!(
            out.status.code(),
            Some(1),
            "{entries:?}: {}",
            stderr_of(&out)
        );
        assert!(
            stderr_of(&out).contains(want),
            "{entries:?}: {}",
            stderr_of(&out)
        );
        assert!(start.elapsed() < Duration::from_secs(20));
        assert!(rss_kib < 200 << 10, "{entries:?}: {rss_kib} KiB");
        let left: Vec<_> = fs::read_dir(tmpdir.path()).unwrap().collect();
        assert!(left.is_empty(), "{entries:?} left {left:?}");
    }
}

/// SIGTERM, SIGINT or SIGKILL while `dump --snapshot` runs (held here by
/// a FIFO as its output): its temporary directories are removed.
#[test]
fn temporary_directories_go_however_dump_ends() {
    let env = Env::new();
    three_samples(&env.store());
    let snap = env.dir().join("snap");
    let (b, e) = ((BASE + 1).to_string(), (BASE + 3).to_string());
    env.run(&["snapshot", "-b", &b, "-e", &e, "-o", snap.to_str().unwrap()]);
    let out = env.dir().join("out");
    nix::unistd::mkfifo(&out, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGKILL] {
        let tmpdir = tempfile::tempdir().unwrap();
        let mut child = Command::new(BELOW)
            .args(["--config", env.dir().join("below.conf").to_str().unwrap()])
            .args(["dump", "--snapshot", snap.to_str().unwrap(), "system"])
            .args(["-b", &b, "-e", &e, "-o", out.to_str().unwrap()])
            .env("TMPDIR", tmpdir.path())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Unpacking (and rewriting), then blocked opening the FIFO.
        let entries = || {
            fs::read_dir(tmpdir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        assert!(wait_until(Duration::from_secs(20), || !entries().is_empty()));
        std::thread::sleep(Duration::from_secs(1));
        // SAFETY: a child of ours, still running.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(signal));
        assert!(
            wait_until(Duration::from_secs(10), || entries().is_empty()),
            "after signal {signal}: {:?}",
            entries()
        );
    }
}

/// `backends` prints records read from a file in the store: a kernel
/// release and a cgroup root planted with escape sequences are printed
/// escaped.
#[test]
fn backends_prints_records_escaped() {
    let env = Env::new();
    let plan = bstats_collector::Plan::choose(
        bstats_collector::BackendChoice::Read,
        &Err(bstats_collector::NotServed::Unavailable(
            "no\x1b[2J bpf".into(),
        )),
        &Err(bstats_collector::NotServed::NotAskedFor),
    )
    .unwrap();
    fs::create_dir_all(env.store()).unwrap();
    bstats_store::append_backend_record(
        &env.store(),
        &bstats_store::BackendRecord {
            since: 1,
            kernel: format!("7.3{TITLE}"),
            cgroup_root: PathBuf::from(format!("/sys/fs/cgroup{ARGV}")),
            plan,
            processes: None,
        },
    )
    .unwrap();
    let out = env.run(&["backends"]);
    let bad = control_bytes(&out.stdout);
    assert!(bad.is_empty(), "backends printed {bad:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("kernel 7.3\\x1b]0;TITLE\\x07"), "{text}");
    assert!(text.contains("/sys/fs/cgroup\\x1b]0;pwned"), "{text}");
}
