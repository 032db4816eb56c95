//! The BPF backend: one sleepable cgroup iterator pass per sample writes a
//! fixed-size record per cgroup into an mmapped array map (memory.numa_stat
//! rows into a second one); the tree and
//! the samples are built from those records with no readdir and no text.
//!
//! - `cgroup_stats.bpf.c`, `cgroup_stats.h`: the program and the contract
//!   (record layout and tables; `contract` is its Rust side, generated);
//! - `load`: loading, running a pass, reading the records (through the
//!   BPF layer, bstats-bpf);
//! - `protocol`: which passes a sample runs (FULL, or RANK then WANTED);
//! - `probe`: what this kernel allows, per stat file;
//! - `decode`: a record to a `CgroupSample`.
//!
//! What BPF cannot serve is read as text for that file only: the root's
//! cpu.stat and pressure from kept fds ([`RootText`]), and files the plan
//! gives to plain read through [`Walker::read_at`].

#[cfg(test)]
mod btf_edit;
pub(crate) mod contract;
mod decode;
#[cfg(test)]
mod facts_test;
mod kernel;
#[cfg(test)]
mod kernel_test;
mod load;
mod probe;
#[cfg(test)]
mod probe_test;
mod protocol;
mod psi;
mod sample;

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::time::Duration;
use std::time::Instant;

use anyhow::Result;
/// The BPF layer (a module of its own where this code is part of below).
use bstats_bpf as layer;
use model::CgroupSample;
use regex::Regex;

use self::contract::Record;
use self::decode::Decoder;
use self::decode::PrevCputime;
use self::load::Loaded;
use self::load::Pass;
pub(crate) use self::probe::probe;
use self::protocol::Passes;
use self::protocol::Rank;
use self::protocol::Visible;
use crate::ids::IdMap;
use crate::read::RootText;
use crate::read::Walker;
use crate::top::Ranker;
use crate::FileError;
use crate::FileSet;
use crate::Node;
use crate::Snapshot;
use crate::StatFile;
use crate::TopBy;
use crate::Tree;

pub(crate) struct BpfBackend {
    loaded: Loaded,
    view: View,
    root_text: Option<RootText>,
    prev_cputime: PrevCputime,
    /// Thread CPU and wall time of the last sample's pass.
    pub(crate) last_pass: (Duration, Duration),
}

/// The visible cgroups of the last pass (not filtered out, parent
/// visible), and what is known of every cgroup seen.
struct View {
    filter: Option<Regex>,
    /// Paths are learnt (a filter, keep pattern or text file needs them).
    need_paths: bool,
    /// The top-N always-keep pattern.
    keep_re: Option<Regex>,
    /// What never changes for a cgroup, by id (cgroup2 cannot rename or
    /// move a cgroup): decoded and matched once, not every pass.
    known: IdMap<Known>,
    /// Pass number, to forget cgroups that are gone.
    pass: u64,
    /// Reused per sample, indexed by visible cgroup: cgroup id -> index,
    /// record index, parent index.
    ids: IdMap<usize>,
    records: Vec<usize>,
    parents: Vec<Option<usize>>,
}

/// The loaded program running passes under `root`.
struct Program<'a> {
    loaded: &'a mut Loaded,
    root: BorrowedFd<'a>,
}

impl Passes for Program<'_> {
    fn run_all(&mut self, mode: usize, rank_groups: u32) -> Result<Pass> {
        self.loaded.run_all(self.root, mode, rank_groups)
    }

    fn records(&self, n: u32) -> &[Record] {
        self.loaded.records(n)
    }

    fn records_mut(&mut self, n: u32) -> &mut [Record] {
        self.loaded.records_mut(n)
    }
}

struct Known {
    name: String,
    /// Relative to the root; empty unless a filter, keep pattern or text
    /// file needs it.
    path: String,
    /// Skipped with its subtree by the filter.
    filtered: bool,
    /// Matches the top-N always-keep pattern.
    always: bool,
    /// The last pass that saw it.
    seen: u64,
}

