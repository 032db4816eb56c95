// SPDX-License-Identifier: GPL-2.0
/*
 * One pass over every task per sample: a sleepable task iterator prints
 * fixed-size records (task_stats.h) with what /proc/PID/{stat,status,io,
 * cgroup,cmdline} would print, as numbers, into the iterator's seq_file;
 * user space reads them with read(2) and sums each thread group as the
 * kernel does for /proc/PID/stat. Sleepable because the command line is
 * copied from the process's memory (bpf_copy_from_user_task may fault).
 *
 * Every kernel member beyond the task iterator itself is read through
 * CO-RE behind a field-exists check and reported as a fact (enum
 * task_fact) in the pass's first record: user space decides what it can
 * serve from those, never from a version number.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "task_usage.h"
#include "task_stats.h"

char LICENSE[] SEC("license") = "GPL";

/* include/linux/sched.h; ABI-stable flag values. */
#define PF_WQ_WORKER 0x00000020
#define PF_KTHREAD 0x00200000

/* CPUs whose per-CPU offsets one pass finds (larger machines: no
 * FACT_PER_CPU_OFFSET). */
#define MAX_CPUS 1024

/* Each possible CPU's per-CPU offset (__per_cpu_offset[], which is not in
 * BTF and in kallsyms only with CONFIG_KALLSYMS_ALL), found each pass
 * through our own per-CPU map: its element's address on a CPU less the
 * per-CPU pointer the map keeps. nr_cpus: how many CPUs have one. */
__u64 cpu_offsets[MAX_CPUS];
static __u32 nr_cpus;

/* Before 6.2 each mm counter was one atomic. */
struct mm_rss_stat___old {
	atomic_long_t count[4];
} __attribute__((preserve_access_index));

struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
} __attribute__((preserve_access_index));

/* The PROC record and the command line after it, printed with one write. */
struct proc_buf {
	struct proc_rec r;
	char cmdline[CMDLINE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct proc_buf);
	__uint(max_entries, 1);
} scratch SEC(".maps");

/* cpu as an index into cpu_offsets[]: the mask keeps the verifier's bound
 * (it loses it on a copy of cpu; barrier_var keeps clang from dropping
 * the mask after a range check). */
static __always_inline __u32 cpu_slot(__u32 cpu)
{
	barrier_var(cpu);
	return cpu & (MAX_CPUS - 1);
}

static long find_offset(__u32 cpu, void *base)
{
	__u32 key = 0;
	void *p = bpf_map_lookup_percpu_elem(&scratch, &key, cpu);
	__u64 addr = 0;

	if (!p || cpu >= MAX_CPUS)
		return 1;
	/* The pointer's value as a number (pointer arithmetic on it is
	 * refused): read from the stack slot holding it. */
	bpf_probe_read_kernel(&addr, sizeof(addr), &p);
	cpu_offsets[cpu_slot(cpu)] = addr - *(__u64 *)base;
	nr_cpus = cpu + 1;
	return 0;
}

/* Fills cpu_offsets[] and nr_cpus; false when the map's layout is not
 * the one known (struct bpf_array's pptrs[]). */
static __always_inline bool find_offsets(void)
{
	struct bpf_array *arr = 0;
	void *map = &scratch;
	__u64 base = 0, addr = 0;

	nr_cpus = 0;
	if (!bpf_core_field_exists(arr->pptrs))
		return false;
	/* Arithmetic on a map pointer is refused too: its value, then. */
	bpf_probe_read_kernel(&addr, sizeof(addr), &map);
	bpf_probe_read_kernel(&base, sizeof(base),
			      (void *)(addr + bpf_core_field_offset(arr->pptrs)));
	if (!base)
		return false;
	bpf_loop(MAX_CPUS, find_offset, &base, 0);
	return nr_cpus > 0;
}

/* Never set: puts the record types (nothing else refers to them) into the
 * object's BTF, from which the skeleton generates their Rust twins. */
struct facts_rec *facts_type __attribute__((unused));
struct thread_rec *thread_type __attribute__((unused));
enum task_fact *fact_type __attribute__((unused));
enum proc_flags *flags_type __attribute__((unused));
enum rec_kind *kind_type __attribute__((unused));

/* Each fact's CO-RE check: constant once libbpf relocated the program, so
 * the verifier drops the reads a kernel cannot do. */
