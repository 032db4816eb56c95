//! The parts of below's `Sample` that are not cgroups (processes, system,
//! network, the optional btrfs/ethtool/resctrl/ksm stats), from below's own
//! 0.9 readers — assembled here rather than by `model::Collector`, which
//! reads the root cgroup each sample and asks `os_info` for the OS release
//! each sample: `lsb_release -a` and `getconf LONG_BIT`, ~7 child processes
//! per sample on a Debian host, all charged to below.service.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::Mutex;

use anyhow::Context;
use model::Sample;
use model::SystemSample;
use slog::error;
use slog::warn;

/// What the OS release string is read from (by `lsb_release` and
/// `os_info`'s file fallback): it changes only when one of these does.
const RELEASE_FILES: &[&str] = &[
    "/etc/os-release",
    "/usr/lib/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
    "/etc/redhat-release",
    "/etc/centos-release",
    "/etc/alpine-release",
    "/usr/bin/lsb_release",
];

/// (device, inode, size, mtime) of each of [`RELEASE_FILES`]; `None` where absent.
type ReleaseStamp = Vec<Option<(u64, u64, u64, i64, i64)>>;

fn release_stamp() -> ReleaseStamp {
    RELEASE_FILES
        .iter()
        .map(|p| {
            fs::metadata(p)
                .ok()
                .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        })
        .collect()
}

/// The OS release as below shows it, asked again only when a file it comes
/// from changed (a stat per file per sample instead of processes).
struct OsRelease {
    stamp: ReleaseStamp,
    value: Option<String>,
}

impl OsRelease {
    fn get(&mut self, logger: &slog::Logger) -> Option<String> {
        let stamp = release_stamp();
        if self.value.is_none() || stamp != self.stamp {
            self.stamp = stamp;
            self.value = logged(logger, model::get_os_release());
        }
        self.value.clone()
    }
}

/// A counter-free disk (every counter 0) is left out, as below does.
fn all_zero(d: &procfs::DiskStat) -> bool {
    [
        d.read_completed,
        d.read_merged,
        d.read_sectors,
        d.time_spend_read_ms,
        d.write_completed,
        d.write_merged,
        d.write_sectors,
        d.time_spend_write_ms,
        d.discard_completed,
        d.discard_merged,
        d.discard_sectors,
        d.time_spend_discard_ms,
    ]
    .iter()
    .all(|v| *v == Some(0))
}

/// A failed task-iterator pass costs this sample its BPF processes, not
/// the sample: they are read from /proc, and the next sample tries the
/// pass again (as a failed cgroup pass falls back to the files).
fn or_procfs(
    logger: &slog::Logger,
    pass: anyhow::Result<procfs::PidMap>,
    procs: &procfs::ProcReader,
) -> anyhow::Result<procfs::PidMap> {
    pass.or_else(|e| {
        warn!(logger, "processes from /proc for this sample: {:#}", e);
        Ok(procs.read_all_pids()?)
    })
}

/// Logs a reader's error, as below's collector does for the parts a sample
/// can go without.
fn logged<T, E: std::fmt::Display>(logger: &slog::Logger, r: Result<T, E>) -> Option<T> {
    r.map_err(|e| error!(logger, "{:#}", e)).ok()
}

pub(crate) struct BelowParts {
    logger: slog::Logger,
    procs: procfs::ProcReader,
    /// Where processes come from (fb_procfs unless set).
    processes: Option<bstats_procs::Processes>,
    opts: model::CollectorOptions,
    os_release: OsRelease,
    /// Where the last [`BelowParts::collect`] spent its time.
    pub times: crate::BelowTimes,
}

impl BelowParts {
    pub fn new(logger: slog::Logger, opts: model::CollectorOptions) -> Self {
        BelowParts {
            logger,
            procs: procfs::ProcReader::new(),
            processes: None,
            opts,
            os_release: OsRelease {
                stamp: Vec::new(),
                value: None,
            },
            times: Default::default(),
        }
    }

