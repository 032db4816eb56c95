//! The BPF backend: one pass per sample writes a fixed-size record per
//! cgroup into an mmapped array map (pressure and memory.numa_stat rows
//! into others); the tree and the samples are built from those records with no
//! readdir and no text. The pass holds no cgroup lock where the kernel
//! allows it, else walks as a cgroup iterator under cgroup_mutex
//! (`load::Walk`).
//!
//! - `cgroup_bpf.bpf.c`, `cgroup_bpf_record.h`: below main's program and the
//!   contract (record layout and tables; `contract` is its Rust side,
//!   generated);
//! - `load`: loading one form of the pass, running it, reading the records
//!   (through the BPF layer, bstats-bpf);
//! - `bstats.bpf.c`, `program`: the program a backend runs, the fork's:
//!   cgroup_stats with pressure (`cgroup_psi.bpf.c`, `cgroup_psi.h`,
//!   `psi`: the files as read at the pass), memory.numa_stat
//!   (`cgroup_numa.bpf.c`, `cgroup_numa.h`, `numa`) and the top-N pass
//!   modes (`cgroup_rank.h`); below main's alone where it does not load;
//! - `protocol`: which passes a sample runs (FULL, or RANK then WANTED);
//! - `probe`: what this kernel allows, per stat file;
//! - `decode`: a record's fields as below's types; `fill`: a record into
//!   a `CgroupSample` (the files the plan gives BPF) and its top-N value;
//! - `kernel`: what BTF says of this kernel;
//! - `verifier`: what the verifier does with each form of both programs
//!   (`bstats-check verifier`).
//!
//! Shared with below main's series (patches/below/reader carries them
//! without their lines marked fork-only, `tests/upstream/sync.sh --check`):
//! `cgroup_bpf.bpf.c`, `cgroup_bpf_record.h`, `contract.rs`, `decode.rs`,
//! `kernel.rs`, `load.rs` (with their tests) and bstats-bpf's `layer.rs` and
//! `cputime.rs`: they use nothing of the fork's, and a change to one goes into
//! the series (`tests/upstream/sync.sh --refresh`). Pressure is the fork's alone: it
//! reads scheduler internals below main's program leaves to the files; so
//! is memory.numa_stat, whose items' places BTF does not give.
//!
//! What BPF cannot serve is read as text for that file only: the root's
//! cpu.stat and pressure from kept fds ([`RootText`]), and files the plan
//! gives to plain read through [`Walker::read_row`].

#[cfg(test)]
mod btf_edit;
#[macro_use]
pub(crate) mod contract;
mod decode;
#[cfg(test)]
mod facts_test;
mod fill;
#[cfg(test)]
mod grow_test;
#[cfg(test)]
mod index_test;
mod kernel;
#[cfg(test)]
mod kernel_test;
mod load;
#[macro_use]
pub(crate) mod numa;
#[cfg(test)]
mod print_test;
mod probe;
#[cfg(test)]
mod probe_test;
mod program;
#[cfg(test)]
mod program_test;
mod protocol;
mod psi;
pub mod verifier;
#[cfg(test)]
mod verifier_test;
#[cfg(test)]
mod walk_test;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
/// The BPF layer (a module of its own where this code is part of below).
use bstats_bpf as layer;
/// The cputime split (a module of its own where this code is part of below).
use bstats_bpf::cputime;

use self::decode::Decoder;
use self::decode::PrevCputime;
use self::load::Pass;
pub(crate) use self::probe::probe;
use self::program::PassRunner;
use self::program::Program;
use self::protocol::Rank;
use self::protocol::Rows;
use self::protocol::TreeIndex;
use crate::read;
use crate::read::RootText;
use crate::read::Walker;
use crate::table::Table;
use crate::top::Ranker;
use crate::Elapsed;
use crate::FileError;
use crate::FileSet;
use crate::StatFile;
use crate::TopBy;

pub(crate) struct BpfBackend {
    program: Program,
    /// The BTF file it is relocated against, if not the kernel's.
    btf: Option<PathBuf>,
    /// Record index of each table position, this pass.
    records: Vec<usize>,
    root_text: Option<RootText>,
    prev_cputime: PrevCputime,
}

