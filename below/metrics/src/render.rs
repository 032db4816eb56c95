//! One snapshot → OpenMetrics text, within the series cap.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::SystemTime;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::encoding::MetricEncoder;
use prometheus_client::encoding::NoLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::defs::Def;
use crate::defs::Kind;
use crate::defs::Read;
use crate::defs::System;
use crate::defs::Unit;
use crate::defs::Val;
use crate::defs::CPU_MODES;
use crate::defs::DEFS;
use crate::Filters;
use crate::Rendered;
use crate::Snapshot;

/// Series the exporter always serves about itself, counted in the cap:
/// `below_exporter_dropped_series_total` and `below_sample_timestamp_seconds`.
pub const OWN_SERIES: usize = 2;

#[derive(Debug)]
struct Series {
    cgroup: Option<Arc<str>>,
    /// `device` of io.stat or `mode` of the CPU time.
    extra: Option<(&'static str, String)>,
    val: Val,
}

/// The series admitted, per metric, in exposition order.
#[derive(Debug)]
struct Families {
    families: Vec<(&'static Def, Vec<Series>)>,
    dropped_total: u64,
    sample_time: f64,
}

struct Admit {
    families: Vec<(&'static Def, Vec<Series>)>,
    budget: usize,
    dropped: u64,
}

impl Admit {
    fn push(&mut self, i: usize, s: Series) {
        if self.budget == 0 {
            self.dropped += 1;
        } else {
            self.budget -= 1;
            self.families[i].1.push(s);
        }
    }
}

fn child_path(parent: &str, name: &str) -> Arc<str> {
    if parent == "/" {
        format!("/{}", name).into()
    } else {
        format!("{}/{}", parent, name).into()
    }
}

pub(crate) fn render(snap: &Snapshot, f: &Filters, dropped_total: &AtomicU64) -> Rendered {
    let mut a = Admit {
        families: DEFS
            .iter()
            .filter(|d| f.groups.contains(&d.group))
            .map(|d| (d, Vec::new()))
            .collect(),
        budget: f.max_series - OWN_SERIES,
        dropped: 0,
    };
    let sys = System {
        stat: &snap.stat,
        meminfo: &snap.meminfo,
        vmstat: &snap.vmstat,
    };
    // Host-wide series first, then cgroups breadth-first: the cap cuts the
    // deepest cgroups.
    for i in 0..a.families.len() {
        match a.families[i].0.read {
            Read::System(get) => {
                if let Some(val) = get(&sys) {
                    a.push(
                        i,
                        Series {
                            cgroup: None,
                            extra: None,
                            val,
                        },
                    );
                }
            }
            Read::CpuModes => {
                for (mode, get) in CPU_MODES {
                    let v = snap.stat.total_cpu.as_ref().and_then(get);
                    if let Some(v) = v {
                        a.push(
                            i,
                            Series {
                                cgroup: None,
                                extra: Some(("mode", mode.to_string())),
                                val: Val::F(v as f64 / 1e6),
                            },
                        );
                    }
                }
            }
            Read::Cgroup(_) | Read::Device(_) => {}
        }
    }
    let mut level: Vec<(Arc<str>, &model::CgroupSample)> = vec![("/".into(), &snap.cgroup)];
    let mut depth = 0;
    while !level.is_empty() && depth <= f.max_depth {
        let mut next = Vec::new();
        for (path, cg) in level {
            if f.exclude.as_ref().is_some_and(|re| re.is_match(&path)) {
                continue;
            }
            if f.include.as_ref().is_none_or(|re| re.is_match(&path)) {
                cgroup_series(&mut a, &path, cg);
            }
            for (name, child) in cg.children.iter().flatten() {
                next.push((child_path(&path, name), child));
            }
        }
        level = next;
        depth += 1;
    }
    let dropped_total = dropped_total.fetch_add(a.dropped, Ordering::Relaxed) + a.dropped;
    let fams = Families {
        families: a.families,
        dropped_total,
        sample_time: snap
            .time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64(),
    };
    let mut registry = Registry::with_prefix("below");
    registry.register_collector(Box::new(fams));
    let mut om = String::new();
    prometheus_client::encoding::text::encode(&mut om, &registry)
        .expect("formatting into a String cannot fail");
    Rendered {
        openmetrics: om.into(),
        text: OnceLock::new(),
    }
}

fn cgroup_series(a: &mut Admit, path: &Arc<str>, cg: &model::CgroupSample) {
    for i in 0..a.families.len() {
        match a.families[i].0.read {
            Read::Cgroup(get) => {
                if let Some(val) = get(cg) {
                    a.push(
                        i,
                        Series {
                            cgroup: Some(path.clone()),
                            extra: None,
                            val,
                        },
                    );
                }
            }
            Read::Device(get) => {
                for (dev, st) in cg.io_stat.iter().flatten() {
                    if let Some(v) = get(st) {
                        a.push(
                            i,
                            Series {
                                cgroup: Some(path.clone()),
                                extra: Some(("device", dev.clone())),
                                val: Val::U(v),
                            },
                        );
                    }
                }
            }
            Read::System(_) | Read::CpuModes => {}
        }
    }
}

fn unit(u: Option<Unit>) -> Option<prometheus_client::registry::Unit> {
    u.map(|u| match u {
        Unit::Seconds => prometheus_client::registry::Unit::Seconds,
        Unit::Bytes => prometheus_client::registry::Unit::Bytes,
    })
}

fn encode_value(me: &mut MetricEncoder, kind: Kind, v: Val) -> std::fmt::Result {
    match (kind, v) {
        (Kind::Counter, Val::U(v)) => me.encode_counter::<NoLabelSet, _, u64>(&v, None),
        (Kind::Counter, Val::F(v)) => me.encode_counter::<NoLabelSet, _, f64>(&v, None),
        (Kind::Gauge, Val::U(v)) => me.encode_gauge(&v),
        (Kind::Gauge, Val::F(v)) => me.encode_gauge(&v),
    }
}

impl prometheus_client::collector::Collector for Families {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        for (def, series) in &self.families {
            if series.is_empty() {
                continue;
            }
            let u = unit(def.unit);
            let ty = match def.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut me = enc.encode_descriptor(def.name, def.help, u.as_ref(), ty)?;
            for s in series {
                match (&s.cgroup, &s.extra) {
                    (None, None) => encode_value(&mut me, def.kind, s.val)?,
                    (Some(c), None) => {
                        let l = [("cgroup", &**c)];
                        encode_value(&mut me.encode_family(&l)?, def.kind, s.val)?
                    }
                    (None, Some((k, v))) => {
                        let l = [(*k, v.as_str())];
                        encode_value(&mut me.encode_family(&l)?, def.kind, s.val)?
                    }
                    (Some(c), Some((k, v))) => {
                        let l = [("cgroup", &**c), (*k, v.as_str())];
                        encode_value(&mut me.encode_family(&l)?, def.kind, s.val)?
                    }
                }
            }
        }
        let dropped = prometheus_client::metrics::counter::ConstCounter::new(self.dropped_total);
        dropped.encode(enc.encode_descriptor(
            "exporter_dropped_series",
            "Series left out by metrics.max_series since record started",
            None,
            MetricType::Counter,
        )?)?;
        let mut me = enc.encode_descriptor(
            "sample_timestamp",
            "When the sample served was taken, seconds since the epoch",
            Some(&prometheus_client::registry::Unit::Seconds),
            MetricType::Gauge,
        )?;
        me.encode_gauge(&self.sample_time)
    }
}

/// OpenMetrics text → Prometheus text format 0.0.4: the same series, with
/// counter families named as their `_total` samples, and no `# UNIT` or
/// `# EOF` lines (0.0.4 readers such as promtool treat `_total` as a family
/// of its own otherwise).
pub(crate) fn to_text_format(om: &str) -> String {
    let counters: HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(p);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}
