//! When a source was said or written: its [`Time`] (an RFC 3339 timestamp or a date, as
//! the debate runner or the ingest gave it), the [`TimeSpan`] a node covers, and the
//! [`TimeRange`] a window or a query is restricted to.
//!
//! A time is kept normalised (unix seconds and nanoseconds, the UTC offset it was given
//! in, and whether it was a bare date) and rendered back as given: a date as
//! `2026-03-04`, a timestamp in RFC 3339 with its own offset (`Z` for UTC). In JSON it is
//! that string; in the store (bincode) the four numbers.
//!
//! A bare date stands for its whole day in UTC; a timestamp for its second. Ranges compare
//! instants, so `--since 2026-03-04` keeps a turn of `2026-03-04T00:30:00+02:00` (22:30
//! UTC the day before) out: give a timestamp with an offset where the day boundary matters.

use crate::error::{Error, Result};
use chrono::{DateTime, FixedOffset, NaiveDate, SecondsFormat};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

const DAY: i64 = 86_400;

/// When a source was said or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Time {
    /// Unix seconds (a bare date: its midnight UTC).
    secs: i64,
    nanos: u32,
    /// Seconds east of UTC the time was given in (0 for a bare date).
    offset: i32,
    date_only: bool,
}

impl Time {
    /// Parses an RFC 3339 timestamp (`2026-03-04T18:02:00Z`, `2026-03-04T18:02:00.5+01:00`)
    /// or a date (`2026-03-04`). The error is one line naming what was given.
    pub fn parse(s: &str) -> Result<Time> {
        let t = s.trim();
        if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d")
            && t.len() == 10
        {
            return Ok(Time::from_date(d));
        }
        if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
            return Ok(Time {
                secs: dt.timestamp(),
                nanos: dt.timestamp_subsec_nanos(),
                offset: dt.offset().local_minus_utc(),
                date_only: false,
            });
        }
        Err(Error::invalid(format!(
            "invalid time `{}`: expected an RFC 3339 timestamp (2026-03-04T18:02:00Z) or a date (2026-03-04)",
            t.escape_debug()
        )))
    }

    /// A bare date.
    pub fn from_date(d: NaiveDate) -> Time {
        Time {
            secs: d
                .and_hms_opt(0, 0, 0)
                .expect("midnight")
                .and_utc()
                .timestamp(),
            nanos: 0,
            offset: 0,
            date_only: true,
        }
    }

    /// Unix seconds (a bare date: its midnight UTC).
    pub fn unix(&self) -> i64 {
        self.secs
    }

    /// Whether it was given as a bare date.
    pub fn is_date(&self) -> bool {
        self.date_only
    }

    /// The calendar date where it was said (in the offset it was given in).
    pub fn date(&self) -> NaiveDate {
        self.local().date_naive()
    }

    fn local(&self) -> DateTime<FixedOffset> {
        let off = FixedOffset::east_opt(self.offset).unwrap_or(FixedOffset::east_opt(0).unwrap());
        DateTime::from_timestamp(self.secs, self.nanos)
            .unwrap_or_default()
            .with_timezone(&off)
    }

    /// The first second it stands for.
    pub(crate) fn start(&self) -> i64 {
        self.secs
    }

    /// The second after the last it stands for: a date is its whole day.
    pub(crate) fn end(&self) -> i64 {
        if self.date_only {
            self.secs.saturating_add(DAY)
        } else {
            self.secs.saturating_add(1)
        }
    }

    /// The date as shown in labels: `2026-03-04`.
    pub fn date_label(&self) -> String {
        self.date().format("%Y-%m-%d").to_string()
    }
}

impl Ord for Time {
    /// By instant; the same instant given as a date sorts before a timestamp.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.secs, self.nanos, !self.date_only, self.offset).cmp(&(
            o.secs,
            o.nanos,
            !o.date_only,
            o.offset,
        ))
    }
}

