//! The collectors compared, and the rest of a sample's life in below:
//! building the tree, the model, and the store write.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::Context;
use anyhow::Result;
use bstats_collector::BackendChoice;
use bstats_collector::CgroupCollector;
use bstats_collector::Elapsed;
use cgroupfs::CgroupReader;
use model::CgroupSample;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// below 0.9's cgroup walk over `cgroupfs::CgroupReader`.
    Baseline,
    Read,
    Stream,
    Bpf,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Baseline, Kind::Read, Kind::Stream, Kind::Bpf];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Baseline => "below 0.9 (cgroupfs walk)",
            Kind::Read => "ours: plain read",
            Kind::Stream => "ours: stream",
            Kind::Bpf => "ours: BPF",
        }
    }

    /// The name used on the command line and by `below --cgroup-backend`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Baseline => "baseline",
            Kind::Read => "read",
            Kind::Stream => "stream",
            Kind::Bpf => "bpf",
        }
    }

    pub fn parse(s: &str) -> Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .with_context(|| format!("unknown collector {s:?} (baseline, read, stream, bpf)"))
    }

    fn backend(self) -> Option<BackendChoice> {
        match self {
            Kind::Baseline => None,
            Kind::Read => Some(BackendChoice::Read),
            Kind::Stream => Some(BackendChoice::Stream),
            Kind::Bpf => Some(BackendChoice::Bpf),
        }
    }
}

/// What every collector samples.
#[derive(Debug, Clone)]
pub struct Target {
    pub root: PathBuf,
    /// The stream backend's kernel flush interval, set if streaming is off
    /// (`below record` sets its sampling interval).
    pub stream_interval: Duration,
}

pub enum Collector {
    Baseline(PathBuf),
    Ours(Box<CgroupCollector>),
}

/// What the kernel-read phase gives: below's walk builds the tree as it
/// goes; ours fills its table, then the tree from it, and says how long
/// that took (the tree phase).
pub enum Raw {
    Tree(Box<CgroupSample>),
    Filled {
        tree: Box<CgroupSample>,
        /// Cgroups in our collector's table.
        cgroups: usize,
        fill: Elapsed,
    },
}

impl Collector {
    /// Fails when the backend cannot run on this kernel: the error is the
    /// reason shown in the table.
    pub fn new(kind: Kind, target: &Target) -> Result<Collector> {
        let root = &target.root;
        Ok(match kind.backend() {
            None => {
                // CgroupReader::new refuses anything but cgroup2: check once.
                CgroupReader::new(root.to_path_buf())
                    .with_context(|| format!("{} is not a cgroup2 root", root.display()))?;
                Collector::Baseline(root.to_path_buf())
            }
            Some(backend) => Collector::Ours(Box::new(CgroupCollector::new(
                &bstats_collector::Options {
                    root: root.to_path_buf(),
                    backend,
                    collect_io_stat: false,
                    filter: None,
                    stream_interval: Some(target.stream_interval),
                    top: None,
                },
            )?)),
        })
    }

    pub fn read(&mut self) -> Result<Raw> {
        match self {
            Collector::Baseline(root) => {
                // below opens the root reader every sample too.
                let reader = CgroupReader::new(root.clone())?;
                Ok(Raw::Tree(Box::new(
                    below09_walk(&reader)?.unwrap_or_default(),
                )))
            }
            Collector::Ours(c) => {
                // A new tree each sample, as below builds one (the model
                // keeps the previous sample).
                let mut tree = Box::default();
                let report = c.sample(&mut tree);
                let fill = report.tree.expect("a sample fills the tree").took;
                Ok(Raw::Filled {
                    tree,
                    cgroups: c.cgroups(),
                    fill,
                })
            }
        }
    }

    /// Files and directories our reader opened so far (none for below's).
    pub fn opens(&self) -> Option<u64> {
        match self {
            Collector::Baseline(_) => None,
            Collector::Ours(c) => {
                let r = c.read_counters();
                Some(r.files_opened + r.dirs_opened)
            }
        }
    }
}

impl Raw {
    pub fn cgroups(&self) -> usize {
        fn count(s: &CgroupSample) -> usize {
            1 + s
                .children
                .as_ref()
                .map_or(0, |c| c.values().map(count).sum())
        }
        match self {
            Raw::Tree(t) => count(t),
            Raw::Filled { cgroups, .. } => *cgroups,
        }
    }

    /// below's tree.
    pub fn tree(self) -> CgroupSample {
        match self {
            Raw::Tree(t) | Raw::Filled { tree: t, .. } => *t,
        }
    }
}

