//! `verifier`: what the BPF verifier does with each form of our programs
//! on this kernel (bstats_collector::verifier), as one markdown table.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use bstats_collector::verifier::median_range;
use bstats_collector::verifier::verifier_stats;
use bstats_collector::verifier::FormStats;
use bstats_collector::verifier::Loads;
use bstats_collector::verifier::Outcome;
use bstats_collector::verifier::VerifierStats;
use bstats_collector::verifier::Whose;

pub fn verifier(root: Option<&Path>, loads: usize) -> Result<()> {
    anyhow::ensure!(loads > 0, "--loads must be at least 1");
    let root = match root {
        Some(r) => r.to_owned(),
        None => super::cgroup_root()?,
    };
    let stats = verifier_stats(&root, loads)?;
    print!("{}", render(&stats, loads));
    Ok(())
}

/// The table, with a line saying where it was measured before it and the
/// failed loads' reasons after it.
fn render(s: &VerifierStats, loads: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Kernel {}, {} CPUs online ({} possible: the programs are loaded for {}), \
         cgroup2 root {}, {loads} loads per form.\n",
        s.kernel,
        s.cpus_online,
        s.cpus_possible,
        s.cpus_possible,
        s.root.display()
    );
    out.push_str(
        "| kernel | program | form | loaded | insns processed | peak states | xlated insns \
         | jited bytes | verifier ms: median (min-max) | load wall ms: median (min-max) |\n",
    );
    out.push_str("|---|---|---|---|--:|--:|--:|--:|--:|--:|\n");
    let mut failures = Vec::new();
    for f in &s.forms {
        let cells = cells(f, &mut failures).join(" | ");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {cells} |",
            s.kernel,
            program(f.whose),
            form(f),
        );
    }
    for (i, why) in failures.iter().enumerate() {
        let _ = writeln!(out, "\n[{}] {why}", i + 1);
    }
    out
}

fn program(whose: Whose) -> String {
    let whose_name = match whose {
        Whose::BelowMain => "below main",
        Whose::Fork => "fork",
    };
    format!("{} ({whose_name})", whose.object())
}

fn form(f: &FormStats) -> String {
    let walk = match f.rcu {
        true => "walk under RCU",
        false => "cgroup iterator",
    };
    format!("`{}` ({walk})", f.program)
}

