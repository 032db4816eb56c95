//! The BPF backend: one sleepable cgroup iterator pass per sample writes a
//! fixed-size record per cgroup into an mmapped array map; the tree and
//! the samples are built from those records with no readdir and no text.
//!
//! - `cgroup_stats.bpf.c`, `cgroup_stats.h`: the program and the contract
//!   (record layout and tables; `contract` is its Rust side, generated);
//! - `load`: loading, running a pass, reading the records (all the unsafe);
//! - `probe`: what this kernel allows, per stat file;
//! - `decode`: a record to a `CgroupSample`.
//!
//! What BPF cannot serve is read as text for that file only: the root's
//! cpu.stat and pressure from kept fds ([`RootText`]), and files the plan
//! gives to plain read through [`Walker::read_at`].

pub(crate) mod contract;
mod decode;
mod load;
mod probe;

use std::collections::HashMap;

use anyhow::Context;
use anyhow::Result;
use regex::Regex;

use self::decode::Decoder;
use self::decode::PrevCputime;
use self::load::Loaded;
pub(crate) use self::probe::probe;
use self::probe::Limits;
use crate::read::RootText;
use crate::read::Walker;
use crate::FileSet;
use crate::Node;
use crate::Snapshot;
use crate::StatFile;

pub(crate) struct BpfBackend {
    loaded: Loaded,
    limits: Limits,
    filter: Option<Regex>,
    root_text: Option<RootText>,
    prev_cputime: PrevCputime,
    /// Reused per sample: cgroup id -> node index, node paths.
    ids: HashMap<u64, usize>,
    paths: Vec<String>,
}

impl BpfBackend {
    fn new(loaded: Loaded, limits: Limits, filter: Option<Regex>) -> Self {
        BpfBackend {
            loaded,
            limits,
            filter,
            root_text: None,
            prev_cputime: HashMap::new(),
            ids: HashMap::new(),
            paths: Vec::new(),
        }
    }

    /// The iterator pass alone; returns the number of cgroups visited.
    pub(crate) fn pass(&mut self) -> Result<u32> {
        self.loaded.run().map(|p| p.cgroups)
    }

    /// One sample: `bpf` files from the records, `text` files read as text
    /// per cgroup (relative to `walker`'s root fd).
    ///
    /// Fails only when the pass cannot run (the caller reads text instead).
    pub(crate) fn collect(
        &mut self,
        walker: &mut Walker,
        bpf: FileSet,
        text: FileSet,
    ) -> Result<Snapshot> {
        let mut snap = Snapshot::default();
        let (n, memory_nodes) = loop {
            let pass = self.loaded.run()?;
            let n = pass.cgroups;
            if n <= self.loaded.capacity {
                break (n, pass.memory_nodes);
            }
            // More cgroups than room: grow, then rerun this sample.
            let cap = n.saturating_mul(2).next_power_of_two();
            self.loaded = Loaded::new(walker.root_fd(), cap, self.limits)
                .with_context(|| format!("cannot grow the records map to {cap} cgroups"))?;
        };

        let need_paths = self.filter.is_some() || !text.is_empty();
        self.ids.clear();
        self.paths.clear();
        let mut prev = std::mem::take(&mut self.prev_cputime);
        let decoder = Decoder {
            cpus: self.limits.cpus,
            nodes: self.limits.nodes,
            numa: self.limits.numa,
            page_size: load::page_size(),
            memory_nodes,
        };
        let records = self.loaded.records(n);
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
            let name = if i == 0 {
                String::new()
            } else {
                decode::name(r)
            };
            let path = match parent {
                Some(p) if need_paths => {
                    let pp = &self.paths[p];
                    if pp.is_empty() {
                        name.clone()
                    } else {
                        format!("{pp}/{name}")
                    }
                }
                _ => String::new(),
            };
            if parent.is_some() && self.filter.as_ref().is_some_and(|re| re.is_match(&path)) {
                continue;
            }
            let idx = snap.nodes.len();
            self.ids.insert(r.id, idx);
            if need_paths {
                self.paths.push(path);
            }
            let mut sample = decoder.sample(r, bpf, &mut prev);
            if r.level == 0 {
                let root_text = self
                    .root_text
                    .get_or_insert_with(|| RootText::open(walker.root_fd(), root_text_files(bpf)));
                root_text.fill(&mut sample, &mut snap.errors);
            }
            if !text.is_empty() {
                walker.read_at(&self.paths[idx], text, &mut sample, &mut snap.errors);
            }
            snap.nodes.push(Node {
                parent,
                name,
                sample,
            });
        }
        // Keep cputime history only for cgroups that still exist.
        prev.retain(|id, _| self.ids.contains_key(id));
        self.prev_cputime = prev;
        Ok(snap)
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
