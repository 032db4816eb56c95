// Copyright (c) Facebook, Inc. and its affiliates.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! Loading the pass and reading what it wrote, through the BPF layer
//! (`super::layer`): the records and .bss are mmapped, passes run through
//! libbpf_rs::Iter. One form of the pass is loaded ([`Walk`]): under RCU
//! where the kernel allows it, else the cgroup iterator.

use std::fmt;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path; // fork-only
use std::path::PathBuf; // fork-only
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use libbpf_rs::skel::Skel;
use libbpf_rs::CgroupIterOpts;
use libbpf_rs::CgroupIterOrder;
use libbpf_rs::IterOpts;
use libbpf_rs::Link;
use libbpf_rs::OpenObject;

use super::contract::skel::types::bss as Bss;
use super::contract::skel::types::rodata as Rodata;
use super::contract::skel::CgroupBpfSkelBuilder;
use super::contract::Record;
use super::contract::CPU_WORDS;
use super::kernel::LoadConfig;
use super::layer;
use super::layer::MapView;
use super::layer::Pod;

// SAFETY: the skeleton's #[repr(C)] types of the object's record and data
// sections: integers and arrays of them.
unsafe impl Pod for Record {}
// SAFETY: as above.
unsafe impl Pod for Bss {}
// SAFETY: as above.
unsafe impl Pod for Rodata {}

/// How a pass walks the cgroup tree: which form of the program is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// `<prog>_rcu`: the cgroups listed by the css iterator under RCU, then
    /// read by id: no cgroup lock held.
    Rcu,
    /// `<prog>`: the cgroup iterator, which holds cgroup_mutex for the
    /// whole walk; why not under RCU.
    Locked(NoRcuWalk),
}

/// Why a pass holds cgroup_mutex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NoRcuWalk {
    /// Not tried: why (a kfunc the kernel lacks).
    Unavailable(&'static str),
    /// The form under RCU did not load: why.
    Load(String),
}

/// The name of a CGROUP_PASS's walk under RCU: the pass's and this.
const RCU_SUFFIX: &str = "_rcu";

impl Walk {
    /// Loads the pass with `load` under RCU where the kernel has the
    /// kfuncs (`rcu_walk`) and the verifier takes it, else as the cgroup
    /// iterator, saying why.
    pub(crate) fn first<T>(
        rcu_walk: Result<(), &'static str>,
        load: impl Fn(Walk) -> Result<T>,
    ) -> Result<T> {
        let why = match rcu_walk {
            Ok(()) => match load(Walk::Rcu) {
                Ok(loaded) => return Ok(loaded),
                Err(e) => NoRcuWalk::Load(format!("{e:#}")),
            },
            Err(why) => NoRcuWalk::Unavailable(why),
        };
        load(Walk::Locked(why))
    }

    /// The program of this form of `prog` (a CGROUP_PASS name).
    pub(crate) fn program(&self, prog: &str) -> String {
        match self {
            Walk::Rcu => format!("{prog}{RCU_SUFFIX}"),
            Walk::Locked(_) => prog.to_owned(),
        }
    }
}

impl fmt::Display for Walk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Walk::Rcu => f.write_str("the pass holds no cgroup lock (lists under RCU, reads by id)"),
            Walk::Locked(NoRcuWalk::Unavailable(why)) => {
                write!(f, "the pass holds cgroup_mutex for the whole walk ({why})")
            }
            Walk::Locked(NoRcuWalk::Load(why)) => write!(
                f,
                "the pass holds cgroup_mutex for the whole walk (the walk under RCU did not load: {why})"
            ),
        }
    }
}

/// A loaded and attached pass with room for `capacity` records.
pub(crate) struct Loaded {
    link: Link,
    records: MapView<Record>,
    bss: MapView<Bss>,
    /// Owns the program and maps the link and views use.
    _skel: Box<dyn Skel<'static>>,
    capacity: u32,
    config: LoadConfig,
    walk: Walk,
    // fork-only {
    /// BTF to relocate against instead of the running kernel's (tests).
    btf: Option<PathBuf>,
    // } fork-only
    /// When growing the records map last failed, and for how many cgroups.
    grow_failed: Option<(Instant, u32)>,
}

/// Records room at the first load where the tree's size cannot be read;
/// the map grows when a pass needs more.
// series: const FIRST_CAPACITY: u32 = 256;
pub(crate) const FIRST_CAPACITY: u32 = 256;

/// Records room at the first load: for the tree under `root` as its
/// cgroup.stat counts it, so that a host's first sample does not load the
/// program twice (a verifier pass each).
// series: fn first_capacity(root: BorrowedFd) -> u32 {
pub(crate) fn first_capacity(root: BorrowedFd) -> u32 {
    let path = format!("/proc/self/fd/{}/cgroup.stat", root.as_raw_fd());
    std::fs::read_to_string(path)
        .ok()
        .and_then(|stat| descendants(&stat))
        .map_or(FIRST_CAPACITY, |n| capacity_for(n.saturating_add(1)))
}

