//! Which passes a sample runs, over whatever runs them ([`Passes`]: the
//! loaded program, or a test's model of it).
//!
//! Without ranking a sample is one FULL pass. Ranked by a value the record
//! holds, it is a RANK pass (the tree and the ranked value of every cgroup,
//! and in full the ones user space wants: those the last sample kept). When the choice holds a cgroup that pass did not read in full (the
//! first sample, a newcomer to the top N), a WANTED pass reads the chosen
//! ones; should the tree change between the two (a record holds another
//! cgroup, or the count differs), a FULL pass reads it again and the choice
//! is kept by cgroup id.

use std::collections::HashSet;

use anyhow::Result;

use super::contract::Record;
use super::load::Pass;
use super::program::CgroupName;
use super::program::PASS_FULL;
use super::program::PASS_RANK;
use super::program::PASS_WANTED;
use super::psi::PressureRow;

/// Whether a WANTED pass found every wanted record slot still holding the
/// cgroup wanted there (other passes: [`Slots::Held`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slots {
    Held,
    /// The tree moved since the RANK pass: a slot holds another cgroup.
    Moved,
}

/// A pass's records, their pressure rows and their cgroups' names (none:
/// the program has no pressure, no names).
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub(crate) records: &'a [Record],
    pub(crate) pressure: &'a [PressureRow],
    pub(crate) names: &'a [CgroupName],
}

/// Runs passes and lends their records.
pub(crate) trait Passes {
    /// One pass of `mode` (PASS_*; `rank_groups`: the CGB_HAS_* groups a RANK
    /// pass reads) over every cgroup: the records grow to hold them (the
    /// wanted marks are lost then).
    fn run_all(&mut self, mode: u32, rank_groups: u32) -> Result<(Pass, Slots)>;
    /// The first `n` records, their pressure rows and names.
    fn rows(&self, n: u32) -> Rows<'_>;
    /// Per record slot, the id of the cgroup wanted in full there (0: none)
    /// as last set; fewer slots, or none since the records grew.
    fn wanted(&self) -> &[u64];
    /// Sets them for the next passes.
    fn set_wanted(&mut self, wanted: Vec<u64>) -> Result<()>;
}

/// The cgroups a sample shows, by record index, learnt anew after each
/// pass that may have moved them.
pub(crate) trait TreeIndex {
    fn index(&mut self, rows: Rows);
    /// Record index of each visible cgroup, in pre-order.
    fn visible(&self) -> &[usize];
}

/// What a sample's passes leave: the last pass (its records hold every
/// kept cgroup in full) and, when ranked, which visible cgroups to keep.
pub(crate) struct Sampled {
    pub(crate) pass: Pass,
    pub(crate) keep: Option<Vec<bool>>,
}

/// The choice over the visible cgroups of a pass: keep or not, each.
pub(crate) type Choose<'a, V> = dyn FnMut(&V, Rows<'_>, &Pass) -> Vec<bool> + 'a;

/// How a sample ranks over the records: the CGB_HAS_* groups a RANK pass
/// reads, and the choice.
pub(crate) struct Rank<'a, V> {
    pub(crate) groups: u32,
    pub(crate) choose: &'a mut Choose<'a, V>,
}

/// Runs one sample's passes (see the module's doc).
pub(crate) fn sample<P: Passes, V: TreeIndex>(
    p: &mut P,
    view: &mut V,
    rank: Option<Rank<'_, V>>,
) -> Result<Sampled> {
    let Some(rank) = rank else {
        let (pass, _) = p.run_all(PASS_FULL, 0)?;
        view.index(p.rows(pass.cgroups));
        return Ok(Sampled { pass, keep: None });
    };
    let (mut pass, _) = p.run_all(PASS_RANK, rank.groups)?;
    let n = pass.cgroups;
    view.index(p.rows(n));
    let mut keep = (rank.choose)(view, p.rows(n), &pass);
    let records = p.rows(n).records;
    let mut wanted = vec![0; records.len()];
    for (&i, _) in (view.visible().iter().zip(&keep)).filter(|&(_, &k)| k) {
        wanted[i] = records[i].id;
    }
    // The RANK pass read in full the cgroups wanted: is that all we keep?
    let marked = p.wanted();
    let complete =
        (wanted.iter().enumerate()).all(|(i, &id)| id == 0 || marked.get(i) == Some(&id));
    // Taken now: a pass that grows the map replaces these records.
    let kept: HashSet<u64> = wanted.iter().copied().filter(|&id| id != 0).collect();
    p.set_wanted(wanted)?;
    if complete {
        return Ok(Sampled {
            pass,
            keep: Some(keep),
        });
    }
    let slots;
    (pass, slots) = p.run_all(PASS_WANTED, 0)?;
    if slots == Slots::Moved || pass.cgroups != n {
        (pass, _) = p.run_all(PASS_FULL, 0)?;
        let rows = p.rows(pass.cgroups);
        view.index(rows);
        let records = rows.records;
        keep = (view.visible().iter())
            .map(|&i| kept.contains(&records[i].id))
            .collect();
    }
    Ok(Sampled {
        pass,
        keep: Some(keep),
    })
}

#[cfg(test)]
#[path = "protocol_test.rs"]
mod test;
