//! A recorder child process of the benchmark: its last words, its stop.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use anyhow::bail;
use anyhow::Result;

/// Fails with the recorder's last words (the last non-empty line of its
/// stderr file) if it exited.
pub fn check_alive(child: &mut Child, stderr: &Path) -> Result<()> {
    if let Some(st) = child.try_wait()? {
        let err = std::fs::read_to_string(stderr).unwrap_or_default();
        let why = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("recorder exited ({st}): {why}");
    }
    Ok(())
}

/// SIGTERM (below finishes its sample), then SIGKILL after `patience`.
pub fn stop(child: &mut Child, patience: Duration) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let step = Duration::from_millis(100);
    for _ in 0..patience.as_millis() / step.as_millis() {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(step);
    }
    let _ = child.kill();
    let _ = child.wait();
}
