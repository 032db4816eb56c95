//! Live parity: cgroups that change while they are sampled (CPU burners
//! under cpu.max, memory growing and shrinking under a memory.high switched
//! on and off, disk IO, cgroups made and removed, processes moved). One
//! long-lived collector samples over and over, decoding into the tree it
//! keeps (as `record` does); the text files are read just before and just
//! after every sample, and every value the backend serves must lie where
//! they put it: a counter between the two reads, a gauge or a pressure
//! average within what the two showed (see [`split_fits`],
//! [`GAUGE_STREAK`] and [`QUIET_STREAK`] for where the kernel itself
//! allows more). Planted errors ([`Plant`]) show the check fails.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
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
use bstats_testkit::Controllers;
use bstats_testkit::Cpu;
use bstats_testkit::Cycle;
use bstats_testkit::Fixture;
use bstats_testkit::Work;
use cgroupfs::Pressure;
use cgroupfs::PressureMetrics;
use model::CgroupSample;
use serde_json::Value;

use crate::cgroup_root;
use crate::options;
use crate::served::by_path;
use crate::served::file_of_value;
use crate::served::kind_of;
use crate::served::served;

/// An error planted in every collected sample before it is checked: the
/// check must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Plant {
    /// memory.stat's anon and file swapped.
    Swap,
    /// The pressure averages kept from each cgroup's first sample.
    Freeze,
    /// cpu.stat kept from each cgroup's first sample (an old value left by
    /// decoding in place).
    Stale,
}

impl Plant {
    /// Whether `f` is about a planted value.
    fn caught_by(self, f: &Failure) -> bool {
        let v = f.value_path.as_str();
        match self {
            Plant::Swap => v == "memory_stat.anon" || v == "memory_stat.file",
            Plant::Freeze => v.starts_with("pressure.") && v.contains(".avg"),
            Plant::Stale => v.starts_with("cpu_stat."),
        }
    }

    /// The file the error is in: a plant on a file the backend does not
    /// serve is not checked, so cannot be caught.
    fn file(self) -> StatFile {
        match self {
            Plant::Swap => StatFile::MemoryStat,
            Plant::Freeze => StatFile::CpuPressure,
            Plant::Stale => StatFile::CpuStat,
        }
    }
}

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

/// The live tree, under `<top>`: cpu/{b0,b1,b2} burners (b0 and b1 under
/// cpu.max), mem/wave (anon up and down; the stirrer switches its
/// memory.high on and off), mem/hold (anon and shmem held), io (direct IO
/// on /dev/scratch when the guest has it), mv/{a,b} (a burner the stirrer
/// moves between them: the room left behind goes idle with pressure
/// averages decaying), idle/{x,y} (a sleeper moved between them) and
/// churn/ (cgroups the stirrer makes and removes).
struct Live {
    fx: Fixture,
    wave: PathBuf,
    roamer: (libc::pid_t, [PathBuf; 2]),
    sleeper: (libc::pid_t, [PathBuf; 2]),
    churn: PathBuf,
    disk: bool,
    moves: Moves,
}

