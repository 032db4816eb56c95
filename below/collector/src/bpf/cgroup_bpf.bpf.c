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
 * One pass over the cgroup tree per sample: flush once at the walk root,
 * then write one fixed-size record per cgroup, in pre-order, into an
 * mmapped array map. Nothing is printed: user space reads the records in place
 * and reads what the pass found (`pass`) from the mmapped .bss.
 *
 * The pass comes in two forms (CGROUP_PASS); the loader loads one:
 * - `cgroup_stats`: a sleepable cgroup iterator (order DESCENDANTS_PRE,
 *   set by the loader). The kernel holds cgroup_mutex from the first
 *   cgroup to the last: every mkdir, rmdir and migration on the host
 *   waits for the whole pass.
 * - `cgroup_stats_rcu`: a sleepable task iterator over one task (the
 *   process's main thread), which only hosts the pass: it flushes outside any
 *   lock, as a read of cpu.stat does, lists the cgroups' ids with the css
 *   iterator kfuncs under RCU (briefly: a write to cgroup.procs holding
 *   cgroup_mutex waits for RCU's grace period), then visits each by id
 *   holding a reference and, for that visit, RCU's read lock. No cgroup
 *   lock is held; cgroups made or removed meanwhile are seen or not, as by
 *   a reader walking the directories.
 *   Needs bpf_iter_css_new (6.7) and bpf_cgroup_from_id.
 */
/* The kfuncs are declared here (weak, some with local flavors of their
 * types); a vmlinux.h from bpftool 7.5+ would declare them too. */
#define BPF_NO_KFUNC_PROTOTYPES
#ifdef FBCODE_BUILD
#include <bpf/vmlinux/vmlinux.h>
#else
#include <vmlinux.h>
#endif
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "cgroup_bpf_record.h"

/* GPL-compatible: the kernel lets only such programs call the GPL-only
 * helpers and kfuncs used here. */
char LICENSE[] SEC("license") = "GPL";

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct cgroup_bpf_record);
  /* The loader sets the real capacity before loading. */
  __uint(max_entries, 1);
} records SEC(".maps");

/* The walk under RCU's first step: the ids of the cgroups to visit, in
 * pre-order; sized like `records` by the loader. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, 1);
} walk_ids SEC(".maps");

/* What the last pass found: the one variable of .bss, which user space
 * maps. One struct, so that its layout is the skeleton's whatever else the
 * object holds (the compiler orders separate globals as it likes). */
struct {
  /* Cgroups visited, counted past the map's capacity so user space knows
   * how far to grow it. */
  __u32 nr_cgroups;
  /* CGB_FEAT_* bits: what this kernel let the pass do. */
  __u32 features;
  /* The CGB_KERNEL_FACTS this kernel has, bit CGB_FACT_*. */
  __u64 facts;
} pass;
/* Bytes of a cpumask the kernel allocated (nr_cpu_ids bits, in longs);
 * set by the loader: reading past them reads other objects. */
const volatile __u32 cpumask_bytes = 8;
/* CGB_KF_* bits; constant at load, so the verifier drops calls to kfuncs this
 * kernel lacks (libbpf poisons them). */
const volatile __u32 kfuncs;
/* Whether memory.stat prints hugetlb (the mount's memory_hugetlb_accounting).
 */
const volatile __u32 hugetlb_accounting;
/* The walk root's cgroup id (the RCU walk finds it by id). */
const volatile __u64 walk_root_id;

/* 7.x rstat flush, per css; 6.x had cgroup_rstat_flush(struct cgroup *),
 * bpf_cgroup_rstat_flush() on some fleet kernels, which flush every
 * controller's css of the cgroup. */
extern void css_rstat_flush(struct cgroup_subsys_state *css) __ksym __weak;
extern void cgroup_rstat_flush(struct cgroup *cgrp) __ksym __weak;
extern void bpf_cgroup_rstat_flush(struct cgroup *cgrp) __ksym __weak;
extern struct mem_cgroup *
bpf_get_mem_cgroup(struct cgroup_subsys_state *css) __ksym __weak;
extern void bpf_put_mem_cgroup(struct mem_cgroup *memcg) __ksym __weak;
extern unsigned long bpf_mem_cgroup_page_state(struct mem_cgroup *memcg,
                                               int idx) __ksym __weak;
