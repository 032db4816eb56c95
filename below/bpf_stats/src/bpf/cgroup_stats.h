/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The record the cgroup iterator writes per cgroup. Mirrored by
 * `bpf::Record` in Rust (#[repr(C)]); the loader checks the sizes match.
 * Every field is u64-aligned so both sides agree without packing rules.
 */
#ifndef CGROUP_STATS_H
#define CGROUP_STATS_H

/* A value the kernel does not have (config, version): shown as None. */
#define ABSENT (~0ULL)

#define NAME_LEN 256
/* cpuset masks: 512 CPUs, 64 memory nodes; larger machines use text. */
#define CPU_WORDS 8

/* Which controllers' state the cgroup has (its own css). */
#define HAS_MEMCG (1U << 0)
#define HAS_MEMSTAT (1U << 1)
#define HAS_CPU (1U << 2)
#define HAS_PIDS (1U << 3)
#define HAS_CPUSET (1U << 4)
#define HAS_PSI (1U << 5)
#define HAS_BSTAT (1U << 6)
#define HAS_NUMA (1U << 7)

/* What the running kernel let the program do (global `features`). */
#define FEAT_CPU_FLUSH (1U << 0)
#define FEAT_MEMCG_KFUNCS (1U << 1)
#define FEAT_PSI (1U << 2)
#define FEAT_CFS_BANDWIDTH (1U << 3)
#define FEAT_ZSWAP (1U << 4)
#define FEAT_NUMA (1U << 5)

/* Kfuncs user space found in the running kernel's BTF (rodata `kfuncs`):
 * bpf_ksym_exists() on a kfunc needs 6.3+, so the check is done there. */
#define KF_CSS_RSTAT_FLUSH (1U << 0)
#define KF_CGROUP_RSTAT_FLUSH (1U << 1)
#define KF_MEMCG (1U << 2)

/* Our own controller bits, independent of the kernel's subsys ids. */
enum ctrl_bit {
	CTRL_CPUSET,
	CTRL_CPU,
	CTRL_IO,
	CTRL_MEMORY,
	CTRL_HUGETLB,
	CTRL_PIDS,
	CTRL_RDMA,
	CTRL_MISC,
	CTRL_DMEM,
};

/* memory.stat lines below keeps, in this order (Rust has the names). */
enum memstat_slot {
	MS_ANON,
	MS_FILE,
	MS_KERNEL,
	MS_KERNEL_STACK,
	MS_SLAB,
	MS_SOCK,
	MS_SHMEM,
	MS_ZSWAP,
	MS_ZSWAPPED,
	MS_FILE_MAPPED,
	MS_FILE_DIRTY,
	MS_FILE_WRITEBACK,
	MS_ANON_THP,
	MS_INACTIVE_ANON,
	MS_ACTIVE_ANON,
	MS_INACTIVE_FILE,
	MS_ACTIVE_FILE,
	MS_UNEVICTABLE,
	MS_SLAB_RECLAIMABLE,
	MS_SLAB_UNRECLAIMABLE,
	MS_PGFAULT,
	MS_PGMAJFAULT,
	MS_WORKINGSET_REFAULT_ANON,
	MS_WORKINGSET_REFAULT_FILE,
	MS_WORKINGSET_ACTIVATE_ANON,
	MS_WORKINGSET_ACTIVATE_FILE,
	MS_WORKINGSET_RESTORE_ANON,
	MS_WORKINGSET_RESTORE_FILE,
	MS_WORKINGSET_NODERECLAIM,
	MS_PGREFILL,
	MS_PGSCAN,
	MS_PGSTEAL,
	MS_PGACTIVATE,
	MS_PGDEACTIVATE,
	MS_PGLAZYFREE,
	MS_PGLAZYFREED,
	MS_THP_FAULT_ALLOC,
	MS_THP_COLLAPSE_ALLOC,
	NR_MS,
};

/* memory.numa_stat: per node id below NUMA_NODES (more nodes use text),
 * NR_NUMA_STATS raw lruvec_stats.state[] values. User space owns the item
 * order and units and tells the program each item's index (numa_idx). */
#define NUMA_NODES 8
#define NR_NUMA_STATS 26
/* numa_idx of an item this kernel does not print. */
#define NUMA_NO_IDX (~0U)

/* Pressure rows: the text's resource * 2 + full. */
#define NR_PSI_ROWS 6

struct record {
	__u64 id;
	__u64 parent_id;
	__u32 level;
	__u32 flags;
	__u32 controllers;
	__u32 subtree_control;
	__u32 nr_descendants;
	__u32 nr_dying_descendants;
	/* cpu.stat: raw ns; user/system are scaled in user space */
	__u64 usage_ns;
	__u64 utime_ns;
	__u64 stime_ns;
	__u64 prev_utime_ns;
	__u64 prev_stime_ns;
	__u64 nr_periods;
	__u64 nr_throttled;
	__u64 throttled_ns;
	/* cpu.weight (tg_weight, unscaled), cpu.max (ns, quota ABSENT = max) */
	__u64 weight;
	__u64 quota_ns;
	__u64 period_ns;
	/* pressure */
	__u64 psi_total_ns[NR_PSI_ROWS];
	__u64 psi_avg[NR_PSI_ROWS][3];
	/* pids */
	__u64 pids_current;
	__u64 pids_limit;
	/* memory: page counters in pages */
	__u64 mem_usage;
	__u64 swap_usage;
	__u64 mem_min;
	__u64 mem_low;
	__u64 mem_high;
	__u64 mem_max;
	__u64 swap_max;
	__u64 zswap_max;
	__u64 events[5];
	__u64 events_local[5];
	__u64 memstat[NR_MS];
	__u64 numa[NUMA_NODES][NR_NUMA_STATS];
	/* cpuset */
	__u64 cpus[CPU_WORDS];
	__u64 cpus_effective[CPU_WORDS];
	__u64 mems;
	__u64 mems_effective;
	char name[NAME_LEN];
};

#endif
