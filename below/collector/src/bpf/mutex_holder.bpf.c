// SPDX-License-Identifier: GPL-2.0
/*
 * Tests only (walk_test.rs): a cgroup iterator holds cgroup_mutex while it
 * runs, as every one does; this one runs until user space sets `released`
 * or `deadline_ns` has passed, saying which.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 deadline_ns = 10000000000ULL;
/* 1 from the first cgroup on until the program ends. */
__u32 holding;
/* Set by user space. */
__u32 released;
/* The deadline ended it, not `released`. */
__u32 timed_out;

/* Until released or past the deadline; false to stop. */
static __always_inline bool keep_holding(__u64 end) {
  if (*(volatile __u32 *)&released)
    return false;
  if (bpf_ktime_get_ns() > end) {
    timed_out = 1;
    return false;
  }
  return true;
}

SEC("iter.s/cgroup")
int hold(struct bpf_iter__cgroup *ctx) {
  bool go = true;
  __u64 end;
  int i, j;

  if (!ctx->cgroup)
    return 0;
  end = bpf_ktime_get_ns() + deadline_ns;
  /* volatile: the store must happen before the loop, not be merged
   * with the one after it. */
  *(volatile __u32 *)&holding = 1;
  /* A numeric iterator runs at most 2^23 times: one inside another. */
  bpf_for(j, 0, 1 << 23) {
    bpf_for(i, 0, 1 << 23) {
      go = keep_holding(end);
      if (!go)
        break;
    }
    if (!go)
      break;
  }
  *(volatile __u32 *)&holding = 0;
  return 0;
}
