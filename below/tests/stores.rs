//! Host integration tests of stores and snapshots: below 0.9 (built from
//! crates.io by tests/reference/below09.sh) and ours read each other's
//! snapshots; `debug dump-store` and `debug convert-store`.

use std::fs;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::process::Output;
use std::process::Stdio;
use std::time::Duration;

mod common;

use common::now_secs;
use common::run_ok;
use common::sample_times;
use common::stderr_of;
use common::wait_until;
use common::Env;

/// below 0.9.0 from crates.io, with a private config of its own.
struct Below09 {
    bin: PathBuf,
    conf: PathBuf,
    store: PathBuf,
    dir: tempfile::TempDir,
}

impl Below09 {
    fn new() -> Below09 {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/reference/below09.sh");
        let out = Command::new(script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "tests/reference/below09.sh failed");
        let bin = PathBuf::from(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .last()
                .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("below.conf");
        let store = dir.path().join("store");
        fs::write(
            &conf,
            format!(
                "log_dir = {:?}\nstore_dir = {:?}\ncgroup_root = {:?}\n",
                dir.path().join("log"),
                store,
                bstats_collector::find_cgroup2_mount().unwrap()
            ),
        )
        .unwrap();
        Below09 {
            bin,
            conf,
            store,
            dir,
        }
    }

    fn below(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--config").arg(&self.conf).args(args);
        // below 0.9's `dump --snapshot` never removes what it unpacks
        // (snapshot_replay.*): into our directory, removed with it.
        c.env("TMPDIR", self.dir.path());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        run_ok(self.below(args), "below 0.9", args)
    }
}

/// A below command runner: ours or below 0.9, each with its own config.
type Run<'a> = &'a dyn Fn(&[&str]) -> Output;

/// `dump <kind>` of a snapshot (or, with None, of the store) over
/// [begin, end], by `dumper`.
fn dump_snapshot(dumper: Run, snapshot: Option<&Path>, kind: &str, begin: u64, end: u64) -> String {
    let snapshot = snapshot.map(|s| s.to_str().unwrap());
    let from = match &snapshot {
        Some(s) => vec!["--snapshot", s],
        None => vec![],
    };
    let out = dumper(
        &[
            &["dump"][..],
            &from,
            &[
                kind,
                "-b",
                &begin.to_string(),
                "-e",
                &end.to_string(),
                "--everything",
                "-O",
                "json",
            ],
        ]
        .concat(),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The number of rows with a timestamp in a JSON dump.
fn rows(json: &str) -> usize {
    json.matches("\"Timestamp\"").count()
}

/// `snapshot` of [begin, end] into `out`, by `run`.
fn take_snapshot(run: Run, begin: u64, end: u64, out: &Path) {
    run(&[
        "snapshot",
        "-b",
        &begin.to_string(),
        "-e",
        &end.to_string(),
        "-o",
        out.to_str().unwrap(),
    ]);
}

/// A dump as JSON; `by_b09`: below 0.9's, with its strings escaped as
/// ours shows every string of a sample (below 0.9 prints them raw).
fn dump_json(dump: &str, by_b09: bool) -> serde_json::Value {
    fn escape(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                *s = bstats_store::escape::for_terminal(s).into_owned();
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(escape),
            serde_json::Value::Object(o) => o.values_mut().for_each(escape),
            _ => {}
        }
    }
    let mut v = serde_json::from_str(dump).unwrap_or_else(|e| panic!("{e}: {dump}"));
    if by_b09 {
        escape(&mut v);
    }
    v
}

/// argv[0] of a process running while both record: control characters
/// in a command line, which anyone can set on their own process.
const HOSTILE_ARGV0: &str = "sleep\u{1b}]0;title\u{7}\nline";

/// Every "Cmdline" of a dump.
fn cmdlines(dump: &serde_json::Value) -> Vec<&str> {
    match dump {
        serde_json::Value::Array(a) => a.iter().flat_map(cmdlines).collect(),
        serde_json::Value::Object(o) => o
            .get("Cmdline")
            .and_then(|c| c.as_str())
            .into_iter()
            .collect(),
        _ => vec![],
    }
}

/// For each kind, ours and below 0.9 dump `snapshot` alike (at least 3
/// rows by its recorder, `whose`; strings escaped by ours), and as the
/// recorder dumps its store.
fn assert_dumps_agree(
    ours: Run,
    b09: Run,
    theirs: bool,
    snapshot: &Path,
    (begin, end): (u64, u64),
) {
    let (recorder, whose, store_of) = if theirs {
        (b09, "below 0.9's", "its")
    } else {
        (ours, "our", "our")
    };
    for kind in ["system", "cgroup", "process"] {
        let by_ours = dump_snapshot(ours, Some(snapshot), kind, begin, end);
        let by_b09 = dump_snapshot(b09, Some(snapshot), kind, begin, end);
        let by_recorder = if theirs { &by_b09 } else { &by_ours };
        assert!(rows(by_recorder) >= 3, "{} rows: {}", kind, by_recorder);
        if kind == "process" {
            let shows = |dump: &str, by_b09: bool, argv0: &str| {
                let json = serde_json::from_str(dump).unwrap();
                let found = cmdlines(&json).iter().any(|c| c.starts_with(argv0));
                assert!(
                    found,
                    "{argv0:?} not in a Cmdline (below 0.9: {by_b09}): {dump}"
                );
            };
            shows(
                &by_ours,
                false,
                &bstats_store::escape::for_terminal(HOSTILE_ARGV0),
            );
            shows(&by_b09, true, HOSTILE_ARGV0);
        }
        let ours_json = dump_json(&by_ours, false);
        assert_eq!(
            ours_json,
            dump_json(&by_b09, true),
            "dump {} of {} snapshot differs",
            kind,
            whose
        );
        let store = dump_snapshot(recorder, None, kind, begin, end);
        assert_eq!(
            ours_json,
            dump_json(&store, theirs),
            "dump {}: {} snapshot != {} store",
            kind,
            whose,
            store_of
        );
    }
}

#[test]
fn snapshots_interoperate_with_below_0_9() {
    if bstats_testkit::skip_unless_root("records every cgroup with below 0.9") {
        return;
    }
    let b09 = Below09::new();
    let env = Env::new();
    let mut hostile = Command::new("sleep");
    std::os::unix::process::CommandExt::arg0(&mut hostile, HOSTILE_ARGV0);
    let hostile = KillOnDrop(hostile.arg("600").spawn().unwrap());
    let dir = env.dir();
    let ours_run = |a: &[&str]| env.run(a);
    let b09_run = |a: &[&str]| b09.run(a);

    // Ours records, ours snapshots, both dump.
    let begin = now_secs();
    env.run(&["record", "-i", "1", "--count", "4"]);
    let end = now_secs();
    let ours = dir.join("ours.snapshot");
    take_snapshot(&ours_run, begin, end, &ours);
    assert_dumps_agree(&ours_run, &b09_run, false, &ours, (begin, end));

    // below 0.9 records (until stopped: it has no --count) and snapshots.
    let begin = now_secs();
    let mut rec = b09
        .below(&["record", "-i", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let enough = wait_until(Duration::from_secs(60), || {
        fs::read_dir(&b09.store).is_ok_and(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("index_"))
                .any(|e| e.metadata().is_ok_and(|m| m.len() >= 4 * 32))
        })
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rec.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    rec.wait().unwrap();
    assert!(enough, "below 0.9 recorded fewer than 4 samples");
    let end = now_secs();
    let theirs = dir.join("theirs.snapshot");
    take_snapshot(&b09_run, begin, end, &theirs);
    assert_dumps_agree(&ours_run, &b09_run, true, &theirs, (begin, end));
    drop(hostile);
}

/// A child killed and reaped when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn debug_dump_store_and_convert_store() {
    let env = Env::new();
    let begin = now_secs();
    env.run(&["record", "-i", "1", "--count", "3"]);
    let end = now_secs();
    let times = sample_times(&env, begin, end);
    assert!(times.len() >= 2, "{:?}", times);

    let out = env.run(&["debug", "dump-store", "-t", &times[0].to_string(), "-j"]);
    let frame: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(frame["sample"]["cgroup"].is_object(), "{}", frame);
    let out = env
        .below(&["debug", "dump-store", "-t", &(begin - 3600).to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr_of(&out).contains("Exact requested timestamp not found"));

    let to = env.dir().join("converted");
    env.run(&[
        "debug",
        "convert-store",
        "-b",
        &begin.to_string(),
        "-e",
        &end.to_string(),
        "--to-store-dir",
        to.to_str().unwrap(),
        "--compress",
        "--dict-compress-chunk-size",
        "2",
    ]);
    // `dump cgroup` of a store by ours.
    let dump = |store: &Path| {
        let run =
            |a: &[&str]| env.run(&[&["--store-dir", store.to_str().unwrap()][..], a].concat());
        dump_snapshot(&run, None, "cgroup", begin, end)
    };
    let original = dump(&env.store());
    assert!(rows(&original) >= 2, "{}", original);
    assert_eq!(original, dump(&to), "the converted store dumps the same");
}
