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
 * Each table is one X-macro list, `#define NAME(X) X(entry, args...) ...`,
 * from which C builds an enum and its fill code. Rust gets the record, the
 * enums and the integer constants through bindgen (build.rs; fbcode's
 * rust_bindgen_library), and lists the entries it needs by their enum
 * constants, which the compiler checks are the enum's, in its order, every
 * one (contract.rs). The header parses on its own (plain C integer
 * types), for bindgen. The record's fields are u64s, or u32s in pairs,
 * so it has no padding and both sides agree without packing rules.
 */
#ifndef CGROUP_BPF_RECORD_H
#define CGROUP_BPF_RECORD_H

/* A value the kernel does not have (config, version): shown as None. */
#define CGB_ABSENT (~0ULL)

/* cpuset masks: 512 CPUs, 64 memory nodes; larger machines use text. */
#define CGB_CPU_WORDS 8

/* A bit per entry, in list order: enum NAME_bit (positions) and
 * enum NAME_flag (masks). */
#define CGB_BIT_POS(name) name##_BIT,
#define CGB_BIT_MASK(name) name = 1U << name##_BIT,
/* clang-format off */
#define CGB_BITS(list, tag)                                                       \
  enum tag##_bit { list(CGB_BIT_POS) };                                           \
  enum tag##_flag { list(CGB_BIT_MASK) }
/* clang-format on */

/* Which controllers' state the cgroup has (its own css): record.flags. */
#define CGB_HAS_FLAGS(X)                                                       \
  X(CGB_HAS_MEMCG)                                                             \
  X(CGB_HAS_MEMSTAT)                                                           \
  X(CGB_HAS_CPU)                                                               \
  X(CGB_HAS_PIDS)                                                              \
  X(CGB_HAS_CPUSET)                                                            \
  X(CGB_HAS_BSTAT)
CGB_BITS(CGB_HAS_FLAGS, cgroup_bpf_has);

/* What the running kernel let the last pass do (global `features`). */
#define CGB_FEAT_FLAGS(X)                                                      \
  X(CGB_FEAT_CPU_FLUSH)                                                        \
  X(CGB_FEAT_MEMCG_KFUNCS)
CGB_BITS(CGB_FEAT_FLAGS, cgroup_bpf_feat);

/* Kfuncs user space found in the running kernel's BTF (rodata `kfuncs`):
 * bpf_ksym_exists() on a kfunc needs 6.3+, so the check is done there.
 * One of the rstat flushes (kernel.rs's RSTAT_FLUSHES); CGB_KF_MEMCG: the memcg
 * kfuncs memory.stat reads through, and a way to flush memcg;
 * CGB_KF_MEMCG_FLUSH: bpf_mem_cgroup_flush_stats(). */
#define CGB_KF_FLAGS(X)                                                        \
  X(CGB_KF_BPF_CGROUP_RSTAT_FLUSH)                                             \
  X(CGB_KF_CGROUP_RSTAT_FLUSH)                                                 \
  X(CGB_KF_CSS_RSTAT_FLUSH)                                                    \
  X(CGB_KF_MEMCG)                                                              \
  X(CGB_KF_MEMCG_FLUSH)
CGB_BITS(CGB_KF_FLAGS, cgroup_bpf_kf);

/* cgroup.controllers names: our own bit per controller (record
 * .controllers, .subtree_control), independent of the kernel's subsys ids,
 * which differ by config. */
#define CGB_CONTROLLERS(X)                                                     \
  X(cpuset)                                                                    \
  X(cpu)                                                                       \
  X(io)                                                                        \
  X(memory)                                                                    \
  X(hugetlb)                                                                   \
  X(pids)                                                                      \
  X(rdma)                                                                      \
  X(misc)                                                                      \
  X(dmem)
#define CGB_CTRL_ENUM(name) CGB_CTRL_##name,
enum cgroup_bpf_ctrl_bit { CGB_CONTROLLERS(CGB_CTRL_ENUM) CGB_NR_CTRL };

/* What the program reads beyond the basics every kernel with cgroup
 * iterators has, as kernel config and version make it come and go:
 * X(fact, KIND, type, name). The program checks each by CO-RE before
 * reading through it and reports the ones this kernel has (global `facts`,
 * bit CGB_FACT_fact); user space sends the files that need a missing one to
 * plain read (contract.rs says which). KIND: FIELD, member
 * `name` of struct `type` (C reads it through the flavor type___local);
 * CPUMASK, the same as a cpumask_var_t in either of its shapes; ENUMVAL,
 * value `name` of enum `type` (flavor type___local, name___local). */
