//! The pass protocol against a model of the program's pass modes (what
//! visit_bstats() does with `wanted`, `moved` and the map's capacity), with
//! a tree that may change between two passes of one sample.

use super::*;
use crate::bpf::contract::CGB_HAS_BSTAT;
use crate::bpf::contract::CGB_HAS_PIDS;

#[derive(Clone, Copy)]
struct Cgroup {
    id: u64,
    parent: u64,
    level: u32,
    /// The ranked value (usage_ns).
    value: u64,
}

type Change = Box<dyn FnMut(&mut Vec<Cgroup>)>;

/// The program as a model: one record slot per visited cgroup, in the
/// tree's pre-order; the map holds `capacity` and grows like the loader's.
struct Model {
    tree: Vec<Cgroup>,
    records: Vec<Record>,
    /// The `wanted` map, as large as the records'.
    marks: Vec<u64>,
    /// Applied to the tree before the pass of this number (0-based).
    change: Option<(usize, Change)>,
    modes: Vec<u32>,
}

/// What a full read leaves in a record: its pids_current.
fn full_mark(c: &Cgroup) -> u64 {
    1000 + c.id
}

impl Model {
    fn new(tree: Vec<Cgroup>, capacity: usize) -> Self {
        Model {
            tree,
            records: vec![Record::default(); capacity],
            marks: vec![0; capacity],
            change: None,
            modes: Vec::new(),
        }
    }

    fn run(&mut self, mode: u32, groups: u32) -> (Pass, bool) {
        if let Some((at, f)) = &mut self.change {
            if *at == self.modes.len() {
                f(&mut self.tree);
            }
        }
        self.modes.push(mode);
        let mut moved = false;
        for (idx, c) in self.tree.iter().enumerate() {
            let Some(r) = self.records.get_mut(idx) else {
                continue;
            };
            let w = self.marks[idx];
            let want = w == c.id;
            if mode == PASS_WANTED {
                moved |= w != 0 && !want;
                if !want {
                    continue;
                }
            }
            r.flags = 0;
            if mode == PASS_RANK && !want {
                if r.id != c.id {
                    (r.id, r.parent_id, r.level) = (c.id, c.parent, c.level);
                }
                r.flags = groups;
                r.usage_ns = c.value;
                continue;
            }
            (r.id, r.parent_id, r.level) = (c.id, c.parent, c.level);
            r.flags = CGB_HAS_BSTAT | CGB_HAS_PIDS;
            r.usage_ns = c.value;
            r.pids_current = full_mark(c);
        }
        let pass = Pass {
            cgroups: self.tree.len() as u32,
            features: 0,
            facts: 0,
        };
        (pass, moved)
    }
}

impl Model {
    fn records(&self, n: u32) -> &[Record] {
        &self.records[..(n as usize).min(self.records.len())]
    }
}

impl Passes for Model {
    fn run_all(&mut self, mode: u32, rank_groups: u32) -> Result<(Pass, Slots)> {
        loop {
            let (pass, moved) = self.run(mode, rank_groups);
            if pass.cgroups as usize <= self.records.len() {
                let slots = if moved { Slots::Moved } else { Slots::Held };
                return Ok((pass, slots));
            }
            // A new load: bigger maps, every record and mark zeroed.
            let cap = crate::bpf::load::capacity_for(pass.cgroups) as usize;
            self.records = vec![Record::default(); cap];
            self.marks = vec![0; cap];
        }
    }

    fn rows(&self, n: u32) -> Rows<'_> {
        Rows {
            records: self.records(n),
            pressure: &[],
            names: &[],
        }
    }

    fn wanted(&self) -> &[u64] {
        &self.marks
    }

    fn set_wanted(&mut self, wanted: Vec<u64>) -> Result<()> {
        self.marks.fill(0);
        self.marks[..wanted.len()].copy_from_slice(&wanted);
        Ok(())
    }
}

/// Every record visible, as the backend's index would without a filter.
#[derive(Default)]
struct All(Vec<usize>);

impl TreeIndex for All {
    fn index(&mut self, rows: Rows) {
        self.0 = (0..rows.records.len()).collect();
    }

    fn visible(&self) -> &[usize] {
        &self.0
    }
}

fn tree(n: u64) -> Vec<Cgroup> {
    (1..=n)
        .map(|id| Cgroup {
            id,
            parent: if id == 1 { 0 } else { 1 },
            level: (id != 1) as u32,
            value: id * 10,
        })
        .collect()
}

/// Keeps the `top` highest ranked values (the root always).
fn top(n: usize) -> impl FnMut(&All, Rows<'_>, &Pass) -> Vec<bool> {
    move |view, Rows { records, .. }, _| {
        let mut by_value: Vec<usize> = (0..view.0.len()).collect();
        by_value.sort_by_key(|&j| std::cmp::Reverse(records[view.0[j]].usage_ns));
        let mut keep = vec![false; view.0.len()];
        keep[0] = true;
        for &j in by_value.iter().take(n) {
            keep[j] = true;
        }
        keep
    }
}

/// One ranked sample; the ids it keeps, each checked to be read in full.
fn ranked(m: &mut Model, view: &mut All, n: usize) -> Vec<u64> {
    let mut choose = top(n);
    let s = sample(
        m,
        view,
        Some(Rank {
            groups: CGB_HAS_BSTAT,
            choose: &mut choose,
        }),
    )
    .unwrap();
    let keep = s.keep.expect("ranked");
    let records = m.records(s.pass.cgroups);
    let mut ids = Vec::new();
    for (&i, k) in view.0.iter().zip(keep) {
        if !k {
            continue;
        }
        let r = &records[i];
        let c = m
            .tree
            .iter()
            .find(|c| c.id == r.id)
            .expect("a cgroup of the tree");
        assert_eq!(
            r.pids_current,
            full_mark(c),
            "cgroup {} kept but not read in full",
            r.id
        );
        assert_eq!(r.parent_id, c.parent);
        ids.push(r.id);
    }
    ids
}

