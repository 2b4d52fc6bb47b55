//! Small statistics for measurements reported beside their baselines.

use serde::Serialize;

/// Nearest-rank percentiles of times.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest sample.
    pub max_ns: u64,
}

/// Nearest-rank percentiles of `v` (nanoseconds).
pub fn percentiles(mut v: Vec<u64>) -> Percentiles {
    v.sort_unstable();
    let at = |p: usize| -> u64 {
        if v.is_empty() {
            return 0;
        }
        let rank = (p * v.len()).div_ceil(100).max(1);
        v[rank.min(v.len()) - 1]
    };
    Percentiles {
        n: v.len(),
        p50_ns: at(50),
        p99_ns: at(99),
        max_ns: v.last().copied().unwrap_or(0),
    }
}

/// `value / baseline`, 0 when there is no baseline.
pub fn ratio(value: f64, baseline: f64) -> f64 {
    if baseline > 0.0 {
        value / baseline
    } else {
        0.0
    }
}

/// The median (upper for even counts).
pub fn median_u64(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The median (upper for even counts).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let p = percentiles((1..=100).collect());
        assert_eq!((p.n, p.p50_ns, p.p99_ns, p.max_ns), (100, 50, 99, 100));
        let p = percentiles(vec![5]);
        assert_eq!((p.p50_ns, p.p99_ns, p.max_ns), (5, 5, 5));
        assert_eq!(percentiles(Vec::new()).n, 0);
    }

    #[test]
    fn medians() {
        assert_eq!(median_u64(&[3, 1, 2]), 2);
        assert_eq!(median(vec![1.0, 4.0]), 4.0);
        assert_eq!(median_u64(&[]), 0);
        assert_eq!(ratio(1.0, 0.0), 0.0);
    }
}
