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

/*
 * The contract between the cgroup iterator and user space: the record it
 * writes per cgroup and the tables that give the record's slots and bits
 * their meaning.
 *
 * Each table is one X-macro list, `#define NAME(X) X(entry, args…) …`: C
 * builds its enums and fill code from it, and build.rs hands the same list
 * to Rust (`name! { (entry, args…) … }`, see contract.rs), so the
 * two sides cannot drift. Plain `#define NAME <integer>` constants are
 * handed over too. The record's layout reaches Rust through the libbpf-rs
 * skeleton, and the enums below are in the object's BTF (`contract` in
 * cgroup_stats.bpf.c), where a unit test checks them against Rust.
 * Every record field is u64-aligned so both sides agree without packing
 * rules.
 */
#ifndef CGROUP_STATS_H
#define CGROUP_STATS_H

/* A value the kernel does not have (config, version): shown as None. */
#define ABSENT (~0ULL)

/* cpuset masks: 512 CPUs, 64 memory nodes; larger machines use text. */
#define CPU_WORDS 8
/* memory.numa_stat: node ids below NUMA_NODES (more nodes use text). */
#define NUMA_NODES 8
/* numa_idx of an item this kernel does not print. */
#define NUMA_NO_IDX (~0U)

/* A bit per entry, in list order: enum NAME_bit (positions) and
 * enum NAME_flag (masks). */
#define BIT_POS(name) name##_BIT,
#define BIT_MASK(name) name = 1U << name##_BIT,
/* clang-format off */
#define BITS(list, tag)                                                       \
	enum tag##_bit { list(BIT_POS) };                                     \
	enum tag##_flag { list(BIT_MASK) }
/* clang-format on */

/* Which controllers' state the cgroup has (its own css): record.flags. */
#define HAS_FLAGS(X)                                                           \
  X(HAS_MEMCG)                                                                 \
  X(HAS_MEMSTAT)                                                               \
  X(HAS_CPU)                                                                   \
  X(HAS_PIDS)                                                                  \
  X(HAS_CPUSET)                                                                \
  X(HAS_BSTAT)                                                                 \
  X(HAS_NUMA)
BITS(HAS_FLAGS, has);

/* What the running kernel let the last pass do (global `features`). */
#define FEAT_FLAGS(X)                                                          \
  X(FEAT_CPU_FLUSH)                                                            \
  X(FEAT_MEMCG_KFUNCS)                                                         \
  X(FEAT_NUMA)
BITS(FEAT_FLAGS, feat);

/* Kfuncs user space found in the running kernel's BTF (rodata `kfuncs`):
 * bpf_ksym_exists() on a kfunc needs 6.3+, so the check is done there. */
#define KF_FLAGS(X)                                                            \
  X(KF_CSS_RSTAT_FLUSH)                                                        \
  X(KF_CGROUP_RSTAT_FLUSH)                                                     \
  X(KF_MEMCG)
BITS(KF_FLAGS, kf);

/* cgroup.controllers names: our own bit per controller (record
 * .controllers, .subtree_control), independent of the kernel's subsys ids,
 * which differ by config. */
#define CONTROLLERS(X)                                                         \
  X(cpuset)                                                                    \
  X(cpu)                                                                       \
  X(io)                                                                        \
  X(memory)                                                                    \
  X(hugetlb)                                                                   \
  X(pids)                                                                      \
  X(rdma)                                                                      \
  X(misc)                                                                      \
  X(dmem)
#define CTRL_ENUM(name) CTRL_##name,
enum ctrl_bit { CONTROLLERS(CTRL_ENUM) NR_CTRL };

/* What the program reads beyond the basics every kernel with cgroup
 * iterators has, as kernel config and version make it come and go:
 * X(fact, KIND, type, name, "files"). The program checks each by CO-RE
 * before reading through it and reports the ones this kernel has (global
 * `facts`, bit = position in the list); user space sends the files (names,
 * space-separated) to plain read where one is missing. KIND: FIELD, member
 * `name` of struct `type` (C reads it through the flavor type___local);
 * CPUMASK, the same as a cpumask_var_t in either of its shapes; ENUMVAL,
 * value `name` of enum `type` (flavor type___local, name___local). */
