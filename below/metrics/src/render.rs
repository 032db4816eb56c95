//! One snapshot → OpenMetrics text, within the series cap.
//!
//! prometheus-client writes everything but the cgroup series lines: each
//! metric's `# HELP`/`# TYPE`/`# UNIT` lines (once per process), the
//! exporter's own metrics and `# EOF`. Its per-series path re-encodes the
//! label set of every series through a `dyn Write` call per piece; at 29
//! series per cgroup that was a third of a BPF sample's CPU. We write the
//! series lines ourselves with the same formatting (itoa, its label
//! escaping; seconds as the shortest decimal of the same f64, see
//! [`push_secs`]): each cgroup's label text once, a few appends per series.
//! test.rs checks that prometheus-client re-encodes our output byte for byte.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::SystemTime;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::EncodeMetric;
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
use crate::Exported;
use crate::Filters;
use crate::Rendered;

/// Series the exporter always serves about itself, counted in the cap:
/// `below_exporter_dropped_series_total` and `below_sample_timestamp_seconds`.
pub const OWN_SERIES: usize = 2;

const PREFIX: &str = "below";

/// What prometheus-client makes of a [`Def`], the same for every sample.
struct Family {
    /// `# HELP`, `# TYPE` and `# UNIT` lines.
    header: String,
    /// Name of its samples: the family's, `_total` added for a counter.
    sample: String,
    /// `sample{`: where a series with labels starts.
    open: String,
}

fn unit(u: Option<Unit>) -> Option<prometheus_client::registry::Unit> {
    u.map(|u| match u {
        Unit::Seconds => prometheus_client::registry::Unit::Seconds,
        Unit::Bytes => prometheus_client::registry::Unit::Bytes,
    })
}

fn metric_type(k: Kind) -> MetricType {
    match k {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    }
}

/// A metric without samples: prometheus-client encodes only its descriptor.
#[derive(Debug)]
struct Descriptor(&'static Def);

impl prometheus_client::collector::Collector for Descriptor {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let d = self.0;
        enc.encode_descriptor(d.name, d.help, unit(d.unit).as_ref(), metric_type(d.kind))?;
        Ok(())
    }
}

/// The [`Family`] of each of [`DEFS`], by index.
fn families() -> &'static [Family] {
    static FAMILIES: OnceLock<Vec<Family>> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        DEFS.iter()
            .map(|d| {
                let mut registry = Registry::with_prefix(PREFIX);
                registry.register_collector(Box::new(Descriptor(d)));
                let mut header = String::new();
                prometheus_client::encoding::text::encode_registry(&mut header, &registry)
                    .expect("formatting into a String cannot fail");
                let family = header
                    .lines()
                    .find_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
                    .expect("a descriptor has a # TYPE line")
                    .0;
                let sample = match d.kind {
                    Kind::Counter => format!("{}_total", family),
                    Kind::Gauge => family.to_string(),
                };
                let open = format!("{sample}{{");
                Family {
                    header,
                    sample,
                    open,
                }
            })
            .collect()
    })
}

/// Appends `s` as a label value, escaped as prometheus-client escapes it.
fn push_escaped(out: &mut String, s: &str) {
    let mut last = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            b'\n' => "\\n",
            _ => continue,
        };
        out.push_str(&s[last..i]);
        out.push_str(esc);
        last = i + 1;
    }
    out.push_str(&s[last..]);
}

/// `name="value"`, value escaped.
fn label(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value);
    out.push('"');
}

/// Appends one series line: `labels` is the text between the braces,
/// already escaped ("" for none).
fn push_series(out: &mut String, sample: &str, labels: &str, val: Val) {
    out.push_str(sample);
    if !labels.is_empty() {
        out.push('{');
        out.push_str(labels);
        out.push('}');
    }
    out.push(' ');
    push_value(out, val);
}

/// Appends the value and the line's end.
fn push_value(out: &mut String, val: Val) {
    match val {
        Val::U(v) => out.push_str(itoa::Buffer::new().format(v)),
        Val::Usec(us) => push_secs(out, us),
    }
    out.push('\n');
}

/// Below this, microseconds are written as seconds from integers.
const EXACT_BELOW_US: u64 = (1 << 33) * 1_000_000;

/// Appends `us` microseconds as seconds: the shortest decimal (at least
/// one decimal) that reads back as the f64 `us / 1e6` prometheus-client
/// would write. Below 2^33 s doubles are under 1e-6 apart, so no decimal
/// shorter than the exact six-decimal one reads back the same: that one,
/// trailing zeros dropped, is written from integers (dtoa was the largest
/// cost of a scrape after the getters, and its Grisu2 is not always
/// shortest: 649 us is 0.0006489999999999999 there). Above, dtoa.
pub(crate) fn push_secs(out: &mut String, us: u64) {
    if us >= EXACT_BELOW_US {
        out.push_str(dtoa::Buffer::new().format(us as f64 / 1e6));
        return;
    }
    out.push_str(itoa::Buffer::new().format(us / 1_000_000));
    out.push('.');
    let mut frac = us % 1_000_000;
    if frac == 0 {
        out.push('0');
        return;
    }
    let mut digits = [b'0'; 6];
    for d in digits.iter_mut().rev() {
        *d += (frac % 10) as u8;
        frac /= 10;
    }
    let len = 6 - digits.iter().rev().take_while(|&&d| d == b'0').count();
    out.push_str(std::str::from_utf8(&digits[..len]).expect("ASCII digits"));
}

