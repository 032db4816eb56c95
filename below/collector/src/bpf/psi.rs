//! Pressure from BPF, the fork's own (cgroup_psi.h, cgroup_psi.bpf.c):
//! the program writes each cgroup's pressure into its row of map
//! `pressure`, and here are the files as a read would print them at the
//! pass.
//!
//! psi_show() first folds the per-CPU buckets into the group's totals
//! (the BPF program adds that sum to the row's totals) and then, once
//! the group's next update is due, runs update_averages(). The kernel's
//! averaging work stops while a group is idle, so an idle group's stored
//! averages are those of the moment it went idle; only a read decays
//! them. Here is the same update on the row, integer for integer
//! (kernel/sched/psi.c, kernel/sched/loadavg.c), stateless: the kernel's
//! state is left as it was, as if the file had been read at `now`.

use cgroupfs::CpuPressure;
use cgroupfs::IoPressure;
use cgroupfs::MemoryPressure;
use cgroupfs::Pressure;
use cgroupfs::PressureMetrics;

use super::contract::is_c_enum;
use super::contract::Record;
use super::decode::has;

// FEAT_PSI*, PSI_NO_*, HAS_PSI*, struct pressure: bindgen of cgroup_psi.h.
pub(crate) use super::program::fork_h::pressure as PressureRow;
pub(crate) use super::program::fork_h::FEAT_PSI;
pub(crate) use super::program::fork_h::FEAT_PSI_CLOCK;
pub(crate) use super::program::fork_h::HAS_PSI;
pub(crate) use super::program::fork_h::HAS_PSI_QUEUED;
pub(crate) use super::program::fork_h::PSI_NO_SYMBOLS;
pub(crate) use super::program::fork_h::PSI_ODD_HZ;
use super::program::fork_h::*;

/// Pressure rows: `pressure.*[]` (`enum psi_row`), as named fields.
macro_rules! psi_rows {
    ($($row:ident => $c:ident,)*) => {
        const _: () = assert!(
            is_c_enum(&[$((stringify!($row), stringify!($c), $c)),*], "PSI_ROW_", NR_PSI_ROWS),
            "not the C enum psi_row"
        );

        pub(crate) struct PsiRows<T> {
            $(pub(crate) $row: T,)*
        }

        impl<T> PsiRows<T> {
            /// Each row from its index in a pressure row's arrays.
            pub(crate) fn from_fn(mut f: impl FnMut(usize) -> T) -> Self {
                PsiRows { $($row: f($c as usize),)* }
            }
        }
    };
}
psi_rows! {
    io_some => PSI_ROW_io_some,
    io_full => PSI_ROW_io_full,
    memory_some => PSI_ROW_memory_some,
    memory_full => PSI_ROW_memory_full,
    cpu_some => PSI_ROW_cpu_some,
    cpu_full => PSI_ROW_cpu_full,
}

/// The clocks of a pass (FEAT_PSI_CLOCK), for pressure averages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PsiClock {
    /// sched_clock() at the pass, the clock of psi's update times.
    pub(crate) now: u64,
    /// The kernel's psi_period, ns (2 s and a jiffy).
    pub(crate) period: u64,
}

/// What a pass found of pressure (its `.data.psi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PsiPass {
    /// FEAT_PSI* bits.
    pub(crate) features: u32,
    /// Why the pass has no clock (PSI_NO_*; 0: it has one).
    pub(crate) no_clock: u32,
    /// The clocks averages are brought to (FEAT_PSI_CLOCK).
    pub(crate) clock: Option<PsiClock>,
}

impl PsiPass {
    /// As the pass had it, without its clock when `BSTATS_PSI_CLOCK=off`.
    pub(crate) fn new(features: u32, no_clock: u32, now: u64, period: u64) -> Self {
        let pass = PsiPass {
            features,
            no_clock,
            clock: (features & FEAT_PSI_CLOCK != 0).then_some(PsiClock { now, period }),
        };
        if clock_off() {
            pass.without_clock()
        } else {
            pass
        }
    }