impl PartialOrd for Time {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl fmt::Display for Time {
    /// As given: a date, or RFC 3339 in the offset it was given in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.date_only {
            f.write_str(&self.date_label())
        } else {
            f.write_str(&self.local().to_rfc3339_opts(SecondsFormat::AutoSi, true))
        }
    }
}

impl std::str::FromStr for Time {
    type Err = Error;
    fn from_str(s: &str) -> Result<Time> {
        Time::parse(s)
    }
}

impl Serialize for Time {
    /// JSON: the string as given. The store (bincode, not human-readable): the numbers.
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            (self.secs, self.nanos, self.offset, self.date_only).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Time, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            Time::parse(&s).map_err(serde::de::Error::custom)
        } else {
            let (secs, nanos, offset, date_only) = <(i64, u32, i32, bool)>::deserialize(d)?;
            if nanos >= 1_000_000_000 || offset.abs() >= DAY as i32 {
                return Err(serde::de::Error::custom("a time out of range"));
            }
            Ok(Time {
                secs,
                nanos,
                offset,
                date_only,
            })
        }
    }
}

/// The times of the sources beneath a node: the earliest and the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeSpan {
    pub first: Time,
    pub last: Time,
}

impl TimeSpan {
    pub fn of(t: Time) -> TimeSpan {
        TimeSpan { first: t, last: t }
    }

    /// The span covering both.
    pub fn merge(self, o: TimeSpan) -> TimeSpan {
        TimeSpan {
            first: self.first.min(o.first),
            last: self.last.max(o.last),
        }
    }

    /// `2026-03-04`, or `2026-03-04 – 2026-03-09` when it covers several days.
    pub fn date_label(&self) -> String {
        let (a, b) = (self.first.date_label(), self.last.date_label());
        if a == b {
            a
        } else {
            format!("{a} \u{2013} {b}")
        }
    }
}

/// What a window, a query or `load_corpus` is restricted to: sources said at or after
/// `since` and at or before `until` (a bare date includes its whole day). Unbounded
/// (the default) keeps everything, sources without a time included; bounded, a source
/// without a time is left out (it cannot be shown to be in range).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub since: Option<Time>,
    pub until: Option<Time>,
}

impl TimeRange {
    /// Everything.
    pub const ALL: TimeRange = TimeRange {
        since: None,
        until: None,
    };

    /// A range; `since` after `until` is an error.
    pub fn new(since: Option<Time>, until: Option<Time>) -> Result<TimeRange> {
        if let (Some(a), Some(b)) = (since, until)
            && a.start() >= b.end()
        {
            return Err(Error::invalid(format!(
                "since ({a}) is after until ({b}): nothing can be in that range"
            )));
        }
        Ok(TimeRange { since, until })
    }

    /// Parses `since` and `until` as given by a flag or a request field.
    pub fn parse(since: Option<&str>, until: Option<&str>) -> Result<TimeRange> {
        let p = |what: &str, s: Option<&str>| {
            s.map(|s| Time::parse(s).map_err(|e| Error::invalid(format!("{what}: {e}"))))
                .transpose()
        };
        TimeRange::new(p("since", since)?, p("until", until)?)
    }

    /// Whether it keeps everything.
    pub fn is_all(&self) -> bool {
        self.since.is_none() && self.until.is_none()
    }

    /// Whether a node covering `span` (`None`: no time) has something in the range.
    pub fn overlaps(&self, span: Option<&TimeSpan>) -> bool {
        if self.is_all() {
            return true;
        }
        let Some(s) = span else {
            return false;
        };
        self.since.is_none_or(|a| s.last.end() > a.start())
            && self.until.is_none_or(|b| s.first.start() < b.end())
    }

    /// Whether a source said at `t` is in the range.
    pub fn contains(&self, t: Option<&Time>) -> bool {
        self.overlaps(t.map(|t| TimeSpan::of(*t)).as_ref())
    }
}

