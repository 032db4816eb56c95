//! Processes for below's sample without /proc text: one pass of a
//! sleepable BPF task iterator (`iter.s/task`) prints every task's
//! numbers; user space sums each thread group as /proc/PID/stat does and
//! fills below's `procfs::PidInfo` unchanged — every field fb_procfs
//! fills. The exe link is read once per process image (cached by pid,
//! start time and the executable's inode); cgroup paths from the cgroup id,
//! resolved once per cgroup from a process in it.
//!
//! What a kernel lacks is found by the program itself (CO-RE facts in the
//! pass's first record); `ProcessBackend::Auto` falls back to fb_procfs
//! with the reason. A few values go to /proc per process, each with its
//! flag in the record: kernel threads whose /proc name is not `comm`,
//! command lines that could not be copied, NStgid deeper than NS_LEVELS.

mod decode;
mod load;

#[cfg(test)]
mod decode_test;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/task_stats.skel.rs"));
}

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::path::PathBuf;

use anyhow::bail;
use anyhow::Result;

use decode::Units;
use skel::types::proc_flags;
use skel::types::task_fact;

/// What the user asked for (`--process-backend`, config `process_backend`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ProcessBackend {
    /// BPF where the kernel allows it, else procfs (with the reason).
    #[default]
    Auto,
    /// BPF or fail with the reason.
    Bpf,
    /// fb_procfs: /proc text, as below 0.9.
    Procfs,
}

/// The name `--process-backend` takes.
impl fmt::Display for ProcessBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = clap::ValueEnum::to_possible_value(self).expect("no value is skipped");
        f.write_str(name.get_name())
    }
}

/// The facts without which the records cannot give what /proc prints,
/// with what each is.
const REQUIRED: &[(task_fact, &str)] = &[
    (
        task_fact::FACT_TASK_STATE,
        "struct member task_struct.__state",
    ),
    (
        task_fact::FACT_TASK_CPU,
        "struct member task_struct.thread_info.cpu",
    ),
    (
        task_fact::FACT_START_BOOTTIME,
        "struct member task_struct.start_boottime",
    ),
    (
        task_fact::FACT_PREV_CPUTIME,
        "struct member signal_struct.prev_cputime (CONFIG_VIRT_CPU_ACCOUNTING_NATIVE has none)",
    ),
    (task_fact::FACT_TGID_PID, "signal_struct.pids[PIDTYPE_TGID]"),
];

/// Why the facts of a pass are not enough, or None.
fn missing(facts: u32) -> Option<String> {
    let has = |f: task_fact| facts & f.0 != 0;
    let mut lacks: Vec<&str> = REQUIRED
        .iter()
        .filter(|(f, _)| !has(*f))
        .map(|(_, what)| *what)
        .collect();
    let percpu = has(task_fact::FACT_RSS_PERCPU);
    if !percpu && !has(task_fact::FACT_RSS_ATOMIC) {
        lacks.push("a known mm_struct.rss_stat layout");
    }
    if percpu && !has(task_fact::FACT_PER_CPU_OFFSET) {
        lacks.push("the per-CPU offsets (struct bpf_array.pptrs; at most 1024 CPUs) to sum the per-CPU rss counters as /proc/PID/status does");
    }
    (!lacks.is_empty()).then(|| format!("kernel lacks {}", lacks.join(", ")))
}

/// Which backend reads processes, and why (`below backends`, the store's
/// record of each run).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Bpf or Procfs, never Auto.
    pub backend: ProcessBackend,
    pub reason: String,
}

/// "bpf: why", for people.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.reason)
    }
}

/// Reads every process's `PidInfo`, from BPF or from procfs.
pub struct Processes {
    plan: Plan,
    bpf: Option<BpfProcesses>,
}