/// below 0.9's semantics: a file or cgroup that is gone is `None`
/// (short name: it wraps every read below).
fn g<T>(r: cgroupfs::Result<T>) -> cgroupfs::Result<Option<T>> {
    match r {
        Err(cgroupfs::Error::IoError(_, e))
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENODEV) =>
        {
            Ok(None)
        }
        r => r.map(Some),
    }
}

/// The walk below 0.9's `model::Collector` does for cgroups, file by file
/// through the same `CgroupReader` calls (io.stat off, as `below record`
/// defaults to), so the baseline is exactly that cost without procfs.
fn below09_walk(r: &CgroupReader) -> Result<Option<CgroupSample>> {
    let children = match g(r.child_cgroup_iter())? {
        None => None,
        Some(iter) => {
            let mut map = BTreeMap::new();
            for child in iter {
                if let Some(s) = below09_walk(&child)? {
                    let name = child.name().file_name().unwrap_or_default();
                    map.insert(name.to_string_lossy().into_owned(), s);
                }
            }
            Some(map)
        }
    };
    let pressure = match r.read_pressure() {
        Err(cgroupfs::Error::PressureNotSupported(_)) => None,
        p => g(p)?,
    };
    Ok(Some(CgroupSample {
        cpu_stat: g(r.read_cpu_stat())?,
        io_stat: None,
        tids_current: g(r.read_pids_current())?,
        tids_max: g(r.read_pids_max())?,
        memory_current: g(r.read_memory_current())?.map(|v| v as i64),
        memory_stat: g(r.read_memory_stat())?,
        pressure,
        children,
        memory_swap_current: g(r.read_memory_swap_current())?.map(|v| v as i64),
        memory_zswap_current: None,
        memory_min: g(r.read_memory_min())?,
        memory_low: g(r.read_memory_low())?,
        memory_high: g(r.read_memory_high())?,
        memory_max: g(r.read_memory_max())?,
        memory_swap_max: g(r.read_memory_swap_max())?,
        memory_zswap_max: g(r.read_memory_zswap_max())?,
        memory_events: g(r.read_memory_events())?,
        memory_events_local: g(r.read_memory_events_local())?,
        inode_number: r.read_inode_number().ok().map(|i| i as i64),
        cgroup_stat: g(r.read_cgroup_stat())?,
        memory_numa_stat: g(r.read_memory_numa_stat())?,
        cpuset_cpus: g(r.read_cpuset_cpus())?,
        cpuset_cpus_effective: g(r.read_cpuset_cpus_effective())?,
        cpuset_mems: g(r.read_cpuset_mems())?,
        cpuset_mems_effective: g(r.read_cpuset_mems_effective())?,
        cpu_weight: g(r.read_cpu_weight())?,
        cpu_max: g(r.read_cpu_max())?,
        cgroup_controllers: g(r.read_cgroup_controllers())?,
        cgroup_subtree_control: g(r.read_cgroup_subtree_control())?,
    }))
}

/// What happens to a sample after collection in `below record`: the
/// cgroup model against the previous sample, and the compressed store
/// write.
pub struct Downstream {
    writer: store::StoreWriter,
    _dir: tempfile::TempDir,
    prev: Option<(model::Sample, Instant)>,
}

impl Downstream {
    pub fn new() -> Result<Downstream> {
        let dir = tempfile::tempdir().context("Failed to create a store tempdir")?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let writer = store::StoreWriter::new(
            logger,
            dir.path(),
            store::CompressionMode::Zstd,
            store::Format::Cbor,
        )
        .context("Failed to open the store")?;
        Ok(Downstream {
            writer,
            _dir: dir,
            prev: None,
        })
    }

    /// Builds below's cgroup model of `tree` (rates against the previous
    /// sample) and returns the sample for [`Downstream::store`].
    pub fn model(&mut self, tree: CgroupSample) -> model::Sample {
        let now = Instant::now();
        let sample = model::Sample {
            cgroup: tree,
            ..Default::default()
        };
        let last = self.prev.as_ref().map(|(s, t)| {
            (
                &s.cgroup,
                now.duration_since(*t).max(Duration::from_millis(1)),
            )
        });
        let m = model::CgroupModel::new("<root>".into(), String::new(), 0, &sample.cgroup, last);
        std::hint::black_box(&m);
        sample
    }

    pub fn store(&mut self, sample: model::Sample) -> Result<()> {
        let frame = store::DataFrame { sample };
        self.writer
            .put(SystemTime::now(), &frame)
            .context("Failed to write the sample to the store")?;
        self.prev = Some((frame.sample, Instant::now()));
        Ok(())
    }
}
