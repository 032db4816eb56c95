/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fork's top-N passes over cgroup_bpf.bpf.c (the program below main
 * carries): the pass modes of bstats.bpf.c, read by build.rs like
 * cgroup_bpf_record.h.
 */
#ifndef CGROUP_RANK_H
#define CGROUP_RANK_H

/* What a pass writes (`pass_mode`, set by user space per pass): FULL every
 * record in full, as cgroup_stats does, and its pressure; RANK in full the
 * records of the cgroups user space wants (map `wanted`: the last sample's top
 * N, usually this one's too), and of the others the groups in `rank_groups`
 * (the ranked value) and, if the slot holds another cgroup than at the last
 * pass, id, parent_id, level and name (map `names`); WANTED in full the wanted
 * records, no others, setting `moved` when a wanted slot holds another cgroup.
 */
#define PASS_FULL 0
#define PASS_RANK 1
#define PASS_WANTED 2

#endif /* CGROUP_RANK_H */
