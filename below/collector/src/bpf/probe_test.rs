//! The plan as a function of kernel facts, on the host with no BPF: what
//! probing found ([`Probed`], or why BPF cannot run), whether the stream
//! files exist, and `--cgroup-backend`, to each file's backend and reason.
//! (A file that fails to parse at a sample is that file's error, not a
//! plan change: read_test's malformed_file_fails_that_file_only.)

use std::fs::File;
use std::os::fd::AsFd;

use super::contract::*;
use super::kernel::CPUS_POSSIBLE;
use super::kernel::NODES_POSSIBLE;
use super::load::Walk;
use super::numa::NUMA_NODES;
use super::probe::probe_with;
use super::probe::support;
use super::probe::Probed;
use super::psi;
use super::psi::PsiClock;
use super::psi::PsiPass;
use super::psi::FEAT_PSI;
use super::psi::FEAT_PSI_CLOCK;
use super::psi::PSI_NO_SYMBOLS;
use super::psi::PSI_ODD_HZ;
use crate::plan::BackendChoice;
use crate::plan::BackendKind;
use crate::plan::Capability;
use crate::plan::Plan;
use crate::Freshness;
use crate::NotServed;
use crate::StatFile;
use crate::StatFile::*;

use BackendKind::Bpf;
use BackendKind::Read;
use BackendKind::Stream;

/// What a pass found of pressure: FEAT_PSI* bits, why no clock.
fn psi_with(features: u32, no_clock: u32) -> PsiPass {
    PsiPass {
        features,
        no_clock,
        clock: (features & FEAT_PSI_CLOCK != 0).then_some(PsiClock { now: 1, period: 1 }),
    }
}

/// A kernel with every fact and feature (Debian 7.3 on a small machine).
fn full() -> Probed {
    Probed {
        cpus: Some(2),
        nodes: Some(1),
        has_numa_stat: true,
        numa_layout: Ok(()),
        numa_read: Ok(true),
        memcg_kfuncs: Ok(()),
        controllers: Ok(()),
        swap_files: Ok(()),
        hugetlb_accounting: Ok(()),
        features: CGB_FEAT_CPU_FLUSH | CGB_FEAT_MEMCG_KFUNCS,
        facts: (1 << KERNEL_FACTS.len()) - 1,
        psi: Ok(psi_with(FEAT_PSI | FEAT_PSI_CLOCK, 0)),
        walk: Walk::Rcu,
    }
}

/// What BTF says of a kernel without the memcg kfuncs.
const NO_MEMCG_KFUNCS: &str =
    "bpf_get_mem_cgroup, bpf_put_mem_cgroup, bpf_mem_cgroup_page_state, bpf_mem_cgroup_vm_events";

/// Without the memcg kfuncs (Debian 6.1, 6.12): the pass has no NUMA
/// values either.
fn no_memcg_kfuncs() -> Probed {
    Probed {
        features: CGB_FEAT_CPU_FLUSH,
        numa_read: Ok(false),
        memcg_kfuncs: Err(NO_MEMCG_KFUNCS.to_owned()),
        ..full()
    }
}

/// Without the fact named `name`.
fn without_fact(name: &str) -> Probed {
    let i = KERNEL_FACTS.iter().position(|f| f.name == name).unwrap();
    Probed {
        facts: full().facts & !(1 << i),
        ..full()
    }
}

/// The stream backend: our patched kernel's, or none (what stream.rs says
/// when cpu.stat.stream_interval is missing).
fn stream(present: bool) -> Capability {
    match present {
        true => Ok(crate::stream::support()),
        false => Err(no_streams()),
    }
}

fn no_streams() -> NotServed {
    NotServed::Unavailable(crate::stream::NO_STREAM_FILES.to_owned())
}

fn plan(choice: BackendChoice, bpf: Result<&Probed, NotServed>, streams: bool) -> Plan {
    let bpf = bpf.map(support);
    Plan::choose(choice, &bpf, &stream(streams)).unwrap()
}