#define T ((struct task_struct *)0)
#define S ((struct signal_struct *)0)
#define M ((struct mm_struct *)0)
#define HAS_TASK_STATE bpf_core_field_exists(T->__state)
#define HAS_TASK_CPU bpf_core_field_exists(T->thread_info.cpu)
#define HAS_START_BOOTTIME bpf_core_field_exists(T->start_boottime)
#define HAS_PREV_CPUTIME bpf_core_field_exists(S->prev_cputime)
#define HAS_IOAC (bpf_core_field_exists(T->ioac.read_bytes) && bpf_core_field_exists(S->ioac.read_bytes))
#define HAS_RSS_PERCPU                                                        \
	(bpf_core_type_exists(struct percpu_counter) && bpf_core_field_exists(M->rss_stat[0].counters))
#define HAS_RSS_ATOMIC bpf_core_type_exists(struct mm_rss_stat___old)
#define HAS_HUGETLB bpf_core_field_exists(M->hugetlb_usage)
#define HAS_PINNED_VM bpf_core_field_exists(M->pinned_vm)
#define HAS_PGTABLES bpf_core_field_exists(M->pgtables_bytes)
#define HAS_KTHREAD_NAME                                                      \
	(bpf_core_field_exists(T->worker_private) &&                          \
	 bpf_core_field_exists(((struct kthread *)0)->full_name))
#define HAS_WQ_WORKER                                                         \
	(HAS_KTHREAD_NAME && bpf_core_field_exists(((struct kthread *)0)->data) &&     \
	 bpf_core_field_exists(((struct worker *)0)->desc) &&                  \
	 bpf_core_field_exists(((struct worker *)0)->current_work) &&          \
	 bpf_core_field_exists(((struct worker *)0)->pool))
#define HAS_TGID_PID                                                          \
	(bpf_core_field_exists(S->pids) && bpf_core_enum_value_exists(enum pid_type, PIDTYPE_TGID))

static __always_inline __u32 facts(void)
{
	__u32 f = 0;

	if (HAS_TASK_STATE)
		f |= FACT_TASK_STATE;
	if (HAS_TASK_CPU)
		f |= FACT_TASK_CPU;
	if (HAS_START_BOOTTIME)
		f |= FACT_START_BOOTTIME;
	if (HAS_PREV_CPUTIME)
		f |= FACT_PREV_CPUTIME;
	if (HAS_IOAC)
		f |= FACT_IOAC;
	if (HAS_RSS_PERCPU)
		f |= FACT_RSS_PERCPU;
	if (HAS_RSS_ATOMIC)
		f |= FACT_RSS_ATOMIC;
	if (HAS_HUGETLB)
		f |= FACT_HUGETLB;
	if (HAS_PINNED_VM)
		f |= FACT_PINNED_VM;
	if (HAS_PGTABLES)
		f |= FACT_PGTABLES;
	if (HAS_KTHREAD_NAME)
		f |= FACT_KTHREAD_NAME;
	if (HAS_TGID_PID)
		f |= FACT_TGID_PID;
	if (HAS_WQ_WORKER)
		f |= FACT_WQ_WORKER;
	return f;
}

static __u32 pass_facts;

struct sum_ctx {
	__u64 counters;
	__s64 sum;
};

static long add_cpu(__u32 cpu, void *ctx)
{
	struct sum_ctx *c = ctx;
	__s32 v = 0;

	if (cpu >= MAX_CPUS)
		return 1;
	bpf_probe_read_kernel(&v, sizeof(v), (void *)(c->counters + cpu_offsets[cpu_slot(cpu)]));
	c->sum += v;
	return 0;
}

/* percpu_counter_sum(): the central count plus every CPU's delta (an
 * offline CPU's was folded into the count when it went down). */
static __always_inline __s64 counter_sum(struct percpu_counter *pc, __s64 *count)
{
	struct sum_ctx c = {};

	*count = BPF_CORE_READ(pc, count);
	c.sum = *count;
	if (!(pass_facts & FACT_PER_CPU_OFFSET))
		return c.sum;
	c.counters = (__u64)BPF_CORE_READ(pc, counters);
	bpf_loop(nr_cpus, add_cpu, &c, 0);
	return c.sum;
}