impl Processes {
    /// Probes what `choice` allows on this kernel. `cgroup_root`: the
    /// cgroup2 directory process cgroup paths are relative to (as in
    /// /proc/PID/cgroup when it is the cgroup namespace's root). Err only
    /// for `Bpf` when BPF cannot serve, with the reason.
    pub fn new(choice: ProcessBackend, cgroup_root: &Path) -> Result<Self> {
        let (bpf, plan) = match choice {
            ProcessBackend::Procfs => (
                None,
                Plan {
                    backend: ProcessBackend::Procfs,
                    reason: "asked for (--process-backend procfs)".into(),
                },
            ),
            _ => match BpfProcesses::new(cgroup_root) {
                Ok(b) => (
                    Some(b),
                    Plan {
                        backend: ProcessBackend::Bpf,
                        reason: "task iterator: stat, status, io, cgroup and cmdline from one pass; exe read once per process image".into(),
                    },
                ),
                Err(e) if choice == ProcessBackend::Auto => (
                    None,
                    Plan {
                        backend: ProcessBackend::Procfs,
                        reason: format!("{e:#}"),
                    },
                ),
                Err(e) => return Err(e.context("--process-backend bpf cannot run")),
            },
        };
        Ok(Processes { plan, bpf })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Every process, as `procfs.read_all_pids()` gives them (`procfs`
    /// also reads what BPF leaves to /proc).
    pub fn read_all_pids(&mut self, procfs: &procfs::ProcReader) -> Result<procfs::PidMap> {
        match &mut self.bpf {
            Some(b) => b.read_all_pids(procfs),
            None => Ok(procfs.read_all_pids()?),
        }
    }
}

/// CLOCK_BOOTTIME in whole seconds, as fb_procfs reads it.
fn uptime_secs() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64
}

/// The exe link of a process image: (start time, exe inode, exe device).
type ImageKey = (u64, u64, u64);

/// The BPF backend and its caches.
pub struct BpfProcesses {
    iter: load::TaskIter,
    out: Vec<u8>,
    units: Units,
    cgroups: CgroupPaths,
    exes: HashMap<i32, (ImageKey, Option<String>)>,
}

impl BpfProcesses {
    /// Loads the program and runs one pass to check the kernel's facts.
    pub fn new(cgroup_root: &Path) -> Result<Self> {
        let iter = load::TaskIter::load()?;
        let mut b = BpfProcesses {
            iter,
            out: Vec::new(),
            units: Units::of_this_system(),
            cgroups: CgroupPaths::new(cgroup_root),
            exes: HashMap::new(),
        };
        b.iter.pass(&mut b.out)?;
        let pass = decode::parse(&b.out)?;
        if let Some(why) = missing(pass.facts) {
            bail!(why);
        }
        Ok(b)
    }

    /// One pass; values /proc must give are read there (`procfs`), each
    /// for the processes whose record says so.
    pub fn read_all_pids(&mut self, procfs: &procfs::ProcReader) -> Result<procfs::PidMap> {
        self.iter.pass(&mut self.out)?;
        let pass = decode::parse(&self.out)?;
        if let Some(why) = missing(pass.facts) {
            bail!(why);
        }
        let uptime = uptime_secs();
        self.cgroups.next_pass();
        let mut map = procfs::PidMap::new();
        let mut seen = HashMap::with_capacity(self.exes.len());
        'procs: for (p, cmd) in &pass.procs {
            let pid = p.head.tgid;
            let threads = pass.threads.get(&pid).copied().unwrap_or_default();
            let mut info = decode::pid_info(p, &threads, pass.facts, self.units, uptime);
            let flag = |f: proc_flags| p.flags & f.0 != 0;
            // A process gone before its /proc files are read is left out,
            // as fb_procfs does.
            macro_rules! from_proc {
                ($e:expr) => {
                    match $e {
                        Ok(v) => v,
                        Err(_) => continue 'procs,
                    }
                };
            }
            if flag(proc_flags::PROC_COMM_PROC) {
                info.stat.comm = from_proc!(procfs.read_pid_stat(pid as u32)).comm;
            }
            if flag(proc_flags::PROC_NS_DEEP) {
                info.status.ns_tgid = from_proc!(procfs.read_pid_mem(pid as u32)).ns_tgid;
            }
            info.cmdline_vec = if flag(proc_flags::PROC_CMDLINE_PROC) {
                from_proc!(procfs.read_pid_cmdline(pid as u32))
            } else {
                decode::cmdline(p, cmd)
            };
            info.cgroup = match self.cgroups.path(p.cgroup_id, pid) {
                Some(path) => path,
                None => from_proc!(procfs.read_pid_cgroup(pid as u32)),
            };
            if flag(proc_flags::PROC_HAS_EXE) {
                let key = (p.start_boottime_ns, p.exe_ino, p.exe_dev);
                let exe = match self.exes.remove(&pid) {
                    Some((k, exe)) if k == key => exe,
                    // Errors are swallowed, as fb_procfs does (kernel
                    // threads, broken links).
                    _ => procfs.read_pid_exe_path(pid as u32).ok(),
                };
                info.exe_path = exe.clone();
                seen.insert(pid, (key, exe));
            }
            map.insert(pid, info);
        }
        self.exes = seen;
        Ok(map)
    }
}

