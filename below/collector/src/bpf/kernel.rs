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

//! What the program is told at load, from the running kernel's BTF and
//! sysfs: the kfuncs it has and the machine's CPU and node id limits.

use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

use super::contract::*;
use super::layer::KernelBtf;

/// What the program is told at load: nr_cpu_ids and nr_node_ids
/// (cpumask/nodemask bits past them are not the kernel's to show, nor
/// allocated for cpumasks), the CGB_KF_* kfuncs the kernel's BTF has, and
/// whether the pass may walk under RCU, or why not.
#[derive(Clone, Copy)]
pub(crate) struct LoadConfig {
    /// None where sysfs does not list them (no /sys in a container): what
    /// needs them (the cpuset masks) is left to the files.
    pub(crate) cpus: Option<usize>,
    pub(crate) nodes: Option<usize>,
    pub(crate) kfuncs: u32,
    pub(crate) rcu_walk: std::result::Result<(), &'static str>,
    /// Whether memory.stat prints hugetlb (the cgroup2 mount's
    /// memory_hugetlb_accounting: not in BTF, the caller sets it).
    pub(crate) hugetlb_accounting: bool,
}

/// Each kfunc of the pass's walk under RCU (`<prog>_rcu`: the css
/// iterator, from the walk root found by id), with why not without it.
/// They are in 6.7; the form was tested on 6.12 and later, and where the
/// verifier refuses it (it may on 6.7 to 6.11) the cgroup iterator runs.
macro_rules! rcu_walk_kfuncs {
    ($($kfunc:literal),*) => {
        [$(($kfunc, concat!("kernel lacks kfunc ", $kfunc))),*]
    };
}
const RCU_WALK_KFUNCS: [(&str, &str); 7] = rcu_walk_kfuncs!(
    "bpf_cgroup_from_id",
    "bpf_cgroup_release",
    "bpf_rcu_read_lock",
    "bpf_rcu_read_unlock",
    "bpf_iter_css_new",
    "bpf_iter_css_next",
    "bpf_iter_css_destroy"
);

/// Ok when the kernel's BTF has every kfunc of the walk under RCU, else
/// why not (the first one it lacks).
fn rcu_walk_in(btf: &KernelBtf) -> std::result::Result<(), &'static str> {
    match RCU_WALK_KFUNCS.iter().find(|(f, _)| !btf.has_func(f)) {
        Some((_, why)) => Err(why),
        None => Ok(()),
    }
}

/// The memcg kfuncs memory.stat is read through.
const MEMCG_KFUNCS: [&str; 4] = [
    "bpf_get_mem_cgroup",
    "bpf_put_mem_cgroup",
    "bpf_mem_cgroup_page_state",
    "bpf_mem_cgroup_vm_events",
];

/// The flush a read of memory.stat does. Without it the program flushes
/// the memcg's css with css_rstat_flush(), or a whole-cgroup rstat flush
/// has flushed it.
const MEMCG_FLUSH: &str = "bpf_mem_cgroup_flush_stats";

/// The rstat flush kfuncs, the first the kernel has used: the
/// whole-cgroup ones (6.x; bpf_cgroup_rstat_flush on some fleet kernels)
/// flush every controller, the per-css one (7.x) the css it is given.
const RSTAT_FLUSHES: [(&str, u32); 3] = [
    ("bpf_cgroup_rstat_flush", CGB_KF_BPF_CGROUP_RSTAT_FLUSH),
    ("cgroup_rstat_flush", CGB_KF_CGROUP_RSTAT_FLUSH),
    ("css_rstat_flush", CGB_KF_CSS_RSTAT_FLUSH),
];

/// What memory.stat needs that the kernel's BTF lacks: memcg kfuncs, or
/// any way to flush memcg (named by its own kfunc).
fn lacking_memcg_kfuncs(btf: &KernelBtf) -> Vec<&'static str> {
    let mut lacking: Vec<&str> = MEMCG_KFUNCS
        .into_iter()
        .filter(|f| !btf.has_func(f))
        .collect();
    if !btf.has_func(MEMCG_FLUSH) && !RSTAT_FLUSHES.iter().any(|(f, _)| btf.has_func(f)) {
        lacking.push(MEMCG_FLUSH);
    }
    lacking
}

/// Controllers of `enum cgroup_subsys_id` that cgroup.controllers never
/// shows: cgroup1-only ones (no cgroup2 files) and perf_event (always on).
const NEVER_IN_CGROUP_CONTROLLERS: [&str; 6] = [
    "cpuacct",
    "devices",
    "freezer",
    "net_cls",
    "perf_event",
    "net_prio",
];

/// Ok when the record has a bit for each controller the kernel has that
/// cgroup.controllers can show, else which ones it lacks: it would leave
/// them out of cgroup.controllers and .subtree_control.
fn controllers_in(btf: &KernelBtf) -> Result<()> {
    let ids = btf
        .enum_values("cgroup_subsys_id")
        .context("no enum cgroup_subsys_id in the kernel's BTF")?;
    let unknown = unknown_controllers(ids.iter().map(|(name, _)| name.as_str()));
    if !unknown.is_empty() {
        bail!(
            "kernel has controllers the record has no bit for: {}",
            unknown.join(", ")
        );
    }
    Ok(())
}

