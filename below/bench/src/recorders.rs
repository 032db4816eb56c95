//! The recorders the bill and the soak run: below 0.9, below main (with
//! and without patches/below), ours in each backend and setting, another
//! build of ours to compare against (before a change), and the floor, each
//! with and without `--compress`.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

/// How to run one recorder: its command line, `{config}`, `{store}`,
/// `{root}` and `{phases}` (its `--phase-times` file) filled in per run, and
/// what its config file holds besides store_dir, log_dir and cgroup_root.
#[derive(Debug, Clone, Serialize)]
pub struct RecorderSpec {
    /// Short name for `--recorders`.
    pub key: String,
    /// Row label.
    pub name: String,
    pub argv: Vec<String>,
    pub config: String,
}

/// Binaries the rows are made of; a missing one drops its rows.
pub struct Binaries<'a> {
    pub below09: Option<&'a Path>,
    pub below_main: Option<&'a Path>,
    /// below main with patches/below applied.
    pub below_main_series: Option<&'a Path>,
    pub ours: Option<&'a Path>,
    /// Another build of ours (e.g. before a change): row `bpf-before`, the
    /// `bpf` row's command line.
    pub ours_before: Option<&'a Path>,
}

fn row(key: &str, name: &str, bin: &Path, args: &[&str], config: &str) -> RecorderSpec {
    let mut argv = vec![bin.display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    RecorderSpec {
        key: key.into(),
        name: name.into(),
        argv,
        config: config.into(),
    }
}

/// Every recorder of the bill, each with and without `--compress`.
pub fn recorders(b: &Binaries) -> Result<Vec<RecorderSpec>> {
    let rec = ["--config", "{config}", "record", "-i", "1"];
    let mut plain = Vec::new();
    if let Some(p) = b.below09 {
        let a = [&rec[..], &["--disable-exitstats"]].concat();
        plain.push(row("below09", "below 0.9 (exitstats off)", p, &a, ""));
    }
    if let Some(p) = b.below_main {
        let a = [&rec[..], &["--disable-exitstats"]].concat();
        plain.push(row("main-files", "below main, files", p, &a, ""));
        plain.push(row(
            "main-bpf",
            "below main, enable_cgroup_bpf",
            p,
            &a,
            "enable_cgroup_bpf = true\n",
        ));
    }
    if let Some(p) = b.below_main_series {
        let a = [&rec[..], &["--disable-exitstats"]].concat();
        plain.push(row(
            "main-series",
            "below main + patches/below, enable_cgroup_bpf",
            p,
            &a,
            "enable_cgroup_bpf = true\n",
        ));
    }
    // Ours: exitstats off, as every other row (the same work compared),
    // with its --phase-times records.
    let off = "--disable-exitstats";
    let ours_rec = [&rec[..], &["--phase-times", "{phases}"]].concat();
    let backend =
        |be: &'static str| [&["--cgroup-backend", be][..], &ours_rec[..], &[off]].concat();
    if let Some(p) = b.ours {
        for (be, label) in [("bpf", "BPF"), ("read", "plain read"), ("stream", "stream")] {
            plain.push(row(be, &format!("ours, {label}"), p, &backend(be), ""));
        }
        // What making each sample durable (the default) costs.
        let nosync = "store_sync = \"none\"\n";
        plain.push(row(
            "bpf-nosync",
            "ours, BPF, store_sync none",
            p,
            &backend("bpf"),
            nosync,
        ));
        // What exitstats (on by default) adds.
        let a = [&["--cgroup-backend", "bpf"][..], &ours_rec[..]].concat();
        plain.push(row("bpf-exitstats", "ours, BPF, exitstats on", p, &a, ""));
        // Top-N: the cost at many cgroups should be that of the N kept.
        let a = [&ours_rec[..], &["--cgroup-top", "200", off]].concat();
        plain.push(row("bpf-top200", "ours, BPF, --cgroup-top 200", p, &a, ""));
    }
    // Another build of ours, as the `bpf` row runs ours.
    if let Some(p) = b.ours_before {
        plain.push(row(
            "bpf-before",
            "ours before, BPF",
            p,
            &backend("bpf"),
            "",
        ));
    }
    let me = std::env::current_exe()?;
    plain.push(row(
        "floor",
        "floor: below's collectors + BPF pass + store write",
        &me,
        &["__record-floor", "{store}", "{root}", "{phases}"],
        "",
    ));
    let mut all = Vec::new();
    for r in plain {
        let mut z = r.clone();
        z.key.push_str("-z");
        z.name.push_str(", --compress");
        z.argv.push("--compress".into());
        all.extend([r, z]);
    }
    Ok(all)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn every_recorder_has_a_compressed_twin() {
        let b = Binaries {
            below09: Some(Path::new("/b09")),
            below_main: None,
            below_main_series: None,
            ours: Some(Path::new("/ours")),
            ours_before: None,
        };
        let r = recorders(&b).unwrap();
        let keys: Vec<&str> = r.iter().map(|r| r.key.as_str()).collect();
        // No build to compare against: no bpf-before row.
        assert_eq!(
            keys,
            [
                "below09",
                "below09-z",
                "bpf",
                "bpf-z",
                "read",
                "read-z",
                "stream",
                "stream-z",
                "bpf-nosync",
                "bpf-nosync-z",
                "bpf-exitstats",
                "bpf-exitstats-z",
                "bpf-top200",
                "bpf-top200-z",
                "floor",
                "floor-z"
            ]
        );
        assert!(r[1]
            .argv
            .ends_with(&["--disable-exitstats".into(), "--compress".into()]));
        assert_eq!(r[2].argv[..3], ["/ours", "--cgroup-backend", "bpf"]);
        for r in r
            .iter()
            .filter(|r| r.key.starts_with("bpf") || r.key.starts_with("floor"))
        {
            assert!(
                r.argv.iter().any(|a| a == "{phases}"),
                "{}: no phase times",
                r.key
            );
        }
        // Exitstats off everywhere but the row that shows its cost.
        let off = "--disable-exitstats".to_string();
        for r in &r {
            assert_eq!(
                r.argv.contains(&off),
                !r.key.starts_with("bpf-exitstats") && !r.key.starts_with("floor"),
                "{}",
                r.key
            );
        }
    }

    #[test]
    fn the_build_before_runs_as_ours_bpf() {
        let b = Binaries {
            below09: None,
            below_main: None,
            below_main_series: None,
            ours: Some(Path::new("/ours")),
            ours_before: Some(Path::new("/before")),
        };
        let r = recorders(&b).unwrap();
        let get = |k: &str| r.iter().find(|r| r.key == k).unwrap();
        for z in ["", "-z"] {
            let (now, before) = (get(&format!("bpf{z}")), get(&format!("bpf-before{z}")));
            assert_eq!(before.argv[0], "/before");
            assert_eq!(before.argv[1..], now.argv[1..], "{z}");
            assert_eq!(before.config, now.config);
        }
        assert_eq!(get("bpf-before").name, "ours before, BPF");
        assert_eq!(get("bpf-before-z").name, "ours before, BPF, --compress");
        // Its rows come after ours', the floor's last.
        let keys: Vec<&str> = r.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys[keys.len() - 4..],
            ["bpf-before", "bpf-before-z", "floor", "floor-z"]
        );
        // Without ours, the build before is still a row.
        let b = Binaries { ours: None, ..b };
        let keys: Vec<String> = recorders(&b).unwrap().into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["bpf-before", "bpf-before-z", "floor", "floor-z"]);
    }
}