/// When the stirrer moved a process, and the cgroups it left and joined
/// (paths from the cgroup root): a sample's reads can span several moves
/// of the sleeper (every 0.7 s) when the machine is slow.
struct Moves {
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
    fn within(&self, from: Instant, to: Instant) -> BTreeMap<String, usize> {
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
    fn new(root: &Path) -> Result<Live> {
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
    fn churned(&self, root: &Path) -> BTreeSet<String> {
        let rel = self.churn.strip_prefix(root).unwrap_or(&self.churn);
        rel.ancestors()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Changes the tree every 100 ms until `stop`: cgroups made and removed
    /// in bursts (0.8 s of every 3 s: the samples between see an unchanged
    /// tree, decoded in place), memory.high on mem/wave switched every
    /// 1.5 s, the burner moved every 5 s, the sleeper every 0.7 s.
    fn stir(&self, stop: &AtomicBool) -> Result<String> {
        let (mut made, mut removed, mut high, mut moves) = (0, 0, 0, 0);
        let mut present = BTreeSet::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut tick = 0u64;
        let move_to =
            |pid: libc::pid_t, to: &Path| self.fx.set(to, "cgroup.procs", &pid.to_string());
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
            if tick.is_multiple_of(50) {
                let (from, to) = (tick / 50 % 2 + 1, tick / 50 % 2);
                move_to(self.roamer.0, &self.roamer.1[to as usize])?;
                let r = &self.roamer.1;
                self.moves.record(&r[from as usize % 2], &r[to as usize]);
                moves += 1;
            }
            if tick.is_multiple_of(7) {
                let (from, to) = (tick / 7 % 2 + 1, tick / 7 % 2);
                move_to(self.sleeper.0, &self.sleeper.1[to as usize])?;
                let b = &self.sleeper.1;
                self.moves.record(&b[from as usize % 2], &b[to as usize]);
                moves += 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(format!(
            "{made} cgroups made, {removed} removed, memory.high switched {high} times, \
             {moves} processes moved"
        ))
    }
}

/// Where a value must lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Only grows: between the reads before and after.
    Counter,
    /// Goes up and down (levels, limits, sets): within what the two reads
    /// showed.
    Gauge,
    /// A pressure average, to the file's two decimals: as a gauge.
    Average,
}

fn kind(path: &str) -> Kind {
    let last = path.rsplit('.').next().unwrap_or(path);
    if last.starts_with("avg") {
        return Kind::Average;
    }
    let counter = match path.split('.').next().unwrap_or(path) {
        "cpu_stat" | "memory_events" | "memory_events_local" | "io_stat" => true,
        "pressure" => last == "total",
        "memory_stat" | "memory_numa_stat" => ["pg", "workingset_", "thp_"]
            .iter()
            .any(|p| last.starts_with(p)),
        _ => false,
    };
    if counter {
        Kind::Counter
    } else {
        Kind::Gauge
    }
}

/// The values of `s` in `files`, by dotted path in its JSON; objects are
/// followed down, anything else (numbers, sets) is one value.
fn values(s: &CgroupSample, files: FileSet) -> BTreeMap<String, Value> {
    fn flatten(prefix: String, v: Value, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    flatten(format!("{prefix}.{k}"), v, out);
                }
            }
            Value::Null => {}
            v => {
                out.insert(prefix, v);
            }
        }
    }
    let Value::Object(mut m) = serde_json::to_value(s).expect("samples serialize") else {
        unreachable!("a struct serializes to an object")
    };
    m.remove("children");
    let mut out = BTreeMap::new();
    for (k, v) in m {
        flatten(k, v, &mut out);
    }
    out.retain(|k, _| file_of_value(k).is_some_and(|f| files.contains(f)));
    out
}

/// A number as the check compares it: averages in hundredths (the file
/// prints two decimals), others exactly.
fn number(v: &Value, kind: Kind) -> Option<i128> {
    match kind {
        Kind::Average => v.as_f64().map(|f| (f * 100.0).round() as i128),
        _ => v
            .as_u64()
            .map(i128::from)
            .or_else(|| v.as_i64().map(i128::from)),
    }
}

/// Whether `after` is average `sample` of an idle group one more of the
/// kernel's 2 s updates on: the group's update fell between the sample and
/// the read after (its phase is fixed, so the same group can meet it at
/// every quiet sample). Nothing stalled, an update is avg * EXP / FIXED_1
/// (kernel/sched/psi.c), printed in hundredths rounded down; the sample's
/// unrounded value lies in [s, s + 1) hundredths.
fn one_update_later(key: &str, sample: &Value, after: &Value) -> bool {
    const FIXED_1: i128 = 2048;
    let exp = match key.rsplit('.').next() {
        Some("avg10") => 1677,
        Some("avg60") => 1981,
        Some("avg300") => 2034,
        _ => return false,
    };
    let (Some(s), Some(a)) = (number(sample, Kind::Average), number(after, Kind::Average)) else {
        return false;
    };
    // One hundredth of slack below for the kernel's fixed-point rounding.
    (s * exp / FIXED_1 - 1..=(s + 1) * exp / FIXED_1).contains(&a) && a < s
}

/// Whether `v` lies where `before` and `after` put it.
fn fits(kind: Kind, before: &Value, v: &Value, after: &Value) -> bool {
    match (number(before, kind), number(v, kind), number(after, kind)) {
        (Some(b), Some(v), Some(a)) => match kind {
            Kind::Counter => b <= v && v <= a,
            _ => b.min(a) <= v && v <= b.max(a),
        },
        // Sets, strings: one of the two.
        _ => v == before || v == after,
    }
}