    pub fn set_processes(&mut self, p: bstats_procs::Processes) {
        self.processes = Some(p);
    }

    pub fn processes_plan(&self) -> Option<&bstats_procs::Plan> {
        self.processes.as_ref().map(|p| p.plan())
    }

    /// A sample with everything but its cgroup tree (left default).
    pub fn collect(&mut self) -> anyhow::Result<Sample> {
        let logger = &self.logger;
        let o = &self.opts;
        let mut lap = crate::Lap::start();
        let mut processes = match &mut self.processes {
            Some(p) => or_procfs(logger, p.read_all_pids(&self.procs), &self.procs)?,
            None => self.procs.read_all_pids()?,
        };
        // Drained every sample, or exits pile up; a pid procfs still has
        // is taken from procfs (it holds more).
        let exits = std::mem::take(&mut *lock(&o.exit_data)?);
        for (pid, info) in exits {
            processes.entry(pid).or_insert(info);
        }
        let procs = lap.lap();
        let disks = if o.disable_disk_stat {
            Default::default()
        } else {
            let mut d = logged(logger, self.procs.read_disk_stats_and_fsinfo()).unwrap_or_default();
            d.retain(|name, s| {
                !name.starts_with("ram") && !name.starts_with("loop") && !all_zero(s)
            });
            d
        };
        let system = SystemSample {
            stat: self.procs.read_stat()?,
            meminfo: self.procs.read_meminfo()?,
            vmstat: self.procs.read_vmstat()?,
            slabinfo_vec: self.procs.read_slabinfo().unwrap_or_default(),
            ksm: o
                .enable_ksm_stats
                .then(|| procfs::KsmReader::new().read_ksm()),
            hostname: model::get_hostname()?,
            kernel_version: logged(logger, self.procs.read_kernel_version()),
            os_release: self.os_release.get(logger),
            disks,
            btrfs: if o.enable_btrfs_stats {
                let r = btrfs::BtrfsReader::new(o.btrfs_samples, o.btrfs_min_pct, logger.clone());
                logged(logger, r.sample())
            } else {
                None
            },
        };
        let system_time = lap.lap();
        let netstats = logged(
            logger,
            procfs::NetReader::new(logger.clone()).and_then(|r| r.read_netstat()),
        )
        .unwrap_or_default();
        self.times = crate::BelowTimes {
            procs,
            system: system_time,
            net: lap.lap(),
        };
        Ok(Sample {
            cgroup: Default::default(),
            processes,
            netstats,
            system,
            gpus: None,
            ethtool: if o.enable_ethtool_stats {
                logged(
                    logger,
                    ethtool::EthtoolReader::new().read_stats::<ethtool::Ethtool>(),
                )
            } else {
                None
            },
            // Not mounted is not an error: no resctrl stats.
            resctrl: if o.enable_resctrl_stats {
                resctrlfs::ResctrlReader::root()
                    .ok()
                    .and_then(|r| logged(logger, r.read_all()))
            } else {
                None
            },
            tc: None,
        })
    }
}

fn lock(
    m: &Arc<Mutex<procfs::PidMap>>,
) -> anyhow::Result<std::sync::MutexGuard<'_, procfs::PidMap>> {
    m.lock()
        .map_err(|_| anyhow::anyhow!("poisoned lock"))
        .context("exit data of the previous sample")
}

#[cfg(test)]
mod test {
    use super::*;

    fn logger() -> slog::Logger {
        slog::Logger::root(slog::Discard, slog::o!())
    }

