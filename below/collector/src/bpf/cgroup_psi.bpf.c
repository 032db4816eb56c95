// SPDX-License-Identifier: GPL-2.0
/*
 * The fork's pressure (cgroup_psi.h), included by bstats.bpf.c after
 * cgroup_bpf.bpf.c, whose scratch space and `visit_cgroup` it uses:
 * the pressure files as a read would print them at the pass, which needs
 * the scheduler's clocks (kallsyms symbols) and, for a group whose
 * aggregation worker is queued, a sum over the CPUs' buckets.
 */
#include "cgroup_psi.h"

/* A row per record slot (struct pressure); sized like `records` by the
 * loader. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct pressure);
  __uint(max_entries, 1);
} pressure SEC(".maps");

#define PSI_COUNT_FLAG(name) +1
_Static_assert(0 CGB_HAS_FLAGS(PSI_COUNT_FLAG) <= HAS_PSI_BIT,
               "cgroup_bpf_record.h's CGB_HAS_FLAGS reach the pressure bits");

/* psi_group.total is [aggregator][state], avg is [state][3] and
 * psi_group_cpu.times_prev is [aggregator][state]. Older pahole flattens
 * multi-dimensional arrays in the kernel's BTF (Debian 6.12, 7.3), newer
 * keeps them nested (Debian sid's 7.2); CO-RE matches a field only with
 * its own shape, so one flavor each and the kernel's picks the field
 * address. The state count varies by config: PSI_ROW() offsets by bytes
 * with the running kernel's state values. */
struct psi_group___local {
  bool enabled;
  struct delayed_work avgs_work;
  void *pcpu;
  __u64 avg_total[1];
  __u64 avg_last_update;
  __u64 avg_next_update;
} __attribute__((preserve_access_index));

struct psi_group___flat {
  __u64 total[1];
  unsigned long avg[1];
} __attribute__((preserve_access_index));

struct psi_group___nested {
  __u64 total[1][1];
  unsigned long avg[1][3];
} __attribute__((preserve_access_index));

struct psi_group_cpu___local {
  __u32 state_mask;
  __u32 times[1];
  __u64 state_start;
} __attribute__((preserve_access_index));

struct psi_group_cpu___flat {
  __u32 times_prev[1];
} __attribute__((preserve_access_index));

struct psi_group_cpu___nested {
  __u32 times_prev[1][1];
} __attribute__((preserve_access_index));