    /// As on a kernel whose kallsyms lacks the scheduler's symbols.
    pub(crate) fn without_clock(self) -> Self {
        PsiPass {
            features: self.features & !FEAT_PSI_CLOCK,
            no_clock: PSI_NO_SYMBOLS,
            clock: None,
        }
    }

    /// The pressure files as a read at the pass would print them (the
    /// averages as stored when the pass has no clock: callers read the
    /// files then, see [`PsiPass::exact`]).
    pub(crate) fn pressure(&self, p: &PressureRow) -> Pressure {
        let mut avg = p.avg;
        if let Some(clock) = self.clock {
            update_averages(p, clock, &mut avg);
        }
        let rows = PsiRows::from_fn(|i| PressureMetrics {
            avg10: Some(load_avg(avg[i][0])),
            avg60: Some(load_avg(avg[i][1])),
            avg300: Some(load_avg(avg[i][2])),
            total: Some(p.total_ns[i] / 1000),
        });
        Pressure {
            cpu: CpuPressure {
                some: rows.cpu_some,
                full: Some(rows.cpu_full),
            },
            io: IoPressure {
                some: rows.io_some,
                full: rows.io_full,
            },
            memory: MemoryPressure {
                some: rows.memory_some,
                full: rows.memory_full,
            },
        }
    }

    /// Whether `r`'s pressure (row `p`) is what its files print: always
    /// with the pass's clock. Without it, only when no aggregation is
    /// queued (every per-CPU bucket idle and in the totals) and every
    /// average is 0 with a stall since the last update too short to move
    /// one: update_averages() takes `time * 100 / period` whole percents,
    /// and its period is at least next_update - last_update. The others
    /// are read as text.
    pub(crate) fn exact(&self, r: &Record, p: &PressureRow) -> bool {
        if self.clock.is_some() {
            return true;
        }
        let (last, next) = (p.avg_last_update, p.avg_next_update);
        if has(r, HAS_PSI_QUEUED) || next < last {
            return false;
        }
        p.avg.iter().enumerate().all(|(i, avg)| {
            let stall = p.total_ns[i].wrapping_sub(p.avg_total_ns[i]) as u32 as u64;
            *avg == [0; 3] && (stall == 0 || stall * 100 < next - last)
        })
    }

    /// Why pressure is left to the files, for the log; None when BPF
    /// serves it. Without the clock an idle group's averages stay where
    /// they were when it went idle: no stale values, text instead.
    pub(crate) fn left_to_files(&self) -> Option<String> {
        left_to_files(self.features, self.no_clock)
    }
}

/// `BSTATS_PSI_CLOCK=off` takes the pass's clock away, as on a kernel
/// whose kallsyms lacks the scheduler's symbols: the live parity check
/// runs that path on kernels that have them.
fn clock_off() -> bool {
    std::env::var_os("BSTATS_PSI_CLOCK").is_some_and(|v| v == "off")
}

/// A psi average (11 fraction bits) as the text prints it, "%lu.%02lu",
/// then parsed: an exact decimal divided once rounds like the parser.
pub(crate) fn load_avg(v: u64) -> f64 {
    let int = v >> 11;
    let frac = ((v & 2047) * 100) >> 11;
    (int * 100 + frac) as f64 / 100.0
}

/// Why pressure is left to the files after a pass with `features`
/// (FEAT_PSI*) and `no_clock` (PSI_NO_*); see [`PsiPass::left_to_files`].
pub(crate) fn left_to_files(features: u32, no_clock: u32) -> Option<String> {
    if features & FEAT_PSI == 0 {
        Some("kernel has no cgroup PSI (CONFIG_PSI) or an unknown psi_group layout".to_owned())
    } else if features & FEAT_PSI_CLOCK == 0 {
        Some(format!(
            "cannot bring the averages to the pass's moment: {}",
            no_clock_reason(no_clock)
        ))
    } else {
        None
    }
}

