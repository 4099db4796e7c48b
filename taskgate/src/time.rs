//! Millisecond timestamps: the one time representation every backend stores and compares,
//! printed and parsed as RFC 3339 in UTC (`2026-01-01T00:00:00.000Z`) without a date crate.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::Error;

/// An instant as whole unix milliseconds (UTC), floored.
///
/// Every time the broker writes is truncated to milliseconds (contract §1.3), so a snapshot
/// returned by a write equals what a later read returns on every backend. `Timestamp::ZERO`
/// (the unix epoch) means "unset" where a field is optional in storage.
///
/// `Display` is RFC 3339 in UTC with milliseconds, and `FromStr` reads it back (any offset,
/// any number of fraction digits, floored to the millisecond); `Debug` shows the same text.
/// Years outside 0000–9999 print with a sign (`-0001-…`, `+10000-…`), as ISO 8601's expanded
/// form, and parse back.
///
/// ```
/// use taskgate::Timestamp;
///
/// let t = Timestamp::from_millis(1_767_225_600_123);
/// assert_eq!(t.to_string(), "2026-01-01T00:00:00.123Z");
/// assert_eq!("2026-01-01T01:00:00.123+01:00".parse::<Timestamp>().ok(), Some(t));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The unix epoch; stored as `0`, read back as "unset".
    pub const ZERO: Timestamp = Timestamp(0);

    /// A timestamp from unix milliseconds.
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    /// The system clock's current time, floored to whole milliseconds.
    ///
    /// A broker judges time by its own clock (the injected one, or the database server's):
    /// ask it with [`Broker::now`](crate::Broker::now) for anything compared with stored times.
    pub fn now() -> Self {
        Timestamp::from_system_time(SystemTime::now())
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

const MS_PER_DAY: i64 = 86_400_000;

/// The civil date (proleptic Gregorian) of `days` since 1970-01-01: `(year, month, day)`.
/// Howard Hinnant's `civil_from_days`, exact for every `i64` millisecond's day.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date (the inverse of [`civil_from_days`]); `None` on
/// overflow. `month` is 1–12 and `day` 1–31 (checked by the caller).
fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    let y = if month <= 2 { year.checked_sub(1)? } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era.checked_mul(146_097)?.checked_add(doe - 719_468)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with milliseconds: `2026-01-01T00:00:00.000Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (year, month, day) = civil_from_days(self.0.div_euclid(MS_PER_DAY));
        let ms_of_day = self.0.rem_euclid(MS_PER_DAY);
        let (h, m) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
        let (sec, ms) = (ms_of_day / 1_000 % 60, ms_of_day % 1_000);
        match year {
            0..=9999 => write!(f, "{year:04}")?,
            y if y < 0 => write!(f, "-{:04}", y.unsigned_abs())?,
            y => write!(f, "+{y}")?,
        }
        write!(f, "-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}.{ms:03}Z")
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

impl FromStr for Timestamp {
    type Err = Error;

    /// Parses RFC 3339 (`2026-01-01T00:00:00Z`, `…00.123456+02:00`; `t`, `z` and a space
    /// separator accepted) and the signed expanded years `Display` prints. Fractions are floored
    /// to the millisecond; leap seconds (`:60`) are refused. Errors are
    /// `InvalidInput { field: "timestamp" }`.
    fn from_str(s: &str) -> Result<Self, Error> {
        parse_rfc3339(s).ok_or_else(|| {
            Error::invalid(
                "timestamp",
                format!("{s:?} is not an RFC 3339 time like 2026-01-01T00:00:00.000Z"),
            )
        })
    }
}

/// A cursor over the bytes of a time being parsed.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    /// Exactly `n` ASCII digits.
    fn digits(&mut self, n: usize) -> Option<i64> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        let mut value = 0i64;
        for b in head {
            value = value * 10 + i64::from(char::from(*b).to_digit(10)?);
        }
        self.0 = rest;
        Some(value)
    }

    /// One of `allowed`, returned.
    fn one_of(&mut self, allowed: &[u8]) -> Option<u8> {
        let (first, rest) = self.0.split_first()?;
        allowed.contains(first).then(|| {
            self.0 = rest;
            *first
        })
    }

    /// A run of digits (possibly empty) and its length.
    fn digit_run(&mut self) -> &[u8] {
        let n = self.0.iter().take_while(|b| b.is_ascii_digit()).count();
        let (run, rest) = self.0.split_at(n);
        self.0 = rest;
        run
    }
}

fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let mut c = Cursor(s.as_bytes());
    let year = match c.one_of(b"+-") {
        None => c.digits(4)?,
        Some(sign) => {
            let run = c.digit_run();
            if run.len() < 4 || run.len() > 9 {
                return None;
            }
            let value = std::str::from_utf8(run).ok()?.parse::<i64>().ok()?;
            if sign == b'-' {
                -value
            } else {
                value
            }
        }
    };
    c.one_of(b"-")?;
    let month = c.digits(2)?;
    c.one_of(b"-")?;
    let day = c.digits(2)?;
    c.one_of(b"Tt ")?;
    let hour = c.digits(2)?;
    c.one_of(b":")?;
    let minute = c.digits(2)?;
    c.one_of(b":")?;
    let second = c.digits(2)?;
    let valid_date = (1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day);
    if !valid_date || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut ms = 0;
    if c.one_of(b".").is_some() {
        let fraction = c.digit_run();
        if fraction.is_empty() {
            return None;
        }
        for (i, b) in fraction.iter().take(3).enumerate() {
            ms += i64::from(char::from(*b).to_digit(10)?) * [100, 10, 1][i];
        }
    }
    let offset_minutes = match c.one_of(b"Zz+-")? {
        b'Z' | b'z' => 0,
        sign => {
            let (oh, _, om) = (c.digits(2)?, c.one_of(b":")?, c.digits(2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            if sign == b'-' {
                -(oh * 60 + om)
            } else {
                oh * 60 + om
            }
        }
    };
    if !c.0.is_empty() {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    let local_ms = (hour * 3_600 + minute * 60 + second) * 1_000 + ms;
    let utc_ms = local_ms - offset_minutes * 60_000;
    // In i128: the first day of the range starts before i64::MIN ms.
    let total = i128::from(days) * i128::from(MS_PER_DAY) + i128::from(utc_ms);
    i64::try_from(total).ok().map(Timestamp)
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        Timestamp::from_system_time(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[rstest]
    #[case::epoch(0, "1970-01-01T00:00:00.000Z")]
    #[case::contract_epoch(1_767_225_600_000, "2026-01-01T00:00:00.000Z")]
    #[case::millis(1_767_225_600_123, "2026-01-01T00:00:00.123Z")]
    #[case::end_of_a_day(1_767_311_999_999, "2026-01-01T23:59:59.999Z")]
    #[case::last_ms_before_epoch(-1, "1969-12-31T23:59:59.999Z")]
    #[case::one_day_before_epoch(-86_400_000, "1969-12-31T00:00:00.000Z")]
    #[case::leap_day_2024(1_709_164_800_000, "2024-02-29T00:00:00.000Z")]
    #[case::leap_day_2000(951_782_400_000, "2000-02-29T00:00:00.000Z")]
    #[case::no_leap_day_1900(-2_203_891_200_000, "1900-03-01T00:00:00.000Z")]
    #[case::before_it_1900(-2_203_977_600_000, "1900-02-28T00:00:00.000Z")]
    #[case::leap_day_1600(-11_670_953_103_211, "1600-02-29T12:34:56.789Z")]
    #[case::year_1(-62_135_596_800_000, "0001-01-01T00:00:00.000Z")]
    #[case::year_0_is_leap(-62_167_219_200_000, "0000-01-01T00:00:00.000Z")]
    #[case::before_year_0(-62_167_219_200_001, "-0001-12-31T23:59:59.999Z")]
    #[case::end_of_9999(253_402_300_799_999, "9999-12-31T23:59:59.999Z")]
    #[case::year_10000(253_402_300_800_000, "+10000-01-01T00:00:00.000Z")]
    #[case::largest(i64::MAX, "+292278994-08-17T07:12:55.807Z")]
    #[case::smallest(i64::MIN, "-292275055-05-16T16:47:04.192Z")]
    fn prints_and_parses_rfc3339(#[case] ms: i64, #[case] text: &str) {
        let t = Timestamp::from_millis(ms);
        assert_eq!(t.to_string(), text);
        assert_eq!(format!("{t:?}"), format!("Timestamp({text})"));
        assert_eq!(text.parse::<Timestamp>().ok(), Some(t), "{text}");
    }

    #[rstest]
    #[case::no_fraction("2026-01-01T00:00:00Z", 1_767_225_600_000)]
    #[case::lowercase_one_digit("2026-01-01t00:00:00.1z", 1_767_225_600_100)]
    #[case::space_nanos_floored("2026-01-01 00:00:00.123999999Z", 1_767_225_600_123)]
    #[case::plus_offset("2026-01-01T02:00:00+02:00", 1_767_225_600_000)]
    #[case::minus_offset("2025-12-31T23:30:00-00:30", 1_767_225_600_000)]
    #[case::negative_fraction_floored("1969-12-31T23:59:59.9999Z", -1)]
    #[case::leap_day("2024-02-29T00:00:00Z", 1_709_164_800_000)]
    #[case::signed_four_digits("+2026-01-01T00:00:00Z", 1_767_225_600_000)]
    fn parses_rfc3339_variants(#[case] text: &str, #[case] ms: i64) {
        assert_eq!(text.parse::<Timestamp>().ok(), Some(Timestamp::from_millis(ms)), "{text}");
    }

    #[rstest]
    #[case::empty("")]
    #[case::date_only("2026-01-01")]
    #[case::no_zone("2026-01-01T00:00:00")]
    #[case::no_leap_day("2026-02-29T00:00:00Z")]
    #[case::no_leap_day_1900("1900-02-29T00:00:00Z")]
    #[case::month_13("2026-13-01T00:00:00Z")]
    #[case::day_0("2026-01-00T00:00:00Z")]
    #[case::april_31("2026-04-31T00:00:00Z")]
    #[case::hour_24("2026-01-01T24:00:00Z")]
    #[case::leap_second("2016-12-31T23:59:60Z")]
    #[case::empty_fraction("2026-01-01T00:00:00.Z")]
    #[case::trailing("2026-01-01T00:00:00Zjunk")]
    #[case::short_year("26-01-01T00:00:00Z")]
    #[case::short_signed_year("+123-01-01T00:00:00Z")]
    #[case::offset_without_colon("2026-01-01T00:00:00+0200")]
    #[case::millis_as_before("1767225600000ms")]
    #[case::out_of_range("+999999999-01-01T00:00:00Z")]
    fn refuses_what_is_not_rfc3339(#[case] text: &str) {
        match text.parse::<Timestamp>() {
            Err(Error::InvalidInput { field: "timestamp", .. }) => {}
            other => panic!("{text:?} parsed as {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn every_instant_round_trips(ms in any::<i64>()) {
            let t = Timestamp::from_millis(ms);
            prop_assert_eq!(t.to_string().parse::<Timestamp>().ok(), Some(t));
        }

        #[test]
        fn days_round_trip(days in -106_751_991_168i64..=106_751_991_167) {
            let (y, m, d) = civil_from_days(days);
            prop_assert!((1..=12).contains(&m) && (1..=days_in_month(y, m)).contains(&d));
            prop_assert_eq!(days_from_civil(y, m, d), Some(days));
        }
    }

    #[test]
    fn now_is_the_system_clock_floored() {
        let before = Timestamp::from_system_time(SystemTime::now());
        let now = Timestamp::now();
        let after = Timestamp::from_system_time(SystemTime::now());
        assert!(before <= now && now <= after, "{before} <= {now} <= {after}");
    }

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
