//! Glue between our cgroup collector and below's model.
//!
//! below 0.9's `model::Collector` has no seam for another cgroup reader: the
//! non-cgroup parts of the sample (procfs, system, network) come from
//! below's own readers, assembled in [`below_parts`], and the cgroup tree is
//! filled by our [`bstats_collector::CgroupCollector`].
//!
//! A recorder's sample, top to bottom ([`Collector::collect_sample`]):
//!
//! | step | by | into |
//! | --- | --- | --- |
//! | processes, system, network | `below_parts` (below's readers; processes by the task iterator or procfs) | a new sample's non-cgroup parts |
//! | the previous sample's non-cgroup parts dropped | | |
//! | cgroups: one pass or the files, per the plan | `bstats_collector` | the collector's table |
//! | below's cgroup tree | the table | the kept sample's tree, in place while the cgroups are the same |
//! | lent as `&Sample` | the caller (`record`) | the endpoint, then the store |
//!
//! The sample stays the collector's: the caller borrows it until the next
//! sample; `live` takes its samples out ([`Collector::collect_and_update_model`]).

mod below_parts;

use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::Result;
use bstats_collector::CgroupCollector;
use bstats_collector::Elapsed;
use bstats_collector::Report;
use bstats_collector::TreeBuild;
use model::Model;
use model::Sample;
use serde::Deserialize;
use serde::Serialize;
use slog::debug;
use slog::warn;

pub use bstats_bpf::process_cpu_time;
pub use bstats_bpf::thread_cpu_time;

/// Thread CPU and wall time of one phase (in JSON: `cpu_ms`, `wall_ms`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    #[serde(rename = "cpu_ms", with = "ms")]
    pub cpu: Duration,
    #[serde(rename = "wall_ms", with = "ms")]
    pub wall: Duration,
}

/// A duration as float milliseconds: what people and the benchmark read.
mod ms {
    use std::time::Duration;

    use serde::de::Error;
    use serde::Deserialize;
    use serde::Deserializer;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)? / 1e3).map_err(D::Error::custom)
    }
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

/// Where one written sample's time went, in a recorder's loop: `record
/// --phase-times FILE` writes one per line as JSON (the benchmark reads
/// them), `record --debug` logs its [`Display`](std::fmt::Display). The
/// benchmark's floor recorder has no cgroup collector: its `cgroups`,
/// `tree` and `publish` are None and its `pass` is its own.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleCost {
    /// The sample's number since the recorder started.
    pub sample: u64,
    /// below's own collectors ([`SampleTimes::below`]).
    pub below: Phase,
    /// Parts of `below`.
    #[serde(flatten)]
    pub below_parts: BelowTimes,
    /// The BPF iterator pass (part of `cgroups` when that is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<Phase>,
    /// How the tree was made (a new one costs more than an update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_build: Option<TreeBuild>,
    /// Handing the sample to the metrics endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<Phase>,
    /// The store write.
    pub store: Phase,
    /// Dropping the previous sample's non-cgroup parts.
    pub drop: Phase,
    /// The loop outside the phases: sleeping, logging, this record.
    pub idle: Phase,
    /// The whole process's CPU since the previous record (every thread).
    #[serde(rename = "process_cpu_ms", with = "ms")]
    pub process_cpu: Duration,
}

impl SampleCost {
    /// The phases by name, the absent ones left out.
    pub fn named(&self) -> Vec<(&'static str, Phase)> {
        let BelowTimes { procs, system, net } = self.below_parts;
        [
            ("below", Some(self.below)),
            ("procs", Some(procs)),
            ("system", Some(system)),
            ("net", Some(net)),
            ("pass", self.pass),
            ("cgroups", self.cgroups),
            ("tree", self.tree),
            ("publish", self.publish),
            ("store", Some(self.store)),
            ("drop", Some(self.drop)),
            ("idle", Some(self.idle)),
        ]
        .into_iter()
        .filter_map(|(k, p)| Some((k, p?)))
        .collect()
    }

    /// One JSON line, newline included.
    pub fn json_line(&self) -> Result<String> {
        let mut line = serde_json::to_string(self)?;
        line.push('\n');
        Ok(line)
    }
}

