//! The cgroup collector: probes the kernel, plans a backend per file, and
//! produces one [`Snapshot`] per sample.

use std::path::PathBuf;

use anyhow::Result;
use regex::Regex;

use crate::plan::Capability;
use crate::read::ReadCounters;
use crate::read::Walker;
use crate::BackendChoice;
use crate::BackendKind;
use crate::FileSet;
use crate::Plan;
use crate::Snapshot;
use crate::StatFile;

#[derive(Clone, Debug)]
pub struct Options {
    /// The cgroup2 directory sampled as the root of the tree.
    pub root: PathBuf,
    pub backend: BackendChoice,
    /// io.stat is read only when asked for, as below does.
    pub collect_io_stat: bool,
    /// Skip children whose path relative to `root` matches.
    pub filter: Option<Regex>,
}

pub struct CgroupCollector {
    plan: Plan,
    walker: Walker,
    want: FileSet,
}

fn probe_bpf() -> Capability {
    Err("this build has no BPF backend".to_owned())
}

fn probe_stream(opts: &Options) -> Capability {
    let knob = opts.root.join("cpu.stat.stream_interval");
    if !knob.exists() {
        return Err(format!(
            "the kernel has no stream files ({} is missing)",
            knob.display()
        ));
    }
    Err("this build has no stream backend".to_owned())
}

impl CgroupCollector {
    pub fn new(opts: &Options) -> Result<Self> {
        let plan = Plan::choose(opts.backend, &probe_bpf(), &probe_stream(opts))?;
        let mut want = FileSet::all();
        if !opts.collect_io_stat {
            want.remove(StatFile::IoStat);
        }
        Ok(CgroupCollector {
            plan,
            walker: Walker::new(&opts.root, opts.filter.clone())?,
            want,
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Files this collector reads each sample.
    pub fn wanted(&self) -> FileSet {
        self.want
    }

    pub fn collect(&mut self) -> Snapshot {
        self.walker.walk(
            self.plan
                .files_of(BackendKind::Read)
                .intersection(self.want),
        )
    }

    pub fn read_counters(&self) -> ReadCounters {
        self.walker.reader.counters
    }
}
