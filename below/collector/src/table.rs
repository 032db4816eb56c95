//! The collector's one intermediate form: every cgroup, kept by cgroup id
//! from one sample to the next.
//!
//! A sample goes through the table in three steps, whatever the backend:
//! 1. index: [`Table::begin`], then [`Table::visit`] each cgroup in
//!    pre-order (the walker from readdir, BPF from the iterator's records),
//!    then [`Table::end`]. What never changes for a cgroup (name, path,
//!    filter and always-keep matches) is learnt the first time its id is
//!    seen; cgroups not visited are forgotten. A cgroup is its id: two
//!    siblings never share a name in below's tree (see [`build`]).
//! 2. choose and fill: top-N keeps some rows ([`Table::retain`], the one
//!    selection in `top`), and backends fill each kept row's sample.
//! 3. publish: [`Table::fill_tree`] fills below's nested tree, which its
//!    caller keeps: updated in place while the kept cgroups are the same
//!    ones (the shape generation), else built anew.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use model::CgroupSample;
use regex::Regex;
use serde::Deserialize;
use serde::Serialize;

use crate::ids::IdMap;
use crate::Node;

/// What is known of a cgroup for its whole life (cgroup2 cannot rename or
/// move one).
#[derive(Debug)]
pub(crate) struct Row {
    /// [`display_name`] of its directory's name.
    pub(crate) name: String,
    /// Those names joined, relative to the root ("" for the root): what
    /// below shows and the patterns match.
    pub(crate) path: String,
    /// The directory's own bytes relative to the root: learnt once, so a
    /// file read by path never costs a walk.
    pub(crate) raw: PathBuf,
    /// Matches the always-keep pattern of top-N.
    pub(crate) always: bool,
    filtered: bool,
    /// The index that last visited it, and its position there.
    seen: u64,
    pos: usize,
}

/// How [`Table::fill_tree`] made the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeBuild {
    /// The tree filled last, its samples swapped in: no allocation.
    InPlace,
    /// A new tree: the first, another one, or the kept cgroups changed.
    New,
}

/// The shape of the tree [`Table::fill_tree`] filled last.
#[derive(Debug, Default)]
struct Filled {
    generation: u64,
    /// The id of each of its nodes, in its own pre-order (children by
    /// name).
    order: Vec<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct Table {
    rows: IdMap<Row>,
    /// This sample's cgroups in pre-order: id and parent position; the
    /// root first.
    ids: Vec<u64>,
    parents: Vec<Option<usize>>,
    /// Each position's sample, filled by the backends.
    samples: Vec<CgroupSample>,
    /// The index count, to tell rows seen by this one.
    index: u64,
    /// Changes when the kept cgroups are not the same ones in the same
    /// order as at the last sample; `shape` is what it was computed from.
    generation: u64,
    shape: Vec<u64>,
    filled: Option<Filled>,
    filter: Option<Regex>,
    keep: Option<Regex>,
    /// Rows left out by top-N this sample.
    dropped: usize,
}

impl Table {
    pub(crate) fn new(filter: Option<Regex>, keep: Option<Regex>) -> Self {
        Table {
            filter,
            keep,
            ..Default::default()
        }
    }

    /// Starts indexing a sample (or a pass that may have moved cgroups).
    pub(crate) fn begin(&mut self) {
        self.index += 1;
        self.ids.clear();
        self.parents.clear();
        self.dropped = 0;
    }

    /// Visits cgroup `id` under the cgroup at position `parent` (None: the
    /// root), named by `name`, its directory's name (called only for a
    /// cgroup not seen before). Its position in this sample, or None when
    /// the filter skips it (and so its subtree).
    pub(crate) fn visit(
        &mut self,
        id: u64,
        parent: Option<usize>,
        name: impl FnOnce() -> OsString,
    ) -> Option<usize> {
        let pos = self.ids.len();
        if !self.rows.contains_key(&id) {
            let row = self.learn(parent, name());
            self.rows.insert(id, row);
        }
        let row = self.rows.get_mut(&id).expect("inserted above");
        row.seen = self.index;
        row.pos = pos;
        if row.filtered {
            return None;
        }
        self.ids.push(id);
        self.parents.push(parent);
        if self.samples.len() == pos {
            self.samples.push(CgroupSample::default());
        }
        Some(pos)
    }

    /// The position of cgroup `id` in this sample, if visited and not
    /// filtered out.
    pub(crate) fn position(&self, id: u64) -> Option<usize> {
        let row = self.rows.get(&id)?;
        (row.seen == self.index && !row.filtered && self.ids.get(row.pos) == Some(&id))
            .then_some(row.pos)
    }

    /// Whether cgroup `id` has a row (seen at some sample, its name known).
    pub(crate) fn learnt(&self, id: u64) -> bool {
        self.rows.contains_key(&id)
    }

    /// Whether cgroup `id` was seen by the last index (top-N may have left
    /// it out since).
    pub(crate) fn knows(&self, id: u64) -> bool {
        self.rows.get(&id).is_some_and(|r| r.seen == self.index)
    }