/// What a file's choice says.
enum Says {
    /// Served, this fresh.
    Fresh(Freshness),
    /// `backend` did not serve it, for this reason.
    Not(BackendKind, NotServed),
}

use Says::Fresh;
use Says::Not;

fn kfunc(name: &str) -> NotServed {
    NotServed::MissingKfunc(name.to_owned())
}

/// Asserts each of `want`: the file's backend, and what its choice says.
fn check(p: &Plan, want: &[(StatFile, BackendKind, &[Says])]) {
    assert_eq!(p.files.len(), StatFile::ALL.len());
    for (file, backend, says) in want {
        let c = p.files.iter().find(|c| c.file == *file).unwrap();
        assert_eq!(c.backend, *backend, "{file}: {}", c.reason);
        for s in *says {
            match s {
                Fresh(fresh) => {
                    let served = c.served.as_ref().map(|s| &s.fresh);
                    assert_eq!(served, Some(fresh), "{file}: {}", c.reason);
                }
                Not(kind, why) => assert!(
                    c.not_served
                        .iter()
                        .any(|r| r.backend == *kind && r.why == *why),
                    "{file}: {:?} lacks {kind}: {why:?}",
                    c.not_served
                ),
            }
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
fn streams_then_read(p: &Plan, why: &[Says]) {
    check(
        p,
        &[
            (CpuStat, Stream, &[Fresh(Freshness::StreamInterval)]),
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
                (CpuStat, Bpf, &[Fresh(Freshness::FlushedPerPass)]),
                (MemoryCurrent, Bpf, &[Fresh(Freshness::ReadAtPass)]),
                (CpuPressure, Bpf, &[Fresh(Freshness::PressureAsRead)]),
            ],
        );
        let cpu = p.files.iter().find(|c| c.file == CpuStat).unwrap();
        assert!(cpu.served.as_ref().unwrap().root_as_text);
        // io.stat: BPF never; the stream file when there is one.
        let io: (BackendKind, &[Says]) = match streams {
            true => (Stream, &[Fresh(Freshness::StreamInterval)]),
            false => (
                Read,
                &[
                    Not(Bpf, NotServed::IoNotFlushable),
                    Not(Stream, no_streams()),
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
                &[Not(Bpf, kfunc(NO_MEMCG_KFUNCS)), Not(Stream, no_streams())],
            ),
            (MemoryNumaStat, Read, &[Not(Bpf, kfunc(NO_MEMCG_KFUNCS))]),
        ],
    );
    // With streams memory.stat comes from its stream; BPF still has cpu.stat.
    let p = plan(BackendChoice::Auto, Ok(&no_memcg_kfuncs()), true);
    check(
        &p,
        &[
            (MemoryStat, Stream, &[Fresh(Freshness::StreamInterval)]),
            (IoStat, Stream, &[]),
            (CpuStat, Bpf, &[]),
            (
                MemoryNumaStat,
                Read,
                &[
                    Not(Bpf, kfunc(NO_MEMCG_KFUNCS)),
                    Not(Stream, NotServed::NoStreamFile(MemoryNumaStat)),
                ],
            ),
        ],
    );
}

#[test]
fn bpf_unavailable_falls_to_streams_then_read() {
    let why = NotServed::Unavailable(
        "cannot load the cgroup iterator: Operation not permitted (os error 1)".into(),
    );
    let p = plan(BackendChoice::Auto, Err(why.clone()), true);
    streams_then_read(
        &p,
        &[
            Not(Bpf, why.clone()),
            Not(Stream, NotServed::NoStreamFile(MemoryCurrent)),
        ],
    );
    let p = plan(BackendChoice::Auto, Err(why.clone()), false);
    all_but(&p, &[], Read);
    check(
        &p,
        &[(CpuStat, Read, &[Not(Bpf, why), Not(Stream, no_streams())])],
    );
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
    let NotServed::Unavailable(error) = &why else {
        panic!("{why:?}")
    };
    assert_eq!(*error, format!("no BTF at {}", missing.display()));
    let p = Plan::choose(BackendChoice::Auto, &probe.capability, &stream(false)).unwrap();
    all_but(&p, &[], Read);
    check(&p, &[(MemoryStat, Read, &[Not(Bpf, why.clone())])]);
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
            (MemoryStat, Read, &[Not(Bpf, kfunc(NO_MEMCG_KFUNCS))]),
            (CpuStat, Bpf, &[]),
        ],
    );
    assert!(
        p.files
            .iter()
            .all(|c| c.not_served.iter().all(|r| r.backend == Bpf)),
        "{p}"
    );
    // stream: its three files, the rest plain read, even with BPF there.
    let p = plan(BackendChoice::Stream, Ok(&full()), true);
    streams_then_read(&p, &[Not(Stream, NotServed::NoStreamFile(MemoryCurrent))]);
    let e = Plan::choose(BackendChoice::Stream, &Ok(support(&full())), &stream(false)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("--cgroup-backend stream is unavailable: {}", no_streams())
    );
    // read: everything, whatever the kernel has, no backend tried.
    let p = plan(BackendChoice::Read, Ok(&full()), true);
    all_but(&p, &[], Read);
    assert!(p.files.iter().all(|c| c.not_served.is_empty()), "{p}");
}

#[test]
fn a_missing_kernel_fact_sends_its_files_to_read() {
    let lacks = |what: &str| Not(Bpf, NotServed::MissingFact(what.to_owned()));
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
            &[lacks("struct member mem_cgroup.zswap_max")],
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
                &[lacks("enum value cgroup_subsys_id.pids_cgrp_id")],
            )],
        );
    }
    // memory.stat needs no more than the memory controller and the kfuncs.
    let p = plan(BackendChoice::Auto, Ok(&without_fact("memory_ctrl")), false);
    check(
        &p,
        &[
            (
                MemoryStat,
                Read,
                &[lacks("enum value cgroup_subsys_id.memory_cgrp_id")],
            ),
            (MemoryEventsLocal, Read, &[]),
            (CpuStat, Bpf, &[]),
        ],
    );
}

