//! Host integration tests of `below record --listen`: the series cap, a bind
//! failure, and clients that hold connections open without sending. Needs
//! root (reads every cgroup of the host's cgroup2 mount).

use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::net::TcpStream;
use std::process::Child;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

mod common;

use common::Env;

struct Recorder {
    child: Child,
    port: u16,
    _env: Env,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn record(extra_config: &str) -> Recorder {
    let env = Env::with_config(extra_config);
    let port = free_port();
    let child = env
        .below(&["--cgroup-backend", "read", "record", "-i", "1", "--listen"])
        .arg(format!("127.0.0.1:{}", port))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r = Recorder {
        child,
        port,
        _env: env,
    };
    let t0 = Instant::now();
    while get(r.port).is_none_or(|(status, _)| status != 200) {
        assert!(t0.elapsed() < Duration::from_secs(30), "no /metrics");
        std::thread::sleep(Duration::from_millis(200));
    }
    r
}

/// GET /metrics as a plain HTTP/1.0 client: (status, body).
fn get(port: u16) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split(' ').nth(1)?.parse().ok()?;
    let (_, body) = resp.split_once("\r\n\r\n")?;
    Some((status, body.to_string()))
}

fn series(body: &str) -> Vec<&str> {
    body.lines().filter(|l| !l.starts_with('#')).collect()
}

fn value(body: &str, name: &str) -> f64 {
    series(body)
        .iter()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{} missing", name))
}

#[test]
fn cap_serves_exactly_max_series_and_counts_the_rest() {
    let r = record("[metrics]\nmax_series = 40\n");
    let (_, body) = get(r.port).unwrap();
    // The host metrics alone (28) plus the root cgroup exceed 40.
    assert_eq!(series(&body).len(), 40, "{}", body);
    assert!(value(&body, "below_exporter_dropped_series_total") > 0.0);
    // Breadth-first: the host and the root cgroup come first.
    assert!(body.contains("below_cgroup_cpu_usage_seconds_total{cgroup=\"/\"}"));
}

#[test]
fn default_exports_cgroups_and_host() {
    let r = record("");
    let (_, body) = get(r.port).unwrap();
    for want in [
        "below_system_cpu_seconds_total{mode=\"user\"}",
        "below_system_memory_total_bytes ",
        "below_cgroup_cpu_usage_seconds_total{cgroup=\"/\"}",
        "below_cgroup_descendants{cgroup=\"/\"}",
        "below_exporter_dropped_series_total 0",
    ] {
        assert!(body.contains(want), "{} missing:\n{}", want, body);
    }
    assert!(
        !body.contains("host"),
        "no host label: Prometheus adds instance"
    );
}

/// The `[metrics]` keys reach the exporter (their semantics on a known tree
/// are unit tests of bstats-metrics).
#[test]
fn metrics_config_keys_reach_the_exporter() {
    let r = record("[metrics]\nmax_depth = 0\n");
    let (_, body) = get(r.port).unwrap();
    let cgroup_lines = series(&body)
        .into_iter()
        .filter(|l| l.contains("cgroup=\""))
        .collect::<Vec<_>>();
    assert!(!cgroup_lines.is_empty());
    assert!(
        cgroup_lines.iter().all(|l| l.contains("cgroup=\"/\"")),
        "only the root at depth 0: {:?}",
        cgroup_lines
    );
    drop(r);
    let r = record("[metrics]\nexclude = \"/.+\"\ngroups = [\"cpu\"]\n");
    let (_, body) = get(r.port).unwrap();
    // Only the root's cpu.stat series (3 at the root: no cpu controller
    // fields there) and the exporter's own 2.
    for l in series(&body) {
        assert!(
            l.starts_with("below_cgroup_cpu_") && l.contains("{cgroup=\"/\"}")
                || l.starts_with("below_exporter_")
                || l.starts_with("below_sample_"),
            "{}",
            l
        );
    }
    assert!(body.contains("below_cgroup_cpu_usage_seconds_total{cgroup=\"/\"}"));
}

#[test]
fn bind_failure_is_one_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let env = Env::new();
    let out = env
        .below(&[
            "--cgroup-backend",
            "read",
            "record",
            "--count",
            "1",
            "--listen",
        ])
        .arg(addr.to_string())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("Failed to listen on {} for metrics", addr))
            && err.contains("Address already in use"),
        "{}",
        err
    );
    assert!(
        !env.store().exists(),
        "no store left behind by a failed start"
    );
}

#[test]
fn silent_clients_do_not_stall_record_or_scrapes() {
    let r = record("");
    let t0 = Instant::now();
    let ts = |body: &str| value(body, "below_sample_timestamp_seconds");
    let before = ts(&get(r.port).unwrap().1);
    // More idle connections than the server keeps, and one sending half a
    // request head.
    let mut idle: Vec<TcpStream> = (0..20)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", r.port)).ok())
        .collect();
    if let Some(s) = idle.first_mut() {
        s.write_all(b"GET /metr").unwrap();
    }
    // The header read timeout (5 s) frees the slots; then scrapes succeed
    // and show samples taken meanwhile: record kept sampling.
    let mut after = None;
    while t0.elapsed() < Duration::from_secs(20) {
        if let Some((200, body)) = get(r.port) {
            if ts(&body) > before + 3.0 {
                after = Some(ts(&body));
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(after.is_some(), "no fresh sample served within 20 s");
    drop(idle);
}
