/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The contract between lock_wait.bpf.c and cgroup-lock-wait: the waits
 * for contended mutexes, by which mutex and by who held it when the wait
 * began. Rust reads these as the skeleton's generated types.
 */
#ifndef LOCK_WAIT_H
#define LOCK_WAIT_H

/* Log2 buckets of a wait in microseconds: [0] < 1 us, [n] < 2^n us. */
#define WAIT_BUCKETS 32

enum lock_kind {
	/* cgroup_mutex (its address given by user space from kallsyms). */
	LOCK_CGROUP_MUTEX = 0,
	/* Any other mutex (all of them when cgroup_mutex's address is unknown). */
	LOCK_OTHER_MUTEX = 1,
	NR_LOCKS = 2,
};

enum holder {
	/* A thread of the process user space named (recorder_tgid). */
	HOLDER_RECORDER = 0,
	/* A kernel thread: cgroup release and offline workers and the like. */
	HOLDER_KERNEL = 1,
	/* Any other task, or none (released as the wait began). */
	HOLDER_OTHER = 2,
	NR_HOLDERS = 3,
};

struct wait_stats {
	__u64 waits;
	__u64 total_ns;
	__u64 max_ns;
	__u64 buckets[WAIT_BUCKETS];
};

#endif