/// The most [`push_series`] adds beyond the name and labels: braces, space,
/// newline and the longest number itoa or dtoa writes.
const SERIES_SLACK: usize = 4 + 24;

/// Where series come from: the host (no cgroup) or one cgroup.
struct Source<'a> {
    cgroup: Option<&'a model::CgroupSample>,
    /// In [`Texts::closes`]: `cgroup="…"} ` (label escaped), what follows a
    /// series' name and `{` up to its value; empty for the host.
    close: Range<usize>,
    /// Its series admitted and not yet written: all of them, or the first
    /// few where the cap falls.
    left: usize,
}

impl Source<'_> {
    /// `cgroup="…"`, escaped; "" for the host.
    fn labels<'t>(&self, closes: &'t str) -> &'t str {
        &closes[self.close.start..self.close.end.saturating_sub(2).max(self.close.start)]
    }
}

/// Calls `f` with the label text and value of each series metric `def` has
/// from `cgroup` (host-wide metrics from `None`); `buf` holds labels made
/// per series.
fn for_each_series(
    def: &Def,
    sys: &System,
    cgroup: Option<&model::CgroupSample>,
    labels: &str,
    buf: &mut String,
    mut f: impl FnMut(&str, Val),
) {
    match (&def.read, cgroup) {
        (Read::System(get), None) => {
            if let Some(v) = get(sys) {
                f("", v)
            }
        }
        (Read::CpuModes, None) => {
            for (mode, get) in CPU_MODES {
                if let Some(v) = sys.stat.total_cpu.as_ref().and_then(get) {
                    buf.clear();
                    label(buf, "mode", mode);
                    f(buf, Val::Usec(v));
                }
            }
        }
        (Read::Cgroup(get), Some(cg)) => {
            if let Some(v) = get(cg) {
                f(labels, v)
            }
        }
        (Read::Device(get), Some(cg)) => {
            for (dev, st) in cg.io_stat.iter().flatten() {
                if let Some(v) = get(st) {
                    buf.clear();
                    buf.push_str(labels);
                    buf.push(',');
                    label(buf, "device", dev);
                    f(buf, Val::U(v));
                }
            }
        }
        _ => {}
    }
}

/// Appends the path of child `name` of the cgroup at `parent` in `paths`
/// to `paths`; returns where it is.
fn child_path(paths: &mut String, parent: Range<usize>, name: &str) -> Range<usize> {
    let start = paths.len();
    if parent.len() > 1 {
        paths.extend_from_within(parent);
    }
    paths.push('/');
    paths.push_str(name);
    start..paths.len()
}

/// Most a series of `def` adds to a source's label text: `,device="…"`
/// or `mode="…"`.
const EXTRA_LABEL: usize = 32;

