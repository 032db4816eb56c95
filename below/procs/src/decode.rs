//! From the iterator's output to below's `PidInfo`: the thread group sums
//! and conversions /proc/PID/{stat,status,io} do, in user space. Pure
//! functions, tested on synthetic records (decode_test.rs).

use std::collections::BTreeMap;

use anyhow::bail;
use anyhow::Result;
use bstats_bpf::c_string;
use bstats_bpf::Pod;
use procfs::PidStateExt;

use crate::skel::types::facts_rec;
use crate::skel::types::proc_flags;
use crate::skel::types::proc_rec;
use crate::skel::types::rec_head;
use crate::skel::types::rec_kind;
use crate::skel::types::task_fact;
use crate::skel::types::task_usage;
use crate::skel::types::thread_rec;

// SAFETY: the skeleton's #[repr(C)] types of the iterator's records:
// integers and arrays of them.
unsafe impl Pod for rec_head {}
// SAFETY: as above.
unsafe impl Pod for facts_rec {}
// SAFETY: as above.
unsafe impl Pod for thread_rec {}
// SAFETY: as above.
unsafe impl Pod for proc_rec {}

/// `a` and `b` added up: a thread group's usage is its threads' and its
/// gone threads' (/proc/PID/stat's "whole").
pub(crate) fn sum(a: &task_usage, b: &task_usage) -> task_usage {
    task_usage {
        utime_ns: a.utime_ns + b.utime_ns,
        stime_ns: a.stime_ns + b.stime_ns,
        runtime_ns: a.runtime_ns + b.runtime_ns,
        min_flt: a.min_flt + b.min_flt,
        maj_flt: a.maj_flt + b.maj_flt,
        read_bytes: a.read_bytes + b.read_bytes,
        write_bytes: a.write_bytes + b.write_bytes,
    }
}

/// One pass, parsed.
#[derive(Default)]
pub(crate) struct Pass<'a> {
    pub facts: u32,
    pub procs: Vec<(proc_rec, &'a [u8])>,
    /// Per thread group, what its live threads have used.
    pub threads: BTreeMap<i32, task_usage>,
}

pub(crate) fn parse(out: &[u8]) -> Result<Pass<'_>> {
    let mut pass = Pass::default();
    let mut rest = out;
    let mut seen_facts = false;
    while !rest.is_empty() {
        let Some(head) = bstats_bpf::read::<rec_head>(rest) else {
            bail!("truncated record header ({} bytes left)", rest.len());
        };
        let size = head.size as usize;
        if size < std::mem::size_of::<rec_head>() || size > rest.len() {
            bail!("record of {size} bytes with {} left", rest.len());
        }
        let (rec, next) = rest.split_at(size);
        let kind = rec_kind(head.kind as _);
        let short = || anyhow::anyhow!("record kind {} of {size} bytes is short", head.kind);
        if kind == rec_kind::REC_FACTS {
            pass.facts = bstats_bpf::read::<facts_rec>(rec).ok_or_else(short)?.facts;
            seen_facts = true;
        } else if kind == rec_kind::REC_THREAD {
            let t = bstats_bpf::read::<thread_rec>(rec).ok_or_else(short)?;
            let s = pass.threads.entry(t.head.tgid).or_default();
            *s = sum(s, &t.usage);
        } else if kind == rec_kind::REC_PROC {
            let p = bstats_bpf::read::<proc_rec>(rec).ok_or_else(short)?;
            let cmd = &rec[std::mem::size_of::<proc_rec>()..];
            if cmd.len() != p.cmdline_len as usize {
                bail!(
                    "process {}: cmdline of {} bytes, record says {}",
                    p.head.tgid,
                    cmd.len(),
                    p.cmdline_len
                );
            }
            pass.procs.push((p, cmd));
        } else {
            bail!("unknown record kind {}", head.kind);
        }
        rest = next;
    }
    if !seen_facts {
        bail!("the pass printed no facts record");
    }
    Ok(pass)
}

/// __task_state_index(): the letter /proc prints for __state|exit_state.
pub(crate) fn state_char(state: u32, exit_state: u32) -> char {
    // include/linux/sched.h; ABI-stable values.
    const TASK_REPORT: u32 = 0x7f;
    const TASK_IDLE: u32 = 0x0402;
    const TASK_RTLOCK_WAIT: u32 = 0x1000;
    const TASK_FROZEN: u32 = 0x8000;
    const TASK_UNINTERRUPTIBLE: u32 = 0x2;
    let mut s = (state | exit_state) & TASK_REPORT;
    if state & TASK_IDLE == TASK_IDLE {
        s = TASK_REPORT + 1;
    }
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        s = TASK_UNINTERRUPTIBLE;
    }
    let index = (u32::BITS - s.leading_zeros()) as usize;
    b"RSDTtXZPI".get(index).map_or('?', |&c| c as char)
}

/// Units the text is printed in: USER_HZ ticks and pages.
#[derive(Clone, Copy, Debug)]
pub struct Units {
    pub ticks_per_sec: u64,
    pub page_size: u64,
}

