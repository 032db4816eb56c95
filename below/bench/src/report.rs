//! The report: JSON for machines, markdown tables for people, each table
//! with the command that reproduces it.

use std::fmt::Write;
use std::path::Path;

use serde::Serialize;

use crate::bench::CollectRow;
use crate::bench::ParallelRow;
use crate::bill::BillRow;
use crate::collectors::Kind;
use crate::overhead;
use crate::overhead::OverheadRow;
use crate::runner::sh_join;
use crate::soak::SoakResult;
use crate::stats::ratio;
use crate::status::Status;
use crate::thread_cost;
use crate::Args;

mod recorders;

#[derive(Serialize)]
pub struct CollectSection {
    pub cgroups_created: usize,
    pub reproduce: String,
    pub rows: Vec<CollectRow>,
}

#[derive(Serialize)]
pub struct ParallelSection {
    pub cgroups_created: usize,
    pub reproduce: String,
    pub rows: Vec<ParallelRow>,
}

#[derive(Serialize)]
pub struct OverheadSection {
    pub cgroups_created: usize,
    pub reproduce: String,
    pub config: overhead::Config,
    pub rows: Vec<OverheadRow>,
}

/// Processes and threads in the system, as /proc lists them.
#[derive(Serialize, Clone, Copy, Debug, Default)]
pub struct Population {
    pub processes: usize,
    pub threads: usize,
}

impl Population {
    pub fn now() -> Population {
        let mut p = Population::default();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().parse::<u32>().is_err() {
                continue;
            }
            p.processes += 1;
            // Gone since the listing: not counted.
            p.threads += std::fs::read_dir(e.path().join("task")).map_or(0, |t| t.count());
        }
        p
    }
}

#[derive(Serialize)]
pub struct BillSection {
    pub cgroups_created: usize,
    /// What ran in the system while the recorders were measured (the
    /// tree's processes, and whatever else the system runs).
    pub population: Population,
    pub window_s: f64,
    /// Runs per recorder; each row is the median one.
    pub rounds: usize,
    pub reproduce: String,
    pub rows: Vec<BillRow>,
}

#[derive(Serialize)]
pub struct SoakSection {
    pub cgroups_created: usize,
    pub reproduce: String,
    pub result: SoakResult,
}

#[derive(Serialize)]
pub struct Report {
    pub kernel: String,
    pub cpus: usize,
    pub cgroup_root: String,
    pub command: String,
    pub collect: Vec<CollectSection>,
    pub parallel: Option<ParallelSection>,
    pub overhead: Option<OverheadSection>,
    pub bill: Vec<BillSection>,
    pub soak: Option<SoakSection>,
    pub max_rss_kib: u64,
    #[serde(skip)]
    printed: Vec<String>,
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// The command running only `section` with these settings.
fn reproduce(a: &Args, section: &str, extra: &[String]) -> String {
    let mut w: Vec<String> = vec!["cgroup-bench".into(), "--sections".into(), section.into()];
    if let Some(r) = &a.root {
        w.extend(["--root".into(), r.display().to_string()]);
    }
    w.extend(extra.iter().cloned());
    w.extend([
        "--collectors".into(),
        a.collectors.join(","),
        "--holders".into(),
        a.holders.to_string(),
        "--hold-mb".into(),
        a.hold_mb.to_string(),
    ]);
    sh_join(&w)
}

fn budget_args(a: &Args) -> Vec<String> {
    vec![
        "--min-samples".into(),
        a.min_samples.to_string(),
        "--max-samples".into(),
        a.max_samples.to_string(),
        "--budget-s".into(),
        a.budget_s.to_string(),
    ]
}

/// Three significant-ish digits.
fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn times(r: Option<f64>) -> String {
    r.map_or("—".into(), |r| format!("{}×", num(r)))
}

fn kib(b: f64) -> String {
    num(b / 1024.0)
}

fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn na_line(out: &mut String, label: &str, status: &Status, cols: usize) {
    let _ = writeln!(out, "| {label} | {status} |{}", " |".repeat(cols - 2));
}

impl Report {
    pub fn new(root: &Path) -> Report {
        Report {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cgroup_root: root.display().to_string(),
            command: sh_join(&std::env::args().collect::<Vec<_>>()),
            collect: vec![],
            parallel: None,
            overhead: None,
            bill: vec![],
            soak: None,
            max_rss_kib: 0,
            printed: vec![],
        }
    }

    pub fn add_collect(&mut self, a: &Args, created: usize, rows: Vec<CollectRow>) {
        let mut extra = vec!["--sizes".into(), created.to_string()];
        extra.extend(budget_args(a));
        let sec = CollectSection {
            cgroups_created: created,
            reproduce: reproduce(a, "collect", &extra),
            rows,
        };
        self.printed.push(self.collect_md(&sec));
        self.collect.push(sec);
    }

