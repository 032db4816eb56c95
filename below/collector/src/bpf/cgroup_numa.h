/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fork's memory.numa_stat from BPF (bstats.bpf.c, cgroup_numa.bpf.c),
 * read by build.rs like cgroup_bpf_record.h. Not in cgroup_bpf_record.h: where
 * each line sits in lruvec_stats.state[] is a private array of mm/memcontrol.c
 * (memcg_node_stat_items[]) that BTF does not describe; numa.rs derives it
 * from a copy, which below main's program does not carry.
 */
#ifndef CGROUP_NUMA_H
#define CGROUP_NUMA_H

/* Node ids below NUMA_NODES (more nodes use text). */
#define NUMA_NODES 8
/* numa_idx of an item this kernel does not print. */
#define NUMA_NO_IDX (~0U)

/* memory.numa_stat lines: numa_row.v[NUMA_key] of a record's row for a
 * node holds the raw lruvec_stats.state[] value of the `enum
 * node_stat_item` item numa.rs names for the key, at the index it found
 * for it in the running kernel (rodata numa_idx); user space scales it by
 * the item's unit. */
#define NUMA_ITEMS(X)                                                          \
  X(anon)                                                                      \
  X(file)                                                                      \
  X(kernel_stack)                                                              \
  X(pagetables)                                                                \
  X(shmem)                                                                     \
  X(file_mapped)                                                               \
  X(file_dirty)                                                                \
  X(file_writeback)                                                            \
  X(swapcached)                                                                \
  X(anon_thp)                                                                  \
  X(file_thp)                                                                  \
  X(shmem_thp)                                                                 \
  X(inactive_anon)                                                             \
  X(active_anon)                                                               \
  X(inactive_file)                                                             \
  X(active_file)                                                               \
  X(unevictable)                                                               \
  X(slab_reclaimable)                                                          \
  X(slab_unreclaimable)                                                        \
  X(hugetlb)                                                                   \
  X(workingset_refault_anon)                                                   \
  X(workingset_refault_file)                                                   \
  X(workingset_activate_anon)                                                  \
  X(workingset_activate_file)                                                  \
  X(workingset_restore_anon)                                                   \
  X(workingset_restore_file)                                                   \
  X(workingset_nodereclaim)
#define NUMA_ENUM(key) NUMA_##key,
enum numa_item { NUMA_ITEMS(NUMA_ENUM) NR_NUMA_STATS };

/* The record's flag past cgroup_bpf_record.h's CGB_HAS_FLAGS and
 * cgroup_psi.h's: the record's rows in map `numa` are written. */
#define HAS_NUMA_BIT 18
enum numa_has { HAS_NUMA = 1U << HAS_NUMA_BIT };

/* One node's memory.numa_stat of one cgroup: map `numa` holds
 * `numa_node_ids` rows per record slot, row idx * numa_node_ids + node for
 * the record at idx. Kept out of the record so the record map does not pin
 * a table for NUMA_NODES nodes per cgroup (1.6 KiB, over half a record) on
 * machines with one or two nodes. */
struct numa_row {
  unsigned long long v[NR_NUMA_STATS];
};

#endif /* CGROUP_NUMA_H */
