use crate::decode::*;
use crate::skel::types::facts_rec;
use crate::skel::types::proc_flags;
use crate::skel::types::proc_rec;
use crate::skel::types::rec_head;
use crate::skel::types::rec_kind;
use crate::skel::types::task_fact;
use crate::skel::types::task_usage;
use crate::skel::types::thread_rec;

/// The bytes of a record, as the program prints them.
fn bytes<T: bstats_bpf::Pod>(v: &T) -> Vec<u8> {
    // SAFETY: the records are integers without padding (each field is
    // naturally aligned and each record a multiple of 8 bytes), all
    // initialized.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

const UNITS: Units = Units {
    ticks_per_sec: 100,
    page_size: 4096,
};

fn head(kind: rec_kind, size: usize, tgid: i32) -> rec_head {
    rec_head {
        kind: kind.0 as u16,
        size: size as u16,
        tgid,
    }
}

fn facts(bits: u32) -> Vec<u8> {
    bytes(&facts_rec {
        head: head(rec_kind::REC_FACTS, std::mem::size_of::<facts_rec>(), 0),
        facts: bits,
        nr_cpus: 2,
    })
}

fn thread(tgid: i32, utime: u64, stime: u64, runtime: u64, flt: u64) -> Vec<u8> {
    bytes(&thread_rec {
        head: head(
            rec_kind::REC_THREAD,
            std::mem::size_of::<thread_rec>(),
            tgid,
        ),
        usage: task_usage {
            utime_ns: utime,
            stime_ns: stime,
            runtime_ns: runtime,
            min_flt: flt,
            maj_flt: 1,
            read_bytes: 4096,
            write_bytes: 512,
        },
    })
}

fn proc(p: &mut proc_rec, cmd: &[u8]) -> Vec<u8> {
    p.cmdline_len = cmd.len() as u32;
    p.head = head(
        rec_kind::REC_PROC,
        std::mem::size_of::<proc_rec>() + cmd.len(),
        p.head.tgid,
    );
    let mut b = bytes(p);
    b.extend_from_slice(cmd);
    b
}

const ALL: u32 = task_fact::FACT_IOAC.0
    | task_fact::FACT_TGID_PID.0
    | task_fact::FACT_PINNED_VM.0
    | task_fact::FACT_PGTABLES.0
    | task_fact::FACT_HUGETLB.0;

#[test]
fn states_are_procs_letters() {
    assert_eq!(state_char(0, 0), 'R');
    assert_eq!(state_char(0x1, 0), 'S');
    assert_eq!(state_char(0x2, 0), 'D');
    assert_eq!(state_char(0x4, 0), 'T');
    assert_eq!(state_char(0x8, 0), 't');
    assert_eq!(state_char(0x80, 0x20), 'Z');
    assert_eq!(state_char(0x80, 0x10), 'X');
    assert_eq!(state_char(0x40, 0), 'P');
    // TASK_IDLE (uninterruptible, no load) is 'I'.
    assert_eq!(state_char(0x402, 0), 'I');
    // Frozen and RT-lock waits show as 'D'.
    assert_eq!(state_char(0x8000 | 0x1, 0), 'D');
    assert_eq!(state_char(0x1000, 0), 'D');
    // Bits outside TASK_REPORT are ignored (TASK_WAKEKILL|TASK_STOPPED).
    assert_eq!(state_char(0x100 | 0x4, 0), 'T');
}

#[test]
fn parses_and_sums_thread_groups() {
    let mut p = proc_rec {
        flags: proc_flags::PROC_ALIVE.0 | proc_flags::PROC_HAS_MM.0,
        state: 0x4,
        ppid: 1,
        pgrp: 40,
        sid: 40,
        cpu: 1,
        nr_threads: 2,
        ns_levels: 2,
        gone: task_usage {
            runtime_ns: 100_000_000,
            min_flt: 10,
            read_bytes: 1,
            ..Default::default()
        },
        start_boottime_ns: 5_250_000_000,
        total_vm: 100,
        locked_vm: 1,
        pinned_vm: 2,
        pgtables_bytes: 12 * 1024 + 512,
        hugetlb_pages: 0,
        count_file: 10,
        count_anon: -3,
        count_shmem: 1,
        sum_file: 11,
        sum_anon: 2,
        sum_shmem: 1,
        sum_swap: -1,
        ..Default::default()
    };
    p.head.tgid = 40;
    p.ns_tgid[0] = 40;
    p.ns_tgid[1] = 7;
    p.comm[..4].copy_from_slice(&[b'b' as _, b'u' as _, b'r' as _, b'n' as _]);
    let mut out = facts(ALL);
    out.extend(thread(40, 3, 1, 150_000_000, 5));
    out.extend(proc(&mut p, b"burn\0-x\0\0y z\0"));
    out.extend(thread(40, 0, 0, 150_000_000, 7));
    let pass = parse(&out).unwrap();
    assert_eq!(pass.facts, ALL);
    assert_eq!(pass.procs.len(), 1);
    let (rec, cmd) = &pass.procs[0];
    let t = pass.threads[&40];
    assert_eq!(t.runtime_ns, 300_000_000);
    let info = pid_info(rec, &t, pass.facts, UNITS, 65);
    let s = &info.stat;
    assert_eq!(s.pid, Some(40));
    assert_eq!(s.comm.as_deref(), Some("burn"));
    assert_eq!(s.state, Some(procfs::PidState::Stopped));
    assert_eq!((s.ppid, s.pgrp, s.session), (Some(1), Some(40), Some(40)));
    assert_eq!(s.minflt, Some(22));
    assert_eq!(s.majflt, Some(2));
    // 400 ms split 3:1, in whole 10 ms ticks.
    assert_eq!(
        (s.user_usecs, s.system_usecs),
        (Some(300_000), Some(100_000))
    );
    assert_eq!(s.num_threads, Some(2));
    // Started at 5.25 s: 525 ticks, 5 s.
    assert_eq!(s.running_secs, Some(60));
    // stat's rss: central counts, each at least 0.
    assert_eq!(s.rss_bytes, Some(11 * 4096));
    assert_eq!(s.processor, Some(1));
    let m = &info.status;
    assert_eq!(m.ns_tgid, Some(vec![40, 7]));
    assert_eq!(m.vm_size, Some(100 * 4096));
    assert_eq!((m.lock, m.pin), (Some(4096), Some(2 * 4096)));
    assert_eq!(
        (m.anon, m.file, m.shmem),
        (Some(2 * 4096), Some(11 * 4096), Some(4096))
    );
    assert_eq!(m.pte, Some(12 * 1024));
    assert_eq!(m.swap, Some(0));
    assert_eq!(m.huge_tlb, Some(0));
    assert_eq!((info.io.rbytes, info.io.wbytes), (Some(8193), Some(1024)));
    assert_eq!(
        cmdline(rec, cmd),
        Some(vec!["burn".into(), "-x".into(), "y z".into()])
    );
}

#[test]
fn what_the_text_lacks_is_none() {
    // A kernel thread: no mm, no Vm* lines, no command line; a dead task
    // prints 0 for its relatives.
    let mut p = proc_rec::default();
    p.head.tgid = 2;
    p.ppid = 9;
    let info = pid_info(
        &p,
        &Default::default(),
        task_fact::FACT_TGID_PID.0,
        UNITS,
        1,
    );
    assert_eq!(info.stat.ppid, Some(0));
    assert_eq!(info.stat.rss_bytes, Some(0));
    assert_eq!(info.status.vm_size, None);
    assert_eq!(info.status.ns_tgid, Some(vec![]));
    assert_eq!(info.io.rbytes, None);
    assert_eq!(cmdline(&p, b""), None);
    // Without the optional facts those fields are absent, as their lines.
    p.flags = proc_flags::PROC_HAS_MM.0;
    let info = pid_info(&p, &Default::default(), 0, UNITS, 1);
    assert_eq!(info.status.vm_size, Some(0));
    assert_eq!(
        (info.status.pin, info.status.pte, info.status.huge_tlb),
        (None, None, None)
    );
    assert_eq!(info.status.ns_tgid, None);
}

#[test]
fn proctitle_cuts_at_the_first_nul() {
    let p = proc_rec {
        flags: proc_flags::PROC_PROCTITLE.0,
        ..Default::default()
    };
    assert_eq!(
        cmdline(&p, b"nginx: worker\0xxxx"),
        Some(vec!["nginx: worker".into()])
    );
    assert_eq!(cmdline(&p, b"\0xxxx"), None);
    // Invalid UTF-8 is replaced, as fb_procfs does.
    let q = proc_rec::default();
    assert_eq!(cmdline(&q, b"a\xffb\0"), Some(vec!["a\u{fffd}b".into()]));
}

#[test]
fn malformed_output_is_an_error() {
    assert!(parse(b"").is_err(), "no facts record");
    let mut out = facts(0);
    out.extend(&thread(1, 0, 0, 0, 0)[..10]);
    assert!(parse(&out).is_err(), "truncated record");
    let mut out = facts(0);
    let mut p = proc_rec::default();
    let mut b = proc(&mut p, b"abc");
    b.truncate(b.len() - 1);
    out.extend(b);
    assert!(parse(&out).is_err(), "cmdline shorter than its record says");
    let mut out = facts(0);
    out.extend(bytes(&head(rec_kind(9), 8, 0)));
    assert!(parse(&out).is_err(), "unknown kind");
}

fn chars<const N: usize>(s: &str) -> [std::ffi::c_char; N] {
    let mut out = [0; N];
    for (d, b) in out.iter_mut().zip(s.bytes()) {
        *d = b as std::ffi::c_char;
    }
    out
}

#[test]
fn kernel_thread_names_are_procs() {
    let mut p = proc_rec {
        comm: chars("kworker/0:1"),
        long_name: chars("events_power_efficient"),
        ..Default::default()
    };
    let name = |p: &proc_rec| {
        pid_info(p, &Default::default(), 0, UNITS, 0)
            .stat
            .comm
            .unwrap()
    };
    assert_eq!(name(&p), "kworker/0:1");
    p.flags = proc_flags::PROC_WQ_IDLE.0;
    assert_eq!(name(&p), "kworker/0:1-events_power_efficient");
    p.flags = proc_flags::PROC_WQ_BUSY.0;
    assert_eq!(name(&p), "kworker/0:1+events_power_efficient");
    p.flags = proc_flags::PROC_FULL_NAME.0;
    p.long_name = chars("a_kthread_name_longer_than_comm");
    assert_eq!(name(&p), "a_kthread_name_longer_than_comm");
}