extern unsigned long
bpf_mem_cgroup_vm_events(struct mem_cgroup *memcg,
                         enum vm_event_item event) __ksym __weak;
extern void bpf_mem_cgroup_flush_stats(struct mem_cgroup *memcg) __ksym __weak;
/* The walk under RCU (LoadConfig.rcu_walk in user space). */
extern struct cgroup *bpf_cgroup_from_id(__u64 cgid) __ksym __weak;
extern void bpf_cgroup_release(struct cgroup *cgrp) __ksym __weak;
extern void bpf_rcu_read_lock(void) __ksym __weak;
extern void bpf_rcu_read_unlock(void) __ksym __weak;
/* The css iterator's state (struct bpf_iter_css, 6.7), declared here: a
 * vmlinux.h from an older kernel has none. The kernel checks it by its own
 * BTF; libbpf matches the flavor. */
struct bpf_iter_css___local {
  __u64 opaque[3];
} __attribute__((aligned(8)));
extern int bpf_iter_css_new(struct bpf_iter_css___local *it,
                            struct cgroup_subsys_state *start,
                            unsigned int flags) __ksym __weak;
extern struct cgroup_subsys_state *
bpf_iter_css_next(struct bpf_iter_css___local *it) __ksym __weak;
extern void bpf_iter_css_destroy(struct bpf_iter_css___local *it) __ksym __weak;

/* Every controller of the list, as a flavor of the kernel's enum: CO-RE
 * tells which ones this kernel has (ids and presence depend on config,
 * and this vmlinux.h may lack some). */
#define SUBSYS_OPT(name) name##_cgrp_id___local,
enum cgroup_subsys_id___local { CGB_CONTROLLERS(SUBSYS_OPT) };

/* The flavors CGB_KERNEL_FACTS are checked through: the members read. */
struct task_group___local {
  unsigned long shares;
  struct cfs_bandwidth cfs_bandwidth;
} __attribute__((preserve_access_index));

struct cfs_bandwidth___local {
  ktime_t period;
  __u64 quota;
  int nr_periods;
  int nr_throttled;
  __u64 throttled_time;
} __attribute__((preserve_access_index));

struct pids_cgroup___local {
  atomic64_t counter;
  atomic64_t limit;
} __attribute__((preserve_access_index));

/* cpumask_var_t is a pointer with CPUMASK_OFFSTACK, else embedded: one
 * flavor each, picked by which one the running kernel's BTF matches. */
struct cpuset___ptr {
  struct cpumask *cpus_allowed;
  struct cpumask *effective_cpus;
} __attribute__((preserve_access_index));

struct cpuset___embedded {
  struct cpumask cpus_allowed[1];
  struct cpumask effective_cpus[1];
} __attribute__((preserve_access_index));

struct cpuset___local {
  nodemask_t mems_allowed;
  nodemask_t effective_mems;
} __attribute__((preserve_access_index));

/* zswap_max needs CONFIG_ZSWAP, zswap_writeback also 6.8. */
struct mem_cgroup___local {
  struct page_counter memory;
  struct page_counter swap;
  unsigned long zswap_max;
  bool zswap_writeback;
  bool oom_group;
  atomic_long_t memory_events[1];
  atomic_long_t memory_events_local[1];
} __attribute__((preserve_access_index));

struct page_counter___local {
  atomic_long_t usage;
  unsigned long min;
  unsigned long low;
  unsigned long high;
  unsigned long max;
} __attribute__((preserve_access_index));

