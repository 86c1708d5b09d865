//! Cron expressions: five fields (minute, hour, day of month, month, day of week), read in an
//! IANA time zone (UTC when none is given). Parsing and next dates come from `croner`.

use crate::time::Timestamp;
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// A parsed schedule in its time zone.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    cron: Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses `expr` (and `timezone`); the message names what is wrong.
    pub(crate) fn parse(expr: &str, timezone: Option<&str>) -> Result<Self, String> {
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser.parse(expr).map_err(|e| {
            format!(
                "schedule: '{expr}' is not a five-field cron expression (minute hour \
                 day-of-month month day-of-week): {e}"
            )
        })?;
        let tz = match timezone {
            None => Tz::UTC,
            Some(name) => name.parse::<Tz>().map_err(|_| {
                format!("timezone: '{name}' is not an IANA time zone (like 'Europe/Paris')")
            })?,
        };
        Ok(Self { cron, tz })
    }

    /// The first tick strictly after `t`, or `None` when the schedule has none (or none before
    /// `end`).
    pub(crate) fn next_after(&self, t: Timestamp, end: Option<Timestamp>) -> Option<Timestamp> {
        let local = t.as_utc().with_timezone(&self.tz);
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        let next = Timestamp::from_utc(next.with_timezone(&chrono::Utc));
        match end {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn every_minute_ticks_on_the_next_whole_minute() {
        let s = Schedule::parse("* * * * *", None).unwrap();
        let next = s.next_after(at("2026-11-24T10:15:30+00:00"), None);
        assert_eq!(next, Some(at("2026-11-24T10:16:00+00:00")));
        // Strictly after: a tick exactly now is not the next one.
        let next = s.next_after(at("2026-11-24T10:16:00+00:00"), None);
        assert_eq!(next, Some(at("2026-11-24T10:17:00+00:00")));
    }

    #[test]
    fn the_time_zone_decides_when_nine_oclock_is() {
        let s = Schedule::parse("0 9 * * MON", Some("America/New_York")).unwrap();
        // Tuesday 24 Nov 2026 → Monday 30 Nov, 9:00 in New York = 14:00 UTC (EST, UTC-5).
        let next = s.next_after(at("2026-11-24T10:00:00+00:00"), None);
        assert_eq!(next, Some(at("2026-11-30T14:00:00+00:00")));
        let utc = Schedule::parse("0 9 * * MON", None).unwrap();
        let next = utc.next_after(at("2026-11-24T10:00:00+00:00"), None);
        assert_eq!(next, Some(at("2026-11-30T09:00:00+00:00")));
    }

    #[test]
    fn no_tick_after_the_end_time() {
        let s = Schedule::parse("0 0 1 * *", None).unwrap();
        let end = Some(at("2026-11-30T00:00:00+00:00"));
        assert_eq!(s.next_after(at("2026-11-24T10:00:00+00:00"), end), None);
    }

    #[test]
    fn bad_expressions_and_zones_are_named() {
        let e = Schedule::parse("every monday", None).unwrap_err();
        assert!(e.starts_with("schedule:"), "{e}");
        let e = Schedule::parse("* * * * * *", None).unwrap_err();
        assert!(e.contains("five-field"), "{e}");
        let e = Schedule::parse("* * * * *", Some("Mars/Olympus")).unwrap_err();
        assert!(e.starts_with("timezone:"), "{e}");
    }
}
