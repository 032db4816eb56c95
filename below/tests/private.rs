//! Host integration tests of what below writes: 0600 files and 0700
//! directories under the usual umask (0022), and no writing through a
//! symbolic link planted where the user pointed a file. Only the
//! `--phase-times` test records, so only it needs root.

use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use std::time::SystemTime;

mod common;

use common::stderr_of;
use common::Env;

/// Every test here sets the same process-wide umask; the below it runs
/// inherits it.
fn usual_umask() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// `dir` and everything in it: 0700 directories, 0600 files.
fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            assert_private(&p);
        } else {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
}

/// A planted link at `link` to a file holding "keep".
fn plant_link(dir: &Path, link: &Path) -> std::path::PathBuf {
    let target = dir.join("target");
    fs::write(&target, "keep").unwrap();
    symlink(&target, link).unwrap();
    target
}

/// Fails naming the link, and the link's target is as it was.
fn assert_refused(out: Output, link: &Path, target: &Path) {
    assert!(!out.status.success());
    let err = stderr_of(&out);
    let want = format!(
        "{} is a symbolic link: refusing to write through it",
        link.display()
    );
    assert!(err.contains(&want), "{err}");
    assert_eq!(fs::read_to_string(target).unwrap(), "keep");
}

/// Two samples, 20 and 10 s ago, in `env`'s store.
fn record_two(env: &Env) {
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut r = bstats_store::Recorder::new(
        logger,
        &env.store(),
        store::CompressionMode::Zstd,
        None,
        None,
    )
    .unwrap();
    for ago in [20, 10] {
        r.put(
            SystemTime::now() - Duration::from_secs(ago),
            &model::Sample::default(),
        )
        .unwrap();
    }
}

/// Without --output, as below: a new file in the current directory, named
/// after the range with a random suffix, 0600; with one, no link.
#[test]
fn snapshots_are_private_and_refuse_links() {
    usual_umask();
    let env = Env::new();
    record_two(&env);
    assert_private(&env.store());
    let cwd = tempfile::tempdir().unwrap();
    let snapshot = || {
        let mut c = env.below(&["snapshot", "-b", "1m ago"]);
        c.current_dir(cwd.path());
        common::run_ok(c, "below", &["snapshot"])
    };
    let (a, b) = (snapshot(), snapshot());
    let created = |out: &Output| {
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        let p = s
            .trim()
            .strip_prefix("Snapshot has been created at ")
            .unwrap_or_else(|| panic!("{s}"))
            .to_owned();
        std::path::PathBuf::from(p)
    };
    let (a, b) = (created(&a), created(&b));
    assert_ne!(a, b, "a random name each time");
    for p in [&a, &b] {
        assert_eq!(p.parent(), Some(cwd.path()));
        let name = p.file_name().unwrap().to_str().unwrap();
        let suffix = name.rsplit_once('.').unwrap().1;
        assert!(name.starts_with("snapshot_"), "{name}");
        assert!(
            suffix.len() == 8 && suffix.chars().all(|c| c.is_ascii_alphanumeric()),
            "{name}"
        );
        assert_eq!(mode(p), 0o600, "{}", p.display());
    }

    let link = cwd.path().join("snap");
    let target = plant_link(cwd.path(), &link);
    let out = env
        .below(&["snapshot", "-b", "1m ago", "-o", link.to_str().unwrap()])
        .output()
        .unwrap();
    assert_refused(out, &link, &target);
}

/// The TUIs' log directory and error.log (here from a replay of nothing).
#[test]
fn tui_log_is_private() {
    usual_umask();
    let env = Env::new();
    let out = env.below(&["replay", "-t", "1m ago"]).output().unwrap();
    assert!(!out.status.success(), "nothing to replay");
    assert_private(&env.dir().join("log"));
    assert!(env.dir().join("log/error.log").exists());
}

#[test]
fn generated_files_refuse_links() {
    let d = tempfile::tempdir().unwrap();
    let link = d.path().join("below.bash");
    let target = plant_link(d.path(), &link);
    let out = std::process::Command::new(common::BELOW)
        .args(["generate-completions", "-o", link.to_str().unwrap()])
        .output()
        .unwrap();
    assert_refused(out, &link, &target);

    let man = d.path().join("man");
    fs::create_dir(&man).unwrap();
    let link = man.join("below-record.1");
    symlink(&target, &link).unwrap();
    let out = std::process::Command::new(common::BELOW)
        .args(["generate-manpages", "-o", man.to_str().unwrap()])
        .output()
        .unwrap();
    assert_refused(out, &link, &target);
}

#[test]
fn phase_times_are_private_and_refuse_links() {
    if bstats_testkit::skip_unless_root("records") {
        return;
    }
    usual_umask();
    let env = Env::new();
    let phases = env.dir().join("phases.jsonl");
    let record = |phases: &Path| {
        env.below(&[
            "record",
            "--count",
            "1",
            "--phase-times",
            phases.to_str().unwrap(),
        ])
        .output()
        .unwrap()
    };
    let out = record(&phases);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(mode(&phases), 0o600);
    assert_eq!(fs::read_to_string(&phases).unwrap().lines().count(), 1);
    assert_private(&env.store());

    let link = env.dir().join("planted.jsonl");
    let target = plant_link(env.dir(), &link);
    assert_refused(record(&link), &link, &target);
}
