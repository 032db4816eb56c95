//! The errors `parity --plant` puts in every collected sample before it is
//! checked, and which failures count as catching each: a run with a plant
//! must fail on the planted values, or the check is blind to them.

use std::collections::HashMap;

use bstats_collector::StatFile;
use cgroupfs::Pressure;
use cgroupfs::PressureMetrics;
use model::CgroupSample;

use super::check::Failure;

/// An error planted in every collected sample before it is checked: the
/// check must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Plant {
    /// memory.stat's anon and file swapped.
    Swap,
    /// The pressure averages kept from each cgroup's first sample.
    Freeze,
    /// cpu.stat kept from each cgroup's first sample (an old value left by
    /// decoding in place).
    Stale,
}

impl Plant {
    /// Whether `f` is about a planted value.
    pub(super) fn caught_by(self, f: &Failure) -> bool {
        let v = f.value_path.as_str();
        match self {
            Plant::Swap => v == "memory_stat.anon" || v == "memory_stat.file",
            Plant::Freeze => v.starts_with("pressure.") && v.contains(".avg"),
            Plant::Stale => v.starts_with("cpu_stat."),
        }
    }

    /// The file the error is in: a plant on a file the backend does not
    /// serve is not checked, so cannot be caught.
    pub(super) fn file(self) -> StatFile {
        match self {
            Plant::Swap => StatFile::MemoryStat,
            Plant::Freeze => StatFile::CpuPressure,
            Plant::Stale => StatFile::CpuStat,
        }
    }
}

/// What a plant keeps from each cgroup's first sample.
#[derive(Default)]
pub(super) struct Planted {
    first: HashMap<String, CgroupSample>,
}

impl Planted {
    pub(super) fn apply(&mut self, plant: Plant, s: &mut CgroupSample, path: String) {
        let first = self
            .first
            .entry(path.clone())
            .or_insert_with(|| CgroupSample {
                pressure: s.pressure.clone(),
                cpu_stat: s.cpu_stat.clone(),
                ..CgroupSample::default()
            });
        match plant {
            Plant::Swap => {
                if let Some(m) = s.memory_stat.as_mut() {
                    std::mem::swap(&mut m.anon, &mut m.file);
                }
            }
            Plant::Freeze => {
                if let (Some(p), Some(f)) = (s.pressure.as_mut(), first.pressure.as_ref()) {
                    freeze_averages(p, f);
                }
            }
            Plant::Stale => {
                if s.cpu_stat.is_some() && first.cpu_stat.is_some() {
                    s.cpu_stat = first.cpu_stat.clone();
                }
            }
        }
        for (name, c) in s.children.iter_mut().flatten() {
            let p = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}/{name}")
            };
            self.apply(plant, c, p);
        }
    }
}

fn freeze_averages(p: &mut Pressure, first: &Pressure) {
    let keep = |to: &mut PressureMetrics, from: &PressureMetrics| {
        to.avg10 = from.avg10;
        to.avg60 = from.avg60;
        to.avg300 = from.avg300;
    };
    keep(&mut p.cpu.some, &first.cpu.some);
    if let (Some(to), Some(from)) = (p.cpu.full.as_mut(), first.cpu.full.as_ref()) {
        keep(to, from);
    }
    keep(&mut p.io.some, &first.io.some);
    keep(&mut p.io.full, &first.io.full);
    keep(&mut p.memory.some, &first.memory.some);
    keep(&mut p.memory.full, &first.memory.full);
}
