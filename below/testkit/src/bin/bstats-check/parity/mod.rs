//! Live parity: cgroups that change while they are sampled (CPU burners
//! under cpu.max, memory growing and shrinking under a memory.high switched
//! on and off, disk IO, cgroups made and removed, processes moved). One
//! long-lived collector samples over and over, decoding into the tree it
//! keeps (as `record` does); the text files are read just before and just
//! after every sample, and every value the backend serves must lie where
//! they put it: a counter between the two reads, a gauge or a pressure
//! average within what the two showed (see [`tolerance::split_fits`],
//! [`tolerance::GAUGE_STREAK`] and [`tolerance::QUIET_STREAK`] for where
//! the kernel itself allows more). Planted errors ([`Plant`]) show the
//! check fails.
//!
//! This file holds the entry points and the sampling loop. The parts it
//! drives: [`workload`] (the live tree and its stirrer), [`values`] (what a
//! served value is and where it must lie), [`tolerance`] (where the kernel
//! allows more), [`check`] (one sample against the reads around it) and
//! [`plant`] (the planted errors).

mod check;
mod plant;
mod tolerance;
mod values;
mod workload;

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::ensure;
use anyhow::Context;
use anyhow::Result;
use bstats_collector::BackendChoice;
use bstats_collector::CgroupCollector;
use bstats_collector::FileSet;
use bstats_collector::FlatSample;
use bstats_collector::StatFile;
use bstats_collector::TopBy;
use bstats_collector::TopN;
use model::CgroupSample;

use crate::cgroup_root;
use crate::options;
use crate::served::by_path;
use crate::served::kind_of;
use crate::served::served;
use check::Around;
use check::Checker;
use check::Failure;
use check::Report;
pub use plant::Plant;
use plant::Planted;
use tolerance::GAUGE_STREAK;
use tolerance::QUIET_STREAK;
use workload::Live;
use workload::Moves;

/// Every `QUIET`th sample follows a pause with no pressure file read: a
/// read of a pressure file updates the kernel's averages when they are
/// due, so a read just before every sample would hide averages the
/// backend leaves stale.
const QUIET: usize = 4;
/// Longer than the kernel's 2 s averaging period.
const QUIET_PAUSE: Duration = Duration::from_millis(2200);

/// `samples` per run on a live tree: without top-N, with `--top N`, then
/// one run per planted error, each of which must fail.
pub fn parity(
    samples: usize,
    top: Option<usize>,
    backend: BackendChoice,
    plants: &[Plant],
) -> Result<()> {
    let root = cgroup_root()?;
    let live = Live::new(&root)?;
    println!(
        "parity: {} cgroups loaded{}; {samples} samples per run, backend {backend}",
        1 + live.fx.created(),
        if live.disk {
            ", disk IO on /dev/scratch"
        } else {
            ""
        }
    );
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stirrer = s.spawn(|| live.stir(&stop));
        // Pressure and rates build up before the first sample.
        std::thread::sleep(Duration::from_secs(2));
        let result = runs(
            &root,
            &live.churned(&root),
            &live.moves,
            samples,
            top,
            backend,
            plants,
        );
        stop.store(true, Ordering::Relaxed);
        let stirred = stirrer.join().expect("stirrer panicked")?;
        println!("parity: meanwhile {stirred}");
        result
    })
}

/// Runs `cmd` while the live tree stands and is stirred (for checks of
/// other readers, e.g. upstream's vmtest parity tests); removes it after.
pub fn live_tree(cmd: &[String]) -> Result<()> {
    let root = cgroup_root()?;
    let live = Live::new(&root)?;
    println!("live tree: {} cgroups loaded", 1 + live.fx.created());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stirrer = s.spawn(|| live.stir(&stop));
        std::thread::sleep(Duration::from_secs(2));
        let status = std::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .status()
            .with_context(|| format!("running {cmd:?}"));
        stop.store(true, Ordering::Relaxed);
        let stirred = stirrer.join().expect("stirrer panicked")?;
        println!("live tree: meanwhile {stirred}");
        let status = status?;
        ensure!(status.success(), "{cmd:?}: {status}");
        Ok(())
    })
}

