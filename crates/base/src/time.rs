//! Wall-clock timestamps in the wire format LangGraph clients expect
//! (`2026-11-22T12:45:17.220018+00:00`), which also sorts correctly as text.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

const FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6f+00:00";

/// A UTC instant with microsecond precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// The current time, truncated to microseconds so a value survives a store round trip.
    pub fn now() -> Self {
        let now = Utc::now();
        let micros = now.timestamp_micros();
        Self(DateTime::from_timestamp_micros(micros).unwrap_or(now))
    }

    /// Parses the wire/storage format (also accepts any RFC 3339 string).
    pub fn parse(text: &str) -> Option<Self> {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, FORMAT) {
            return Some(Self(naive.and_utc()));
        }
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| Self(t.with_timezone(&Utc)))
    }

    /// From a chrono instant (truncated to microseconds, like `now`).
    pub fn from_utc(t: DateTime<Utc>) -> Self {
        Self(DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t))
    }

    /// As a chrono instant.
    pub fn as_utc(&self) -> DateTime<Utc> {
        self.0
    }

    /// Milliseconds since the Unix epoch.
    pub fn millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// This instant moved forward by `secs` seconds (negative moves back).
    /// Saturates at the ends of the representable range instead of overflowing.
    pub fn plus_secs(&self, secs: f64) -> Self {
        let micros = (secs * 1_000_000.0) as i64;
        let moved = self
            .0
            .checked_add_signed(chrono::Duration::microseconds(micros));
        Self(moved.unwrap_or(if secs < 0.0 {
            DateTime::<Utc>::MIN_UTC
        } else {
            DateTime::<Utc>::MAX_UTC
        }))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.format(FORMAT))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).ok_or_else(|| serde::de::Error::custom("invalid timestamp"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_reference_and_round_trips() {
        let t = Timestamp::now();
        let text = t.to_string();
        assert!(text.ends_with("+00:00"), "{text}");
        assert_eq!(text.len(), "2026-11-22T12:45:17.220018+00:00".len());
        assert_eq!(Timestamp::parse(&text), Some(t));
    }
}