    /// Takes back the visits from position `pos` on (a cgroup removed while
    /// it was being read: it and what was visited under it).
    pub(crate) fn truncate(&mut self, pos: usize) {
        for id in self.ids.drain(pos..) {
            if let Some(row) = self.rows.get_mut(&id) {
                row.seen = 0;
            }
        }
        self.parents.truncate(pos);
    }

    /// Ends the index: cgroups not visited are forgotten.
    pub(crate) fn end(&mut self) {
        let index = self.index;
        self.rows.retain(|_, r| r.seen == index);
        self.samples.truncate(self.ids.len());
    }

    /// What a newly seen cgroup under `parent`, named `raw`, is.
    fn learn(&self, parent: Option<usize>, raw: OsString) -> Row {
        let Some(p) = parent else {
            return Row {
                name: String::new(),
                path: String::new(),
                raw: PathBuf::new(),
                always: false,
                filtered: false,
                seen: 0,
                pos: 0,
            };
        };
        let parent_row = &self.rows[&self.ids[p]];
        let name = display_name(&raw).into_owned();
        let path = match parent_row.path.is_empty() {
            true => name.clone(),
            false => format!("{}/{name}", parent_row.path),
        };
        let is = |re: &Option<Regex>| re.as_ref().is_some_and(|re| re.is_match(&path));
        Row {
            filtered: is(&self.filter),
            always: is(&self.keep),
            name,
            path,
            raw: parent_row.raw.join(raw),
            seen: 0,
            pos: 0,
        }
    }

    /// Cgroups in this sample (kept ones, after [`Table::retain`]).
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    pub(crate) fn id(&self, pos: usize) -> u64 {
        self.ids[pos]
    }

    pub(crate) fn row(&self, pos: usize) -> &Row {
        &self.rows[&self.ids[pos]]
    }

    /// The parent position of each position (pre-order: a parent comes
    /// first).
    pub(crate) fn parents(&self) -> &[Option<usize>] {
        &self.parents
    }

    /// The sample at `pos` to fill. It holds what was there at an earlier
    /// sample (a backend may reuse its allocations; it sets every field it
    /// serves and must clear what it does not).
    pub(crate) fn sample_mut(&mut self, pos: usize) -> &mut CgroupSample {
        &mut self.samples[pos]
    }

    /// The row and the sample at `pos`, the sample to fill.
    pub(crate) fn row_and_sample_mut(&mut self, pos: usize) -> (&Row, &mut CgroupSample) {
        (&self.rows[&self.ids[pos]], &mut self.samples[pos])
    }

    pub(crate) fn sample(&self, pos: usize) -> &CgroupSample {
        &self.samples[pos]
    }

    /// Keeps the positions with `keep[i]` (a kept position's parent must be
    /// kept); the others are counted as dropped.
    pub(crate) fn retain(&mut self, keep: &[bool]) {
        let mut new_pos = vec![usize::MAX; self.ids.len()];
        let mut next = 0;
        for (i, &k) in keep.iter().enumerate().take(self.ids.len()) {
            if k {
                new_pos[i] = next;
                self.ids[next] = self.ids[i];
                self.parents[next] = self.parents[i].map(|p| new_pos[p]);
                self.samples.swap(next, i);
                self.rows.get_mut(&self.ids[next]).expect("visited").pos = next;
                next += 1;
            }
        }
        self.dropped += self.ids.len() - next;
        self.ids.truncate(next);
        self.parents.truncate(next);
        self.samples.truncate(next);
    }

    /// Cgroups left out by top-N this sample.
    pub(crate) fn dropped(&self) -> usize {
        self.dropped
    }

    /// The kept cgroups' shape generation: the same number as long as they
    /// are the same cgroups in the same pre-order.
    fn update_generation(&mut self) -> u64 {
        if self.shape != self.ids {
            self.generation += 1;
            self.shape.clone_from(&self.ids);
        }
        self.generation
    }

    /// Fills `tree` with below's nested tree of this sample. `tree` is the
    /// one filled last, unchanged (updated in place when its generation is
    /// this sample's: each node swaps samples with its position, so the
    /// position keeps the node's earlier allocations), or a default one
    /// (built anew, as when the cgroups changed).
    pub(crate) fn fill_tree(&mut self, tree: &mut CgroupSample) -> TreeBuild {
        let generation = self.update_generation();
        // A filled tree always has children (a leaf's map is empty).
        let filled = self
            .filled
            .as_ref()
            .filter(|f| f.generation == generation && tree.children.is_some());
        if let Some(filled) = filled {
            // Each node takes the sample of its own id: the generation
            // says the ids are the same, the tree's order which is where.
            let (rows, samples) = (&self.rows, &mut self.samples);
            let mut next = filled.order.iter();
            visit(tree, &mut |node| {
                let id = next.next().expect("a node per position");
                std::mem::swap(node, &mut samples[rows[id].pos]);
            });
            return TreeBuild::InPlace;
        }
        // Freed before the new one is built: one tree at a time.
        *tree = CgroupSample::default();
        let names: Vec<&str> = (0..self.ids.len())
            .map(|p| self.rows[&self.ids[p]].name.as_str())
            .collect();
        let (root, order) = build(&self.parents, &names, &self.ids, &mut self.samples);
        *tree = root;
        self.filled = Some(Filled {
            generation,
            order: order.into_iter().map(|p| self.ids[p]).collect(),
        });
        TreeBuild::New
    }