/// The cgroups under a cgroup, from its cgroup.stat; None where the line
/// is missing or not a number.
fn descendants(stat: &str) -> Option<u32> {
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_descendants "))?
        .trim()
        .parse()
        .ok()
}

/// Records room for a tree of `cgroups`: a sixteenth and 64 more, so the
/// kernel pins little past what the tree needs while a growing tree
/// reloads the program (a verifier pass) only about once per sixteenth it
/// grows.
// series: fn capacity_for(cgroups: u32) -> u32 {
pub(crate) fn capacity_for(cgroups: u32) -> u32 {
    cgroups.saturating_add(cgroups / 16).saturating_add(64)
}

impl Loaded {
    /// The first load, in the form [`Walk::first`] picks.
    /// `btf`: CO-RE relocations against this BTF file, not the kernel's. // fork-only
    pub(crate) fn first(
        root: BorrowedFd,
        config: LoadConfig,
        btf: Option<&Path>, // fork-only
    ) -> Result<Self> {
        let btf = btf.map(Path::to_path_buf); // fork-only
        let capacity = first_capacity(root);
        Walk::first(config.rcu_walk, |walk| {
            Self::new(
                root,
                capacity,
                config,
                walk,
                btf.clone(), // fork-only
            )
        })
    }

    fn new(
        root: BorrowedFd,
        capacity: u32,
        config: LoadConfig,
        walk: Walk,
        btf: Option<PathBuf>, // fork-only
    ) -> Result<Self> {
        let prog = walk.program("cgroup_stats");
        let skel = layer::load(
            CgroupBpfSkelBuilder::default(),
            btf.as_deref(), // fork-only
            |open| Self::prepare(open, &prog, root, capacity, &config),
        )?;
        Self::attach(
            Box::new(skel),
            &prog,
            root,
            capacity,
            config,
            walk,
            btf, // fork-only
        )
    }

    /// Before the load of an object holding the program: only `prog` is
    /// loaded (one verification); sizes its maps for `capacity` records and
    /// sets its constants.
    // series: fn prepare(
    pub(crate) fn prepare(
        open: &mut OpenObject,
        prog: &str,
        root: BorrowedFd,
        capacity: u32,
        config: &LoadConfig,
    ) -> Result<()> {
        let mut found = false;
        for mut p in open.progs_mut() {
            let this = p.name() == prog;
            found |= this;
            p.set_autoload(this);
        }
        anyhow::ensure!(found, "Failed to find program {prog} in the BPF object");
        let root_id = cgroup_id(root)?;
        layer::open_map(open, "records")?
            .set_max_entries(capacity)
            .context("Failed to size the records map")?;
        // Only the walk under RCU keeps the ids of the tree.
        let walk_ids = if prog.ends_with(RCU_SUFFIX) {
            capacity
        } else {
            1
        };
        layer::open_map(open, "walk_ids")?
            .set_max_entries(walk_ids)
            .context("Failed to size the walk_ids map")?;
        layer::set_data(open, ".rodata", |rodata: &mut Rodata| {
            // Unknown: the masks go to the files, and none is read (past
            // what the kernel allocated would be other objects).
            let words = config.cpus.map_or(0, |cpus| cpus.div_ceil(64));
            rodata.cpumask_bytes = (words.min(CPU_WORDS) * 8) as u32;
            rodata.kfuncs = config.kfuncs;
            rodata.walk_root_id = root_id;
            rodata.hugetlb_accounting = config.hugetlb_accounting.into();
        })
    }

    /// After the load: attaches `prog` (the form `walk` names) over the
    /// cgroups under `root`, and maps the records and .bss.
    // series: fn attach(
    pub(crate) fn attach(
        skel: Box<dyn Skel<'static>>,
        prog: &str,
        root: BorrowedFd,
        capacity: u32,
        config: LoadConfig,
        walk: Walk,
        btf: Option<PathBuf>, // fork-only
    ) -> Result<Self> {
        let object = skel.object();
        let program = layer::prog(object, prog)?;
        let link = match walk {
            // Any thread that lives as long as the link does: the
            // process's first, whose tid is the pid.
            Walk::Rcu => layer::attach_task_iter(&program, std::process::id())
                .context("Failed to attach the task iterator")?,
            Walk::Locked(_) => {
                let mut opts = CgroupIterOpts::from_fd(root);
                // The kernel rejects order 0 (libbpf-rs's Default).
                opts.order = CgroupIterOrder::DescendantsPre;
                program
                    .attach_iter_with_opts(IterOpts::Cgroup(opts))
                    .context("Failed to attach the cgroup iterator")?
            }
        };
        Ok(Loaded {
            link,
            records: MapView::new(&layer::map(object, "records")?)?,
            bss: MapView::new(&layer::map(object, ".bss")?)?,
            _skel: skel,
            capacity,
            config,
            walk,
            btf, // fork-only
            grow_failed: None,
        })
    }