#[derive(Clone, Debug)]
struct Failure {
    sample: usize,
    cgroup: String,
    value_path: String,
    before: String,
    value: String,
    after: String,
    why: &'static str,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cgroup = if self.cgroup.is_empty() {
            "<root>"
        } else {
            &self.cgroup
        };
        write!(
            f,
            "sample {} {cgroup} {}: before={} value={} after={} ({})",
            self.sample, self.value_path, self.before, self.value, self.after, self.why
        )
    }
}

#[derive(Default)]
struct Report {
    failures: Vec<Failure>,
    /// Whether the run had a plant on a served file.
    planted_on: bool,
}

impl Report {
    fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The text reads of one cgroup around a sample: its id, before, after.
type Reads = (
    Option<i64>,
    BTreeMap<String, Value>,
    BTreeMap<String, Value>,
);

/// A gauge (or average) outside [before, after] is out only when it is
/// outside the reads of the sample before too, and fails when it is out at
/// this many samples in a row. The kernel flushes memcg stats when enough
/// updates pend (and every 2 s), so the three reads of one sample can each
/// show a level at a different flush, out and back (seen: memory.stat's
/// kernel at the root while cgroups come and go, three samples in a row);
/// cgroup.stat's counts move with every mkdir and rmdir. A swapped or
/// frozen value stays out.
const GAUGE_STREAK: usize = 3;

/// Each cgroup's reads at the last sample, and at this one.
#[derive(Default)]
struct LastReads {
    last: HashMap<String, Reads>,
    this: HashMap<String, Reads>,
}

impl LastReads {
    /// `seen` and the value `key` had at the last sample's reads of the
    /// same cgroup.
    fn widen(&self, path: &str, ino: Option<i64>, key: &str, mut seen: Vec<Value>) -> Vec<Value> {
        if let Some((_, b, a)) = self.last.get(path).filter(|r| r.0 == ino) {
            seen.extend(b.get(key).cloned());
            seen.extend(a.get(key).cloned());
        }
        seen
    }