fn runs(
    root: &Path,
    churned: &BTreeSet<String>,
    moves: &Moves,
    samples: usize,
    top: Option<usize>,
    backend: BackendChoice,
    plants: &[Plant],
) -> Result<()> {
    let mut bad = Vec::new();
    // Loading the BPF program takes seconds under TCG: the plants reuse the
    // collector of the run without top-N.
    let mut c = collector(root, backend, None)?;
    if !run(root, churned, moves, &mut c, samples, None, backend, None)?.passed() {
        bad.push("no top".to_owned());
    }
    if let Some(n) = top {
        let mut top = collector(root, backend, Some(n))?;
        if !run(
            root,
            churned,
            moves,
            &mut top,
            samples,
            Some(n),
            backend,
            None,
        )?
        .passed()
        {
            bad.push(format!("--cgroup-top {n}"));
        }
    }
    for &plant in plants {
        let name = format!("plant {plant:?}");
        let report = run(
            root,
            churned,
            moves,
            &mut c,
            samples.min(6),
            None,
            backend,
            Some(plant),
        )?;
        if !report.planted_on {
            println!(
                "parity: {name}: {} is not served here; not run",
                plant.file()
            );
        } else {
            let on_plant = report
                .failures
                .iter()
                .filter(|f| plant.caught_by(f))
                .count();
            if on_plant == 0 {
                println!("parity: {name}: NOT CAUGHT");
                bad.push(name);
            } else {
                println!(
                    "parity: {name}: caught ({on_plant} failures on the planted values, {} in all)",
                    report.failures.len()
                );
            }
        }
    }
    if !bad.is_empty() {
        bail!("parity failed: {}", bad.join(", "));
    }
    println!("parity: OK");
    Ok(())
}

/// A collector reading io.stat too (streams serve it), ranking by CPU
/// with `--cgroup-top N`.
fn collector(root: &Path, backend: BackendChoice, top: Option<usize>) -> Result<CgroupCollector> {
    let mut opts = options(root, backend);
    opts.collect_io_stat = true;
    opts.top = top.map(|n| TopN {
        n,
        by: TopBy::Cpu,
        keep: None,
    });
    let t0 = Instant::now();
    let c = CgroupCollector::new(&opts)?;
    println!("parity: collector ready in {:.1?}", t0.elapsed());
    Ok(c)
}

