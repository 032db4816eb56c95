// SPDX-License-Identifier: GPL-2.0
/*
 * The fork's program: cgroup_bpf.bpf.c, the program below main carries,
 * plus pressure (cgroup_psi.bpf.c), memory.numa_stat (cgroup_numa.bpf.c),
 * the cgroups' names (cgroup_name.h) and the pass modes of cgroup_rank.h,
 * so a sample ranked by a value the record holds reads the rest of the record
 * only for the cgroups it keeps. The loader loads one form of its pass,
 * `bstats` (one verification); all share the maps and globals of
 * cgroup_stats.
 */
/* Before each pass (both forms): what the parts below report of it
 * starts anew. */
static void start_bstats(void);
#define CGROUP_PASS_START() start_bstats()

#include "cgroup_bpf.bpf.c"
#include "cgroup_psi.bpf.c"
#include "cgroup_numa.bpf.c"
#include "cgroup_name.h"
#include "cgroup_rank.h"

/* Per record slot, the id of the cgroup user space wants in full there (0:
 * none); sized like `records` by the loader, written once per sample. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, 1);
} wanted SEC(".maps");

/* Per record slot, the name of the cgroup of the slot's record (see
 * cgroup_name.h); sized like `records` by the loader. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct cgroup_name);
  __uint(max_entries, 1);
} names SEC(".maps");

/* A section of their own, so .bss stays cgroup_stats's. PASS_* and the
 * CGB_HAS_* groups of a RANK pass: set by user space before each pass. */
__u32 pass_mode SEC(".data.rank");
__u32 rank_groups SEC(".data.rank");
/* Set by a WANTED pass that found another cgroup in a wanted slot than
 * the RANK pass did (the tree changed between them). */
__u32 moved SEC(".data.rank");

/* The ranked value only (RANK pass) of the cgroup at `visit_cgroup`: no
 * other field of the group. Global: checked once (see cgroup_bpf_fill_groups).
 */
__noinline int fill_rank(struct cgroup_bpf_record *r, __u32 idx) {
  struct cgroup *cgrp = (void *)visit_cgroup;
  struct mem_cgroup___local *memcg;

  if (!r)
    return 0;

  if (rank_groups & CGB_HAS_BSTAT) {
    r->usage_ns = BPF_CORE_READ(cgrp, bstat.cputime.sum_exec_runtime);
    r->flags |= CGB_HAS_BSTAT;
  }
  memcg = OWN_CSS(cgrp, memory);
  if ((rank_groups & CGB_HAS_MEMCG) && memcg) {
    r->mem_usage = USAGE(memcg, memory);
    r->flags |= CGB_HAS_MEMCG;
  }
  if (rank_groups & HAS_PSI)
    fill_pressure(r, idx);
  return 0;
}

/* Before fill_place() writes `id` into record `r` at `idx`: the cgroup's
 * name where the slot held another cgroup (cgroup2 has no rename, so a
 * slot keeping its id keeps its name). */
static __always_inline void note_name(struct cgroup_bpf_record *r, __u32 idx,
                                      struct cgroup *cgrp, __u64 id) {
  struct cgroup_name *n;

  if (r->id == id)
    return;
  n = bpf_map_lookup_elem(&names, &idx);
  if (n)
    bpf_probe_read_kernel_str(n->name, sizeof(n->name),
                              BPF_CORE_READ(cgrp, kn, name));
}

/* Every group of the record, its name, pressure and memory.numa_stat. */
static __always_inline void fill_all(struct cgroup_bpf_record *r, __u32 idx,
                                     struct cgroup *cgrp,
                                     struct cgroup_subsys_state *css,
                                     __u64 id) {
  note_name(r, idx, cgrp, id);
  fill_record(r, cgrp, css);
  fill_pressure(r, idx);
  fill_numa(r, idx);
}

static __always_inline void start_bstats(void) {
  moved = 0;
  start_pressure();
  start_numa();
}

/* One cgroup in the pass mode. */
static __noinline int visit_bstats(struct cgroup *cgrp,
                                   struct cgroup_subsys_state *css) {
  struct cgroup_bpf_record *r;
  __u64 id, *w;
  bool want;
  __u32 idx = pass.nr_cgroups; /* next_record()'s */

  r = next_record();
  if (!r)
    return 0;
  id = BPF_CORE_READ(cgrp, kn, id);
  if (pass_mode == PASS_FULL) {
    fill_all(r, idx, cgrp, css, id);
    return 0;
  }
  w = bpf_map_lookup_elem(&wanted, &idx);
  want = w && *w == id;
  if (pass_mode == PASS_WANTED) {
    if (w && *w && !want)
      moved = 1;
    if (want)
      fill_all(r, idx, cgrp, css, id);
    return 0;
  }
  if (want) {
    fill_all(r, idx, cgrp, css, id);
    return 0;
  }
  r->flags = 0;
  /* cgroup2 has no rename or move: user space knows the rest. */
  if (r->id != id) {
    note_name(r, idx, cgrp, id);
    fill_place(r, cgrp);
  }
  visit_cgroup = (__u64)cgrp;
  fill_rank(r, idx);
  return 0;
}

CGROUP_PASS(bstats, visit_bstats)