static __always_inline void read_mm(struct proc_rec *r, struct mm_struct *mm)
{
	r->total_vm = BPF_CORE_READ(mm, total_vm);
	r->locked_vm = BPF_CORE_READ(mm, locked_vm);
	if (HAS_PINNED_VM)
		r->pinned_vm = BPF_CORE_READ(mm, pinned_vm.counter);
	if (HAS_PGTABLES)
		r->pgtables_bytes = BPF_CORE_READ(mm, pgtables_bytes.counter);
	if (HAS_HUGETLB)
		r->hugetlb_pages = BPF_CORE_READ(mm, hugetlb_usage.counter);
	if (HAS_RSS_PERCPU) {
		r->sum_file = counter_sum(&mm->rss_stat[MM_FILEPAGES], &r->count_file);
		r->sum_anon = counter_sum(&mm->rss_stat[MM_ANONPAGES], &r->count_anon);
		r->sum_shmem = counter_sum(&mm->rss_stat[MM_SHMEMPAGES], &r->count_shmem);
		r->sum_swap = counter_sum(&mm->rss_stat[MM_SWAPENTS], &r->sum_swap);
	} else if (HAS_RSS_ATOMIC) {
		struct mm_struct___old *old = (void *)mm;

		r->count_file = r->sum_file = BPF_CORE_READ(old, rss_stat.count[MM_FILEPAGES].counter);
		r->count_anon = r->sum_anon = BPF_CORE_READ(old, rss_stat.count[MM_ANONPAGES].counter);
		r->count_shmem = r->sum_shmem = BPF_CORE_READ(old, rss_stat.count[MM_SHMEMPAGES].counter);
		r->sum_swap = BPF_CORE_READ(old, rss_stat.count[MM_SWAPENTS].counter);
	}
	if (BPF_CORE_READ(mm, exe_file)) {
		r->flags |= PROC_HAS_EXE;
		r->exe_ino = BPF_CORE_READ(mm, exe_file, f_inode, i_ino);
		r->exe_dev = BPF_CORE_READ(mm, exe_file, f_inode, i_sb, s_dev);
	}
}

/* get_mm_cmdline(): the arguments, or with setproctitle(3) (the NUL that
 * ended them overwritten) up to the environment's end, cut by user space
 * at the first NUL. At most CMDLINE_MAX bytes, as fb_procfs reads. */
static __always_inline __u32 read_cmdline(struct proc_buf *b, struct task_struct *task,
					  struct mm_struct *mm)
{
	__u64 arg_start = BPF_CORE_READ(mm, arg_start);
	__u64 arg_end = BPF_CORE_READ(mm, arg_end);
	__u64 env_start = BPF_CORE_READ(mm, env_start);
	__u64 env_end = BPF_CORE_READ(mm, env_end);
	__u64 len;
	char c = 0;

	if (arg_start >= arg_end)
		return 0;
	if (env_start != arg_end || env_end < env_start)
		env_start = env_end = arg_end;
	if (bpf_copy_from_user_task(&c, 1, (void *)(arg_end - 1), task, 0)) {
		b->r.flags |= PROC_CMDLINE_PROC;
		return 0;
	}
	if (c) {
		b->r.flags |= PROC_PROCTITLE;
		len = env_end - arg_start;
	} else {
		len = arg_end - arg_start;
	}
	if (len > CMDLINE_MAX)
		len = CMDLINE_MAX;
	barrier_var(len);
	if (len > CMDLINE_MAX)
		return 0;
	if (bpf_copy_from_user_task(b->cmdline, len, (void *)arg_start, task, 0)) {
		b->r.flags |= PROC_CMDLINE_PROC;
		return 0;
	}
	return len;
}

static __always_inline void read_ns_tgid(struct proc_rec *r, struct signal_struct *sig)
{
	struct pid *pid = BPF_CORE_READ(sig, pids[PIDTYPE_TGID]);
	__u32 level;

	if (!pid)
		return;
	level = BPF_CORE_READ(pid, level);
	r->ns_levels = level + 1;
	if (level >= NS_LEVELS)
		r->flags |= PROC_NS_DEEP;
#pragma unroll
	for (int i = 0; i < NS_LEVELS; i++) {
		if (i > level)
			break;
		r->ns_tgid[i] = BPF_CORE_READ(pid, numbers[i].nr);
	}
}

/* What proc_task_name() prints for a kernel thread beyond comm: a
 * workqueue worker's description (wq_worker_comm: its id, which is its
 * comm unless cut at 15 characters, then +/- and the description), or
 * the full name of a kthread whose name did not fit comm. */
