//! Durations in Go syntax (`"60s"`, `"10m"`, `"1h30m"`, `"1.5s"`), the form the runtime
//! configuration is written in (runtime spec §12.1), and serde helpers for config fields.

use std::time::Duration;

/// Parses a Go duration (`"300ms"`, `"1h30m"`, `"0"`). Units: `ns`, `us`/`µs`, `ms`, `s`,
/// `m`, `h`; fractions allowed (`"1.5h"`). Negative durations are rejected.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("{text:?} is negative"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return Err(format!("{text:?} is not a duration"));
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num.parse().map_err(|_| format!("{text:?} is not a duration"))?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let nanos_per = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("{text:?} is missing a unit")),
            other => return Err(format!("{text:?} has an unknown unit {other:?}")),
        };
        total += value * nanos_per;
        rest = tail;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(Duration::from_secs_f64(total / 1e9))
}

/// Formats a duration as Go does: `"1h30m0s"`, `"10m0s"`, `"1.5s"`, `"300ms"`, `"0s"`.
pub fn format(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    if d < Duration::from_secs(1) {
        let nanos = d.subsec_nanos();
        return match nanos {
            n if n < 1_000 => format!("{n}ns"),
            n if n < 1_000_000 => format!("{}µs", trim_fraction(u64::from(n), 1_000)),
            n => format!("{}ms", trim_fraction(u64::from(n), 1_000_000)),
        };
    }
    let secs = d.as_secs();
    let (hours, minutes, whole) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let seconds = whole * 1_000_000_000 + u64::from(d.subsec_nanos());
    let seconds = trim_fraction(seconds, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / unit` as a decimal without trailing zeros (`1_500_000, 1_000_000` → `"1.5"`).
fn trim_fraction(value: u64, unit: u64) -> String {
    let (whole, frac) = (value / unit, value % unit);
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Serde for a `Duration` field written in Go syntax (`#[serde(with = "…::duration::serde_go")]`).
pub mod serde_go {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the Go form (`"10m0s"`).
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*d))
    }

    /// Reads the Go form (`"10m"`, `"1h30m"`).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("60s", 60_000)]
    #[case("10m", 600_000)]
    #[case("1h30m", 5_400_000)]
    #[case("1.5s", 1_500)]
    #[case("300ms", 300)]
    #[case("0", 0)]
    #[case("2h45m30.5s", 9_930_500)]
    fn parses_go_syntax(#[case] text: &str, #[case] millis: u64) {
        assert_eq!(parse(text), Ok(Duration::from_millis(millis)));
    }

    #[rstest]
    #[case("")]
    #[case("-1s")]
    #[case("10")]
    #[case("5d")]
    #[case("s")]
    fn rejects_bad_text(#[case] text: &str) {
        assert!(parse(text).is_err(), "{text:?}");
    }

    #[rstest]
    #[case(600_000, "10m0s")]
    #[case(5_400_000, "1h30m0s")]
    #[case(60_000, "1m0s")]
    #[case(1_500, "1.5s")]
    #[case(300, "300ms")]
    #[case(0, "0s")]
    #[case(45_000, "45s")]
    fn formats_canonically(#[case] millis: u64, #[case] text: &str) {
        assert_eq!(format(Duration::from_millis(millis)), text);
        assert_eq!(parse(text), Ok(Duration::from_millis(millis)));
    }
}
