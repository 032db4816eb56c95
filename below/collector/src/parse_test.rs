use super::*;

const MEMORY_STAT: &str = "\
anon 1048576
file 2097152
kernel 393216
kernel_stack 16384
pagetables 8192
sec_pagetables 0
percpu 0
sock 0
vmalloc 0
shmem 4096
zswap 0
zswapped 0
file_mapped 0
file_dirty 0
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon 1052672
active_anon 0
inactive_file 2093056
active_file 4096
unevictable 0
slab_reclaimable 100000
slab_unreclaimable 200000
slab 300000
workingset_refault_anon 0
workingset_refault_file 1
workingset_activate_anon 2
workingset_activate_file 3
workingset_restore_anon 4
workingset_restore_file 5
workingset_nodereclaim 6
pgdemote_kswapd 0
pgscan 7
pgsteal 8
pgscan_kswapd 0
pgrefill 9
pgactivate 10
pgdeactivate 11
pglazyfree 12
pglazyfreed 13
thp_fault_alloc 14
thp_collapse_alloc 15
pgfault 16
pgmajfault 17
";

#[test]
fn memory_stat_all_known_keys() {
    let s = memory_stat(MEMORY_STAT).unwrap();
    assert_eq!(s.anon, Some(1048576));
    assert_eq!(s.file, Some(2097152));
    assert_eq!(s.slab, Some(300000));
    assert_eq!(s.shmem, Some(4096));
    assert_eq!(s.pgscan, Some(7));
    assert_eq!(s.thp_collapse_alloc, Some(15));
    assert_eq!(s.pgmajfault, Some(17));
    // Every field below keeps is present in the fixture.
    let json = format!("{:?}", s);
    assert!(!json.contains("None"), "{}", json);
}

#[test]
fn flat_keyed_skips_unknown_keys_and_keeps_missing_none() {
    let s = cpu_stat("usage_usec 10\nfuture_key 3\ncore_sched.force_idle_usec 0\n").unwrap();
    assert_eq!(s.usage_usec, Some(10));
    assert_eq!(s.user_usec, None);
}

