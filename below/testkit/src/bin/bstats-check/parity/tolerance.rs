//! Where the kernel allows a value beyond the plain rule of `values`, each
//! with the kernel behaviour that allows it: pressure averages one update
//! on, cpu.stat's user/system split, pressure totals, memcg flush batches,
//! and the streaks that confirm a gauge or quiet average out of range
//! before it fails. The checker consults these after a value misses.

use std::collections::BTreeMap;
use std::collections::HashMap;

use serde_json::Value;

use super::check::Failure;
use super::values::number;
use super::values::Kind;

/// Whether `after` is average `sample` of an idle group one more of the
/// kernel's 2 s updates on: the group's update fell between the sample and
/// the read after (its phase is fixed, so the same group can meet it at
/// every quiet sample). Nothing stalled, an update is avg * EXP / FIXED_1
/// (kernel/sched/psi.c), printed in hundredths rounded down; the sample's
/// unrounded value lies in [s, s + 1) hundredths.
pub(super) fn one_update_later(key: &str, sample: &Value, after: &Value) -> bool {
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

/// The text reads of one cgroup around a sample: its id, before, after.
pub(super) type Reads = (
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
pub(super) const GAUGE_STREAK: usize = 3;

/// Each cgroup's reads at the last sample, and at this one.
#[derive(Default)]
pub(super) struct LastReads {
    last: HashMap<String, Reads>,
    pub(super) this: HashMap<String, Reads>,
}

impl LastReads {
    /// `seen` and the value `key` had at the last sample's reads of the
    /// same cgroup.
    pub(super) fn widen(
        &self,
        path: &str,
        ino: Option<i64>,
        key: &str,
        mut seen: Vec<Value>,
    ) -> Vec<Value> {
        if let Some((_, b, a)) = self.last.get(path).filter(|r| r.0 == ino) {
            seen.extend(b.get(key).cloned());
            seen.extend(a.get(key).cloned());
        }
        seen
    }

    pub(super) fn end_round(&mut self) {
        self.last = std::mem::take(&mut self.this);
    }
}

/// Whether `v` lies within the values `seen` (numbers), or is one of them.
pub(super) fn fits_among(kind: Kind, seen: &[Value], v: &Value, slack: i128) -> bool {
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
pub(super) fn memcg_flush_slack(key: &str) -> i128 {
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
pub(super) const QUIET_STREAK: usize = 2;

/// Values out of range at consecutive rounds (samples, or quiet samples),
/// by (cgroup, value).
pub(super) struct Streaks {
    need: usize,
    pub(super) open: HashMap<(String, String), Vec<Failure>>,
    next: HashMap<(String, String), Vec<Failure>>,
    /// The first of each streak that ended short.
    pub(super) retried: Vec<Failure>,
}

impl Streaks {
    pub(super) fn new(need: usize) -> Self {
        Streaks {
            need,
            open: HashMap::new(),
            next: HashMap::new(),
            retried: Vec::new(),
        }
    }

    /// One more out of range: the whole streak once it is long enough.
    pub(super) fn hit(&mut self, id: (String, String), f: Failure) -> Option<Vec<Failure>> {
        let mut streak = self.open.remove(&id).unwrap_or_default();
        streak.push(f);
        if streak.len() >= self.need {
            return Some(streak);
        }
        self.next.insert(id, streak);
        None
    }

    /// Ends a round: streaks it did not continue were retries.
    pub(super) fn end_round(&mut self) {
        let ended = std::mem::replace(&mut self.open, std::mem::take(&mut self.next));
        self.retried
            .extend(ended.into_values().map(|s| s[0].clone()));
    }
}

/// cpu.stat's user_usec and system_usec split usage_usec the way the
/// kernel's cputime_adjust() does at each read, from a state only text
/// reads move on: the read after can split differently from a read at the
/// sample would have. Each is still never below the read before, and at
/// most what the read after's usage leaves beside the other's read before
/// (+1: each is rounded down to µs apart). None for other values.
pub(super) fn split_fits(
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
pub(super) fn psi_total_fits(
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

#[cfg(test)]
mod test {
    use super::*;

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
}
