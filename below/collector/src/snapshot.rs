//! What a sample reports (errors, notes, cgroups left out) and, for tests
//! and measurements, the sample itself as a flat pre-order list
//! ([`crate::CgroupCollector::collect`]).

use std::fmt;

use model::CgroupSample;

use crate::StatFile;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// Index of the parent in `Snapshot::nodes`; `None` for the root.
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

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Pre-order: a parent always comes before its children; `nodes[0]` is
    /// the root.
    pub nodes: Vec<Node>,
    pub errors: Vec<FileError>,
    /// Things worth logging that are not file errors (a backend falling
    /// back for this sample, and why).
    pub notes: Vec<String>,
    /// Cgroups left out by top-N this sample (counted, not stored).
    pub dropped: usize,
}

impl Snapshot {
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
