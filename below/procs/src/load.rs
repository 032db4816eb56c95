//! Loading the task iterator and running one pass: the crate's only
//! libbpf code (kept in one file so it can move onto a shared BPF layer).

use std::io::ErrorKind;
use std::io::Read;

use anyhow::anyhow;
use anyhow::Context;
use anyhow::Result;
use libbpf_rs::Iter;
use libbpf_rs::Link;
use libbpf_rs::Object;
use libbpf_rs::ObjectBuilder;

/// The compiled program (build.rs).
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/task_stats.bpf.o"));
const PROG: &str = "dump_task";
const CHUNK: usize = 64 * 1024;

/// The loaded program attached as an iterator. Fields drop in order: the
/// link before the object that holds the program.
pub(crate) struct TaskIter {
    link: Link,
    _object: Object,
}

impl TaskIter {
    /// Opens, loads (the verifier runs here) and attaches the iterator.
    pub(crate) fn load() -> Result<Self> {
        let open = ObjectBuilder::default()
            .open_memory(OBJECT)
            .context("cannot open the task iterator object")?;
        let object = open.load().map_err(|e| match e.kind() {
            libbpf_rs::ErrorKind::PermissionDenied => anyhow!(
                "the kernel refused the sleepable task iterator (EACCES: the verifier, or no CAP_BPF and CAP_PERFMON / CAP_SYS_ADMIN): {e}"
            ),
            _ => anyhow!("the kernel refused the sleepable task iterator: {e}"),
        })?;
        let link = object
            .progs_mut()
            .find(|p| p.name() == PROG)
            .ok_or_else(|| anyhow!("no program {PROG} in the object"))?
            .attach()
            .context("cannot attach the task iterator")?;
        Ok(TaskIter {
            link,
            _object: object,
        })
    }

    /// One pass: everything the program printed, into `out` (cleared).
    pub(crate) fn pass(&self, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        let mut it = Iter::new(&self.link).context("cannot create a task iterator")?;
        loop {
            // The kernel hands out at most its seq_file buffer (8 pages)
            // per read.
            let len = out.len();
            out.resize(len + CHUNK, 0);
            let read = it.read(&mut out[len..]);
            out.truncate(len + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading the task iterator failed"),
            }
        }
    }
}
