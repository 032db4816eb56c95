// SPDX-License-Identifier: GPL-2.0
/*
 * How long tasks wait for contended mutexes, cgroup_mutex apart, and who
 * held the mutex when each wait began (its owner word names the task).
 * Every mkdir, rmdir and cgroup.procs write in cgroupfs takes
 * cgroup_mutex; a recorder that held it would show here as the holder of
 * the host's waits. Lock tracepoints only (BTF, no tracefs): kernels
 * without kprobes or BPF trampolines have them too. Tracing only:
 * nothing here changes what it sees.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "lock_wait.h"

char LICENSE[] SEC("license") = "GPL";

/* include/linux/sched.h and include/trace/events/lock.h: ABI-stable. */
#define PF_KTHREAD 0x00200000
#define LCB_F_MUTEX (1U << 5)
/* kernel/locking/mutex.c: the owner word's low bits are flags. */
#define MUTEX_FLAGS 0x07UL

/* The recorder's process (0: none) and &cgroup_mutex (0: unknown). */
const volatile __u32 recorder_tgid;
const volatile __u64 cgroup_mutex_addr;

struct wait_stats stats[NR_LOCKS][NR_HOLDERS];

struct waiter {
	__u64 start;
	enum lock_kind lock;
	enum holder holder;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct waiter);
} waiting SEC(".maps");

static enum holder holder_of(struct mutex *m)
{
	unsigned long word = BPF_CORE_READ(m, owner.counter);
	struct task_struct *owner = (struct task_struct *)(word & ~MUTEX_FLAGS);

	if (!owner)
		return HOLDER_OTHER;
	if (recorder_tgid && BPF_CORE_READ(owner, tgid) == recorder_tgid)
		return HOLDER_RECORDER;
	if (BPF_CORE_READ(owner, flags) & PF_KTHREAD)
		return HOLDER_KERNEL;
	return HOLDER_OTHER;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(contended, void *lock, unsigned int flags)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct waiter w = {};

	/* A mutex's slow path may begin twice (spinning, then sleeping):
	 * the wait runs from the first. */
	if (!(flags & LCB_F_MUTEX) || bpf_map_lookup_elem(&waiting, &tid))
		return 0;
	w.start = bpf_ktime_get_ns();
	w.lock = cgroup_mutex_addr && (__u64)lock == cgroup_mutex_addr ? LOCK_CGROUP_MUTEX
								      : LOCK_OTHER_MUTEX;
	w.holder = holder_of(lock);
	bpf_map_update_elem(&waiting, &tid, &w, BPF_NOEXIST);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(acquired, void *lock, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct waiter *w = bpf_map_lookup_elem(&waiting, &tid);
	struct wait_stats *s;
	__u64 ns, us, max;
	__u32 b = 0;

	if (!w)
		return 0;
	ns = bpf_ktime_get_ns() - w->start;
	if (w->lock >= NR_LOCKS || w->holder >= NR_HOLDERS)
		goto out;
	s = &stats[w->lock][w->holder];
	__sync_fetch_and_add(&s->waits, 1);
	__sync_fetch_and_add(&s->total_ns, ns);
	/* Racing updates may lose a larger maximum among concurrent waits:
	 * the max shown is then low by one of them, never high. */
	max = s->max_ns;
	if (ns > max)
		s->max_ns = ns;
	for (us = ns / 1000; us && b < WAIT_BUCKETS - 1; us >>= 1)
		b++;
	__sync_fetch_and_add(&s->buckets[b & (WAIT_BUCKETS - 1)], 1);
out:
	bpf_map_delete_elem(&waiting, &tid);
	return 0;
}