/// Loaded, insns processed, peak states, xlated insns, jited bytes,
/// verifier time, load wall time; a failure's reason goes to `failures`,
/// the cell says its number.
fn cells(f: &FormStats, failures: &mut Vec<String>) -> Vec<String> {
    let mut footnote = |why: String| {
        failures.push(format!("{}: {why}", f.program));
        format!("[{}]", failures.len())
    };
    let (loaded, loads) = match &f.outcome {
        Outcome::NotApplicable(why) => (format!("n/a: {}", cell_text(why)), None),
        Outcome::Failed(why) => (format!("no {}", footnote(why.clone())), None),
        Outcome::Loaded(loads) => ("yes".to_owned(), Some(loads)),
    };
    let Some(Loads { loads, stats }) = loads else {
        let mut row = vec!["-".to_owned(); 6];
        row.insert(0, loaded);
        return row;
    };
    let range = |values: Vec<u32>| {
        let (lo, hi) = (values.iter().min(), values.iter().max());
        match (lo, hi) {
            (Some(lo), Some(hi)) if lo == hi => lo.to_string(),
            (Some(lo), Some(hi)) => format!("{lo}-{hi}"),
            _ => "?".to_owned(),
        }
    };
    let times = |t: Option<(Duration, Duration, Duration)>| match t {
        Some((median, min, max)) => format!("{} ({}-{})", ms(median), ms(min), ms(max)),
        None => "?".to_owned(),
    };
    let (peak, verifier) = match stats {
        Ok(logs) => (
            range(logs.iter().filter_map(|l| l.peak_states).collect()),
            times(median_range(logs.iter().filter_map(|l| l.time))),
        ),
        Err(why) => {
            let n = footnote(format!("with BPF_LOG_STATS: {why}"));
            (format!("? {n}"), format!("? {n}"))
        }
    };
    vec![
        loaded,
        range(loads.iter().map(|l| l.info.verified_insns).collect()),
        peak,
        range(loads.iter().map(|l| l.info.xlated_insns).collect()),
        range(loads.iter().map(|l| l.info.jited_bytes).collect()),
        verifier,
        times(median_range(loads.iter().map(|l| l.wall))),
    ]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// Text for a table cell: a `|` would end it.
fn cell_text(s: &str) -> String {
    s.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use bstats_collector::verifier::Load;
    use bstats_collector::verifier::ProgInfo;
    use bstats_collector::verifier::VerifierLog;

    use super::*;

    fn load(ms: u64, verified_insns: u32) -> Load {
        Load {
            wall: Duration::from_millis(ms),
            info: ProgInfo {
                verified_insns,
                xlated_insns: 900,
                jited_bytes: 5000,
            },
        }
    }

    fn loaded(walls: &[(u64, u32)], logs: Result<&[(u64, u32)], &str>) -> Outcome {
        Outcome::Loaded(Loads {
            loads: walls.iter().map(|&(ms, insns)| load(ms, insns)).collect(),
            stats: logs
                .map(|logs| {
                    logs.iter()
                        .map(|&(us, peak)| VerifierLog {
                            time: Some(Duration::from_micros(us)),
                            peak_states: Some(peak),
                            ..VerifierLog::default()
                        })
                        .collect()
                })
                .map_err(str::to_owned),
        })
    }

    #[test]
    fn one_row_per_form_failures_below() {
        let s = VerifierStats {
            kernel: "6.1.0-50-cloud-amd64".to_owned(),
            cpus_possible: 2,
            cpus_online: 2,
            root: PathBuf::from("/sys/fs/cgroup"),
            forms: vec![
                FormStats {
                    whose: Whose::BelowMain,
                    program: "cgroup_stats".to_owned(),
                    rcu: false,
                    outcome: loaded(
                        &[(12, 4000), (10, 4000), (30, 4000)],
                        Ok(&[(4000, 141), (5000, 141), (4500, 141)]),
                    ),
                },
                FormStats {
                    whose: Whose::BelowMain,
                    program: "cgroup_stats_rcu".to_owned(),
                    rcu: true,
                    outcome: Outcome::NotApplicable("kernel lacks kfunc a|b".to_owned()),
                },
                FormStats {
                    whose: Whose::Fork,
                    program: "bstats".to_owned(),
                    rcu: false,
                    outcome: loaded(&[(20, 5000), (21, 5002)], Err("no log")),
                },
                FormStats {
                    whose: Whose::Fork,
                    program: "bstats_rcu".to_owned(),
                    rcu: true,
                    outcome: Outcome::Failed("R1 invalid mem access / processed".to_owned()),
                },
            ],
        };
        let table = render(&s, 3);
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| 6.1")).collect();
        assert_eq!(
            rows,
            [
                "| 6.1.0-50-cloud-amd64 | cgroup_bpf.bpf.o (below main) | `cgroup_stats` (cgroup iterator) | yes | 4000 | 141 | 900 | 5000 | 4.5 (4.0-5.0) | 12.0 (10.0-30.0) |",
                "| 6.1.0-50-cloud-amd64 | cgroup_bpf.bpf.o (below main) | `cgroup_stats_rcu` (walk under RCU) | n/a: kernel lacks kfunc a\\|b | - | - | - | - | - | - |",
                "| 6.1.0-50-cloud-amd64 | bstats.bpf.o (fork) | `bstats` (cgroup iterator) | yes | 5000-5002 | ? [1] | 900 | 5000 | ? [1] | 20.5 (20.0-21.0) |",
                "| 6.1.0-50-cloud-amd64 | bstats.bpf.o (fork) | `bstats_rcu` (walk under RCU) | no [2] | - | - | - | - | - | - |",
            ]
        );
        let header = table.lines().find(|l| l.starts_with("| kernel")).unwrap();
        for row in &rows {
            assert_eq!(
                row.matches(" | ").count(),
                header.matches(" | ").count(),
                "{row}"
            );
        }
        assert!(table.starts_with("Kernel 6.1.0-50-cloud-amd64, 2 CPUs online (2 possible"));
        assert!(table.ends_with(
            "\n[1] bstats: with BPF_LOG_STATS: no log\n\n[2] bstats_rcu: R1 invalid mem access / processed\n"
        ));
    }
}
