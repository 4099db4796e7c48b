//! Millisecond timestamps: the one time representation every backend stores and compares.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// An instant as whole unix milliseconds (UTC), floored.
///
/// Every time the broker writes is truncated to milliseconds (contract §1.3), so a snapshot
/// returned by a write equals what a later read returns on every backend. `Timestamp::ZERO`
/// (the unix epoch) means "unset" where a field is optional in storage.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The unix epoch; stored as `0`, read back as "unset".
    pub const ZERO: Timestamp = Timestamp(0);

    /// A timestamp from unix milliseconds.
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    /// Unix milliseconds.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole unix seconds, floored (quota windows are in seconds).
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// True for [`Timestamp::ZERO`].
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Floors a system time to whole milliseconds; times before the epoch floor towards the past.
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => {
                let before = e.duration();
                let ms = i64::try_from(before.as_millis()).unwrap_or(i64::MAX);
                let partial = before.subsec_nanos() % 1_000_000 != 0;
                Timestamp(-ms - i64::from(partial))
            }
        }
    }

    /// The same instant as a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let abs = Duration::from_millis(self.0.unsigned_abs());
        if self.0 >= 0 {
            UNIX_EPOCH + abs
        } else {
            UNIX_EPOCH - abs
        }
    }

    /// `self + d`, saturating at the largest representable instant.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_millis(d)))
    }

    /// `self - d`, saturating at the smallest representable instant.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_millis(d)))
    }

    /// The time from `earlier` to `self`; zero when `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

/// A duration in whole milliseconds (floored), saturating at `i64::MAX`.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        Timestamp::from_system_time(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_sub_millisecond_parts() {
        let t = UNIX_EPOCH + Duration::from_micros(1_234_567);
        assert_eq!(Timestamp::from_system_time(t).as_millis(), 1234);
        let before = UNIX_EPOCH - Duration::from_micros(1_500);
        assert_eq!(Timestamp::from_system_time(before).as_millis(), -2);
    }

    #[test]
    fn round_trips_through_system_time() {
        let t = Timestamp::from_millis(1_767_225_600_123);
        assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
        assert_eq!(t.as_secs(), 1_767_225_600);
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(i64::MAX - 1);
        assert_eq!(t.saturating_add(Duration::from_secs(1)).as_millis(), i64::MAX);
        assert_eq!(Timestamp::ZERO.duration_since(t), Duration::ZERO);
    }
}
