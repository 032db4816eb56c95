// Copyright (c) Facebook, Inc. and its affiliates.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! Pressure averages as a read of the file would print them at the pass.
//!
//! psi_show() first folds the per-CPU buckets into the group's totals
//! (the BPF program adds that sum to the record's totals) and then, once
//! the group's next update is due, runs update_averages(). The kernel's
//! averaging work stops while a group is idle, so an idle group's stored
//! averages are those of the moment it went idle; only a read decays
//! them. Here is the same update on the record, integer for integer
//! (kernel/sched/psi.c, kernel/sched/loadavg.c), stateless: the kernel's
//! state is left as it was, as if the file had been read at `now`.

use super::contract::*;
use super::load::PsiClock;

/// Why pressure is left to the files after a pass with `features`
/// (FEAT_*) and `no_clock` (`Pass::psi_no_clock`), for the log; None when
/// BPF serves it. Without the clock an idle group's averages stay where
/// they were when it went idle: no stale values, text instead.
pub(crate) fn left_to_files(features: u32, no_clock: usize) -> Option<String> {
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

/// Why a pass has no clock (PSI_* of cgroup_stats.h).
fn no_clock_reason(code: usize) -> &'static str {
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

/// Brings `avg` (the record's averages, a row per pressure row) to what
/// psi_show() would leave at `clock.now`: unchanged before the group's
/// next update is due, else update_averages() over the record's totals.
pub(crate) fn update_averages(r: &Record, clock: PsiClock, avg: &mut [[u64; 3]]) {
    let (now, next, last, p) = (
        clock.now,
        r.psi_avg_next_update,
        r.psi_avg_last_update,
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
        let sample = r.psi_total_ns[i].wrapping_sub(r.psi_avg_total_ns[i]) as u32 as u64;
        // calc_avgs() takes missed periods as an int.
        calc_avgs(a, missed as u32, sample.min(period), period);
    }
}

#[cfg(test)]
mod tests;