    fn end_round(&mut self) {
        self.last = std::mem::take(&mut self.this);
    }
}

/// Whether `v` lies within the values `seen` (numbers), or is one of them.
fn fits_among(kind: Kind, seen: &[Value], v: &Value, slack: i128) -> bool {
    let nums: Option<Vec<i128>> = seen.iter().map(|x| number(x, kind)).collect();
    match (nums, number(v, kind)) {
        (Some(ns), Some(v)) if !ns.is_empty() => {
            ns.iter().min().is_some_and(|lo| *lo - slack <= v)
                && ns.iter().max().is_some_and(|hi| v <= *hi + slack)
        }
        _ => seen.contains(v),
    }
}
/// memcg's statistics reach readers at flushes, and a read flushes only
/// once enough updates are pending (MEMCG_CHARGE_BATCH, 64 pages, per
/// CPU): any read of a memory.stat or memory.numa_stat size may be that
/// far from another's at the same moment. Seen at a systemd host's root
/// under churn: the sample 24 KiB off reads before and after that agreed.
fn memcg_flush_slack(key: &str) -> i128 {
    if !(key.starts_with("memory_stat.") || key.starts_with("memory_numa_stat.")) {
        return 0;
    }
    // SAFETY: sysconf has no preconditions.
    let (cpus, page) = unsafe {
        (
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    64 * i128::from(cpus.max(1)) * i128::from(page.max(4096))
}

/// A quiet sample's average that differs from the read after at this many
/// quiet samples in a row fails: once can be a group that was not idle
/// after all. (One kernel update between the sample and that read is no
/// difference: [`one_update_later`].)
///
/// Only cgroups idle through the pause are checked there: an active one's
/// averages are updated by a kernel worker that runs late under load
/// (TCG: often by a large part of the period), and a reader sees the old
/// ones until it has; an idle cgroup's are updated by nothing but a read
/// of its pressure files, so a backend must compute them as the read
/// would.
const QUIET_STREAK: usize = 2;

/// Values out of range at consecutive rounds (samples, or quiet samples),
/// by (cgroup, value).
struct Streaks {
    need: usize,
    open: HashMap<(String, String), Vec<Failure>>,
    next: HashMap<(String, String), Vec<Failure>>,
    /// The first of each streak that ended short.
    retried: Vec<Failure>,
}

impl Streaks {
    fn new(need: usize) -> Self {
        Streaks {
            need,
            open: HashMap::new(),
            next: HashMap::new(),
            retried: Vec::new(),
        }
    }

    /// One more out of range: the whole streak once it is long enough.
    fn hit(&mut self, id: (String, String), f: Failure) -> Option<Vec<Failure>> {
        let mut streak = self.open.remove(&id).unwrap_or_default();
        streak.push(f);
        if streak.len() >= self.need {
            return Some(streak);
        }
        self.next.insert(id, streak);
        None
    }

    /// Ends a round: streaks it did not continue were retries.
    fn end_round(&mut self) {
        let ended = std::mem::replace(&mut self.open, std::mem::take(&mut self.next));
        self.retried
            .extend(ended.into_values().map(|s| s[0].clone()));
    }
}

/// The checks of one run and what they counted.
struct Checker {
    files: FileSet,
    per_file: BTreeMap<StatFile, u64>,
    cgroups: u64,
    skipped: u64,
    gauges: Streaks,
    reads: LastReads,
    /// Gauges outside [before, after], within the last sample's reads.
    within_last: u64,
    /// pids.current outside [before, after] by no more than the moves of
    /// a stirred process in or out within the reads: what they were.
    moved_within: Vec<String>,
    quiet: Streaks,
    quiet_checked: u64,
    report: Report,
}

/// The text files read around one sample.
struct Around<'a> {
    before: &'a BTreeMap<String, &'a CgroupSample>,
    after: &'a BTreeMap<String, &'a CgroupSample>,
    /// Quiet sample: its pressure files were read after it only. The
    /// cgroups that used no CPU since the sample before.
    quiet: Option<&'a BTreeSet<String>>,
    sample: usize,
    /// µs from the start of the reads before to the end of the sample.
    since_before_us: i128,
    /// The churned cgroup and its ancestors, by path.
    churned: &'a BTreeSet<String>,
    /// Moves of a stirred process in or out of a cgroup, by path, from
    /// the start of the reads before to the end of the reads after.
    moved: &'a BTreeMap<String, usize>,
}

/// cpu.stat's user_usec and system_usec split usage_usec the way the
/// kernel's cputime_adjust() does at each read, from a state only text
/// reads move on: the read after can split differently from a read at the
/// sample would have. Each is still never below the read before, and at
/// most what the read after's usage leaves beside the other's read before
/// (+1: each is rounded down to µs apart). None for other values.
fn split_fits(
    key: &str,
    before: &BTreeMap<String, Value>,
    v: &Value,
    after: &BTreeMap<String, Value>,
) -> Option<bool> {
    let other = match key {
        "cpu_stat.user_usec" => "cpu_stat.system_usec",
        "cpu_stat.system_usec" => "cpu_stat.user_usec",
        _ => return None,
    };
    let n = |m: &BTreeMap<String, Value>, k: &str| number(m.get(k)?, Kind::Counter);
    let (b, v) = (n(before, key)?, number(v, Kind::Counter)?);
    let (usage, other_b) = (n(after, "cpu_stat.usage_usec")?, n(before, other)?);
    Some(b <= v && v <= usage - other_b + 1)
}

/// A pressure total as a read at the sample prints it: the kernel adds
/// each interval's stall time weighted by each CPU's non-idle jiffies,
/// which does not add up over split intervals, so the read after (one
/// interval since the read before) can print less than a read at the
/// sample would have. It is never below the read before, and at most what
/// the read before showed plus the time since (a CPU's stall time in an
/// interval is at most its length). None for other values.
fn psi_total_fits(
    key: &str,
    before: &BTreeMap<String, Value>,
    v: &Value,
    after: &BTreeMap<String, Value>,
    since_before_us: i128,
) -> Option<bool> {
    if !(key.starts_with("pressure.") && key.ends_with(".total")) {
        return None;
    }
    let n = |m: &BTreeMap<String, Value>| number(m.get(key)?, Kind::Counter);
    let (b, a, v) = (n(before)?, n(after)?, number(v, Kind::Counter)?);
    Some(b <= v && v <= a.max(b + since_before_us))
}

impl Checker {
    fn new(files: FileSet) -> Self {
        Checker {
            files,
            per_file: BTreeMap::new(),
            cgroups: 0,
            skipped: 0,
            gauges: Streaks::new(GAUGE_STREAK),
            reads: LastReads::default(),
            within_last: 0,
            moved_within: Vec::new(),
            quiet: Streaks::new(QUIET_STREAK),
            quiet_checked: 0,
            report: Report::default(),
        }
    }

    /// Checks every cgroup of the sample `tree`; returns its paths.
    fn check_sample(&mut self, tree: &CgroupSample, around: &Around) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![(String::new(), tree)];
        while let Some((path, s)) = stack.pop() {
            for (name, c) in s.children.iter().flatten() {
                let p = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}/{name}")
                };
                stack.push((p, c));
            }
            self.check_cgroup(&path, s, around);
            seen.insert(path);
        }
        self.gauges.end_round();
        self.reads.end_round();
        if around.quiet.is_some() {
            self.quiet.end_round();
        }
        seen
    }

    fn check_cgroup(&mut self, path: &str, s: &CgroupSample, around: &Around) {
        let (Some(b), Some(a)) = (around.before.get(path), around.after.get(path)) else {
            // Made or removed while sampled.
            self.skipped += 1;
            return;
        };
        if b.inode_number != a.inode_number {
            // Removed and made again while sampled.
            self.skipped += 1;
            return;
        }
        self.cgroups += 1;
        let fail = |value_path: &str, before: String, value: String, after: String, why| Failure {
            sample: around.sample,
            cgroup: path.to_owned(),
            value_path: value_path.to_owned(),
            before,
            value,
            after,
            why,
        };
        if s.inode_number != b.inode_number {
            let show = |i: Option<i64>| format!("{i:?}");
            let f = fail(
                "inode_number",
                show(b.inode_number),
                show(s.inode_number),
                show(a.inode_number),
                "another cgroup",
            );
            self.report.failures.push(f);
            return;
        }
        let (vb, vs, va) = (
            values(b, self.files),
            values(s, self.files),
            values(a, self.files),
        );
        let keys: BTreeSet<&String> = vb.keys().chain(vs.keys()).chain(va.keys()).collect();
        for key in keys {
            let file = file_of_value(key).expect("values() keeps served files");
            let show = |v: Option<&Value>| v.map_or("none".to_owned(), Value::to_string);
            let (bv, sv, av) = (vb.get(key), vs.get(key), va.get(key));
            // Counts of descendants that the stirrer's mkdir/rmdir bursts
            // move many times within one sample's reads: not a gauge the
            // two reads bound.
            if file == StatFile::CgroupStat && around.churned.contains(path) {
                continue;
            }
            let k = kind(key);
            let quiet = around.quiet.filter(|_| file.is_pressure());
            if quiet.is_some_and(|idle| k == Kind::Average && !idle.contains(path)) {
                continue;
            }
            let quiet = quiet.is_some();
            // The stirrer moves the sleeper every 0.7 s: on a slow machine
            // it can leave and come back between the two reads, and the
            // sample sees it gone (before=1 value=0 after=1). Each move
            // changes the count by one, so the value is within that many
            // of both reads. No move: the two reads bound it as before.
            let moves = around.moved.get(path).copied().unwrap_or(0) as i128;
            if let (true, Some(b), Some(v), Some(a)) = (
                key == "tids_current" && moves > 0,
                bv.and_then(|v| number(v, k)),
                sv.and_then(|v| number(v, k)),
                av.and_then(|v| number(v, k)),
            ) {
                if !(b.min(a) <= v && v <= b.max(a))
                    && (v - b).abs() <= moves
                    && (v - a).abs() <= moves
                {
                    self.moved_within.push(format!(
                        "sample {} {path} {key}: before={b} value={v} after={a}, {moves} moves in or out within the reads",
                        around.sample
                    ));
                    *self.per_file.entry(file).or_default() += 1;
                    continue;
                }
            }
            let why = match (bv, sv, av) {
                (Some(bv), Some(sv), Some(av)) if !quiet => match (
                    split_fits(key, &vb, sv, &va),
                    psi_total_fits(key, &vb, sv, &va, around.since_before_us),
                ) {
                    (Some(true), _) | (_, Some(true)) => None,
                    (Some(false), _) => Some("outside [before, usage after - other before]"),
                    (_, Some(false)) => Some("outside [before, max(after, before + time since)]"),
                    (None, None) if fits(k, bv, sv, av) => None,
                    (None, None) if k == Kind::Counter => Some("counter outside [before, after]"),
                    (None, None) => Some("outside what the two reads showed"),
                },
                // Quiet: averages must be what the read after printed;
                // totals at most that read plus the time since the last
                // read of the file, before the pause (see psi_total_fits).
                (_, Some(sv), Some(av)) if quiet => {
                    self.quiet_checked += u64::from(k == Kind::Average);
                    let since = around.since_before_us + QUIET_PAUSE.as_micros() as i128;
                    let ok = match k {
                        Kind::Average => {
                            number(sv, k) == number(av, k) || one_update_later(key, sv, av)
                        }
                        _ => number(sv, k) <= number(av, k).map(|a| a + since),
                    };
                    (!ok).then_some("differs from the read after a quiet pause")
                }
                (Some(_), None, Some(_)) => Some("missing"),
                (None, Some(_), None) => Some("present, the file is not"),
                // Appeared or went away while sampled.
                _ => continue,
            };
            *self.per_file.entry(file).or_default() += 1;
            let Some(why) = why else { continue };
            let f = fail(key, show(bv), show(sv), show(av), why);
            let id = (path.to_owned(), key.clone());
            let confirmed = match (k, quiet, bv, sv, av) {
                (Kind::Average, true, ..) => self.quiet.hit(id, f),
                // A gauge can go out and back between the reads.
                (Kind::Gauge | Kind::Average, false, Some(bv), Some(sv), Some(av)) => {
                    let seen = vec![bv.clone(), av.clone()];
                    let seen = self.reads.widen(path, a.inode_number, key, seen);
                    if fits_among(k, &seen, sv, memcg_flush_slack(key)) {
                        self.within_last += 1;
                        None
                    } else {
                        self.gauges.hit(id, f)
                    }
                }
                _ => Some(vec![f]),
            };
            self.report.failures.extend(confirmed.into_iter().flatten());
        }
        self.reads
            .this
            .insert(path.to_owned(), (a.inode_number, vb, va));
    }
}

