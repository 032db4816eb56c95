//! The cgroup collector: probes the kernel, plans a backend per file, and
//! produces one [`Snapshot`] per sample.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use regex::Regex;

use crate::bpf::BpfBackend;
use crate::read::apply;
use crate::read::PressureParts;
use crate::read::ReadCounters;
use crate::read::Walker;
use crate::stream::Stale;
use crate::stream::StreamRead;
use crate::stream::Streams;
use crate::top::Ranker;
use crate::BackendChoice;
use crate::BackendKind;
use crate::FileError;
use crate::FileSet;
use crate::Plan;
use crate::Snapshot;
use crate::StatFile;
use crate::TopN;
use crate::Tree;

#[derive(Clone, Debug)]
pub struct Options {
    /// The cgroup2 directory sampled as the root of the tree.
    pub root: PathBuf,
    pub backend: BackendChoice,
    /// io.stat is read only when asked for, as below does.
    pub collect_io_stat: bool,
    /// Skip children whose path relative to `root` matches.
    pub filter: Option<Regex>,
    /// With the stream backend: the flush interval to set when streaming is
    /// off (`None`: use streams only if someone else turned them on).
    pub stream_interval: Option<Duration>,
    /// Keep only the busiest cgroups each sample.
    pub top: Option<TopN>,
}

pub struct CgroupCollector {
    plan: Plan,
    walker: Walker,
    want: FileSet,
    streams: Option<Streams>,
    /// Present when the plan gives it at least one file.
    bpf: Option<BpfBackend>,
    ranker: Option<Ranker>,
    /// Whether the last sample ran the BPF pass.
    passed: bool,
}

