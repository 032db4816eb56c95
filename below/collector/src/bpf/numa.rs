//! memory.numa_stat from BPF, the fork's own (cgroup_numa.h,
//! cgroup_numa.bpf.c): the program copies each cgroup's
//! `lruvec_stats.state[]` items per node into its rows of map `numa`, and
//! here is where those items sit on the running kernel and the file they
//! make. Their places come from a private array of mm/memcontrol.c that
//! BTF does not describe: [`layout_of`] checks the running kernel's enum
//! against our copy of it and refuses what it does not know, but an item
//! leaving the array while another of the enum joins it, at the same
//! length and order, would pass. below main's program leaves the file to
//! the reader for that reason.

use std::collections::BTreeMap;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Result;
use libbpf_rs::btf::types;
use libbpf_rs::btf::BtfKind;

use super::contract::is_c_enum;
use super::contract::ABSENT;
use super::layer::KernelBtf;
use crate::MemoryNumaStat;

// NUMA_*, HAS_NUMA, struct numa_row: bindgen of cgroup_numa.h.
pub(crate) use super::program::fork_h::numa_row as NumaRow;
pub(crate) use super::program::fork_h::HAS_NUMA;
use super::program::fork_h::*;

pub(crate) const NUMA_NO_IDX: u32 = super::program::fork_h::NUMA_NO_IDX as u32;
pub(crate) const NUMA_NODES: usize = super::program::fork_h::NUMA_NODES as usize;

/// memcg_page_state_output_unit(): what one unit of a raw state item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Page,
    /// Bytes (slab) or plain counts (workingset events).
    One,
    KiB,
}

/// A memory.numa_stat line's `enum node_stat_item` item and unit.
pub(crate) struct NumaItem {
    pub(crate) item: &'static str,
    pub(crate) unit: Unit,
}

/// memory.numa_stat lines: `numa_row.v[]` (`enum numa_item`), with the
/// kernel's item for each and its unit; checked against C at compile time
/// as contract.rs's lists are.
macro_rules! numa_items {
    ($($key:ident => $c:ident: $item:ident, $unit:ident,)*) => {
        const _: () = assert!(
            is_c_enum(&[$((stringify!($key), stringify!($c), $c)),*], "NUMA_", NR_NUMA_STATS),
            "not the C enum numa_item"
        );

        /// The fields of MemoryNumaStat from a row's values in list order
        /// (ABSENT: None).
        pub(crate) fn fill_numa_stat(s: &mut MemoryNumaStat, values: &[u64]) {
            let mut values = values.iter().copied();
            $(s.$key = values.next().filter(|&v| v != ABSENT);)*
        }
        pub(crate) const NUMA_ITEMS: &[NumaItem] = &[$(NumaItem {
            item: stringify!($item),
            unit: Unit::$unit,
        },)*];
        #[cfg(test)]
        pub(crate) const NUMA_KEYS: &[&str] = &[$(stringify!($key),)*];
    };
}

/// The memory.numa_stat keys in their enum's order, handed to `$m!` (the
/// text's parser takes its setters from it too).
macro_rules! numa_items_list {
    ($m:ident) => {
        $m! {
            anon => NUMA_anon: NR_ANON_MAPPED, Page,
            file => NUMA_file: NR_FILE_PAGES, Page,
            kernel_stack => NUMA_kernel_stack: NR_KERNEL_STACK_KB, KiB,
            pagetables => NUMA_pagetables: NR_PAGETABLE, Page,
            shmem => NUMA_shmem: NR_SHMEM, Page,
            file_mapped => NUMA_file_mapped: NR_FILE_MAPPED, Page,
            file_dirty => NUMA_file_dirty: NR_FILE_DIRTY, Page,
            file_writeback => NUMA_file_writeback: NR_WRITEBACK, Page,
            swapcached => NUMA_swapcached: NR_SWAPCACHE, Page,
            anon_thp => NUMA_anon_thp: NR_ANON_THPS, Page,
            file_thp => NUMA_file_thp: NR_FILE_THPS, Page,
            shmem_thp => NUMA_shmem_thp: NR_SHMEM_THPS, Page,
            inactive_anon => NUMA_inactive_anon: NR_INACTIVE_ANON, Page,
            active_anon => NUMA_active_anon: NR_ACTIVE_ANON, Page,
            inactive_file => NUMA_inactive_file: NR_INACTIVE_FILE, Page,
            active_file => NUMA_active_file: NR_ACTIVE_FILE, Page,
            unevictable => NUMA_unevictable: NR_UNEVICTABLE, Page,
            slab_reclaimable => NUMA_slab_reclaimable: NR_SLAB_RECLAIMABLE_B, One,
            slab_unreclaimable => NUMA_slab_unreclaimable: NR_SLAB_UNRECLAIMABLE_B, One,
            hugetlb => NUMA_hugetlb: NR_HUGETLB, Page,
            workingset_refault_anon => NUMA_workingset_refault_anon: WORKINGSET_REFAULT_ANON, One,
            workingset_refault_file => NUMA_workingset_refault_file: WORKINGSET_REFAULT_FILE, One,
            workingset_activate_anon => NUMA_workingset_activate_anon:
                WORKINGSET_ACTIVATE_ANON, One,
            workingset_activate_file => NUMA_workingset_activate_file:
                WORKINGSET_ACTIVATE_FILE, One,
            workingset_restore_anon => NUMA_workingset_restore_anon: WORKINGSET_RESTORE_ANON, One,
            workingset_restore_file => NUMA_workingset_restore_file: WORKINGSET_RESTORE_FILE, One,
            workingset_nodereclaim => NUMA_workingset_nodereclaim: WORKINGSET_NODERECLAIM, One,
        }
    };
}
numa_items_list!(numa_items);

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

