//! From a record to below's `CgroupSample`: plain functions over the
//! record's bytes, in the units and encodings the text files use. Nothing
//! here needs a loaded program (tests build records by hand).
//!
//! Pressure: BPF reads `psi_group.total`/`avg` as the kernel last
//! aggregated them (its averaging work runs every 2 s while the group is
//! active; a text read aggregates first). We accept that lag rather than
//! read text: below uses avg10, and totals lag at most one period.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;

use cgroupfs::CgroupStat;
use cgroupfs::CpuMax;
use cgroupfs::CpuPressure;
use cgroupfs::CpuStat;
use cgroupfs::Cpuset;
use cgroupfs::IoPressure;
use cgroupfs::MemNodes;
use cgroupfs::MemoryNumaStat;
use cgroupfs::MemoryPressure;
use cgroupfs::MemoryStat;
use cgroupfs::Pressure;
use cgroupfs::PressureMetrics;
use model::CgroupSample;

use super::contract::*;
use super::probe::NumaLayout;
use crate::FileSet;
use crate::StatFile;
use crate::TopBy;

/// `PID_MAX_LIMIT + 1` on 64-bit: pids.max prints "max" at or above it.
const PIDS_MAX: u64 = 4 * 1024 * 1024 + 1;
/// cfs_bandwidth quota without a limit.
const RUNTIME_INF: u64 = u64::MAX;

/// What decoding needs besides the record: the machine's limits and the
/// last pass's global state.
pub(crate) struct Decoder {
    /// nr_cpu_ids, nr_node_ids: mask bits past them are not shown.
    pub(crate) cpus: usize,
    pub(crate) nodes: usize,
    /// Where memory.numa_stat's items are (None: not served).
    pub(crate) numa: Option<NumaLayout>,
    pub(crate) page_size: u64,
    /// The nodes memory.numa_stat prints (N_MEMORY at the last pass).
    pub(crate) memory_nodes: u64,
}

/// Last scaled (utime, stime) per cgroup id, for monotonic user/system.
pub(crate) type PrevCputime = HashMap<u64, (u64, u64)>;

impl Decoder {
    /// The sample of `files` a record holds. The root's cpu.stat and
    /// pressure are left out (the kernel fills them from system-wide state).
    pub(crate) fn sample(
        &self,
        r: &Record,
        files: FileSet,
        prev: &mut PrevCputime,
    ) -> CgroupSample {
        let want = |f| files.contains(f);
        let has = |flag| r.flags & flag != 0;
        let root = r.level == 0;
        let mut s = CgroupSample {
            inode_number: Some(r.id as i64),
            ..Default::default()
        };
        if want(StatFile::CgroupStat) {
            s.cgroup_stat = Some(CgroupStat {
                nr_descendants: Some(r.nr_descendants),
                nr_dying_descendants: Some(r.nr_dying_descendants),
            });
        }
        if want(StatFile::CgroupControllers) {
            s.cgroup_controllers = Some(controller_names(r.controllers));
        }
        if want(StatFile::CgroupSubtreeControl) {
            s.cgroup_subtree_control = Some(controller_names(r.subtree_control));
        }
        if want(StatFile::CpuStat) && !root && has(HAS_BSTAT) {
            s.cpu_stat = Some(cpu_stat(r, prev));
        }
        if want(StatFile::CpuPressure) && !root && has(HAS_PSI) {
            s.pressure = Some(pressure(r));
        }
        if !root && has(HAS_PIDS) {
            if want(StatFile::PidsCurrent) {
                s.tids_current = Some(r.pids_current);
            }
            if want(StatFile::PidsMax) {
                s.tids_max = Some(if r.pids_limit >= PIDS_MAX {
                    -1
                } else {
                    r.pids_limit as i64
                });
            }
        }
        if !root && has(HAS_CPU) {
            if want(StatFile::CpuWeight) {
                s.cpu_weight = Some(cpu_weight(r.weight));
            }
            if want(StatFile::CpuMax) && r.period_ns != ABSENT {
                s.cpu_max = Some(CpuMax {
                    max_usec: if r.quota_ns == RUNTIME_INF {
                        -1
                    } else {
                        (r.quota_ns / 1000) as i64
                    },
                    period_usec: r.period_ns / 1000,
                });
            }
        }
        if has(HAS_CPUSET) {
            self.cpuset(r, files, &mut s);
        }
        if want(StatFile::MemoryStat) && has(HAS_MEMSTAT) {
            s.memory_stat = Some(memory_stat(r));
        }
        if want(StatFile::MemoryNumaStat) && has(HAS_NUMA) {
            s.memory_numa_stat = self.numa_stat(r);
        }
        if !root && has(HAS_MEMCG) {
            self.memcg(r, files, &mut s);
        }
        s
    }

