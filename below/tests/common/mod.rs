//! What the host integration tests share: the binary under test and a
//! private config.
#![allow(dead_code)] // each test crate uses its own part

use std::fs;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;

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
        let out = self.below(args).output().unwrap();
        assert!(
            out.status.success(),
            "below {:?} failed: {}",
            args,
            String::from_utf8_lossy(&out.stderr)
        );
        out
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
