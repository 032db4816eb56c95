//! The cgroups under test: N cgroups nested 3 levels deep below
//! `<root>/bstats-bench-<pid>`, some running a process that holds memory
//! and has used CPU. Removed on drop, bottom-up, even when the run fails.

use std::io::BufRead;
use std::io::BufReader;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

const PREFIX: &str = "bstats-bench-";
const CONTROLLERS: [&str; 4] = ["cpu", "memory", "io", "pids"];

pub struct Fixture {
    top: PathBuf,
    /// Created cgroups, parents before children.
    dirs: Vec<PathBuf>,
    holders: Vec<Child>,
}

/// Smallest fanout f with f + f² + f³ >= n: three full-ish levels.
fn fanout(n: usize) -> usize {
    (1..).find(|f| f + f * f + f * f * f >= n).unwrap_or(1)
}

/// Enables on `dir`'s children whichever of our controllers `dir` has.
fn enable_controllers(dir: &Path) -> Result<()> {
    let have = std::fs::read_to_string(dir.join("cgroup.controllers"))?;
    let want: Vec<String> = have
        .split_whitespace()
        .filter(|c| CONTROLLERS.contains(c))
        .map(|c| format!("+{c}"))
        .collect();
    if !want.is_empty() {
        std::fs::write(dir.join("cgroup.subtree_control"), want.join(" "))
            .with_context(|| format!("Failed to enable {:?} in {}", want, dir.display()))?;
    }
    Ok(())
}

impl Fixture {
    /// Creates `n` cgroups and starts `holders` processes (this binary's
    /// `__hold` mode) in leaves spread over the tree.
    pub fn create(root: &Path, n: usize, holders: usize, hold_mb: usize) -> Result<Fixture> {
        remove_stale(root);
        let top = root.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir(&top)
            .with_context(|| format!("Failed to create cgroup {}", top.display()))?;
        let mut fx = Fixture {
            top: top.clone(),
            dirs: Vec::with_capacity(n),
            holders: Vec::new(),
        };
        enable_controllers(&top)?;
        // Breadth-first, so the first n of the f + f² + f³ slots fill the
        // upper levels completely.
        let f = fanout(n);
        let mut level = vec![top];
        'outer: for depth in 1..=3 {
            let mut next = Vec::new();
            for parent in &level {
                for i in 0..f {
                    if fx.dirs.len() == n {
                        break 'outer;
                    }
                    // Only on cgroups that get children: one with
                    // controllers on for children cannot hold processes.
                    if i == 0 && depth > 1 {
                        enable_controllers(parent)?;
                    }
                    let d = parent.join(format!("l{depth}-{i:03}"));
                    std::fs::create_dir(&d)
                        .with_context(|| format!("Failed to create cgroup {}", d.display()))?;
                    fx.dirs.push(d.clone());
                    next.push(d);
                }
            }
            level = next;
        }
        // (A set: comparing every pair is minutes at 10,000 under TCG.)
        let parents: std::collections::HashSet<&Path> =
            fx.dirs.iter().filter_map(|d| d.parent()).collect();
        let leaves: Vec<&PathBuf> = fx
            .dirs
            .iter()
            .filter(|d| !parents.contains(d.as_path()))
            .collect();
        let want = holders.min(leaves.len());
        let chosen: Vec<PathBuf> = (0..want)
            .map(|i| leaves[i * leaves.len() / want].clone())
            .collect();
        for leaf in chosen {
            fx.holders.push(spawn_holder(&leaf, hold_mb)?);
        }
        Ok(fx)
    }

    pub fn created(&self) -> usize {
        self.dirs.len()
    }
}

fn spawn_holder(cgroup: &Path, mb: usize) -> Result<Child> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("__hold")
        .arg(cgroup)
        .arg(mb.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("Failed to start a holder process")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        bail!("holder in {} did not start", cgroup.display());
    }
    Ok(child)
}

/// The `__hold` mode: join `cgroup`, touch `mb` MiB, burn some CPU, then
/// wait for stdin to close (the benchmark ending, or dying).
pub fn hold(cgroup: &Path, mb: usize) -> Result<()> {
    std::fs::write(cgroup.join("cgroup.procs"), "0")
        .with_context(|| format!("Failed to join {}", cgroup.display()))?;
    let mut mem = vec![0u8; mb << 20];
    for (i, page) in mem.chunks_mut(4096).enumerate() {
        page[0] = i as u8;
    }
    let t = Instant::now();
    let mut x = 1u64;
    while t.elapsed() < Duration::from_millis(20) {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    std::hint::black_box((x, &mem));
    let mut out = std::io::stdout();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    Ok(())
}

/// rmdir that waits out a cgroup still draining its exited processes.
fn rmdir_patiently(d: &Path) {
    for _ in 0..100 {
        match std::fs::remove_dir(d) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    eprintln!("cgroup-bench: could not remove cgroup {}", d.display());
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // (Holders of a run that dies without dropping this see stdin
        // close and exit on their own.)
        for h in &mut self.holders {
            let _ = h.kill();
            let _ = h.wait();
        }
        for d in self.dirs.iter().rev() {
            rmdir_patiently(d);
        }
        rmdir_patiently(&self.top);
    }
}

/// Removes trees left by benchmark runs that were killed (their pid is gone).
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        remove_tree(&e.path());
    }
}

fn remove_tree(d: &Path) {
    if let Ok(entries) = std::fs::read_dir(d) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    rmdir_patiently(d);
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn fanout_covers_three_levels() {
        assert_eq!(fanout(10), 2);
        assert_eq!(fanout(14), 2);
        assert_eq!(fanout(1000), 10);
        assert_eq!(fanout(5000), 17);
    }
}
