//! Top-N: keep only the busiest cgroups of a sample (plus their ancestors,
//! so the tree stays a tree, and any cgroup matching an always-keep
//! pattern). The rest are counted, not converted or stored.
//!
//! Rates are per cgroup id against the counter seen at the previous pass,
//! which is kept for every cgroup, stored or not: a cgroup entering the top
//! N is ranked by what it did since the last pass, never against an older
//! stored sample.

use model::CgroupSample;
use regex::Regex;
use serde::Deserialize;
use serde::Serialize;

use crate::ids::IdMap;
use crate::read::Walker;
use crate::table::Table;
use crate::FileError;
use crate::FileSet;
use crate::StatFile;

/// What cgroups are ranked by (`--cgroup-top-by`, config `cgroup_top_by`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TopBy {
    /// CPU time used since the previous pass (cpu.stat usage_usec).
    #[default]
    Cpu,
    /// Memory in use now (memory.current): a level, not a rate.
    Memory,
    /// Bytes read and written since the previous pass (io.stat).
    Io,
    /// Time stalled on cpu, io and memory since the previous pass (the
    /// "some" totals of the pressure files).
    Pressure,
}

impl TopBy {
    /// Gauges rank by their value, counters by their increase.
    fn is_counter(self) -> bool {
        self != TopBy::Memory
    }

    /// A parent's value sums its children's (pressure does not add up).
    fn is_additive(self) -> bool {
        self != TopBy::Pressure
    }

    /// The files the ranked value comes from.
    pub(crate) fn files(self) -> FileSet {
        let files: &[StatFile] = match self {
            TopBy::Cpu => &[StatFile::CpuStat],
            TopBy::Memory => &[StatFile::MemoryCurrent],
            TopBy::Io => &[StatFile::IoStat],
            // below keeps the three as one field.
            TopBy::Pressure => &[
                StatFile::CpuPressure,
                StatFile::IoPressure,
                StatFile::MemoryPressure,
            ],
        };
        files.iter().copied().collect()
    }

    /// The value ranked on, from a sample (plain read, stream, and files
    /// the BPF record does not hold).
    pub(crate) fn value(self, s: &CgroupSample) -> Option<u64> {
        match self {
            TopBy::Cpu => s.cpu_stat.as_ref()?.usage_usec,
            TopBy::Memory => s.memory_current.map(|v| v.max(0) as u64),
            TopBy::Io => s.io_stat.as_ref().map(|devs| {
                devs.values()
                    .map(|d| d.rbytes.unwrap_or(0) + d.wbytes.unwrap_or(0))
                    .sum()
            }),
            TopBy::Pressure => {
                let p = s.pressure.as_ref()?;
                Some(
                    [p.cpu.some.total, p.io.some.total, p.memory.some.total]
                        .iter()
                        .map(|t| t.unwrap_or(0))
                        .sum(),
                )
            }
        }
    }
}

/// `--cgroup-top N`, `--cgroup-top-by`, `--cgroup-top-keep`.
#[derive(Clone, Debug)]
pub struct TopN {
    pub n: usize,
    pub by: TopBy,
    /// Cgroups whose path relative to the root matches are always kept.
    pub keep: Option<Regex>,
}

/// Ranks each sample against the previous one.
pub(crate) struct Ranker {
    pub(crate) top: TopN,
    /// The ranked value of every cgroup at the previous sample, by id.
    prev: IdMap<u64>,
    /// This sample's, kept by [`Ranker::commit`]: a sample ranked and then
    /// read again another way (a later step failed) ranks again against
    /// the same previous sample, not against values read moments earlier
    /// (which would make every rate about 0).
    next: IdMap<u64>,
}

impl Ranker {
    pub(crate) fn new(top: TopN) -> Self {
        Ranker {
            top,
            prev: IdMap::default(),
            next: IdMap::default(),
        }
    }

    /// The sample's ranking stands: its values are what the next one is
    /// ranked against (cgroups it did not see are forgotten).
    pub(crate) fn commit(&mut self) {
        std::mem::swap(&mut self.prev, &mut self.next);
        self.next.clear();
    }

    /// Which of one pass's nodes to keep: `parents` in pre-order (see
    /// [`select`]), each node's cgroup id and ranked value, and whether it
    /// is always kept. Every backend's top-N is this choice.
    pub(crate) fn rank(
        &mut self,
        parents: &[Option<usize>],
        value: impl Fn(usize) -> (u64, Option<u64>),
        always: impl Fn(usize) -> bool,
    ) -> Vec<bool> {
        self.next.clear();
        let scores = (0..parents.len())
            .map(|i| {
                let (id, v) = value(i);
                self.score(id, v)
            })
            .collect();
        let always: Vec<bool> = (0..parents.len()).map(always).collect();
        self.choose(parents, scores, &always)
    }

