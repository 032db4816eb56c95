//! What a sample reports (errors, notes, cgroups left out, the pass's
//! time, how the tree was made) and, for tests and measurements, the
//! sample itself as a flat pre-order list
//! ([`crate::CgroupCollector::collect`]).

use std::fmt;
use std::time::Duration;

use model::CgroupSample;

use crate::StatFile;
use crate::TreeBuild;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// Index of the parent in `FlatSample::nodes`; `None` for the root.
    pub parent: Option<usize>,
    /// Directory name ("" for the root).
    pub name: String,
    /// This cgroup's stats; `children` is left `None` (the tree is built
    /// from `parent`).
    pub sample: CgroupSample,
}

/// A file that could not be read or parsed: that field is `None` in the
/// sample, the rest of the sample stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// Cgroup path relative to the root ("" for the root).
    pub cgroup: String,
    pub file: StatFile,
    pub error: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cgroup.is_empty() {
            write!(f, "{}: {}", self.file, self.error)
        } else {
            write!(f, "{}/{}: {}", self.cgroup, self.file, self.error)
        }
    }
}

/// What one sample did, beside the values it gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub errors: Vec<FileError>,
    /// Things worth logging that are not file errors (a backend falling
    /// back for this sample, and why).
    pub notes: Vec<String>,
    /// Cgroups left out by top-N this sample (counted, not stored).
    pub dropped: usize,
    /// The BPF iterator pass's time; None when the sample had none.
    pub pass: Option<Elapsed>,
    /// Filling below's tree; None when the sample filled none.
    pub tree: Option<TreeFill>,
}

/// How below's tree was filled, and the time it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeFill {
    pub build: TreeBuild,
    pub took: Elapsed,
}

/// Thread CPU and wall time of a step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Elapsed {
    pub cpu: Duration,
    pub wall: Duration,
}

impl Elapsed {
    /// The time `f` takes on this thread.
    pub(crate) fn of<T>(f: impl FnOnce() -> T) -> (T, Elapsed) {
        let (cpu, wall) = (bstats_bpf::thread_cpu_time(), std::time::Instant::now());
        let out = f();
        let took = Elapsed {
            cpu: bstats_bpf::thread_cpu_time() - cpu,
            wall: wall.elapsed(),
        };
        (out, took)
    }
}

/// One sample as a flat pre-order list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlatSample {
    /// Pre-order: a parent always comes before its children; `nodes[0]` is
    /// the root.
    pub nodes: Vec<Node>,
    pub report: Report,
}

impl FlatSample {
    /// Path of node `idx` relative to the root, e.g. "system.slice/foo.service".
    pub fn path_of(&self, idx: usize) -> String {
        let nodes = &self.nodes;
        let mut names = Vec::new();
        let mut cur = Some(idx);
        while let Some(i) = cur {
            let n = &nodes[i];
            if n.parent.is_some() {
                names.push(n.name.as_str());
            }
            cur = n.parent;
        }
        names.reverse();
        names.join("/")
    }
}
