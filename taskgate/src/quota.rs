//! The periodic hard quota capability (contract §9): at most `limit` handler starts per
//! fixed, epoch-aligned window, summed over every process sharing the storage.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{Error, Result};

/// A queue's quota settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaConfig {
    /// Starts allowed per window; must be positive.
    pub limit: u32,
    /// Window length: whole seconds, at least one.
    pub period: Duration,
    /// Budget key; empty means the queue's name. Queues with one key share one budget.
    pub key: String,
}

impl QuotaConfig {
    /// Checks the settings and returns `(key, period in seconds)` for `queue`.
    pub fn resolve(&self, queue: &str) -> Result<(String, i64)> {
        if self.limit == 0 {
            return Err(Error::invalid("quota_limit", "must be positive"));
        }
        if self.period < Duration::from_secs(1) || self.period.subsec_nanos() != 0 {
            return Err(Error::invalid(
                "quota_period",
                format!("{:?} must be whole seconds, at least 1s", self.period),
            ));
        }
        let period = i64::try_from(self.period.as_secs())
            .map_err(|_| Error::invalid("quota_period", "too long"))?;
        let key = if self.key.is_empty() { queue.to_owned() } else { self.key.clone() };
        crate::validate::validate_name("quota_key", &key, false)?;
        Ok((key, period))
    }
}

/// One reserved unit of a window's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reservation {
    /// The window's start, in unix seconds (a multiple of the period).
    pub window: i64,
}

/// The window start for `now_secs`: `floor(now / period) × period`.
pub fn window_start(now_secs: i64, period_secs: i64) -> i64 {
    now_secs.div_euclid(period_secs) * period_secs
}

/// A backend that can hand out quota gates.
pub trait QuotaProvider: Send + Sync {
    /// A gate for `queue`'s budget. Cheap; holds nothing that needs releasing. Gates with the
    /// same key share one counter in the storage.
    fn queue_quota(&self, queue: &str, config: &QuotaConfig) -> Result<Arc<dyn QuotaGate>>;
}

/// Reserves and releases units of one budget.
#[async_trait]
pub trait QuotaGate: Send + Sync + fmt::Debug {
    /// Reserves one unit of the current window: `Some` reserved, `None` exhausted (not an
    /// error), `Err` the storage failed (callers must fail closed).
    async fn reserve(&self) -> Result<Option<Reservation>>;

    /// Gives an unused unit back (best effort). A window that rotated away is a no-op.
    async fn release(&self, reservation: Reservation) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_the_epoch() {
        assert_eq!(window_start(1_767_225_609, 10), 1_767_225_600);
        assert_eq!(window_start(-1, 10), -10);
    }

    #[test]
    fn config_rules() {
        let cfg = |limit, secs: u64, key: &str| QuotaConfig {
            limit,
            period: Duration::from_secs(secs),
            key: key.into(),
        };
        assert_eq!(cfg(3, 10, "").resolve("q").ok(), Some(("q".to_owned(), 10)));
        assert_eq!(cfg(3, 10, "k").resolve("q").ok(), Some(("k".to_owned(), 10)));
        assert!(cfg(0, 10, "").resolve("q").is_err());
        assert!(cfg(3, 0, "").resolve("q").is_err());
        let half =
            QuotaConfig { limit: 1, period: Duration::from_millis(1500), key: String::new() };
        assert!(half.resolve("q").is_err());
    }
}
