//! below's nested cgroup tree, kept from one sample to the next.
//!
//! Building it costs more than decoding the records: sorting children by
//! name, allocating every node and name, moving each (large)
//! `CgroupSample` several times, and freeing it all after the store write.
//! Cgroups rarely come and go between samples, so the tree is kept: while
//! a sample has the same cgroups (same names, same parents) as the tree,
//! its stats go into the nodes in place, and the BPF backend decodes its
//! records straight into them.

use model::CgroupSample;

use crate::Node;

#[derive(Debug, Default)]
pub struct Tree {
    root: CgroupSample,
    /// (parent, name) of each cgroup, in the snapshot pre-order the tree
    /// was built from.
    shape: Vec<(Option<usize>, String)>,
    /// The snapshot index of each node, in the tree's own pre-order
    /// (children by name).
    order: Vec<usize>,
    /// The tree is here, not out for a sample ([`Tree::take`]).
    held: bool,
}

impl Tree {
    /// Cgroups in the tree.
    pub fn len(&self) -> usize {
        self.shape.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shape.is_empty()
    }

    /// Whether the tree is here and holds exactly these cgroups: (parent,
    /// name) in snapshot pre-order.
    pub(crate) fn same_shape<'a>(
        &self,
        nodes: impl ExactSizeIterator<Item = (Option<usize>, &'a str)>,
    ) -> bool {
        self.held
            && nodes.len() == self.shape.len()
            && nodes
                .zip(&self.shape)
                .all(|((p, n), (sp, sn))| p == *sp && n == sn)
    }

    /// Calls `f(snapshot index, node)` for every node; a node's `children`
    /// are out of it during the call. Only for a tree of the same shape.
    pub(crate) fn update(&mut self, mut f: impl FnMut(usize, &mut CgroupSample)) {
        let mut order = self.order.iter();
        visit(&mut self.root, &mut |s| {
            f(*order.next().expect("a node per index"), s)
        });
    }

    /// The snapshot's cgroups as the tree: their samples moved into the
    /// nodes when the cgroups are the same, else a new tree.
    pub fn set(&mut self, mut nodes: Vec<Node>) {
        if self.same_shape(nodes.iter().map(|n| (n.parent, n.name.as_str()))) {
            self.update(|i, s| *s = std::mem::take(&mut nodes[i].sample));
        } else {
            // Freed before the new one is built: one tree at a time.
            self.root = CgroupSample::default();
            self.shape = nodes.iter().map(|n| (n.parent, n.name.clone())).collect();
            (self.root, self.order) = build(nodes);
            self.held = true;
        }
    }

    /// The tree, for one sample; until it is given back, the next sample
    /// builds a new one.
    pub fn take(&mut self) -> CgroupSample {
        self.held = false;
        std::mem::take(&mut self.root)
    }

    /// Gives back what [`Tree::take`] returned (its cgroups unchanged).
    pub fn give_back(&mut self, root: CgroupSample) {
        self.root = root;
        self.held = !self.shape.is_empty();
    }
}

/// Pre-order, children by name as the map holds them.
fn visit(node: &mut CgroupSample, f: &mut impl FnMut(&mut CgroupSample)) {
    let children = node.children.take();
    f(node);
    node.children = children;
    for c in node.children.iter_mut().flat_map(|c| c.values_mut()) {
        visit(c, f);
    }
}

/// below's nested tree from a pre-order snapshot, and the snapshot index
/// of each of its nodes in its pre-order.
fn build(mut nodes: Vec<Node>) -> (CgroupSample, Vec<usize>) {
    if nodes.is_empty() {
        return Default::default();
    }
    // Each node's children, sorted by name, as one range of `order`: a
    // BTreeMap collected from sorted pairs is built in bulk, with no
    // shifting of (large) samples inside its nodes as inserts would do.
    let mut order: Vec<usize> = (1..nodes.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (&nodes[a], &nodes[b]);
        (a.parent, &a.name).cmp(&(b.parent, &b.name))
    });
    let mut start = vec![0; nodes.len() + 1];
    for &i in &order {
        start[nodes[i].parent.expect("only the root has no parent") + 1] += 1;
    }
    for p in 1..start.len() {
        start[p] += start[p - 1];
    }
    let children = |p: usize| &order[start[p]..start[p + 1]];
    let mut preorder = Vec::with_capacity(nodes.len());
    let mut stack = vec![0];
    while let Some(p) = stack.pop() {
        preorder.push(p);
        stack.extend(children(p).iter().rev());
    }
    // Pre-order puts every descendant after its ancestors: going backwards,
    // each cgroup's subtree is complete when it moves into its parent.
    for p in (0..nodes.len()).rev() {
        let map = children(p)
            .iter()
            .map(|&c| {
                let n = &mut nodes[c];
                (std::mem::take(&mut n.name), std::mem::take(&mut n.sample))
            })
            .collect();
        nodes[p].sample.children = Some(map);
    }
    (std::mem::take(&mut nodes[0].sample), preorder)
}

/// below's nested cgroup tree from a pre-order snapshot.
pub fn build_tree(nodes: Vec<Node>) -> CgroupSample {
    build(nodes).0
}

#[cfg(test)]
#[path = "tree_test.rs"]
mod test;