    /// The value top-N ranks `r` by, in the units of [`TopBy::value`];
    /// `None` for what the record does not hold (io.stat) or the cgroup
    /// does not have. The root is never ranked.
    pub(crate) fn rank_value(&self, r: &Record, by: TopBy) -> Option<u64> {
        let has = |flag| r.flags & flag != 0 && r.level != 0;
        match by {
            TopBy::Cpu => has(HAS_BSTAT).then_some(r.usage_ns / 1000),
            TopBy::Memory => has(HAS_MEMCG).then(|| r.mem_usage * self.page_size),
            TopBy::Pressure => has(HAS_PSI).then(|| {
                let t = PsiRows::from_fn(|i| r.psi_total_ns[i] / 1000);
                t.cpu_some + t.io_some + t.memory_some
            }),
            TopBy::Io => None,
        }
    }

    fn cpuset(&self, r: &Record, files: FileSet, s: &mut CgroupSample) {
        let root = r.level == 0;
        let cpus = |words: &[u64]| Cpuset {
            cpus: bits(words, self.cpus),
        };
        let nodes = |word: u64| MemNodes {
            nodes: bits(&[word], self.nodes),
        };
        if files.contains(StatFile::CpusetCpus) && !root {
            s.cpuset_cpus = Some(cpus(&r.cpus));
        }
        if files.contains(StatFile::CpusetCpusEffective) {
            s.cpuset_cpus_effective = Some(cpus(&r.cpus_effective));
        }
        if files.contains(StatFile::CpusetMems) && !root {
            s.cpuset_mems = Some(nodes(r.mems));
        }
        if files.contains(StatFile::CpusetMemsEffective) {
            s.cpuset_mems_effective = Some(nodes(r.mems_effective));
        }
    }

    /// The memcg's page counters and event arrays.
    fn memcg(&self, r: &Record, files: FileSet, s: &mut CgroupSample) {
        let want = |f| files.contains(f);
        let page = self.page_size;
        // Page counters hold pages; "max" is PAGE_COUNTER_MAX.
        let counter_max = i64::MAX as u64 / page;
        let limit = |v: u64| {
            Some(if v == counter_max {
                -1
            } else {
                (v * page) as i64
            })
        };
        if want(StatFile::MemoryCurrent) {
            s.memory_current = Some((r.mem_usage * page) as i64);
        }
        if want(StatFile::MemorySwapCurrent) {
            s.memory_swap_current = Some((r.swap_usage * page) as i64);
        }
        if want(StatFile::MemoryMin) {
            s.memory_min = limit(r.mem_min);
        }
        if want(StatFile::MemoryLow) {
            s.memory_low = limit(r.mem_low);
        }
        if want(StatFile::MemoryHigh) {
            s.memory_high = limit(r.mem_high);
        }
        if want(StatFile::MemoryMax) {
            s.memory_max = limit(r.mem_max);
        }
        if want(StatFile::MemorySwapMax) {
            s.memory_swap_max = limit(r.swap_max);
        }
        if want(StatFile::MemoryZswapMax) && r.zswap_max != ABSENT {
            s.memory_zswap_max = limit(r.zswap_max);
        }
        if want(StatFile::MemoryEvents) {
            s.memory_events = Some(fields(EVENTS_FIELDS, &r.events));
        }
        if want(StatFile::MemoryEventsLocal) {
            s.memory_events_local = Some(fields(EVENTS_LOCAL_FIELDS, &r.events_local));
        }
    }

    /// memory.numa_stat: the nodes the text prints, in its units.
    fn numa_stat(&self, r: &Record) -> Option<BTreeMap<u32, MemoryNumaStat>> {
        let layout = self.numa?;
        let stats = (0..r.numa.len())
            .filter(|n| self.memory_nodes & (1 << n) != 0)
            .map(|n| {
                let mut m = MemoryNumaStat::default();
                let items = NUMA_ITEMS.iter().zip(NUMA_FIELDS).zip(&layout);
                for (((item, field), &idx), &v) in items.zip(&r.numa[n]) {
                    if idx != NUMA_NO_IDX {
                        *field(&mut m) = Some(
                            v * match item.unit {
                                Unit::Page => self.page_size,
                                Unit::One => 1,
                                Unit::KiB => 1024,
                            },
                        );
                    }
                }
                (n as u32, m)
            })
            .collect();
        Some(stats)
    }
}