#define KERNEL_FACTS(X)                                                        \
  X(cpu_ctrl, ENUMVAL, cgroup_subsys_id, cpu_cgrp_id, "cpu.weight cpu.max")    \
  X(cpu_shares, FIELD, task_group, shares, "cpu.weight")                       \
  X(cpu_bandwidth, FIELD, task_group, cfs_bandwidth, "cpu.max cpu.stat")       \
  X(cfs_period, FIELD, cfs_bandwidth, period, "cpu.max")                       \
  X(cfs_quota, FIELD, cfs_bandwidth, quota, "cpu.max")                         \
  X(cfs_nr_periods, FIELD, cfs_bandwidth, nr_periods, "cpu.stat")              \
  X(cfs_nr_throttled, FIELD, cfs_bandwidth, nr_throttled, "cpu.stat")          \
  X(cfs_throttled_time, FIELD, cfs_bandwidth, throttled_time, "cpu.stat")      \
  X(pids_ctrl, ENUMVAL, cgroup_subsys_id, pids_cgrp_id,                        \
    "pids.current pids.max")                                                   \
  X(pids_counter, FIELD, pids_cgroup, counter, "pids.current")                 \
  X(pids_limit, FIELD, pids_cgroup, limit, "pids.max")                         \
  X(cpuset_ctrl, ENUMVAL, cgroup_subsys_id, cpuset_cgrp_id,                    \
    "cpuset.cpus cpuset.cpus.effective cpuset.mems cpuset.mems.effective")     \
  X(cpuset_cpus, CPUMASK, cpuset, cpus_allowed, "cpuset.cpus")                 \
  X(cpuset_cpus_effective, CPUMASK, cpuset, effective_cpus,                    \
    "cpuset.cpus.effective")                                                   \
  X(cpuset_mems, FIELD, cpuset, mems_allowed, "cpuset.mems")                   \
  X(cpuset_mems_effective, FIELD, cpuset, effective_mems,                      \
    "cpuset.mems.effective")                                                   \
  X(memory_ctrl, ENUMVAL, cgroup_subsys_id, memory_cgrp_id,                    \
    "memory.current memory.stat memory.swap.current memory.min memory.low "    \
    "memory.high memory.max memory.swap.max memory.zswap.max "                 \
    "memory.zswap.writeback "                                                  \
    "memory.events memory.events.local memory.numa_stat")                      \
  X(memcg_memory, FIELD, mem_cgroup, memory,                                   \
    "memory.current memory.min memory.low memory.high memory.max")             \
  X(memcg_swap, FIELD, mem_cgroup, swap,                                       \
    "memory.swap.current memory.swap.max")                                     \
  X(memcg_zswap_max, FIELD, mem_cgroup, zswap_max, "memory.zswap.max")         \
  X(memcg_zswap_writeback, FIELD, mem_cgroup, zswap_writeback,                 \
    "memory.zswap.writeback")                                                  \
  X(page_counter_usage, FIELD, page_counter, usage,                            \
    "memory.current memory.swap.current")                                      \
  X(page_counter_min, FIELD, page_counter, min, "memory.min")                  \
  X(page_counter_low, FIELD, page_counter, low, "memory.low")                  \
  X(page_counter_high, FIELD, page_counter, high, "memory.high")               \
  X(page_counter_max, FIELD, page_counter, max, "memory.max memory.swap.max")  \
  X(memcg_events, FIELD, mem_cgroup, memory_events, "memory.events")           \
  X(memcg_events_local, FIELD, mem_cgroup, memory_events_local,                \
    "memory.events.local")                                                     \
  X(memcg_nodeinfo, FIELD, mem_cgroup, nodeinfo, "memory.numa_stat")           \
  X(lruvec_stats_ptr, FIELD, mem_cgroup_per_node, lruvec_stats,                \
    "memory.numa_stat")                                                        \
  X(lruvec_state, FIELD, lruvec_stats, state, "memory.numa_stat")              \
  X(n_memory, ENUMVAL, node_states, N_MEMORY, "memory.numa_stat")
#define FACT_ENUM(fact, kind, type, name, files) FACT_##fact,
enum fact_bit { KERNEL_FACTS(FACT_ENUM) NR_FACTS };

/* memory.stat keys below keeps: record.memstat[MS_key], filled with the
 * expression in fill_memstat() (`m` the memcg, `s` the slots; parts filled
 * earlier in the list may be summed). STAT(ITEM): the item from whichever
 * of enum node_stat_item, memcg_stat_item, vm_event_item the kernel has it
 * in; absent from all three, the key is absent. IF_EVENT(EVENT, expr):
 * absent unless enum vm_event_item has EVENT. memory.stat prints the zswap
 * and THP keys only with CONFIG_ZSWAP and CONFIG_TRANSPARENT_HUGEPAGE, but
 * their items are in the enums without them; ZSWPOUT and THP_FAULT_ALLOC
 * are under the same #ifdefs. IF_HUGETLB(expr): absent unless the cgroup2
 * mount accounts hugetlb to memcg (memory_hugetlb_accounting, which user
 * space reads from the mount options: rodata `hugetlb_accounting`). */
