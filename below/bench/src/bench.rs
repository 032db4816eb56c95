//! Per-sample costs of each collector, alone and with K readers at once.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::sync::Barrier;
use std::time::Duration;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::alloc;
use crate::collectors::Collector;
use crate::collectors::Downstream;
use crate::collectors::Kind;
use crate::collectors::Raw;
use crate::collectors::Target;
use crate::stats::mean;
use crate::stats::ms;
use crate::stats::percentile;
use crate::status::Status;
use crate::thread_cost;
use crate::thread_cost::Cpu;
use crate::thread_cost::SysCr;

/// How long a measurement cell runs: at least `min` samples, then until
/// `max` samples or `budget` elapsed (TCG guests are ~50x slower).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Budget {
    pub min: usize,
    pub max: usize,
    pub budget_s: f64,
}

impl Budget {
    fn done(&self, n: usize, start: Instant) -> bool {
        n >= self.max || (n >= self.min && start.elapsed().as_secs_f64() >= self.budget_s)
    }
}

/// Mean CPU and wall time of one phase, in ms.
#[derive(Debug, Default, Clone, Serialize)]
pub struct PhaseStats {
    pub cpu_ms: f64,
    pub cpu_user_ms: f64,
    pub cpu_sys_ms: f64,
    pub wall_p50_ms: f64,
    pub wall_p99_ms: f64,
}