    pub fn add_parallel(&mut self, a: &Args, created: usize, rows: Vec<ParallelRow>) {
        let mut extra = vec![
            "--cgroups".into(),
            created.to_string(),
            "--readers".into(),
            join(&a.readers),
        ];
        extra.extend(budget_args(a));
        let sec = ParallelSection {
            cgroups_created: created,
            reproduce: reproduce(a, "parallel", &extra),
            rows,
        };
        self.printed.push(self.parallel_md(&sec));
        self.parallel = Some(sec);
    }

    pub fn add_overhead(
        &mut self,
        a: &Args,
        created: usize,
        config: overhead::Config,
        rows: Vec<OverheadRow>,
    ) {
        let mut extra = vec![
            "--cgroups".into(),
            created.to_string(),
            "--overhead-secs".into(),
            a.overhead_secs.to_string(),
            "--overhead-rounds".into(),
            a.overhead_rounds.to_string(),
        ];
        if let Some(b) = &a.below {
            extra.extend(["--below".into(), b.display().to_string()]);
        }
        let sec = OverheadSection {
            cgroups_created: created,
            reproduce: reproduce(a, "overhead", &extra),
            config,
            rows,
        };
        self.printed.push(self.overhead_md(&sec));
        self.overhead = Some(sec);
    }

    /// The bill's and the soak's reproducing commands name the recorder
    /// binaries as given.
    fn recorder_args(a: &Args) -> Vec<String> {
        let mut w = Vec::new();
        for (flag, p) in [
            ("--below", &a.below),
            ("--below09", &a.below09),
            ("--below-main", &a.below_main),
            ("--below-main-series", &a.below_main_series),
            ("--below-before", &a.below_before),
        ] {
            if let Some(p) = p {
                w.extend([flag.into(), p.display().to_string()]);
            }
        }
        w.extend(["--warmup-s".into(), a.warmup_s.to_string()]);
        w
    }

    pub fn add_bill(
        &mut self,
        a: &Args,
        created: usize,
        population: Population,
        secs: f64,
        rounds: usize,
        rows: Vec<BillRow>,
    ) {
        let mut extra = vec![
            "--bill-sizes".into(),
            created.to_string(),
            "--bill-secs".into(),
            secs.to_string(),
        ];
        if a.procs > 0 {
            extra.extend(["--procs".into(), a.procs.to_string()]);
        }
        if rounds > 1 {
            extra.extend(["--bill-rounds".into(), rounds.to_string()]);
        }
        if !a.recorders.is_empty() {
            extra.extend(["--recorders".into(), a.recorders.join(",")]);
        }
        if !a.bill_cpus.is_empty() {
            let cpus: Vec<String> = a.bill_cpus.iter().map(|c| c.to_string()).collect();
            extra.extend(["--bill-cpus".into(), cpus.join(",")]);
        }
        if let Some(p) = &a.perf {
            extra.extend(["--perf".into(), p.display().to_string()]);
            extra.extend(["--perf-out".into(), a.perf_out.display().to_string()]);
        }
        extra.extend(Self::recorder_args(a));
        let sec = BillSection {
            cgroups_created: created,
            population,
            window_s: secs,
            rounds,
            reproduce: reproduce(a, "bill", &extra),
            rows,
        };
        let md = self.bill_md(&sec) + &self.bill_top_md(&sec);
        self.printed.push(md);
        self.bill.push(sec);
    }

    pub fn add_soak(&mut self, a: &Args, created: usize, result: SoakResult) {
        let mut extra = vec![
            "--soak-cgroups".into(),
            created.to_string(),
            "--soak-secs".into(),
            a.soak_secs.to_string(),
            "--soak-every-s".into(),
            a.soak_every_s.to_string(),
            "--soak-churn".into(),
            a.soak_churn.to_string(),
            "--soak-churn-ms".into(),
            a.soak_churn_ms.to_string(),
            "--soak-recorder".into(),
            a.soak_recorder.clone(),
        ];
        extra.extend(Self::recorder_args(a));
        let sec = SoakSection {
            cgroups_created: created,
            reproduce: reproduce(a, "soak", &extra),
            result,
        };
        self.printed.push(self.soak_md(&sec));
        self.soak = Some(sec);
    }

    /// Prints the table just added, so a long run shows progress.
    pub fn print_last(&self) {
        if let Some(t) = self.printed.last() {
            println!("{t}");
        }
    }

