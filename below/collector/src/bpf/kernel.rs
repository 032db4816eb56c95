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
//! sysfs: the kfuncs it has, where memory.numa_stat's values are, and the
//! machine's CPU and node id limits.

use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::os::fd::BorrowedFd;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use libbpf_rs::btf::types;
use libbpf_rs::btf::BtfKind;
use libbpf_rs::btf::BtfType;

use super::contract::*;
use super::layer::KernelBtf;

/// mm/memcontrol.c `memcg_node_stat_items[]`, the order of
/// `lruvec_stats.state[]`. The entries under #ifdef (NR_SWAPCACHE,
/// PGPROMOTE_SUCCESS, NR_HUGETLB) are missing from `enum node_stat_item`
/// too when configured out, so BTF tells which ones a kernel has.
pub(crate) const MEMCG_NODE_STAT_ITEMS: [&str; 50] = [
    "NR_INACTIVE_ANON",
    "NR_ACTIVE_ANON",
    "NR_INACTIVE_FILE",
    "NR_ACTIVE_FILE",
    "NR_UNEVICTABLE",
    "NR_SLAB_RECLAIMABLE_B",
    "NR_SLAB_UNRECLAIMABLE_B",
    "WORKINGSET_REFAULT_ANON",
    "WORKINGSET_REFAULT_FILE",
    "WORKINGSET_ACTIVATE_ANON",
    "WORKINGSET_ACTIVATE_FILE",
    "WORKINGSET_RESTORE_ANON",
    "WORKINGSET_RESTORE_FILE",
    "WORKINGSET_NODERECLAIM",
    "NR_ANON_MAPPED",
    "NR_FILE_MAPPED",
    "NR_FILE_PAGES",
    "NR_FILE_DIRTY",
    "NR_WRITEBACK",
    "NR_SHMEM",
    "NR_SHMEM_THPS",
    "NR_FILE_THPS",
    "NR_ANON_THPS",
    "NR_VMSCAN_WRITE",
    "NR_VMALLOC",
    "NR_KERNEL_STACK_KB",
    "NR_PAGETABLE",
    "NR_SECONDARY_PAGETABLE",
    "NR_SWAPCACHE",
    "PGPROMOTE_SUCCESS",
    "PGDEMOTE_KSWAPD",
    "PGDEMOTE_DIRECT",
    "PGDEMOTE_KHUGEPAGED",
    "PGDEMOTE_PROACTIVE",
    "PGSTEAL_KSWAPD",
    "PGSTEAL_DIRECT",
    "PGSTEAL_KHUGEPAGED",
    "PGSTEAL_PROACTIVE",
    "PGSTEAL_ANON",
    "PGSTEAL_FILE",
    "PGSCAN_KSWAPD",
    "PGSCAN_DIRECT",
    "PGSCAN_KHUGEPAGED",
    "PGSCAN_PROACTIVE",
    "PGSCAN_ANON",
    "PGSCAN_FILE",
    "PGROTATE_ANON",
    "PGROTATE_FILE",
    "PGREFILL",
    "NR_HUGETLB",
];

/// The other `enum node_stat_item` items (7.3; NR_WRITEBACK_TEMP until
/// 6.x; the aliases and the count): not in `lruvec_stats.state[]`. An item
/// in neither list is one this code does not know the place of.
pub(crate) const NOT_MEMCG_NODE_STAT_ITEMS: [&str; 25] = [
    "NR_LRU_BASE",
    "NR_ISOLATED_ANON",
    "NR_ISOLATED_FILE",
    "WORKINGSET_NODES",
    "WORKINGSET_REFAULT_BASE",
    "WORKINGSET_ACTIVATE_BASE",
    "WORKINGSET_RESTORE_BASE",
    "NR_WRITEBACK_TEMP",
    "NR_SHMEM_PMDMAPPED",
    "NR_FILE_PMDMAPPED",
    "NR_VMSCAN_IMMEDIATE",
    "NR_DIRTIED",
    "NR_WRITTEN",
    "NR_THROTTLED_WRITTEN",
    "NR_KERNEL_MISC_RECLAIMABLE",
    "NR_FOLL_PIN_ACQUIRED",
    "NR_FOLL_PIN_RELEASED",
    "NR_IOMMU_PAGES",
    "PGPROMOTE_CANDIDATE",
    "PGPROMOTE_CANDIDATE_NRL",
    "NR_BALLOON_PAGES",
    "NR_KERNEL_FILE_PAGES",
    "NR_GPU_ACTIVE",
    "NR_GPU_RECLAIM",
    "NR_VM_NODE_STAT_ITEMS",
];

/// Printed only with CONFIG_TRANSPARENT_HUGEPAGE; the items exist without.
pub(crate) const THP_ITEMS: [&str; 3] = ["NR_ANON_THPS", "NR_FILE_THPS", "NR_SHMEM_THPS"];

