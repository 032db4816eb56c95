//! The plan as a function of kernel facts, on the host with no BPF: what
//! probing found ([`Found`], or why BPF cannot run), whether the stream
//! files exist, and `--cgroup-backend`, to each file's backend and reason.
//! (A file that fails to parse at a sample is that file's error, not a
//! plan change: read_test's malformed_file_fails_that_file_only.)

use std::fs::File;
use std::os::fd::AsFd;

use super::contract::*;
use super::load::Walk;
use super::probe::probe_with;
use super::probe::support;
use super::probe::Found;
use crate::plan::BackendChoice;
use crate::plan::BackendKind;
use crate::plan::Capability;
use crate::plan::Plan;
use crate::StatFile;
use crate::StatFile::*;

use BackendKind::Bpf;
use BackendKind::Read;
use BackendKind::Stream;

/// A kernel with every fact and feature (Debian 7.3 on a small machine).
fn full() -> Found {
    Found {
        cpus: 2,
        nodes: 1,
        has_numa_stat: true,
        numa_layout: Ok(()),
        swap_files: Ok(()),
        features: FEAT_CPU_FLUSH | FEAT_MEMCG_KFUNCS | FEAT_PSI | FEAT_PSI_CLOCK | FEAT_NUMA,
        facts: (1 << KERNEL_FACTS.len()) - 1,
        psi_no_clock: 0,
        walk: Walk::Rcu,
    }
}

/// Without the memcg kfuncs (Debian 6.1, 6.12): the pass has no NUMA
/// values either.
fn no_memcg_kfuncs() -> Found {
    Found {
        features: FEAT_CPU_FLUSH | FEAT_PSI | FEAT_PSI_CLOCK,
        ..full()
    }
}

/// Without the fact named `name`.
fn without_fact(name: &str) -> Found {
    let i = KERNEL_FACTS.iter().position(|f| f.name == name).unwrap();
    Found {
        facts: full().facts & !(1 << i),
        ..full()
    }
}

/// The stream backend: our patched kernel's, or this reason for none (the
/// words stream.rs says when cpu.stat.stream_interval is missing).
fn stream(present: bool) -> Capability {
    match present {
        true => Ok(crate::stream::support()),
        false => Err(crate::stream::NO_STREAM_FILES.to_owned()),
    }
}

fn plan(choice: BackendChoice, bpf: Result<&Found, &str>, streams: bool) -> Plan {
    let bpf = bpf.map(support).map_err(str::to_owned);
    Plan::choose(choice, &bpf, &stream(streams)).unwrap()
}

/// Asserts each of `want`: the file's backend, and words its reason has.
fn check(p: &Plan, want: &[(StatFile, BackendKind, &[&str])]) {
    assert_eq!(p.files.len(), StatFile::ALL.len());
    for (file, backend, words) in want {
        let c = p.files.iter().find(|c| c.file == *file).unwrap();
        assert_eq!(c.backend, *backend, "{file}: {}", c.reason);
        for w in *words {
            assert!(c.reason.contains(w), "{file}: {:?} lacks {w:?}", c.reason);
        }
    }
}

/// Every file but `except` by `backend`.
fn all_but(p: &Plan, except: &[StatFile], backend: BackendKind) {
    for c in p.files.iter().filter(|c| !except.contains(&c.file)) {
        assert_eq!(c.backend, backend, "{}: {}", c.file, c.reason);
    }
}

/// Streams serve their three files, everything else is plain read, with
/// `why` among memory.current's reasons.
fn streams_then_read(p: &Plan, why: &[&str]) {
    check(
        p,
        &[
            (CpuStat, Stream, &[]),
            (MemoryStat, Stream, &[]),
            (IoStat, Stream, &[]),
        ],
    );
    all_but(p, &[CpuStat, MemoryStat, IoStat], Read);
    check(p, &[(MemoryCurrent, Read, why)]);
}

