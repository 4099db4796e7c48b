//! The business-retry back-off curve (contract §4.4): `min(2^n s, 10 min) ± 20 %` jitter.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The longest back-off before jitter.
pub const BACKOFF_CAP: Duration = Duration::from_secs(600);

/// The back-off before the next attempt after a business failure, with jitter `u` in `[0, 1)`.
///
/// `n` is the task's `attempts` as seen at claim time (before this failure), so the first
/// failure waits about one second. `n ≥ 10` and negative `n` use the 10-minute cap.
pub fn backoff_with(n: i64, u: f64) -> Duration {
    let base = match u32::try_from(n) {
        Ok(n) if n < 10 => Duration::from_secs(1u64 << n),
        _ => BACKOFF_CAP,
    };
    let u = u.clamp(0.0, 1.0);
    base.mul_f64(1.0 + 0.2 * (2.0 * u - 1.0))
}

/// A back-off source with an injectable, thread-safe random generator.
#[derive(Debug)]
pub struct Backoff {
    rng: Mutex<SmallRng>,
}

impl Backoff {
    /// A deterministic source: the same seed gives the same sequence.
    pub fn seeded(seed: u64) -> Self {
        Backoff { rng: Mutex::new(SmallRng::seed_from_u64(seed)) }
    }

    /// A source seeded from the operating system.
    pub fn from_entropy() -> Self {
        Backoff { rng: Mutex::new(SmallRng::from_os_rng()) }
    }

    /// The jittered back-off for claim-time attempts `n`.
    pub fn next(&self, n: i64) -> Duration {
        let u: f64 = self.rng.lock().unwrap_or_else(|p| p.into_inner()).random();
        backoff_with(n, u)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::from_entropy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(0, 1)]
    #[case(1, 2)]
    #[case(2, 4)]
    #[case(5, 32)]
    #[case(9, 512)]
    #[case(10, 600)]
    #[case(20, 600)]
    #[case(100, 600)]
    #[case(-1, 600)]
    fn reference_points_within_twenty_percent(#[case] n: i64, #[case] secs: u64) {
        let b = Backoff::seeded(7);
        let want = Duration::from_secs(secs).as_secs_f64();
        for _ in 0..100 {
            let got = b.next(n).as_secs_f64();
            assert!(got >= want * 0.8 - 1e-9 && got <= want * 1.2 + 1e-9, "n={n}: {got}s");
        }
        assert_eq!(backoff_with(n, 0.5), Duration::from_secs(secs));
    }

    #[test]
    fn jitter_varies() {
        let b = Backoff::seeded(1);
        let distinct: std::collections::HashSet<_> = (0..50).map(|_| b.next(3)).collect();
        assert!(distinct.len() >= 10, "only {} distinct values", distinct.len());
    }

    #[test]
    fn same_seed_same_sequence() {
        let (a, b) = (Backoff::seeded(42), Backoff::seeded(42));
        let xs: Vec<_> = (0..20).map(|i| a.next(i % 12)).collect();
        let ys: Vec<_> = (0..20).map(|i| b.next(i % 12)).collect();
        assert_eq!(xs, ys);
    }
}
