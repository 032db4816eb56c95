//! Glue between our cgroup collector and below's model.
//!
//! below 0.9's `model::Collector` has no seam for another cgroup reader: the
//! non-cgroup parts of the sample (procfs, system, network) come from
//! below's own readers, assembled in [`rest`], and the cgroup tree is the
//! one built from our [`bpf_stats::Snapshot`].

mod rest;

use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::Result;
use bpf_stats::CgroupCollector;
use bpf_stats::Snapshot;
use bpf_stats::Tree;
use model::Model;
use model::Sample;
use slog::debug;
use slog::warn;

pub use bstats_bpf::process_cpu_time;
pub use bstats_bpf::thread_cpu_time;

/// Thread CPU and wall time of one phase.
#[derive(Debug, Default, Clone, Copy)]
pub struct Phase {
    pub cpu: Duration,
    pub wall: Duration,
}

/// Measures phases back to back: each [`Lap::lap`] ends one.
pub struct Lap {
    cpu: Duration,
    wall: Instant,
}

impl Lap {
    pub fn start() -> Lap {
        Lap {
            cpu: thread_cpu_time(),
            wall: Instant::now(),
        }
    }

    /// The phase since the previous lap (or the start).
    pub fn lap(&mut self) -> Phase {
        let (cpu, wall) = (thread_cpu_time(), Instant::now());
        let p = Phase {
            cpu: cpu.saturating_sub(self.cpu),
            wall: wall - self.wall,
        };
        (self.cpu, self.wall) = (cpu, wall);
        p
    }
}

/// Formats named phases as "cpu ms: a=1.00 b=2.00; wall ms: a=… b=…",
/// the line `record --debug` logs per sample (the bill benchmark parses it).
pub struct PhaseLog<'a>(pub &'a [(&'static str, Phase)]);

impl std::fmt::Display for PhaseLog<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(f, "cpu ms:")?;
        for (name, p) in self.0 {
            write!(f, " {}={:.2}", name, ms(p.cpu))?;
        }
        write!(f, "; wall ms:")?;
        for (name, p) in self.0 {
            write!(f, " {}={:.2}", name, ms(p.wall))?;
        }
        Ok(())
    }
}

/// Where the time of one sample went.
#[derive(Debug, Default, Clone, Copy)]
pub struct SampleTimes {
    /// The BPF iterator pass, part of `cgroups` (None: no pass this sample).
    pub pass: Option<Phase>,
    /// Our cgroup collector: the iterator pass and decoding (or the file
    /// reads), into the kept tree (in place while the cgroups stay the
    /// same, else a new tree).
    pub cgroups: Phase,
    /// Taking the tree out for the sample.
    pub tree: Phase,
    /// below's own collector (procfs, system, network).
    pub rest: Phase,
}

/// Parts of [`SampleTimes::rest`] (the optional ethtool, resctrl and btrfs
/// stats are in `rest` only).
#[derive(Debug, Default, Clone, Copy)]
pub struct RestTimes {
    /// Every process from procfs (fb_procfs: stat, status, io, cmdline…).
    pub procs: Phase,
    /// /proc/stat, meminfo, vmstat, slabinfo, disks, hostname, kernel and
    /// OS release.
    pub system: Phase,
    /// /proc/net and the interfaces' sysfs counters.
    pub net: Phase,
}

impl RestTimes {
    /// As [`PhaseLog`] entries.
    pub fn named(&self) -> [(&'static str, Phase); 3] {
        [
            ("procs", self.procs),
            ("system", self.system),
            ("net", self.net),
        ]
    }
}

pub struct Collector {
    logger: slog::Logger,
    rest: rest::Rest,
    cgroups: CgroupCollector,
    /// below's cgroup tree, kept between samples (see [`Collector::recycle`]).
    tree: Tree,
    prev: Option<(Sample, Instant)>,
    /// Errors of the previous sample, to log only changes.
    last_errors: usize,
    pub times: SampleTimes,
}

impl Collector {
    /// `below_opts`' cgroup options are not used: `cgroup_opts` has ours.
    pub fn new(
        logger: slog::Logger,
        cgroup_opts: &bpf_stats::Options,
        below_opts: model::CollectorOptions,
    ) -> Result<Self> {
        let cgroups = CgroupCollector::new(cgroup_opts)?;
        Ok(Collector {
            rest: rest::Rest::new(logger.clone(), below_opts),
            logger,
            cgroups,
            tree: Tree::default(),
            prev: None,
            last_errors: 0,
            times: SampleTimes::default(),
        })
    }

    /// Processes from `p` (BPF or procfs) instead of fb_procfs.
    pub fn set_processes(&mut self, p: bstats_procs::Processes) {
        self.rest.set_processes(p);
    }

    /// The process backend set with [`Collector::set_processes`].
    pub fn processes_plan(&self) -> Option<&bstats_procs::Plan> {
        self.rest.processes_plan()
    }

    /// Where the last sample's below collectors spent their time.
    pub fn rest_times(&self) -> RestTimes {
        self.rest.times
    }

    pub fn cgroups(&self) -> &CgroupCollector {
        &self.cgroups
    }

    pub fn cgroups_mut(&mut self) -> &mut CgroupCollector {
        &mut self.cgroups
    }

    /// Only below's own collectors: the sample without its cgroup tree.
    pub fn collect_below(&mut self) -> Result<Sample> {
        self.rest.collect()
    }

    pub fn collect_sample(&mut self) -> Result<Sample> {
        let mut lap = Lap::start();
        let mut sample = self.collect_below()?;
        let rest = lap.lap();
        let snap = self.cgroups.collect_into(&mut self.tree);
        let cgroups = lap.lap();
        self.report_errors(&snap);
        if snap.dropped > 0 {
            debug!(
                self.logger,
                "cgroup top-N: {} cgroups stored, {} left out",
                self.tree.len(),
                snap.dropped
            );
        }
        sample.cgroup = self.tree.take();
        self.times = SampleTimes {
            pass: self
                .cgroups
                .last_pass()
                .map(|(cpu, wall)| Phase { cpu, wall }),
            rest,
            cgroups,
            tree: lap.lap(),
        };
        Ok(sample)
    }

    /// Gives back a sample once written: its cgroup tree takes the next
    /// sample in place when the cgroups are the same (a sample not given
    /// back costs a new tree).
    pub fn recycle(&mut self, sample: Sample) {
        self.tree.give_back(sample.cgroup);
    }

    fn report_errors(&mut self, snap: &Snapshot) {
        for note in &snap.notes {
            warn!(self.logger, "{}", note);
        }
        let n = snap.errors.len();
        if n != 0 && n != self.last_errors {
            for e in snap.errors.iter().take(3) {
                warn!(self.logger, "cgroup stat file skipped: {}", e);
            }
            if n > 3 {
                warn!(
                    self.logger,
                    "... and {} more cgroup stat files skipped",
                    n - 3
                );
            }
        }
        self.last_errors = n;
    }

    /// Collects a sample and the model of it against the previous one.
    pub fn collect_and_update_model(&mut self) -> Result<(Sample, Model)> {
        let now = Instant::now();
        let sample = self.collect_sample()?;
        let model = Model::new(
            SystemTime::now(),
            &sample,
            self.prev.as_ref().map(|(s, t)| (s, now.duration_since(*t))),
        );
        self.prev = Some((sample.clone(), now));
        Ok((sample, model))
    }
}