/// One run: a collector for `samples` (more while a gauge waits for its
/// confirming sample), the text read around each, every value checked.
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

/// What a plant keeps from each cgroup's first sample.
#[derive(Default)]
struct Planted {
    first: HashMap<String, CgroupSample>,
}

impl Planted {
    fn apply(&mut self, plant: Plant, s: &mut CgroupSample, path: String) {
        let first = self
            .first
            .entry(path.clone())
            .or_insert_with(|| CgroupSample {
                pressure: s.pressure.clone(),
                cpu_stat: s.cpu_stat.clone(),
                ..CgroupSample::default()
            });
        match plant {
            Plant::Swap => {
                if let Some(m) = s.memory_stat.as_mut() {
                    std::mem::swap(&mut m.anon, &mut m.file);
                }
            }
            Plant::Freeze => {
                if let (Some(p), Some(f)) = (s.pressure.as_mut(), first.pressure.as_ref()) {
                    freeze_averages(p, f);
                }
            }
            Plant::Stale => {
                if s.cpu_stat.is_some() && first.cpu_stat.is_some() {
                    s.cpu_stat = first.cpu_stat.clone();
                }
            }
        }
        for (name, c) in s.children.iter_mut().flatten() {
            let p = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}/{name}")
            };
            self.apply(plant, c, p);
        }
    }
}