/// A pass's records indexed into the table.
struct Indexed<'a> {
    table: &'a mut Table,
    records: &'a mut Vec<usize>,
    /// The cgroup root, where names are looked up when the pass has none.
    root: BorrowedFd<'a>,
}

impl BpfBackend {
    /// `btf`: as `program` was loaded.
    fn new(program: Program, btf: Option<PathBuf>) -> Self {
        BpfBackend {
            program,
            btf,
            records: Vec::new(),
            root_text: None,
            prev_cputime: HashMap::new(),
        }
    }

    /// The CGB_HAS_* groups a RANK pass reads to rank by `by`; None when the
    /// record does not hold the ranked value or the program does not rank
    /// (the caller ranks the table once the text files are in).
    pub(crate) fn rank_groups(&self, by: TopBy) -> Option<u32> {
        if !self.program.ranks() {
            return None;
        }
        match by {
            TopBy::Cpu => Some(contract::CGB_HAS_BSTAT),
            TopBy::Memory => Some(contract::CGB_HAS_MEMCG),
            TopBy::Pressure => Some(psi::HAS_PSI),
            TopBy::Io => None,
        }
    }

    /// The iterator pass alone; returns the number of cgroups visited.
    pub(crate) fn pass(&mut self) -> Result<u32> {
        self.program.run().map(|p| p.cgroups)
    }

    /// One sample into `table`: `bpf` files from the records, `text`
    /// files read as text per cgroup (relative to `walker`'s root fd).
    /// With `top` (a ranker and its [`BpfBackend::rank_groups`]), cgroups
    /// are ranked over the records and only the kept ones decoded (the
    /// passes: [`protocol`]).
    ///
    /// Returns the pass's time; fails only when the pass cannot run (the
    /// caller reads text instead).
    pub(crate) fn collect(
        &mut self,
        table: &mut Table,
        walker: &mut Walker,
        bpf: FileSet,
        text: FileSet,
        top: Option<(&mut Ranker, u32)>,
        errors: &mut Vec<FileError>,
    ) -> Result<Elapsed> {
        let (cpu, wall) = (layer::thread_cpu_time(), Instant::now());
        let config = *self.program.loaded().config();
        let mut choose;
        let rank = match top {
            Some((ranker, groups)) => {
                choose = move |ix: &Indexed, rows: Rows, _: &Pass| {
                    let decoder = Decoder::new(&config);
                    let by = ranker.top.by;
                    crate::top::keep(ranker, ix.table, |j| {
                        let i = ix.records[j];
                        fill::rank_value(&decoder, &rows.records[i], rows.pressure.get(i), by)
                    })
                };
                Some(Rank {
                    groups,
                    choose: &mut choose,
                })
            }
            None => None,
        };
        let mut program = PassRunner {
            program: &mut self.program,
            root: walker.root_fd(),
            btf: self.btf.as_ref(),
        };
        let mut ix = Indexed {
            table,
            records: &mut self.records,
            root: walker.root_fd(),
        };
        let sampled = protocol::sample(&mut program, &mut ix, rank)?;
        let time = Elapsed {
            cpu: layer::thread_cpu_time() - cpu,
            wall: wall.elapsed(),
        };
        if let Some(keep) = &sampled.keep {
            let mut k = keep.iter();
            self.records
                .retain(|_| *k.next().expect("a choice per position"));
            table.retain(keep);
        }
        let decoder = Decoder::new(&config);
        let psi = self.program.psi();
        let rows = self.program.rows(sampled.pass.cgroups);
        let numa = self.program.numa(sampled.pass.cgroups);
        let mut prev = std::mem::take(&mut self.prev_cputime);
        let root_text = &mut self.root_text;
        // Pressure BPF serves, read as text for a cgroup whose record
        // cannot give what its files print (PsiPass::exact).
        let pressure_text = text.union(bpf.iter().filter(|f| f.is_pressure()).collect());
        for (pos, &i) in self.records.iter().enumerate() {
            let r = &rows.records[i];
            let s = table.sample_mut(pos);
            let pressure = psi.as_ref().zip(rows.pressure.get(i));
            let numa = numa.as_ref().map(|n| (n, n.of(i)));
            fill::fill(&decoder, r, numa, pressure, bpf, &mut prev, s);
            let mut row_text = text;
            if r.level == 0 {
                root_text
                    .get_or_insert_with(|| RootText::open(walker.root_fd(), root_text_files(bpf)))
                    .fill(s, errors);
            } else if pressure
                .is_some_and(|(p, row)| decode::has(r, psi::HAS_PSI) && !p.exact(r, row))
            {
                row_text = pressure_text;
            }
            // A cpu.idle group's weight, which the record cannot tell.
            if bpf.contains(StatFile::CpuWeight)
                && r.level != 0
                && decode::shows(r, contract::CGB_HAS_CPU, contract::CGB_CTRL_cpu)
                && decode::cpu_weight(r.weight).is_none()
            {
                row_text.insert(StatFile::CpuWeight);
            }
            if bpf.contains(StatFile::CgroupControllers) {
                row_text = existing(row_text, r.controllers);
            }
            walker.read_row(table, pos, row_text, errors);
        }
        // Keep history only for cgroups that still exist.
        prev.retain(|&id, _| table.knows(id));
        self.prev_cputime = prev;
        Ok(time)
    }
}