#define MEMSTAT_KEYS(X)                                                        \
  X(anon, STAT(NR_ANON_MAPPED))                                                \
  X(file, STAT(NR_FILE_PAGES))                                                 \
  X(kernel, STAT(MEMCG_KMEM))                                                  \
  X(kernel_stack, STAT(NR_KERNEL_STACK_KB))                                    \
  X(sock, STAT(MEMCG_SOCK))                                                    \
  X(shmem, STAT(NR_SHMEM))                                                     \
  X(zswap, IF_EVENT(ZSWPOUT, STAT(MEMCG_ZSWAP_B)))                             \
  X(zswapped, IF_EVENT(ZSWPOUT, STAT(MEMCG_ZSWAPPED)))                         \
  X(file_mapped, STAT(NR_FILE_MAPPED))                                         \
  X(file_dirty, STAT(NR_FILE_DIRTY))                                           \
  X(file_writeback, STAT(NR_WRITEBACK))                                        \
  X(swapcached, STAT(NR_SWAPCACHE))                                            \
  X(anon_thp, IF_EVENT(THP_FAULT_ALLOC, STAT(NR_ANON_THPS)))                   \
  X(file_thp, IF_EVENT(THP_FAULT_ALLOC, STAT(NR_FILE_THPS)))                   \
  X(shmem_thp, IF_EVENT(THP_FAULT_ALLOC, STAT(NR_SHMEM_THPS)))                 \
  X(inactive_anon, STAT(NR_INACTIVE_ANON))                                     \
  X(active_anon, STAT(NR_ACTIVE_ANON))                                         \
  X(inactive_file, STAT(NR_INACTIVE_FILE))                                     \
  X(active_file, STAT(NR_ACTIVE_FILE))                                         \
  X(unevictable, STAT(NR_UNEVICTABLE))                                         \
  X(hugetlb, IF_HUGETLB(STAT(NR_HUGETLB)))                                     \
  X(slab_reclaimable, STAT(NR_SLAB_RECLAIMABLE_B))                             \
  X(slab_unreclaimable, STAT(NR_SLAB_UNRECLAIMABLE_B))                         \
  X(slab, add(s[MS_slab_reclaimable], s[MS_slab_unreclaimable]))               \
  X(pgfault, STAT(PGFAULT))                                                    \
  X(pgmajfault, STAT(PGMAJFAULT))                                              \
  X(workingset_refault_anon, STAT(WORKINGSET_REFAULT_ANON))                    \
  X(workingset_refault_file, STAT(WORKINGSET_REFAULT_FILE))                    \
  X(workingset_activate_anon, STAT(WORKINGSET_ACTIVATE_ANON))                  \
  X(workingset_activate_file, STAT(WORKINGSET_ACTIVATE_FILE))                  \
  X(workingset_restore_anon, STAT(WORKINGSET_RESTORE_ANON))                    \
  X(workingset_restore_file, STAT(WORKINGSET_RESTORE_FILE))                    \
  X(workingset_nodereclaim, STAT(WORKINGSET_NODERECLAIM))                      \
  /* Vm events in 6.x, memcg page state in 7.x. */                             \
  X(pgrefill, STAT(PGREFILL))                                                  \
  X(pgscan, add(add(STAT(PGSCAN_KSWAPD), STAT(PGSCAN_DIRECT)),                 \
                add(STAT(PGSCAN_PROACTIVE), STAT(PGSCAN_KHUGEPAGED))))         \
  X(pgsteal, add(add(STAT(PGSTEAL_KSWAPD), STAT(PGSTEAL_DIRECT)),              \
                 add(STAT(PGSTEAL_PROACTIVE), STAT(PGSTEAL_KHUGEPAGED))))      \
  X(pgactivate, STAT(PGACTIVATE))                                              \
  X(pgdeactivate, STAT(PGDEACTIVATE))                                          \
  X(pglazyfree, STAT(PGLAZYFREE))                                              \
  X(pglazyfreed, STAT(PGLAZYFREED))                                            \
  X(thp_fault_alloc, STAT(THP_FAULT_ALLOC))                                    \
  X(thp_collapse_alloc, STAT(THP_COLLAPSE_ALLOC))
#define MS_ENUM(key, expr) MS_##key,
enum memstat_slot { MEMSTAT_KEYS(MS_ENUM) NR_MS };

/* memory.numa_stat lines below keeps: numa_row.v[NUMA_key] of a record's
 * row for a node (map `numa`, see struct numa_row) holds the raw
 * lruvec_stats.state[] value of `enum node_stat_item` ITEM, which
 * user space scales by UNIT (Page, KiB, or One: bytes or counts). User
 * space finds each item's index (rodata numa_idx). */