#[test]
fn unranked_is_one_full_pass() {
    let mut m = Model::new(tree(5), 8);
    let mut view = All::default();
    let s = sample(&mut m, &mut view, None).unwrap();
    assert!(s.keep.is_none());
    assert_eq!(m.modes, [PASS_FULL]);
    let ids: Vec<u64> = m.records(s.pass.cgroups).iter().map(|r| r.id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert!(m.records(5).iter().all(|r| r.pids_current == 1000 + r.id));
}

#[test]
fn first_ranked_sample_reads_the_chosen_in_a_wanted_pass() {
    let mut m = Model::new(tree(6), 8);
    let mut view = All::default();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 5, 6]);
    assert_eq!(m.modes, [PASS_RANK, PASS_WANTED]);
    // Not chosen, not read in full.
    assert_eq!(m.records(6)[1].pids_current, 0);
}

#[test]
fn a_steady_choice_takes_one_rank_pass() {
    let mut m = Model::new(tree(6), 8);
    let mut view = All::default();
    ranked(&mut m, &mut view, 2);
    m.modes.clear();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 5, 6]);
    assert_eq!(m.modes, [PASS_RANK]);
}

#[test]
fn a_newcomer_to_the_top_takes_a_wanted_pass() {
    let mut m = Model::new(tree(6), 8);
    let mut view = All::default();
    ranked(&mut m, &mut view, 2);
    m.tree[2].value = 1000;
    m.modes.clear();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 3, 6]);
    assert_eq!(m.modes, [PASS_RANK, PASS_WANTED]);
}

/// A cgroup made under the root between two passes.
fn idle_child(id: u64) -> Cgroup {
    Cgroup {
        id,
        parent: 1,
        level: 1,
        value: 0,
    }
}

#[test]
fn the_tree_moving_before_the_wanted_pass_takes_a_full_pass() {
    let mut m = Model::new(tree(6), 8);
    // Before the second pass: a cgroup made ahead of the chosen ones
    // shifts them into other slots.
    m.change = Some((
        1,
        Box::new(|t: &mut Vec<Cgroup>| t.insert(1, idle_child(9))),
    ));
    let mut view = All::default();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 5, 6]);
    assert_eq!(m.modes, [PASS_RANK, PASS_WANTED, PASS_FULL]);
    assert_eq!(view.0.len(), 7);
}

#[test]
fn a_cgroup_made_at_the_end_before_the_wanted_pass_takes_a_full_pass() {
    let mut m = Model::new(tree(6), 8);
    m.change = Some((1, Box::new(|t: &mut Vec<Cgroup>| t.push(idle_child(7)))));
    let mut view = All::default();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 5, 6]);
    assert_eq!(m.modes, [PASS_RANK, PASS_WANTED, PASS_FULL]);
}

#[test]
fn a_removed_chosen_cgroup_is_not_kept() {
    let mut m = Model::new(tree(6), 8);
    m.change = Some((1, Box::new(|t: &mut Vec<Cgroup>| t.retain(|c| c.id != 6))));
    let mut view = All::default();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 5]);
    assert_eq!(m.modes, [PASS_RANK, PASS_WANTED, PASS_FULL]);
}

#[test]
fn growth_between_the_passes_loses_the_marks_and_takes_a_full_pass() {
    let mut m = Model::new(tree(4), 4);
    m.change = Some((
        1,
        Box::new(|t: &mut Vec<Cgroup>| {
            t.extend((5..=9).map(|id| Cgroup {
                id,
                parent: 1,
                level: 1,
                value: 0,
            }))
        }),
    ));
    let mut view = All::default();
    assert_eq!(ranked(&mut m, &mut view, 2), [1, 3, 4]);
    assert_eq!(m.records.len(), 9 + 64, "grown: the tree and 64");
    assert_eq!(m.modes, [PASS_RANK, PASS_WANTED, PASS_WANTED, PASS_FULL]);
}

#[test]
fn a_tree_too_big_for_the_map_grows_it_first() {
    let mut m = Model::new(tree(10), 2);
    let mut view = All::default();
    assert_eq!(ranked(&mut m, &mut view, 3), [1, 8, 9, 10]);
    assert_eq!(m.modes, [PASS_RANK, PASS_RANK, PASS_WANTED]);
}

#[test]
fn a_growing_tree_reloads_rarely_and_pins_little_past_it() {
    let mut m = Model::new(tree(1), 256);
    let mut view = All::default();
    let mut loads = Vec::new();
    // Grown one cgroup per sample, then by a thousand at once.
    for n in (2..=3000).chain([4000, 5000]) {
        m.tree = tree(n);
        let before = m.records.len();
        let s = sample(&mut m, &mut view, None).unwrap();
        let cap = m.records.len();
        // Every cgroup is read, in a single pass when the map grew.
        assert_eq!(s.pass.cgroups as usize, n as usize);
        assert!(cap >= n as usize);
        if cap != before {
            loads.push((n as usize, before, cap));
        }
    }
    assert_eq!(m.modes.len(), 3001 + loads.len(), "one extra pass per load");
    for &(n, before, cap) in &loads {
        assert!(cap <= n + n / 16 + 64, "{cap} pinned for {n} cgroups");
        // At least a sixteenth more room each time: reloads are logarithmic.
        assert!(cap >= before + before / 16, "{before} grew only to {cap}");
    }
}
