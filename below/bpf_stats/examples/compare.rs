//! Compares one backend's snapshot with plain read's, value by value.
//!
//!   compare --root <cgroup dir> --backend <bpf|stream|auto> [--tries N]
//!
//! Meant for frozen cgroups (`cgroup.freeze`), whose stats cannot change
//! between the two reads: any difference is a backend bug. Prints the plan,
//! then each differing field as `<cgroup>: <backend line> != <read line>`;
//! exits 1 on differences.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use bpf_stats::BackendChoice;
use bpf_stats::CgroupCollector;
use bpf_stats::Options;
use bpf_stats::Snapshot;
use model::CgroupSample;

/// Pressure averages decay even in frozen cgroups; totals do not.
fn clear_pressure_avgs(s: &mut CgroupSample) {
    if let Some(p) = s.pressure.as_mut() {
        let mut all = vec![&mut p.cpu.some, &mut p.io.some, &mut p.io.full];
        all.extend([&mut p.memory.some, &mut p.memory.full]);
        all.extend(p.cpu.full.as_mut());
        for m in all {
            (m.avg10, m.avg60, m.avg300) = (None, None, None);
        }
    }
}

/// cgroup path → the sample's fields, one per line.
fn by_path(snap: &Snapshot) -> BTreeMap<String, Vec<String>> {
    (0..snap.nodes.len())
        .map(|i| {
            let mut s = snap.nodes[i].sample.clone();
            clear_pressure_avgs(&mut s);
            let lines = format!("{:#?}", s).lines().map(str::to_owned).collect();
            (snap.path_of(i), lines)
        })
        .collect()
}

fn diff(a: &Snapshot, b: &Snapshot) -> Vec<String> {
    let (a, b) = (by_path(a), by_path(b));
    let mut out = Vec::new();
    for (path, la) in &a {
        let Some(lb) = b.get(path) else {
            out.push(format!("{:?}: only in the backend's snapshot", path));
            continue;
        };
        if la.len() != lb.len() {
            out.push(format!(
                "{:?}: different shape\n{}\n!=\n{}",
                path,
                la.join("\n"),
                lb.join("\n")
            ));
            continue;
        }
        for (x, y) in la.iter().zip(lb) {
            if x != y {
                out.push(format!("{:?}: {} != {}", path, x.trim(), y.trim()));
            }
        }
    }
    out.extend(
        b.keys()
            .filter(|p| !a.contains_key(*p))
            .map(|p| format!("{:?}: only in plain read's snapshot", p)),
    );
    out
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let root = PathBuf::from(arg("--root").context("--root is required")?);
    let backend: BackendChoice = arg("--backend")
        .context("--backend is required")?
        .parse()
        .map_err(anyhow::Error::msg)?;
    let tries: u32 = arg("--tries").map_or(Ok(5), |t| t.parse())?;
    let opts = |backend| Options {
        root: root.clone(),
        backend,
        collect_io_stat: true,
        filter: None,
        stream_interval: Some(Duration::from_millis(100)),
    };
    let mut fast = CgroupCollector::new(&opts(backend))?;
    let mut plain = CgroupCollector::new(&opts(BackendChoice::Read))?;
    println!("plan of --backend {}:\n{}", backend, fast.plan());
    for attempt in 1..=tries {
        let a = fast.collect();
        let b = plain.collect();
        let a2 = fast.collect();
        for e in a.errors.iter().chain(&b.errors) {
            println!("file error: {}", e);
        }
        if !diff(&a, &a2).is_empty() {
            println!(
                "attempt {}: the backend's snapshot changed between reads; again",
                attempt
            );
            continue;
        }
        let d = diff(&a, &b);
        println!(
            "{} cgroups compared, {} differences",
            a.nodes.len(),
            d.len()
        );
        for line in &d {
            println!("DIFF {}", line);
        }
        if !d.is_empty() || !a.errors.is_empty() || !b.errors.is_empty() {
            bail!("{} differs from plain read", backend);
        }
        return Ok(());
    }
    bail!(
        "no stable snapshot in {} tries: are the cgroups frozen?",
        tries
    )
}