/// Why a pass has no clock (PSI_NO_* of cgroup_psi.h).
fn no_clock_reason(code: u32) -> &'static str {
    match code {
        PSI_NO_SYMBOLS => {
            "kernel symbols psi_period, runqueues, __per_cpu_offset (x86: \
             __sched_clock_offset, __sched_clock_stable, sched_clock_data) not all in kallsyms \
             (CONFIG_KALLSYMS_ALL)"
        }
        PSI_ODD_HZ => "HZ does not divide 10^6 (psi_period is not 2 s and a whole jiffy)",
        PSI_NO_RQ_CLOCK => "this CPU's rq->clock read as 0",
        PSI_CPU_LAYOUT => "unknown psi_group_cpu layout",
        _ => "unknown reason",
    }
}

/// Fraction bits of an average (FSHIFT) and 1.0 in them (FIXED_1).
const FSHIFT: u32 = 11;
const FIXED_1: u64 = 1 << FSHIFT;
/// EXP_10s, EXP_60s, EXP_300s: 1/exp(2 s/window) in fixed point.
const EXP: [u64; 3] = [1677, 1981, 2034];

/// calc_load(): a1 = a0 * e + a * (1 - e), rounded up when rising.
fn calc_load(load: u64, exp: u64, active: u64) -> u64 {
    let mut new = load
        .wrapping_mul(exp)
        .wrapping_add(active.wrapping_mul(FIXED_1 - exp));
    if active >= load {
        new = new.wrapping_add(FIXED_1 - 1);
    }
    new / FIXED_1
}

/// fixed_power_int(): x^n in `FSHIFT` fraction bits, rounding each
/// product as the kernel does.
fn fixed_power_int(mut x: u64, mut n: u32) -> u64 {
    let half = 1 << (FSHIFT - 1);
    let mut result = FIXED_1;
    while n != 0 {
        if n & 1 != 0 {
            result = (result.wrapping_mul(x) + half) >> FSHIFT;
        }
        n >>= 1;
        if n != 0 {
            x = (x.wrapping_mul(x) + half) >> FSHIFT;
        }
    }
    result
}

/// calc_avgs(): `missed` periods of no stall, then one of `time` in
/// `period` ns.
fn calc_avgs(avg: &mut [u64; 3], missed: u32, time: u64, period: u64) {
    if missed != 0 {
        for (a, &e) in avg.iter_mut().zip(&EXP) {
            *a = calc_load(*a, fixed_power_int(e, missed), 0);
        }
    }
    // div_u64() takes a u32 divisor; a period is under 4.3 s (2 psi
    // periods at most), so nothing is cut.
    let pct = (time.wrapping_mul(100))
        .checked_div(period as u32 as u64)
        .unwrap_or(0)
        .wrapping_mul(FIXED_1);
    for (a, &e) in avg.iter_mut().zip(&EXP) {
        *a = calc_load(*a, e, pct);
    }
}

/// Brings `avg` (the row's averages, one per pressure row) to what
/// psi_show() would leave at `clock.now`: unchanged before the group's
/// next update is due, else update_averages() over the row's totals.
pub(crate) fn update_averages(r: &PressureRow, clock: PsiClock, avg: &mut [[u64; 3]]) {
    let (now, next, last, p) = (
        clock.now,
        r.avg_next_update,
        r.avg_last_update,
        clock.period,
    );
    if now < next || p == 0 {
        return;
    }
    let missed = match now - next {
        late if late >= p => late / p,
        _ => 0,
    };
    let period = now.wrapping_sub(last.wrapping_add(missed.wrapping_mul(p)));
    for (i, a) in avg.iter_mut().enumerate() {
        // A u32 in the kernel; stall time past the period counts in the
        // next one.
        let sample = r.total_ns[i].wrapping_sub(r.avg_total_ns[i]) as u32 as u64;
        // calc_avgs() takes missed periods as an int.
        calc_avgs(a, missed as u32, sample.min(period), period);
    }
}

#[cfg(test)]
mod tests;
