//! Loading the task iterator and running one pass, through the BPF layer.

use anyhow::Context;
use anyhow::Result;
use libbpf_rs::skel::Skel;
use libbpf_rs::Link;

use crate::skel::TaskStatsSkel;
use crate::skel::TaskStatsSkelBuilder;

const PROG: &str = "dump_task";

/// The loaded program attached as an iterator. Fields drop in order: the
/// link before the object that holds the program.
pub(crate) struct TaskIter {
    link: Link,
    _skel: TaskStatsSkel<'static>,
}

impl TaskIter {
    /// Opens, loads (the verifier runs here) and attaches the iterator.
    pub(crate) fn load() -> Result<Self> {
        let skel = bstats_bpf::load(TaskStatsSkelBuilder::default(), None, |_| Ok(()))
            .context("the kernel refused the sleepable task iterator")?;
        let link = bstats_bpf::prog(skel.object(), PROG)?
            .attach()
            .context("cannot attach the task iterator")?;
        Ok(TaskIter { link, _skel: skel })
    }

    /// One pass: everything the program printed, into `out` (cleared).
    pub(crate) fn pass(&self, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        bstats_bpf::run_iter(&self.link, out)
    }
}
