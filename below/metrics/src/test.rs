use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::SystemTime;

use model::CgroupSample;

use crate::render::render;
use crate::render::to_text_format;
use crate::Filters;
use crate::Group;
use crate::Options;
use crate::Snapshot;

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
fn snapshot() -> Snapshot {
    Snapshot {
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

#[test]
fn docs_list_every_metric() {
    let doc = include_str!("../../../docs/metrics.md");
    assert!(
        doc.contains(&crate::mapping_markdown()),
        "docs/metrics.md is out of date; its table is:\n{}",
        crate::mapping_markdown()
    );
}