/// "sample 3 written; cpu ms: below=1.00 …; wall ms: below=… …; process
/// cpu ms 3.00", for people.
impl std::fmt::Display for SampleCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let named = self.named();
        write!(f, "sample {} written; cpu ms:", self.sample)?;
        for (name, p) in &named {
            write!(f, " {}={:.2}", name, ms(p.cpu))?;
        }
        write!(f, "; wall ms:")?;
        for (name, p) in &named {
            write!(f, " {}={:.2}", name, ms(p.wall))?;
        }
        write!(f, "; process cpu ms {:.2}", ms(self.process_cpu))?;
        match self.tree_build {
            Some(TreeBuild::InPlace) | None => Ok(()),
            Some(how) => write!(f, "; tree {how:?}"),
        }
    }
}

/// Where the time of one sample went.
#[derive(Debug, Default, Clone, Copy)]
pub struct SampleTimes {
    /// The BPF iterator pass, part of `cgroups` (None: no pass this sample).
    pub pass: Option<Phase>,
    /// Our cgroup collector: the iterator pass and decoding (or the file
    /// reads), into its table.
    pub cgroups: Phase,
    /// Filling below's tree from the table (in place while the cgroups
    /// stay the same, else a new tree).
    pub tree: Phase,
    /// How it was made (None before the first sample).
    pub tree_build: Option<TreeBuild>,
    /// below's own collector (procfs, system, network).
    pub below: Phase,
    /// Dropping the previous sample's non-cgroup parts.
    pub drop: Phase,
}

impl From<Elapsed> for Phase {
    fn from(e: Elapsed) -> Phase {
        Phase {
            cpu: e.cpu,
            wall: e.wall,
        }
    }
}

/// Parts of [`SampleTimes::below`] (the optional ethtool, resctrl and
/// btrfs stats are in `below` only).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BelowTimes {
    /// Every process from procfs (fb_procfs: stat, status, io, cmdline…).
    pub procs: Phase,
    /// /proc/stat, meminfo, vmstat, slabinfo, disks, hostname, kernel and
    /// OS release.
    pub system: Phase,
    /// /proc/net and the interfaces' sysfs counters.
    pub net: Phase,
}

pub struct Collector {
    logger: slog::Logger,
    below_parts: below_parts::BelowParts,
    cgroups: CgroupCollector,
    /// The last sample, lent by [`Collector::collect_sample`]; its tree is
    /// the one the cgroup collector fills in place.
    sample: Sample,
    /// The last sample a model was made of, for `live`'s next model.
    prev: Option<(Sample, Instant)>,
    /// Errors of the previous sample, to log only changes.
    last_errors: usize,
    pub times: SampleTimes,
}

impl Collector {
    /// `below_opts`' cgroup options are not used: `cgroup_opts` has ours.
    pub fn new(
        logger: slog::Logger,
        cgroup_opts: &bstats_collector::Options,
        below_opts: model::CollectorOptions,
    ) -> Result<Self> {
        let cgroups = CgroupCollector::new(cgroup_opts)?;
        Ok(Collector {
            below_parts: below_parts::BelowParts::new(logger.clone(), below_opts),
            logger,
            cgroups,
            sample: Sample::default(),
            prev: None,
            last_errors: 0,
            times: SampleTimes::default(),
        })
    }

    /// Processes from `p` (BPF or procfs) instead of fb_procfs.
    pub fn set_processes(&mut self, p: bstats_procs::Processes) {
        self.below_parts.set_processes(p);
    }

    /// The process backend set with [`Collector::set_processes`].
    pub fn processes_plan(&self) -> Option<&bstats_procs::Plan> {
        self.below_parts.processes_plan()
    }

    /// Where the last sample's below collectors spent their time.
    pub fn below_times(&self) -> BelowTimes {
        self.below_parts.times
    }

    pub fn cgroups(&self) -> &CgroupCollector {
        &self.cgroups
    }

    pub fn cgroups_mut(&mut self) -> &mut CgroupCollector {
        &mut self.cgroups
    }

