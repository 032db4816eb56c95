//! Host integration tests of what makes ours a drop-in for below 0.9 when
//! recording: through a full disk, the skew warning, remote refusal. Needs
//! root (tmpfs mounts). Snapshots and store tools are in stores.rs.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

mod common;

use common::now_secs;
use common::sample_times;
use common::stderr_of;
use common::wait_until;
use common::Env;

/// Whether `below dump` shows `n` samples since `since` within `timeout`.
fn wait_for_samples(env: &Env, since: u64, n: usize, timeout: Duration) -> bool {
    wait_until(timeout, || sample_times(env, since, now_secs()).len() >= n)
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

#[test]
fn record_outlives_a_full_disk() {
    if bstats_testkit::skip_unless_root("mounts a tmpfs") {
        return;
    }
    let env = Env::new();
    let _fs = Tmpfs::mount(&env.store(), "6m");
    let t_start = now_secs();
    // Dictionary compression: the failed chunk must not spoil the next.
    let mut rec = Recording::start(
        &env,
        &["-i", "1", "--compress", "--dict-compress-chunk-size", "4"],
    );
    assert!(
        wait_for_samples(&env, t_start, 3, Duration::from_secs(30)),
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
        wait_for_samples(&env, t_freed, 2, Duration::from_secs(20)),
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
