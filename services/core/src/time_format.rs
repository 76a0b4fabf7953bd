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
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
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
