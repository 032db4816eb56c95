//! Commands over recorded history: `snapshot`, `debug dump-store`, `debug
//! convert-store`, and what `replay`/`dump` share: time ranges, snapshots
//! and below's refusal of remote hosts.

use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use below_common::cliutil;
use below_dump::command::DumpCommand;
use store::Store;

use crate::record::CompressOpts;

/// `-b/--begin`, `-e/--end`, `--duration` as in below.
#[derive(Debug, clap::Args)]
pub struct TimeRange {
    /// Begin time, same format as replay
    #[clap(short, long)]
    pub begin: String,
    /// End time, same format as replay [default: now]
    #[clap(short, long, group = "time")]
    pub end: Option<String>,
    /// Duration instead of --end, e.g. "10 min", "2 days 3 hr 15m 10sec"
    #[clap(long, group = "time")]
    pub duration: Option<String>,
}

impl TimeRange {
    pub fn resolve(&self) -> Result<(SystemTime, SystemTime)> {
        // below's parser panics on a bad duration: check it first.
        if let Some(d) = &self.duration {
            d.parse::<humantime::Duration>()
                .with_context(|| format!("Invalid --duration {:?}", d))?;
        }
        let (begin, end) = cliutil::system_time_range_from_date_and_adjuster(
            &self.begin,
            self.end.as_deref(),
            self.duration.as_deref(),
            None,
        )?;
        if end < begin {
            bail!("The end of the time range is before its beginning");
        }
        Ok((begin, end))
    }
}

/// How much history `replay` reads around its start (see
/// `bstats_store::clean`): each sample is read and rewritten, a few ms
/// each, so the view starts with 10 minutes either side and the next 12
/// hours follow in the background.
pub const REPLAY_BEFORE: Duration = Duration::from_secs(10 * 60);
pub const REPLAY_FIRST: Duration = Duration::from_secs(10 * 60);
pub const REPLAY_FOLLOW: Duration = Duration::from_secs(12 * 60 * 60);

/// The samples `replay` starting at `ts` reads first, and up to when it
/// goes on reading: around `first`, the first sample at or after `ts`,
/// where the view opens however long after `ts` it is.
pub fn replay_range(
    ts: SystemTime,
    first: Option<SystemTime>,
) -> (SystemTime, SystemTime, SystemTime) {
    let opens = first.map_or(ts, |f| f.max(ts));
    (
        ts.checked_sub(REPLAY_BEFORE)
            .unwrap_or(SystemTime::UNIX_EPOCH),
        opens + REPLAY_FIRST,
        opens + REPLAY_FOLLOW,
    )
}

/// The time range of a `dump` command, as below-dump reads it.
pub fn dump_range(cmd: &DumpCommand) -> Result<(SystemTime, SystemTime)> {
    use DumpCommand as D;
    let opts = match cmd {
        D::System { opts, .. }
        | D::Disk { opts, .. }
        | D::Btrfs { opts, .. }
        | D::Process { opts, .. }
        | D::Cgroup { opts, .. }
        | D::Iface { opts, .. }
        | D::Network { opts, .. }
        | D::Transport { opts, .. }
        | D::EthtoolQueue { opts, .. }
        | D::Tc { opts, .. } => opts,
    };
    // below's parser panics on a bad duration: check it first.
    if let Some(d) = &opts.duration {
        d.parse::<humantime::Duration>()
            .with_context(|| format!("Invalid --duration {:?}", d))?;
    }
    cliutil::system_time_range_from_date_and_adjuster(
        &opts.begin,
        opts.end.as_deref(),
        opts.duration.as_deref(),
        opts.yesterdays.as_deref(),
    )
}

/// below's remote flags (`-s/--host`, `--port`).
#[derive(Debug, clap::Args)]
pub struct Remote {
    /// Supply hostname to use a remote store
    #[clap(short = 's', long)]
    pub host: Option<String>,
    /// Override default port to connect to remote
    #[clap(long, requires("host"))]
    pub port: Option<u16>,
}

