//! A small run of the benchmark on this host's real cgroups: it completes,
//! every section gives sane non-zero numbers, backends the kernel lacks are
//! rows with a reason, and its cgroups are gone afterwards. No timing
//! thresholds: the numbers are the benchmark's business, not the test's.

use std::process::Command;

use serde_json::Value;

fn num(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

#[test]
fn smoke_run_produces_sane_numbers() {
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let md = dir.path().join("bench.md");
    let root = bstats_collector::find_cgroup2_mount().expect("a cgroup2 mount");
    let child = Command::new(env!("CARGO_BIN_EXE_cgroup-bench"))
        .args(["--sizes", "10", "--min-samples", "2", "--max-samples", "3"])
        .args(["--budget-s", "0", "--readers", "1,2", "--cgroups", "10"])
        .args([
            "--holders",
            "2",
            "--overhead-secs",
            "1",
            "--overhead-rounds",
            "1",
        ])
        .arg("--root")
        .arg(&root)
        .arg("--json")
        .arg(&json)
        .arg("--md")
        .arg(&md)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "cgroup-bench failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !root.join(format!("bstats-bench-{pid}")).exists(),
        "the benchmark left its cgroups behind"
    );

    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = r["collect"][0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "one row per collector, none dropped");
    for row in rows {
        let status = row["status"].as_str().unwrap();
        match row["kind"].as_str().unwrap() {
            "baseline" | "read" => {
                assert_eq!(status, "ok", "{row}");
                assert!(num(row, "/cgroups") >= 11.0, "10 created + root: {row}");
                assert!(num(row, "/samples") >= 2.0);
                for p in [
                    "/read/cpu_ms",
                    "/read/wall_p50_ms",
                    "/read/wall_p99_ms",
                    "/read_syscalls",
                    "/alloc_read_bytes",
                    "/store/cpu_ms",
                ] {
                    assert!(num(row, p) > 0.0, "{p} of {row}");
                }
                assert!(num(row, "/read/wall_p99_ms") >= num(row, "/read/wall_p50_ms"));
                // Without tracefs only our reader can count its opens.
                if row["kind"] == "read" || row["opens_source"] == "perf" {
                    assert!(num(row, "/opens") > 0.0, "{row}");
                }
            }
            _ => assert!(
                status == "ok" || (status.starts_with("n/a: ") && status.len() > 6),
                "{row}"
            ),
        }
    }

    let par = r["parallel"]["rows"].as_array().unwrap();
    assert_eq!(par.len(), 8, "4 collectors x K=1,2");
    for row in par.iter().filter(|p| p["status"] == "ok") {
        assert!(
            num(row, "/rounds") >= 2.0 && num(row, "/p50_ms") > 0.0,
            "{row}"
        );
        assert!(num(row, "/cpu_ms") > 0.0, "{row}");
    }
    assert!(par
        .iter()
        .any(|p| p["kind"] == "read" && p["readers"] == 2 && p["status"] == "ok"));

    let ovh = r["overhead"]["rows"].as_array().unwrap();
    assert!(num(&ovh[0], "/ops_per_s") > 0.0, "workload alone");
    let base = ovh
        .iter()
        .find(|o| o["monitor"].as_str().unwrap().starts_with("below 0.9"))
        .unwrap();
    assert_eq!(base["status"], "ok", "{base}");
    assert!(num(base, "/ops_per_s") > 0.0);

    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("Reproduce: `cgroup-bench --sections collect"),
        "{md}"
    );
    assert!(md.contains("| below 0.9 (cgroupfs walk) |"), "{md}");
}
