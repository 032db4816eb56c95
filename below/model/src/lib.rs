//! Glue between our cgroup collector and below's model.
//!
//! below 0.9's `model::Collector` has no seam for another cgroup reader, so
//! it runs with every child cgroup filtered out (it still reads the root's
//! files once, a constant cost) for the non-cgroup parts of the sample
//! (procfs, system, network), and its cgroup tree is replaced by the one
//! built from our [`bpf_stats::Snapshot`].

use std::collections::BTreeMap;
use std::time::Instant;
use std::time::SystemTime;

use anyhow::Result;
use bpf_stats::CgroupCollector;
use bpf_stats::Snapshot;
use model::CgroupSample;
use model::Model;
use model::Sample;
use slog::warn;

/// Builds below's nested cgroup tree from a pre-order snapshot.
pub fn build_tree(snap: Snapshot) -> CgroupSample {
    let mut nodes = snap.nodes;
    for n in nodes.iter_mut() {
        n.sample.children = Some(BTreeMap::new());
    }
    // Pre-order puts every descendant after its ancestors: popping from the
    // end moves each cgroup into its parent only once its own subtree is
    // complete.
    while nodes.len() > 1 {
        let n = nodes.pop().expect("len > 1");
        let parent = n.parent.expect("only the root has no parent");
        nodes[parent]
            .sample
            .children
            .as_mut()
            .expect("set above")
            .insert(n.name, n.sample);
    }
    nodes.pop().map(|n| n.sample).unwrap_or_default()
}

/// Where the time of one sample went.
#[derive(Debug, Default, Clone, Copy)]
pub struct SampleTimes {
    /// Our cgroup collector (iterator pass / file reads).
    pub cgroups: std::time::Duration,
    /// Turning the snapshot into below's tree.
    pub tree: std::time::Duration,
    /// below's own collector (procfs, system, network).
    pub rest: std::time::Duration,
}

pub struct Collector {
    logger: slog::Logger,
    below: model::Collector,
    cgroups: CgroupCollector,
    prev: Option<(Sample, Instant)>,
    /// Errors of the previous sample, to log only changes.
    last_errors: usize,
    pub times: SampleTimes,
}

impl Collector {
    /// `below_opts.cgroup_root` must be the same cgroup2 root as `cgroup_opts.root`.
    pub fn new(
        logger: slog::Logger,
        cgroup_opts: &bpf_stats::Options,
        below_opts: model::CollectorOptions,
    ) -> Result<Self> {
        let cgroups = CgroupCollector::new(cgroup_opts)?;
        let below_opts = model::CollectorOptions {
            cgroup_root: cgroup_opts.root.clone(),
            cgroup_re: Some(regex::Regex::new(".*").expect("valid regex")),
            collect_io_stat: false,
            ..below_opts
        };
        Ok(Collector {
            below: model::Collector::new(logger.clone(), below_opts),
            logger,
            cgroups,
            prev: None,
            last_errors: 0,
            times: SampleTimes::default(),
        })
    }

    pub fn cgroups(&self) -> &CgroupCollector {
        &self.cgroups
    }

    pub fn collect_sample(&mut self) -> Result<Sample> {
        let t0 = Instant::now();
        let mut sample = self.below.collect_sample()?;
        let t1 = Instant::now();
        let snap = self.cgroups.collect();
        let t2 = Instant::now();
        self.report_errors(&snap);
        // below's collector read the root's files; ours replace them.
        sample.cgroup = build_tree(snap);
        let t3 = Instant::now();
        self.times = SampleTimes {
            rest: t1 - t0,
            cgroups: t2 - t1,
            tree: t3 - t2,
        };
        Ok(sample)
    }

    fn report_errors(&mut self, snap: &Snapshot) {
        for note in &snap.notes {
            warn!(self.logger, "{}", note);
        }
        let n = snap.errors.len();
        if n != 0 && n != self.last_errors {
            for e in snap.errors.iter().take(3) {
                warn!(self.logger, "cgroup stat file skipped: {}", e);
            }
            if n > 3 {
                warn!(
                    self.logger,
                    "... and {} more cgroup stat files skipped",
                    n - 3
                );
            }
        }
        self.last_errors = n;
    }

    /// Collects a sample and the model of it against the previous one.
    pub fn collect_and_update_model(&mut self) -> Result<(Sample, Model)> {
        let now = Instant::now();
        let sample = self.collect_sample()?;
        let model = Model::new(
            SystemTime::now(),
            &sample,
            self.prev.as_ref().map(|(s, t)| (s, now.duration_since(*t))),
        );
        self.prev = Some((sample.clone(), now));
        Ok((sample, model))
    }
}

#[cfg(test)]
mod test {
    use bpf_stats::Node;

    use super::*;

    fn node(parent: Option<usize>, name: &str, ino: i64) -> Node {
        Node {
            parent,
            name: name.into(),
            sample: CgroupSample {
                inode_number: Some(ino),
                ..Default::default()
            },
        }
    }

    #[test]
    fn builds_nested_tree_from_preorder() {
        let snap = Snapshot {
            nodes: vec![
                node(None, "", 1),
                node(Some(0), "a", 2),
                node(Some(1), "x", 3),
                node(Some(2), "deep", 4),
                node(Some(1), "y", 5),
                node(Some(0), "b", 6),
            ],
            ..Default::default()
        };
        let root = build_tree(snap);
        assert_eq!(root.inode_number, Some(1));
        let top = root.children.as_ref().unwrap();
        assert_eq!(top.keys().collect::<Vec<_>>(), ["a", "b"]);
        let a = &top["a"].children.as_ref().unwrap();
        assert_eq!(a.keys().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(
            a["x"].children.as_ref().unwrap()["deep"].inode_number,
            Some(4)
        );
        // Leaves have an empty children map, as below's collector gives.
        assert_eq!(top["b"].children, Some(BTreeMap::new()));
    }

    #[test]
    fn empty_snapshot_gives_empty_root() {
        assert_eq!(build_tree(Snapshot::default()), CgroupSample::default());
    }
}