/// cgroup id (the kernfs id: the directory's inode number) → path below
/// the cgroup root as /proc/PID/cgroup prints it, for the cgroups that hold
/// processes. A new id is resolved from the process that is in it: its
/// /proc/PID/cgroup, kept only if the directory there has that id (the
/// process may have moved since the pass). Walking the tree instead costs
/// a directory read per cgroup — thousands, under container churn every
/// sample — where this costs a few syscalls per new cgroup.
struct CgroupPaths {
    root: PathBuf,
    /// Ids met in this pass.
    now: HashMap<u64, String>,
    /// Ids met in the last pass; what this pass does not meet is dropped.
    last: HashMap<u64, String>,
}

impl CgroupPaths {
    fn new(root: &Path) -> Self {
        CgroupPaths {
            root: root.to_owned(),
            now: HashMap::new(),
            last: HashMap::new(),
        }
    }

    fn next_pass(&mut self) {
        self.last = std::mem::take(&mut self.now);
    }

    /// The path of cgroup `id`, which holds process `pid`; None if the
    /// process is gone.
    fn path(&mut self, id: u64, pid: i32) -> Option<String> {
        if let Some(p) = self.now.get(&id) {
            return Some(p.clone());
        }
        if let Some(p) = self.last.remove(&id) {
            self.now.insert(id, p.clone());
            return Some(p);
        }
        let path = proc_cgroup_path(Path::new(&format!("/proc/{pid}/cgroup")))?;
        if self.id_of(&path) == Some(id) {
            self.now.insert(id, path.clone());
        }
        Some(path)
    }

    fn id_of(&self, path: &str) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let dir = self.root.join(path.trim_start_matches('/'));
        std::fs::symlink_metadata(dir).ok().map(|m| m.ino())
    }
}

/// The cgroup2 path in a /proc/PID/cgroup file (its `0::` line), names
/// that are not UTF-8 converted lossily as fb_procfs's readers show them.
fn proc_cgroup_path(file: &Path) -> Option<String> {
    let text = std::fs::read(file).ok()?;
    let line = text
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"0::"))?;
    Some(String::from_utf8_lossy(line).into_owned())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn names_what_the_kernel_lacks() {
        let all = REQUIRED.iter().fold(0, |b, (f, _)| b | f.0);
        let percpu = task_fact::FACT_RSS_PERCPU.0 | task_fact::FACT_PER_CPU_OFFSET.0;
        assert_eq!(missing(all | percpu), None);
        assert_eq!(missing(all | task_fact::FACT_RSS_ATOMIC.0), None);
        let why = missing(all & !task_fact::FACT_PREV_CPUTIME.0 | percpu).unwrap();
        assert!(why.contains("signal_struct.prev_cputime"), "{why}");
        let why = missing(all).unwrap();
        assert!(why.contains("rss_stat layout"), "{why}");
        let why = missing(all | task_fact::FACT_RSS_PERCPU.0).unwrap();
        assert!(why.contains("per-CPU offsets"), "{why}");
        assert!(!why.contains("task_struct"), "{why}");
    }

    /// A directory tree stands for the cgroup tree: this process's
    /// /proc/self/cgroup path made under it gives that directory's id.
    #[test]
    fn cgroup_paths_resolve_by_process_and_check_the_id() {
        use std::os::unix::fs::MetadataExt;
        let own = proc_cgroup_path(Path::new("/proc/self/cgroup")).unwrap();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(own.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        let id = std::fs::metadata(&dir).unwrap().ino();
        let pid = std::process::id() as i32;
        let mut paths = CgroupPaths::new(root.path());
        assert_eq!(paths.path(id, pid).as_deref(), Some(own.as_str()));
        assert!(paths.now.contains_key(&id), "a checked id is kept");
        // An id the directory does not have (the process moved): the
        // process's path is still given, not kept for the id.
        assert_eq!(paths.path(id + 1, pid).as_deref(), Some(own.as_str()));
        assert!(!paths.now.contains_key(&(id + 1)));
        // Kept across one pass without a process in it, dropped after.
        paths.next_pass();
        paths.next_pass();
        assert!(paths.now.is_empty() && paths.last.is_empty());
        assert_eq!(paths.path(id, i32::MAX), None, "gone process, unknown id");
    }

    #[test]
    fn proc_cgroup_takes_the_cgroup2_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("cgroup");
        std::fs::write(&f, b"12:pids:/v1\n0::/a/b\xff\n").unwrap();
        assert_eq!(proc_cgroup_path(&f).as_deref(), Some("/a/b\u{FFFD}"));
        std::fs::write(&f, b"12:pids:/v1\n").unwrap();
        assert_eq!(proc_cgroup_path(&f), None);
    }
}