#[test]
fn flat_keyed_errors_name_the_line() {
    let e = cpu_stat("usage_usec 10\nuser_usec ten\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.msg.contains("ten"), "{}", e);
    let e = cpu_stat("usage_usec 10\nuser_usec 1 2\n").unwrap_err();
    assert_eq!(e.line, 2);
    let e = memory_events("low\n").unwrap_err();
    assert_eq!(e.line, 1);
    // Negative values are not counters.
    assert!(cpu_stat("usage_usec -1\n").is_err());
}

#[test]
fn empty_or_unknown_only_files_are_malformed() {
    for text in ["", "\n", "some_new_key 1\n"] {
        let e = memory_stat(text).unwrap_err();
        assert_eq!(e.line, 0, "{:?}", text);
    }
}

#[test]
fn truncated_files() {
    // A read cut mid-line leaves a key without a value.
    assert_eq!(memory_stat("anon 1\nfile").unwrap_err().line, 2);
    // Cut mid-number: still a number, the value is what was read.
    assert_eq!(cpu_stat("usage_usec 12").unwrap().usage_usec, Some(12));
    assert!(pressure("some avg10=0.00 avg60").is_err());
    assert!(io_stat("8:0 rbytes").is_err());
}

#[test]
fn events_and_cgroup_stat() {
    let e = memory_events("low 1\nhigh 2\nmax 3\noom 4\noom_kill 5\noom_group_kill 0\n").unwrap();
    assert_eq!(
        (e.low, e.high, e.max, e.oom, e.oom_kill),
        (Some(1), Some(2), Some(3), Some(4), Some(5))
    );
    let l = memory_events_local("max 3\n").unwrap();
    assert_eq!(l.max, Some(3));
    let c = cgroup_stat("nr_descendants 4\nnr_dying_descendants 1\nnr_subsys_cpu 2\n").unwrap();
    assert_eq!(
        (c.nr_descendants, c.nr_dying_descendants),
        (Some(4), Some(1))
    );
}

#[test]
fn single_values_and_max() {
    assert_eq!(single_u64("42\n"), Ok(42));
    assert_eq!(single_i64("4096\n"), Ok(4096));
    assert_eq!(u64_or_max("max\n"), Ok(-1));
    assert_eq!(u64_or_max("1073741824\n"), Ok(1073741824));
    assert_eq!(single_u32("100\n"), Ok(100));
    assert!(single_u64("max\n").is_err());
    assert!(single_i64("max\n").is_err());
    assert!(u64_or_max("maximum\n").is_err());
    assert!(u64_or_max("-5\n").is_err());
    assert_eq!(single_u64("").unwrap_err().line, 0);
    assert!(single_u32("4294967296\n").is_err());
    assert!(u64_or_max("18446744073709551615\n").is_err());
}

#[test]
fn cpu_max_forms() {
    let m = cpu_max("max 100000\n").unwrap();
    assert_eq!((m.max_usec, m.period_usec), (-1, 100000));
    let m = cpu_max("50000 100000\n").unwrap();
    assert_eq!((m.max_usec, m.period_usec), (50000, 100000));
    assert!(cpu_max("50000\n").is_err());
    assert!(cpu_max("50000 100000 1\n").is_err());
    assert!(cpu_max("").is_err());
}

#[test]
fn cpuset_lists() {
    assert_eq!(
        cpuset("0-3,8,10-11\n")
            .unwrap()
            .cpus
            .into_iter()
            .collect::<Vec<_>>(),
        [0, 1, 2, 3, 8, 10, 11]
    );
    assert!(cpuset("\n").unwrap().cpus.is_empty());
    assert!(cpuset("").unwrap().cpus.is_empty());
    assert_eq!(mem_nodes("0\n").unwrap().nodes.len(), 1);
    assert!(cpuset("3-1\n").is_err());
    assert!(cpuset("a-b\n").is_err());
    assert!(cpuset("1,,2\n").is_err());
}

#[test]
fn controller_lists() {
    let c = controllers("cpuset cpu io memory pids\n").unwrap();
    assert_eq!(c.len(), 5);
    assert!(c.contains("memory"));
    assert!(controllers("\n").unwrap().is_empty());
    assert!(controllers("").unwrap().is_empty());
}

#[test]
fn pressure_some_and_full() {
    let (some, full) = pressure(
        "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=67\n",
    )
    .unwrap();
    assert_eq!(some.avg10, Some(1.5));
    assert_eq!(some.total, Some(12345));
    assert_eq!(full.unwrap().total, Some(67));
    let (_, full) = pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
    assert!(full.is_none());
    assert!(pressure("").is_err());
    assert_eq!(
        pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nhalf avg10=0.00\n")
            .unwrap_err()
            .line,
        2
    );
    assert!(pressure("some avg10=x avg60=0.00 avg300=0.00 total=0\n").is_err());
    assert!(pressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").is_err());
}

#[test]
fn io_stat_devices() {
    let m = io_stat(
        "253:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6 cost.usage=7 cost.wait=8 cost.indebt=9 cost.indelay=10\n7:0\n8:0 rbytes=9 wbytes=0 rios=1 wios=0 dbytes=0 dios=0 new_key=3\n",
    )
    .unwrap();
    assert_eq!(m.len(), 2);
    let d = &m["253:0"];
    assert_eq!(
        (d.rbytes, d.cost_usage, d.cost_indelay),
        (Some(1), Some(7), Some(10))
    );
    assert_eq!(m["8:0"].rbytes, Some(9));
    assert!(io_stat("").unwrap().is_empty());
    assert_eq!(
        io_stat("8:0 rbytes=1\n8:1 rbytes=one\n").unwrap_err().line,
        2
    );
    assert!(io_stat("8:0 unknown=1\n").is_err());
}

#[test]
fn numa_stat_nodes() {
    let m = numa_stat("anon N0=4096 N1=0\nfile N0=8192 N1=4096\nfuture N0=1 N1=1\n").unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m[&0].anon, Some(4096));
    assert_eq!(m[&1].file, Some(4096));
    assert!(numa_stat("").is_err());
    assert_eq!(numa_stat("anon N0=1\nfile\n").unwrap_err().line, 2);
    assert!(numa_stat("anon X0=1\n").is_err());
    assert!(numa_stat("anon N0=x\n").is_err());
    assert!(numa_stat("future N0=1\n").is_err());
}

#[test]
fn setters_report_unknown_keys() {
    let mut s = cgroupfs_ext::MemoryStat::default();
    assert!(set_memory_stat(&mut s, "anon", 1));
    assert!(!set_memory_stat(&mut s, "percpu", 1));
    assert_eq!(s.anon, Some(1));
    // A key below-cgroupfs 0.9.0 has no field for: kept beside it, and
    // left out of the struct below 0.9.0's model holds.
    assert!(set_memory_stat(&mut s, "swapcached", 2));
    assert_eq!(s.swapcached, Some(2));
    let base: MemoryStat = s.into();
    assert_eq!(base.anon, Some(1));
}
