//! Percentiles and formatting of the numbers the benches report.

use std::time::Duration;

/// Latency percentiles of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Samples taken.
    pub n: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile (nearest rank).
    pub p99: Duration,
    /// Largest sample.
    pub max: Duration,
}

/// Nearest-rank percentiles of `samples` (all zero when empty).
pub fn percentiles(samples: &[Duration]) -> Percentiles {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let at = |q: f64| -> Duration {
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = whole((q * sorted.len() as f64).ceil());
        let index = usize::try_from(rank).unwrap_or(usize::MAX).clamp(1, sorted.len()) - 1;
        sorted[index]
    };
    Percentiles { n: sorted.len(), p50: at(0.50), p99: at(0.99), max: at(1.0) }
}

/// `v` as a whole number, clamped to `0..=u64::MAX` (NaN is 0).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float-to-int `as` saturates and the value is clamped first: the intended rounding"
)]
pub fn whole(v: f64) -> u64 {
    if v.is_nan() {
        0
    } else {
        v.clamp(0.0, u64::MAX as f64) as u64
    }
}

/// `v` as a whole number of any sign, clamped to the `i32` range (NaN is 0).
#[expect(
    clippy::cast_possible_truncation,
    reason = "float-to-int `as` saturates and the value is clamped first: the intended rounding"
)]
pub fn whole_i32(v: f64) -> i32 {
    if v.is_nan() {
        0
    } else {
        v.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1_000.0)
}

/// A rate in jobs/s, grouped by thousands (`12,345`).
pub fn rate(jobs_per_sec: f64) -> String {
    let digits = whole(jobs_per_sec.round()).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let p = percentiles(&samples);
        assert_eq!(p.p50, Duration::from_millis(50));
        assert_eq!(p.p99, Duration::from_millis(99));
        assert_eq!(p.max, Duration::from_millis(100));
        assert_eq!(percentiles(&[]).n, 0);
    }

    #[test]
    fn rates_are_grouped() {
        assert_eq!(rate(1_234_567.4), "1,234,567");
        assert_eq!(rate(999.6), "1,000");
        assert_eq!(rate(12.0), "12");
    }
}