impl TreeIndex for Indexed<'_> {
    /// Indexes a pass's records: the visible cgroups (not filtered,
    /// parent visible) in pre-order, each one's parent, and what is known
    /// of each (learnt the first time its id is seen: its name from the
    /// pass, else from its parent's directory).
    fn index(&mut self, rows: Rows) {
        self.table.begin();
        self.records.clear();
        // Without names from the pass: the children of each parent (by
        // position) with a cgroup new to the table, listed once.
        let mut listed: HashMap<usize, HashMap<u64, OsString>> = HashMap::new();
        for (i, r) in rows.records.iter().enumerate() {
            let parent = if i == 0 {
                None
            } else {
                // Parent skipped by the filter (or not seen): skip too.
                match self.table.position(r.parent_id) {
                    Some(p) => Some(p),
                    None => continue,
                }
            };
            let name = match (parent, rows.names.get(i)) {
                (None, _) => None,
                (Some(_), Some(n)) => Some(program::name(n)),
                (Some(_), None) if self.table.learnt(r.id) => None,
                (Some(p), None) => {
                    let children = listed
                        .entry(p)
                        .or_insert_with(|| read::children_by_id(self.root, &self.table.row(p).raw));
                    // Gone since the pass: skipped, with its subtree.
                    let Some(name) = children.remove(&r.id) else {
                        continue;
                    };
                    Some(name)
                }
            };
            if (self.table)
                .visit(r.id, parent, || name.unwrap_or_default())
                .is_some()
            {
                self.records.push(i);
            }
        }
        self.table.end();
    }

    fn visible(&self) -> &[usize] {
        self.records
    }
}

/// The root's files that BPF cannot serve but the plan gives to BPF.
/// `files` less the files of controllers the cgroup does not have
/// (`controllers`: its record's cgroup.controllers bits): those do not
/// exist there, and opening them would only find ENOENT.
fn existing(files: FileSet, controllers: u32) -> FileSet {
    let enabled = |c: &str| {
        contract::CONTROLLERS
            .iter()
            .position(|&n| n == c)
            .is_some_and(|bit| controllers & (1 << bit) != 0)
    };
    files
        .iter()
        .filter(|f| f.controller().is_none_or(enabled))
        .collect()
}

/// Files whose root values no cgroup iterator sees (the kernel fills the
/// root's cpu.stat and pressure from per-CPU and system-wide state): where
/// BPF serves them, the root cgroup's are read as text.
pub(crate) const ROOT_AS_TEXT: [StatFile; 4] = [
    StatFile::CpuStat,
    StatFile::CpuPressure,
    StatFile::IoPressure,
    StatFile::MemoryPressure,
];

fn root_text_files(bpf: FileSet) -> FileSet {
    ROOT_AS_TEXT
        .into_iter()
        .filter(|f| bpf.contains(*f))
        .collect()
}
