/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The contract between the task iterator and user space: the records it
 * prints and the bits that give them meaning. Rust reads the structs and
 * enums as the skeleton's generated `types` (from this object's BTF), so
 * layouts, sizes and bit values are stated here only. Every field is
 * naturally aligned and every struct a multiple of 8 bytes: no packing
 * rules to agree on.
 *
 * One pass prints, in this order: a FACTS record, then per task (thread)
 * a THREAD record, and for a thread group leader also a PROC record
 * followed by `cmdline_len` bytes of its command line.
 */
#ifndef TASK_STATS_H
#define TASK_STATS_H

/* What fb_procfs reads of /proc/PID/cmdline: one read of 4096 bytes. */
#define CMDLINE_MAX 4096
/* pid namespace levels of NStgid carried; deeper ones read the file. */
#define NS_LEVELS 4

enum rec_kind {
	REC_FACTS = 1,
	REC_THREAD = 2,
	REC_PROC = 3,
};

/* The kernel facts beyond a sleepable task iterator that the program
 * reads through, checked by CO-RE each pass (facts.facts). */
enum task_fact {
	FACT_TASK_STATE = 1 << 0,     /* task_struct.__state */
	FACT_TASK_CPU = 1 << 1,       /* task_struct.thread_info.cpu */
	FACT_START_BOOTTIME = 1 << 2, /* task_struct.start_boottime */
	FACT_PREV_CPUTIME = 1 << 3,   /* signal_struct.prev_cputime */
	FACT_IOAC = 1 << 4,           /* task_struct.ioac (CONFIG_TASK_IO_ACCOUNTING) */
	FACT_RSS_PERCPU = 1 << 5,     /* mm_struct.rss_stat[] percpu_counter (6.2+) */
	FACT_RSS_ATOMIC = 1 << 6,     /* mm_struct.rss_stat.count[] (before 6.2) */
	FACT_PER_CPU_OFFSET = 1 << 7, /* per-CPU offsets found (struct bpf_array.pptrs) */
	FACT_HUGETLB = 1 << 8,        /* mm_struct.hugetlb_usage (CONFIG_HUGETLB_PAGE) */
	FACT_PINNED_VM = 1 << 9,      /* mm_struct.pinned_vm */
	FACT_PGTABLES = 1 << 10,      /* mm_struct.pgtables_bytes */
	FACT_KTHREAD_NAME = 1 << 11,  /* kthread.full_name via task_struct.worker_private */
	FACT_TGID_PID = 1 << 12,      /* signal_struct.pids[PIDTYPE_TGID] */
	FACT_WQ_WORKER = 1 << 13,     /* worker.desc, .current_work, .pool via kthread.data */
};

/* Per PROC record (proc.flags). */
enum proc_flags {
	/* The leader has an mm: memory fields and cmdline are set. */
	PROC_HAS_MM = 1 << 0,
	/* /proc's name for this kernel thread is not known here (a kernel
	 * without the facts below, or a worker whose comm may be cut): read
	 * it there. */
	PROC_COMM_PROC = 1 << 1,
	/* The command line could not be copied: read /proc/PID/cmdline. */
	PROC_CMDLINE_PROC = 1 << 2,
	/* setproctitle(3) overwrote the end of the arguments: /proc cuts the
	 * command line at the first NUL. */
	PROC_PROCTITLE = 1 << 3,
	/* More pid namespace levels than NS_LEVELS: read /proc/PID/status. */
	PROC_NS_DEEP = 1 << 4,
	/* The leader has an executable file: exe_ino/exe_dev are set. */
	PROC_HAS_EXE = 1 << 5,
	/* A kernel thread whose full name is longer than comm: /proc prints
	 * long_name. */
	PROC_FULL_NAME = 1 << 7,
	/* A workqueue worker with a description (long_name): /proc prints
	 * comm, then '+' while it runs a work item, else '-', then it. */
	PROC_WQ_BUSY = 1 << 8,
	PROC_WQ_IDLE = 1 << 9,
	/* The thread group is alive (pid_alive; lock_task_sighand works):
	 * ppid, pgrp and session are set, else /proc prints 0. */
	PROC_ALIVE = 1 << 6,
};

struct rec_head {
	__u16 kind; /* enum rec_kind */
	__u16 size; /* bytes of this record including what follows it */
	__s32 tgid;
};

struct facts_rec {
	struct rec_head head;
	__u32 facts; /* enum task_fact bits */
	__u32 nr_cpus;
};

/* What one thread adds to its group's totals. */
struct thread_rec {
	struct rec_head head;
	struct task_usage usage;
};

/* The leader's and its signal_struct's view; cmdline bytes follow. */
struct proc_rec {
	struct rec_head head;
	__u32 flags; /* enum proc_flags bits */
	__u32 state;      /* task_struct.__state */
	__u32 exit_state; /* task_struct.exit_state */
	__s32 ppid;
	__s32 pgrp;
	__s32 sid;
	__s32 cpu;
	__u32 nr_threads;
	__u32 ns_levels; /* pid->level + 1 */
	__u32 ns_tgid[NS_LEVELS];
	__u32 cmdline_len;
	/* Totals of the threads already gone (signal_struct). */
	struct task_usage gone;
	/* cputime_adjust()'s state (signal_struct.prev_cputime), ns. */
	__u64 prev_utime_ns;
	__u64 prev_stime_ns;
	__u64 start_boottime_ns;
	__u64 cgroup_id; /* the default hierarchy's cgroup (kernfs id) */
	/* mm_struct, in pages unless said otherwise */
	__u64 total_vm;
	__u64 locked_vm;
	__u64 pinned_vm;
	__u64 pgtables_bytes;
	__u64 hugetlb_pages;
	/* mm counters (pages): the central count, which /proc/PID/stat's rss
	 * reads, and the exact sum with the per-CPU deltas, which
	 * /proc/PID/status reads (the same before 6.2: one atomic each). */
	__s64 count_file;
	__s64 count_anon;
	__s64 count_shmem;
	__s64 sum_file;
	__s64 sum_anon;
	__s64 sum_shmem;
	__s64 sum_swap;
	__u64 exe_ino;
	__u64 exe_dev;
	char comm[16];
	char long_name[64];
};

#endif