    /// Only below's own collectors: the sample without its cgroup tree.
    pub fn collect_below(&mut self) -> Result<Sample> {
        self.below_parts.collect()
    }

    /// Collects a sample and lends it until the next one.
    pub fn collect_sample(&mut self) -> Result<&Sample> {
        let mut lap = Lap::start();
        let below = self.collect_below()?;
        let below_time = lap.lap();
        let tree = std::mem::take(&mut self.sample.cgroup);
        self.sample = Sample {
            cgroup: tree,
            ..below
        };
        let drop = lap.lap();
        let report = self.cgroups.sample(&mut self.sample.cgroup);
        let mut cgroups = lap.lap();
        self.report_errors(&report);
        if report.dropped > 0 {
            debug!(
                self.logger,
                "cgroup top-N: {} cgroups stored, {} left out",
                self.cgroups.cgroups(),
                report.dropped
            );
        }
        let tree = report.tree.expect("a sample fills the tree");
        cgroups.cpu = cgroups.cpu.saturating_sub(tree.took.cpu);
        cgroups.wall = cgroups.wall.saturating_sub(tree.took.wall);
        self.times = SampleTimes {
            pass: report.pass.map(Phase::from),
            below: below_time,
            cgroups,
            tree: tree.took.into(),
            tree_build: Some(tree.build),
            drop,
        };
        Ok(&self.sample)
    }

    fn report_errors(&mut self, report: &Report) {
        for note in &report.notes {
            warn!(self.logger, "{}", note);
        }
        let n = report.errors.len();
        if n != 0 && n != self.last_errors {
            for e in report.errors.iter().take(3) {
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

    /// Collects a sample and the model of it against the previous one
    /// (taken out and kept for the next model: each sample builds a new
    /// tree).
    pub fn collect_and_update_model(&mut self) -> Result<Model> {
        self.collect_and_update_model_as(Ok)
    }

    /// [`Self::collect_and_update_model`] of the sample as `shown` makes
    /// it (the live view escapes its names for the terminal).
    pub fn collect_and_update_model_as(
        &mut self,
        shown: impl FnOnce(Sample) -> Result<Sample>,
    ) -> Result<Model> {
        let now = Instant::now();
        self.collect_sample()?;
        let sample = shown(std::mem::take(&mut self.sample))?;
        let model = Model::new(
            SystemTime::now(),
            &sample,
            self.prev.as_ref().map(|(s, t)| (s, now.duration_since(*t))),
        );
        self.prev = Some((sample, now));
        Ok(model)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sample_cost_as_json_and_text() {
        let p = |cpu: u64, wall: u64| Phase {
            cpu: Duration::from_micros(cpu),
            wall: Duration::from_micros(wall),
        };
        let cost = SampleCost {
            sample: 7,
            below: p(1500, 2000),
            below_parts: BelowTimes {
                procs: p(1000, 1200),
                ..Default::default()
            },
            pass: Some(p(250, 300)),
            cgroups: Some(p(3000, 3500)),
            store: p(10, 10),
            process_cpu: Duration::from_millis(9),
            ..Default::default()
        };
        let line = cost.json_line().unwrap();
        assert!(line.ends_with("}\n") && line.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["sample"], 7);
        assert_eq!(v["below"]["cpu_ms"], 1.5);
        assert_eq!(v["procs"]["wall_ms"], 1.2);
        assert_eq!(v["pass"]["cpu_ms"], 0.25);
        assert_eq!(v["process_cpu_ms"], 9.0);
        assert!(v.get("tree").is_none(), "absent phases are left out: {v}");
        let back: SampleCost = serde_json::from_str(&line).unwrap();
        assert_eq!(back, cost);
        assert_eq!(
            cost.to_string(),
            "sample 7 written; cpu ms: below=1.50 procs=1.00 system=0.00 net=0.00 \
             pass=0.25 cgroups=3.00 store=0.01 drop=0.00 idle=0.00; wall ms: below=2.00 \
             procs=1.20 system=0.00 net=0.00 pass=0.30 cgroups=3.50 store=0.01 drop=0.00 \
             idle=0.00; process cpu ms 9.00"
        );
    }
}
