/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fork's cgroup names (bstats.bpf.c), read by build.rs like
 * cgroup_bpf_record.h. The fork builds the tree from the pass's records, with
 * no directory walk, so a cgroup's name comes from the pass; user space needs
 * it once per cgroup (cgroup2 has no rename), so it is not in the record:
 * map `names` holds one per record slot, written only when another cgroup
 * takes the slot.
 */
#ifndef CGROUP_NAME_H
#define CGROUP_NAME_H

/* kn->name of the cgroup whose record is at the slot, NUL-terminated
 * (NAME_MAX and its NUL). */
struct cgroup_name {
  char name[256];
};

#endif /* CGROUP_NAME_H */