#[test]
fn unknown_controllers_send_the_controller_files_to_read() {
    let why = "kernel has controllers the record has no bit for: foo";
    let found = Probed {
        controllers: Err(why.to_owned()),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&found), false);
    all_but(&p, &[IoStat, CgroupControllers, CgroupSubtreeControl], Bpf);
    for f in [CgroupControllers, CgroupSubtreeControl] {
        let says = Not(Bpf, NotServed::UnknownControllers(why.to_owned()));
        check(&p, &[(f, Read, &[says])]);
    }
}

#[test]
fn config_and_machine_limits() {
    let no_swap_why = "kernel has no memory.swap.* (CONFIG_SWAP)";
    let no_swap = Probed {
        swap_files: Err(no_swap_why.into()),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_swap), false);
    all_but(
        &p,
        &[IoStat, MemorySwapCurrent, MemorySwapMax, MemoryZswapMax],
        Bpf,
    );
    let why = NotServed::NoSwapFiles(no_swap_why.into());
    check(&p, &[(MemorySwapMax, Read, &[Not(Bpf, why)])]);

    // Unreadable mountinfo: whether memory.stat prints hugetlb is unknown.
    let unknown_why = "cannot tell whether memory.stat prints hugetlb: no mountinfo";
    let unknown = Probed {
        hugetlb_accounting: Err(unknown_why.into()),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&unknown), false);
    all_but(&p, &[IoStat, MemoryStat], Bpf);
    let why = NotServed::HugetlbAccounting(unknown_why.into());
    check(&p, &[(MemoryStat, Read, &[Not(Bpf, why)])]);

    let no_numa = Probed {
        has_numa_stat: false,
        numa_read: Ok(false),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_numa), false);
    check(
        &p,
        &[(MemoryNumaStat, Read, &[Not(Bpf, NotServed::NoNumaStat)])],
    );
    let many_nodes = Probed {
        nodes: Some(NUMA_NODES + 1),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&many_nodes), false);
    check(
        &p,
        &[
            (
                MemoryNumaStat,
                Read,
                &[Not(Bpf, NotServed::TooManyNumaNodes(NUMA_NODES))],
            ),
            (CpusetMems, Bpf, &[]),
        ],
    );
    let many_cpus = Probed {
        cpus: Some(CPU_WORDS * 64 + 1),
        nodes: Some(65),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&many_cpus), false);
    for f in [CpusetCpus, CpusetCpusEffective] {
        check(&p, &[(f, Read, &[Not(Bpf, NotServed::TooManyCpus)])]);
    }
    for f in [CpusetMems, CpusetMemsEffective] {
        check(&p, &[(f, Read, &[Not(Bpf, NotServed::TooManyNodes)])]);
    }

    // No /sys in a container: what needs the ids goes to the files, the
    // rest stays with BPF.
    let no_ids = Probed {
        cpus: None,
        nodes: None,
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_ids), false);
    let cpus = NotServed::NoPossibleIds(CPUS_POSSIBLE.to_owned());
    let nodes = NotServed::NoPossibleIds(NODES_POSSIBLE.to_owned());
    for f in [
        CpusetCpus,
        CpusetCpusEffective,
        CpuPressure,
        IoPressure,
        MemoryPressure,
    ] {
        check(&p, &[(f, Read, &[Not(Bpf, cpus.clone())])]);
    }
    for f in [CpusetMems, CpusetMemsEffective, MemoryNumaStat] {
        check(&p, &[(f, Read, &[Not(Bpf, nodes.clone())])]);
    }
    check(
        &p,
        &[
            (MemoryStat, Bpf, &[]),
            (CpuStat, Bpf, &[]),
            (PidsMax, Bpf, &[]),
        ],
    );
}

