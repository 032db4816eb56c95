//! The value model: a sample's served values by dotted path, what kind each
//! is (counter, gauge, pressure average), how it is compared, and the plain
//! rule for where it must lie between the reads before and after. The
//! checker starts from this rule; `tolerance` holds what the kernel allows
//! beyond it.

use std::collections::BTreeMap;

use bstats_collector::FileSet;
use model::CgroupSample;
use serde_json::Value;

use crate::served::file_of_value;

/// Where a value must lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Only grows: between the reads before and after.
    Counter,
    /// Goes up and down (levels, limits, sets): within what the two reads
    /// showed.
    Gauge,
    /// A pressure average, to the file's two decimals: as a gauge.
    Average,
}

pub(super) fn kind(path: &str) -> Kind {
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
pub(super) fn values(s: &CgroupSample, files: FileSet) -> BTreeMap<String, Value> {
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
pub(super) fn number(v: &Value, kind: Kind) -> Option<i128> {
    match kind {
        Kind::Average => v.as_f64().map(|f| (f * 100.0).round() as i128),
        _ => v
            .as_u64()
            .map(i128::from)
            .or_else(|| v.as_i64().map(i128::from)),
    }
}

/// Whether `v` lies where `before` and `after` put it.
pub(super) fn fits(kind: Kind, before: &Value, v: &Value, after: &Value) -> bool {
    match (number(before, kind), number(v, kind), number(after, kind)) {
        (Some(b), Some(v), Some(a)) => match kind {
            Kind::Counter => b <= v && v <= a,
            _ => b.min(a) <= v && v <= b.max(a),
        },
        // Sets, strings: one of the two.
        _ => v == before || v == after,
    }
}

#[cfg(test)]
mod test {
    use bstats_collector::StatFile;

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
