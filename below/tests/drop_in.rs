//! Host integration tests of what makes ours a drop-in for below 0.9:
//! recording through a full disk, the skew warning, remote refusal, and
//! snapshots that below 0.9 (built from crates.io by
//! tests/reference/below09.sh) and ours read from each other. Needs root
//! (tmpfs mounts).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

mod common;

use common::Env;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A tmpfs mounted on `dir` (created), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={}", size), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs on {} (are you root?)", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A background `below record`, SIGTERMed on drop; stderr goes to a file.
struct Recording {
    child: Child,
    log: PathBuf,
}

impl Recording {
    fn start(env: &Env, args: &[&str]) -> Recording {
        let log = env.dir().join("record.log");
        let child = env
            .below(&[&["record"], args].concat())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Recording { child, log }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap()
    }

    fn assert_running(&mut self) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "record exited:\n{}",
            self.log()
        );
    }

    /// SIGTERM; returns whether it exited cleanly.
    fn stop(&mut self) -> bool {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.child.wait().unwrap().success()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Timestamps of the samples `below dump system` shows in [begin, end]
/// (none if it finds none).
fn sample_times(env: &Env, begin: u64, end: u64) -> Vec<u64> {
    let out = env
        .below(&[
            "dump",
            "system",
            "-b",
            &begin.to_string(),
            "-e",
            &end.to_string(),
            "-f",
            "timestamp",
            "-O",
            "csv",
        ])
        .output()
        .unwrap();
    if !out.status.success() {
        assert!(
            stderr_of(&out).contains("No initial sample"),
            "{}",
            stderr_of(&out)
        );
        return vec![];
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(',').parse().ok())
        // dump may start at the sample before `begin`.
        .filter(|t| (begin..=end).contains(t))
        .collect()
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    f()
}

#[test]
fn record_outlives_a_full_disk() {
    let env = Env::new();
    let _fs = Tmpfs::mount(&env.store(), "6m");
    let t_start = now_secs();
    // Dictionary compression: the failed chunk must not spoil the next.
    let mut rec = Recording::start(
        &env,
        &["-i", "1", "--compress", "--dict-compress-chunk-size", "4"],
    );
    assert!(
        wait_until(Duration::from_secs(30), || sample_times(
            &env,
            t_start,
            now_secs()
        )
        .len()
            >= 3),
        "no samples before the disk filled:\n{}",
        rec.log()
    );

    // Fill the file system to the last byte.
    let t_filling = now_secs();
    let filler = env.store().join("filler");
    let mut f = fs::File::create(&filler).unwrap();
    let chunk = vec![0xa5u8; 64 << 10];
    let e = loop {
        if let Err(e) = f.write_all(&chunk) {
            break e;
        }
    };
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{}", e);
    drop(f);
    let t_full = now_secs();
    let full = Instant::now();
    // At least 10 s and 10 failed writes.
    std::thread::sleep(Duration::from_secs(10));
    wait_until(Duration::from_secs(30), || {
        rec.log().contains("has failed 10 times")
    });
    assert!(full.elapsed() >= Duration::from_secs(10));
    rec.assert_running();
    let log = rec.log();
    let reported = log.matches("No space left on device").count();
    assert_eq!(reported, 1, "ENOSPC logged once, then counted:\n{}", log);
    assert!(log.contains("has failed 10 times"), "{}", log);

    fs::remove_file(&filler).unwrap();
    let t_freed = now_secs();
    assert!(
        wait_until(Duration::from_secs(20), || sample_times(
            &env,
            t_freed,
            now_secs()
        )
        .len()
            >= 2),
        "no samples after space came back:\n{}",
        rec.log()
    );
    assert!(rec.stop(), "record did not exit cleanly:\n{}", rec.log());
    let log = rec.log();
    assert!(log.contains("works again after"), "{}", log);

    let times = sample_times(&env, t_start, now_secs());
    let before = times.iter().filter(|t| **t <= t_filling).count();
    let during = times
        .iter()
        .filter(|t| **t > t_full + 1 && **t < t_freed)
        .count();
    let after = times.iter().filter(|t| **t >= t_freed).count();
    assert!(before >= 3 && after >= 2, "{:?}", times);
    assert_eq!(during, 0, "samples while the disk was full: {:?}", times);
}

#[test]
fn skew_warning_follows_the_threshold() {
    let env = Env::new();
    let out = env.run(&[
        "record",
        "--count",
        "2",
        "-i",
        "1",
        "--skew-detection-threshold-ms",
        "0",
    ]);
    let log = stderr_of(&out);
    assert_eq!(
        log.matches("data collection took ").count(),
        2,
        "one warning per sample:\n{}",
        log
    );
    assert!(log.contains(" ms (>= 0 ms)"), "{}", log);
    let out = env.run(&[
        "record",
        "--count",
        "1",
        "--skew-detection-threshold-ms",
        "600000",
    ]);
    assert!(!stderr_of(&out).contains("data collection took"));
}

#[test]
fn remote_hosts_are_refused_like_below() {
    let env = Env::new();
    for args in [
        &["live", "-s", "somehost"][..],
        &[
            "replay", "-t", "1m ago", "--host", "somehost", "--port", "1",
        ],
        &["dump", "-s", "somehost", "system", "-b", "1m ago"],
        &["snapshot", "-b", "1m ago", "-s", "somehost"],
        &[
            "debug",
            "convert-store",
            "-b",
            "1m ago",
            "--to-store-dir",
            "/nonexistent",
            "-s",
            "somehost",
        ],
    ] {
        let out = env.below(args).output().unwrap();
        assert!(!out.status.success(), "{:?} succeeded", args);
        assert!(
            stderr_of(&out).contains("Remote client not supported"),
            "{:?}: {}",
            args,
            stderr_of(&out)
        );
    }
    // --port needs --host, as in below.
    assert!(!env
        .below(&["live", "--port", "1"])
        .status()
        .unwrap()
        .success());
}

/// below 0.9.0 from crates.io, with a private config of its own.
struct Below09 {
    bin: PathBuf,
    conf: PathBuf,
    store: PathBuf,
    _dir: tempfile::TempDir,
}

impl Below09 {
    fn new() -> Below09 {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/reference/below09.sh");
        let out = Command::new(script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "tests/reference/below09.sh failed");
        let bin = PathBuf::from(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .last()
                .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("below.conf");
        let store = dir.path().join("store");
        fs::write(
            &conf,
            format!(
                "log_dir = {:?}\nstore_dir = {:?}\ncgroup_root = {:?}\n",
                dir.path().join("log"),
                store,
                bpf_stats::find_cgroup2_mount().unwrap()
            ),
        )
        .unwrap();
        Below09 {
            bin,
            conf,
            store,
            _dir: dir,
        }
    }

    fn below(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--config").arg(&self.conf).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let out = self.below(args).output().unwrap();
        assert!(
            out.status.success(),
            "below 0.9 {:?} failed: {}",
            args,
            stderr_of(&out)
        );
        out
    }
}

/// `dump <kind>` of a snapshot (or, with None, of the store) over
/// [begin, end], by `dumper`.
fn dump_snapshot(
    dumper: &dyn Fn(&[&str]) -> std::process::Output,
    snapshot: Option<&Path>,
    kind: &str,
    begin: u64,
    end: u64,
) -> String {
    let snapshot = snapshot.map(|s| s.to_str().unwrap());
    let from = match &snapshot {
        Some(s) => vec!["--snapshot", s],
        None => vec![],
    };
    let out = dumper(
        &[
            &["dump"][..],
            &from,
            &[
                kind,
                "-b",
                &begin.to_string(),
                "-e",
                &end.to_string(),
                "--everything",
                "-O",
                "json",
            ],
        ]
        .concat(),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The number of rows with a timestamp in a JSON dump.
fn rows(json: &str) -> usize {
    json.matches("\"Timestamp\"").count()
}

#[test]
fn snapshots_interoperate_with_below_0_9() {
    let b09 = Below09::new();
    let env = Env::new();
    let dir = env.dir();

    // Ours records, ours snapshots, both dump.
    let begin = now_secs();
    env.run(&["record", "-i", "1", "--count", "4"]);
    let end = now_secs();
    let ours = dir.join("ours.snapshot");
    env.run(&[
        "snapshot",
        "-b",
        &begin.to_string(),
        "-e",
        &end.to_string(),
        "-o",
        ours.to_str().unwrap(),
    ]);
    for kind in ["system", "cgroup", "process"] {
        let by_ours = dump_snapshot(&|a| env.run(a), Some(&ours), kind, begin, end);
        let by_b09 = dump_snapshot(&|a| b09.run(a), Some(&ours), kind, begin, end);
        assert!(rows(&by_ours) >= 3, "{} rows: {}", kind, by_ours);
        assert_eq!(by_ours, by_b09, "dump {} of our snapshot differs", kind);
        let store = dump_snapshot(&|a| env.run(a), None, kind, begin, end);
        assert_eq!(by_ours, store, "dump {}: our snapshot != our store", kind);
    }

    // below 0.9 records (until stopped: it has no --count) and snapshots.
    let begin = now_secs();
    let mut rec = b09
        .below(&["record", "-i", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let enough = wait_until(Duration::from_secs(60), || {
        fs::read_dir(&b09.store).is_ok_and(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("index_"))
                .any(|e| e.metadata().is_ok_and(|m| m.len() >= 4 * 32))
        })
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rec.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    rec.wait().unwrap();
    assert!(enough, "below 0.9 recorded fewer than 4 samples");
    let end = now_secs();
    let theirs = dir.join("theirs.snapshot");
    b09.run(&[
        "snapshot",
        "-b",
        &begin.to_string(),
        "-e",
        &end.to_string(),
        "-o",
        theirs.to_str().unwrap(),
    ]);
    for kind in ["system", "cgroup", "process"] {
        let by_ours = dump_snapshot(&|a| env.run(a), Some(&theirs), kind, begin, end);
        let by_b09 = dump_snapshot(&|a| b09.run(a), Some(&theirs), kind, begin, end);
        assert!(rows(&by_b09) >= 3, "{} rows: {}", kind, by_b09);
        assert_eq!(
            by_ours, by_b09,
            "dump {} of below 0.9's snapshot differs",
            kind
        );
        let store = dump_snapshot(&|a| b09.run(a), None, kind, begin, end);
        assert_eq!(
            by_ours, store,
            "dump {}: below 0.9's snapshot != its store",
            kind
        );
    }
}

#[test]
fn debug_dump_store_and_convert_store() {
    let env = Env::new();
    let begin = now_secs();
    env.run(&["record", "-i", "1", "--count", "3"]);
    let end = now_secs();
    let times = sample_times(&env, begin, end);
    assert!(times.len() >= 2, "{:?}", times);

    let out = env.run(&["debug", "dump-store", "-t", &times[0].to_string(), "-j"]);
    let frame: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(frame["sample"]["cgroup"].is_object(), "{}", frame);
    let out = env
        .below(&["debug", "dump-store", "-t", &(begin - 3600).to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("Exact requested timestamp not found"));

    let to = env.dir().join("converted");
    env.run(&[
        "debug",
        "convert-store",
        "-b",
        &begin.to_string(),
        "-e",
        &end.to_string(),
        "--to-store-dir",
        to.to_str().unwrap(),
        "--compress",
        "--dict-compress-chunk-size",
        "2",
    ]);
    let dump = |store: &Path| {
        let out = env.run(&[
            "--store-dir",
            store.to_str().unwrap(),
            "dump",
            "cgroup",
            "-b",
            &begin.to_string(),
            "-e",
            &end.to_string(),
            "--everything",
            "-O",
            "json",
        ]);
        String::from_utf8(out.stdout).unwrap()
    };
    let original = dump(&env.store());
    assert!(rows(&original) >= 2, "{}", original);
    assert_eq!(original, dump(&to), "the converted store dumps the same");
}
