//! One textual form for instants on the wire: RFC 3339, UTC, milliseconds;
//! and one for durations in messages to people.
//!
//! Events, replies and run ids all use it, so the same instant always renders
//! the same way (which matters: run ids are derived from it).

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

/// Render `at` as `2026-11-22T12:00:00.000Z`.
pub fn rfc3339_millis(at: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(RFC3339_MILLIS_LEN);
    push_rfc3339_millis(&mut out, at);
    out
}

/// Length of [`rfc3339_millis`] for years 0 to 9999.
const RFC3339_MILLIS_LEN: usize = "2026-11-22T12:00:00.000Z".len();

/// Append [`rfc3339_millis`] of `at` to `out`. Written digit by digit: the
/// ticker names every fire's run with it, and chrono's formatting machinery
/// was a visible share of a fire's CPU. Years outside 0-9999 and leap
/// seconds, which chrono spells its own way, go through chrono.
pub fn push_rfc3339_millis(out: &mut String, at: DateTime<Utc>) {
    use chrono::{Datelike as _, Timelike as _};
    let nanos = at.nanosecond();
    if !(0..=9999).contains(&at.year()) || nanos >= 1_000_000_000 {
        out.push_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true));
        return;
    }
    let mut text = *b"0000-00-00T00:00:00.000Z";
    put_digits(&mut text[0..4], at.year() as u32);
    put_digits(&mut text[5..7], at.month());
    put_digits(&mut text[8..10], at.day());
    put_digits(&mut text[11..13], at.hour());
    put_digits(&mut text[14..16], at.minute());
    put_digits(&mut text[17..19], at.second());
    put_digits(&mut text[20..23], nanos / 1_000_000);
    // Every byte is an ASCII digit or one of `-T:.Z`.
    out.push_str(std::str::from_utf8(&text).unwrap_or_default());
}

/// Write `value`'s last `field.len()` decimal digits into `field`, zero-padded.
fn put_digits(field: &mut [u8], mut value: u32) {
    for digit in field.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Render `d` the way definitions write durations, compact and readable back
/// by `humantime`: `24h`, `1h30m`, `100ms`, `0s`; whole days only from two
/// days on (`7d`), so the one-day bounds read `24h`.
pub fn duration_text(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    let mut out = String::new();
    let rest = if secs >= 2 * 86_400 && secs.is_multiple_of(86_400) && nanos == 0 {
        let _ = write!(out, "{}d", secs / 86_400);
        0
    } else {
        secs
    };
    for (value, unit) in [
        (rest / 3600, "h"),
        (rest % 3600 / 60, "m"),
        (rest % 60, "s"),
        (u64::from(nanos / 1_000_000), "ms"),
        (u64::from(nanos / 1_000 % 1_000), "us"),
        (u64::from(nanos % 1_000), "ns"),
    ] {
        if value > 0 {
            let _ = write!(out, "{value}{unit}");
        }
    }
    out
}

/// Serde adapter for `DateTime<Utc>` fields using [`rfc3339_millis`].
pub mod millis {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339_millis(*at))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }
}

/// Serde adapter for `Option<DateTime<Utc>>` fields using [`rfc3339_millis`].
pub mod millis_opt {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(at: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match at {
            Some(at) => s.serialize_str(&super::rfc3339_millis(*at)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| {
            DateTime::parse_from_rfc3339(&t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_render_as_chrono_renders_them() {
        use chrono::TimeZone as _;
        let chrono_text = |at: DateTime<Utc>| at.to_rfc3339_opts(SecondsFormat::Millis, true);
        // Two hundred thousand instants spread over four years (a leap
        // year among them), and the edges chrono spells its own way.
        let start = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap();
        let span_ms: i64 = 4 * 366 * 86_400_000;
        for i in 0..200_000_i64 {
            let at = start + chrono::Duration::milliseconds(i * 631_133_077 % span_ms);
            assert_eq!(rfc3339_millis(at), chrono_text(at), "{at:?}");
        }
        let edges = [
            Utc.timestamp_opt(0, 0).unwrap(),
            Utc.timestamp_millis_opt(999).unwrap(),
            Utc.with_ymd_and_hms(2024, 2, 29, 23, 59, 59).unwrap()
                + chrono::Duration::milliseconds(999),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 6, 1, 0, 0, 0).unwrap(),
            Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap(),
            Utc.timestamp_opt(1_700_000_039, 1_500_000_000).unwrap(),
        ];
        for at in edges {
            assert_eq!(rfc3339_millis(at), chrono_text(at), "{at:?}");
        }
    }

    #[test]
    fn durations_read_as_definitions_write_them() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(86_400), "24h"),
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_micros(1_500), "1ms500us"),
        ] {
            assert_eq!(duration_text(d), text);
            assert_eq!(humantime::parse_duration(text).ok(), Some(d), "{text}");
        }
    }
}
