use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::SystemTime;

use model::CgroupSample;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::MetricEncoder;
use prometheus_client::encoding::NoLabelSet;
use prometheus_client::metrics::MetricType;

use crate::render::render;
use crate::render::to_text_format;
use crate::Exported;
use crate::Filters;
use crate::Group;
use crate::Options;

fn cg(usage: u64, children: Vec<(&str, CgroupSample)>) -> CgroupSample {
    CgroupSample {
        cpu_stat: Some(cgroupfs::CpuStat {
            usage_usec: Some(usage),
            user_usec: Some(usage / 2),
            system_usec: Some(usage / 2),
            nr_periods: Some(0),
            nr_throttled: Some(0),
            throttled_usec: Some(0),
        }),
        tids_current: Some(3),
        children: Some(
            children
                .into_iter()
                .map(|(n, c)| (n.to_string(), c))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

/// / → a, b; a → a1 (0.5, 1.5, 2.5, 3.5 s of CPU).
fn snapshot() -> Exported {
    Exported {
        time: SystemTime::UNIX_EPOCH,
        cgroup: cg(
            500_000,
            vec![
                ("a", cg(1_500_000, vec![("a1", cg(3_500_000, vec![]))])),
                ("b", cg(2_500_000, vec![])),
            ],
        ),
        stat: Default::default(),
        meminfo: Default::default(),
        vmstat: Default::default(),
        text: OnceLock::new(),
    }
}

fn run(opts: Options) -> (String, u64) {
    let dropped = AtomicU64::new(0);
    let r = render(&snapshot(), &Filters::new(&opts).unwrap(), &dropped);
    (
        String::from_utf8(r.openmetrics.to_vec()).unwrap(),
        dropped.load(Ordering::Relaxed),
    )
}

fn series(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.starts_with('#')).collect()
}

fn cpu_only() -> Options {
    Options {
        groups: vec![Group::Cpu, Group::Pids],
        ..Default::default()
    }
}

#[test]
fn all_cgroups_counters_in_seconds() {
    let (om, dropped) = run(cpu_only());
    assert_eq!(dropped, 0);
    // 4 cgroups × (6 cpu + 1 tasks) + the exporter's 2.
    assert_eq!(series(&om).len(), 4 * 7 + 2, "{}", om);
    assert!(om.contains("below_cgroup_cpu_usage_seconds_total{cgroup=\"/a/a1\"} 3.5\n"));
    assert!(om.contains("# TYPE below_cgroup_cpu_usage_seconds counter\n"));
    assert!(om.contains("# UNIT below_cgroup_cpu_usage_seconds seconds\n"));
    assert!(om.contains("below_cgroup_tasks{cgroup=\"/b\"} 3\n"));
    assert!(om.ends_with("# EOF\n"));
}

#[test]
fn cap_is_exact_and_cuts_deepest_first() {
    let (om, dropped) = run(Options {
        max_series: 20,
        ..cpu_only()
    });
    let s = series(&om);
    assert_eq!(s.len(), 20, "{}", om);
    assert_eq!(dropped, 4 * 7 + 2 - 20);
    assert!(om.contains(&format!(
        "below_exporter_dropped_series_total {}\n",
        dropped
    )));
    assert!(!om.contains("/a/a1"), "deepest cgroup dropped first");
    assert!(om.contains("cgroup=\"/\""));
}

#[test]
fn dropped_counter_accumulates_over_samples() {
    let opts = Options {
        max_series: 20,
        ..cpu_only()
    };
    let f = Filters::new(&opts).unwrap();
    let dropped = AtomicU64::new(0);
    render(&snapshot(), &f, &dropped);
    let r = render(&snapshot(), &f, &dropped);
    let om = String::from_utf8(r.openmetrics.to_vec()).unwrap();
    assert!(
        om.contains("below_exporter_dropped_series_total 20\n"),
        "{}",
        om
    );
}

#[test]
fn depth_include_exclude() {
    let paths = |opts: Options| {
        let (om, _) = run(opts);
        series(&om)
            .iter()
            .filter_map(|l| Some(l.split_once("cgroup=\"")?.1.split_once('"')?.0.to_string()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        paths(Options {
            max_depth: Some(1),
            ..cpu_only()
        }),
        ["/", "/a", "/b"]
    );
    assert_eq!(
        paths(Options {
            include: Some("/a.*".into()),
            ..cpu_only()
        }),
        ["/a", "/a/a1"]
    );
    assert_eq!(
        paths(Options {
            exclude: Some("/a".into()),
            ..cpu_only()
        }),
        ["/", "/b"],
        "exclude drops the subtree"
    );
}

#[test]
fn bad_options_are_clear_errors() {
    let e = Filters::new(&Options {
        include: Some("(".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(format!("{:#}", e).contains("Invalid metrics.include regex"));
    let e = Filters::new(&Options {
        max_series: 2,
        ..Default::default()
    })
    .unwrap_err();
    assert!(format!("{:#}", e).contains("max_series must be more than 2"));
}

#[test]
fn text_format_names_counter_families_by_total() {
    let om = "# HELP below_x_seconds X.\n# TYPE below_x_seconds counter\n# UNIT below_x_seconds seconds\nbelow_x_seconds_total{cgroup=\"/\"} 1.5\n# HELP below_y_bytes Y.\n# TYPE below_y_bytes gauge\n# UNIT below_y_bytes bytes\nbelow_y_bytes 2\n# EOF\n";
    assert_eq!(
        to_text_format(om),
        "# HELP below_x_seconds_total X.\n# TYPE below_x_seconds_total counter\nbelow_x_seconds_total{cgroup=\"/\"} 1.5\n# HELP below_y_bytes Y.\n# TYPE below_y_bytes gauge\nbelow_y_bytes 2\n"
    );
}

#[test]
fn label_values_are_escaped() {
    let mut snap = snapshot();
    snap.cgroup
        .children
        .as_mut()
        .unwrap()
        .insert("we\"ird\\name".into(), cg(1, vec![]));
    let f = Filters::new(&cpu_only()).unwrap();
    let r = render(&snap, &f, &AtomicU64::new(0));
    let om = String::from_utf8(r.openmetrics.to_vec()).unwrap();
    assert!(om.contains("cgroup=\"/we\\\"ird\\\\name\""), "{}", om);
}

/// The test snapshot with every kind of series: io.stat devices, memory,
/// fractional seconds, host-wide series and a name that needs escaping.
fn rich_snapshot() -> Exported {
    let mut snap = snapshot();
    let root = &mut snap.cgroup;
    root.memory_current = Some(1 << 40);
    root.memory_stat = Some(cgroupfs::MemoryStat {
        anon: Some(4096),
        pgfault: Some(u64::MAX),
        ..Default::default()
    });
    let kids = root.children.as_mut().unwrap();
    kids.get_mut("a").unwrap().io_stat = Some(
        [("8:0", 1), ("253:16", 7)]
            .into_iter()
            .map(|(dev, v)| {
                let st = cgroupfs::IoStat {
                    rbytes: Some(v << 20),
                    wios: Some(v),
                    ..Default::default()
                };
                (dev.to_string(), st)
            })
            .collect(),
    );
    kids.insert("we\"ird\\name\n".into(), cg(1_234_567, vec![]));
    snap.stat.total_cpu = Some(procfs::CpuStat {
        user_usec: Some(1),
        idle_usec: Some(123_456_789_012),
        ..Default::default()
    });
    snap.stat.context_switches = Some(42);
    snap.meminfo.total = Some(16 << 20);
    snap.time = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
    snap
}

/// One metric family of an exposition, as parsed back from it.
#[derive(Debug)]
struct ParsedFamily {
    /// Family name without the unit suffix.
    name: String,
    help: String,
    kind: MetricType,
    unit: Option<prometheus_client::registry::Unit>,
    series: Vec<(Vec<(String, String)>, String)>,
}

impl prometheus_client::collector::Collector for ParsedFamily {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let mut me =
            enc.encode_descriptor(&self.name, &self.help, self.unit.as_ref(), self.kind)?;
        for (labels, value) in &self.series {
            if labels.is_empty() {
                encode_value(&mut me, self.kind, value)?;
            } else {
                encode_value(&mut me.encode_family(labels)?, self.kind, value)?;
            }
        }
        Ok(())
    }
}

fn encode_value(me: &mut MetricEncoder, kind: MetricType, value: &str) -> std::fmt::Result {
    // dtoa writes a float with a '.' or an exponent, itoa never.
    let float = value.contains(['.', 'e', 'E']);
    match (kind, float) {
        (MetricType::Counter, true) => {
            me.encode_counter::<NoLabelSet, _, f64>(&value.parse::<f64>().unwrap(), None)
        }
        (MetricType::Counter, false) => {
            me.encode_counter::<NoLabelSet, _, u64>(&value.parse::<u64>().unwrap(), None)
        }
        (_, true) => me.encode_gauge(&value.parse::<f64>().unwrap()),
        (_, false) => me.encode_gauge(&value.parse::<u64>().unwrap()),
    }
}

/// Parses `k="v",…` (escaped values), the text between a series' braces.
fn parse_labels(mut s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (k, rest) = s.split_once("=\"").unwrap();
        let mut v = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().unwrap() {
                (i, '"') => break i,
                (_, '\\') => v.push(match chars.next().unwrap().1 {
                    'n' => '\n',
                    c => c,
                }),
                (_, c) => v.push(c),
            }
        };
        out.push((k.to_string(), v));
        s = rest[end + 1..]
            .strip_prefix(',')
            .unwrap_or(&rest[end + 1..]);
    }
    out
}

/// prometheus-client's own encoding of what `om` serves.
fn reencode(om: &str) -> String {
    let mut fams: Vec<ParsedFamily> = Vec::new();
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            fams.push(ParsedFamily {
                name: name.into(),
                help: help.into(),
                kind: MetricType::Unknown,
                unit: None,
                series: vec![],
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            fams.last_mut().unwrap().kind = match rest.rsplit_once(' ').unwrap().1 {
                "counter" => MetricType::Counter,
                "gauge" => MetricType::Gauge,
                t => panic!("type {}", t),
            };
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let f = fams.last_mut().unwrap();
            let unit = rest.rsplit_once(' ').unwrap().1;
            f.name = f.name.strip_suffix(&format!("_{}", unit)).unwrap().into();
            f.unit = Some(prometheus_client::registry::Unit::Other(unit.into()));
        } else if line != "# EOF" {
            let (head, value) = line.rsplit_once(' ').unwrap();
            let labels = match head.split_once('{') {
                Some((_, l)) => parse_labels(l.strip_suffix('}').unwrap()),
                None => vec![],
            };
            fams.last_mut().unwrap().series.push((labels, value.into()));
        }
    }
    let mut registry = prometheus_client::registry::Registry::default();
    for f in fams {
        registry.register_collector(Box::new(f));
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
    out
}

#[test]
fn prometheus_client_encodes_what_we_serve_identically() {
    let snap = rich_snapshot();
    let f = Filters::new(&Options {
        groups: vec![
            Group::Cpu,
            Group::Memory,
            Group::MemoryStat,
            Group::Io,
            Group::Pids,
            Group::System,
        ],
        ..Default::default()
    })
    .unwrap();
    let r = render(&snap, &f, &AtomicU64::new(0));
    let om = String::from_utf8(r.openmetrics.to_vec()).unwrap();
    for want in [
        "below_cgroup_io_read_bytes_total{cgroup=\"/a\",device=\"253:16\"} 7340032\n",
        "below_cgroup_cpu_usage_seconds_total{cgroup=\"/we\\\"ird\\\\name\\n\"} 1.234567\n",
        "below_cgroup_memory_page_faults_total{cgroup=\"/\"} 18446744073709551615\n",
        "below_system_cpu_seconds_total{mode=\"idle\"} 123456.789012\n",
        "below_system_memory_total_bytes 17179869184\n",
        // dtoa's float, not Display's "0".
        "below_cgroup_cpu_throttled_seconds_total{cgroup=\"/\"} 0.0\n",
        "below_sample_timestamp_seconds 1700000000.123\n",
    ] {
        assert!(om.contains(want), "{} missing:\n{}", want, om);
    }
    assert_eq!(reencode(&om), om);
}

#[test]
fn docs_list_every_metric() {
    let doc = include_str!("../../../docs/metrics.md");
    assert!(
        doc.contains(&crate::mapping_markdown()),
        "docs/metrics.md is out of date; its table is:\n{}",
        crate::mapping_markdown()
    );
}

/// Seconds written from integer microseconds read back as exactly the f64
/// prometheus-client writes, never longer: every value up to 5 s,
/// pseudo-random ones up to the limit, and around the limit. (dtoa's
/// Grisu2 is not always shortest: 649 us is 0.0006489999999999999 there.)
#[test]
fn seconds_from_micros_read_back_as_the_f64() {
    use crate::render::push_secs;
    let mut check = |us: u64| {
        let mut ours = String::new();
        push_secs(&mut ours, us);
        let f = us as f64 / 1e6;
        let theirs = dtoa::Buffer::new().format(f).to_owned();
        assert_eq!(
            ours.parse::<f64>().unwrap().to_bits(),
            f.to_bits(),
            "{us} us: {ours}"
        );
        assert!(ours.len() <= theirs.len(), "{us} us: {ours} vs {theirs}");
        assert!(ours.contains('.') || ours.contains('e'), "{us} us: {ours}");
    };
    (0..2_000_000).for_each(&mut check);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let limit = (1u64 << 33) * 1_000_000;
    for _ in 0..500_000 {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check(x % limit);
        check(x % 1_000_000_000_000);
    }
    (limit - 1_000..limit + 1_000).for_each(&mut check);
    check(u64::MAX);
}