impl PhaseStats {
    fn of(cpu: &[Cpu], wall: &[Duration]) -> PhaseStats {
        let w: Vec<f64> = wall.iter().map(|d| ms(*d)).collect();
        PhaseStats {
            cpu_ms: mean(&cpu.iter().map(|c| ms(c.total)).collect::<Vec<_>>()),
            cpu_user_ms: mean(&cpu.iter().map(|c| ms(c.user)).collect::<Vec<_>>()),
            cpu_sys_ms: mean(&cpu.iter().map(|c| ms(c.sys)).collect::<Vec<_>>()),
            wall_p50_ms: percentile(&w, 50.0),
            wall_p99_ms: percentile(&w, 99.0),
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct CollectRow {
    pub collector: &'static str,
    pub kind: Option<Kind>,
    pub status: Status,
    /// Cgroups in one sample (ours plus whatever else the root holds).
    pub cgroups: usize,
    pub samples: usize,
    /// Kernel read: the walk and file reads, or the iterator pass.
    pub read: PhaseStats,
    /// Snapshot to below's nested tree (below's own walk builds it inline).
    pub tree: PhaseStats,
    /// below's cgroup model against the previous sample.
    pub model: PhaseStats,
    /// CBOR + zstd store write.
    pub store: PhaseStats,
    pub read_syscalls: f64,
    /// openat calls in one sample (perf tracepoint), else our reader's count.
    pub opens: Option<u64>,
    pub opens_source: &'static str,
    pub alloc_read_bytes: f64,
    pub alloc_total_bytes: f64,
    /// Heap high-water mark above where the cell started.
    pub peak_heap_bytes: u64,
}

impl CollectRow {
    pub fn na(kind: Kind, why: String) -> CollectRow {
        CollectRow {
            collector: kind.label(),
            kind: Some(kind),
            status: Status::NotAvailable(why),
            ..Default::default()
        }
    }

    pub fn ok(&self) -> bool {
        self.status == Status::Ok
    }

    pub fn total_cpu_ms(&self) -> f64 {
        self.read.cpu_ms + self.tree.cpu_ms + self.model.cpu_ms + self.store.cpu_ms
    }
}

#[derive(Default)]
struct Laps {
    cpu: [Vec<Cpu>; 4],
    wall: [Vec<Duration>; 4],
    syscr: Vec<f64>,
    alloc_read: Vec<f64>,
    alloc_total: Vec<f64>,
    cgroups: usize,
}

/// Times one phase on this thread.
fn lap<T>(cpu: &mut Vec<Cpu>, wall: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let c0 = thread_cost::thread_cpu();
    let t0 = Instant::now();
    let v = f();
    wall.push(t0.elapsed());
    cpu.push(thread_cost::thread_cpu().since(c0));
    v
}

fn one_sample(
    c: &mut Collector,
    down: &mut Downstream,
    sc: &mut SysCr,
    l: &mut Laps,
) -> Result<()> {
    let a0 = alloc::thread_allocated();
    let s0 = sc.read()?;
    let raw = lap(&mut l.cpu[0], &mut l.wall[0], || c.read())?;
    let s1 = sc.read()?;
    l.syscr.push(sc.delta(s0, s1) as f64);
    l.alloc_read.push((alloc::thread_allocated() - a0) as f64);
    l.cgroups = raw.cgroups();
    let fill = match &raw {
        Raw::Filled { fill, .. } => Some(*fill),
        Raw::Tree(_) => None,
    };
    let [c_read, c_tree, c_model, c_store] = &mut l.cpu;
    let [w_read, w_tree, w_model, w_store] = &mut l.wall;
    let tree = lap(c_tree, w_tree, || raw.tree());
    if let Some(fill) = fill {
        // Our read filled the tree too: that part is the tree phase (user
        // space only: no syscalls).
        let (cr, ct) = (
            c_read.last_mut().expect("read"),
            c_tree.last_mut().expect("tree"),
        );
        cr.user = cr.user.saturating_sub(fill.cpu);
        cr.total = cr.total.saturating_sub(fill.cpu);
        ct.user += fill.cpu;
        ct.total += fill.cpu;
        *w_read.last_mut().expect("read") = w_read.last().expect("read").saturating_sub(fill.wall);
        *w_tree.last_mut().expect("tree") += fill.wall;
    }
    let sample = lap(c_model, w_model, || down.model(tree));
    lap(c_store, w_store, || down.store(sample))?;
    l.alloc_total.push((alloc::thread_allocated() - a0) as f64);
    Ok(())
}

/// A kernel-read pass with its openat calls counted (kept off the timed
/// samples, see [`bstats_testkit::SyscallCounter`]).
fn read_counting_opens(c: &mut Collector) -> Result<(Raw, Option<u64>, &'static str)> {
    if let Ok(perf) = bstats_testkit::SyscallCounter::new("syscalls/sys_enter_openat") {
        let before = perf.read()?;
        let raw = c.read()?;
        return Ok((raw, Some(perf.read()? - before), "perf"));
    }
    let before = c.opens();
    let raw = c.read()?;
    Ok((raw, c.opens().zip(before).map(|(a, b)| a - b), "reader"))
}

pub fn collect_cell(kind: Kind, target: &Target, budget: Budget) -> Result<CollectRow> {
    let mut c = match Collector::new(kind, target) {
        Ok(c) => c,
        Err(e) => return Ok(CollectRow::na(kind, format!("{e:#}"))),
    };
    let mut down = Downstream::new()?;
    let mut sc = SysCr::new()?;
    // Warm-up, untimed: counts opens, gives the model a previous sample,
    // and takes the first-open costs out of the timed samples.
    let (raw, opens, opens_source) = read_counting_opens(&mut c)?;
    let sample = down.model(raw.tree());
    down.store(sample)?;
    let heap0 = alloc::reset_peak();
    let mut l = Laps::default();
    let start = Instant::now();
    while !Budget::done(&budget, l.syscr.len(), start) {
        crate::check_interrupted()?;
        one_sample(&mut c, &mut down, &mut sc, &mut l)?;
    }
    let peak = alloc::peak() - heap0;
    let phase = |i: usize| PhaseStats::of(&l.cpu[i], &l.wall[i]);
    Ok(CollectRow {
        collector: kind.label(),
        kind: Some(kind),
        status: Status::Ok,
        cgroups: l.cgroups,
        samples: l.syscr.len(),
        read: phase(0),
        tree: phase(1),
        model: phase(2),
        store: phase(3),
        read_syscalls: mean(&l.syscr),
        opens,
        opens_source,
        alloc_read_bytes: mean(&l.alloc_read),
        alloc_total_bytes: mean(&l.alloc_total),
        peak_heap_bytes: peak,
    })
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ParallelRow {
    pub collector: &'static str,
    pub kind: Option<Kind>,
    pub status: Status,
    pub readers: usize,
    /// Rounds in which all readers sampled at once.
    pub rounds: usize,
    /// Latency of one reader's kernel-read pass.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU of all readers together, per round.
    pub cpu_ms: f64,
    pub cpu_user_ms: f64,
    pub cpu_sys_ms: f64,
}

/// K threads, each with its own collector, released together every round
/// so their reads (and the kernel's flushes) overlap.
pub fn parallel_cell(kind: Kind, target: &Target, k: usize, budget: Budget) -> Result<ParallelRow> {
    let mut row = ParallelRow {
        collector: kind.label(),
        kind: Some(kind),
        readers: k,
        ..Default::default()
    };
    // Probe availability once, on this thread, for the n/a reason.
    if let Err(e) = Collector::new(kind, target) {
        row.status = Status::NotAvailable(format!("{e:#}"));
        return Ok(row);
    }
    let barrier = Barrier::new(k);
    let stop = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    let start = Instant::now();
    let results: Vec<Result<(Vec<Duration>, Cpu)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..k)
            .map(|_| {
                s.spawn(|| -> Result<(Vec<Duration>, Cpu)> {
                    let mut lat = Vec::new();
                    let mut cpu = Cpu::default();
                    // A failed reader keeps meeting the barrier (or the
                    // others would wait forever) until the leader stops.
                    let mut state = Collector::new(kind, target).and_then(|mut c| {
                        c.read()?;
                        Ok(c)
                    });
                    if state.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    loop {
                        if barrier.wait().is_leader() {
                            let done = budget.done(lat.len(), start)
                                || failed.load(Ordering::SeqCst)
                                || crate::check_interrupted().is_err();
                            stop.store(done, Ordering::SeqCst);
                        }
                        barrier.wait();
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(c) = state.as_mut() else { continue };
                        let c0 = thread_cost::thread_cpu();
                        let t0 = Instant::now();
                        let r = c.read();
                        lat.push(t0.elapsed());
                        cpu.add(thread_cost::thread_cpu().since(c0));
                        if let Err(e) = r {
                            failed.store(true, Ordering::SeqCst);
                            state = Err(e);
                        }
                    }
                    state.map(|_| (lat, cpu))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread panicked"))
            .collect()
    });
    let mut lat = Vec::new();
    let mut cpu = Cpu::default();
    for r in results {
        let (l, c) = r?;
        row.rounds = l.len();
        lat.extend(l.iter().map(|d| ms(*d)));
        cpu.add(c);
    }
    crate::check_interrupted()?;
    let rounds = row.rounds.max(1) as f64;
    row.status = Status::Ok;
    row.p50_ms = percentile(&lat, 50.0);
    row.p99_ms = percentile(&lat, 99.0);
    row.cpu_ms = ms(cpu.total) / rounds;
    row.cpu_user_ms = ms(cpu.user) / rounds;
    row.cpu_sys_ms = ms(cpu.sys) / rounds;
    Ok(row)
}