impl CgroupCollector {
    pub fn new(opts: &Options) -> Result<Self> {
        let walker = Walker::new(&opts.root, opts.filter.clone())?;
        let mut want = FileSet::all();
        if !opts.collect_io_stat {
            want.remove(StatFile::IoStat);
        }
        let streams = match opts.backend {
            BackendChoice::Read | BackendChoice::Bpf => Err("not asked for".to_owned()),
            _ => Streams::start(walker.root_fd(), opts.stream_interval),
        };
        let stream_cap = streams
            .as_ref()
            .map(|_| crate::stream::support())
            .map_err(Clone::clone);
        let probe = match opts.backend {
            BackendChoice::Read | BackendChoice::Stream => None,
            _ => Some(crate::bpf::probe(walker.root_fd(), opts.filter.clone())),
        };
        let bpf_cap = match &probe {
            Some(p) => p.capability.clone(),
            None => Err("not asked for".to_owned()),
        };
        let plan = Plan::choose(opts.backend, &bpf_cap, &stream_cap)?;
        let bpf = probe.and_then(|p| p.backend).filter(|_| {
            !plan
                .files_of(BackendKind::Bpf)
                .intersection(want)
                .is_empty()
        });
        let uses_streams = !plan
            .files_of(BackendKind::Stream)
            .intersection(want)
            .is_empty();
        Ok(CgroupCollector {
            plan,
            walker,
            want,
            // Dropping unused streams turns off an interval we just set.
            streams: streams.ok().filter(|_| uses_streams),
            bpf,
            ranker: opts.top.clone().map(Ranker::new),
            passed: false,
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
        self.collect_with(None).0
    }

    /// One sample into `tree` (kept between samples: see [`Tree`]); the
    /// snapshot returned has its errors, notes and count of cgroups left
    /// out, no nodes.
    pub fn collect_into(&mut self, tree: &mut Tree) -> Snapshot {
        let (mut snap, in_tree) = self.collect_with(Some(tree));
        if !in_tree {
            tree.set(std::mem::take(&mut snap.nodes));
        }
        snap
    }

    /// A sample, and whether it went straight into `tree` (the BPF backend
    /// decoding into a tree of the same cgroups) instead of the snapshot.
    fn collect_with(&mut self, tree: Option<&mut Tree>) -> (Snapshot, bool) {
        let mut read = self
            .plan
            .files_of(BackendKind::Read)
            .intersection(self.want);
        let stream_files = self
            .plan
            .files_of(BackendKind::Stream)
            .intersection(self.want);
        let mut notes = Vec::new();
        let mut streams = None;
        if let Some(st) = self.streams.as_mut() {
            match st.wait() {
                Ok(()) => streams = Some(st),
                Err(why) => {
                    notes.push(format!(
                        "stream backend: {}; plain read of {:?} this sample",
                        why, stream_files
                    ));
                    read = read.union(stream_files);
                }
            }
        }
        let mut rank = self.ranker.is_some();
        let mut in_tree = false;
        self.passed = false;
        let mut snap = match &mut self.bpf {
            Some(bpf) => {
                let files = self.plan.files_of(BackendKind::Bpf).intersection(self.want);
                // Streams fill the snapshot's nodes after the pass.
                let tree = tree.filter(|_| streams.is_none());
                match bpf.collect(&mut self.walker, files, read, self.ranker.as_mut(), tree) {
                    Ok((snap, still_rank, went_in)) => {
                        rank = still_rank;
                        in_tree = went_in;
                        self.passed = true;
                        snap
                    }
                    Err(e) => {
                        notes.push(format!(
                            "bpf backend: {:#}; plain read of {:?} this sample",
                            e, files
                        ));
                        self.walker.walk(read.union(files))
                    }
                }
            }
            None => match self.ranker.as_mut() {
                // Streams fill every walked cgroup: they prune afterwards.
                Some(ranker) if streams.is_none() => {
                    rank = false;
                    crate::top::walk(&mut self.walker, ranker, read)
                }
                _ => self.walker.walk(read),
            },
        };
        if let Some(st) = streams {
            read_streams(st, &mut self.walker, stream_files, &mut snap, &mut notes);
            st.end_sample();
        }
        if let Some(ranker) = self.ranker.as_mut().filter(|_| rank) {
            // Plain read and streams read every cgroup's files (the ranked
            // value is among them); only the kept ones are stored.
            crate::top::prune(ranker, &mut snap);
        }
        snap.notes.extend(notes);
        (snap, in_tree)
    }

    /// Runs only the BPF iterator pass (no tree build), for measuring the
    /// two apart; `None` when no file is planned for BPF.
    pub fn bpf_pass(&mut self) -> Option<Result<u32>> {
        self.bpf.as_mut().map(|b| b.pass())
    }

    /// Thread CPU and wall time of the last sample's BPF pass (part of
    /// [`CgroupCollector::collect`]); None when it had none.
    pub fn last_pass(&self) -> Option<(Duration, Duration)> {
        self.bpf
            .as_ref()
            .filter(|_| self.passed)
            .map(|b| b.last_pass)
    }

    pub fn read_counters(&self) -> ReadCounters {
        ReadCounters {
            streams_opened: self.streams.as_ref().map_or(0, |s| s.opened),
            ..self.walker.reader.counters
        }
    }

    /// Cgroups with stream fds kept open.
    pub fn stream_fds_kept(&self) -> usize {
        self.streams.as_ref().map_or(0, Streams::kept_cgroups)
    }
}

/// Fills `files` of every cgroup of `snap` from its stream files; a file
/// without a fresh record is read as plain text instead.
fn read_streams(
    st: &mut Streams,
    walker: &mut Walker,
    files: FileSet,
    snap: &mut Snapshot,
    notes: &mut Vec<String>,
) {
    let mut stale = 0;
    for idx in 0..snap.nodes.len() {
        let ino = snap.nodes[idx].sample.inode_number.unwrap_or(-1);
        for file in files.iter() {
            let nodes = &snap.nodes;
            let path = || Snapshot::path_in(nodes, idx);
            let error = match st.read(ino, path, file) {
                Ok(StreamRead::Text(text)) => {
                    let s = &mut snap.nodes[idx].sample;
                    match apply(file, text, s, &mut PressureParts::default()) {
                        Ok(()) => continue,
                        Err(e) => e.to_string(),
                    }
                }
                Ok(StreamRead::Absent) => continue,
                Err(Stale::NoRecord) => {
                    stale += 1;
                    let path = snap.path_of(idx);
                    let only = [file].into_iter().collect();
                    let sample = &mut snap.nodes[idx].sample;
                    walker.read_at(&path, only, sample, &mut snap.errors);
                    continue;
                }
                Err(Stale::Io(e)) => e.to_string(),
            };
            snap.errors.push(FileError {
                cgroup: snap.path_of(idx),
                file,
                error,
            });
        }
    }
    if stale > 0 {
        notes.push(format!(
            "stream backend: {} stream files had no new record; read as plain text",
            stale
        ));
    }
}