#[test]
fn full_kernel_serves_all_but_io_stat() {
    for streams in [false, true] {
        let p = plan(BackendChoice::Auto, Ok(&full()), streams);
        all_but(&p, &[IoStat], Bpf);
        check(
            &p,
            &[
                (
                    CpuStat,
                    Bpf,
                    &["supported by this kernel", "flushed once per pass"],
                ),
                (MemoryCurrent, Bpf, &["read at the pass"]),
                (CpuPressure, Bpf, &["sched_clock"]),
            ],
        );
        // io.stat: BPF never; the stream file when there is one.
        let io: (BackendKind, &[&str]) = match streams {
            true => (Stream, &["last interval flush"]),
            false => (
                Read,
                &[
                    "bpf: io.stat: BPF cannot flush the io css",
                    "stream: the kernel has no stream files",
                ],
            ),
        };
        check(&p, &[(IoStat, io.0, io.1)]);
    }
}

#[test]
fn no_memcg_kfuncs_reads_memory_stat_or_streams_it() {
    let p = plan(BackendChoice::Auto, Ok(&no_memcg_kfuncs()), false);
    all_but(&p, &[IoStat, MemoryStat, MemoryNumaStat], Bpf);
    check(
        &p,
        &[
            (
                MemoryStat,
                Read,
                &[
                    "bpf: kernel lacks kfunc bpf_mem_cgroup_page_state",
                    "stream: the kernel has no stream files",
                ],
            ),
            (
                MemoryNumaStat,
                Read,
                &["bpf: kernel lacks kfunc bpf_mem_cgroup_flush_stats"],
            ),
        ],
    );
    // With streams memory.stat comes from its stream; BPF still has cpu.stat.
    let p = plan(BackendChoice::Auto, Ok(&no_memcg_kfuncs()), true);
    check(
        &p,
        &[
            (MemoryStat, Stream, &["last interval flush"]),
            (IoStat, Stream, &[]),
            (CpuStat, Bpf, &[]),
            (
                MemoryNumaStat,
                Read,
                &[
                    "bpf_mem_cgroup_flush_stats",
                    "stream: the kernel has no memory.numa_stat.stream",
                ],
            ),
        ],
    );
}

#[test]
fn bpf_unavailable_falls_to_streams_then_read() {
    let why = "cannot load the cgroup iterator: Operation not permitted (os error 1)";
    let p = plan(BackendChoice::Auto, Err(why), true);
    streams_then_read(
        &p,
        &[
            &format!("bpf: {why}"),
            "stream: the kernel has no memory.current.stream",
        ],
    );
    let p = plan(BackendChoice::Auto, Err(why), false);
    all_but(&p, &[], Read);
    check(&p, &[(CpuStat, Read, &[why, "no stream files"])]);
}

/// Probing itself, against a BTF file that is not there: it stops before
/// loading anything (no root needed), with the reason the plan shows.
#[test]
fn btf_missing_stops_probing_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let root_fd = File::open(root.path()).unwrap();
    let missing = root.path().join("vmlinux");
    let probe = probe_with(root_fd.as_fd(), Some(&missing));
    assert!(probe.backend.is_none());
    let why = probe.capability.clone().unwrap_err();
    assert!(why.contains("no BTF at"), "{why}");
    let p = Plan::choose(BackendChoice::Auto, &probe.capability, &stream(false)).unwrap();
    all_but(&p, &[], Read);
    check(&p, &[(MemoryStat, Read, &[&format!("bpf: {why}")])]);
    let e = Plan::choose(BackendChoice::Bpf, &probe.capability, &stream(true)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("--cgroup-backend bpf is unavailable: {why}")
    );
}

#[test]
fn forced_backends() {
    // bpf: plain read where BPF cannot serve, with BPF's reason alone.
    let p = plan(BackendChoice::Bpf, Ok(&no_memcg_kfuncs()), true);
    check(
        &p,
        &[
            (
                MemoryStat,
                Read,
                &["bpf: kernel lacks kfunc bpf_mem_cgroup_page_state"],
            ),
            (CpuStat, Bpf, &[]),
        ],
    );
    assert!(!p.files.iter().any(|c| c.reason.contains("stream")), "{p}");
    // stream: its three files, the rest plain read, even with BPF there.
    let p = plan(BackendChoice::Stream, Ok(&full()), true);
    streams_then_read(&p, &["stream: the kernel has no memory.current.stream"]);
    let stream_cap = stream(false);
    let e = Plan::choose(BackendChoice::Stream, &Ok(support(&full())), &stream_cap).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--cgroup-backend stream is unavailable: the kernel has no stream files"),
        "{e}"
    );
    // read: everything, whatever the kernel has.
    let p = plan(BackendChoice::Read, Ok(&full()), true);
    all_but(&p, &[], Read);
    check(&p, &[(CpuStat, Read, &["--cgroup-backend read"])]);
}

