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
 * The layer's test program: a task iterator that counts tasks into .bss,
 * scaled by a .rodata constant the loader sets, and prints one line per
 * pass; and one that reads a member no kernel has (not loaded unless a
 * test asks), so the verifier rejects the poisoned CO-RE read.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* bpf_seq_printf is GPL-only. */
char LICENSE[] SEC("license") = "GPL";

const volatile __u64 step = 1;
__u64 counted;

SEC("iter/task")
int count_tasks(struct bpf_iter__task *ctx)
{
	if (!ctx->task) {
		BPF_SEQ_PRINTF(ctx->meta->seq, "counted %llu\n", counted);
		return 0;
	}
	if (ctx->meta->seq_num == 0)
		counted = 0;
	counted += step;
	return 0;
}

struct task_struct___no_such_kernel {
	int no_such_member;
} __attribute__((preserve_access_index));

SEC("?iter/task")
int read_missing_member(struct bpf_iter__task *ctx)
{
	struct task_struct___no_such_kernel *t = (void *)ctx->task;

	if (t)
		counted += BPF_CORE_READ(t, no_such_member);
	return 0;
}