/// A below struct from record slots in list order; ABSENT stays None.
fn fields<T: Default>(fields: &[Field<T>], values: &[u64]) -> T {
    let mut s = T::default();
    for (field, &v) in fields.iter().zip(values) {
        if v != ABSENT {
            *field(&mut s) = Some(v);
        }
    }
    s
}

fn memory_stat(r: &Record) -> MemoryStat {
    fields(MEMSTAT_FIELDS, &r.memstat)
}

fn cpu_stat(r: &Record, prev: &mut PrevCputime) -> CpuStat {
    // Start from the newer of the kernel's prev_cputime (moved by text
    // readers) and ours, as the text would.
    let kernel = (r.prev_utime_ns, r.prev_stime_ns);
    let start = match prev.get(&r.id) {
        Some(&ours) if ours.0 + ours.1 > kernel.0 + kernel.1 => ours,
        _ => kernel,
    };
    let (utime, stime) = cputime_adjust(r.usage_ns, r.utime_ns, r.stime_ns, start);
    prev.insert(r.id, (utime, stime));
    let extra = |v: u64| (r.flags & HAS_CPU != 0 && v != ABSENT).then_some(v);
    CpuStat {
        usage_usec: Some(r.usage_ns / 1000),
        user_usec: Some(utime / 1000),
        system_usec: Some(stime / 1000),
        nr_periods: extra(r.nr_periods),
        nr_throttled: extra(r.nr_throttled),
        throttled_usec: extra(r.throttled_ns).map(|v| v / 1000),
    }
}

/// The kernel's cputime_adjust(): split rtime in the raw utime:stime ratio,
/// never letting either go below the previous result.
fn cputime_adjust(rtime: u64, utime: u64, stime: u64, prev: (u64, u64)) -> (u64, u64) {
    let (prev_u, prev_s) = prev;
    if prev_u + prev_s >= rtime {
        return prev;
    }
    let mut st = if stime == 0 {
        0
    } else if utime == 0 {
        rtime
    } else {
        (stime as u128 * rtime as u128 / (stime as u128 + utime as u128)) as u64
    };
    st = st.max(prev_s);
    let mut ut = rtime - st;
    if ut < prev_u {
        ut = prev_u;
        st = rtime - ut;
    }
    (ut, st)
}

/// sched_weight_to_cgroup(scale_load_down(shares)).
fn cpu_weight(shares: u64) -> u32 {
    let w = if shares == 0 {
        0
    } else {
        (shares >> 10).max(2)
    };
    ((w * 100 + 512) / 1024).clamp(1, 10000) as u32
}

fn pressure(r: &Record) -> Pressure {
    let rows = PsiRows::from_fn(|i| PressureMetrics {
        avg10: Some(load_avg(r.psi_avg[i][0])),
        avg60: Some(load_avg(r.psi_avg[i][1])),
        avg300: Some(load_avg(r.psi_avg[i][2])),
        total: Some(r.psi_total_ns[i] / 1000),
    });
    Pressure {
        cpu: CpuPressure {
            some: rows.cpu_some,
            full: Some(rows.cpu_full),
        },
        io: IoPressure {
            some: rows.io_some,
            full: rows.io_full,
        },
        memory: MemoryPressure {
            some: rows.memory_some,
            full: rows.memory_full,
        },
    }
}

/// A psi average (11 fraction bits) as the text prints it, "%lu.%02lu",
/// then parsed: an exact decimal divided once rounds like the parser.
fn load_avg(v: u64) -> f64 {
    let int = v >> 11;
    let frac = ((v & 2047) * 100) >> 11;
    (int * 100 + frac) as f64 / 100.0
}

fn controller_names(mask: u32) -> BTreeSet<String> {
    CONTROLLERS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| (*n).to_owned())
        .collect()
}

/// Set bits below `limit`.
fn bits(words: &[u64], limit: usize) -> BTreeSet<u32> {
    (0..limit.min(words.len() * 64))
        .filter(|&b| words[b / 64] & (1 << (b % 64)) != 0)
        .map(|b| b as u32)
        .collect()
}

/// The record's name: the kernel NUL-terminates it within the array.
pub(crate) fn name(r: &Record) -> String {
    let bytes: Vec<u8> = r
        .name
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
#[path = "decode_test.rs"]
mod test;
