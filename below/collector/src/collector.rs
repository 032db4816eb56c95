//! The cgroup collector: probes the kernel, plans a backend per file, and
//! fills below's cgroup tree each sample, with a [`Report`] of what it did.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use model::CgroupSample;
use regex::Regex;

use crate::bpf::BpfBackend;
use crate::read::apply;
use crate::read::PressureParts;
use crate::read::ReadCounters;
use crate::read::Walker;
use crate::stream::Stale;
use crate::stream::StreamRead;
use crate::stream::Streams;
use crate::table::Table;
use crate::top::Ranker;
use crate::BackendChoice;
use crate::BackendKind;
use crate::Elapsed;
use crate::FileError;
use crate::FileSet;
use crate::FlatSample;
use crate::NotServed;
use crate::Plan;
use crate::Report;
use crate::StatFile;
use crate::TopN;
use crate::TreeFill;

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
    /// Every cgroup, kept between samples.
    table: Table,
}

impl CgroupCollector {
    pub fn new(opts: &Options) -> Result<Self> {
        let walker = Walker::new(&opts.root)?;
        let mut want = FileSet::all();
        if !opts.collect_io_stat {
            want.remove(StatFile::IoStat);
        }
        let streams = match opts.backend {
            BackendChoice::Read | BackendChoice::Bpf => Err(NotServed::NotAskedFor),
            _ => Streams::start(walker.root_fd(), opts.stream_interval)
                .map_err(NotServed::Unavailable),
        };
        let stream_cap = streams
            .as_ref()
            .map(|_| crate::stream::support())
            .map_err(Clone::clone);
        let probe = match opts.backend {
            BackendChoice::Read | BackendChoice::Stream => None,
            _ => Some(crate::bpf::probe(walker.root_fd())),
        };
        let bpf_cap = match &probe {
            Some(p) => p.capability.clone(),
            None => Err(NotServed::NotAskedFor),
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
            table: Table::new(
                opts.filter.clone(),
                opts.top.as_ref().and_then(|t| t.keep.clone()),
            ),
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Files this collector reads each sample.
    pub fn wanted(&self) -> FileSet {
        self.want
    }

    /// One sample into `tree`, below's cgroup tree: the tree this
    /// collector filled last, unchanged (updated in place while the kept
    /// cgroups are the same), or a default one (built anew).
    pub fn sample(&mut self, tree: &mut CgroupSample) -> Report {
        let mut report = self.read();
        let (build, took) = Elapsed::of(|| self.table.fill_tree(tree));
        report.tree = Some(TreeFill { build, took });
        report
    }

    /// One sample as a flat pre-order list (tests, measurements).
    pub fn collect(&mut self) -> FlatSample {
        let report = self.read();
        FlatSample {
            nodes: self.table.take_nodes(),
            report,
        }
    }

    /// One sample into the collector's table: what each backend reads and
    /// where ranking happens are decided here, once, and carried out by
    /// the backends; a backend that fails for this sample leaves its files
    /// to plain read ([`Work::fall_back`]).
    fn read(&mut self) -> Report {
        let mut report = Report::default();
        let files_of = |kind| self.plan.files_of(kind).intersection(self.want);
        let mut work = Work {
            bpf: files_of(BackendKind::Bpf),
            stream: files_of(BackendKind::Stream),
            text: files_of(BackendKind::Read),
        };
        let streams = match self.streams.as_mut().map(|st| st.wait().map(|()| st)) {
            Some(Ok(st)) => Some(st),
            Some(Err(why)) => {
                work.fall_back(BackendKind::Stream, &why, &mut report);
                None
            }
            None => None,
        };
        let by = self.ranker.as_ref().map(|r| r.top.by);
        // Over the records when they hold the ranked value, unless streams
        // fill values after the pass.
        let pass_groups = (self.bpf.as_ref().zip(by))
            .filter(|_| streams.is_none())
            .and_then(|(bpf, by)| bpf.rank_groups(by));
        let mut rank_at = match by {
            None => RankAt::Nowhere,
            Some(_) if pass_groups.is_some() => RankAt::Pass,
            Some(_) if self.bpf.is_none() && streams.is_none() => RankAt::Walk,
            Some(_) => RankAt::Samples,
        };
        let table = &mut self.table;
        let errors = &mut report.errors;
        match &mut self.bpf {
            Some(bpf) => {
                let top = self.ranker.as_mut().zip(pass_groups);
                match bpf.collect(table, &mut self.walker, work.bpf, work.text, top, errors) {
                    Ok(pass) => report.pass = Some(pass),
                    Err(e) => {
                        work.fall_back(BackendKind::Bpf, &format!("{e:#}"), &mut report);
                        rank_at = rank_at.after_failed_pass();
                        self.walker.walk(table, work.text, &mut report.errors);
                    }
                }
            }
            None => match self.ranker.as_mut().filter(|_| rank_at == RankAt::Walk) {
                Some(ranker) => {
                    crate::top::walk(&mut self.walker, ranker, table, work.text, errors)
                }
                None => self.walker.walk(table, work.text, errors),
            },
        }
        if let Some(st) = streams {
            read_streams(st, &mut self.walker, work.stream, table, &mut report);
            st.end_sample();
        }
        if let Some(ranker) = self.ranker.as_mut() {
            if rank_at == RankAt::Samples {
                // Every cgroup's files are in (the ranked value among
                // them); only the kept ones are stored.
                crate::top::choose_by_samples(ranker, table);
            }
            ranker.commit();
        }
        report.dropped = table.dropped();
        report
    }

    /// Cgroups in the last sample (after top-N).
    pub fn cgroups(&self) -> usize {
        self.table.len()
    }

    /// Runs only the BPF iterator pass (no tree build), for measuring the
    /// two apart; `None` when no file is planned for BPF.
    pub fn bpf_pass(&mut self) -> Option<Result<u32>> {
        self.bpf.as_mut().map(|b| b.pass())
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

/// The files each backend reads this sample.
struct Work {
    bpf: FileSet,
    stream: FileSet,
    text: FileSet,
}

impl Work {
    /// `kind` cannot serve this sample (`why`): its files are read as
    /// text, and the report says so.
    fn fall_back(&mut self, kind: BackendKind, why: &str, report: &mut Report) {
        let files = match kind {
            BackendKind::Bpf => std::mem::take(&mut self.bpf),
            BackendKind::Stream => std::mem::take(&mut self.stream),
            BackendKind::Read => return,
        };
        report.notes.push(format!(
            "{kind} backend: {why}; plain read of {files:?} this sample"
        ));
        self.text = self.text.union(files);
    }
}

/// Where a sample is ranked (top-N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RankAt {
    /// No top-N.
    Nowhere,
    /// Over the pass's records, before the kept ones are decoded.
    Pass,
    /// Plain read's two steps: the ranked file of every cgroup, then the
    /// other files of the kept ones.
    Walk,
    /// Over the samples once every file is in.
    Samples,
}

impl RankAt {
    /// Where the sample is ranked once its pass failed (read as text).
    fn after_failed_pass(self) -> RankAt {
        match self {
            RankAt::Pass => RankAt::Samples,
            other => other,
        }
    }
}

/// Fills `files` of every cgroup of the table from its stream files; a
/// file without a fresh record is read as plain text instead.
fn read_streams(
    st: &mut Streams,
    walker: &mut Walker,
    files: FileSet,
    table: &mut Table,
    snap: &mut Report,
) {
    let mut stale = 0;
    for pos in 0..table.len() {
        let id = table.id(pos);
        for file in files.iter() {
            let error = match st.read(id, || table.row(pos).raw.clone(), file) {
                Ok(StreamRead::Text(text)) => {
                    let s = table.sample_mut(pos);
                    match apply(file, text, s, &mut PressureParts::default()) {
                        Ok(()) => continue,
                        Err(e) => e.to_string(),
                    }
                }
                Ok(StreamRead::Absent) => continue,
                Err(Stale::NoRecord) => {
                    stale += 1;
                    let only = [file].into_iter().collect();
                    walker.read_row(table, pos, only, &mut snap.errors);
                    continue;
                }
                Err(Stale::Io(e)) => e.to_string(),
            };
            snap.errors.push(FileError {
                cgroup: table.row(pos).path.clone(),
                file,
                error,
            });
        }
    }
    if stale > 0 {
        snap.notes.push(format!(
            "stream backend: {} stream files had no new record; read as plain text",
            stale
        ));
    }
}