fn freeze_averages(p: &mut Pressure, first: &Pressure) {
    let keep = |to: &mut PressureMetrics, from: &PressureMetrics| {
        to.avg10 = from.avg10;
        to.avg60 = from.avg60;
        to.avg300 = from.avg300;
    };
    keep(&mut p.cpu.some, &first.cpu.some);
    if let (Some(to), Some(from)) = (p.cpu.full.as_mut(), first.cpu.full.as_ref()) {
        keep(to, from);
    }
    keep(&mut p.io.some, &first.io.some);
    keep(&mut p.io.full, &first.io.full);
    keep(&mut p.memory.some, &first.memory.some);
    keep(&mut p.memory.full, &first.memory.full);
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(kind("cpu_stat.usage_usec"), Kind::Counter);
        assert_eq!(kind("memory_stat.pgfault"), Kind::Counter);
        assert_eq!(kind("memory_stat.anon"), Kind::Gauge);
        assert_eq!(
            kind("memory_numa_stat.0.workingset_refault_anon"),
            Kind::Counter
        );
        assert_eq!(kind("pressure.io.full.total"), Kind::Counter);
        assert_eq!(kind("pressure.cpu.some.avg60"), Kind::Average);
        assert_eq!(kind("cgroup_stat.nr_descendants"), Kind::Gauge);
    }

    #[test]
    fn a_quiet_average_may_be_one_kernel_update_older_than_the_read_after() {
        let v = |f: f64| serde_json::json!(f);
        // Seen in a systemd guest: the group's update between the two.
        let one_update = [
            ("pressure.cpu.some.avg10", 0.21, 0.17),
            ("pressure.cpu.full.avg60", 0.14, 0.13),
            ("pressure.cpu.some.avg60", 0.12, 0.11),
            ("pressure.io.some.avg300", 1.0, 0.99),
        ];
        // Two updates, or none that decays this way, or the other way: no.
        let not = [
            ("pressure.cpu.some.avg10", 0.21, 0.14),
            ("pressure.cpu.some.avg10", 0.17, 0.21),
            ("pressure.cpu.some.avg300", 1.0, 0.97),
            ("pressure.cpu.some.total", 10.0, 9.0),
        ];
        for (cases, want) in [(one_update, true), (not, false)] {
            for (key, sample, after) in cases {
                assert_eq!(
                    one_update_later(key, &v(sample), &v(after)),
                    want,
                    "{key}: {sample} then {after}"
                );
            }
        }
    }

    #[test]
    fn psi_totals_allow_the_time_since_the_read_before() {
        let m =
            |v: u64| BTreeMap::from([("pressure.cpu.some.total".to_owned(), serde_json::json!(v))]);
        let (b, a) = (m(100), m(150));
        let fits = |v: u64, since| {
            psi_total_fits(
                "pressure.cpu.some.total",
                &b,
                &serde_json::json!(v),
                &a,
                since,
            )
        };
        assert_eq!(fits(120, 0), Some(true));
        assert_eq!(
            fits(170, 100),
            Some(true),
            "ahead of the read after, within the time"
        );
        assert_eq!(fits(170, 10), Some(false));
        assert_eq!(fits(90, 1000), Some(false), "below the read before");
        assert_eq!(
            psi_total_fits("cpu_stat.usage_usec", &b, &serde_json::json!(1u64), &a, 0),
            None
        );
    }

    #[test]
    fn fits_by_kind() {
        let n = |x: f64| serde_json::json!(x);
        let (b, a) = (serde_json::json!(10u64), serde_json::json!(20u64));
        assert!(fits(Kind::Counter, &b, &serde_json::json!(15u64), &a));
        assert!(!fits(Kind::Counter, &b, &serde_json::json!(21u64), &a));
        // A counter that the reads show going down fits nothing.
        assert!(!fits(Kind::Counter, &a, &serde_json::json!(15u64), &b));
        assert!(fits(Kind::Gauge, &a, &serde_json::json!(15u64), &b));
        assert!(fits(Kind::Average, &n(1.25), &n(1.2500001), &n(1.30)));
        assert!(!fits(Kind::Average, &n(1.25), &n(1.31), &n(1.30)));
        let (x, y) = (serde_json::json!([0, 1]), serde_json::json!([1]));
        assert!(fits(Kind::Gauge, &x, &y, &y));
        assert!(!fits(Kind::Gauge, &x, &serde_json::json!([2]), &y));
    }

    #[test]
    fn widened_range() {
        let seen = [serde_json::json!(5u64), serde_json::json!(9u64)];
        assert!(fits_among(Kind::Gauge, &seen, &serde_json::json!(7u64), 0));
        assert!(!fits_among(
            Kind::Gauge,
            &seen,
            &serde_json::json!(10u64),
            0
        ));
        assert!(fits_among(Kind::Gauge, &seen, &serde_json::json!(10u64), 2));
        let sets = [serde_json::json!([0]), serde_json::json!([0, 1])];
        assert!(fits_among(
            Kind::Gauge,
            &sets,
            &serde_json::json!([0, 1]),
            0
        ));
        assert!(!fits_among(Kind::Gauge, &sets, &serde_json::json!([1]), 0));
    }

    #[test]
    fn values_by_file() {
        let s = CgroupSample {
            memory_current: Some(5),
            tids_current: Some(2),
            ..CgroupSample::default()
        };
        let only: FileSet = [StatFile::MemoryCurrent].into_iter().collect();
        let v = values(&s, only);
        assert_eq!(v.keys().collect::<Vec<_>>(), ["memory_current"]);
        assert_eq!(
            file_of_value("pressure.io.some.avg10"),
            Some(StatFile::IoPressure)
        );
        assert_eq!(
            file_of_value("memory_events_local.high"),
            Some(StatFile::MemoryEventsLocal)
        );
    }
}