/// Per NUMA_ITEMS entry, its index in `lruvec_stats.state[]`, or
/// NUMA_NO_IDX when this kernel does not print the line.
pub(crate) type NumaLayout = [u32; NUMA_ITEMS.len()];

/// The type of `member` of struct `name`, modifiers and typedefs skipped.
fn member_type<'b>(btf: &'b KernelBtf, name: &str, member: &str) -> Option<BtfType<'b>> {
    let s = btf.btf().type_by_name::<types::Struct>(name)?;
    let m = s.iter().find(|m| m.name == Some(OsStr::new(member)))?;
    Some(
        btf.btf()
            .type_by_id::<BtfType>(m.ty)?
            .skip_mods_and_typedefs(),
    )
}

/// Where memory_numa_stat_show()'s values are on the running kernel (see
/// [`layout_of`]), from its BTF.
pub(crate) fn numa_layout(btf: &KernelBtf) -> Result<NumaLayout> {
    let items = btf
        .enum_values("node_stat_item")
        .ok_or(anyhow!("no enum node_stat_item in BTF"))?;
    if member_type(btf, "mem_cgroup_per_node", "lruvec_stats").map(|t| t.kind())
        != Some(BtfKind::Ptr)
    {
        bail!("unknown lruvec_stats layout: not a pointer in mem_cgroup_per_node");
    }
    let len = member_type(btf, "lruvec_stats", "state")
        .and_then(|t| types::Array::try_from(t).ok())
        .map(|a| a.capacity())
        .ok_or(anyhow!(
            "unknown lruvec_stats layout: no state[] array in BTF"
        ))?;
    let thp = btf
        .enum_values("vm_event_item")
        .is_some_and(|e| e.iter().any(|(n, _)| n == "THP_FAULT_ALLOC"));
    layout_of(&items, len, thp)
}

/// The position of each NUMA_ITEMS item among the memcg_node_stat_items[]
/// a kernel has, given its `enum node_stat_item` (names, values), the
/// length of its `lruvec_stats.state[]` and whether it prints the THP
/// lines. Checked by name: every item of the enum is one we know to be in
/// the array or not, those in it come in the enum's order (the kernel's
/// array is), and they add up to the array's length.
fn layout_of(items: &[(String, i64)], len: usize, thp: bool) -> Result<NumaLayout> {
    if let Some((unknown, _)) = items.iter().find(|(n, _)| {
        !MEMCG_NODE_STAT_ITEMS.contains(&n.as_str())
            && !NOT_MEMCG_NODE_STAT_ITEMS.contains(&n.as_str())
    }) {
        bail!("unknown lruvec_stats layout: node_stat_item {unknown} is new");
    }
    let present: Vec<(&str, i64)> = MEMCG_NODE_STAT_ITEMS
        .into_iter()
        .filter_map(|i| Some((i, items.iter().find(|(n, _)| n == i)?.1)))
        .collect();
    if let Some(w) = present.windows(2).find(|w| w[0].1 >= w[1].1) {
        bail!(
            "unknown lruvec_stats layout: node_stat_item {} before {}",
            w[1].0,
            w[0].0
        );
    }
    if len != present.len() {
        bail!(
            "unknown lruvec_stats layout: {len} items in BTF, {} expected",
            present.len()
        );
    }
    Ok(std::array::from_fn(|n| {
        let it = &NUMA_ITEMS[n];
        match present.iter().position(|&(p, _)| p == it.item) {
            Some(i) if thp || !THP_ITEMS.contains(&it.item) => i as u32,
            _ => NUMA_NO_IDX,
        }
    }))
}

/// What the program is told at load: nr_cpu_ids and nr_node_ids
/// (cpumask/nodemask bits past them are not the kernel's to show, nor
/// allocated for cpumasks), the KF_* kfuncs the kernel's BTF has, and
/// where memory.numa_stat's values are (None: not served); whether the
/// pass may walk under RCU, or why not.
#[derive(Clone, Copy)]
pub(crate) struct LoadConfig {
    pub(crate) cpus: usize,
    pub(crate) nodes: usize,
    pub(crate) kfuncs: u32,
    pub(crate) numa: Option<NumaLayout>,
    pub(crate) rcu_walk: std::result::Result<(), &'static str>,
    /// Whether memory.stat prints hugetlb (the cgroup2 mount's
    /// memory_hugetlb_accounting: not in BTF, the caller sets it).
    pub(crate) hugetlb_accounting: bool,
}

/// Each kfunc of the pass's walk under RCU (`<prog>_rcu`: the css
/// iterator, 6.7, from the walk root found by id), with why not without it.
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

const MEMCG_KFUNCS: [&str; 5] = [
    "bpf_get_mem_cgroup",
    "bpf_put_mem_cgroup",
    "bpf_mem_cgroup_page_state",
    "bpf_mem_cgroup_vm_events",
    "bpf_mem_cgroup_flush_stats",
];

