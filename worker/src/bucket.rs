//! The local token bucket of a rate-limited queue: handler starts per second, with a burst.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::num::whole;

/// The local token bucket of a rate-limited queue (real time: the spec's one exemption from
/// clock injection). Starts full.
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub(crate) fn new(rate: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket { rate, burst, state: Mutex::new((burst, Instant::now())) }
    }

    fn refill(&self, state: &mut (f64, Instant)) {
        let now = Instant::now();
        let earned = now.duration_since(state.1).as_secs_f64() * self.rate;
        state.0 = (state.0 + earned).min(self.burst);
        state.1 = now;
    }

    /// Takes between 1 and `max` tokens, waiting for the first.
    pub(crate) async fn take(&self, max: usize) -> usize {
        loop {
            let wait = {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                self.refill(&mut state);
                if state.0 >= 1.0 {
                    let n = whole(state.0).clamp(1, max.max(1));
                    state.0 -= n as f64;
                    return n;
                }
                Duration::from_secs_f64((1.0 - state.0) / self.rate)
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Gives unused tokens back.
    pub(crate) fn refund(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut state);
        state.0 = (state.0 + n as f64).min(self.burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bucket_starts_full_and_takes_refunds_back() {
        let bucket = TokenBucket::new(0.001, 3);
        assert_eq!(bucket.take(5).await, 3, "a full bucket gives at most its burst");
        bucket.refund(2);
        assert_eq!(bucket.take(1).await, 1);
        assert_eq!(bucket.take(5).await, 1, "one refunded token left");
        bucket.refund(10);
        assert_eq!(bucket.take(10).await, 3, "refunds never exceed the burst");
    }
}