/// Of the `enum cgroup_subsys_id` names `ids`, the controllers neither in
/// CONTROLLERS nor ever left out of cgroup.controllers.
fn unknown_controllers<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    ids.filter_map(|id| id.strip_suffix("_cgrp_id"))
        .filter(|c| !CONTROLLERS.contains(c) && !NEVER_IN_CGROUP_CONTROLLERS.contains(c))
        .collect()
}

/// CGB_KF_* bits for the kfuncs the running kernel's BTF declares, given
/// what memory.stat lacks ([`lacking_memcg_kfuncs`]).
fn kfuncs_in(btf: &KernelBtf, lacking_memcg: &[&str]) -> u32 {
    let mut bits = RSTAT_FLUSHES
        .iter()
        .find(|(f, _)| btf.has_func(f))
        .map_or(0, |&(_, bit)| bit);
    if lacking_memcg.is_empty() {
        bits |= CGB_KF_MEMCG;
    }
    if btf.has_func(MEMCG_FLUSH) {
        bits |= CGB_KF_MEMCG_FLUSH;
    }
    bits
}

impl LoadConfig {
    /// `numa`: the kernel has CONFIG_NUMA, and so the node list.
    fn of_this_machine(
        kfuncs: u32,
        numa: bool,
        rcu_walk: std::result::Result<(), &'static str>,
    ) -> Self {
        LoadConfig {
            cpus: count_ids(CPUS_POSSIBLE).ok(),
            nodes: if numa {
                count_ids(NODES_POSSIBLE).ok()
            } else {
                Some(1)
            },
            kfuncs,
            rcu_walk,
            hugetlb_accounting: false,
        }
    }
}

/// The possible CPUs and NUMA nodes, as sysfs lists them.
pub(crate) const CPUS_POSSIBLE: &str = "/sys/devices/system/cpu/possible";
pub(crate) const NODES_POSSIBLE: &str = "/sys/devices/system/node/possible";

/// The ids a sysfs list ("0-3,8") allows: its last id + 1. An error, not a
/// guess: the program would size its reads by it.
fn count_ids(list: &str) -> Result<usize> {
    let text = std::fs::read_to_string(list).with_context(|| format!("Failed to read {list}"))?;
    ids_in(&text).with_context(|| format!("{list} is not a list of ids: {:?}", text.trim()))
}

fn ids_in(list: &str) -> Option<usize> {
    let last: usize = list.trim().rsplit([',', '-']).next()?.parse().ok()?;
    Some(last + 1)
}

/// What the running kernel's BTF says about the program's inputs.
pub(crate) struct Kernel {
    /// What to load the program with.
    pub(crate) config: LoadConfig,
    /// The memcg kfuncs it lacks: memory.stat is read from the file.
    pub(crate) lacking_memcg_kfuncs: Vec<&'static str>,
    /// Ok when cgroup.controllers and .subtree_control can be served, else
    /// why not.
    pub(crate) controllers: Result<()>,
}

impl Kernel {
    /// What the kernel's BTF says.
    /// (Or a file standing for it.) // fork-only
    pub(crate) fn read(btf: &KernelBtf) -> Self {
        let numa = btf.enum_values("numa_stat_item").is_some();
        let lacking_memcg_kfuncs = lacking_memcg_kfuncs(btf);
        let kfuncs = kfuncs_in(btf, &lacking_memcg_kfuncs);
        let config = LoadConfig::of_this_machine(kfuncs, numa, rcu_walk_in(btf));
        Kernel {
            config,
            lacking_memcg_kfuncs,
            controllers: controllers_in(btf),
        }
    }
}

/// Whether this boot has memory.swap.* and .zswap.* (a kernel without
/// CONFIG_SWAP has none; swapaccount=0 or cgroup.memory=noswap leave them
/// out on some kernels), from a cgroup under `root` with the memory
/// controller: the files are the same in every such cgroup. When no cgroup
/// tells (none has the controller, the root cannot be listed), the files
/// are left to the reader, which shows them as the kernel has them: values
/// BPF served where the files do not exist would be made up.
pub(crate) fn swap_files_this_boot(root: BorrowedFd) -> Result<()> {
    let dir = format!("/proc/self/fd/{}", root.as_raw_fd());
    let children = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot tell whether this boot has memory.swap.*: {dir}"))?;
    for child in children.flatten() {
        let path = child.path();
        if path.join("memory.current").exists() {
            if path.join("memory.swap.current").exists() {
                return Ok(());
            }
            let name = child.file_name();
            bail!(
                "this boot has no memory.swap.* (none in {}: no CONFIG_SWAP, swapaccount=0 or \
                 cgroup.memory=noswap)",
                name.to_string_lossy()
            );
        }
    }
    bail!("cannot tell whether this boot has memory.swap.*: no cgroup has the memory controller")
}

#[cfg(test)]
mod tests;
