//! The frozen tree tests/e2e/record-guest.sh records with each backend.

use std::process::Command;
use std::time::Duration;

use anyhow::ensure;
use anyhow::Context;
use anyhow::Result;
use bstats_testkit::Controllers;
use bstats_testkit::Cpu;
use bstats_testkit::Fixture;
use bstats_testkit::Work;

use crate::cgroup_root;

/// `<top>/ra` (CPU-capped, has used CPU, wrote 4 MiB to tmpfs) and
/// `<top>/rb/rc` (idle), frozen; runs `cmd` with TREE=<top's name> while
/// the tree stands, then removes it.
pub fn frozen_tree(cmd: &[String]) -> Result<()> {
    let mut t = Fixture::new(
        &cgroup_root()?,
        "record",
        Controllers::Only(&["cpu", "memory", "io", "pids"]),
    )?;
    let ra = t.mkdir("ra")?;
    let rb = t.mkdir("rb")?;
    t.set(&rb, "cgroup.subtree_control", "+memory +pids")?;
    let rc = t.mkdir("rb/rc")?;
    t.set(&ra, "cpu.max", "50000 100000")?;
    t.spawn(
        &ra,
        &Work {
            file: Some(("/tmp/fa".into(), 4)),
            cpu: Cpu::For(Duration::from_millis(500)),
            ..Work::default()
        },
    )?;
    t.spawn(&rc, &Work::default())?;
    std::thread::sleep(Duration::from_secs(3));
    t.freeze()?;
    // The periodic memcg flush (2 s) settles what froze mid-update.
    std::thread::sleep(Duration::from_secs(4));
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("TREE", t.name())
        .status()
        .with_context(|| format!("running {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?}: {status}");
    Ok(())
}