    /// The score of one cgroup this sample (once per cgroup). A cgroup not
    /// seen at the previous sample is new since then (or this is the
    /// first): its whole counter counts.
    fn score(&mut self, id: u64, value: Option<u64>) -> u64 {
        let Some(v) = value else { return 0 };
        self.next.insert(id, v);
        if !self.top.by.is_counter() {
            return v;
        }
        v.saturating_sub(self.prev.get(&id).copied().unwrap_or(0))
    }

    /// Which nodes to keep (see [`select`]), given each node's score this
    /// pass. Additive values rank by the cgroup's own share (its value less
    /// its children's): the busiest are where the work is, and a parent
    /// that only sums them comes along as their ancestor without taking
    /// one of the N places.
    fn choose(
        &self,
        parents: &[Option<usize>],
        mut scores: Vec<u64>,
        always: &[bool],
    ) -> Vec<bool> {
        if self.top.by.is_additive() {
            let mut children = vec![0u64; scores.len()];
            for (i, p) in parents.iter().enumerate() {
                if let Some(p) = *p {
                    children[p] = children[p].saturating_add(scores[i]);
                }
            }
            for (s, c) in scores.iter_mut().zip(children) {
                *s = s.saturating_sub(c);
            }
        }
        select(parents, &scores, always, self.top.n)
    }
}

/// Which nodes to keep. `parents` is pre-order (`parents[i] < i`, node 0
/// the root, which is always kept and never ranked): the `n` non-root nodes
/// with the highest `scores` (ties: the earlier node), every node with
/// `always[i]`, and all their ancestors.
pub(crate) fn select(
    parents: &[Option<usize>],
    scores: &[u64],
    always: &[bool],
    n: usize,
) -> Vec<bool> {
    let mut keep = vec![false; parents.len()];
    if parents.is_empty() {
        return keep;
    }
    let mut order: Vec<usize> = (1..parents.len()).collect();
    let n = n.min(order.len());
    if n > 0 && n < order.len() {
        // Only the first n need to be the largest; their order is free.
        order.select_nth_unstable_by(n - 1, |&a, &b| scores[b].cmp(&scores[a]).then(a.cmp(&b)));
    }
    let chosen = order[..n]
        .iter()
        .copied()
        .chain((1..parents.len()).filter(|&i| always[i]));
    keep[0] = true;
    for i in chosen {
        let mut cur = Some(i);
        // Stop at the first kept ancestor: its own ancestors are kept.
        while let Some(c) = cur.filter(|&c| !keep[c]) {
            keep[c] = true;
            cur = parents[c];
        }
    }
    keep
}

/// The one top-N selection, for every backend: ranks the table's
/// cgroups by `value` (id and ranked value at a position; the root is
/// never ranked) and keeps the chosen ones.
pub(crate) fn choose(ranker: &mut Ranker, table: &mut Table, value: impl Fn(usize) -> Option<u64>) {
    let keep = keep(ranker, table, value);
    table.retain(&keep);
}

/// Which positions [`choose`] keeps, for a caller that needs the choice
/// before the table drops the rest (the BPF passes).
pub(crate) fn keep(
    ranker: &mut Ranker,
    table: &Table,
    value: impl Fn(usize) -> Option<u64>,
) -> Vec<bool> {
    ranker.rank(
        table.parents(),
        |i| (table.id(i), (i > 0).then(|| value(i)).flatten()),
        |i| table.row(i).always,
    )
}

/// Ranks the table by the samples' values (plain read, streams, and
/// files the BPF record does not hold).
pub(crate) fn choose_by_samples(ranker: &mut Ranker, table: &mut Table) {
    let by = ranker.top.by;
    let values: Vec<Option<u64>> = (0..table.len())
        .map(|i| by.value(table.sample(i)))
        .collect();
    choose(ranker, table, |i| values[i]);
}

/// Plain read with top-N: the ranked file of every cgroup, then the other
/// `files` of the kept ones only.
pub(crate) fn walk(
    walker: &mut Walker,
    ranker: &mut Ranker,
    table: &mut Table,
    files: FileSet,
    errors: &mut Vec<FileError>,
) {
    let key = ranker.top.by.files().intersection(files);
    walker.walk(table, key, errors);
    choose_by_samples(ranker, table);
    let rest = files.difference(key);
    for i in 0..table.len() {
        walker.read_row(table, i, rest, errors);
    }
}

#[cfg(test)]
#[path = "top_test.rs"]
mod test;