#[test]
fn a_missing_kernel_fact_sends_its_files_to_read() {
    let p = plan(
        BackendChoice::Auto,
        Ok(&without_fact("memcg_zswap_max")),
        false,
    );
    all_but(&p, &[IoStat, MemoryZswapMax], Bpf);
    check(
        &p,
        &[(
            MemoryZswapMax,
            Read,
            &["kernel lacks struct member mem_cgroup.zswap_max"],
        )],
    );
    let p = plan(BackendChoice::Auto, Ok(&without_fact("pids_ctrl")), false);
    all_but(&p, &[IoStat, PidsCurrent, PidsMax], Bpf);
    for f in [PidsCurrent, PidsMax] {
        check(
            &p,
            &[(
                f,
                Read,
                &["kernel lacks enum value cgroup_subsys_id.pids_cgrp_id"],
            )],
        );
    }
    // memory.stat needs no more than the memory controller and the kfuncs.
    let p = plan(BackendChoice::Auto, Ok(&without_fact("memory_ctrl")), false);
    check(
        &p,
        &[
            (MemoryStat, Read, &["memory_cgrp_id"]),
            (MemoryEventsLocal, Read, &[]),
            (CpuStat, Bpf, &[]),
        ],
    );
}

#[test]
fn config_and_machine_limits() {
    let no_swap = Found {
        swap_files: Err("kernel has no memory.swap.* (CONFIG_SWAP)".into()),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_swap), false);
    all_but(
        &p,
        &[IoStat, MemorySwapCurrent, MemorySwapMax, MemoryZswapMax],
        Bpf,
    );
    check(&p, &[(MemorySwapMax, Read, &["CONFIG_SWAP"])]);

    let no_numa = Found {
        has_numa_stat: false,
        features: full().features & !FEAT_NUMA,
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_numa), false);
    check(
        &p,
        &[(
            MemoryNumaStat,
            Read,
            &["kernel has no memory.numa_stat (CONFIG_NUMA)"],
        )],
    );
    let many_nodes = Found {
        nodes: NUMA_NODES + 1,
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&many_nodes), false);
    check(
        &p,
        &[
            (MemoryNumaStat, Read, &["NUMA nodes"]),
            (CpusetMems, Bpf, &[]),
        ],
    );
    let many_cpus = Found {
        cpus: CPU_WORDS * 64 + 1,
        nodes: 65,
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&many_cpus), false);
    for f in [CpusetCpus, CpusetCpusEffective] {
        check(&p, &[(f, Read, &["more CPUs than a record holds"])]);
    }
    for f in [CpusetMems, CpusetMemsEffective] {
        check(&p, &[(f, Read, &["more nodes than a record holds"])]);
    }
}

#[test]
fn pressure_without_the_clock_or_psi() {
    let pressure = [CpuPressure, IoPressure, MemoryPressure];
    let no_clock = Found {
        features: full().features & !FEAT_PSI_CLOCK,
        psi_no_clock: PSI_NO_SYMBOLS,
        ..full()
    };
    // BPF for the groups whose files need no clock, text for the others.
    let p = plan(BackendChoice::Auto, Ok(&no_clock), false);
    all_but(&p, &[IoStat], Bpf);
    for f in pressure {
        check(
            &p,
            &[(
                f,
                Bpf,
                &[
                    "averages at 0",
                    "the others and the root cgroup: text",
                    "cannot bring the averages",
                    "CONFIG_KALLSYMS_ALL",
                ],
            )],
        );
    }
    let odd_hz = Found {
        psi_no_clock: PSI_ODD_HZ,
        ..no_clock
    };
    let p = plan(BackendChoice::Auto, Ok(&odd_hz), false);
    check(&p, &[(MemoryPressure, Bpf, &["HZ does not divide 10^6"])]);
    let no_psi = Found {
        features: full().features & !(FEAT_PSI | FEAT_PSI_CLOCK),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_psi), true);
    for f in pressure {
        check(
            &p,
            &[(
                f,
                Read,
                &["no cgroup PSI (CONFIG_PSI)", "stream: the kernel has no"],
            )],
        );
    }
}