#define CGB_KERNEL_FACTS(X)                                                    \
  X(cpu_ctrl, ENUMVAL, cgroup_subsys_id, cpu_cgrp_id)                          \
  X(cpu_shares, FIELD, task_group, shares)                                     \
  X(cpu_bandwidth, FIELD, task_group, cfs_bandwidth)                           \
  X(cfs_period, FIELD, cfs_bandwidth, period)                                  \
  X(cfs_quota, FIELD, cfs_bandwidth, quota)                                    \
  X(cfs_nr_periods, FIELD, cfs_bandwidth, nr_periods)                          \
  X(cfs_nr_throttled, FIELD, cfs_bandwidth, nr_throttled)                      \
  X(cfs_throttled_time, FIELD, cfs_bandwidth, throttled_time)                  \
  X(pids_ctrl, ENUMVAL, cgroup_subsys_id, pids_cgrp_id)                        \
  X(pids_counter, FIELD, pids_cgroup, counter)                                 \
  X(pids_limit, FIELD, pids_cgroup, limit)                                     \
  X(cpuset_ctrl, ENUMVAL, cgroup_subsys_id, cpuset_cgrp_id)                    \
  X(cpuset_cpus, CPUMASK, cpuset, cpus_allowed)                                \
  X(cpuset_cpus_effective, CPUMASK, cpuset, effective_cpus)                    \
  X(cpuset_mems, FIELD, cpuset, mems_allowed)                                  \
  X(cpuset_mems_effective, FIELD, cpuset, effective_mems)                      \
  X(memory_ctrl, ENUMVAL, cgroup_subsys_id, memory_cgrp_id)                    \
  X(memcg_memory, FIELD, mem_cgroup, memory)                                   \
  X(memcg_swap, FIELD, mem_cgroup, swap)                                       \
  X(memcg_zswap_max, FIELD, mem_cgroup, zswap_max)                             \
  X(memcg_zswap_writeback, FIELD, mem_cgroup, zswap_writeback)                 \
  X(page_counter_usage, FIELD, page_counter, usage)                            \
  X(page_counter_min, FIELD, page_counter, min)                                \
  X(page_counter_low, FIELD, page_counter, low)                                \
  X(page_counter_high, FIELD, page_counter, high)                              \
  X(page_counter_max, FIELD, page_counter, max)                                \
  X(memcg_events, FIELD, mem_cgroup, memory_events)                            \
  X(memcg_events_local, FIELD, mem_cgroup, memory_events_local)
#define CGB_FACT_ENUM(fact, kind, type, name) CGB_FACT_##fact,
enum cgroup_bpf_fact_bit { CGB_KERNEL_FACTS(CGB_FACT_ENUM) CGB_NR_FACTS };

/* memory.stat keys below keeps: record.memstat[CGB_MS_key], filled with the
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
#define CGB_MEMSTAT_KEYS(X)                                                    \
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
  X(slab, add(s[CGB_MS_slab_reclaimable], s[CGB_MS_slab_unreclaimable]))       \
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
#define CGB_MS_ENUM(key, expr) CGB_MS_##key,
enum cgroup_bpf_memstat_slot { CGB_MEMSTAT_KEYS(CGB_MS_ENUM) CGB_NR_MS };

/* memory.events keys: record.events[CGB_EV_key] and .events_local[CGB_EV_key]
 * from `enum memcg_memory_event` EVENT. */
#define CGB_MEMCG_EVENTS(X)                                                    \
  X(low, MEMCG_LOW)                                                            \
  X(high, MEMCG_HIGH)                                                          \
  X(max, MEMCG_MAX)                                                            \
  X(oom, MEMCG_OOM)                                                            \
  X(oom_kill, MEMCG_OOM_KILL)                                                  \
  X(sock_throttled, MEMCG_SOCK_THROTTLED)
#define CGB_EV_ENUM(key, event) CGB_EV_##key,
enum cgroup_bpf_memcg_event { CGB_MEMCG_EVENTS(CGB_EV_ENUM) CGB_NR_EVENTS };

struct cgroup_bpf_record {
  unsigned long long id;
  unsigned long long parent_id;
  unsigned int level;
  unsigned int flags;
  unsigned int controllers;
  unsigned int subtree_control;
  unsigned int nr_descendants;
  unsigned int nr_dying_descendants;
  /* cpu.stat: raw ns; user/system are scaled in user space */
  unsigned long long usage_ns;
  unsigned long long utime_ns;
  unsigned long long stime_ns;
  unsigned long long prev_utime_ns;
  unsigned long long prev_stime_ns;
  unsigned long long nr_periods;
  unsigned long long nr_throttled;
  unsigned long long throttled_ns;
  /* cpu.weight (tg_weight, unscaled), cpu.max (ns, quota CGB_ABSENT = max) */
  unsigned long long weight;
  unsigned long long quota_ns;
  unsigned long long period_ns;
  /* pids */
  unsigned long long pids_current;
  unsigned long long pids_limit;
  /* memory: page counters in pages */
  unsigned long long mem_usage;
  unsigned long long swap_usage;
  unsigned long long mem_min;
  unsigned long long mem_low;
  unsigned long long mem_high;
  unsigned long long mem_max;
  unsigned long long swap_max;
  unsigned long long zswap_max;
  /* memory.zswap.writeback: 0 or 1, CGB_ABSENT where the kernel has none */
  unsigned long long zswap_writeback;
  /* memory.oom.group: 0 or 1 */
  unsigned long long mem_oom_group;
  unsigned long long events[CGB_NR_EVENTS];
  unsigned long long events_local[CGB_NR_EVENTS];
  unsigned long long memstat[CGB_NR_MS];
  /* cpuset */
  unsigned long long cpus[CGB_CPU_WORDS];
  unsigned long long cpus_effective[CGB_CPU_WORDS];
  unsigned long long mems;
  unsigned long long mems_effective;
};

#endif