/// Where memory_numa_stat_show()'s values are on the running kernel (see
/// [`layout_of`]), from its BTF.
pub(crate) fn numa_layout(btf: &KernelBtf) -> Result<NumaLayout> {
    let items = btf
        .enum_values("node_stat_item")
        .ok_or(anyhow!("no enum node_stat_item in BTF"))?;
    if btf.member_type("mem_cgroup", "nodeinfo").is_none() {
        bail!("kernel lacks struct member mem_cgroup.nodeinfo");
    }
    let states = btf.enum_values("node_states").unwrap_or_default();
    if !states.iter().any(|(n, _)| n == "N_MEMORY") {
        bail!("kernel lacks enum value node_states.N_MEMORY");
    }
    if btf
        .member_type("mem_cgroup_per_node", "lruvec_stats")
        .map(|t| t.kind())
        != Some(BtfKind::Ptr)
    {
        bail!("unknown lruvec_stats layout: not a pointer in mem_cgroup_per_node");
    }
    let len = btf
        .member_type("lruvec_stats", "state")
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

/// What the kernel's BTF says of memory.numa_stat.
pub(crate) struct NumaKernel {
    /// CONFIG_NUMA: the file exists.
    pub(crate) has_numa_stat: bool,
    /// Where its values are, or why that is not known.
    pub(crate) layout: Result<NumaLayout>,
}

impl NumaKernel {
    pub(crate) fn read(btf: &KernelBtf) -> Self {
        NumaKernel {
            has_numa_stat: btf.enum_values("numa_stat_item").is_some(),
            layout: numa_layout(btf),
        }
    }

    /// What the program is told for a machine of `nodes` node ids: None
    /// (no rows, the file to the reader) unless the file exists, a record
    /// holds the nodes and the layout is known.
    pub(crate) fn config(&self, nodes: usize) -> Option<Numa> {
        let layout = *self.layout.as_ref().ok()?;
        (self.has_numa_stat && nodes <= NUMA_NODES).then_some(Numa { nodes, layout })
    }
}

/// memory.numa_stat as the program is loaded to read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Numa {
    /// nr_node_ids: rows per record.
    pub(crate) nodes: usize,
    pub(crate) layout: NumaLayout,
}

impl Numa {
    /// memory.numa_stat from a record's `rows` (one per node id): the
    /// nodes the text prints (`memory_nodes`, N_MEMORY at the pass), in
    /// its units.
    pub(crate) fn stat(
        &self,
        rows: &[NumaRow],
        memory_nodes: u64,
        page_size: u64,
    ) -> BTreeMap<u32, MemoryNumaStat> {
        let mut stats = BTreeMap::new();
        for n in (0..rows.len()).filter(|&n| memory_nodes & (1 << n) != 0) {
            let mut values = rows[n].v;
            for ((v, item), &idx) in values.iter_mut().zip(NUMA_ITEMS).zip(&self.layout) {
                *v = match (idx, item.unit) {
                    (NUMA_NO_IDX, _) => ABSENT,
                    (_, Unit::Page) => *v * page_size,
                    (_, Unit::One) => *v,
                    (_, Unit::KiB) => *v * 1024,
                };
            }
            fill_numa_stat(stats.entry(n as u32).or_default(), &values);
        }
        stats
    }
}

#[cfg(test)]
pub(crate) mod tests;
