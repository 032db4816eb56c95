//! The checker: every served value of every cgroup in a sample against the
//! text reads before and after it, by the rule of `values` and the
//! allowances of `tolerance`; the failures it finds and what it counted.
//! The sampling loop makes one `Checker` a run and feeds it each sample.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use bstats_collector::FileSet;
use bstats_collector::StatFile;
use model::CgroupSample;
use serde_json::Value;

use super::tolerance::fits_among;
use super::tolerance::memcg_flush_slack;
use super::tolerance::one_update_later;
use super::tolerance::psi_total_fits;
use super::tolerance::split_fits;
use super::tolerance::LastReads;
use super::tolerance::Streaks;
use super::tolerance::GAUGE_STREAK;
use super::tolerance::QUIET_STREAK;
use super::values::fits;
use super::values::kind;
use super::values::number;
use super::values::values;
use super::values::Kind;
use super::QUIET_PAUSE;
use crate::served::file_of_value;

#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub(super) sample: usize,
    pub(super) cgroup: String,
    pub(super) value_path: String,
    pub(super) before: String,
    pub(super) value: String,
    pub(super) after: String,
    pub(super) why: &'static str,
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
pub(super) struct Report {
    pub(super) failures: Vec<Failure>,
    /// Whether the run had a plant on a served file.
    pub(super) planted_on: bool,
}

impl Report {
    pub(super) fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The checks of one run and what they counted.
pub(super) struct Checker {
    files: FileSet,
    pub(super) per_file: BTreeMap<StatFile, u64>,
    pub(super) cgroups: u64,
    pub(super) skipped: u64,
    pub(super) gauges: Streaks,
    reads: LastReads,
    /// Gauges outside [before, after], within the last sample's reads.
    pub(super) within_last: u64,
    /// pids.current outside [before, after] by no more than the moves of
    /// a stirred process in or out within the reads: what they were.
    pub(super) moved_within: Vec<String>,
    pub(super) quiet: Streaks,
    pub(super) quiet_checked: u64,
    pub(super) report: Report,
}

/// The text files read around one sample.
pub(super) struct Around<'a> {
    pub(super) before: &'a BTreeMap<String, &'a CgroupSample>,
    pub(super) after: &'a BTreeMap<String, &'a CgroupSample>,
    /// Quiet sample: its pressure files were read after it only. The
    /// cgroups that used no CPU since the sample before.
    pub(super) quiet: Option<&'a BTreeSet<String>>,
    pub(super) sample: usize,
    /// µs from the start of the reads before to the end of the sample.
    pub(super) since_before_us: i128,
    /// The churned cgroup and its ancestors, by path.
    pub(super) churned: &'a BTreeSet<String>,
    /// Moves of a stirred process in or out of a cgroup, by path, from
    /// the start of the reads before to the end of the reads after.
    pub(super) moved: &'a BTreeMap<String, usize>,
}

impl Checker {
    pub(super) fn new(files: FileSet) -> Self {
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
    pub(super) fn check_sample(
        &mut self,
        tree: &CgroupSample,
        around: &Around,
    ) -> BTreeSet<String> {
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
