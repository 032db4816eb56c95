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
 * The event the exit program submits to the ring buffer, one per process
 * (thread group) when its last thread exits. Rust reads it as the
 * skeleton's generated `types::exit_event` (from this object's BTF), so
 * the layout and array sizes are stated here only.
 */
#ifndef EXITSTATS_H
#define EXITSTATS_H

/* Cgroup path kept per event: levels below the root, leaf first. */
#define CGROUP_DEPTH 16
#define CGROUP_NAME_LEN 64

/* In BTF (an enum, unlike a #define), so Rust reads the same values. */
enum exit_flags {
	/* read_bytes/write_bytes are set (CONFIG_TASK_IO_ACCOUNTING). */
	EXIT_HAS_IO = 1,
	/* The cgroup path did not fit (deeper or longer names): unknown. */
	EXIT_CGROUP_TRUNCATED = 2,
};

struct cgroup_name {
	char name[CGROUP_NAME_LEN];
};

struct exit_event {
	__s32 pid; /* tgid */
	__s32 ppid;
	__s32 pgrp;
	__s32 sid;
	__s32 cpu;
	__u32 nr_threads;
	/* The whole thread group's, as /proc/PID/stat's "whole" counts. */
	struct task_usage usage;
	/* Boot time at exit minus the process's start (ns). */
	__u64 age_ns;
	enum exit_flags flags; /* a set of them */
	__u32 cgroup_levels;
	char comm[16];
	struct cgroup_name cgroup_names[CGROUP_DEPTH];
};

#endif