    /// Runs one pass.
    // series: fn run(&mut self) -> Result<Pass> {
    pub(crate) fn run(&mut self) -> Result<Pass> {
        // The program prints nothing.
        layer::run_iter(&self.link, &mut Vec::new())?;
        let bss = self.bss.get(0);
        // The walk root is always visited.
        if bss.pass.nr_cgroups == 0 {
            bail!(
                "the pass visited no cgroup: the walk root was removed, or the thread \
                 hosting the walk under RCU exited"
            );
        }
        Ok(Pass {
            cgroups: bss.pass.nr_cgroups,
            features: bss.pass.features,
            facts: bss.pass.facts,
        })
    }

    /// One pass over every cgroup under `root` (the root it was loaded
    /// with). Where it finds more cgroups than the records map has room
    /// for (the tree grew), the program is loaded again with more room and
    /// the pass runs again.
    pub(crate) fn run_all(&mut self, root: BorrowedFd) -> Result<Pass> {
        self.check_growth()?;
        loop {
            let pass = self.run()?;
            let Some(cap) = self.room_for(&pass) else {
                return Ok(pass);
            };
            match Loaded::new(
                root,
                cap,
                self.config,
                self.walk.clone(),
                self.btf.clone(), // fork-only
            ) {
                Ok(grown) => *self = grown,
                Err(e) => return Err(self.growth_failed(pass.cgroups, cap, e)),
            }
        }
    }

    /// Err while growing the records map failed less than [`GROW_RETRY`]
    /// ago: samples fail at once, without a pass, in the same words (so
    /// below logs them once).
    // series: fn check_growth(&self) -> Result<()> {
    pub(crate) fn check_growth(&self) -> Result<()> {
        if let Some((_, cgroups)) = self.grow_failed.filter(|(at, _)| at.elapsed() < GROW_RETRY) {
            bail!(
                "the records map has room for {} of {} cgroups and growing it failed: \
                 it is tried again {}s after the failure",
                self.capacity,
                cgroups,
                GROW_RETRY.as_secs()
            );
        }
        Ok(())
    }

    /// The room to load the program again with where `pass` found more
    /// cgroups than the records map holds; None where they fit.
    // series: fn room_for(&self, pass: &Pass) -> Option<u32> {
    pub(crate) fn room_for(&self, pass: &Pass) -> Option<u32> {
        (pass.cgroups > self.capacity).then(|| capacity_for(pass.cgroups))
    }

    /// `e`, why loading the program with room for `cap` records failed
    /// after a pass of `cgroups`: remembered for [`Self::check_growth`].
    // series: fn growth_failed(
    pub(crate) fn growth_failed(
        &mut self,
        cgroups: u32,
        cap: u32,
        e: anyhow::Error,
    ) -> anyhow::Error {
        self.grow_failed = Some((Instant::now(), cgroups));
        e.context(format!("Failed to grow the records map to {cap} cgroups"))
    }

    /// What the program was loaded with.
    pub(crate) fn config(&self) -> &LoadConfig {
        &self.config
    }

    /// Which form of the pass is loaded.
    pub(crate) fn walk(&self) -> &Walk {
        &self.walk
    }

    pub(crate) fn records(&self, n: u32) -> &[Record] {
        // SAFETY: the kernel wrote the first `n` during the last run, and
        // no run happens while the slice (borrowing self) is alive: the
        // link is ours (a process with CAP_SYS_ADMIN could open it by its
        // id and run it, which MapView::slice leaves out).
        unsafe { self.records.slice(n as usize) }
    }
}

/// How long a failed growth of the records map is not tried again: each
/// try loads the program (a verifier pass) inside a sample.
const GROW_RETRY: Duration = Duration::from_secs(60);

/// The id of the cgroup `dir` is (its kernfs node id, the inode number
/// cgroup2 gives it).
fn cgroup_id(dir: BorrowedFd) -> Result<u64> {
    let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let meta = std::fs::metadata(&path).context("Failed to stat the cgroup root")?;
    Ok(meta.ino())
}

/// What one pass reports besides the records.
pub(crate) struct Pass {
    /// Cgroups visited; may exceed the map's capacity.
    pub(crate) cgroups: u32,
    /// CGB_FEAT_* bits.
    pub(crate) features: u32,
    /// Bit i: the kernel has KERNEL_FACTS[i].
    pub(crate) facts: u64,
}

#[cfg(test)]
mod tests;