static __always_inline void kthread_name(struct proc_rec *r, struct task_struct *task, __u32 flags)
{
	struct kthread *kthread = 0;
	struct worker *worker;

	if (HAS_KTHREAD_NAME)
		kthread = BPF_CORE_READ(task, worker_private);
	if (!kthread) {
		if (flags & PF_WQ_WORKER || !HAS_KTHREAD_NAME)
			r->flags |= PROC_COMM_PROC;
		return;
	}
	if (!(flags & PF_WQ_WORKER)) {
		char *full = BPF_CORE_READ(kthread, full_name);

		if (full && bpf_probe_read_kernel_str(r->long_name, sizeof(r->long_name), full) > 0)
			r->flags |= PROC_FULL_NAME;
		return;
	}
	if (!HAS_WQ_WORKER || r->comm[sizeof(r->comm) - 2]) {
		r->flags |= PROC_COMM_PROC;
		return;
	}
	worker = BPF_CORE_READ(kthread, data);
	/* Without a pool 7.x prints "kworker/dying", 6.x the comm. */
	if (!worker || !BPF_CORE_READ(worker, pool)) {
		r->flags |= PROC_COMM_PROC;
		return;
	}
	if (bpf_probe_read_kernel_str(r->long_name, sizeof(r->long_name), &worker->desc) <= 1)
		return;
	r->flags |= BPF_CORE_READ(worker, current_work) ? PROC_WQ_BUSY : PROC_WQ_IDLE;
}

static __always_inline void thread(struct seq_file *seq, struct task_struct *t)
{
	struct thread_rec r = {
		.head = { .kind = REC_THREAD, .size = sizeof(r), .tgid = BPF_CORE_READ(t, tgid) },
	};

	task_usage_add(&r.usage, t);
	bpf_seq_write(seq, &r, sizeof(r));
}

static __always_inline void process(struct seq_file *seq, struct task_struct *task)
{
	struct signal_struct *sig = BPF_CORE_READ(task, signal);
	struct proc_buf *b;
	struct mm_struct *mm;
	__u32 key = 0, len = 0, flags;

	b = bpf_map_lookup_elem(&scratch, &key);
	if (!b)
		return;
	__builtin_memset(&b->r, 0, sizeof(b->r));
	b->r.head.kind = REC_PROC;
	b->r.head.tgid = BPF_CORE_READ(task, tgid);
	if (HAS_TASK_STATE)
		b->r.state = BPF_CORE_READ(task, __state);
	b->r.exit_state = BPF_CORE_READ(task, exit_state);
	if (HAS_TASK_CPU)
		b->r.cpu = BPF_CORE_READ(task, thread_info.cpu);
	if (BPF_CORE_READ(task, sighand)) {
		b->r.flags |= PROC_ALIVE;
		b->r.ppid = BPF_CORE_READ(task, real_parent, tgid);
		b->r.pgrp = BPF_CORE_READ(sig, pids[PIDTYPE_PGID], numbers[0].nr);
		b->r.sid = BPF_CORE_READ(sig, pids[PIDTYPE_SID], numbers[0].nr);
	}
	b->r.nr_threads = BPF_CORE_READ(sig, nr_threads);
	if (HAS_TGID_PID)
		read_ns_tgid(&b->r, sig);
	task_usage_add_gone(&b->r.gone, sig);
	if (HAS_PREV_CPUTIME) {
		b->r.prev_utime_ns = BPF_CORE_READ(sig, prev_cputime.utime);
		b->r.prev_stime_ns = BPF_CORE_READ(sig, prev_cputime.stime);
	}
	if (HAS_START_BOOTTIME)
		b->r.start_boottime_ns = BPF_CORE_READ(task, start_boottime);
	b->r.cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	BPF_CORE_READ_STR_INTO(&b->r.comm, task, comm);
	flags = BPF_CORE_READ(task, flags);
	if (flags & PF_KTHREAD)
		kthread_name(&b->r, task, flags);
	mm = BPF_CORE_READ(task, mm);
	if (mm) {
		b->r.flags |= PROC_HAS_MM;
		read_mm(&b->r, mm);
		len = read_cmdline(b, task, mm);
	}
	b->r.cmdline_len = len;
	b->r.head.size = sizeof(b->r) + len;
	if (len > CMDLINE_MAX)
		return;
	bpf_seq_write(seq, b, sizeof(b->r) + len);
}

SEC("iter.s/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;

	if (ctx->meta->seq_num == 0) {
		struct facts_rec f = {
			.head = { .kind = REC_FACTS, .size = sizeof(f) },
		};

		pass_facts = facts();
		if (find_offsets())
			pass_facts |= FACT_PER_CPU_OFFSET;
		f.facts = pass_facts;
		f.nr_cpus = nr_cpus;
		bpf_seq_write(seq, &f, sizeof(f));
	}
	if (!task)
		return 0;
	thread(seq, task);
	if (BPF_CORE_READ(task, pid) == BPF_CORE_READ(task, tgid))
		process(seq, task);
	return 0;
}