/// The memcg kfuncs the kernel's BTF lacks (memory.stat needs all).
fn lacking_memcg_kfuncs(btf: &KernelBtf) -> Vec<&'static str> {
    MEMCG_KFUNCS
        .into_iter()
        .filter(|f| !btf.has_func(f))
        .collect()
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

/// KF_* bits for the kfuncs the running kernel's BTF declares.
fn kfuncs_in(btf: &KernelBtf) -> u32 {
    let has = |name: &str| btf.has_func(name);
    let mut bits = 0;
    if has("css_rstat_flush") {
        bits |= KF_CSS_RSTAT_FLUSH;
    } else if has("cgroup_rstat_flush") {
        bits |= KF_CGROUP_RSTAT_FLUSH;
    }
    if MEMCG_KFUNCS.iter().all(|f| has(f)) {
        bits |= KF_MEMCG;
    }
    bits
}

impl LoadConfig {
    /// `has_numa_stat`: the kernel has CONFIG_NUMA, and so the node list.
    fn of_this_machine(
        kfuncs: u32,
        has_numa_stat: bool,
        rcu_walk: std::result::Result<(), &'static str>,
    ) -> Result<Self> {
        Ok(LoadConfig {
            cpus: count_ids("/sys/devices/system/cpu/possible")?,
            nodes: match has_numa_stat {
                true => count_ids("/sys/devices/system/node/possible")?,
                false => 1,
            },
            kfuncs,
            numa: None,
            rcu_walk,
            hugetlb_accounting: false,
        })
    }
}

/// The ids a sysfs list ("0-3,8") allows: its last id + 1. An error, not a
/// guess: the program would size its reads by it.
fn count_ids(list: &str) -> Result<usize> {
    let text = std::fs::read_to_string(list).with_context(|| format!("cannot read {list}"))?;
    ids_in(&text).with_context(|| format!("{list} is not a list of ids: {:?}", text.trim()))
}

fn ids_in(list: &str) -> Option<usize> {
    let last: usize = list.trim().rsplit([',', '-']).next()?.parse().ok()?;
    Some(last + 1)
}

/// A function of mm/memcontrol.c built only with CONFIG_SWAP, which also
/// registers the memory.swap.* and memory.zswap.* files.
pub(crate) const SWAP_FUNC: &str = "__mem_cgroup_try_charge_swap";

/// What the running kernel's BTF says about the program's inputs.
pub(crate) struct Kernel {
    /// What to load the program with; `numa` only where a record holds
    /// the machine's nodes.
    pub(crate) config: LoadConfig,
    /// CONFIG_NUMA: memory.numa_stat exists.
    pub(crate) has_numa_stat: bool,
    /// Where its values are, or why that is not known.
    pub(crate) numa_layout: Result<NumaLayout>,
    /// The memcg kfuncs it lacks: memory.stat is read from the file.
    pub(crate) lacking_memcg_kfuncs: Vec<&'static str>,
    /// Ok when cgroup.controllers and .subtree_control can be served, else
    /// why not.
    pub(crate) controllers: Result<()>,
    /// CONFIG_SWAP: memory.swap.* can exist (the boot may leave them
    /// out: see [`swap_files_this_boot`]); else why not.
    pub(crate) swap_files: Result<()>,
}

impl Kernel {
    /// What the kernel's BTF (or a file standing for it) says; an error
    /// where sysfs does not give the CPU or node ids.
    pub(crate) fn read(btf: &KernelBtf) -> Result<Self> {
        let has_numa_stat = btf.enum_values("numa_stat_item").is_some();
        let numa_layout = numa_layout(btf);
        let mut config =
            LoadConfig::of_this_machine(kfuncs_in(btf), has_numa_stat, rcu_walk_in(btf))?;
        if has_numa_stat && config.nodes <= NUMA_NODES {
            config.numa = numa_layout.as_ref().ok().copied();
        }
        let swap_files = match btf.has_func(SWAP_FUNC) {
            true => Ok(()),
            false => Err(anyhow!(
                "kernel has no memory.swap.*, memory.zswap.* (CONFIG_SWAP: no {SWAP_FUNC} in BTF)"
            )),
        };
        Ok(Kernel {
            config,
            has_numa_stat,
            numa_layout,
            lacking_memcg_kfuncs: lacking_memcg_kfuncs(btf),
            controllers: controllers_in(btf),
            swap_files,
        })
    }
}

/// Whether this boot has memory.swap.* and .zswap.* (swapaccount=0 or
/// cgroup.memory=noswap leave them out on some kernels), from a cgroup
/// under `root` with the memory controller: the files are the same in
/// every such cgroup. When no cgroup tells (none has the controller, the
/// root cannot be listed), the files are left to the reader, which shows
/// them as the kernel has them: values BPF served where the files do not
/// exist would be made up.
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
                "this boot has no memory.swap.* (none in {}: swapaccount=0 or cgroup.memory=noswap)",
                name.to_string_lossy()
            );
        }
    }
    bail!("cannot tell whether this boot has memory.swap.*: no cgroup has the memory controller")
}

#[cfg(test)]
mod tests;
