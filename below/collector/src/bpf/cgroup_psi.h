/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The fork's pressure from BPF (bstats.bpf.c, cgroup_psi.bpf.c): what the
 * pass writes of cpu/io/memory.pressure per cgroup and why it could not,
 * read by build.rs like cgroup_bpf_record.h. Not in cgroup_bpf_record.h: it
 * reads scheduler internals (kallsyms symbols, the per-CPU buckets) that below
 * main's program leaves to the files.
 */
#ifndef CGROUP_PSI_H
#define CGROUP_PSI_H

/* Pressure rows: pressure.*[PSI_ROW_row] from `enum psi_states` STATE. */
#define PSI_ROWS(X)                                                            \
  X(io_some, PSI_IO_SOME)                                                      \
  X(io_full, PSI_IO_FULL)                                                      \
  X(memory_some, PSI_MEM_SOME)                                                 \
  X(memory_full, PSI_MEM_FULL)                                                 \
  X(cpu_some, PSI_CPU_SOME)                                                    \
  X(cpu_full, PSI_CPU_FULL)
#define PSI_ENUM(row, state) PSI_ROW_##row,
enum psi_row { PSI_ROWS(PSI_ENUM) NR_PSI_ROWS };

/* What the kernel let the last pass do (global `psi_features`). */
#define PSI_FEAT_FLAGS(X)                                                      \
  X(FEAT_PSI)                                                                  \
  X(FEAT_PSI_CLOCK)
CGB_BITS(PSI_FEAT_FLAGS, psi_feat);

/* Why a pass has no clock for pressure (global `psi_no_clock`, 0 when it
 * has one): kernel symbols missing from kallsyms, HZ not dividing 10^6, a
 * zero rq->clock, an unknown psi_group_cpu layout. */
#define PSI_NO_SYMBOLS 1
#define PSI_ODD_HZ 2
#define PSI_NO_RQ_CLOCK 3
#define PSI_CPU_LAYOUT 4

/* The record's flags past cgroup_bpf_record.h's CGB_HAS_FLAGS (which a pass
 * clears and sets from bit 0): the record's row in map `pressure` is written
 * (HAS_PSI), and the kernel's aggregation worker was queued (HAS_PSI_QUEUED:
 * the per-CPU buckets were summed, which needs the clock). */
#define HAS_PSI_BIT 16
#define HAS_PSI_QUEUED_BIT 17
enum psi_has {
  HAS_PSI = 1U << HAS_PSI_BIT,
  HAS_PSI_QUEUED = 1U << HAS_PSI_QUEUED_BIT
};

/* One cgroup's pressure, at the record's index in map `pressure`:
 * total[PSI_AVGS] with what the per-CPU buckets hold past it (what a read
 * of the file collects first), and the state its update_averages() works
 * from: avg[] (11 fraction bits), avg_total[], avg_last_update and
 * avg_next_update (sched_clock ns). */
struct pressure {
  unsigned long long total_ns[NR_PSI_ROWS];
  unsigned long long avg[NR_PSI_ROWS][3];
  unsigned long long avg_total_ns[NR_PSI_ROWS];
  unsigned long long avg_last_update;
  unsigned long long avg_next_update;
};

#endif /* CGROUP_PSI_H */