impl BpfBackend {
    fn new(loaded: Loaded, filter: Option<Regex>) -> Self {
        BpfBackend {
            loaded,
            view: View {
                filter,
                need_paths: false,
                keep_re: None,
                known: IdMap::default(),
                pass: 0,
                ids: IdMap::default(),
                records: Vec::new(),
                parents: Vec::new(),
            },
            root_text: None,
            prev_cputime: HashMap::new(),
            last_pass: Default::default(),
        }
    }

    /// The iterator pass alone; returns the number of cgroups visited.
    pub(crate) fn pass(&mut self) -> Result<u32> {
        self.loaded.run(contract::PASS_FULL, 0).map(|p| p.cgroups)
    }

    /// One sample: `bpf` files from the records, `text` files read as text
    /// per cgroup (relative to `walker`'s root fd). With `top`, cgroups are
    /// ranked over the records and only the selected ones decoded (the
    /// passes: [`protocol`]), unless the ranked value is not in the record
    /// (io): then all are decoded and the flag returned says the caller
    /// must still rank.
    ///
    /// Fails only when the pass cannot run (the caller reads text instead).
    pub(crate) fn collect(
        &mut self,
        walker: &mut Walker,
        bpf: FileSet,
        text: FileSet,
        mut top: Option<&mut Ranker>,
        tree: Option<&mut Tree>,
    ) -> Result<(Snapshot, bool, bool)> {
        let mut snap = Snapshot::default();
        let (cpu, wall) = (layer::thread_cpu_time(), Instant::now());
        let view = &mut self.view;
        view.keep_re = top.as_ref().and_then(|t| t.top.keep.clone());
        view.need_paths = view.filter.is_some() || view.keep_re.is_some() || !text.is_empty();
        let limits = *self.loaded.limits();
        let by = top.as_ref().map(|t| t.top.by);
        let mut choose = |view: &View, records: &[Record], pass: &Pass| {
            let rank = top.as_deref_mut().expect("a rank pass only with top");
            let decoder = Decoder::new(&limits, pass);
            let by = rank.top.by;
            let record = |j: usize| &records[view.records[j]];
            rank.rank(
                &view.parents,
                |j| (record(j).id, decoder.rank_value(record(j), by)),
                |j| view.known[&record(j).id].always,
            )
        };
        let rank = by.and_then(rank_groups).map(|groups| Rank {
            groups,
            choose: &mut choose,
        });
        let mut program = Program {
            loaded: &mut self.loaded,
            root: walker.root_fd(),
        };
        let sampled = protocol::sample(&mut program, view, rank)?;
        let (pass, keep) = (sampled.pass, sampled.keep);
        self.last_pass = (layer::thread_cpu_time() - cpu, wall.elapsed());
        let decoder = Decoder::new(&limits, &pass);
        let loaded = &self.loaded;
        let records = loaded.records(pass.cgroups);
        let view = &self.view;
        // The visible cgroups that are kept, and the node index of each.
        let mut kept = Vec::with_capacity(view.records.len());
        let mut node_of = vec![usize::MAX; view.records.len()];
        for j in 0..view.records.len() {
            if keep.as_ref().is_some_and(|k| !k[j]) {
                snap.dropped += 1;
            } else {
                node_of[j] = kept.len();
                kept.push(j);
            }
        }
        let known = &view.known;
        let name = |j: usize| known[&records[view.records[j]].id].name.as_str();
        let parents = &view.parents;
        let parent = |j: usize| parents[j].map(|p| node_of[p]);
        let mut prev = std::mem::take(&mut self.prev_cputime);
        let root_text = &mut self.root_text;
        let mut fill = |j: usize, sample: &mut CgroupSample, errors: &mut Vec<FileError>| {
            let i = view.records[j];
            let r = &records[i];
            decoder.fill(r, loaded.numa(i), bpf, &mut prev, sample);
            if r.level == 0 {
                root_text
                    .get_or_insert_with(|| RootText::open(walker.root_fd(), root_text_files(bpf)))
                    .fill(sample, errors);
            }
            if !text.is_empty() {
                walker.read_at(&known[&r.id].path, text, sample, errors);
            }
        };
        // A tree of the same cgroups takes the sample in place, unless the
        // caller still ranks the snapshot's nodes.
        let still_rank = top.is_some() && keep.is_none();
        let in_tree = match tree {
            Some(t) if !still_rank && t.same_shape(kept.iter().map(|&j| (parent(j), name(j)))) => {
                t.update(|n, s| fill(kept[n], s, &mut snap.errors));
                true
            }
            _ => {
                snap.nodes = kept
                    .iter()
                    .map(|&j| {
                        let mut sample = CgroupSample::default();
                        fill(j, &mut sample, &mut snap.errors);
                        Node {
                            parent: parent(j),
                            name: name(j).to_owned(),
                            sample,
                        }
                    })
                    .collect();
                false
            }
        };
        // Keep history only for cgroups that still exist.
        prev.retain(|id, _| view.ids.contains_key(id));
        self.prev_cputime = prev;
        let view = &mut self.view;
        let pass = view.pass;
        view.known.retain(|_, k| k.seen == pass);
        Ok((snap, still_rank, in_tree))
    }
}

