//! OpenMetrics endpoint for `below record --listen ADDR`.
//!
//! `record` hands each sample it stored to [`Exporter::publish`], which keeps
//! a copy of the parts we export and swaps it in behind a mutex held only for
//! the pointer swap. The server thread renders that snapshot on the first
//! scrape that sees it (later scrapes of the same sample reuse the text): a
//! scrape never collects and never waits for `record`, and `record` never
//! waits for a scrape.

mod defs;
mod render;
mod san;
mod server;
mod slots;
mod webconfig;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::SystemTime;

use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use serde::Deserialize;

pub use defs::Group;

/// The `[metrics]` table of the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Metric groups to export.
    pub groups: Vec<Group>,
    /// Deepest cgroup exported; the root is depth 0, `/a` depth 1.
    pub max_depth: Option<usize>,
    /// Export only cgroups whose path (`/a/b`) matches this regex.
    pub include: Option<String>,
    /// Drop cgroups whose path matches this regex (and their subtrees).
    pub exclude: Option<String>,
    /// Hard cap on series per scrape, the exporter's own series included.
    pub max_series: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            groups: Group::DEFAULT.to_vec(),
            max_depth: None,
            include: None,
            exclude: None,
            max_series: 50_000,
        }
    }
}

/// Options checked and compiled.
#[derive(Debug)]
struct Filters {
    groups: Vec<Group>,
    max_depth: usize,
    include: Option<regex::Regex>,
    exclude: Option<regex::Regex>,
    max_series: usize,
}

impl Filters {
    fn new(o: &Options) -> Result<Filters> {
        let re = |what: &str, s: &Option<String>| -> Result<Option<regex::Regex>> {
            s.as_deref()
                .map(|s| {
                    // Anchored: a pattern names whole paths, like cgroup_filter_out.
                    regex::Regex::new(&format!("^(?:{})$", s))
                        .with_context(|| format!("Invalid metrics.{} regex {:?}", what, s))
                })
                .transpose()
        };
        if o.max_series <= render::OWN_SERIES {
            bail!(
                "metrics.max_series must be more than {} (the exporter's own series)",
                render::OWN_SERIES
            );
        }
        Ok(Filters {
            groups: o.groups.clone(),
            max_depth: o.max_depth.unwrap_or(usize::MAX),
            include: re("include", &o.include)?,
            exclude: re("exclude", &o.exclude)?,
            max_series: o.max_series,
        })
    }
}

/// What one scrape serves: the parts of a sample we export, and its text
/// once rendered.
struct Exported {
    time: SystemTime,
    cgroup: model::CgroupSample,
    stat: procfs::Stat,
    meminfo: procfs::MemInfo,
    vmstat: procfs::VmStat,
    text: OnceLock<Rendered>,
}

struct Rendered {
    openmetrics: bytes::Bytes,
    /// Prometheus text format 0.0.4, for clients that do not ask for
    /// OpenMetrics (curl, `promtool check metrics`); made on first request.
    text: OnceLock<bytes::Bytes>,
}

struct Shared {
    latest: Mutex<Option<Arc<Exported>>>,
    filters: Filters,
    /// Series left out by the cap, over all rendered samples.
    dropped_total: AtomicU64,
}

/// The running endpoint; dropping it does not stop the server thread (it
/// lives as long as `record`).
pub struct Exporter {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls: bool,
}

impl Exporter {
    /// Binds `addr` (the error names it) and starts the server thread;
    /// with `web_config` (node_exporter's web config file: TLS, basic auth,
    /// headers), checked first: an invalid one is the error.
    pub fn start(
        logger: slog::Logger,
        addr: SocketAddr,
        opts: &Options,
        web_config: Option<&Path>,
    ) -> Result<Exporter> {
        let web = web_config
            .map(|p| server::Watch::new(&logger, p.to_path_buf()))
            .transpose()?;
        let shared = Arc::new(Shared {
            latest: Mutex::new(None),
            filters: Filters::new(opts)?,
            dropped_total: AtomicU64::new(0),
        });
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("Failed to listen on {} for metrics", addr))?;
        let addr = listener.local_addr()?;
        // std listens with a backlog of 128: under a flood of connections
        // the queue fills and a scraper's SYN is dropped, costing it a 1 s
        // retransmit. Listening again on the socket only raises the limit
        // (the kernel caps it at net.core.somaxconn).
        // SAFETY: a listening socket we own; listen() takes no pointers.
        unsafe {
            libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 1024);
        }
        let tls = web.as_ref().is_some_and(|w| w.tls());
        server::spawn(logger, listener, shared.clone(), web)?;
        Ok(Exporter { shared, addr, tls })
    }

    /// The bound address (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint's URL as started (https with a TLS web config).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{}://{}/metrics", scheme, self.addr)
    }

    /// Makes `sample`, taken at `time`, the one scrapes serve.
    pub fn publish(&self, time: SystemTime, sample: &model::Sample) {
        let snap = Arc::new(Exported {
            time,
            cgroup: sample.cgroup.clone(),
            stat: sample.system.stat.clone(),
            meminfo: sample.system.meminfo.clone(),
            vmstat: sample.system.vmstat.clone(),
            text: OnceLock::new(),
        });
        // Swap under the lock, drop the old snapshot after it.
        let old = self
            .shared
            .latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(snap);
        drop(old);
    }
}

pub use defs::mapping_markdown;

#[cfg(test)]
mod test;
