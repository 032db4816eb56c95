//! What the host integration tests share: the binary under test and a
//! private config, and helpers to wait for and read what it recorded.
#![allow(dead_code)] // each test crate uses its own part

use std::fs;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

pub const BELOW: &str = env!("CARGO_BIN_EXE_below");

/// A private config (log and store dirs in a tempdir).
pub struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self::with_config("")
    }

    /// With `extra` appended to the config (keys of ours, tables).
    pub fn with_config(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("below.conf"),
            format!(
                "log_dir = {:?}\nstore_dir = {:?}\n{}",
                dir.path().join("log"),
                dir.path().join("store"),
                extra
            ),
        )
        .unwrap();
        Env { dir }
    }

    /// The private directory holding the config, logs and store.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    pub fn below(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BELOW);
        c.arg("--config").arg(self.dir.path().join("below.conf"));
        c.args(args);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        run_ok(self.below(args), "below", args)
    }

    /// The shell command line for tmux.
    pub fn command_line(&self, args: &[&str]) -> String {
        let mut s = format!(
            "{} --config {}",
            BELOW,
            self.dir.path().join("below.conf").display()
        );
        for a in args {
            s.push_str(&format!(" '{}'", a));
        }
        s
    }
}

/// Runs `cmd` (`who` with `args`), asserting it succeeds.
pub fn run_ok(mut cmd: Command, who: &str, args: &[&str]) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{} {:?} failed: {}",
        who,
        args,
        stderr_of(&out)
    );
    out
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Timestamps of the samples `below dump system` shows in [begin, end]
/// (none if it finds none).
pub fn sample_times(env: &Env, begin: u64, end: u64) -> Vec<u64> {
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
        // Nothing before `begin`, or the first sample after it is past
        // `end` (it was written as the range was asked for).
        let err = stderr_of(&out);
        assert!(
            err.contains("No initial sample")
                || err.contains("No samples found in desired time range"),
            "{err}"
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

pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    f()
}
