//! Host integration tests of the `below` binary: record → dump/replay,
//! live in a real terminal (tmux), and clear errors. Needs root (test
//! cgroups) and tmux.

use std::fs;
use std::process::Command;
use std::process::Output;
use std::time::Duration;
use std::time::Instant;

mod common;

use common::Env;

use bstats_testkit::Controllers;
use bstats_testkit::Fixture;

/// A test cgroup with two children under the host's cgroup2 mount.
fn test_cgroups(tag: &str) -> Fixture {
    let root = bstats_collector::find_cgroup2_mount().unwrap();
    let mut t = Fixture::new(&root, tag, Controllers::All).expect("test cgroups (are you root?)");
    for d in ["web", "db"] {
        t.mkdir(d).unwrap();
    }
    t
}

/// A detached tmux session on a private server, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str) -> Tmux {
        let t = Tmux {
            socket: format!(
                "bstats-test-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ),
        };
        let ok = t
            .tmux(&["new-session", "-d", "-x", "200", "-y", "50", cmd])
            .status
            .success();
        assert!(ok, "tmux failed to start");
        t
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux installed")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p"]).stdout).into_owned()
    }

    /// Waits until the screen shows all of `want`; returns the last screen.
    fn wait_for(&self, want: &[&str], timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if want.iter().all(|w| s.contains(w)) || start.elapsed() > timeout {
                return s;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

fn assert_shows(screen: &str, want: &[&str]) {
    for w in want {
        assert!(screen.contains(w), "screen lacks {:?}:\n{}", w, screen);
    }
}

#[test]
fn record_then_dump_and_replay_show_test_cgroups() {
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    let cg = test_cgroups("rec");
    let name = cg.name();
    let env = Env::new();
    let t0 = Instant::now();
    env.run(&["record", "--interval-s", "1", "--count", "11", "--compress"]);
    assert!(t0.elapsed() >= Duration::from_secs(10));

    let out = env.run(&["dump", "cgroup", "--begin", "2m ago"]);
    let dump = String::from_utf8_lossy(&out.stdout);
    assert_shows(&dump, &[&name, "web", "db"]);
    let samples = dump.lines().filter(|l| l.contains(&name)).count();
    assert!(
        samples >= 10,
        "{} samples of the test cgroup:\n{}",
        samples,
        dump
    );

    let out = env.run(&[
        "dump",
        "cgroup",
        "--begin",
        "2m ago",
        "--output-format",
        "json",
    ]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains(&name), "{}", json);

    let out = env.run(&["backends"]);
    let plan = String::from_utf8_lossy(&out.stdout);
    assert_shows(
        &plan,
        &[
            "recording since",
            "cpu.stat",
            "memory.stat",
            "read",
            "processes: ",
        ],
    );
    // What scripts read: the same record as JSON.
    let out = env.run(&["backends", "--json"]);
    let recs: Vec<bstats_store::BackendRecord> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(recs.len(), 1, "one record run");
    assert_record_of_this_kernel(&recs[0]);

    let tmux = Tmux::start(&env.command_line(&["replay", "--time", "2m ago"]));
    let screen = tmux.wait_for(&["replay", &name, "web"], Duration::from_secs(20));
    assert_shows(&screen, &["replay", "Name", &name, "web", "db"]);
    let _ = tmux.tmux(&["send-keys", "q"]);
}

/// A backend record of this machine: every stat file planned, io.stat by
/// plain read (as always), the process backend with its reason.
fn assert_record_of_this_kernel(rec: &bstats_store::BackendRecord) {
    let uname = nix::sys::utsname::uname().unwrap();
    assert_eq!(rec.kernel, uname.release().to_string_lossy());
    assert_eq!(rec.plan.files.len(), bstats_collector::StatFile::ALL.len());
    let io = rec
        .plan
        .files
        .iter()
        .find(|f| f.file == bstats_collector::StatFile::IoStat)
        .unwrap();
    assert_eq!(io.backend, bstats_collector::BackendKind::Read);
    let p = rec.processes.as_ref().expect("the process plan");
    assert_ne!(p.backend, bstats_procs::ProcessBackend::Auto);
    assert!(!p.reason.is_empty(), "{p:?}");
}

#[test]
fn backends_now_as_json() {
    if bstats_testkit::skip_unless_root("probes BPF") {
        return;
    }
    let env = Env::new();
    let out = env.run(&["backends", "--now", "--json"]);
    let rec: bstats_store::BackendRecord = serde_json::from_slice(&out.stdout).unwrap();
    assert_record_of_this_kernel(&rec);
    // procfs when asked for, with that reason.
    let out = env.run(&["--process-backend", "procfs", "backends", "--now", "--json"]);
    let rec: bstats_store::BackendRecord = serde_json::from_slice(&out.stdout).unwrap();
    let p = rec.processes.unwrap();
    assert_eq!(p.backend, bstats_procs::ProcessBackend::Procfs);
    assert!(p.reason.contains("asked for"), "{}", p.reason);
}

#[test]
fn replay_from_a_snapshot() {
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    let cg = test_cgroups("snap");
    let env = Env::new();
    env.run(&["record", "--interval-s", "1", "--count", "3"]);
    let snap = env.store().with_file_name("test.snapshot");
    env.run(&["snapshot", "-b", "2m ago", "-o", snap.to_str().unwrap()]);
    // The store is gone: replay reads the snapshot alone.
    fs::remove_dir_all(env.store()).unwrap();
    let tmux = Tmux::start(&env.command_line(&[
        "replay",
        "--time",
        "2m ago",
        "--snapshot",
        snap.to_str().unwrap(),
    ]));
    let screen = tmux.wait_for(&["replay", &cg.name()], Duration::from_secs(20));
    assert_shows(&screen, &["replay", "Name", &cg.name(), "web", "db"]);
    let _ = tmux.tmux(&["send-keys", "q"]);
}

/// A cgroup whose name sets the terminal's title and colour, made for
/// `view` (replay or live) and recorded: the view shows it escaped, and
/// the pane's title stays.
fn view_shows_names_escaped(view: &[&str]) {
    let root = bstats_collector::find_cgroup2_mount().unwrap();
    // "a": before other trees of ours (by name) on a crowded screen; the
    // view's name too, so the two tests' trees differ.
    let tag = format!("a{}\x1b]0;TITLE\x07\x1b[31m", view[0]);
    let cg = Fixture::new(&root, &tag, Controllers::All).unwrap();
    let shown = bstats_store::escape::for_terminal(&cg.name()).into_owned();
    assert!(shown.contains("\\x1b]0;TITLE\\x07"), "{shown}");
    let env = Env::new();
    env.run(&["record", "--interval-s", "1", "--count", "2"]);
    let tmux = Tmux::start(&env.command_line(view));
    let screen = tmux.wait_for(&[view[0], &shown], Duration::from_secs(20));
    assert_shows(&screen, &[view[0], &shown]);
    let title = tmux.tmux(&["display-message", "-p", "#{pane_title}"]);
    let title = String::from_utf8_lossy(&title.stdout);
    assert!(!title.contains("TITLE"), "{view:?} set the title: {title}");
    let _ = tmux.tmux(&["send-keys", "q"]);
}

#[test]
fn replay_shows_names_escaped() {
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    view_shows_names_escaped(&["replay", "--time", "2m ago"]);
}

#[test]
fn live_shows_names_escaped() {
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    view_shows_names_escaped(&["live", "--interval-s", "1"]);
}

#[test]
fn live_shows_cgroup_view() {
    if bstats_testkit::skip_unless_root("creates cgroups") {
        return;
    }
    let cg = test_cgroups("live");
    let name = cg.name();
    let env = Env::new();
    let tmux = Tmux::start(&env.command_line(&["live", "--interval-s", "1"]));
    let screen = tmux.wait_for(&["live", &name], Duration::from_secs(20));
    assert_shows(&screen, &["live", "Name", "<root>", &name]);
    // Values appear once a second sample gives rates.
    let screen = tmux.wait_for(&["%"], Duration::from_secs(10));
    assert_shows(&screen, &["%"]);
    let _ = tmux.tmux(&["send-keys", "q"]);
}

fn fails_with(out: Output, want: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "unexpected success");
    assert!(err.contains(want), "stderr lacks {:?}: {}", want, err);
    assert_eq!(
        err.trim().lines().count(),
        1,
        "not one clear error: {}",
        err
    );
}

#[test]
fn bad_cgroup_root_is_one_clear_error() {
    let env = Env::new();
    fails_with(
        env.below(&["--cgroup-root", "/tmp", "record"])
            .output()
            .unwrap(),
        "/tmp is not a cgroup2 filesystem",
    );
    fails_with(
        env.below(&["--cgroup-root", "/nonexistent", "record"])
            .output()
            .unwrap(),
        "Cannot access cgroup root /nonexistent",
    );
    fails_with(
        env.below(&["--cgroup-root", "/tmp", "live"])
            .output()
            .unwrap(),
        "/tmp is not a cgroup2 filesystem",
    );
    assert!(!env.store().join("index").exists());
}

#[test]
fn no_cgroup2_mount_is_one_clear_error() {
    if bstats_testkit::skip_unless_root("unmounts cgroup2 in a mount namespace") {
        return;
    }
    // A private mount namespace without the cgroup2 mount.
    let mount = bstats_collector::find_cgroup2_mount().unwrap();
    let env = Env::new();
    let script = format!(
        "umount -l {} && exec {} record --count 1",
        mount.display(),
        env.command_line(&[])
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    fails_with(out, "No cgroup2 filesystem is mounted");
}

#[test]
fn forced_unavailable_backend_fails_with_reason() {
    let env = Env::new();
    let out = env
        .below(&["--cgroup-backend", "stream", "record", "--count", "1"])
        .output()
        .unwrap();
    fails_with(out, "--cgroup-backend stream is unavailable: ");
    assert!(!env.store().exists());
}
