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
 * Catches every process (thread group) as its last thread exits, with the
 * totals /proc/PID/stat and /proc/PID/io would have shown, so a process
 * that lived between two samples is not missing from the next one.
 *
 * A BTF tracepoint: attached by BTF id through bpf_link, no tracefs (the
 * classic tracepoint needs tracefs to look its id up). Its first argument
 * is the exiting task on every kernel; 6.16+ adds `group_dead`, which we
 * derive from `signal->live` instead so 6.1 works too.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "task_usage.h"
#include "exitstats.h"

/* GPL-compatible: the kernel lets only such programs call the GPL-only
 * helpers and kfuncs used here. */
char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* The loader sets the size. */
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Exits not reported because the ring buffer was full. */
__u64 dropped;

/* Never set: puts the event type (nothing else refers to it) into the
 * object's BTF, from which the skeleton generates its Rust twin. */
struct exit_event *event_type __attribute__((unused));

/* The default-hierarchy cgroup's names from the leaf up to (not
 * including) the root, as /proc/PID/cgroup's "0::" line would print. */
static __always_inline void cgroup_path(struct exit_event *e, struct task_struct *t)
{
	struct cgroup *cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	__u32 i;

	for (i = 0; i < CGROUP_DEPTH; i++) {
		struct cgroup_subsys_state *parent;
		long n;

		if (!cg)
			break;
		parent = BPF_CORE_READ(cg, self.parent);
		if (!parent)
			break;
		n = bpf_probe_read_kernel_str(e->cgroup_names[i].name, CGROUP_NAME_LEN,
					      BPF_CORE_READ(cg, kn, name));
		if (n < 0 || n == CGROUP_NAME_LEN)
			e->flags = (enum exit_flags)(e->flags | EXIT_CGROUP_TRUNCATED);
		cg = BPF_CORE_READ(parent, cgroup);
	}
	e->cgroup_levels = i;
	if (i == CGROUP_DEPTH && cg && BPF_CORE_READ(cg, self.parent))
		e->flags = (enum exit_flags)(e->flags | EXIT_CGROUP_TRUNCATED);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	struct task_struct *leader;
	struct signal_struct *sig;
	struct exit_event *e;
	__u64 start;

	sig = BPF_CORE_READ(p, signal);
	/* Only the last thread: the process is gone once it is. */
	if (BPF_CORE_READ(sig, live.counter) != 0)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	leader = BPF_CORE_READ(p, group_leader);
	e->pid = BPF_CORE_READ(p, tgid);
	e->ppid = BPF_CORE_READ(p, real_parent, tgid);
	e->pgrp = BPF_CORE_READ(sig, pids[PIDTYPE_PGID], numbers[0].nr);
	e->sid = BPF_CORE_READ(sig, pids[PIDTYPE_SID], numbers[0].nr);
	e->cpu = bpf_get_smp_processor_id();
	e->nr_threads = BPF_CORE_READ(sig, nr_threads);
	e->flags = bpf_core_field_exists(p->ioac.read_bytes) ? EXIT_HAS_IO : 0;
	/* Threads already released are in signal_struct; this one and a
	 * zombie leader are not. */
	__builtin_memset(&e->usage, 0, sizeof(e->usage));
	task_usage_add_gone(&e->usage, sig);
	task_usage_add(&e->usage, p);
	if (leader != p)
		task_usage_add(&e->usage, leader);
	start = BPF_CORE_READ(leader, start_boottime);
	e->age_ns = bpf_ktime_get_boot_ns() - start;
	BPF_CORE_READ_STR_INTO(&e->comm, leader, comm);
	cgroup_path(e, p);
	bpf_ringbuf_submit(e, 0);
	return 0;
}
