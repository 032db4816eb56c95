//! Check 4: cgroups made and removed while sampling.

use std::collections::BTreeSet;
use std::fs;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use anyhow::bail;
use anyhow::Result;
use bstats_collector::BackendChoice;
use bstats_collector::CgroupCollector;
use bstats_testkit::Controllers;
use bstats_testkit::Fixture;

use crate::cgroup_root;
use crate::options;

/// Cgroups made and removed while sampling; every sample must
/// hold exactly the live ones (names whose state changed during the
/// sample are allowed either way).
pub fn churn(seconds: u64) -> Result<()> {
    let root = cgroup_root()?;
    let mut t = Fixture::new(&root, "churn", Controllers::All)?;
    for i in 0..5 {
        t.mkdir(format!("fixed{i}"))?;
    }
    // intents[k] = (name, create?) is logged before op k runs; `done`
    // counts completed ops.
    let intents = Arc::new(Mutex::new(Vec::<(String, bool)>::new()));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let top = t.top().to_owned();
    let prefix = format!("{}/", t.name());
    let churner = {
        let (intents, done, stop) = (intents.clone(), done.clone(), stop.clone());
        std::thread::spawn(move || -> Result<()> {
            let mut live = BTreeSet::new();
            let mut x = 12345u64;
            while !stop.load(Ordering::Relaxed) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let name = format!("c{}", (x >> 33) % 40);
                let create = !live.contains(&name);
                intents.lock().unwrap().push((name.clone(), create));
                if create {
                    fs::create_dir(top.join(&name))?;
                    live.insert(name);
                } else {
                    fs::remove_dir(top.join(&name))?;
                    live.remove(&name);
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
    };
    let mut c = CgroupCollector::new(&options(&root, BackendChoice::Bpf))?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut samples, mut checked) = (0, 0);
    while Instant::now() < deadline {
        let start = done.load(Ordering::SeqCst);
        let snap = c.collect();
        let log: Vec<(String, bool)> = intents.lock().unwrap().clone();
        samples += 1;
        if !snap.report.errors.is_empty() {
            bail!("sample {samples}: errors {:?}", snap.report.errors);
        }
        let mut live = BTreeSet::new();
        for (name, create) in &log[..start] {
            if *create {
                live.insert(name.as_str());
            } else {
                live.remove(name.as_str());
            }
        }
        let moving: BTreeSet<&str> = log[start..].iter().map(|(n, _)| n.as_str()).collect();
        let seen: BTreeSet<String> = (0..snap.nodes.len())
            .map(|i| snap.path_of(i))
            .filter_map(|p| p.strip_prefix(&prefix).map(str::to_owned))
            .collect();
        for i in 0..5 {
            if !seen.contains(&format!("fixed{i}")) {
                bail!("sample {samples}: fixed{i} missing");
            }
        }
        for name in (0..40).map(|i| format!("c{i}")) {
            if moving.contains(name.as_str()) {
                continue;
            }
            checked += 1;
            match (live.contains(name.as_str()), seen.contains(&name)) {
                (true, false) => bail!("sample {samples}: live {name} missing"),
                (false, true) => bail!("sample {samples}: stale {name} present"),
                _ => {}
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().expect("churner panicked")?;
    println!(
        "churn: {samples} samples, {} mkdir/rmdir, {checked} presence checks: OK",
        done.load(Ordering::SeqCst)
    );
    Ok(())
}