impl Remote {
    /// below's open-source store has no remote client and refuses a host
    /// ("Remote client not supported"): refuse through it, in its words.
    pub fn refuse(&self) -> Result<()> {
        match &self.host {
            None => Ok(()),
            Some(host) => {
                store::RemoteStore::new(host.clone(), self.port)?;
                bail!("Remote client not supported")
            }
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum DebugCommand {
    /// Print the frame recorded at exactly this time
    DumpStore {
        /// Time string to dump data for (same format as Replay mode)
        #[clap(short, long)]
        time: String,
        /// Pretty print in JSON
        #[clap(short, long)]
        json: bool,
    },
    /// Convert frames from an existing store and write them to a new store.
    /// This can be used to test compression/serialization formats.
    ConvertStore {
        #[clap(flatten)]
        range: TimeRange,
        /// Store to read [default: config store_dir]
        #[clap(long)]
        from_store_dir: Option<PathBuf>,
        #[clap(long)]
        to_store_dir: PathBuf,
        #[clap(flatten)]
        remote: Remote,
        #[clap(flatten)]
        compress_opts: CompressOpts,
    },
}

pub fn debug(logger: &slog::Logger, store_dir: PathBuf, cmd: DebugCommand) -> Result<()> {
    match cmd {
        DebugCommand::DumpStore { time, json } => {
            let t = cliutil::system_time_from_date(&time)?;
            // Our reader: strings keep their bytes (JSON and {:#?} escape
            // control characters themselves).
            let mut from = bstats_store::reader::SafeStore::new(logger.clone(), store_dir, false);
            let Some((ts, frame)) = from.get_sample_at_timestamp(t, store::Direction::Forward)?
            else {
                bail!("Data not found for requested timestamp");
            };
            if ts != t {
                bail!("Exact requested timestamp not found (would have used next datapoint)");
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&frame)?);
            } else {
                println!("{:#?}", frame);
            }
            Ok(())
        }
        DebugCommand::ConvertStore {
            range,
            from_store_dir,
            to_store_dir,
            remote,
            compress_opts,
        } => {
            if from_store_dir.is_some() && remote.host.is_some() {
                bail!("Only one of --from-store-dir and --host should be specified");
            }
            remote.refuse()?;
            let (begin, end) = range.resolve()?;
            let from = from_store_dir.unwrap_or(store_dir);
            let n = bstats_store::snapshot::copy_frames(
                logger,
                &mut bstats_store::reader::SafeStore::new(logger.clone(), from.clone(), false),
                &to_store_dir,
                compress_opts.mode()?,
                begin,
                end,
            )?;
            eprintln!(
                "Done. Copied {} samples from {} to {}.",
                n,
                from.display(),
                to_store_dir.display()
            );
            Ok(())
        }
    }
}

pub fn snapshot(
    logger: &slog::Logger,
    store_dir: PathBuf,
    range: TimeRange,
    output: Option<PathBuf>,
    remote: Remote,
) -> Result<()> {
    remote.refuse()?;
    let (begin, end) = range.resolve()?;
    // Without --output, as below: a name with the range and a random
    // suffix, in the current directory.
    let (n, output) =
        bstats_store::snapshot::create(logger, &store_dir, begin, end, output.as_deref())?;
    eprintln!("{} samples", n);
    println!("Snapshot has been created at {}", output.display());
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    /// The view opens at the first sample at or after the time asked for:
    /// the part read before it opens holds that sample, however far on.
    #[test]
    fn replay_reads_first_around_the_sample_it_opens_at() {
        let ts = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let hour = Duration::from_secs(3600);
        let (begin, end, more) = replay_range(ts, Some(ts + hour));
        assert_eq!(begin, ts - REPLAY_BEFORE);
        assert_eq!(end, ts + hour + REPLAY_FIRST);
        assert_eq!(more, ts + hour + REPLAY_FOLLOW);
        // No sample after it (or one at it): around the time asked for.
        for first in [None, Some(ts)] {
            assert_eq!(replay_range(ts, first).1, ts + REPLAY_FIRST);
        }
    }
}
