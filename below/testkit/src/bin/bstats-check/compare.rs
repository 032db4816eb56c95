//! Check 1: a loaded, frozen tree; every field a backend serves equals
//! plain read's.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::bail;
use anyhow::Result;
use bstats_collector::BackendChoice;
use bstats_collector::CgroupCollector;
use bstats_testkit::Controllers;
use bstats_testkit::Cpu;
use bstats_testkit::Fixture;
use bstats_testkit::Work;

use crate::cgroup_root;
use crate::options;
use crate::served::by_path;
use crate::served::field_of;
use crate::served::kind_of;

/// Field-by-field differences, "field: read=.. bpf=..", of the fields BPF
/// served (text against text says nothing about BPF).
fn diff(
    read: &model::CgroupSample,
    bpf: &model::CgroupSample,
    bpf_fields: &BTreeSet<&str>,
) -> Vec<String> {
    let (serde_json::Value::Object(a), serde_json::Value::Object(b)) = (
        serde_json::to_value(read).expect("samples serialize"),
        serde_json::to_value(bpf).expect("samples serialize"),
    ) else {
        unreachable!("a struct serializes to an object")
    };
    let mut out = Vec::new();
    for (k, va) in &a {
        if !bpf_fields.contains(k.as_str()) {
            continue;
        }
        let vb = &b[k];
        match (va, vb) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                for (kk, xa) in x {
                    if y.get(kk) != Some(xa) {
                        out.push(format!(
                            "{k}.{kk}: read={xa} bpf={}",
                            y.get(kk).unwrap_or(&serde_json::Value::Null)
                        ));
                    }
                }
            }
            _ if va != vb => out.push(format!("{k}: read={va} bpf={vb}")),
            _ => {}
        }
    }
    out
}

/// Check 1: a loaded, frozen tree of `n` (>= 50) cgroups; every field
/// `backend` serves (BPF for auto/bpf, streams for stream) must equal plain
/// read's.
pub fn compare(n: usize, backend: BackendChoice) -> Result<()> {
    let root = cgroup_root()?;
    let mut t = Fixture::new(&root, "check", Controllers::All)?;
    let per = 5;
    let mut leaves = Vec::new();
    for a in 0..n.div_ceil(per + 1) {
        let mid = t.mkdir(format!("a{a}"))?;
        t.enable_controllers(&mid)?;
        for b in 0..per {
            leaves.push(t.mkdir(format!("a{a}/b{b}"))?);
        }
    }
    let anon = |mib| Work {
        anon_mib: mib,
        ..Work::default()
    };
    for (i, leaf) in leaves.iter().enumerate() {
        match i % 6 {
            0 => {
                t.set(leaf, "memory.max", "64M")?;
                t.set(leaf, "memory.low", "4M")?;
                t.spawn(leaf, &anon(16))?;
            }
            1 => {
                let file = (format!("/tmp/{}-{i}", t.name()).into(), 8);
                t.spawn(
                    leaf,
                    &Work {
                        file: Some(file),
                        ..Work::default()
                    },
                )?;
            }
            2 => {
                t.set(leaf, "cpu.max", "10000 100000")?;
                t.set(leaf, "cpu.weight", "250")?;
                t.spawn(
                    leaf,
                    &Work {
                        cpu: Cpu::Spin,
                        ..Work::default()
                    },
                )?;
            }
            3 => {
                t.set(leaf, "pids.max", "64")?;
                for _ in 0..12 {
                    t.spawn(leaf, &Work::default())?;
                }
            }
            4 => {
                // OOM: memory.events max/oom/oom_kill move.
                t.set(leaf, "memory.max", "8M")?;
                t.set(leaf, "memory.swap.max", "0").ok();
                t.spawn_oom(leaf, &anon(64))?;
            }
            _ => {
                t.set(leaf, "memory.high", "16M")?;
                t.set(leaf, "cpuset.cpus", "0").ok();
                t.spawn(leaf, &anon(4))?;
            }
        }
    }
    println!(
        "compare: {} cgroups, {} of them loaded; loading 3 s",
        1 + t.created(),
        leaves.len()
    );
    std::thread::sleep(Duration::from_secs(3));
    t.freeze()?;
    // Let the periodic memcg flush (2 s) and psi averaging settle.
    std::thread::sleep(Duration::from_millis(4500));

    let mut read = CgroupCollector::new(&options(&root, BackendChoice::Read))?;
    // auto: BPF for every file this kernel lets it serve (all but the
    // text-only ones on 7.3; fewer on older kernels).
    let mut bpf = CgroupCollector::new(&options(&root, backend))?;
    print!("plan ({backend}):\n{}", bpf.plan());
    let bpf_fields: BTreeSet<&str> = bpf
        .plan()
        .files_of(kind_of(backend))
        .iter()
        .map(field_of)
        .chain(["inode_number"])
        .collect();
    // Frozen cgroups can still see the kernel move a few pages between LRU
    // lists (per-CPU batches drained late); a backend bug shows in every
    // attempt, such a move does not.
    for attempt in 1..=3 {
        if compare_once(&t.name(), &mut read, &mut bpf, &bpf_fields)? {
            println!("compare: OK");
            return Ok(());
        }
        println!("compare: attempt {attempt} differed; again in 1 s");
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!("compare failed in 3 attempts")
}

/// One comparison; true when the frozen tree agrees.
fn compare_once(
    top: &str,
    read: &mut CgroupCollector,
    bpf: &mut CgroupCollector,
    bpf_fields: &BTreeSet<&str>,
) -> Result<bool> {
    let rs = read.collect();
    let bs = bpf.collect();
    if !bs.report.errors.is_empty() {
        bail!("bpf snapshot errors: {:?}", bs.report.errors);
    }
    let (r, b) = (by_path(&rs), by_path(&bs));
    let rk: BTreeSet<_> = r.keys().collect();
    let bk: BTreeSet<_> = b.keys().collect();
    if rk != bk {
        bail!(
            "trees differ: only read {:?}, only bpf {:?}",
            rk.difference(&bk).collect::<Vec<_>>(),
            bk.difference(&rk).collect::<Vec<_>>()
        );
    }
    let mut bad = 0;
    let mut compared = 0;
    for (path, rsample) in &r {
        if *path != top && !path.starts_with(&format!("{top}/")) {
            continue; // only the frozen tree holds still
        }
        compared += 1;
        for d in diff(rsample, b[path], bpf_fields) {
            println!("DIFF {path}: {d}");
            bad += 1;
        }
    }
    let interesting = r[top];
    println!(
        "compare: {compared} frozen cgroups compared, {bad} differences; \
         e.g. {top} memory.stat anon={:?} pgfault={:?}, memory.numa_stat anon={:?}",
        interesting.memory_stat.as_ref().and_then(|m| m.anon),
        interesting.memory_stat.as_ref().and_then(|m| m.pgfault),
        interesting.memory_numa_stat.as_ref().map(|n| n
            .iter()
            .map(|(node, s)| (*node, s.anon))
            .collect::<Vec<_>>())
    );
    // Outside the frozen tree (the root) values move; show, do not fail.
    for d in diff(r[""], b[""], bpf_fields) {
        println!("root (not frozen, informational): {d}");
    }
    if compared < 50 {
        bail!("compare: only {compared} frozen cgroups");
    }
    Ok(bad == 0)
}
