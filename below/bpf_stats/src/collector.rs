//! The cgroup collector: probes the kernel, plans a backend per file, and
//! produces one [`Snapshot`] per sample.

use std::path::PathBuf;

use anyhow::bail;
use anyhow::Result;
use regex::Regex;

use crate::bpf::BpfBackend;
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
    /// Present when the plan gives it at least one file.
    bpf: Option<BpfBackend>,
    want: FileSet,
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
        let walker = Walker::new(&opts.root, opts.filter.clone())?;
        let mut want = FileSet::all();
        if !opts.collect_io_stat {
            want.remove(StatFile::IoStat);
        }
        let probe = if opts.backend == BackendChoice::Read {
            None
        } else {
            Some(crate::bpf::probe(walker.root_fd(), opts.filter.clone()))
        };
        let bpf_cap = match &probe {
            Some(p) => p.capability.clone(),
            None => Err("not probed".to_owned()),
        };
        if opts.backend == BackendChoice::Bpf {
            // Forcing bpf on a kernel that lacks what a capable one has
            // fails, rather than quietly reading text.
            let gaps: Vec<String> = probe
                .iter()
                .flat_map(|p| &p.gaps)
                .filter(|(f, _)| want.contains(*f))
                .map(|(f, why)| format!("{}: {}", f, why))
                .collect();
            if !gaps.is_empty() {
                bail!("--cgroup-backend bpf is unavailable: {}", gaps.join("; "));
            }
        }
        let plan = Plan::choose(opts.backend, &bpf_cap, &probe_stream(opts))?;
        let bpf = probe
            .and_then(|p| p.backend)
            .filter(|_| !plan.files_of(BackendKind::Bpf).is_empty());
        Ok(CgroupCollector {
            plan,
            walker,
            bpf,
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

    /// Narrows the files read each sample (e.g. to leave out the text-only
    /// memory.numa_stat).
    pub fn set_wanted(&mut self, want: FileSet) {
        self.want = want;
    }

    pub fn collect(&mut self) -> Snapshot {
        let text = self
            .plan
            .files_of(BackendKind::Read)
            .intersection(self.want);
        match &mut self.bpf {
            Some(bpf) => {
                let files = self.plan.files_of(BackendKind::Bpf).intersection(self.want);
                bpf.collect(&mut self.walker, files, text)
            }
            None => self.walker.walk(text),
        }
    }

    /// Runs only the BPF iterator pass (no tree build), for measuring the
    /// two apart; `None` when no file is planned for BPF.
    pub fn bpf_pass(&mut self) -> Option<Result<u32>> {
        self.bpf.as_mut().map(|b| b.pass())
    }

    pub fn read_counters(&self) -> ReadCounters {
        self.walker.reader.counters
    }
}