/// One run: a collector for `samples` (more while a gauge waits for its
/// confirming sample), the text read around each, every value checked.
#[allow(clippy::too_many_arguments)]
fn run(
    root: &Path,
    churned: &BTreeSet<String>,
    moves: &Moves,
    c: &mut CgroupCollector,
    samples: usize,
    top: Option<usize>,
    backend: BackendChoice,
    plant: Option<Plant>,
) -> Result<Report> {
    let label = match (top, plant) {
        (_, Some(p)) => format!("plant {p:?}"),
        (Some(n), None) => format!("--cgroup-top {n}"),
        (None, None) => "no top".to_owned(),
    };
    let files = served(c, kind_of(backend));
    if files.is_empty() {
        bail!("backend {backend} serves no file here:\n{}", c.plan());
    }
    println!("parity[{label}]: {} serves {files:?}", kind_of(backend));
    let pressure: FileSet = StatFile::ALL
        .iter()
        .copied()
        .filter(|f| f.is_pressure())
        .collect();
    let quiet_files = files.intersection(pressure);
    let mut walker = bstats_collector::Walker::new(root)?;
    let mut ck = Checker::new(files);
    let mut planted = Planted::default();
    let (mut taken, mut quiet_samples, mut unchanged, mut dropped) = (0, 0, 0, 0);
    let mut prev_paths = BTreeSet::new();
    // (id, usage_usec) of each cgroup at the read after the last sample.
    let mut used = HashMap::new();
    let mut notes = BTreeMap::new();
    let t0 = Instant::now();
    // below's tree, filled in place from one sample to the next.
    let mut sample = CgroupSample::default();
    while taken < samples || (!ck.gauges.open.is_empty() && taken < samples + GAUGE_STREAK) {
        taken += 1;
        let quiet = taken.is_multiple_of(QUIET) && !quiet_files.is_empty();
        if quiet {
            quiet_samples += 1;
            std::thread::sleep(QUIET_PAUSE);
        }
        let read_before = Instant::now();
        let before = walker.read_all(if quiet {
            files.difference(quiet_files)
        } else {
            files
        });
        let snap = c.sample(&mut sample);
        let since_before_us = read_before.elapsed().as_micros() as i128;
        // Pressure first: the shorter after a quiet sample, the less
        // likely the kernel's 2 s update falls in between.
        let after_p = walker.read_all(quiet_files);
        // cpu.stat tells idle cgroups (see QUIET_STREAK).
        let rest = files
            .difference(quiet_files)
            .union([StatFile::CpuStat].into_iter().collect());
        let after = merge(&after_p, &walker.read_all(rest));
        let moved = moves.within(read_before, Instant::now());
        let usage = |s: &CgroupSample| Some((s.inode_number, s.cpu_stat.as_ref()?.usage_usec?));
        let now: HashMap<&String, _> = after.iter().map(|(p, s)| (p, usage(s))).collect();
        let idle: BTreeSet<String> = now
            .iter()
            .filter(|(p, u)| u.is_some() && used.get(**p) == Some(*u))
            .map(|(p, _)| (*p).clone())
            .collect();
        used = now.into_iter().map(|(p, u)| (p.clone(), u)).collect();
        if let Some(p) = plant {
            ck.report.planted_on |= files.contains(p.file());
            planted.apply(p, &mut sample, String::new());
        }
        dropped += snap.dropped;
        let before = by_path(&before);
        report_errors(&snap, &after, taken, &mut ck.report, &mut notes);
        let after: BTreeMap<String, &CgroupSample> =
            after.iter().map(|(k, v)| (k.clone(), v)).collect();
        let around = Around {
            before: &before,
            after: &after,
            quiet: quiet.then_some(&idle),
            sample: taken,
            since_before_us,
            churned,
            moved: &moved,
        };
        let paths = ck.check_sample(&sample, &around);
        unchanged += usize::from(paths == prev_paths);
        prev_paths = paths;
    }
    let wall = t0.elapsed();
    println!(
        "parity[{label}]: {taken} samples ({quiet_samples} after a quiet pause, {unchanged} over an \
         unchanged tree) in {wall:.1?}; {} cgroup checks, {} skipped (made, removed or remade \
         while sampled){}",
        ck.cgroups,
        ck.skipped,
        if top.is_some() {
            format!("; top-N left out {dropped} cgroup samples")
        } else {
            String::new()
        }
    );
    for (n, times) in &notes {
        println!("  note ({times} samples): {n}");
    }
    let counts: Vec<String> = ck
        .per_file
        .iter()
        .map(|(f, n)| format!("{f} {n}"))
        .collect();
    println!("  values checked per file: {}", counts.join(", "));
    println!(
        "  retried: {} gauges/averages outside [before, after] but within the last sample's reads; \
         {} out at fewer than {GAUGE_STREAK} samples in a row",
        ck.within_last,
        ck.gauges.retried.len()
    );
    for f in ck.gauges.retried.iter().take(5) {
        println!("    retry: {f}");
    }
    if !ck.moved_within.is_empty() {
        println!(
            "  moved: {} pids.current values outside [before, after] by no more than the stirred \
             process's moves within the reads (it left and came back)",
            ck.moved_within.len()
        );
        for m in ck.moved_within.iter().take(5) {
            println!("    moved: {m}");
        }
    }
    if !quiet_files.is_empty() {
        println!(
            "  quiet: {} averages of idle cgroups checked against the read after; {} differed at fewer than \
             {QUIET_STREAK} quiet samples in a row, {} at the last one (unconfirmed)",
            ck.quiet_checked,
            ck.quiet.retried.len(),
            ck.quiet.open.len()
        );
        let open = ck.quiet.open.values().map(|s| &s[0]);
        for f in ck.quiet.retried.iter().chain(open).take(5) {
            println!("    quiet retry: {f}");
        }
    }
    for f in ck.report.failures.iter().take(40) {
        println!("  FAIL {f}");
    }
    if ck.report.failures.len() > 40 {
        println!("  ... {} failures in all", ck.report.failures.len());
    }
    if ck.cgroups < taken as u64 * 5 {
        bail!("parity[{label}]: only {} cgroups checked", ck.cgroups);
    }
    println!(
        "parity[{label}]: {}",
        if ck.report.passed() { "PASS" } else { "FAIL" }
    );
    Ok(ck.report)
}

/// Two walks of the same tree as one map by path (the first's values
/// first; the second fills what it lacks).
fn merge(a: &FlatSample, b: &FlatSample) -> BTreeMap<String, CgroupSample> {
    let mut out: BTreeMap<String, CgroupSample> = by_path(a)
        .into_iter()
        .map(|(k, v)| (k, v.clone()))
        .collect();
    for (k, v) in by_path(b) {
        let Some(o) = out.get_mut(&k) else { continue };
        if o.inode_number != v.inode_number {
            // Remade between the two walks.
            out.remove(&k);
            continue;
        }
        let pressure = o.pressure.take();
        *o = v.clone();
        o.pressure = pressure.or_else(|| v.pressure.clone());
    }
    // Only in the first walk: gone before the second.
    let second = by_path(b);
    out.retain(|k, _| second.contains_key(k));
    out
}

/// A sample's file errors fail the run, unless the cgroup was gone by the
/// read after; its notes (a backend falling back) are counted.
fn report_errors(
    snap: &bstats_collector::Report,
    after: &BTreeMap<String, CgroupSample>,
    sample: usize,
    report: &mut Report,
    notes: &mut BTreeMap<String, usize>,
) {
    for n in &snap.notes {
        *notes.entry(n.clone()).or_default() += 1;
    }
    for e in snap.errors.iter().filter(|e| after.contains_key(&e.cgroup)) {
        report.failures.push(Failure {
            sample,
            cgroup: e.cgroup.clone(),
            value_path: e.file.to_string(),
            before: String::new(),
            value: e.error.clone(),
            after: String::new(),
            why: "file error",
        });
    }
}
