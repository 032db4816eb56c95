//! Cgroup stat collection for below without parsing text where the kernel
//! allows it: a BPF cgroup iterator, kernel-flushed stream files, or plain
//! reads of the cgroupfs text files, chosen per file.
//!
//! How a sample flows, through one table of every cgroup kept by id
//! between samples (`table`):
//! 1. At start, [`CgroupCollector::new`] probes BPF (`bpf::probe`: load
//!    the program, one trial pass, the kernel's facts) and streams, and
//!    [`Plan::choose`] gives each [`StatFile`] a backend, with the reason.
//! 2. Each sample ([`CgroupCollector::sample`]) indexes the tree into the
//!    table: from the iterator's records (`bpf::protocol` runs a FULL
//!    pass, or RANK then WANTED under top-N), or from readdir
//!    (`read::Walker`) without BPF.
//! 3. Top-N keeps some rows (`top::choose`, one selection for every
//!    backend: over the records, or over the samples once read).
//! 4. Backends fill the kept rows' samples: BPF decodes records
//!    (`bpf::decode`), plain read and streams read the files the plan
//!    gives them; a failed pass reads that sample as text.
//! 5. The table fills below's nested tree, which the caller keeps from
//!    one sample to the next: updated in place while the kept cgroups are
//!    the same ones.

// Before `parse`: its key lists are contract.rs's macros.
#[macro_use]
mod bpf;
mod cgroupfs_ext;
mod collector;
mod fd;
mod files;
mod ids;
mod mount;
mod parse;
mod plan;
mod read;
mod reason;
mod snapshot;
mod stream;
mod table;
mod top;

#[cfg(test)]
mod files_test;
#[cfg(test)]
mod names_test;

use cgroupfs::CpuPressure;
use cgroupfs::IoPressure;
use cgroupfs::MemoryPressure;
use cgroupfs::Pressure;
use cgroupfs::PressureMetrics;

// Where the shared BPF files find them (below main: cgroupfs's own).
use crate::cgroupfs_ext::MemoryEvents;
use crate::cgroupfs_ext::MemoryEventsLocal;
use crate::cgroupfs_ext::MemoryNumaStat;
use crate::cgroupfs_ext::MemoryStat;

pub use crate::bpf::verifier;
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
pub use crate::plan::Refusal;
pub use crate::plan::Support;
pub use crate::read::Walker;
pub use crate::reason::Freshness;
pub use crate::reason::NotServed;
pub use crate::reason::PassWalk;
pub use crate::reason::Served;
pub use crate::snapshot::Elapsed;
pub use crate::snapshot::FileError;
pub use crate::snapshot::FlatSample;
pub use crate::snapshot::Node;
pub use crate::snapshot::Report;
pub use crate::snapshot::TreeFill;
pub use crate::table::TreeBuild;
pub use crate::top::TopBy;
pub use crate::top::TopN;

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
