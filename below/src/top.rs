//! `--cgroup-top`: keep the N busiest cgroups per sample (bounded cost with
//! very many cgroups); flags override the config keys.

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;

use crate::Config;

/// Top-N: bounded cost with very many cgroups.
#[derive(Debug, Default, clap::Args)]
pub struct TopOpts {
    /// Keep only the N cgroups with the highest rate since the previous
    /// sample (plus their ancestors and --cgroup-top-keep matches); the
    /// rest are counted, not stored. Config key: cgroup_top.
    #[clap(long)]
    pub cgroup_top: Option<usize>,
    /// What --cgroup-top ranks by: cpu, memory, io or pressure [default:
    /// cpu]. Config key: cgroup_top_by.
    // The text above names the values: clap's list would repeat them.
    #[clap(long, hide_possible_values = true)]
    pub cgroup_top_by: Option<bstats_collector::TopBy>,
    /// With --cgroup-top: cgroups whose path (relative to the cgroup root)
    /// matches this regex are always kept. Config key: cgroup_top_keep.
    #[clap(long)]
    pub cgroup_top_keep: Option<String>,
}

/// The top-N options: each flag, else its config key.
pub(crate) fn top_n(cfg: &Config, flags: &TopOpts) -> Result<Option<bstats_collector::TopN>> {
    let by = flags.cgroup_top_by.or(cfg.top.cgroup_top_by);
    let keep = flags
        .cgroup_top_keep
        .as_ref()
        .or(cfg.top.cgroup_top_keep.as_ref());
    let Some(n) = flags.cgroup_top.or(cfg.top.cgroup_top) else {
        if by.is_some() || keep.is_some() {
            bail!("--cgroup-top-by and --cgroup-top-keep need --cgroup-top N");
        }
        return Ok(None);
    };
    Ok(Some(bstats_collector::TopN {
        n,
        by: by.unwrap_or_default(),
        keep: keep
            .map(|k| regex::Regex::new(k).context("Invalid --cgroup-top-keep"))
            .transpose()?,
    }))
}
