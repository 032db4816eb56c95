//! A recorder as a process of the benchmark: started in a cgroup of its
//! own (what systemd charges a service) and confined to the chosen CPUs,
//! watched while it records, stopped; what it leaves: its store, its
//! `--phase-times` records, its command line for the report.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
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
use bstats_store::reader;
use bstats_store::reader::StoreSize;

use crate::recorders::RecorderSpec;

/// A recorder process with its own store, config, log and cgroup; stopped
/// (and its cgroup removed) on drop.
pub struct Running {
    pub child: Child,
    pub dir: tempfile::TempDir,
    cgroup: PathBuf,
}

/// The CPUs every recorder is confined to (`--bill-cpus`; none: any).
#[derive(Clone, Copy, Default)]
pub struct Cpus(Option<libc::cpu_set_t>);

impl Cpus {
    pub fn new(cpus: &[usize]) -> Result<Cpus> {
        if cpus.is_empty() {
            return Ok(Cpus(None));
        }
        let max = libc::CPU_SETSIZE as usize;
        if let Some(c) = cpus.iter().find(|&&c| c >= max) {
            bail!("--bill-cpus: CPU {c} is beyond the {max} a CPU set holds");
        }
        // SAFETY: a zeroed cpu_set_t is the empty set, and every index set
        // is within it (checked above).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        Ok(Cpus(Some(set)))
    }
}

impl Running {
    /// Starts `r` on `root`, confined to `cpus`.
    pub fn start(r: &RecorderSpec, root: &Path, cpus: Cpus) -> Result<Running> {
        let dir = tempfile::tempdir()?;
        let store = dir.path().join("store");
        let config = dir.path().join("below.conf");
        let phases = dir.path().join("phases.jsonl");
        std::fs::write(
            &config,
            format!(
                "store_dir = {:?}\nlog_dir = {:?}\ncgroup_root = {:?}\n{}",
                store,
                dir.path().join("log"),
                root,
                r.config
            ),
        )?;
        let fill = |a: &String| {
            a.replace("{config}", &config.display().to_string())
                .replace("{store}", &store.display().to_string())
                .replace("{root}", &root.display().to_string())
                .replace("{phases}", &phases.display().to_string())
        };
        let argv: Vec<String> = r.argv.iter().map(fill).collect();
        let mut cmd = Command::new(&argv[0]);
        // Its own cgroup from before exec, so every process it starts is
        // charged to it, as systemd charges a service.
        let cgroup = root.join(format!("bstats-bill-{}-{}", std::process::id(), r.key));
        std::fs::create_dir(&cgroup)
            .with_context(|| format!("Failed to create cgroup {}", cgroup.display()))?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(cgroup.join("cgroup.procs"))?;
        let procs_fd = procs.as_raw_fd();
        // SAFETY: write(2) is async-signal-safe; the fd stays open until
        // spawn returns (`procs` lives past it). "0" moves the writer.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        if let Some(set) = cpus.0 {
            // SAFETY: sched_setaffinity is async-signal-safe and `set` is
            // a copy owned by the closure.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        }
        let child = cmd
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr"))?)
            .spawn()
            .with_context(|| format!("Failed to start {}", argv[0]));
        drop(procs);
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir(&cgroup);
                return Err(e);
            }
        };
        Ok(Running { child, dir, cgroup })
    }

    /// CPU of the recorder's cgroup so far, its children included.
    pub fn service_cpu(&self) -> Result<Duration> {
        let stat = std::fs::read_to_string(self.cgroup.join("cpu.stat"))?;
        let usec = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .context("cpu.stat has no usage_usec")?
            .trim()
            .parse()?;
        Ok(Duration::from_micros(usec))
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// What its store holds so far: nothing until the recorder made it.
    pub fn store_size(&self) -> StoreSize {
        reader::store_size(&self.store()).unwrap_or_default()
    }

    /// Its `--phase-times` records so far.
    pub fn phase_times(&self) -> Result<Vec<bstats_model::SampleCost>> {
        read_phase_times(&self.dir.path().join("phases.jsonl"))
    }

    /// Fails with the recorder's last words if it exited.
    pub fn check_alive(&mut self) -> Result<()> {
        crate::child::check_alive(&mut self.child, &self.dir.path().join("stderr"))
    }

    /// Waits until the store holds `n` samples.
    pub fn wait_for_samples(&mut self, n: u64, timeout: Duration) -> Result<()> {
        let t = Instant::now();
        while self.store_size().samples < n {
            crate::check_interrupted()?;
            self.check_alive()?;
            if t.elapsed() > timeout {
                bail!("fewer than {n} samples after {} s", timeout.as_secs());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Sleeps `d`, failing early if the recorder dies or we are interrupted.
    pub fn watch(&mut self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            crate::check_interrupted()?;
            self.check_alive()?;
            std::thread::sleep((end - Instant::now()).min(Duration::from_millis(200)));
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL after a minute (a large sample may be late).
    pub fn stop(&mut self) {
        crate::child::stop(&mut self.child, Duration::from_secs(60));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
        // Empty once the recorder is reaped (its children exit with it).
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// A `/proc/<pid>/status` field in KiB (VmHWM, VmRSS).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The records of a `--phase-times` file; none when there is no file (a
/// recorder that does not write one).
pub fn read_phase_times(path: &Path) -> Result<Vec<bstats_model::SampleCost>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("Failed to read {}", path.display())),
    };
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: malformed record", path.display(), i + 1))
        })
        .collect()
}

/// `words` as one shell command line.
pub fn sh_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./,=:".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