#define NUMA_ITEMS(X)                                                          \
  X(anon, NR_ANON_MAPPED, Page)                                                \
  X(file, NR_FILE_PAGES, Page)                                                 \
  X(kernel_stack, NR_KERNEL_STACK_KB, KiB)                                     \
  X(pagetables, NR_PAGETABLE, Page)                                            \
  X(shmem, NR_SHMEM, Page)                                                     \
  X(file_mapped, NR_FILE_MAPPED, Page)                                         \
  X(file_dirty, NR_FILE_DIRTY, Page)                                           \
  X(file_writeback, NR_WRITEBACK, Page)                                        \
  X(swapcached, NR_SWAPCACHE, Page)                                            \
  X(anon_thp, NR_ANON_THPS, Page)                                              \
  X(file_thp, NR_FILE_THPS, Page)                                              \
  X(shmem_thp, NR_SHMEM_THPS, Page)                                            \
  X(inactive_anon, NR_INACTIVE_ANON, Page)                                     \
  X(active_anon, NR_ACTIVE_ANON, Page)                                         \
  X(inactive_file, NR_INACTIVE_FILE, Page)                                     \
  X(active_file, NR_ACTIVE_FILE, Page)                                         \
  X(unevictable, NR_UNEVICTABLE, Page)                                         \
  X(slab_reclaimable, NR_SLAB_RECLAIMABLE_B, One)                              \
  X(slab_unreclaimable, NR_SLAB_UNRECLAIMABLE_B, One)                          \
  X(hugetlb, NR_HUGETLB, Page)                                                 \
  X(workingset_refault_anon, WORKINGSET_REFAULT_ANON, One)                     \
  X(workingset_refault_file, WORKINGSET_REFAULT_FILE, One)                     \
  X(workingset_activate_anon, WORKINGSET_ACTIVATE_ANON, One)                   \
  X(workingset_activate_file, WORKINGSET_ACTIVATE_FILE, One)                   \
  X(workingset_restore_anon, WORKINGSET_RESTORE_ANON, One)                     \
  X(workingset_restore_file, WORKINGSET_RESTORE_FILE, One)                     \
  X(workingset_nodereclaim, WORKINGSET_NODERECLAIM, One)
#define NUMA_ENUM(key, item, unit) NUMA_##key,
enum numa_item { NUMA_ITEMS(NUMA_ENUM) NR_NUMA_STATS };

/* memory.events keys: record.events[EV_key] and .events_local[EV_key]
 * from `enum memcg_memory_event` EVENT. */
#define MEMCG_EVENTS(X)                                                        \
  X(low, MEMCG_LOW)                                                            \
  X(high, MEMCG_HIGH)                                                          \
  X(max, MEMCG_MAX)                                                            \
  X(oom, MEMCG_OOM)                                                            \
  X(oom_kill, MEMCG_OOM_KILL)                                                  \
  X(sock_throttled, MEMCG_SOCK_THROTTLED)
#define EV_ENUM(key, event) EV_##key,
enum memcg_event { MEMCG_EVENTS(EV_ENUM) NR_EVENTS };

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
  /* memory.zswap.writeback: 0 or 1, ABSENT where the kernel has none */
  __u64 zswap_writeback;
  /* memory.oom.group: 0 or 1 */
  __u64 mem_oom_group;
  __u64 events[NR_EVENTS];
  __u64 events_local[NR_EVENTS];
  __u64 memstat[NR_MS];
  /* cpuset */
  __u64 cpus[CPU_WORDS];
  __u64 cpus_effective[CPU_WORDS];
  __u64 mems;
  __u64 mems_effective;
  char name[256];
};

/* One node's memory.numa_stat of one cgroup: map `numa` holds
 * `numa_node_ids` rows per record, row idx * numa_node_ids + node for the
 * record at idx (set when the record has HAS_NUMA). Kept out of the record
 * so the record map does not pin a table for NUMA_NODES nodes per cgroup
 * (1.6 KiB, over half a record) on machines with one or two nodes. */
struct numa_row {
  __u64 v[NR_NUMA_STATS];
};

/* Never read: puts every table's enum into the object's BTF (clang emits
 * the types of globals only), where the contract test finds them. */
struct contract {
  enum has_flag has;
  enum feat_flag feat;
  enum kf_flag kf;
  enum ctrl_bit ctrl;
  enum memstat_slot memstat;
  enum numa_item numa;
  enum memcg_event event;
  enum fact_bit fact;
};

#endif
