//! Cgroup stat collection for below without parsing text where the kernel
//! allows it: a BPF cgroup iterator, kernel-flushed stream files, or plain
//! reads of the cgroupfs text files, chosen per file.
//!
//! How a sample flows:
//! 1. At start, [`CgroupCollector::new`] probes BPF (`bpf::probe`: load
//!    the program, one trial pass, the kernel's facts) and streams, and
//!    [`Plan::choose`] gives each [`StatFile`] a backend, with the reason.
//! 2. Each sample ([`CgroupCollector::collect_into`]): streams wait for
//!    the kernel's next flush; the BPF backend runs its passes
//!    (`bpf::protocol`: FULL, or RANK then WANTED under top-N), indexes
//!    the records into the visible tree and decodes each kept cgroup
//!    (`bpf::decode`), reading as text only the files the plan gives to
//!    plain read (`read::Walker`); without BPF the walker walks the tree.
//! 3. Streams then fill their files; plain read and streams rank after
//!    reading (`top::prune`); a failed pass reads that sample as text.
//! 4. The result is a [`Tree`] of below's `CgroupSample`s (updated in
//!    place when its shape did not change) and a [`Snapshot`] of errors
//!    and notes.

mod bpf;
mod collector;
mod fd;
mod files;
mod ids;
mod mount;
mod parse;
mod plan;
mod read;
mod snapshot;
mod stream;
mod top;
mod tree;

use cgroupfs::CpuPressure;
use cgroupfs::IoPressure;
use cgroupfs::MemoryPressure;
use cgroupfs::Pressure;
use cgroupfs::PressureMetrics;

pub use crate::collector::CgroupCollector;
pub use crate::collector::Options;
pub use crate::files::FileSet;
pub use crate::files::StatFile;
pub use crate::mount::check_cgroup2_root;
pub use crate::mount::find_cgroup2_mount;
pub use crate::plan::BackendChoice;
pub use crate::plan::BackendKind;
pub use crate::plan::Capability;
pub use crate::plan::FileChoice;
pub use crate::plan::Plan;
pub use crate::plan::Support;
pub use crate::read::Walker;
pub use crate::snapshot::FileError;
pub use crate::snapshot::Node;
pub use crate::snapshot::Snapshot;
pub use crate::top::TopBy;
pub use crate::top::TopN;
pub use crate::tree::build_tree;
pub use crate::tree::Tree;

pub(crate) type PressureLines = (PressureMetrics, Option<PressureMetrics>);

/// below keeps the three pressure files as one field; io and memory must
/// have a "full" line.
pub(crate) fn assemble_pressure(
    cpu: PressureLines,
    io: PressureLines,
    memory: PressureLines,
    cgroup: &str,
    errors: &mut Vec<FileError>,
) -> Option<Pressure> {
    let mut full = |lines: PressureLines, file| {
        if lines.1.is_none() {
            errors.push(FileError {
                cgroup: cgroup.to_owned(),
                file,
                error: "no \"full\" line".to_owned(),
            });
        }
        lines.1.map(|full| (lines.0, full))
    };
    let io = full(io, StatFile::IoPressure);
    let memory = full(memory, StatFile::MemoryPressure);
    Some(Pressure {
        cpu: CpuPressure {
            some: cpu.0,
            full: cpu.1,
        },
        io: io.map(|(some, full)| IoPressure { some, full })?,
        memory: memory.map(|(some, full)| MemoryPressure { some, full })?,
    })
}