impl Visible for View {
    fn index(&mut self, records: &[Record]) {
        View::index(self, records)
    }

    fn visible(&self) -> &[usize] {
        &self.records
    }
}

impl View {
    /// Indexes a pass's records: the visible cgroups (not filtered,
    /// parent visible) in pre-order, each one's parent, and what is known
    /// of each (learnt the first time its id is seen).
    fn index(&mut self, records: &[Record]) {
        self.pass += 1;
        self.ids.clear();
        self.records.clear();
        self.parents.clear();
        for (i, r) in records.iter().enumerate() {
            let parent = if i == 0 {
                None
            } else {
                // Parent skipped by the filter (or not seen): skip too.
                match self.ids.get(&r.parent_id) {
                    Some(&p) => Some(p),
                    None => continue,
                }
            };
            if !self.known.contains_key(&r.id) {
                let k = self.learn(r, parent.is_some());
                self.known.insert(r.id, k);
            }
            let k = self.known.get_mut(&r.id).expect("inserted above");
            k.seen = self.pass;
            if k.filtered {
                continue;
            }
            self.ids.insert(r.id, self.records.len());
            self.records.push(i);
            self.parents.push(parent);
        }
    }

    /// What is fixed for the life of a cgroup (its parent is known).
    fn learn(&self, r: &Record, child: bool) -> Known {
        let (need_paths, keep) = (self.need_paths, self.keep_re.as_ref());
        let name = if child {
            decode::name(r)
        } else {
            String::new()
        };
        let path = match self.known.get(&r.parent_id) {
            Some(p) if child && need_paths && !p.path.is_empty() => format!("{}/{name}", p.path),
            _ if child && need_paths => name.clone(),
            _ => String::new(),
        };
        Known {
            filtered: child && self.filter.as_ref().is_some_and(|re| re.is_match(&path)),
            always: child && keep.is_some_and(|re| re.is_match(&path)),
            name,
            path,
            seen: 0,
        }
    }
}

/// The HAS_* groups a RANK pass reads for `by`; None: not in the record.
fn rank_groups(by: TopBy) -> Option<u32> {
    match by {
        TopBy::Cpu => Some(contract::HAS_BSTAT),
        TopBy::Memory => Some(contract::HAS_MEMCG),
        TopBy::Pressure => Some(contract::HAS_PSI),
        TopBy::Io => None,
    }
}

/// The root's files that BPF cannot serve but the plan gives to BPF.
fn root_text_files(bpf: FileSet) -> FileSet {
    [
        StatFile::CpuStat,
        StatFile::CpuPressure,
        StatFile::IoPressure,
        StatFile::MemoryPressure,
    ]
    .into_iter()
    .filter(|f| bpf.contains(*f))
    .collect()
}
