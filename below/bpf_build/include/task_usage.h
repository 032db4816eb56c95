/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a task has used, as /proc/PID/{stat,io} count it, for every program
 * of ours that reports processes (the task iterator, the exit program):
 * one struct, so the records embed it and each skeleton's Rust twin has
 * the same fields, and one way of reading it. Include after vmlinux.h and
 * bpf_core_read.h.
 */
#ifndef TASK_USAGE_H
#define TASK_USAGE_H

struct task_usage {
	/* The tick-sampled user/system split and the exact runtime (ns);
	 * user space scales the split to the runtime as cputime_adjust()
	 * does. */
	__u64 utime_ns;
	__u64 stime_ns;
	__u64 runtime_ns;
	__u64 min_flt;
	__u64 maj_flt;
	/* 0 without CONFIG_TASK_IO_ACCOUNTING (no ioac member). */
	__u64 read_bytes;
	__u64 write_bytes;
};

/* Adds what thread `t` has used itself (not yet folded into its
 * signal_struct). */
static __always_inline void task_usage_add(struct task_usage *u, struct task_struct *t)
{
	u->utime_ns += BPF_CORE_READ(t, utime);
	u->stime_ns += BPF_CORE_READ(t, stime);
	u->runtime_ns += BPF_CORE_READ(t, se.sum_exec_runtime);
	u->min_flt += BPF_CORE_READ(t, min_flt);
	u->maj_flt += BPF_CORE_READ(t, maj_flt);
	if (bpf_core_field_exists(t->ioac.read_bytes)) {
		u->read_bytes += BPF_CORE_READ(t, ioac.read_bytes);
		u->write_bytes += BPF_CORE_READ(t, ioac.write_bytes);
	}
}

/* Adds the totals of a thread group's threads already gone. */
static __always_inline void task_usage_add_gone(struct task_usage *u, struct signal_struct *sig)
{
	u->utime_ns += BPF_CORE_READ(sig, utime);
	u->stime_ns += BPF_CORE_READ(sig, stime);
	u->runtime_ns += BPF_CORE_READ(sig, sum_sched_runtime);
	u->min_flt += BPF_CORE_READ(sig, min_flt);
	u->maj_flt += BPF_CORE_READ(sig, maj_flt);
	if (bpf_core_field_exists(sig->ioac.read_bytes)) {
		u->read_bytes += BPF_CORE_READ(sig, ioac.read_bytes);
		u->write_bytes += BPF_CORE_READ(sig, ioac.write_bytes);
	}
}

#endif
