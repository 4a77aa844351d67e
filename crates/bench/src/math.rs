//! The arithmetic of the report, kept pure so each formula is tested with
//! numbers worked out by hand.
//!
//! - [`median`]: the middle value, or the mean of the two middle values.
//! - [`percentile`]: nearest rank, so a reported p99 is a latency some
//!   input really had (no interpolation between two inputs).
//! - [`ideal_speedup`]: what a perfect kernel would reach for the same tool
//!   sleeps and the same mock time. The only honest yardstick for a
//!   measured speed-up: 3.88× at N = 8 sounds good until the ideal is 5×.

/// The median of `values` (any order). `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let sorted = sorted(values);
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    Some(if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    })
}

/// The `p`-th percentile (0 < p ≤ 100) of `values` by nearest rank: the
/// smallest value with at least `p` % of the values at or below it, i.e.
/// the value at rank ⌈p/100 · n⌉ (1-based) of the sorted values. `None`
/// when empty or `p` is out of range.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let sorted = sorted(values);
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    // Rank in 1..=n; the float product is exact for the small n used here
    // up to rounding, which `ceil` after a tiny epsilon absorbs.
    let rank = ((p / 100.0) * n as f64 - 1e-9).ceil().max(1.0) as usize;
    Some(sorted[rank.min(n) - 1])
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The sleeps, in seconds, of the mock's `!slowbatchN` calls: call `i`
/// sleeps `S + 5·i` ms (see `homeagent_mock_llm::script`).
pub fn slowbatch_sleeps(n: usize, tool_sleep_ms: u64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| (tool_sleep_ms + 5 * i) as f64 / 1000.0)
        .collect()
}

/// The best speed-up of running the sleeps concurrently instead of one
/// after another, given the time the mock itself takes for each input:
/// `(M_serial + Σ tᵢ) / (M_parallel + max tᵢ)`. With one `M` for both this
/// is the issue's `(M + Σ tᵢ) / (M + max tᵢ)`; the bench measures both
/// inputs' mock time separately because the serial batch has one more call
/// to encode. `None` when the denominator is not positive.
pub fn ideal_speedup(m_serial_s: f64, m_parallel_s: f64, sleeps_s: &[f64]) -> Option<f64> {
    let sum: f64 = sleeps_s.iter().sum();
    let max = sleeps_s.iter().copied().fold(0.0_f64, f64::max);
    let denominator = m_parallel_s + max;
    (denominator > 0.0).then(|| (m_serial_s + sum) / denominator)
}

/// The kernel's cost per tool call from two batch sizes: the extra
/// overhead of the bigger batch over the smaller, per extra call. `None`
/// unless `big_n > small_n`.
pub fn per_call(small_n: usize, small_s: f64, big_n: usize, big_s: f64) -> Option<f64> {
    (big_n > small_n).then(|| (big_s - small_s) / (big_n - small_n) as f64)
}

/// How much a counter rose per round between two readings; `None` when
/// either reading is missing. A counter that went down (it lost the counts
/// of threads that ended) counts as no rise.
pub fn per_round(before: Option<u64>, after: Option<u64>, rounds: usize) -> Option<f64> {
    let (before, after) = (before?, after?);
    Some(after.saturating_sub(before) as f64 / rounds.max(1) as f64)
}

/// [`per_round`] for a nanosecond counter, in microseconds.
pub fn us_per_round(before_ns: Option<u64>, after_ns: Option<u64>, rounds: usize) -> Option<f64> {
    per_round(before_ns, after_ns, rounds).map(|ns| ns / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nanosecond_counter_is_spread_over_the_rounds_in_microseconds() {
        assert_eq!(us_per_round(Some(1_000), Some(61_000), 30), Some(2.0));
        assert_eq!(us_per_round(Some(0), Some(2_500), 2), Some(1.25));
        assert_eq!(us_per_round(None, Some(2_500), 2), None);
    }

    #[test]
    fn a_counters_rise_is_spread_over_the_rounds() {
        assert_eq!(per_round(Some(100), Some(730), 30), Some(21.0));
        assert_eq!(per_round(Some(100), Some(107), 2), Some(3.5));
        assert_eq!(per_round(Some(100), Some(90), 5), Some(0.0));
        assert_eq!(per_round(Some(0), Some(4), 0), Some(4.0));
        assert_eq!(per_round(None, Some(4), 3), None);
        assert_eq!(per_round(Some(4), None, 3), None);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        // 1..=100: p50 is rank 50 → 50, p95 rank 95 → 95, p99 rank 99 → 99.
        let values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 95.0), Some(95.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        // Ten values: p95 is rank ⌈9.5⌉ = 10, p50 rank 5.
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 95.0), Some(10.0));
        assert_eq!(percentile(&ten, 50.0), Some(5.0));
        // 288 values 1..=288: p99 is rank ⌈285.12⌉ = 286.
        let blast: Vec<f64> = (1..=288).map(f64::from).collect();
        assert_eq!(percentile(&blast, 99.0), Some(286.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&ten, 0.0), None);
        assert_eq!(percentile(&ten, 101.0), None);
    }

    #[test]
    fn slowbatch_sleeps_follow_the_mock_script() {
        // S = 150: 150, 155, 160, 165 ms.
        assert_eq!(slowbatch_sleeps(4, 150), vec![0.150, 0.155, 0.160, 0.165]);
        assert!(slowbatch_sleeps(0, 150).is_empty());
    }

    #[test]
    fn ideal_speedup_by_hand() {
        // N = 4, S = 150: Σ = 0.630 s, max = 0.165 s.
        let sleeps = slowbatch_sleeps(4, 150);
        // M = 0.1 s for both: (0.1 + 0.63) / (0.1 + 0.165) = 0.73 / 0.265.
        let ideal = ideal_speedup(0.1, 0.1, &sleeps).unwrap();
        assert!(close(ideal, 0.73 / 0.265), "{ideal}");
        assert!(close(ideal, 2.754_716_981_132_075), "{ideal}");
        // No mock time: Σ/max = 0.63 / 0.165.
        assert!(close(
            ideal_speedup(0.0, 0.0, &sleeps).unwrap(),
            3.818_181_818_181_818
        ));
        // Different mock times: (0.12 + 0.63) / (0.1 + 0.165) = 0.75 / 0.265.
        assert!(close(
            ideal_speedup(0.12, 0.1, &sleeps).unwrap(),
            2.830_188_679_245_283
        ));
        // The seed's N = 8 at S = 150 with M = 0.22 s:
        // Σ = 8·0.15 + 0.005·28 = 1.34, max = 0.185 → 1.56 / 0.405.
        let seed = ideal_speedup(0.22, 0.22, &slowbatch_sleeps(8, 150)).unwrap();
        assert!(close(seed, 3.851_851_851_851_852), "{seed}");
        assert_eq!(ideal_speedup(0.0, 0.0, &[]), None);
    }

    #[test]
    fn per_call_is_the_marginal_cost() {
        // 1 call: 0.001 s, 64 calls: 0.0073 s → 0.0063 / 63 = 0.0001 s.
        assert!(close(per_call(1, 0.001, 64, 0.0073).unwrap(), 0.0001));
        assert_eq!(per_call(8, 0.1, 8, 0.2), None);
    }
}