/// Renders in two passes so the text is written once, in place: the first
/// admits series (host-wide first, then cgroups breadth-first, so the cap
/// cuts the deepest cgroups) and sizes the buffer; the second writes each
/// metric's series from every source that has them. (One pass into a body
/// per metric, joined at the end, measured slower: every body grows by
/// copies and the text is written twice.) When even an upper bound of the
/// series, counted without reading a value, is within the cap, all are
/// admitted without asking each metric first.
pub(crate) fn render(snap: &Exported, f: &Filters, dropped_total: &AtomicU64) -> Rendered {
    let exported: Vec<(&Def, &Family)> = DEFS
        .iter()
        .zip(families())
        .filter(|(d, _)| f.groups.contains(&d.group))
        .collect();
    let sys = System {
        stat: &snap.stat,
        meminfo: &snap.meminfo,
        vmstat: &snap.vmstat,
    };
    // Host-wide metrics have series from the host only, cgroup metrics
    // from cgroups only: each source is asked for its own.
    let host = |d: &Def| matches!(d.read, Read::System(_) | Read::CpuModes);
    let (host_defs, cgroup_defs): (Vec<_>, Vec<_>) = exported.iter().partition(|(d, _)| host(d));
    let mut sources = vec![Source {
        cgroup: None,
        close: 0..0,
        left: 0,
    }];
    // Paths and label texts of all cgroups, each in one string (a few
    // allocations per scrape, not a few per cgroup).
    let mut paths = String::from("/");
    let mut closes = String::new();
    let mut level = vec![(0..1, &snap.cgroup)];
    let mut depth = 0;
    while !level.is_empty() && depth <= f.max_depth {
        let mut next = Vec::new();
        for (range, cg) in &level {
            let path = &paths[range.clone()];
            if f.exclude.as_ref().is_some_and(|re| re.is_match(path)) {
                continue;
            }
            if f.include.as_ref().is_none_or(|re| re.is_match(path)) {
                let start = closes.len();
                label(&mut closes, "cgroup", path);
                closes.push_str("} ");
                sources.push(Source {
                    cgroup: Some(cg),
                    close: start..closes.len(),
                    left: 0,
                });
            }
            for (name, child) in cg.children.iter().flatten() {
                next.push((child_path(&mut paths, range.clone(), name), child));
            }
        }
        level = next;
        depth += 1;
    }

    let defs_of = |src: &Source| {
        if src.cgroup.is_some() {
            &cgroup_defs
        } else {
            &host_defs
        }
    };
    // Series and bytes at most, per source: per kind of metric, how many
    // and their names' length.
    let per_kind = |defs: &[&(&Def, &Family)], kind: fn(&Read) -> bool| {
        let d = defs.iter().filter(|(def, _)| kind(&def.read));
        (
            d.clone().count(),
            d.map(|(_, f)| f.sample.len()).sum::<usize>(),
        )
    };
    let one = |r: &Read| matches!(r, Read::Cgroup(_) | Read::System(_));
    let (host_one, host_modes) = (
        per_kind(&host_defs, one),
        per_kind(&host_defs, |r| matches!(r, Read::CpuModes)),
    );
    let (cgroup_one, cgroup_devices) = (
        per_kind(&cgroup_defs, one),
        per_kind(&cgroup_defs, |r| matches!(r, Read::Device(_))),
    );
    let bound = |src: &Source| {
        let (one, (many, many_names), k) = match src.cgroup {
            None => (host_one, host_modes, CPU_MODES.len()),
            Some(c) => (
                cgroup_one,
                cgroup_devices,
                c.io_stat.as_ref().map_or(0, |d| d.len()),
            ),
        };
        let n = one.0 + many * k;
        let line = src.close.len() + EXTRA_LABEL + SERIES_SLACK;
        (n, one.1 + many_names * k + n * line)
    };
    let mut budget = f.max_series - OWN_SERIES;
    let mut dropped = 0u64;
    let mut size = 0;
    let bounds: Vec<(usize, usize)> = sources.iter().map(bound).collect();
    if bounds.iter().map(|b| b.0).sum::<usize>() <= budget {
        for (src, b) in sources.iter_mut().zip(&bounds) {
            src.left = b.0;
            size += b.1;
        }
    } else {
        let mut buf = String::new();
        for src in &mut sources {
            let mut n = 0;
            for (def, fam) in defs_of(src) {
                for_each_series(
                    def,
                    &sys,
                    src.cgroup,
                    src.labels(&closes),
                    &mut buf,
                    |l, _| {
                        n += 1;
                        size += fam.sample.len() + l.len() + SERIES_SLACK;
                    },
                );
            }
            src.left = n.min(budget);
            budget -= src.left;
            dropped += (n - src.left) as u64;
        }
    }
    let mut buf = String::new();

    let dropped_total = dropped_total.fetch_add(dropped, Ordering::Relaxed) + dropped;
    let own = Own {
        dropped_total,
        sample_time: snap
            .time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64(),
    };
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(own));
    let mut tail = String::new();
    prometheus_client::encoding::text::encode(&mut tail, &registry)
        .expect("formatting into a String cannot fail");

    let headers: usize = exported.iter().map(|(_, fam)| fam.header.len()).sum();
    let mut om = String::with_capacity(size + headers + tail.len());
    let (host_source, cgroup_sources) = sources.split_at_mut(1);
    for (def, fam) in &exported {
        let start = om.len();
        om.push_str(&fam.header);
        let body = om.len();
        let from = if host(def) {
            &mut *host_source
        } else {
            &mut *cgroup_sources
        };
        match def.read {
            // The bulk of the text: one series per cgroup, a few appends.
            Read::Cgroup(get) => {
                for src in from.iter_mut().filter(|s| s.left > 0) {
                    let Some(v) = src.cgroup.and_then(get) else {
                        continue;
                    };
                    src.left -= 1;
                    om.push_str(&fam.open);
                    om.push_str(&closes[src.close.clone()]);
                    push_value(&mut om, v);
                }
            }
            _ => {
                for src in from.iter_mut().filter(|s| s.left > 0) {
                    let labels = src.labels(&closes);
                    let left = &mut src.left;
                    for_each_series(def, &sys, src.cgroup, labels, &mut buf, |l, v| {
                        if *left > 0 {
                            *left -= 1;
                            push_series(&mut om, &fam.sample, l, v);
                        }
                    });
                }
            }
        }
        // A metric without series is left out, header and all.
        if om.len() == body {
            om.truncate(start);
        }
    }
    om.push_str(&tail);
    Rendered {
        openmetrics: om.into_bytes().into(),
        text: OnceLock::new(),
    }
}

/// The exporter's own metrics, encoded by prometheus-client.
#[derive(Debug)]
struct Own {
    dropped_total: u64,
    sample_time: f64,
}

impl prometheus_client::collector::Collector for Own {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
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
