//! The one cgroup-tree fixture: `<root>/bstats-<tag>-<pid>` with cgroups,
//! limits and load under it, frozen on request, and removed on drop —
//! workers killed, files deleted, cgroups bottom-up — even when the test
//! fails. Trees of runs killed before their drop are removed by the next
//! fixture.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

use crate::work;
use crate::Cpu;
use crate::Work;

const PREFIX: &str = "bstats-";

/// Which controllers a tree turns on for its children.
#[derive(Clone, Copy, Debug)]
pub enum Controllers {
    /// Every one the parent offers.
    All,
    /// Those of these the parent offers.
    Only(&'static [&'static str]),
}

pub struct Fixture {
    top: PathBuf,
    controllers: Controllers,
    workers: Vec<libc::pid_t>,
    files: Vec<PathBuf>,
    created: usize,
    /// [`Fixture::create`]'s leaf cgroups, the ones that can hold processes.
    leaves: Vec<PathBuf>,
}

impl Fixture {
    /// Creates `<root>/bstats-<tag>-<pid>` (the tree's own `name()`) and
    /// turns `controllers` on for children at the root and the top.
    pub fn new(root: &Path, tag: &str, controllers: Controllers) -> Result<Fixture> {
        remove_stale(root);
        let top = root.join(format!("{PREFIX}{tag}-{}", std::process::id()));
        remove_tree(&top);
        std::fs::create_dir(&top)
            .with_context(|| format!("Failed to create cgroup {} (root?)", top.display()))?;
        let fx = Fixture {
            top,
            controllers,
            workers: Vec::new(),
            files: Vec::new(),
            created: 0,
            leaves: Vec::new(),
        };
        fx.enable_controllers(root)?;
        fx.enable_controllers(&fx.top)?;
        Ok(fx)
    }

