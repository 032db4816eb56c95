//! A record as below 0.9's sample: which files appear (wanted, the
//! record's CGB_HAS_* flags, the root). The values and units are decode::tests'.

use std::collections::BTreeSet;

use super::super::decode::tests::*;
use super::super::numa::tests::two_nodes;
use super::super::psi::PsiClock;
use super::super::psi::FEAT_PSI;
use super::super::psi::FEAT_PSI_CLOCK;
use super::super::psi::HAS_PSI_QUEUED;
use super::*;
use crate::FileSet;

/// A pass with its clock: pressure from every record that has it.
fn clocked() -> PsiPass {
    PsiPass {
        features: FEAT_PSI | FEAT_PSI_CLOCK,
        no_clock: 0,
        clock: Some(PsiClock {
            now: 11_000_000_000,
            period: 2_004_000_000,
        }),
    }
}

/// A fresh sample: what `fill` makes of a default one, with the pass's
/// clock.
fn sample(d: &Decoder, r: &Record, files: FileSet, prev: &mut PrevCputime) -> CgroupSample {
    sample_psi(d, r, &clocked(), files, prev)
}

fn sample_psi(
    d: &Decoder,
    r: &Record,
    psi: &PsiPass,
    files: FileSet,
    prev: &mut PrevCputime,
) -> CgroupSample {
    let mut s = CgroupSample::default();
    let row = PressureRow::default();
    fill_two_nodes(d, r, Some((psi, &row)), files, prev, &mut s);
    s
}

/// [`fill`] with the numa rows of a pass over two nodes.
fn fill_two_nodes(
    d: &Decoder,
    r: &Record,
    psi: Option<(&PsiPass, &PressureRow)>,
    files: FileSet,
    prev: &mut PrevCputime,
    s: &mut CgroupSample,
) {
    let (numa, rows, memory_nodes) = two_nodes();
    let pass = NumaRows {
        numa,
        memory_nodes,
        rows: &rows,
    };
    fill(d, r, Some((&pass, pass.of(0))), psi, files, prev, s);
}

/// [`full`] with its pressure row and numa rows.
fn full_psi() -> Record {
    let mut r = full();
    r.flags |= HAS_PSI | HAS_NUMA;
    r
}

#[test]
fn full_record_serves_every_file() {
    let s = sample(
        &decoder(),
        &full_psi(),
        FileSet::all(),
        &mut PrevCputime::new(),
    );
    assert_eq!(s.inode_number, Some(42));
    assert_eq!(
        s.cgroup_subtree_control.unwrap(),
        BTreeSet::from(["cpu".to_owned()])
    );
    assert_eq!(s.cpu_stat.unwrap().usage_usec, Some(4000));
    assert_eq!(s.cpu_weight, Some(100));
    assert!(s.cgroup_stat.is_some() && s.cgroup_controllers.is_some());
    assert!(s.cpu_max.is_some() && s.pressure.is_some());
    assert_eq!((s.tids_current, s.tids_max), (Some(7), Some(100)));
    assert!(s.cpuset_cpus.is_some() && s.cpuset_cpus_effective.is_some());
    assert!(s.cpuset_mems.is_some() && s.cpuset_mems_effective.is_some());
    assert!(s.memory_stat.is_some() && s.memory_numa_stat.is_some());
    assert_eq!(s.memory_current, Some(10 * PAGE as i64));
    assert_eq!(s.memory_swap_current, Some(2 * PAGE as i64));
    assert_eq!(
        (s.memory_min, s.memory_low, s.memory_high, s.memory_max),
        (Some(0), Some(PAGE as i64), Some(-1), Some(20 * PAGE as i64))
    );
    assert_eq!(s.memory_swap_max, Some(-1));
    assert_eq!(s.memory_zswap_max, Some(3 * PAGE as i64));
    assert!(s.memory_events.is_some() && s.memory_events_local.is_some());
    // Not a record's file.
    assert_eq!(s.io_stat, None);
}

#[test]
fn absent_controllers_leave_files_empty() {
    let mut r = full();
    r.flags = CGB_HAS_BSTAT;
    let s = sample(&decoder(), &r, FileSet::all(), &mut PrevCputime::new());
    // Without the cpu controller: cpu.stat's base fields only.
    let cpu = s.cpu_stat.unwrap();
    assert_eq!(cpu.usage_usec, Some(4000));
    assert_eq!(cpu.nr_periods, None);
    for (name, empty) in [
        ("pressure", s.pressure.is_none()),
        ("pids", s.tids_current.is_none() && s.tids_max.is_none()),
        ("cpu", s.cpu_weight.is_none() && s.cpu_max.is_none()),
        (
            "cpuset",
            s.cpuset_cpus.is_none() && s.cpuset_mems_effective.is_none(),
        ),
        ("memory.stat", s.memory_stat.is_none()),
        ("numa", s.memory_numa_stat.is_none()),
        (
            "memcg",
            s.memory_current.is_none() && s.memory_events.is_none(),
        ),
    ] {
        assert!(empty, "{name} without its HAS_ bit");
    }
    // The tree files need no controller.
    assert!(s.cgroup_stat.is_some() && s.cgroup_controllers.is_some());

    r.flags = 0;
    let s = sample(&decoder(), &r, FileSet::all(), &mut PrevCputime::new());
    assert_eq!(s.cpu_stat, None);
}