impl Units {
    pub fn of_this_system() -> Self {
        // SAFETY: sysconf has no preconditions.
        let (hz, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        Units {
            ticks_per_sec: hz.max(1) as u64,
            page_size: page.max(1) as u64,
        }
    }

    /// nsec_to_clock_t() then fb_procfs's ticks → µs.
    fn usecs(&self, ns: u64) -> u64 {
        ns / (1_000_000_000 / self.ticks_per_sec) * (1_000_000 / self.ticks_per_sec)
    }
}

fn has(flags: u32, f: proc_flags) -> bool {
    flags & f.0 != 0
}

/// The command line as fb_procfs splits /proc/PID/cmdline: None when the
/// file is empty (kernel threads, zombies).
pub(crate) fn cmdline(p: &proc_rec, bytes: &[u8]) -> Option<Vec<String>> {
    let bytes = if has(p.flags, proc_flags::PROC_PROCTITLE) {
        bytes.split(|&b| b == 0).next().unwrap_or_default()
    } else {
        bytes
    };
    if bytes.is_empty() {
        return None;
    }
    Some(
        bytes
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

/// proc_task_name(): comm, a kernel thread's full name, or a workqueue
/// worker's comm with its description.
fn comm(p: &proc_rec) -> String {
    if has(p.flags, proc_flags::PROC_FULL_NAME) {
        return c_string(&p.long_name);
    }
    let comm = c_string(&p.comm);
    if has(p.flags, proc_flags::PROC_WQ_BUSY) {
        format!("{comm}+{}", c_string(&p.long_name))
    } else if has(p.flags, proc_flags::PROC_WQ_IDLE) {
        format!("{comm}-{}", c_string(&p.long_name))
    } else {
        comm
    }
}

/// Everything of `PidInfo` the records give, as fb_procfs would have
/// parsed it; `uptime_secs` is CLOCK_BOOTTIME's seconds (fb_procfs reads
/// it per process). Left for the caller: cgroup, cmdline, exe_path.
pub(crate) fn pid_info(
    p: &proc_rec,
    threads: &task_usage,
    facts: u32,
    units: Units,
    uptime_secs: u64,
) -> procfs::PidInfo {
    let page = units.page_size;
    let fact = |f: task_fact| facts & f.0 != 0;
    let alive = has(p.flags, proc_flags::PROC_ALIVE);
    let mm = has(p.flags, proc_flags::PROC_HAS_MM);
    // Never below the process's prev_cputime (the last split handed out):
    // read, not stored, which gives the numbers a read after ours gets.
    let u = sum(&p.gone, threads);
    let (user_ns, system_ns) = bstats_bpf::cputime_adjust(
        u.runtime_ns,
        u.utime_ns,
        u.stime_ns,
        (p.prev_utime_ns, p.prev_stime_ns),
    );
    let tick_ns = 1_000_000_000 / units.ticks_per_sec;
    let pos = |v: i64| v.max(0) as u64;
    let rss_pages = if mm {
        pos(p.count_file) + pos(p.count_anon) + pos(p.count_shmem)
    } else {
        0
    };
    let ns_levels = (p.ns_levels as usize).min(p.ns_tgid.len());
    let mem = |v: u64| mm.then_some(v * page);
    procfs::PidInfo {
        stat: procfs::PidStat {
            pid: Some(p.head.tgid),
            comm: Some(comm(p)),
            state: procfs::PidState::from_char(state_char(p.state, p.exit_state)),
            ppid: Some(if alive { p.ppid } else { 0 }),
            pgrp: Some(if alive { p.pgrp } else { 0 }),
            session: Some(if alive { p.sid } else { 0 }),
            minflt: Some(u.min_flt),
            majflt: Some(u.maj_flt),
            user_usecs: Some(units.usecs(user_ns)),
            system_usecs: Some(units.usecs(system_ns)),
            num_threads: Some(p.nr_threads as u64),
            running_secs: Some(
                uptime_secs.saturating_sub(p.start_boottime_ns / tick_ns / units.ticks_per_sec),
            ),
            rss_bytes: Some(rss_pages * page),
            processor: Some(p.cpu),
        },
        io: if fact(task_fact::FACT_IOAC) {
            procfs::PidIo {
                rbytes: Some(u.read_bytes),
                wbytes: Some(u.write_bytes),
            }
        } else {
            Default::default()
        },
        status: procfs::PidStatus {
            ns_tgid: fact(task_fact::FACT_TGID_PID).then(|| p.ns_tgid[..ns_levels].to_vec()),
            vm_size: mem(p.total_vm),
            lock: mem(p.locked_vm),
            pin: mem(p.pinned_vm).filter(|_| fact(task_fact::FACT_PINNED_VM)),
            anon: mem(pos(p.sum_anon)),
            file: mem(pos(p.sum_file)),
            shmem: mem(pos(p.sum_shmem)),
            // mm_pgtables_bytes() >> 10, printed in kB.
            pte: mm
                .then_some(p.pgtables_bytes >> 10 << 10)
                .filter(|_| fact(task_fact::FACT_PGTABLES)),
            swap: mem(pos(p.sum_swap)),
            huge_tlb: mem(p.hugetlb_pages).filter(|_| fact(task_fact::FACT_HUGETLB)),
        },
        ..Default::default()
    }
}