    /// The benchmark's tree: `n` cgroups nested 3 levels deep, and
    /// `holders` processes (one per leaf, spread over the tree) each
    /// holding `hold_mb` MiB and having used some CPU.
    pub fn create(root: &Path, n: usize, holders: usize, hold_mb: usize) -> Result<Fixture> {
        let mut fx = Fixture::new(root, "bench", Controllers::Only(&BENCH_CONTROLLERS))?;
        // Breadth-first, so the first n of the f + f² + f³ slots fill the
        // upper levels completely.
        let f = fanout(n);
        let mut dirs: Vec<String> = Vec::with_capacity(n);
        let mut level = vec![String::new()];
        'outer: for depth in 1..=3 {
            let mut next = Vec::new();
            for parent in &level {
                for i in 0..f {
                    if dirs.len() == n {
                        break 'outer;
                    }
                    // Only on cgroups that get children: one with
                    // controllers on for children cannot hold processes.
                    if i == 0 && depth > 1 {
                        fx.enable_controllers(&fx.top.join(parent))?;
                    }
                    let d = format!("{parent}l{depth}-{i:03}/");
                    fx.mkdir(&d)?;
                    dirs.push(d.clone());
                    next.push(d);
                }
            }
            level = next;
        }
        // A set of parents: comparing every pair is minutes at 10,000 under TCG.
        let parents: std::collections::HashSet<&str> = dirs
            .iter()
            .filter_map(|d| {
                let (p, _) = d.trim_end_matches('/').rsplit_once('/')?;
                Some(&d[..=p.len()])
            })
            .collect();
        let leaves: Vec<&String> = dirs
            .iter()
            .filter(|d| !parents.contains(d.as_str()))
            .collect();
        fx.leaves = leaves.iter().map(|l| fx.top.join(l)).collect();
        let want = holders.min(leaves.len());
        let hold = Work {
            anon_mib: hold_mb,
            cpu: Cpu::For(Duration::from_millis(20)),
            ..Default::default()
        };
        for i in 0..want {
            let leaf = fx.leaves[i * leaves.len() / want].clone();
            fx.spawn(&leaf, &hold)?;
        }
        Ok(fx)
    }

    /// Makes the tree look like a host's: `n` more processes spread over
    /// [`Fixture::create`]'s leaves, with daemons' command lines (each its
    /// own) and some with threads, idle once started.
    pub fn populate(&mut self, n: usize) -> Result<()> {
        // (command line with {i} for the process's number, extra threads)
        const DAEMONS: [(&str, usize); 8] = [
            (
                "/usr/sbin/nginx -g daemon off; -c /etc/nginx/site-{i}.conf",
                0,
            ),
            (
                "/usr/bin/python3 /srv/app/worker.py --queue q{i} --concurrency 4",
                2,
            ),
            (
                "/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/{i}",
                0,
            ),
            (
                "/usr/bin/java -Xmx256m -Dservice.id={i} -jar /opt/svc/svc.jar",
                8,
            ),
            ("sshd: user{i} [priv]", 0),
            ("node /srv/web/server.js --port 8{i}", 4),
            ("/usr/bin/redis-server 127.0.0.1:7{i}", 3),
            ("/usr/sbin/cron -f -L {i}", 0),
        ];
        anyhow::ensure!(
            n == 0 || !self.leaves.is_empty(),
            "no leaf cgroups to hold processes (Fixture::create makes them)"
        );
        for i in 0..n {
            let (cmd, threads) = DAEMONS[i % DAEMONS.len()];
            let work = Work {
                threads,
                cmdline: Some(cmd.replace("{i}", &format!("{i:03}"))),
                ..Default::default()
            };
            let leaf = self.leaves[i % self.leaves.len()].clone();
            self.spawn(&leaf, &work)?;
        }
        Ok(())
    }

    /// The top cgroup's directory name.
    pub fn name(&self) -> String {
        self.top
            .file_name()
            .expect("a cgroup below the root")
            .to_string_lossy()
            .into_owned()
    }

    pub fn top(&self) -> &Path {
        &self.top
    }

    /// Cgroups made below the top by `mkdir`.
    pub fn created(&self) -> usize {
        self.created
    }

    /// Makes `rel` (relative to the top; its parent must exist).
    pub fn mkdir(&mut self, rel: impl AsRef<Path>) -> Result<PathBuf> {
        let p = self.top.join(rel);
        std::fs::create_dir(&p)
            .with_context(|| format!("Failed to create cgroup {}", p.display()))?;
        self.created += 1;
        Ok(p)
    }

    /// Turns the tree's controllers on for `dir`'s children.
    pub fn enable_controllers(&self, dir: &Path) -> Result<()> {
        let offered = std::fs::read_to_string(dir.join("cgroup.controllers"))?;
        let want: Vec<String> = offered
            .split_whitespace()
            .filter(|c| match self.controllers {
                Controllers::All => true,
                Controllers::Only(list) => list.contains(c),
            })
            .map(|c| format!("+{c}"))
            .collect();
        if want.is_empty() {
            return Ok(());
        }
        write(&dir.join("cgroup.subtree_control"), &want.join(" "))
    }

    /// Writes `value` to the interface file `file` of `cgroup` (a limit,
    /// a weight).
    pub fn set(&self, cgroup: &Path, file: &str, value: &str) -> Result<()> {
        write(&cgroup.join(file), value)
    }

    /// Starts a worker doing `work` in `cgroup`; returns its pid once its
    /// load is in place.
    pub fn spawn(&mut self, cgroup: &Path, work: &Work) -> Result<libc::pid_t> {
        match self.start(cgroup, work)? {
            Some(pid) => Ok(pid),
            None => bail!("worker in {} died before it was ready", cgroup.display()),
        }
    }

    /// Starts a worker that must be OOM-killed doing `work` in `cgroup`
    /// (which has a memory.max below it); returns once it was.
    pub fn spawn_oom(&mut self, cgroup: &Path, work: &Work) -> Result<()> {
        match self.start(cgroup, work)? {
            Some(_) => bail!("worker in {} was not OOM-killed", cgroup.display()),
            None => Ok(()),
        }
    }

    /// The worker's pid when it is running, None when it died first.
    fn start(&mut self, cgroup: &Path, work: &Work) -> Result<Option<libc::pid_t>> {
        if let Some((f, _)) = &work.file {
            self.files.push(f.clone());
        }
        let pid = work::spawn(cgroup, work)?;
        self.workers.extend(pid);
        Ok(pid)
    }

    /// Freezes the whole tree; returns once the kernel reports it frozen.
    pub fn freeze(&self) -> Result<()> {
        write(&self.top.join("cgroup.freeze"), "1")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(self.top.join("cgroup.events"))?.contains("frozen 1") {
            if Instant::now() > deadline {
                bail!("{} did not freeze", self.top.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SIGKILL ends frozen tasks too.
        for &pid in &self.workers {
            work::kill(pid);
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        remove_tree(&self.top);
    }
}

const BENCH_CONTROLLERS: [&str; 4] = ["cpu", "memory", "io", "pids"];

/// Smallest fanout f with f + f² + f³ >= n: three full-ish levels.
fn fanout(n: usize) -> usize {
    (1..).find(|f| f + f * f + f * f * f >= n).unwrap_or(1)
}

fn write(path: &Path, s: &str) -> Result<()> {
    std::fs::write(path, s).with_context(|| format!("writing {s:?} to {}", path.display()))
}

/// Removes trees whose process is gone (`bstats-<tag>-<pid>`).
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.rsplit_once('-'))
            .map(|(_, pid)| pid)
            .filter(|pid| pid.parse::<u32>().is_ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            remove_tree(&e.path());
        }
    }
}

