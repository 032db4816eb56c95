//! The recorders' tables: the bill and the soak.

use std::fmt::Write;

use super::kib;
use super::na_line;
use super::num;
use super::thousands;
use super::times;
use super::BillSection;
use super::Report;
use super::SoakSection;
use crate::bill::BillRow;
use crate::stats::ratio;
use crate::status::Status;

impl Report {
    pub(super) fn bill_md(&self, s: &BillSection) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### The bill: `below record -i 1`, {} cgroups, {} processes ({} threads), kernel {}\n\n\
             Reproduce: `{}`\n\n\
             One recorder at a time on the same tree, each measured over {} s once it has \
             written two samples{}. Service: CPU of the recorder's own cgroup (`cpu.stat` \
             usage: every process it starts included, what systemd charges below.service) \
             over the window ÷ samples it wrote in it; process: the same for utime + stime of \
             the recorder process alone; started: processes it ran (its descendants that \
             exited, from process accounting) ÷ samples; store: data bytes ÷ samples \
             stored; ratios: below 0.9's CPU per sample (same compression) ÷ this row's; \
             processes stored: in the last sample.\n\n\
             | recorder | service CPU ms / sample | below 0.9 ÷ this (service) | process CPU ms \
             / sample | below 0.9 ÷ this | started / sample | written / expected \
             | store KiB / sample | peak RSS MiB | cgroups stored | processes stored |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            thousands(s.cgroups_created),
            thousands(s.population.processes),
            thousands(s.population.threads),
            self.kernel,
            s.reproduce,
            s.window_s,
            if s.rounds > 1 {
                format!(
                    ", in {} rounds (every recorder once per round); each row is the recorder's \
                     median run by service CPU, every run's CPU per sample in parentheses",
                    s.rounds
                )
            } else {
                String::new()
            },
        );
        let below09 = |z: bool| {
            s.rows
                .iter()
                .find(|r| r.ok() && r.key == if z { "below09-z" } else { "below09" })
        };
        for r in &s.rows {
            if !r.ok() {
                na_line(&mut out, &r.recorder, &r.status, 11);
                continue;
            }
            let base = below09(r.key.ends_with("-z"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} |",
                r.recorder,
                rounds_cell(r.service_cpu_ms_per_sample, &r.rounds_service_ms),
                times(base.and_then(|b| {
                    ratio(b.service_cpu_ms_per_sample, r.service_cpu_ms_per_sample)
                })),
                rounds_cell(r.cpu_ms_per_sample, &r.rounds_cpu_ms),
                times(base.and_then(|b| ratio(b.cpu_ms_per_sample, r.cpu_ms_per_sample))),
                r.spawned_per_sample.map_or("—".into(), num),
                r.written,
                r.expected,
                kib(r.store_bytes_per_sample),
                num(r.peak_rss_kib as f64 / 1024.0),
                thousands(r.cgroups_stored),
                thousands(r.processes_stored),
            );
        }
        let started: Vec<String> = s
            .rows
            .iter()
            .filter(|r| r.ok() && !r.spawned.is_empty())
            .map(|r| {
                let names: Vec<String> =
                    r.spawned.iter().map(|(k, v)| format!("{k} {v}")).collect();
                format!("- {}: {}", r.recorder, names.join(", "))
            })
            .collect();
        if !started.is_empty() {
            let _ = writeln!(
                out,
                "\nProcesses started over the window, by name (rows not listed started none):\n\n{}",
                started.join("\n")
            );
        }
        let _ = writeln!(
            out,
            "\nWhere a sample's CPU goes (thread CPU ms per sample, mean over the run's \
             samples but the first, from the recorders' --phase-times records; cgroups = \
             the pass plus decoding into below's samples, in the tree kept from the last \
             sample (for plain read: reading and parsing the files); tree = taking that \
             tree out for the sample; loop = sleeping and logging; unaccounted = the whole \
             process's CPU per loop − the phases):\n\n\
             | recorder | below's collectors | of which processes | system | network \
             | BPF pass | cgroups | tree | store write | drop | loop | process | unaccounted |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
        );
        let phases = ["below", "pass", "cgroups", "tree", "store", "drop", "idle"];
        // Parts of "below", not summed again.
        let parts = ["procs", "system", "net"];
        for r in s.rows.iter().filter(|r| r.ok() && !r.phases.is_empty()) {
            let p = |k: &str| r.phases.get(k).copied();
            let cell = |k: &str| p(k).map_or("—".into(), num);
            // The recorders' pass is part of their "cgroups"; the floor's is its own.
            let sum: f64 = phases
                .iter()
                .filter(|&&k| k != "pass" || p("cgroups").is_none())
                .filter_map(|k| p(k))
                .sum();
            let _ = write!(out, "| {} |", r.recorder);
            for k in phases[..1]
                .iter()
                .chain(&parts)
                .chain(&phases[1..])
                .chain(&["process"])
            {
                let _ = write!(out, " {} |", cell(k));
            }
            let _ = writeln!(
                out,
                " {} |",
                p("process").map_or("—".into(), |t| num(t - sum))
            );
        }
        let _ = writeln!(
            out,
            "\nWhole-process CPU ms per written sample by thread (from /proc/<pid>/task over \
             the window):\n"
        );
        for r in s.rows.iter().filter(|r| r.ok()) {
            let th: Vec<String> = r
                .threads
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| format!("{k} {}", num(*v)))
                .collect();
            let _ = writeln!(out, "- {}: {}", r.recorder, th.join(", "));
        }
        let _ = writeln!(out);
        for z in ["", "-z"] {
            let get = |k: &str| s.rows.iter().find(|r| r.ok() && r.key == format!("{k}{z}"));
            let (Some(ours), Some(floor)) = (get("bpf"), get("floor")) else {
                continue;
            };
            let ph = |r: &BillRow, k: &str| r.phases.get(k).copied().unwrap_or(0.0);
            // The recorder's own pass, timed in the same samples as its
            // conversion (older builds: the floor's).
            let pass = ours
                .phases
                .get("pass")
                .copied()
                .unwrap_or(ph(floor, "pass"));
            let ours_part = ph(ours, "cgroups") - pass + ph(ours, "tree");
            let lighter: String = [
                ("below09", "below 0.9"),
                ("main-bpf", "below main BPF"),
                ("main-series", "below main + the series"),
            ]
            .iter()
            .filter_map(|(k, name)| {
                let r = ratio(get(k)?.cpu_ms_per_sample, ours.cpu_ms_per_sample);
                Some(format!("; {} lighter than {name}", times(r)))
            })
            .collect();
            let _ = writeln!(
                out,
                "- {}: whole process {} ms per sample = {} the floor's {} ms; our part \
                 (conversion = cgroups − the pass, plus tree) {} ms = {} the pass \
                 ({} ms){lighter}.",
                ours.recorder,
                num(ours.cpu_ms_per_sample),
                times(ratio(ours.cpu_ms_per_sample, floor.cpu_ms_per_sample)),
                num(floor.cpu_ms_per_sample),
                num(ours_part),
                times(ratio(ours_part, pass)),
                num(pass),
            );
        }
        // Ours against the build before (e.g. a change's acceptance).
        for z in ["", "-z"] {
            let get = |k: &str| s.rows.iter().find(|r| r.ok() && r.key == format!("{k}{z}"));
            let (Some(now), Some(before)) = (get("bpf"), get("bpf-before")) else {
                continue;
            };
            let cmp = |a: f64, b: f64| format!("{} / {} = {}", num(a), num(b), times(ratio(a, b)));
            let mib = |r: &BillRow| r.peak_rss_kib as f64 / 1024.0;
            let _ = writeln!(
                out,
                "- {} ÷ {} (now / before): service CPU ms per sample {}; process CPU ms per \
                 sample {}; store KiB per sample {}; peak RSS MiB {}.",
                now.recorder,
                before.recorder,
                cmp(
                    now.service_cpu_ms_per_sample,
                    before.service_cpu_ms_per_sample
                ),
                cmp(now.cpu_ms_per_sample, before.cpu_ms_per_sample),
                cmp(
                    now.store_bytes_per_sample / 1024.0,
                    before.store_bytes_per_sample / 1024.0
                ),
                cmp(mib(now), mib(before)),
            );
        }
        out
    }

    /// Top-N's bound: each top-N row against the same recorder in the
    /// run's smallest tree.
    pub(super) fn bill_top_md(&self, s: &BillSection) -> String {
        let mut out = String::new();
        let Some(small) = self.bill.iter().min_by_key(|b| b.cgroups_created) else {
            return out;
        };
        if small.cgroups_created >= s.cgroups_created {
            return out;
        }
        for r in s.rows.iter().filter(|r| r.ok() && r.key.contains("-top")) {
            let Some(base) = small.rows.iter().find(|b| b.ok() && b.key == r.key) else {
                continue;
            };
            let _ = writeln!(
                out,
                "- {} at {} cgroups: {} ms per sample = {} its {} ms at {} cgroups (same run).",
                r.recorder,
                thousands(s.cgroups_created),
                num(r.cpu_ms_per_sample),
                times(ratio(r.cpu_ms_per_sample, base.cpu_ms_per_sample)),
                num(base.cpu_ms_per_sample),
                thousands(small.cgroups_created),
            );
        }
        out
    }

    pub(super) fn soak_md(&self, s: &SoakSection) -> String {
        let r = &s.result;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### Soak: RSS of `{}` at {} cgroups with churn, kernel {}\n\nReproduce: `{}`\n\n\
             {} cgroups removed and created again every {} ms by another process while \
             recording; RSS read from /proc every reading:\n",
            r.recorder,
            thousands(s.cgroups_created),
            self.kernel,
            s.reproduce,
            r.churn_cgroups,
            r.churn_period_ms,
        );
        if r.status != Status::Ok {
            let _ = writeln!(out, "{}\n", r.status);
        }
        let _ = writeln!(out, "| t s | RSS MiB | samples stored |\n|--:|--:|--:|");
        for p in &r.points {
            let _ = writeln!(
                out,
                "| {:.0} | {} | {} |",
                p.t_s,
                num(p.rss_kib as f64 / 1024.0),
                p.samples
            );
        }
        let rss: Vec<f64> = r.points.iter().map(|p| p.rss_kib as f64 / 1024.0).collect();
        if let (Some(first), Some(last)) = (rss.first(), rss.last()) {
            let max = rss.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(
                out,
                "\nRSS first {} MiB, last {} MiB, max {} MiB (last − first: {:+.1} MiB); \
                 peak (VmHWM) {} MiB.",
                num(*first),
                num(*last),
                num(max),
                last - first,
                num(r.peak_rss_kib as f64 / 1024.0),
            );
        }
        out
    }
}

/// A CPU per sample, with every round's when there were several.
fn rounds_cell(v: f64, rounds: &[f64]) -> String {
    if rounds.is_empty() {
        return num(v);
    }
    let all: Vec<String> = rounds.iter().map(|&c| num(c)).collect();
    format!("{} ({})", num(v), all.join(", "))
}