impl fmt::Display for TimeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.since, self.until) {
            (Some(a), Some(b)) => write!(f, "between {a} and {b}"),
            (Some(a), None) => write!(f, "since {a}"),
            (None, Some(b)) => write!(f, "until {b}"),
            (None, None) => f.write_str("at any time"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time::parse(s).unwrap()
    }

    #[test]
    fn times_render_back_as_given() {
        for s in [
            "2026-03-04",
            "2026-03-04T18:02:00Z",
            "2026-03-04T18:02:00+02:00",
            "2026-03-04T18:02:00.250-05:30",
        ] {
            assert_eq!(t(s).to_string(), s);
        }
        // Normalised: another spelling of the same instant renders in RFC 3339.
        assert_eq!(
            t("2026-03-04t18:02:00+00:00").to_string(),
            "2026-03-04T18:02:00Z"
        );
        assert_eq!(t(" 2026-03-04 ").to_string(), "2026-03-04");
        assert_eq!(t("1970-01-02").unix(), 86_400);
        assert!(t("1970-01-02").is_date() && !t("1970-01-02T00:00:00Z").is_date());
        // The date is where it was said.
        assert_eq!(t("2026-03-04T23:30:00-05:00").date_label(), "2026-03-04");
        assert_eq!(
            t("2026-03-04T23:30:00-05:00").unix(),
            t("2026-03-05T04:30:00Z").unix()
        );
    }

    #[test]
    fn a_bad_time_is_one_line_naming_it() {
        for bad in [
            "yesterday",
            "2026-13-01",
            "2026-03-04 18:02",
            "2026-3-4",
            "",
            "12",
        ] {
            let e = Time::parse(bad).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("invalid time `{bad}`: expected an RFC 3339")),
                "{e}"
            );
            assert_eq!(e.lines().count(), 1);
        }
    }

    #[test]
    fn times_round_trip_through_json_and_bincode() {
        for s in ["2026-03-04", "2026-03-04T18:02:00.500+01:00"] {
            let x = t(s);
            let j = serde_json::to_string(&x).unwrap();
            assert_eq!(j, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<Time>(&j).unwrap(), x);
            let b = bincode::serde::encode_to_vec(x, bincode::config::standard()).unwrap();
            let (y, _): (Time, _) =
                bincode::serde::decode_from_slice(&b, bincode::config::standard()).unwrap();
            assert_eq!(y, x);
        }
        let e = serde_json::from_str::<Time>("\"soon\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid time `soon`"), "{e}");
    }

    #[test]
    fn ranges_keep_what_overlaps_them() {
        let r = TimeRange::parse(Some("2026-03-04"), Some("2026-03-05")).unwrap();
        assert!(r.contains(Some(&t("2026-03-04"))));
        assert!(r.contains(Some(&t("2026-03-05T23:59:59Z"))));
        assert!(!r.contains(Some(&t("2026-03-06T00:00:00Z"))));
        assert!(!r.contains(Some(&t("2026-03-03T23:59:59Z"))));
        assert!(!r.contains(None));
        assert!(TimeRange::ALL.contains(None));
        // A span counts when any of it is in the range.
        let span = TimeSpan::of(t("2026-03-01")).merge(TimeSpan::of(t("2026-03-04T10:00:00Z")));
        assert_eq!(span.date_label(), "2026-03-01 \u{2013} 2026-03-04");
        assert!(r.overlaps(Some(&span)));
        let since = TimeRange::parse(Some("2026-03-04T10:00:01Z"), None).unwrap();
        assert!(!since.overlaps(Some(&span)));
        let until = TimeRange::parse(None, Some("2026-03-01")).unwrap();
        assert!(until.overlaps(Some(&span)));
        let e = TimeRange::parse(Some("2026-03-05"), Some("2026-03-04"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "since (2026-03-05) is after until (2026-03-04): nothing can be in that range"
        );
        let e = TimeRange::parse(Some("monday"), None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("since: invalid time `monday`"), "{e}");
        // One day is a range of its own.
        assert!(TimeRange::parse(Some("2026-03-04"), Some("2026-03-04")).is_ok());
    }
}