/// Removes `dir` and every cgroup below it, children first.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    rmdir_patiently(dir);
}

/// rmdir that waits out a cgroup still draining its killed processes.
fn rmdir_patiently(d: &Path) {
    for _ in 0..100 {
        match std::fs::remove_dir(d) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    eprintln!("testkit: could not remove cgroup {}", d.display());
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

    /// populate's processes show their own command lines, names and
    /// threads in /proc, and sit in the tree's leaves.
    #[test]
    fn populated_processes_look_like_a_hosts() {
        if crate::skip_unless_root("creates cgroups") {
            return;
        }
        // PR_SET_MM needs CAP_SYS_RESOURCE (bit 24), which some containers' root lacks.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .unwrap();
        if u64::from_str_radix(eff.trim(), 16).unwrap() & (1 << 24) == 0 {
            println!("skipped: no CAP_SYS_RESOURCE (workers set their command lines)");
            return;
        }
        let root = bstats_collector::find_cgroup2_mount().unwrap();
        let mut fx = Fixture::create(&root, 10, 0, 0).unwrap();
        fx.populate(8).unwrap();
        assert_eq!(fx.workers.len(), 8);
        let proc = |pid: i32, f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap();
        let java = fx.workers[3];
        assert_eq!(
            proc(java, "cmdline"),
            "/usr/bin/java\0-Xmx256m\0-Dservice.id=003\0-jar\0/opt/svc/svc.jar\0"
        );
        assert_eq!(proc(java, "comm"), "java\n");
        let threads = |pid| {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .count()
        };
        assert_eq!(threads(java), 9);
        assert_eq!(threads(fx.workers[0]), 1);
        let cmdlines: std::collections::HashSet<String> =
            fx.workers.iter().map(|&p| proc(p, "cmdline")).collect();
        assert_eq!(cmdlines.len(), 8, "every command line its own");
        for &p in &fx.workers {
            let cg = proc(p, "cgroup");
            let leaf = fx.leaves.iter().any(|l| {
                cg.trim_end()
                    .ends_with(l.strip_prefix(&root).unwrap().to_str().unwrap())
            });
            assert!(leaf, "{cg}");
        }
    }
}