#[test]
fn pressure_without_the_clock_or_psi() {
    let pressure = [CpuPressure, IoPressure, MemoryPressure];
    let no_clock = Probed {
        psi: Ok(psi_with(FEAT_PSI, PSI_NO_SYMBOLS)),
        ..full()
    };
    // BPF for the groups whose files need no clock, text for the others.
    let p = plan(BackendChoice::Auto, Ok(&no_clock), false);
    all_but(&p, &[IoStat], Bpf);
    let idle_only =
        |p: &Plan, f: StatFile| match &p.files.iter().find(|c| c.file == f).unwrap().served {
            Some(s) => match &s.fresh {
                Freshness::PressureIdleOnly(NotServed::PsiNoClock(why)) => why.clone(),
                other => panic!("{f}: {other:?}"),
            },
            None => panic!("{f}: not served"),
        };
    for f in pressure {
        assert!(idle_only(&p, f).contains("CONFIG_KALLSYMS_ALL"));
    }
    let odd_hz = Probed {
        psi: Ok(psi_with(FEAT_PSI, PSI_ODD_HZ)),
        ..no_clock.clone()
    };
    let p = plan(BackendChoice::Auto, Ok(&odd_hz), false);
    assert_ne!(
        idle_only(&p, MemoryPressure),
        idle_only(
            &plan(BackendChoice::Auto, Ok(&no_clock), false),
            MemoryPressure
        ),
        "each code its own reason"
    );
    // The program with pressure did not load: below main's serves the rest.
    let no_fork = Probed {
        psi: Err("program bstats did not load: Permission denied".to_owned()),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_fork), false);
    let why = NotServed::NoPsi("program bstats did not load: Permission denied".into());
    for f in pressure {
        check(&p, &[(f, Read, &[Not(Bpf, why.clone())])]);
    }
    all_but(&p, &[IoStat, CpuPressure, IoPressure, MemoryPressure], Bpf);
    let no_psi = Probed {
        psi: Ok(psi_with(0, 0)),
        ..full()
    };
    let p = plan(BackendChoice::Auto, Ok(&no_psi), true);
    for f in pressure {
        check(
            &p,
            &[(
                f,
                Read,
                &[
                    Not(Bpf, NotServed::NoPsi(psi::left_to_files(0, 0).unwrap())),
                    Not(Stream, NotServed::NoStreamFile(f)),
                ],
            )],
        );
    }
}
