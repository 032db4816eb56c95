//! The recorders the bill and the soak run: below 0.9, below main (with
//! and without patches/below), ours in each backend and setting, and the
//! floor, each with and without `--compress`.

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
    if let Some(p) = b.ours {
        // Exitstats off, as every other row: the same work compared.
        let off = "--disable-exitstats";
        let rec = [&rec[..], &["--phase-times", "{phases}"]].concat();
        for (be, label) in [("bpf", "BPF"), ("read", "plain read"), ("stream", "stream")] {
            let a = [&["--cgroup-backend", be][..], &rec[..], &[off]].concat();
            plain.push(row(be, &format!("ours, {label}"), p, &a, ""));
        }
        // What making each sample durable (the default) costs.
        let a = [&["--cgroup-backend", "bpf"][..], &rec[..], &[off]].concat();
        let nosync = "store_sync = \"none\"\n";
        plain.push(row(
            "bpf-nosync",
            "ours, BPF, store_sync none",
            p,
            &a,
            nosync,
        ));
        // What exitstats (on by default) adds.
        let a = [&["--cgroup-backend", "bpf"][..], &rec[..]].concat();
        plain.push(row("bpf-exitstats", "ours, BPF, exitstats on", p, &a, ""));
        // Top-N: the cost at many cgroups should be that of the N kept.
        let a = [&rec[..], &["--cgroup-top", "200", off]].concat();
        plain.push(row("bpf-top200", "ours, BPF, --cgroup-top 200", p, &a, ""));
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
        };
        let r = recorders(&b).unwrap();
        let keys: Vec<&str> = r.iter().map(|r| r.key.as_str()).collect();
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
}
