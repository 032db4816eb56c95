// SPDX-License-Identifier: GPL-2.0
/*
 * The fork's memory.numa_stat (cgroup_numa.h), included by bstats.bpf.c
 * after cgroup_bpf.bpf.c, whose scratch space, `visit_cgroup` and memcg
 * checks it uses: memcg->nodeinfo[nid]->lruvec_stats->state[] as
 * memory_numa_stat_show() reads it, after the flush at the walk root.
 */
#include "cgroup_numa.h"

#define NUMA_COUNT_FLAG(name) +1
_Static_assert(0 CGB_HAS_FLAGS(NUMA_COUNT_FLAG) <= HAS_PSI_BIT &&
                   HAS_PSI_QUEUED_BIT < HAS_NUMA_BIT,
               "record flags overlap");

/* `numa_node_ids` rows per record slot: sized by the loader, 1 entry when
 * memory.numa_stat is not served. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct numa_row);
  __uint(max_entries, 1);
} numa SEC(".maps");

/* Node ids memory.numa_stat reads (0: not served) and where each of its
 * items sits in lruvec_stats.state[]; the loader checked the layout. */
const volatile __u32 numa_node_ids SEC(".rodata.numa");
const volatile __u32 numa_idx[NR_NUMA_STATS] SEC(".rodata.numa");

/* node_states[N_MEMORY] (first word) at the last pass, the nodes the file
 * prints; numa_read: whether the pass read numa_stat at all. */
__u64 memory_nodes SEC(".data.numa");
__u32 numa_read SEC(".data.numa");

/* Not in BTF (only per-CPU variables are): resolved from kallsyms. */
extern const void node_states __ksym __weak;

struct mem_cgroup___numa {
  struct mem_cgroup_per_node *nodeinfo[0];
} __attribute__((preserve_access_index));

/* A pointer since 6.10: the lruvec_stats older kernels embed does not
 * match it. */
struct mem_cgroup_per_node___numa {
  struct lruvec_stats *lruvec_stats;
} __attribute__((preserve_access_index));

struct lruvec_stats___numa {
  long state[1];
} __attribute__((preserve_access_index));

enum node_states___numa { N_MEMORY___numa };

/* Once per pass, before the walk: the nodes the file prints, where this
 * kernel has all the program reads (and the memcg flush, which the
 * per-node counters need). */
static __always_inline void start_numa(void) {
  numa_read = 0;
  memory_nodes = 0;
  if (!numa_node_ids || !have_memcg_kfuncs() ||
      !bpf_ksym_exists(&node_states) ||
      !bpf_core_enum_value_exists(enum node_states___numa, N_MEMORY___numa) ||
      !bpf_core_field_exists(struct mem_cgroup___numa, nodeinfo) ||
      !bpf_core_field_exists(struct mem_cgroup_per_node___numa, lruvec_stats) ||
      !bpf_core_field_exists(struct lruvec_stats___numa, state))
    return;
  bpf_probe_read_kernel(
      &memory_nodes, sizeof(memory_nodes),
      &node_states +
          bpf_core_enum_value(enum node_states___numa, N_MEMORY___numa) *
              bpf_core_type_size(nodemask_t));
  numa_read = 1;
}

/* The rows of the cgroup at `visit_cgroup` (record `r` at `idx`), clamped
 * like lruvec_page_state(). Global: checked once. */
__noinline int fill_numa(struct cgroup_bpf_record *r, __u32 idx) {
  struct cgroup *cgrp = (void *)visit_cgroup;
  struct mem_cgroup___numa *memcg;
  __u32 nodeinfo, state, n;

  if (!r || !numa_read)
    return 0;
  memcg = OWN_CSS(cgrp, memory);
  if (!memcg)
    return 0;
  nodeinfo = bpf_core_field_offset(struct mem_cgroup___numa, nodeinfo);
  state = bpf_core_field_offset(struct lruvec_stats___numa, state);
  for (__u32 nid = 0; nid < NUMA_NODES; nid++) {
    struct mem_cgroup_per_node___numa *pn = 0;
    __u32 row = idx * numa_node_ids + nid;
    struct numa_row *dst;
    void *stats;

    if (nid >= numa_node_ids || !(memory_nodes & (1ULL << nid)))
      continue;
    /* Sized with the records: absent only if the loader erred. */
    dst = bpf_map_lookup_elem(&numa, &row);
    if (!dst)
      return 0;
    bpf_probe_read_kernel(&pn, sizeof(pn),
                          (void *)memcg + nodeinfo + nid * sizeof(pn));
    stats = BPF_CORE_READ(pn, lruvec_stats);
    if (!stats)
      return 0;
    n = READ_ARRAY(stats + state, struct lruvec_stats___numa, state);
    for (__u32 i = 0; i < NR_NUMA_STATS; i++) {
      __u32 k = numa_idx[i];
      long v = 0;

      if (k < n)
        v = scratch[k & (SCRATCH_LONGS - 1)];
      else if (k != NUMA_NO_IDX) /* past what scratch holds */
        bpf_probe_read_kernel(&v, sizeof(v), stats + state + k * sizeof(v));
      dst->v[i] = v < 0 ? 0 : v;
    }
  }
  r->flags |= HAS_NUMA;
  return 0;
}