#define PSI_SHAPE_KNOWN(type, field)                                           \
  (bpf_core_field_exists(struct type##___flat, field) ||                       \
   bpf_core_field_exists(struct type##___nested, field))

/* The address of psi->field in the kernel's shape; NULL where neither fits. */
#define PSI_FIELD(psi, field)                                                  \
  (bpf_core_field_exists(((struct psi_group___flat *)(psi))->field)            \
       ? (void *)&((struct psi_group___flat *)(psi))->field                    \
   : bpf_core_field_exists(((struct psi_group___nested *)(psi))->field)        \
       ? (void *)&((struct psi_group___nested *)(psi))->field                  \
       : NULL)

#define PSI_STATE(row, state) state##___local,
enum psi_states___local { PSI_ROWS(PSI_STATE) PSI_NONIDLE___local };

#define PSI_STATE_OF(state)                                                    \
  bpf_core_enum_value(enum psi_states___local, state##___local)
#define PSI_ROW(row, state)                                                    \
  do {                                                                         \
    int s = PSI_STATE_OF(state);                                               \
    bpf_core_read(&p->total_ns[PSI_ROW_##row], 8, total + 8 * s);              \
    bpf_core_read(&p->avg[PSI_ROW_##row], 24, avg + 24 * s);                   \
    bpf_core_read(&p->avg_total_ns[PSI_ROW_##row], 8, avg_total + 8 * s);      \
  } while (0);
#define PSI_IN_ORDER(row, state) &&PSI_STATE_OF(state) == PSI_ROW_##row

/* Not in BTF (only per-CPU variables are, and a typed per-CPU ksym needs
 * its address from the kernel's kallsyms, which would fail the load
 * without CONFIG_KALLSYMS_ALL): resolved by libbpf, absent ones 0. */
extern const void psi_period __ksym __weak;
extern const void runqueues __ksym __weak;
extern const void __per_cpu_offset __ksym __weak;
/* CONFIG_HAVE_UNSTABLE_SCHED_CLOCK (x86) only. */
extern const void __sched_clock_offset __ksym __weak;
extern const void __sched_clock_stable __ksym __weak;
extern const void sched_clock_data __ksym __weak;

/* nr_cpu_ids: the per-CPU pressure buckets summed. */
const volatile __u32 nr_cpus SEC(".rodata.psi") = 1;

/* The pass's clocks for pressure (FEAT_PSI_CLOCK): sched_clock(), which
 * the averages' update times are in, and cpu_clock(), which the per-CPU
 * buckets are in; the kernel's psi_period and jiffy, both in ns. A section
 * of their own, so .bss stays cgroup_stats's. */
__u64 psi_now SEC(".data.psi");
__u64 psi_cpu_now SEC(".data.psi");
__u64 psi_period_ns SEC(".data.psi");
__u64 psi_tick_ns SEC(".data.psi");
/* PSI_FEAT_FLAGS bits, and PSI_NO_* (0: the pass has its clock). */
__u32 psi_features SEC(".data.psi");
__u32 psi_no_clock SEC(".data.psi");

/* __per_cpu_offset[] of the first CPUs, read once per pass: the per-CPU
 * pressure buckets of every cgroup are found with it. */
#define CPU_OFFSETS (CGB_CPU_WORDS * 64)
__u64 cpu_offsets[CPU_OFFSETS] SEC(".data.psi");

static __always_inline __u64 per_cpu_offset(__u32 cpu) {
  __u64 off = 0;

  /* The verifier needs the mask; clang would drop it after the test. */
  if (cpu < CPU_OFFSETS) {
    barrier_var(cpu);
    return cpu_offsets[cpu & (CPU_OFFSETS - 1)];
  }
  bpf_probe_read_kernel(&off, sizeof(off),
                        (void *)&__per_cpu_offset + cpu * sizeof(off));
  return off;
}

/* The clocks a read of a pressure file would take now: cpu_clock() is
 * this CPU's rq->clock (set at every tick and switch: at most a tick
 * old); sched_clock() is it less __sched_clock_offset while the clock is
 * stable, else the last tick's sched_clock() plus the ktime since (the
 * kernel's own pair); on arches without an unstable sched clock the two
 * are one. Nothing here when a symbol is missing or HZ does not divide
 * 10^6 (jiffies would not be exact): FEAT_PSI_CLOCK stays off, and
 * `psi_no_clock` says why. */
static __always_inline __u32 psi_clock(void) {
  __u32 n = nr_cpus < CPU_OFFSETS ? nr_cpus : CPU_OFFSETS;
  __u64 off, stable = 0, v = 0;
  struct sched_clock_data *scd;

  psi_now = psi_cpu_now = psi_period_ns = psi_tick_ns = 0;
  if (!bpf_ksym_exists(&psi_period) || !bpf_ksym_exists(&runqueues) ||
      !bpf_ksym_exists(&__per_cpu_offset))
    return PSI_NO_SYMBOLS;
  bpf_probe_read_kernel(cpu_offsets, n * sizeof(cpu_offsets[0]),
                        &__per_cpu_offset);
  off = per_cpu_offset(bpf_get_smp_processor_id());
  bpf_probe_read_kernel(&psi_period_ns, sizeof(psi_period_ns), &psi_period);
  /* psi_period = jiffies_to_nsecs(2 * HZ + 1) = 2 s + one jiffy when
   * HZ divides 10^6; nsecs_to_jiffies() is then a division by it. */
  psi_tick_ns = psi_period_ns - 2000000000ULL;
  if (psi_period_ns <= 2000000000ULL || 1000000000ULL % psi_tick_ns ||
      1000000ULL % (1000000000ULL / psi_tick_ns))
    return PSI_ODD_HZ;
  bpf_probe_read_kernel(&psi_cpu_now, sizeof(psi_cpu_now),
                        (void *)&runqueues + off +
                            bpf_core_field_offset(struct rq, clock));
  if (!bpf_ksym_exists(&__sched_clock_offset)) {
    psi_now = psi_cpu_now;
    return psi_now ? 0 : PSI_NO_RQ_CLOCK;
  }
  if (!bpf_ksym_exists(&__sched_clock_stable) ||
      !bpf_ksym_exists(&sched_clock_data))
    return PSI_NO_SYMBOLS;
  bpf_probe_read_kernel(&stable, sizeof(int), &__sched_clock_stable);
  if ((int)stable > 0) {
    bpf_probe_read_kernel(&v, sizeof(v), &__sched_clock_offset);
    psi_now = psi_cpu_now - v;
  } else {
    scd = (void *)&sched_clock_data + off;
    psi_now = BPF_CORE_READ(scd, tick_raw) + bpf_ktime_get_ns() -
              BPF_CORE_READ(scd, tick_gtod);
  }
  return psi_cpu_now ? 0 : PSI_NO_RQ_CLOCK;
}

/* What collect_percpu_times() sums over the CPUs before a read of the
 * file adds it to total[PSI_AVGS]: per CPU, each state's time since the
 * aggregator's last look (an active state's up to now), weighted by the
 * CPU's non-idle jiffies. */
struct psi_collect {
  void *pcpu;
  __u64 deltas[NR_PSI_ROWS];
  __u64 nonidle_total;
};

/* Scratch bytes (see `scratch`): a psi_group_cpu is read whole. */
#define SCRATCH_U32(off)                                                       \
  (*(__u32 *)((void *)scratch + ((off) & (SCRATCH_LONGS * 8 - 4))))
#define SCRATCH_U64(off)                                                       \
  (*(__u64 *)((void *)scratch + ((off) & (SCRATCH_LONGS * 8 - 8))))

/* A bucket's time since the aggregator's last look. That look took the
 * CPU's own clock, which may be ahead of `psi_cpu_now` (this CPU's
 * rq->clock, up to a tick old): time it counted past our clock is not yet
 * ours, 0, not the u32 wrap (~4.29 s) the kernel's subtraction would give.
 * Its own deltas stay below 2^32 ns; one that close to it is that wrap. */
#define PSI_CLOCK_SKEW_NS 1000000000U
static __always_inline __u32 psi_since(__u32 t, __u32 prev) {
  __u32 d = t - prev;

  return d > (__u32)-PSI_CLOCK_SKEW_NS ? 0 : d;
}

#define PSI_CPU_ROW(row, state)                                                \
  {                                                                            \
    __u32 s = PSI_STATE_OF(state);                                             \
    __u32 t = SCRATCH_U32(times + 4 * s);                                      \
    if (mask & (1U << s))                                                      \
      t += running;                                                            \
    c->deltas[PSI_ROW_##row] +=                                                \
        (__u64)psi_since(t, SCRATCH_U32(prev + 4 * s)) * nonidle;              \
  }

static long psi_collect_cpu(__u64 cpu, void *data) {
  struct psi_collect *c = data;
  __u32 size = bpf_core_type_size(struct psi_group_cpu___local);
  __u32 times = bpf_core_field_offset(struct psi_group_cpu___local, times);
  __u32 prev =
      bpf_core_field_exists(struct psi_group_cpu___flat, times_prev)
          ? bpf_core_field_offset(struct psi_group_cpu___flat, times_prev)
          : bpf_core_field_offset(struct psi_group_cpu___nested, times_prev);
  __u32 nonidle_state = PSI_STATE_OF(PSI_NONIDLE), mask, running = 0, t;
  void *groupc = c->pcpu + per_cpu_offset(cpu);
  __u64 start, nonidle;

  if (size > sizeof(scratch))
    size = sizeof(scratch);
  if (bpf_probe_read_kernel(scratch, size, groupc))
    return 1;
  mask = SCRATCH_U32(
      bpf_core_field_offset(struct psi_group_cpu___local, state_mask));
  start = SCRATCH_U64(
      bpf_core_field_offset(struct psi_group_cpu___local, state_start));
  /* A state that began after this CPU's clock was read has run 0 ns. */
  if (psi_cpu_now > start)
    running = psi_cpu_now - start;
  t = SCRATCH_U32(times + 4 * nonidle_state);
  if (mask & (1U << nonidle_state))
    t += running;
  nonidle = psi_since(t, SCRATCH_U32(prev + 4 * nonidle_state)) / psi_tick_ns;
  c->nonidle_total += nonidle;
  PSI_ROWS(PSI_CPU_ROW)
  return 0;
}

/* The pressure of the cgroup at `visit_cgroup` into its row of map
 * `pressure`, at the record's index. Global: checked once. */
__noinline int fill_pressure(struct cgroup_bpf_record *r, __u32 idx) {
  struct cgroup *cgrp = (void *)visit_cgroup;
  struct psi_group___local *psi;
  struct psi_collect c = {};
  void *total, *avg, *avg_total;
  struct pressure *p;

  p = bpf_map_lookup_elem(&pressure, &idx);
  if (!r || !p || !(psi_features & FEAT_PSI))
    return 0;
  psi = (struct psi_group___local *)BPF_CORE_READ(cgrp, psi);
  if (!psi || !BPF_CORE_READ(psi, enabled))
    return 0;
  total = PSI_FIELD(psi, total);
  avg = PSI_FIELD(psi, avg);
  avg_total = __builtin_preserve_access_index(&psi->avg_total);
  if (!total || !avg)
    return 0;
  r->flags |= HAS_PSI;
  /* Our rows in the kernel's state order (every kernel so far): the
   * first row of each array in one read, not one per row. */
  if (1 PSI_ROWS(PSI_IN_ORDER)) {
    bpf_core_read(p->total_ns, sizeof(p->total_ns), total);
    bpf_core_read(p->avg, sizeof(p->avg), avg);
    bpf_core_read(p->avg_total_ns, sizeof(p->avg_total_ns), avg_total);
  } else {
    PSI_ROWS(PSI_ROW)
  }
  p->avg_last_update = BPF_CORE_READ(psi, avg_last_update);
  p->avg_next_update = BPF_CORE_READ(psi, avg_next_update);
  /* A task's pressure state changing anywhere in the group queues the
   * kernel's aggregation worker unless it is queued, and the worker
   * queues itself again while any CPU saw the group non-idle. Not
   * queued: every CPU's bucket is idle and folded into total already,
   * which is what a read of the file shows. Most groups of a big host
   * are idle: their per-CPU sum, the part of the pass that grows with
   * the CPUs, is skipped; without the clock, user space serves them
   * (HAS_PSI_QUEUED unset) where their averages need no clock either. */
  if (!(BPF_CORE_READ(psi, avgs_work.work.data.counter) & WORK_STRUCT_PENDING))
    return 0;
  r->flags |= HAS_PSI_QUEUED;
  if (!(psi_features & FEAT_PSI_CLOCK))
    return 0;
  c.pcpu = BPF_CORE_READ(psi, pcpu);
  bpf_loop(nr_cpus, psi_collect_cpu, &c, 0);
  if (c.nonidle_total == 0)
    c.nonidle_total = 1;
  for (int i = 0; i < NR_PSI_ROWS; i++)
    p->total_ns[i] += c.deltas[i] / c.nonidle_total;
  return 0;
}

/* Once per pass, before the walk: what this kernel lets pressure do, and
 * the pass's clock. */
static __always_inline void start_pressure(void) {
  psi_features = 0;
  if (!bpf_core_field_exists(struct cgroup, psi) ||
      !PSI_SHAPE_KNOWN(psi_group, total) || !PSI_SHAPE_KNOWN(psi_group, avg))
    return;
  psi_features |= FEAT_PSI;
  psi_no_clock =
      PSI_SHAPE_KNOWN(psi_group_cpu, times_prev) ? psi_clock() : PSI_CPU_LAYOUT;
  if (!psi_no_clock)
    psi_features |= FEAT_PSI_CLOCK;
}
