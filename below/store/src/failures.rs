//! Throttled logging of repeated store failures: a full disk fails every
//! sample until space comes back, and a daemon must neither die nor flood
//! its log. The first failure of each kind is logged with its error, then
//! only counts (at 10, 100, 1000, … failures), then one line on recovery.

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

use slog::error;
use slog::info;
use slog::warn;

/// What went wrong, as far as a store user can act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailureKind {
    /// ENOSPC, EDQUOT: the file system or the quota is full.
    NoSpace,
    /// EIO: the device failed.
    Io,
    /// The store directory was removed or replaced while recording.
    Vanished,
    /// EROFS: remounted read-only (often after I/O errors).
    ReadOnly,
    /// EACCES, EPERM.
    Permission,
    Other,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureKind::NoSpace => "no space",
            FailureKind::Io => "I/O error",
            FailureKind::Vanished => "store directory vanished",
            FailureKind::ReadOnly => "read-only file system",
            FailureKind::Permission => "permission denied",
            FailureKind::Other => "other",
        })
    }
}

impl FailureKind {
    /// Classifies an error by the first OS error in its chain.
    pub fn of(e: &anyhow::Error) -> Self {
        let errno = e.chain().find_map(|c| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.raw_os_error())
                .or_else(|| c.downcast_ref::<nix::errno::Errno>().map(|n| *n as i32))
        });
        match errno {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => FailureKind::NoSpace,
            Some(libc::EIO) => FailureKind::Io,
            Some(libc::ENOENT) => FailureKind::Vanished,
            Some(libc::EROFS) => FailureKind::ReadOnly,
            Some(libc::EACCES) | Some(libc::EPERM) => FailureKind::Permission,
            _ => FailureKind::Other,
        }
    }
}

/// Failures of one operation (e.g. "write a sample") since it last worked.
pub struct FailureLog {
    what: &'static str,
    counts: BTreeMap<FailureKind, u64>,
    since: Option<SystemTime>,
}

impl FailureLog {
    /// `what` names the operation in log lines, e.g. "store write".
    pub fn new(what: &'static str) -> Self {
        FailureLog {
            what,
            counts: BTreeMap::new(),
            since: None,
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    pub fn fail(&mut self, logger: &slog::Logger, kind: FailureKind, e: &anyhow::Error) {
        self.since.get_or_insert_with(SystemTime::now);
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        if *n == 1 {
            error!(
                logger,
                "{} failed ({}): {:#}; recording goes on, repeats are counted", self.what, kind, e
            );
        }
        let total = self.total();
        if total >= 10 && is_power_of_ten(total) {
            warn!(
                logger,
                "{} has failed {} times since {} ({})",
                self.what,
                total,
                since_text(self.since),
                self.summary()
            );
        }
    }

    /// Logs the recovery (if anything failed) and starts over.
    pub fn succeed(&mut self, logger: &slog::Logger) {
        if self.counts.is_empty() {
            return;
        }
        info!(
            logger,
            "{} works again after {} failures since {} ({})",
            self.what,
            self.total(),
            since_text(self.since),
            self.summary()
        );
        self.counts.clear();
        self.since = None;
    }

    fn summary(&self) -> String {
        self.counts
            .iter()
            .map(|(k, n)| format!("{}: {}", k, n))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

fn since_text(t: Option<SystemTime>) -> String {
    t.map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod test {
    use std::sync::Arc;
    use std::sync::Mutex;

    use super::*;

    /// Collects formatted messages.
    struct Lines(Arc<Mutex<Vec<String>>>);

    impl slog::Drain for Lines {
        type Ok = ();
        type Err = slog::Never;
        fn log(&self, r: &slog::Record, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
            self.0.lock().unwrap().push(format!("{}", r.msg()));
            Ok(())
        }
    }

    fn io_error(errno: i32) -> anyhow::Error {
        anyhow::Error::new(std::io::Error::from_raw_os_error(errno)).context("Failed to write")
    }

    #[test]
    fn classifies_by_errno_in_chain() {
        for (errno, kind) in [
            (libc::ENOSPC, FailureKind::NoSpace),
            (libc::EDQUOT, FailureKind::NoSpace),
            (libc::EIO, FailureKind::Io),
            (libc::ENOENT, FailureKind::Vanished),
            (libc::EROFS, FailureKind::ReadOnly),
        ] {
            assert_eq!(FailureKind::of(&io_error(errno)), kind, "errno {errno}");
        }
        let nix = anyhow::Error::new(nix::errno::Errno::EWOULDBLOCK).context("flock");
        assert_eq!(FailureKind::of(&nix), FailureKind::Other);
        let nix = anyhow::Error::new(nix::errno::Errno::EACCES).context("open");
        assert_eq!(FailureKind::of(&nix), FailureKind::Permission);
        assert_eq!(FailureKind::of(&anyhow::anyhow!("x")), FailureKind::Other);
    }

    #[test]
    fn logs_once_per_kind_then_counts_then_recovery() {
        let lines = Arc::new(Mutex::new(vec![]));
        let logger = slog::Logger::root(slog::Fuse(Lines(lines.clone())), slog::o!());
        let mut f = FailureLog::new("store write");
        for _ in 0..99 {
            f.fail(&logger, FailureKind::NoSpace, &io_error(libc::ENOSPC));
        }
        f.fail(&logger, FailureKind::Io, &io_error(libc::EIO));
        f.succeed(&logger);
        f.succeed(&logger);
        f.fail(&logger, FailureKind::NoSpace, &io_error(libc::ENOSPC));
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 6, "{:#?}", lines);
        assert!(lines[0].contains("(no space): Failed to write: No space left on device"));
        assert!(lines[1].contains("failed 10 times"));
        assert!(lines[2].contains("(I/O error)"));
        assert!(lines[3].contains("failed 100 times"));
        assert!(lines[3].contains("no space: 99, I/O error: 1"));
        assert!(lines[4].contains("works again after 100 failures"));
        assert!(lines[5].contains("(no space)"), "a new outage logs again");
    }

    #[test]
    fn powers_of_ten() {
        let p: Vec<u64> = (1..=1000).filter(|n| is_power_of_ten(*n)).collect();
        assert_eq!(p, [1, 10, 100, 1000]);
    }
}