#[test]
fn only_wanted_files() {
    let files = [StatFile::MemoryCurrent].into_iter().collect();
    let s = sample(&decoder(), &full(), files, &mut PrevCputime::new());
    let want = CgroupSample {
        inode_number: Some(42),
        memory_current: Some(10 * PAGE as i64),
        ..Default::default()
    };
    assert_eq!(s, want);
}

#[test]
fn root_leaves_text_files_out() {
    let mut r = full();
    r.flags |= HAS_NUMA;
    r.level = 0;
    let s = sample(&decoder(), &r, FileSet::all(), &mut PrevCputime::new());
    // Read as text (RootText) or absent at the root.
    assert_eq!(s.cpu_stat, None);
    assert_eq!(s.pressure, None);
    assert_eq!(
        (s.tids_current, s.cpu_weight, s.memory_current),
        (None, None, None)
    );
    assert_eq!(
        (s.cpuset_cpus.is_some(), s.cpuset_mems.is_some()),
        (false, false)
    );
    // The root has these.
    assert!(s.cpuset_cpus_effective.is_some() && s.cpuset_mems_effective.is_some());
    assert!(s.memory_stat.is_some() && s.memory_numa_stat.is_some());
    assert!(s.cgroup_stat.is_some());
}

#[test]
fn fill_over_an_old_sample_is_a_fresh_sample() {
    let d = decoder();
    let mut r = full_psi();
    let mut s = sample(&d, &r, FileSet::all(), &mut PrevCputime::new());
    assert!(s.pressure.is_some());
    // Filled over the old sample, it equals a fresh one.
    let refill = |r: &Record, s: &mut CgroupSample| {
        let all = FileSet::all();
        let psi = (&clocked(), &PressureRow::default());
        fill_two_nodes(&d, r, Some(psi), all, &mut PrevCputime::new(), s);
        assert_eq!(*s, sample(&d, r, all, &mut PrevCputime::new()));
    };
    // The same record again: every set is reused, not allocated again.
    let cpus = s.cpuset_cpus.as_ref().unwrap().cpus.clone();
    refill(&r, &mut s);
    assert_eq!(s.cpuset_cpus.as_ref().unwrap().cpus, cpus);
    // Changed sets, and groups the record no longer holds, are not kept.
    r.controllers ^= 1;
    r.subtree_control = 0;
    r.cpus_effective[0] ^= 1;
    r.mems ^= 1;
    r.flags &= !(HAS_PSI | CGB_HAS_PIDS);
    s.io_stat = Some(Default::default());
    refill(&r, &mut s);
    assert_eq!(s.cgroup_subtree_control, Some(BTreeSet::new()));
    assert!(s.pressure.is_none() && s.tids_current.is_none() && s.io_stat.is_none());
    // Files no longer asked for are cleared; the tree's children are left.
    let mut some = FileSet::empty();
    some.insert(StatFile::CpuStat);
    some.insert(StatFile::MemoryCurrent);
    s.memory_zswap_current = Some(1);
    let children = Some([("c".to_string(), CgroupSample::default())].into());
    s.children = children.clone();
    let psi = (&clocked(), &PressureRow::default());
    fill_two_nodes(&d, &r, Some(psi), some, &mut PrevCputime::new(), &mut s);
    assert_eq!(s.children, children);
    s.children = None;
    assert_eq!(s, sample(&d, &r, some, &mut PrevCputime::new()));
    assert!(s.memory_current.is_some() && s.memory_stat.is_none() && s.cgroup_stat.is_none());
    assert!(s.memory_zswap_current.is_none() && s.cpuset_cpus.is_none());
}

#[test]
fn same_bits_is_set_equality_below_the_limit() {
    let set = |b: &[u32]| b.iter().copied().collect::<BTreeSet<u32>>();
    assert!(same_bits(&set(&[0, 65]), &[1, 2], 128));
    assert!(!same_bits(&set(&[0]), &[1, 2], 128), "a bit missing");
    assert!(
        !same_bits(&set(&[0, 1, 65]), &[1, 2], 128),
        "a bit too many"
    );
    assert!(
        same_bits(&set(&[0]), &[1, 2], 64),
        "bits past the limit do not count"
    );
    assert!(same_bits(&set(&[]), &[0b100], 2));
    assert!(!same_bits(&set(&[3]), &[0b1000], 2));
}

/// Pressure comes from the row only where the pass can tell it exactly
/// (PsiPass::exact, tested in psi::tests), and never without a row.
#[test]
fn pressure_where_the_row_is_exact() {
    let (d, r) = (decoder(), full_psi());
    let files = FileSet::all();
    let mut psi = clocked();
    assert!(sample_psi(&d, &r, &psi, files, &mut PrevCputime::new())
        .pressure
        .is_some());
    psi = psi.without_clock();
    let mut queued = r;
    queued.flags |= HAS_PSI_QUEUED;
    assert!(!psi.exact(&queued, &PressureRow::default()));
    assert!(
        sample_psi(&d, &queued, &psi, files, &mut PrevCputime::new())
            .pressure
            .is_none()
    );
    let mut s = CgroupSample::default();
    fill_two_nodes(&d, &r, None, files, &mut PrevCputime::new(), &mut s);
    assert!(s.pressure.is_none(), "a program without pressure");
}