    pub fn finish(&mut self) {
        self.max_rss_kib = thread_cost::max_rss_kib();
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Kernel {}, {} CPUs, cgroup root {}; full command: `{}`\n\n",
            self.kernel, self.cpus, self.cgroup_root, self.command
        );
        for t in &self.printed {
            out.push_str(t);
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "Peak RSS of the benchmark process: {} KiB",
            self.max_rss_kib
        );
        out
    }

    fn collect_md(&self, s: &CollectSection) -> String {
        let base = s
            .rows
            .iter()
            .find(|r| r.kind == Some(Kind::Baseline) && r.ok());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### {} cgroups, kernel {}\n\nReproduce: `{}`\n\n\
             Kernel read, per sample (ratios: baseline ÷ this, higher is better):\n\n\
             | collector | cgroups | samples | CPU ms | user ms | sys ms | wall p50 ms | wall p99 ms \
             | read syscalls | opens | alloc KiB | peak heap KiB | CPU ratio | p50 ratio | syscalls ratio |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            thousands(s.cgroups_created),
            self.kernel,
            s.reproduce
        );
        for r in &s.rows {
            if !r.ok() {
                na_line(&mut out, r.collector, &r.status, 15);
                continue;
            }
            let b = |f: fn(&CollectRow) -> f64| base.and_then(|b| ratio(f(b), f(r)));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.collector,
                r.cgroups,
                r.samples,
                num(r.read.cpu_ms),
                num(r.read.cpu_user_ms),
                num(r.read.cpu_sys_ms),
                num(r.read.wall_p50_ms),
                num(r.read.wall_p99_ms),
                num(r.read_syscalls),
                r.opens.map_or("—".into(), |o| o.to_string()),
                kib(r.alloc_read_bytes),
                kib(r.peak_heap_bytes as f64),
                times(b(|r| r.read.cpu_ms)),
                times(b(|r| r.read.wall_p50_ms)),
                times(b(|r| r.read_syscalls)),
            );
        }
        let _ = writeln!(
            out,
            "\nWhole sample as `below record` does it, CPU ms per sample (tree: snapshot → below's \
             tree; model: below's CgroupModel; store: CBOR + zstd write):\n\n\
             | collector | kernel read | tree | model | store | total | total ratio | alloc KiB |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|"
        );
        for r in s.rows.iter().filter(|r| r.ok()) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.collector,
                num(r.read.cpu_ms),
                // below's walk builds its tree while reading.
                if r.kind == Some(Kind::Baseline) {
                    "(in read)".into()
                } else {
                    num(r.tree.cpu_ms)
                },
                num(r.model.cpu_ms),
                num(r.store.cpu_ms),
                num(r.total_cpu_ms()),
                times(base.and_then(|b| ratio(b.total_cpu_ms(), r.total_cpu_ms()))),
                kib(r.alloc_total_bytes),
            );
        }
        out
    }

    fn parallel_md(&self, s: &ParallelSection) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### Parallel readers, {} cgroups, kernel {}\n\nReproduce: `{}`\n\n\
             K collectors sampling at once (released together each round); latency of one \
             reader's kernel read, CPU of all K per round:\n\n\
             | collector | K | rounds | p50 ms | p99 ms | CPU ms | CPU user ms | CPU sys ms |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|",
            thousands(s.cgroups_created),
            self.kernel,
            s.reproduce
        );
        for r in &s.rows {
            if r.status != Status::Ok {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | | | | | |",
                    r.collector, r.readers, r.status
                );
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.collector,
                r.readers,
                r.rounds,
                num(r.p50_ms),
                num(r.p99_ms),
                num(r.cpu_ms),
                num(r.cpu_user_ms),
                num(r.cpu_sys_ms)
            );
        }
        out
    }

    fn overhead_md(&self, s: &OverheadSection) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### Overhead on a running workload, {} cgroups, kernel {}\n\nReproduce: `{}`\n\n\
             {} threads streaming over {} MiB each for {} s, alone and while a recorder samples \
             every 1 s; medians of {} rounds:\n\n\
             | recorder | workload MiB/s | throughput lost | recorder CPU ms/s |\n\
             |---|--:|--:|--:|",
            thousands(s.cgroups_created),
            self.kernel,
            s.reproduce,
            s.config.threads,
            s.config.mb_per_thread,
            s.config.secs,
            s.config.rounds
        );
        for r in &s.rows {
            if r.status != Status::Ok {
                na_line(&mut out, &r.monitor, &r.status, 4);
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                r.monitor,
                num(r.ops_per_s),
                r.overhead_pct.map_or("—".into(), |p| format!("{p:.1}%")),
                r.monitor_cpu_ms_per_s.map_or("—".into(), num),
            );
        }
        out
    }
}
