//! update_averages() on synthetic rows. The expected values were
//! worked out apart from this code, from the kernel's formulas
//! (psi.c update_averages()/calc_avgs(), loadavg.c calc_load()/
//! calc_load_n()/fixed_power_int()), in a few lines of Python that model
//! the C integers: idle for many periods, due exactly now, active with
//! the work late, a sample over the period, a sample past u32, not due.

use super::super::decode::tests::full;
use super::*;

/// HZ=250: jiffies_to_nsecs(2 * HZ + 1).
const PERIOD: u64 = 2_004_000_000;
const LAST: u64 = 100_000_000_000;
const NEXT: u64 = LAST + PERIOD;
/// 54.18, 14.60, 3.50 in 11 fraction bits.
const STORED: [u64; 3] = [110_961, 29_921, 7_168];
const AVG_TOTAL: u64 = 5_000_000_000;

/// A cgroup whose every row holds STORED, `total` ns of stall and
/// AVG_TOTAL already averaged, last updated at LAST.
fn row(total: u64) -> PressureRow {
    PressureRow {
        avg: [STORED; NR_PSI_ROWS as usize],
        total_ns: [total; NR_PSI_ROWS as usize],
        avg_total_ns: [AVG_TOTAL; NR_PSI_ROWS as usize],
        avg_last_update: LAST,
        avg_next_update: NEXT,
    }
}

/// A pass with the clock at `now`.
fn clocked(now: u64) -> PsiPass {
    PsiPass {
        features: FEAT_PSI | FEAT_PSI_CLOCK,
        no_clock: 0,
        clock: Some(PsiClock {
            now,
            period: PERIOD,
        }),
    }
}

/// memory some's averages as read at `now`.
fn at(now: u64, total: u64) -> [u64; 3] {
    let r = row(total);
    let mut avg = r.avg;
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
    avg[PSI_ROW_memory_some as usize]
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
    // Pressure stopped, no reads, 40 s later. 18 whole
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
    let r = row(AVG_TOTAL);
    let pass = clocked(LAST + 40_000_000_000);
    let m = pass.pressure(&r).memory.some;
    assert_eq!(
        (m.avg10, m.avg60, m.avg300),
        (Some(1.21), Some(7.76), Some(3.06))
    );
    assert_eq!(m.total, Some(AVG_TOTAL / 1000));
    // Without a clock (callers read the files then): as stored.
    let m = pass.without_clock().pressure(&r).memory.some;
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

#[test]
fn rows_decode_in_their_order() {
    // Rows in PSI_ROWS order: io some/full, memory some/full, cpu some/full.
    let mut r = row(0);
    for (i, avg) in r.avg.iter_mut().enumerate() {
        *avg = [2048 * i as u64, 1024, 0];
        r.total_ns[i] = 1000 * i as u64;
    }
    let p = clocked(0).pressure(&r);
    let row = |m: &PressureMetrics| {
        (
            m.avg10.expect("avg10"),
            m.avg60.expect("avg60"),
            m.total.expect("total"),
        )
    };
    assert_eq!(row(&p.io.some), (0.0, 0.5, 0));
    assert_eq!(row(&p.io.full), (1.0, 0.5, 1));
    assert_eq!(row(&p.memory.some), (2.0, 0.5, 2));
    assert_eq!(row(&p.memory.full), (3.0, 0.5, 3));
    assert_eq!(row(&p.cpu.some), (4.0, 0.5, 4));
    assert_eq!(row(p.cpu.full.as_ref().expect("cpu full")), (5.0, 0.5, 5));
}

#[test]
fn averages_print_like_the_file() {
    assert_eq!(load_avg(2048 + 1024), 1.5);
    assert_eq!(
        load_avg(2048 * 3 + 2047),
        "3.99".parse::<f64>().expect("a float")
    );
}

/// Without the pass's clock, pressure comes from a row only where its
/// files print nothing a clock would change.
#[test]
fn without_the_clock_only_where_no_clock_matters() {
    let mut r = full();
    r.flags |= HAS_PSI;
    let mut p = row(AVG_TOTAL);
    p.avg = Default::default();
    p.avg_last_update = 10_000_000_000;
    p.avg_next_update = 12_000_000_000;
    let pass = clocked(11_000_000_000);
    assert!(pass.exact(&r, &p), "with the clock");
    let pass = pass.without_clock();
    assert!(
        pass.exact(&r, &p),
        "idle, averages 0, nothing since the last update"
    );
    // 19 ms of stall in a period of at least 2 s: under 1%, no average moves.
    p.total_ns[1] += 19_000_000;
    assert!(pass.exact(&r, &p));
    p.total_ns[1] += 1_000_000;
    assert!(
        !pass.exact(&r, &p),
        "1% of the shortest period: an average may move"
    );
    p.total_ns[1] = p.avg_total_ns[1];
    p.avg[2][2] = 1;
    assert!(!pass.exact(&r, &p), "an average to decay");
    p.avg[2][2] = 0;
    r.flags |= HAS_PSI_QUEUED;
    assert!(!pass.exact(&r, &p), "per-CPU buckets not in the totals");
    r.flags &= !HAS_PSI_QUEUED;
    p.avg_next_update = p.avg_last_update - 1;
    assert!(!pass.exact(&r, &p), "update times out of order");
}