    /// This sample as a flat pre-order list, its samples moved out.
    pub(crate) fn take_nodes(&mut self) -> Vec<Node> {
        (0..self.ids.len())
            .map(|p| Node {
                parent: self.parents[p],
                name: self.row(p).name.clone(),
                sample: std::mem::take(&mut self.samples[p]),
            })
            .collect()
    }
}

/// Pre-order, children by name as the map holds them; a node's children
/// are out of it during `f`.
fn visit(node: &mut CgroupSample, f: &mut impl FnMut(&mut CgroupSample)) {
    let children = node.children.take();
    f(node);
    node.children = children;
    for c in node.children.iter_mut().flat_map(|c| c.values_mut()) {
        visit(c, f);
    }
}

/// below's nested tree from pre-order `parents`, `names`, `ids` and
/// `samples` (moved out), and the position of each of its nodes in its
/// pre-order. Siblings that show alike (a name that is not UTF-8 beside
/// one spelt like its escape) stay apart: the lowest id keeps the name,
/// the others get `#ID`, the same in every backend.
fn build(
    parents: &[Option<usize>],
    names: &[&str],
    ids: &[u64],
    samples: &mut [CgroupSample],
) -> (CgroupSample, Vec<usize>) {
    let n = parents.len();
    if n == 0 {
        return Default::default();
    }
    // Each position's children, sorted by name, as one range of `order`:
    // a BTreeMap collected from sorted pairs is built in bulk, with no
    // shifting of (large) samples inside its nodes as inserts would do.
    let mut order: Vec<usize> = (1..n).collect();
    let key = |i: usize| (parents[i], names[i], ids[i]);
    order.sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
    let names = unique_names(&order, parents, names, ids);
    // A name made (`#ID`) may sort elsewhere among its siblings.
    if names.iter().any(|n| matches!(n, Cow::Owned(_))) {
        order.sort_unstable_by(|&a, &b| (parents[a], &names[a]).cmp(&(parents[b], &names[b])));
    }
    let mut start = vec![0; n + 1];
    for &i in &order {
        start[parents[i].expect("only the root has no parent") + 1] += 1;
    }
    for p in 1..start.len() {
        start[p] += start[p - 1];
    }
    let children = |p: usize| &order[start[p]..start[p + 1]];
    let mut preorder = Vec::with_capacity(n);
    let mut stack = vec![0];
    while let Some(p) = stack.pop() {
        preorder.push(p);
        stack.extend(children(p).iter().rev());
    }
    // Pre-order puts every descendant after its ancestors: going backwards,
    // each cgroup's subtree is complete when it moves into its parent.
    for p in (0..n).rev() {
        let map: BTreeMap<String, CgroupSample> = children(p)
            .iter()
            .map(|&c| (names[c].to_string(), std::mem::take(&mut samples[c])))
            .collect();
        samples[p].children = Some(map);
    }
    (std::mem::take(&mut samples[0]), preorder)
}

/// `names` as below's tree shows them: of siblings that show alike
/// (`order` sorts by parent, name, id) the first keeps the name, the others
/// get `#ID` (`#ID.K` while a sibling has that): the names made are the
/// owned ones.
fn unique_names<'a>(
    order: &[usize],
    parents: &[Option<usize>],
    names: &[&'a str],
    ids: &[u64],
) -> Vec<Cow<'a, str>> {
    let mut out: Vec<Cow<str>> = names.iter().map(|&s| Cow::Borrowed(s)).collect();
    for w in order.windows(2) {
        let (a, b) = (w[0], w[1]);
        if parents[a] != parents[b] || names[a] != names[b] {
            continue;
        }
        // Only names chosen to collide get here: a scan of the tree is fine.
        let taken = |n: &str| {
            order
                .iter()
                .any(|&s| parents[s] == parents[b] && out[s] == n)
        };
        let mut name = format!("{}#{}", names[b], ids[b]);
        let mut k = 1;
        while taken(&name) {
            name = format!("{}#{}.{k}", names[b], ids[b]);
            k += 1;
        }
        out[b] = Cow::Owned(name);
    }
    out
}

/// A directory's name as below's tree shows it: UTF-8 as it is; otherwise
/// each byte that is not part of valid UTF-8 as `\xNN` and `\` as `\\`,
/// so two names that are not UTF-8 never show alike. (One can still show
/// as a UTF-8 name beside it does: [`build`] adds `#ID` then.)
pub(crate) fn display_name(raw: &OsStr) -> Cow<'_, str> {
    if let Some(s) = raw.to_str() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for chunk in raw.as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
#[path = "table_test.rs"]
mod test;