    /// The same parts as below 0.9's own collector gives, where two reads
    /// a moment apart can agree.
    #[test]
    fn matches_below_collector() {
        let mut ours = BelowParts::new(logger(), model::CollectorOptions::default());
        let a = ours.collect().unwrap();
        let Ok(cgroup_root) = bstats_collector::find_cgroup2_mount() else {
            println!("skipped: below's collector needs a cgroup2 mount");
            return;
        };
        let opts = model::CollectorOptions {
            cgroup_root,
            cgroup_re: Some(regex::Regex::new(".*").unwrap()),
            ..Default::default()
        };
        let mut below = model::Collector::new(logger(), opts);
        let b = below.collect_sample().unwrap();
        let (sa, sb) = (&a.system, &b.system);
        assert_eq!(sa.hostname, sb.hostname);
        assert_eq!(sa.os_release, sb.os_release);
        assert!(sa.os_release.is_some());
        assert_eq!(sa.kernel_version, sb.kernel_version);
        assert_eq!(
            sa.disks.keys().collect::<Vec<_>>(),
            sb.disks.keys().collect::<Vec<_>>()
        );
        assert_eq!(sa.stat.total_cpu.is_some(), sb.stat.total_cpu.is_some());
        assert_eq!(sa.meminfo.total, sb.meminfo.total);
        assert_eq!(sa.slabinfo_vec.len(), sb.slabinfo_vec.len());
        let ifaces = |s: &Sample| {
            s.netstats
                .interfaces
                .as_ref()
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
        };
        assert!(ifaces(&a).is_some());
        assert_eq!(ifaces(&a), ifaces(&b));
        let pid1 = |s: &Sample| s.processes.get(&1).and_then(|p| p.stat.comm.clone());
        assert!(pid1(&a).is_some());
        assert_eq!(pid1(&a), pid1(&b));
        assert_eq!(a.cgroup, model::CgroupSample::default());
    }

    /// With either process backend (BPF where this kernel and the user
    /// allow it: auto falls back to procfs otherwise).
    #[test]
    fn a_failed_task_pass_reads_proc_for_the_sample() {
        let procs = procfs::ProcReader::new();
        let me = std::process::id() as i32;
        let got = or_procfs(&logger(), Err(anyhow::anyhow!("pass failed")), &procs).unwrap();
        assert!(got.contains_key(&me), "this process from /proc");
        let mut one = procfs::PidMap::new();
        one.insert(1, procfs::PidInfo::default());
        let kept = or_procfs(&logger(), Ok(one), &procs).unwrap();
        assert_eq!(kept.len(), 1, "a pass that worked is kept as it is");
    }

    #[test]
    fn exits_fill_in_pids_procfs_lacks() {
        for backend in [
            bstats_procs::ProcessBackend::Procfs,
            bstats_procs::ProcessBackend::Auto,
        ] {
            let opts = model::CollectorOptions::default();
            let exits = Arc::clone(&opts.exit_data);
            let mut ours = BelowParts::new(logger(), opts);
            let mount = bstats_collector::find_cgroup2_mount().unwrap_or_default();
            ours.set_processes(bstats_procs::Processes::new(backend, &mount).unwrap());
            let gone = i32::MAX;
            let mut info = procfs::PidInfo::default();
            info.stat.comm = Some("exited".into());
            let mut own = procfs::PidInfo::default();
            own.stat.comm = Some("not procfs's".into());
            let me = std::process::id() as i32;
            lock(&exits).unwrap().extend([(gone, info), (me, own)]);
            let s = ours.collect().unwrap();
            assert_eq!(s.processes[&gone].stat.comm.as_deref(), Some("exited"));
            assert_ne!(s.processes[&me].stat.comm.as_deref(), Some("not procfs's"));
            assert!(s.processes[&me].cmdline_vec.is_some(), "{backend}");
            assert!(lock(&exits).unwrap().is_empty(), "drained each sample");
        }
    }

    #[test]
    fn os_release_asked_again_only_when_its_files_change() {
        let mut r = OsRelease {
            stamp: Vec::new(),
            value: None,
        };
        let first = r.get(&logger());
        assert!(first.is_some());
        assert_eq!(r.stamp, release_stamp());
        r.value = Some("kept".into());
        assert_eq!(r.get(&logger()).as_deref(), Some("kept"));
        r.stamp[0] = Some((0, 0, 0, 0, 0));
        assert_eq!(r.get(&logger()), first);
    }
}
