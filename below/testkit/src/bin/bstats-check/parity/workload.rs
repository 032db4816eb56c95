//! The live tree parity samples: the fixture's cgroups and their
//! workloads, and the stirrer thread that changes the tree while it is
//! sampled (logging the processes it moves, which the check allows for).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use anyhow::Result;
use bstats_testkit::Controllers;
use bstats_testkit::Cpu;
use bstats_testkit::Cycle;
use bstats_testkit::Fixture;
use bstats_testkit::Work;

/// The live tree, under `<top>`: cpu/{b0,b1,b2} burners (b0 and b1 under
/// cpu.max), mem/wave (anon up and down; the stirrer switches its
/// memory.high on and off), mem/hold (anon and shmem held), io (direct IO
/// on /dev/scratch when the guest has it), mv/{a,b} (a burner the stirrer
/// moves between them: the room left behind goes idle with pressure
/// averages decaying), idle/{x,y} (a sleeper moved between them) and
/// churn/ (cgroups the stirrer makes and removes).
pub(super) struct Live {
    pub(super) fx: Fixture,
    wave: PathBuf,
    roamer: (libc::pid_t, [PathBuf; 2]),
    sleeper: (libc::pid_t, [PathBuf; 2]),
    churn: PathBuf,
    pub(super) disk: bool,
    pub(super) moves: Moves,
}

/// When the stirrer moved a process, and the cgroups it left and joined
/// (paths from the cgroup root): a sample's reads can span several moves
/// of the sleeper (every 0.7 s) when the machine is slow.
pub(super) struct Moves {
    root: PathBuf,
    log: Mutex<Vec<(Instant, [String; 2])>>,
}

impl Moves {
    fn record(&self, from: &Path, to: &Path) {
        let rel = |p: &Path| {
            let p = p.strip_prefix(&self.root).unwrap_or(p);
            p.to_string_lossy().into_owned()
        };
        let mut v = self.log.lock().expect("moves");
        v.push((Instant::now(), [rel(from), rel(to)]));
    }

    /// How many moves in or out of each cgroup fell in `from..to`.
    pub(super) fn within(&self, from: Instant, to: Instant) -> BTreeMap<String, usize> {
        let mut n = BTreeMap::new();
        for (t, cgroups) in self.log.lock().expect("moves").iter() {
            if (from..=to).contains(t) {
                for c in cgroups {
                    *n.entry(c.clone()).or_default() += 1;
                }
            }
        }
        n
    }
}

impl Live {
    pub(super) fn new(root: &Path) -> Result<Live> {
        let mut fx = Fixture::new(root, "parity", Controllers::All)?;
        let parent = |fx: &mut Fixture, rel: &str| -> Result<PathBuf> {
            let p = fx.mkdir(rel)?;
            fx.enable_controllers(&p)?;
            Ok(p)
        };
        let spin = Work {
            cpu: Cpu::Spin,
            ..Work::default()
        };
        parent(&mut fx, "cpu")?;
        let b0 = fx.mkdir("cpu/b0")?;
        fx.set(&b0, "cpu.max", "20000 100000")?;
        fx.spawn(&b0, &spin)?;
        // Two burners sharing half a CPU: throttled every period.
        let b1 = fx.mkdir("cpu/b1")?;
        fx.set(&b1, "cpu.max", "50000 100000")?;
        fx.spawn(&b1, &spin)?;
        fx.spawn(&b1, &spin)?;
        // Uncapped: competes with everything else (cpu pressure).
        let b2 = fx.mkdir("cpu/b2")?;
        fx.spawn(&b2, &spin)?;
        parent(&mut fx, "mem")?;
        let wave = fx.mkdir("mem/wave")?;
        fx.spawn(
            &wave,
            &Work {
                cycle: Some(Cycle::Memory {
                    max_mib: 48,
                    step_mib: 2,
                    step: Duration::from_millis(150),
                }),
                ..Work::default()
            },
        )?;
        let hold = fx.mkdir("mem/hold")?;
        let shm = PathBuf::from(format!("/tmp/{}-hold", fx.name()));
        fx.spawn(
            &hold,
            &Work {
                anon_mib: 16,
                file: Some((shm, 8)),
                ..Work::default()
            },
        )?;
        let disk = Path::new("/dev/scratch").exists();
        if disk {
            let io = fx.mkdir("io")?;
            fx.spawn(
                &io,
                &Work {
                    cycle: Some(Cycle::Disk("/dev/scratch".into())),
                    ..Work::default()
                },
            )?;
        }
        let mv = parent(&mut fx, "mv")?;
        fx.set(&mv, "cpu.max", "30000 100000")?;
        let rooms = [fx.mkdir("mv/a")?, fx.mkdir("mv/b")?];
        let roamer = (fx.spawn(&rooms[0], &spin)?, rooms);
        parent(&mut fx, "idle")?;
        let beds = [fx.mkdir("idle/x")?, fx.mkdir("idle/y")?];
        let sleeper = (fx.spawn(&beds[0], &Work::default())?, beds);
        let churn = parent(&mut fx, "churn")?;
        Ok(Live {
            fx,
            wave,
            roamer,
            sleeper,
            churn,
            disk,
            moves: Moves {
                root: root.to_path_buf(),
                log: Mutex::default(),
            },
        })
    }

    /// The churned cgroup and each of its ancestors, as paths from `root`
    /// ("" is the root).
    pub(super) fn churned(&self, root: &Path) -> BTreeSet<String> {
        let rel = self.churn.strip_prefix(root).unwrap_or(&self.churn);
        rel.ancestors()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Changes the tree every 100 ms until `stop`: cgroups made and removed
    /// in bursts (0.8 s of every 3 s: the samples between see an unchanged
    /// tree, decoded in place), memory.high on mem/wave switched every
    /// 1.5 s, the burner moved every 5 s, the sleeper every 0.7 s.
    pub(super) fn stir(&self, stop: &AtomicBool) -> Result<String> {
        let (mut made, mut removed, mut high, mut moves) = (0, 0, 0, 0);
        let mut present = BTreeSet::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut tick = 0u64;
        while !stop.load(Ordering::Relaxed) {
            tick += 1;
            if tick % 30 < 8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let name = format!("c{}", x % 6);
                let dir = self.churn.join(&name);
                if present.remove(&name) {
                    std::fs::remove_dir(&dir)?;
                    removed += 1;
                } else {
                    std::fs::create_dir(&dir)?;
                    present.insert(name);
                    made += 1;
                }
            }
            if tick.is_multiple_of(15) {
                let limit = if high % 2 == 0 { "24M" } else { "max" };
                self.fx.set(&self.wave, "memory.high", limit)?;
                high += 1;
            }
            // The burner every 5 s, then the sleeper every 0.7 s, each to
            // the other of its two cgroups.
            for (every, (pid, rooms)) in [(50, &self.roamer), (7, &self.sleeper)] {
                if tick.is_multiple_of(every) {
                    let to = (tick / every % 2) as usize;
                    self.fx.set(&rooms[to], "cgroup.procs", &pid.to_string())?;
                    self.moves.record(&rooms[1 - to], &rooms[to]);
                    moves += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(format!(
            "{made} cgroups made, {removed} removed, memory.high switched {high} times, \
             {moves} processes moved"
        ))
    }
}
