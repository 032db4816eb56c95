//! Private temporary directories that do not outlive the process, however
//! it ends. A snapshot is unpacked (and a store rewritten) into one; the
//! guard removes it on return, error and panic, but a signal (SIGTERM,
//! Ctrl-C, SIGHUP), an abort or SIGKILL ends the process without running
//! any of our code. So each directory also has a watcher: a `sh` in its own
//! process group (a Ctrl-C at the terminal does not reach it) waiting on a
//! pipe only we hold. When we are gone, however we went, the pipe closes
//! and the watcher removes the directory.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::process::ChildStdin;
use std::process::Command;
use std::process::Stdio;

use anyhow::Context;
use anyhow::Result;

use crate::private;

pub struct TempDir {
    dir: Option<tempfile::TempDir>,
    watcher: Option<(Child, ChildStdin)>,
}

/// A new 0700 directory in `$TMPDIR` named `<prefix><random>`, removed when
/// the guard drops or the process ends. Without `sh` it is removed only
/// when the guard drops.
pub fn private_tempdir(prefix: &str) -> Result<TempDir> {
    private_tempdir_in(&std::env::temp_dir(), prefix)
}

/// [`private_tempdir`] in `parent`.
pub fn private_tempdir_in(parent: &Path, prefix: &str) -> Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .permissions(private::dir_permissions())
        .tempdir_in(parent)
        .with_context(|| {
            format!(
                "Failed to create a temporary directory in {}",
                parent.display()
            )
        })?;
    let watcher = Command::new("/bin/sh")
        .args(["-c", "read -r _; rm -rf -- \"$1\"", "below-tmp-watcher"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
        .and_then(|mut c| {
            let stdin = c.stdin.take()?;
            Some((c, stdin))
        });
    Ok(TempDir {
        dir: Some(dir),
        watcher,
    })
}

impl TempDir {
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("until dropped").path()
    }

    /// Whether a watcher removes the directory if we are killed.
    pub fn watched(&self) -> bool {
        self.watcher.is_some()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Removed here first: the watcher then finds nothing to remove.
        drop(self.dir.take());
        if let Some((mut child, mut stdin)) = self.watcher.take() {
            let _ = stdin.write_all(b"\n");
            drop(stdin);
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn removed_on_drop_and_when_the_watcher_is_released() {
        let d = private_tempdir("tmp_test.").unwrap();
        assert!(d.watched());
        let p = d.path().to_path_buf();
        std::fs::write(p.join("f"), "x").unwrap();
        drop(d);
        assert!(!p.exists());

        // What the watcher does when we die: our end of its pipe closes
        // without the guard removing anything.
        let mut d = private_tempdir("tmp_test.").unwrap();
        let p = d.dir.take().unwrap().keep();
        std::fs::create_dir(p.join("sub")).unwrap();
        let (mut child, stdin) = d.watcher.take().unwrap();
        drop(stdin);
        child.wait().unwrap();
        assert!(!p.exists(), "the watcher removed {}", p.display());
    }
}