#define HAVE_FIELD(type, name)                                                 \
  bpf_core_field_exists(struct type##___local, name)
#define HAVE_CPUMASK(type, name)                                               \
  (bpf_core_field_exists(struct type##___ptr, name) ||                         \
   bpf_core_field_exists(struct type##___embedded, name))
#define HAVE_ENUMVAL(type, name)                                               \
  bpf_core_enum_value_exists(enum type##___local, name##___local)

/* have_<fact>(): a constant once libbpf relocated it, so the verifier
 * drops the reads of what this kernel lacks (libbpf poisons them). */
#define HAVE_FN(fact, kind, type, name)                                        \
  static __always_inline bool have_##fact(void) {                              \
    return HAVE_##kind(type, name);                                            \
  }
CGB_KERNEL_FACTS(HAVE_FN)

static __always_inline bool have_memcg_kfuncs(void) {
  return kfuncs & CGB_KF_MEMCG;
}

/* An enum value, to be used only inside the check that the kernel has it:
 * where it does not, libbpf poisons the relocation, and the barrier keeps
 * the compiler from moving the value out of the check. */
#define ENUM_VALUE(type, value)                                                \
  ({                                                                           \
    __u32 v = bpf_core_enum_value(type, value);                                \
                                                                               \
    barrier_var(v);                                                            \
    v;                                                                         \
  })

#define SUBSYS_ID(name)                                                        \
  ENUM_VALUE(enum cgroup_subsys_id___local, name##_cgrp_id___local)

/* The cgroup's own css of controller `name`; NULL where the kernel has
 * no such controller. Callers cast it to the controller's struct, which
 * starts with it (task_group, mem_cgroup, pids_cgroup, cpuset). */
#define OWN_CSS(cgrp, name)                                                    \
  ({                                                                           \
    void *css = NULL;                                                          \
                                                                               \
    if (have_##name##_ctrl())                                                  \
      css = (void *)BPF_CORE_READ(cgrp, subsys[SUBSYS_ID(name)]);              \
    css;                                                                       \
  })

#define CTRL(name)                                                             \
  if (bpf_core_enum_value_exists(enum cgroup_subsys_id___local,                \
                                 name##_cgrp_id___local) &&                    \
      (kmask & (1U << SUBSYS_ID(name))))                                       \
    m |= 1U << CGB_CTRL_##name;

/* Kernel subsys mask -> our CGB_CTRL_* bits. */
static __always_inline __u32 ctrl_mask(__u32 kmask) {
  __u32 m = 0;

  CGB_CONTROLLERS(CTRL)
  return m;
}

/* u16 in 6.1, u32 in 7.x: read at the running kernel's size (CO-RE). */
struct cgroup___local {
  __u32 subtree_control;
} __attribute__((preserve_access_index));

#define SUBTREE_CONTROL(cgrp)                                                  \
  ((__u32)BPF_CORE_READ_BITFIELD_PROBED((struct cgroup___local *)(cgrp),       \
                                        subtree_control))

/* Where the cgroup is in the tree. */
static __always_inline struct cgroup *fill_place(struct cgroup_bpf_record *r,
                                                 struct cgroup *cgrp) {
  struct cgroup *parent = BPF_CORE_READ(cgrp, self.parent, cgroup);

  r->id = BPF_CORE_READ(cgrp, kn, id);
  r->parent_id = parent ? BPF_CORE_READ(parent, kn, id) : 0;
  r->level = BPF_CORE_READ(cgrp, level);
  return parent;
}

static __always_inline void fill_tree(struct cgroup_bpf_record *r,
                                      struct cgroup *cgrp) {
  struct cgroup *parent = fill_place(r, cgrp);
  __u32 control;

  r->nr_descendants = BPF_CORE_READ(cgrp, nr_descendants);
  r->nr_dying_descendants = BPF_CORE_READ(cgrp, nr_dying_descendants);
  r->subtree_control = ctrl_mask(SUBTREE_CONTROL(cgrp));
  /* cgroup.controllers: what the parent enabled; the root shows its
   * hierarchy's controllers. Threaded cgroups get threaded ones only. */
  if (parent) {
    control = ctrl_mask(SUBTREE_CONTROL(parent));
    if (BPF_CORE_READ(cgrp, dom_cgrp) != cgrp)
      control &= (1U << CGB_CTRL_cpuset) | (1U << CGB_CTRL_cpu) |
                 (1U << CGB_CTRL_pids);
  } else {
    control = ctrl_mask(BPF_CORE_READ(cgrp, root, subsys_mask));
  }
  r->controllers = control;
}

/* Empty with CONFIG_VIRT_CPU_ACCOUNTING_NATIVE, where cpu.stat shows
 * bstat's utime and stime as they are (no cputime_adjust() scaling). */
struct prev_cputime___local {
  __u64 utime;
  __u64 stime;
} __attribute__((preserve_access_index));

static __always_inline void fill_cpu(struct cgroup_bpf_record *r,
                                     struct cgroup *cgrp) {
  struct prev_cputime___local *prev = (void *)&cgrp->prev_cputime;
  struct task_group___local *tg;

  r->usage_ns = BPF_CORE_READ(cgrp, bstat.cputime.sum_exec_runtime);
  r->utime_ns = BPF_CORE_READ(cgrp, bstat.cputime.utime);
  r->stime_ns = BPF_CORE_READ(cgrp, bstat.cputime.stime);
  r->prev_utime_ns = r->prev_stime_ns = CGB_ABSENT;
  if (bpf_core_field_exists(prev->utime)) {
    r->prev_utime_ns = BPF_CORE_READ(prev, utime);
    r->prev_stime_ns = BPF_CORE_READ(prev, stime);
  }
  r->flags |= CGB_HAS_BSTAT;

  tg = OWN_CSS(cgrp, cpu);
  if (!tg)
    return;
  r->flags |= CGB_HAS_CPU;
  r->weight = have_cpu_shares() ? BPF_CORE_READ(tg, shares) : CGB_ABSENT;
  r->nr_periods = r->nr_throttled = r->throttled_ns = CGB_ABSENT;
  r->quota_ns = r->period_ns = CGB_ABSENT;
  if (have_cpu_bandwidth()) {
    struct cfs_bandwidth___local *b = (void *)&tg->cfs_bandwidth;

    if (have_cfs_nr_periods())
      r->nr_periods = BPF_CORE_READ(b, nr_periods);
    if (have_cfs_nr_throttled())
      r->nr_throttled = BPF_CORE_READ(b, nr_throttled);
    if (have_cfs_throttled_time())
      r->throttled_ns = BPF_CORE_READ(b, throttled_time);
    if (have_cfs_quota())
      r->quota_ns = BPF_CORE_READ(b, quota);
    if (have_cfs_period())
      r->period_ns = BPF_CORE_READ(b, period);
  }
}

/* Whole kernel arrays are read here in one call each and their items
 * picked after: a helper call per item costs more than the bytes. Passes
 * of a loaded program run one at a time, so they never share it. */
#define SCRATCH_LONGS 64
static __u64 scratch[SCRATCH_LONGS] SEC(".data.work");

static __always_inline void fill_pids(struct cgroup_bpf_record *r,
                                      struct cgroup *cgrp) {
  struct pids_cgroup___local *pids = OWN_CSS(cgrp, pids);

  if (!pids)
    return;
  r->flags |= CGB_HAS_PIDS;
  r->pids_current =
      have_pids_counter() ? BPF_CORE_READ(pids, counter.counter) : CGB_ABSENT;
  r->pids_limit =
      have_pids_limit() ? BPF_CORE_READ(pids, limit.counter) : CGB_ABSENT;
}

#define READ_CPUMASK(dst, cs, field)                                           \
  do {                                                                         \
    __u32 size = cpumask_bytes;                                                \
    const void *mask = 0;                                                      \
    if (size > bpf_core_type_size(struct cpumask))                             \
      size = bpf_core_type_size(struct cpumask);                               \
    if (size > CGB_CPU_WORDS * 8)                                              \
      size = CGB_CPU_WORDS * 8;                                                \
    if (bpf_core_field_exists(((struct cpuset___ptr *)(cs))->field))           \
      mask = BPF_CORE_READ((struct cpuset___ptr *)(cs), field);                \
    else if (bpf_core_field_exists(((struct cpuset___embedded *)(cs))->field)) \
      mask = __builtin_preserve_access_index(                                  \
          &((struct cpuset___embedded *)(cs))->field);                         \
    if (mask && size > 0)                                                      \
      bpf_probe_read_kernel(dst, size, mask);                                  \
  } while (0)

static __always_inline void fill_cpuset(struct cgroup_bpf_record *r,
                                        struct cgroup *cgrp) {
  struct cpuset___local *cs = OWN_CSS(cgrp, cpuset);

  if (!cs)
    return;
  r->flags |= CGB_HAS_CPUSET;
  for (int i = 0; i < CGB_CPU_WORDS; i++)
    r->cpus[i] = r->cpus_effective[i] = 0;
  READ_CPUMASK(r->cpus, cs, cpus_allowed);
  READ_CPUMASK(r->cpus_effective, cs, effective_cpus);
  r->mems = have_cpuset_mems() ? BPF_CORE_READ(cs, mems_allowed.bits[0]) : 0;
  r->mems_effective = have_cpuset_mems_effective()
                          ? BPF_CORE_READ(cs, effective_mems.bits[0])
                          : 0;
}

#define EVENT_OPT(key, event) event##___opt,
enum memcg_memory_event___opt { CGB_MEMCG_EVENTS(EVENT_OPT) };

/* Reads the array at SRC (the CO-RE field named after it) into scratch;
 * the items read, 0 if the read failed. */
#define READ_ARRAY(src, ...)                                                   \
  ({                                                                           \
    __u32 size = bpf_core_field_size(__VA_ARGS__);                             \
    if (size > sizeof(scratch))                                                \
      size = sizeof(scratch);                                                  \
    bpf_probe_read_kernel(scratch, size, src) ? 0 : size / 8;                  \
  })

/* From a memory_events array in scratch (N items): an event this kernel
 * does not count (sock_throttled is new) is CGB_ABSENT. */
#define EVENT(key, event)                                                      \
  {                                                                            \
    dst[CGB_EV_##key] = CGB_ABSENT;                                            \
    if (bpf_core_enum_value_exists(enum memcg_memory_event___opt,              \
                                   event##___opt)) {                           \
      __u32 i = ENUM_VALUE(enum memcg_memory_event___opt, event##___opt);      \
                                                                               \
      if (i < n)                                                               \
        dst[CGB_EV_##key] = scratch[i & (SCRATCH_LONGS - 1)];                  \
    }                                                                          \
  }

/* Member `field` of page counter `pc`, if the kernel has both. */
#define COUNTER(memcg, pc, field)                                              \
  (have_memcg_##pc() && have_page_counter_##field()                            \
       ? BPF_CORE_READ((struct page_counter___local *)&(memcg)->pc, field)     \
       : CGB_ABSENT)

/* The usage of page counter `pc` (an atomic_long_t). */
#define USAGE(memcg, pc)                                                       \
  (have_memcg_##pc() && have_page_counter_usage()                              \
       ? BPF_CORE_READ((struct page_counter___local *)&(memcg)->pc,            \
                       usage.counter)                                          \
       : CGB_ABSENT)

/* Page counters and event arrays need no flush: read them by CO-RE. */
static __always_inline void fill_memcg(struct cgroup_bpf_record *r,
                                       struct cgroup *cgrp) {
  struct mem_cgroup___local *memcg = OWN_CSS(cgrp, memory);

  if (!memcg)
    return;
  r->flags |= CGB_HAS_MEMCG;
  r->mem_usage = USAGE(memcg, memory);
  r->swap_usage = USAGE(memcg, swap);
  r->mem_min = COUNTER(memcg, memory, min);
  r->mem_low = COUNTER(memcg, memory, low);
  r->mem_high = COUNTER(memcg, memory, high);
  r->mem_max = COUNTER(memcg, memory, max);
  r->swap_max = COUNTER(memcg, swap, max);
  r->zswap_max =
      have_memcg_zswap_max() ? BPF_CORE_READ(memcg, zswap_max) : CGB_ABSENT;
  r->zswap_writeback = have_memcg_zswap_writeback()
                           ? BPF_CORE_READ(memcg, zswap_writeback)
                           : CGB_ABSENT;
  /* Since 4.19: every kernel with cgroup iterators has it. */
  r->mem_oom_group = BPF_CORE_READ(memcg, oom_group) ? 1 : 0;
  if (have_memcg_events()) {
    __u64 *dst = r->events;
    __u32 n = READ_ARRAY(&memcg->memory_events, memcg->memory_events);

    CGB_MEMCG_EVENTS(EVENT)
  }
  if (have_memcg_events_local()) {
    __u64 *dst = r->events_local;
    __u32 n =
        READ_ARRAY(&memcg->memory_events_local, memcg->memory_events_local);

    CGB_MEMCG_EVENTS(EVENT)
  }
}

/* A memory.stat item from whichever of the kernel's enums has it (items
 * come, go and move between these enums across versions: pgscan's parts
 * are vm events in 6.x, node stats in 7.x): the memcg kfunc of that enum,
 * CGB_ABSENT where none has it. The enums are flavors declared where they are
 * read, one per item and enum (enum node_stat_item___NR_SHMEM):
 * same-named one-item flavors would be merged into one type. */
#define STAT(name)                                                             \
  ({                                                                           \
    enum node_stat_item___##name{name##___node};                               \
    enum memcg_stat_item___##name{name##___memcg};                             \
    enum vm_event_item___##name{name##___event};                               \
    __u64 v = CGB_ABSENT;                                                      \
                                                                               \
    if (bpf_core_enum_value_exists(enum node_stat_item___##name,               \
                                   name##___node))                             \
      v = bpf_mem_cgroup_page_state(                                           \
          m, ENUM_VALUE(enum node_stat_item___##name, name##___node));         \
    else if (bpf_core_enum_value_exists(enum memcg_stat_item___##name,         \
                                        name##___memcg))                       \
      v = bpf_mem_cgroup_page_state(                                           \
          m, ENUM_VALUE(enum memcg_stat_item___##name, name##___memcg));       \
    else if (bpf_core_enum_value_exists(enum vm_event_item___##name,           \
                                        name##___event))                       \
      v = bpf_mem_cgroup_vm_events(                                            \
          m, ENUM_VALUE(enum vm_event_item___##name, name##___event));         \
    v;                                                                         \
  })

/* `expr` if the kernel's enum vm_event_item has `event`, else CGB_ABSENT (see
 * CGB_MEMSTAT_KEYS). A flavor per event, as in STAT. */
#define IF_EVENT(event, expr)                                                  \
  ({                                                                           \
    enum vm_event_item___if_##event{event##___if};                             \
    bpf_core_enum_value_exists(enum vm_event_item___if_##event, event##___if)  \
        ? (expr)                                                               \
        : CGB_ABSENT;                                                          \
  })

/* `expr` where memory.stat prints hugetlb, else CGB_ABSENT (see
 * CGB_MEMSTAT_KEYS). */
#define IF_HUGETLB(expr) (hugetlb_accounting ? (expr) : CGB_ABSENT)

/* A sum as the kernel prints it: parts it lacks count as zero; CGB_ABSENT
 * only when it has none. */
static __always_inline __u64 add(__u64 a, __u64 b) {
  return a == CGB_ABSENT ? b : b == CGB_ABSENT ? a : a + b;
}

/* memory.stat through the memcg kfuncs: the same memcg_page_state_output()
 * the text uses, so the units match. */
static __always_inline void fill_memstat(struct cgroup_bpf_record *r,
                                         struct mem_cgroup *m) {
  __u64 *s = r->memstat;

  r->flags |= CGB_HAS_MEMSTAT;
#define FILL(key, expr) s[CGB_MS_##key] = (expr);
  CGB_MEMSTAT_KEYS(FILL)
#undef FILL
}

/* Once per pass, at the walk root: later cgroups read flushed state. */
static __always_inline void flush_at_walk_root(struct cgroup *cgrp) {
  __u32 feat = 0;

  if (kfuncs & CGB_KF_BPF_CGROUP_RSTAT_FLUSH) {
    bpf_cgroup_rstat_flush(cgrp);
    feat |= CGB_FEAT_CPU_FLUSH;
  } else if (kfuncs & CGB_KF_CGROUP_RSTAT_FLUSH) {
    cgroup_rstat_flush(cgrp);
    feat |= CGB_FEAT_CPU_FLUSH;
  } else if (kfuncs & CGB_KF_CSS_RSTAT_FLUSH) {
    css_rstat_flush(&cgrp->self);
    feat |= CGB_FEAT_CPU_FLUSH;
  }
  if (have_memcg_kfuncs()) {
    struct mem_cgroup *m = bpf_get_mem_cgroup(&cgrp->self);

    feat |= CGB_FEAT_MEMCG_KFUNCS;
    if (m) {
      /* The flush a read of memory.stat does; else the memcg's own css
       * (css_rstat_flush() above flushed the cgroup's self css only). */
      if (kfuncs & CGB_KF_MEMCG_FLUSH)
        bpf_mem_cgroup_flush_stats(m);
      else if (kfuncs & CGB_KF_CSS_RSTAT_FLUSH)
        css_rstat_flush(&m->css);
      bpf_put_mem_cgroup(m);
    }
  }
  pass.features = feat;
#define FACT_BIT(fact, ...) | (have_##fact() ? 1ULL << CGB_FACT_##fact : 0)
  pass.facts = 0 CGB_KERNEL_FACTS(FACT_BIT);
}

/* The next record of the pass, at index pass.nr_cgroups; NULL past the map's
 * capacity (counted: user space grows the map). */
static __always_inline struct cgroup_bpf_record *next_record(void) {
  __u32 idx = pass.nr_cgroups++;

  return bpf_map_lookup_elem(&records, &idx);
}

/* The cgroup being visited, for the functions below that read it by
 * CO-RE (a global function's arguments cannot be kernel pointers). A
 * number to the verifier, so those read through it with probe reads
 * (BPF_CORE_READ), never as a trusted pointer; the caller keeps the
 * cgroup alive. Static, in a section of its own: libbpf makes a map
 * mmapable only for non-static variables, and a kernel pointer is not user
 * space's to see. Storing a pointer in a map value needs allow_ptr_leaks
 * (CAP_PERFMON), which below, running as root, has. */
static __u64 visit_cgroup SEC(".data.visit");

/* Every group of the record read by CO-RE (all but memory.stat's), of the
 * cgroup at `visit_cgroup`. A global function: the verifier checks it once,
 * not again for each caller and each step of the walk under RCU. */
__noinline int cgroup_bpf_fill_groups(struct cgroup_bpf_record *r) {
  struct cgroup *cgrp = (void *)visit_cgroup;

  if (!r)
    return 0;
  r->flags = 0;
  fill_tree(r, cgrp);
  fill_cpu(r, cgrp);
  fill_pids(r, cgrp);
  fill_cpuset(r, cgrp);
  fill_memcg(r, cgrp);
  return 0;
}

/* Every group of the record. Too big to clear whole: each CGB_HAS_* group is
 * written in full when its flag is set, and user space reads nothing else.
 * `css`: the cgroup's own (self) css, a pointer the kfuncs accept. */
static __always_inline void fill_record(struct cgroup_bpf_record *r,
                                        struct cgroup *cgrp,
                                        struct cgroup_subsys_state *css) {
  visit_cgroup = (__u64)cgrp;
  cgroup_bpf_fill_groups(r);
  if (have_memcg_kfuncs() && (r->flags & CGB_HAS_MEMCG)) {
    struct mem_cgroup *m = bpf_get_mem_cgroup(css);

    if (m) {
      fill_memstat(r, m);
      bpf_put_mem_cgroup(m);
    }
  }
}

/* Cgroups the walk under RCU's first step saw, and put in `walk_ids`.
 * Globals, not locals: the verifier tracks no values in map memory, so the
 * loop's steps look alike to it (a counter on the stack would make each
 * step a new state to explore). */
static __u32 walk_seen SEC(".data.work");
static __u32 walk_stored SEC(".data.work");

/* Whether this read of the iterator visited anything: its last call, with
 * nothing, comes with seq_num 0 both after a walk of one cgroup and after
 * none, so seq_num cannot tell an empty pass. */
static __u32 pass_began SEC(".data.work");

/* The walk under RCU's first step, short so that RCU's grace periods are
 * not held up (a write to cgroup.procs waits for one while it holds
 * cgroup_mutex): the live cgroups under `root`, in pre-order, into
 * `walk_ids`. */
static __always_inline void list_cgroups(struct cgroup *root) {
  struct bpf_iter_css___local it;
  struct cgroup_subsys_state *pos;

  walk_seen = walk_stored = 0;
  bpf_rcu_read_lock();
  bpf_iter_css_new(&it, &root->self, BPF_CGROUP_ITER_DESCENDANTS_PRE);
  while ((pos = bpf_iter_css_next(&it))) {
    __u32 n = walk_seen;
    __u64 *slot;

    /* Dead ones are skipped, as the cgroup iterator does. */
    if (!(pos->flags & CSS_ONLINE))
      continue;
    walk_seen = n + 1;
    slot = bpf_map_lookup_elem(&walk_ids, &n);
    if (!slot)
      continue;
    *slot = BPF_CORE_READ(pos, cgroup, kn, id);
    walk_stored++;
  }
  bpf_iter_css_destroy(&it);
  bpf_rcu_read_unlock();
}

/* fork-only { */
/* What the fork's pass does first, before the walk root's flush. */
#ifndef CGROUP_PASS_START
#define CGROUP_PASS_START()
#endif
/* } fork-only */

/* A pass program in both forms (see the top of this file): `name` and
 * `name##_rcu`. VISIT(cgrp, css) runs once per live cgroup, the walk root
 * first. VISIT is a function of its own (noinline): inlined into a loop,
 * clang hoists CO-RE values out of the checks that guard them (a poisoned
 * relocation of something this kernel lacks would then run).
 *
 * The walk under RCU lists the cgroups' ids first (list_cgroups), then
 * visits each by id holding a reference and RCU's read lock, with no
 * cgroup lock: a cgroup removed in between is left out, as by a reader
 * walking the directories. */
#define CGROUP_PASS(name, VISIT)                                               \
  SEC("iter.s/cgroup")                                                         \
  int name(struct bpf_iter__cgroup *ctx) {                                     \
    struct cgroup *cgrp = ctx->cgroup;                                         \
                                                                               \
    /* The last call; with no cgroup before it, the walk root is gone: an      \
     * empty pass. */                                                          \
    if (!cgrp) {                                                               \
      if (!pass_began)                                                         \
        pass.nr_cgroups = 0;                                                   \
      pass_began = 0;                                                          \
      return 0;                                                                \
    }                                                                          \
    if (ctx->meta->seq_num == 0) {                                             \
      pass_began = 1;                                                          \
      CGROUP_PASS_START(); /* fork-only */                                     \
      pass.nr_cgroups = 0;                                                     \
      flush_at_walk_root(cgrp);                                                \
    }                                                                          \
    VISIT(cgrp, &cgrp->self);                                                  \
    return 0;                                                                  \
  }                                                                            \
                                                                               \
  static long name##_visit_id(__u64 i, void *stored) {                         \
    __u32 k = i;                                                               \
    struct cgroup *cgrp;                                                       \
    __u64 *id;                                                                 \
                                                                               \
    id = bpf_map_lookup_elem(&walk_ids, &k);                                   \
    if (!id)                                                                   \
      return 1;                                                                \
    cgrp = bpf_cgroup_from_id(*id);                                            \
    if (!cgrp)                                                                 \
      return 0;                                                                \
    /* The reference keeps the cgroup, not its controllers' css: without       \
     * cgroup_mutex, one disabled meanwhile is freed after an RCU grace        \
     * period. */                                                              \
    bpf_rcu_read_lock();                                                       \
    VISIT(cgrp, &cgrp->self);                                                  \
    bpf_rcu_read_unlock();                                                     \
    bpf_cgroup_release(cgrp);                                                  \
    return 0;                                                                  \
  }                                                                            \
                                                                               \
  SEC("iter.s/task")                                                           \
  int name##_rcu(struct bpf_iter__task *ctx) {                                 \
    struct cgroup *root;                                                       \
                                                                               \
    /* The last call; with no task before it, the thread hosting the pass is   \
     * gone: an empty pass, not the last one's records again. */               \
    if (!ctx->task) {                                                          \
      if (!pass_began)                                                         \
        pass.nr_cgroups = 0;                                                   \
      pass_began = 0;                                                          \
      return 0;                                                                \
    }                                                                          \
    pass_began = 1;                                                            \
    CGROUP_PASS_START(); /* fork-only */                                       \
    pass.nr_cgroups = 0;                                                       \
    /* Removed since the load: an empty pass, as the iterator's. */            \
    root = bpf_cgroup_from_id(walk_root_id);                                   \
    if (!root)                                                                 \
      return 0;                                                                \
    flush_at_walk_root(root);                                                  \
    list_cgroups(root);                                                        \
    bpf_cgroup_release(root);                                                  \
    bpf_loop(walk_stored, name##_visit_id, NULL, 0);                           \
    /* More than the maps hold: user space grows them. */                      \
    if (walk_seen > walk_stored)                                               \
      pass.nr_cgroups = walk_seen;                                             \
    return 0;                                                                  \
  }

/* FULL: every group of every cgroup. */
static __noinline int visit_full(struct cgroup *cgrp,
                                 struct cgroup_subsys_state *css) {
  struct cgroup_bpf_record *r = next_record();

  if (r)
    fill_record(r, cgrp, css);
  return 0;
}

CGROUP_PASS(cgroup_stats, visit_full)
