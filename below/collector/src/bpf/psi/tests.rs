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

//! update_averages() on synthetic records. The expected values were
//! worked out apart from this code, from the kernel's formulas
//! (psi.c update_averages()/calc_avgs(), loadavg.c calc_load()/
//! calc_load_n()/fixed_power_int()), in a few lines of Python that model
//! the C integers: idle for many periods, due exactly now, active with
//! the work late, a sample over the period, a sample past u32, not due.

use super::super::contract::PSI_ROWS;
use super::super::decode::load_avg;
use super::super::decode::tests::decoder;
use super::super::decode::tests::full;
use super::super::decode::tests::slot;
use super::*;

/// HZ=250: jiffies_to_nsecs(2 * HZ + 1).
const PERIOD: u64 = 2_004_000_000;
const LAST: u64 = 100_000_000_000;
const NEXT: u64 = LAST + PERIOD;
/// 54.18, 14.60, 3.50 in 11 fraction bits.
const STORED: [u64; 3] = [110_961, 29_921, 7_168];
const AVG_TOTAL: u64 = 5_000_000_000;

/// A record whose every row holds STORED, `total` ns of stall and
/// AVG_TOTAL already averaged, last updated at LAST.
fn record(total: u64) -> Record {
    let mut r = full();
    r.psi_avg = [STORED; PSI_ROWS.len()];
    r.psi_total_ns = [total; PSI_ROWS.len()];
    r.psi_avg_total_ns = [AVG_TOTAL; PSI_ROWS.len()];
    r.psi_avg_last_update = LAST;
    r.psi_avg_next_update = NEXT;
    r
}

/// memory some's averages as read at `now`.
fn at(now: u64, total: u64) -> [u64; 3] {
    let r = record(total);
    let mut avg = r.psi_avg;
    update_averages(
        &r,
        PsiClock {
            now,
            period: PERIOD,
        },
        &mut avg,
    );
    for row in avg {
        assert_eq!(row, avg[0], "every row takes the same update");
    }
    avg[slot(PSI_ROWS, "memory_some")]
}

#[test]
fn kernel_arithmetic() {
    assert_eq!(fixed_power_int(1677, 2), 1373);
    assert_eq!(fixed_power_int(1677, 18), 56);
    assert_eq!(fixed_power_int(1677, 0), FIXED_1);
    // 50.00 decays to 40.94 in one 10 s step.
    assert_eq!(calc_load(50 << FSHIFT, 1677, 0), 83_850);
}

#[test]
fn idle_group_decays_over_missed_periods() {
    // The case: pressure stopped, no reads, 40 s later. 18 whole
    // periods missed past the due time, then the last, 3.928 s long,
    // with no stall.
    assert_eq!(at(LAST + 40_000_000_000, AVG_TOTAL), [2_484, 15_911, 6_287]);
}

#[test]
fn not_due_keeps_the_stored_averages() {
    assert_eq!(at(NEXT - 1, 9_000_000_000), STORED);
    assert_eq!(at(LAST, 9_000_000_000), STORED);
}

#[test]
fn due_now_updates_with_no_missed_period() {
    assert_eq!(at(NEXT, AVG_TOTAL), [90_860, 28_942, 7_119]);
}

#[test]
fn active_group_with_its_work_late_takes_the_new_stall() {
    // 1.5 s of stall in the 2.009 s since the last update: 74 %.
    assert_eq!(
        at(NEXT + 5_000_000, 6_500_000_000),
        [118_315, 33_901, 8_155]
    );
    // 3 s in a 2.014 s period: capped at the period, 100 %.
    assert_eq!(
        at(NEXT + 10_000_000, 8_000_000_000),
        [127_961, 35_643, 8_519]
    );
}

#[test]
fn sample_is_a_u32_like_the_kernels() {
    // 2^32 + 0.5 s since the last update: the kernel's u32 keeps 0.5 s.
    let total = AVG_TOTAL + (1 << 32) + 500_000_000;
    assert_eq!(at(NEXT + 3 * PERIOD + 1, total), [58_770, 27_795, 7_310]);
}

#[test]
fn decoded_as_the_file_prints_them() {
    let mut d = decoder();
    let r = record(AVG_TOTAL);
    d.psi_clock = Some(PsiClock {
        now: LAST + 40_000_000_000,
        period: PERIOD,
    });
    let m = d.pressure(&r).memory.some;
    assert_eq!(
        (m.avg10, m.avg60, m.avg300),
        (Some(1.21), Some(7.76), Some(3.06))
    );
    assert_eq!(m.total, Some(AVG_TOTAL / 1000));
    // Without a clock (callers read the files then): as stored.
    d.psi_clock = None;
    let m = d.pressure(&r).memory.some;
    assert_eq!(m.avg10, Some(load_avg(STORED[0])));
    assert_eq!(m.avg60, Some(14.60));
}

#[test]
fn every_no_clock_code_has_its_own_reason() {
    let codes = [PSI_NO_SYMBOLS, PSI_ODD_HZ, PSI_NO_RQ_CLOCK, PSI_CPU_LAYOUT];
    let reasons: std::collections::BTreeSet<_> =
        codes.iter().map(|&c| no_clock_reason(c)).collect();
    assert_eq!(reasons.len(), codes.len(), "{reasons:?}");
    assert!(!reasons.contains(no_clock_reason(0)));
}
