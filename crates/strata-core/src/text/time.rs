//! Dates written relative to when something was said — "yesterday", "last Friday", "two
//! weeks ago", "next month", "this weekend", "in March" — resolved against the date it was
//! said ([`resolve`], [`find`]), and whether a question asks when ([`asks_when`]).
//!
//! General calendar arithmetic over a small grammar, not a list of phrases: a word that
//! anchors (`last`, `next`, `this`, a number and `ago`, a preposition) and a calendar unit
//! (day, week, weekend, month, year, season, a weekday, a month name). Weeks run Monday to
//! Sunday (ISO 8601); seasons are the meteorological ones of the northern hemisphere
//! (spring is March to May). A weekday or month said without `last`/`next` is the one
//! before the anchor, or after it when the sentence speaks of the future (`will`, `'ll`,
//! `going to`, `plan`...).

use chrono::{Datelike, Days, Months, NaiveDate, Weekday};

/// A resolved date: a day, a run of days (a week, a weekend, a season), a month or a
/// year.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Day(NaiveDate),
    /// First and last day, inclusive.
    Days(NaiveDate, NaiveDate),
    Month(i32, u32),
    Year(i32),
}

impl When {
    /// ISO 8601: `2023-05-05`, `2023-05-06/2023-05-07`, `2023-04`, `2022`.
    pub fn iso(&self) -> String {
        match *self {
            When::Day(d) => d.format("%Y-%m-%d").to_string(),
            When::Days(a, b) => format!("{}/{}", a.format("%Y-%m-%d"), b.format("%Y-%m-%d")),
            When::Month(y, m) => format!("{y:04}-{m:02}"),
            When::Year(y) => format!("{y:04}"),
        }
    }

    /// Its first and last day.
    pub fn days(&self) -> Option<(NaiveDate, NaiveDate)> {
        match *self {
            When::Day(d) => Some((d, d)),
            When::Days(a, b) => Some((a, b)),
            When::Month(y, m) => {
                let first = NaiveDate::from_ymd_opt(y, m, 1)?;
                Some((first, first.checked_add_months(Months::new(1))?.pred_opt()?))
            }
            When::Year(y) => Some((
                NaiveDate::from_ymd_opt(y, 1, 1)?,
                NaiveDate::from_ymd_opt(y, 12, 31)?,
            )),
        }
    }

    /// In words: `5 May 2023`, `6 May 2023 – 7 May 2023`, `April 2023`, `2022`.
    pub fn words(&self) -> String {
        let day = |d: NaiveDate| d.format("%-d %B %Y").to_string();
        match *self {
            When::Day(d) => day(d),
            When::Days(a, b) => format!("{} \u{2013} {}", day(a), day(b)),
            When::Month(y, m) => NaiveDate::from_ymd_opt(y, m, 1)
                .map(|d| d.format("%B %Y").to_string())
                .unwrap_or_else(|| self.iso()),
            When::Year(y) => format!("{y}"),
        }
    }
}

/// Resolves one expression (`"last Friday"`, `"two days ago"`, `"in March"`) said on
/// `anchor`; `None` when `expr` is not one whole expression this grammar knows. A weekday
/// or month without `last`/`next` is taken as past unless `expr` speaks of the future.
/// (The engine finds expressions in cited text with [`find`]; this is the grammar on its
/// own, for its tests.)
#[cfg(test)]
pub(crate) fn resolve(expr: &str, anchor: NaiveDate) -> Option<When> {
    let words = tokens(expr);
    let future = speaks_of_future(&words);
    match parse_at(expr, &words, 0, anchor, future) {
        Some((n, w)) if n == words.len() => Some(w),
        _ => None,
    }
}

/// A date expression found in a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Byte offsets of the expression in the text.
    pub start: usize,
    pub end: usize,
    pub when: When,
}

/// The first date expression of `text` (said on `anchor`), resolved.
pub fn find(text: &str, anchor: NaiveDate) -> Option<Found> {
    let words = tokens(text);
    let future = speaks_of_future(&words);
    (0..words.len()).find_map(|i| {
        let (n, when) = parse_at(text, &words, i, anchor, future)?;
        Some(Found {
            start: words[i].start,
            end: words[i + n - 1].end,
            when,
        })
    })
}

/// Every date expression of `text` (said on `anchor`), resolved, in order and not
/// overlapping.
pub fn mentions(text: &str, anchor: NaiveDate) -> Vec<Found> {
    let words = tokens(text);
    let future = speaks_of_future(&words);
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        match parse_at(text, &words, i, anchor, future) {
            Some((n, when)) => {
                out.push(Found {
                    start: words[i].start,
                    end: words[i + n - 1].end,
                    when,
                });
                i += n;
            }
            None => i += 1,
        }
    }
    out
}

/// How a question's date bounds what it asks about: within it ("in May 2023", "last
/// week"), from it on ("since 2019", "from March"), or up to it ("until June", "by
/// 2020").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Within,
    Since,
    Until,
}

/// When a question places what it asks about: its first date expression (the grammar of
/// [`find`], said on `anchor`) that says when, not which thing — one written after an
/// article ("the May 7 deadline", "a 2019 report") names a thing and is passed over —
/// with how it bounds ([`Bound`]: by the expression's first word, `since`/`from` or
/// `until`/`till`/`by`).
pub fn placed(question: &str, anchor: NaiveDate) -> Option<(Found, Bound)> {
    let words = tokens(question);
    let future = speaks_of_future(&words);
    (0..words.len()).find_map(|i| {
        if i > 0 && matches!(words[i - 1].word.as_str(), "the" | "a" | "an") {
            return None;
        }
        let (n, when) = parse_at(question, &words, i, anchor, future)?;
        let bound = match words[i].word.as_str() {
            "since" | "from" => Bound::Since,
            "until" | "till" | "by" => Bound::Until,
            _ => Bound::Within,
        };
        Some((
            Found {
                start: words[i].start,
                end: words[i + n - 1].end,
                when,
            },
            bound,
        ))
    })
}

/// Whether a question asks when: it starts with "when", or asks "when did/was/will…",
/// "what date/day/year/month", "which year/month/day/date", "how long ago", "since when".
/// ("What did Alice say when Bob objected?" asks what, not when.)
pub fn asks_when(question: &str) -> bool {
    let words = tokens(question);
    let w = |i: usize| words.get(i).map_or("", |t| t.word.as_str());
    if w(0) == "when" || w(0) == "when's" {
        return true;
    }
    (0..words.len()).any(|i| match (w(i), w(i + 1)) {
        ("when", next) => AUXILIARIES.contains(&next),
        ("what" | "which", "date" | "day" | "year" | "month") => true,
        ("how", "long") => w(i + 2) == "ago",
        ("since", "when") => true,
        _ => false,
    })
}

const AUXILIARIES: &[&str] = &[
    "did", "do", "does", "was", "were", "is", "are", "will", "would", "has", "have", "had", "can",
    "could", "should",
];

/// A word of a text: lower case, with its byte offsets (`'s` of a possessive dropped).
struct Token {
    word: String,
    start: usize,
    end: usize,
}

fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut start = None;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (k, &(i, c)) in chars.iter().enumerate() {
        // An apostrophe between letters is part of the word (`I'll`, `today's`).
        let inner = (c == '\'' || c == '\u{2019}')
            && k > 0
            && chars[k - 1].1.is_alphanumeric()
            && chars.get(k + 1).is_some_and(|n| n.1.is_alphabetic());
        if c.is_alphanumeric() || inner {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            out.push(token(text, s, i));
        }
    }
    if let Some(s) = start {
        out.push(token(text, s, text.len()));
    }
    out
}

fn token(text: &str, start: usize, end: usize) -> Token {
    let word = text[start..end].to_lowercase().replace('\u{2019}', "'");
    let word = word.strip_suffix("'s").map(str::to_string).unwrap_or(word);
    Token { word, start, end }
}

fn speaks_of_future(words: &[Token]) -> bool {
    words.iter().enumerate().any(|(i, t)| {
        let w = t.word.as_str();
        matches!(
            w,
            "will" | "shall" | "gonna" | "plan" | "plans" | "planning" | "upcoming" | "tomorrow"
        ) || w.ends_with("'ll")
            || (w == "going" && words.get(i + 1).is_some_and(|n| n.word == "to"))
    })
}

fn number(w: &str) -> Option<u32> {
    if let Ok(n) = w.parse::<u32>() {
        return Some(n);
    }
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    match w {
        "a" | "an" => Some(1),
        _ => WORDS.iter().position(|x| *x == w).map(|n| n as u32),
    }
}

fn weekday(w: &str) -> Option<Weekday> {
    Some(match w {
        "monday" => Weekday::Mon,
        "tuesday" => Weekday::Tue,
        "wednesday" => Weekday::Wed,
        "thursday" => Weekday::Thu,
        "friday" => Weekday::Fri,
        "saturday" => Weekday::Sat,
        "sunday" => Weekday::Sun,
        _ => return None,
    })
}

fn month(w: &str) -> Option<u32> {
    const NAMES: &[&str] = super::MONTHS;
    if let Some(i) = NAMES.iter().position(|n| *n == w) {
        return Some(i as u32 + 1);
    }
    // Three-letter abbreviations, and `sept`. (Like `may` and `march`, they are taken
    // only next to a day, a year or a preposition.)
    let short = if w == "sept" { "sep" } else { w };
    NAMES
        .iter()
        .position(|n| short.len() == 3 && n.starts_with(short))
        .map(|i| i as u32 + 1)
}

/// The first and last month of a season (meteorological, northern hemisphere): winter
/// runs December to February.
fn season(w: &str) -> Option<(u32, u32)> {
    Some(match w {
        "spring" => (3, 5),
        "summer" => (6, 8),
        "autumn" | "fall" => (9, 11),
        "winter" => (12, 2),
        _ => return None,
    })
}

fn day_of_month(w: &str) -> Option<u32> {
    let digits = w
        .strip_suffix("st")
        .or_else(|| w.strip_suffix("nd"))
        .or_else(|| w.strip_suffix("rd"))
        .or_else(|| w.strip_suffix("th"))
        .unwrap_or(w);
    digits
        .parse::<u32>()
        .ok()
        .filter(|d| (1..=31).contains(d) && digits.len() <= 2)
}

fn year(w: &str) -> Option<i32> {
    w.parse::<i32>()
        .ok()
        .filter(|y| w.len() == 4 && (1000..=2999).contains(y))
}

fn days(d: NaiveDate, n: i64) -> Option<NaiveDate> {
    if n >= 0 {
        d.checked_add_days(Days::new(n as u64))
    } else {
        d.checked_sub_days(Days::new(n.unsigned_abs()))
    }
}

fn months(d: NaiveDate, n: i64) -> Option<NaiveDate> {
    if n >= 0 {
        d.checked_add_months(Months::new(n as u32))
    } else {
        d.checked_sub_months(Months::new(n.unsigned_abs() as u32))
    }
}

/// The Monday of `d`'s ISO week.
fn monday(d: NaiveDate) -> Option<NaiveDate> {
    days(d, -(d.weekday().num_days_from_monday() as i64))
}

/// The week `n` weeks from `d`'s.
fn week(d: NaiveDate, n: i64) -> Option<When> {
    let m = days(monday(d)?, 7 * n)?;
    Some(When::Days(m, days(m, 6)?))
}

/// The weekend (Saturday and Sunday) of the week `n` weeks from `d`'s.
fn weekend(d: NaiveDate, n: i64) -> Option<When> {
    let sat = days(monday(d)?, 7 * n + 5)?;
    Some(When::Days(sat, days(sat, 1)?))
}

fn month_of(d: NaiveDate) -> When {
    When::Month(d.year(), d.month())
}

/// The season `n` seasons from the one holding `d` (n = 0: the one holding it).
fn season_from(d: NaiveDate, (first, last): (u32, u32), n: i64) -> Option<When> {
    // The season starts in `first` of the year whose season holds `d`, or the last one.
    let start_year = if first > last && d.month() <= last {
        d.year() - 1
    } else {
        d.year()
    };
    let start = NaiveDate::from_ymd_opt(start_year, first, 1)?;
    let start = months(start, 12 * n)?;
    let end = months(start, 3)?.pred_opt()?;
    Some(When::Days(start, end))
}

/// The latest (`past`) or the next season named `s` that is not the one holding `d`:
/// "last summer", "next winter".
fn other_season(d: NaiveDate, s: (u32, u32), past: bool) -> Option<When> {
    let this = season_from(d, s, 0)?;
    let When::Days(start, end) = this else {
        return None;
    };
    if past {
        if start > d {
            // This year's has not begun: the one before is last year's.
            season_from(d, s, -1)
        } else if end < d {
            Some(this)
        } else {
            season_from(d, s, -1)
        }
    } else if start > d {
        Some(this)
    } else {
        season_from(d, s, 1)
    }
}

/// The month `m` before `d` (`past`; this month counts when `this_counts`) or after it.
fn month_near(d: NaiveDate, m: u32, past: bool, this_counts: bool) -> When {
    let y = d.year();
    let y = match (past, m.cmp(&d.month())) {
        (_, std::cmp::Ordering::Equal) if this_counts => y,
        (true, std::cmp::Ordering::Less) => y,
        (true, _) => y - 1,
        (false, std::cmp::Ordering::Greater) => y,
        (false, _) => y + 1,
    };
    When::Month(y, m)
}

/// The day `day` of month `m` nearest before (`past`) or after `d`, at or on it.
fn day_near(d: NaiveDate, m: u32, day: u32, past: bool) -> Option<When> {
    let this = NaiveDate::from_ymd_opt(d.year(), m, day);
    let pick = match this {
        Some(x) if past && x <= d => x,
        Some(x) if !past && x >= d => x,
        _ if past => NaiveDate::from_ymd_opt(d.year() - 1, m, day)?,
        _ => NaiveDate::from_ymd_opt(d.year() + 1, m, day)?,
    };
    Some(When::Day(pick))
}

/// The weekday `wd` strictly before (`past`) or after `d`.
fn weekday_near(d: NaiveDate, wd: Weekday, past: bool) -> Option<When> {
    let from = d.weekday().num_days_from_monday() as i64;
    let to = wd.num_days_from_monday() as i64;
    let n = if past {
        -((from - to - 1).rem_euclid(7) + 1)
    } else {
        (to - from - 1).rem_euclid(7) + 1
    };
    Some(When::Day(days(d, n)?))
}

/// An ISO date (`2023-05-07`) starting at byte `at` of `text`.
fn iso_date(text: &str, at: usize) -> Option<NaiveDate> {
    let s = text.get(at..at + 10)?;
    if text[at + 10..].starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()
}

/// A date written in figures with dots or slashes and a four-digit year (`10.01.2024`,
/// `1/10/2024`) starting at byte `at` of `text`, and where it ends. The day comes first
/// with dots (the notation's convention: `10.01.2024` is 10 January); with slashes the
/// month does, as in English-language text (`1/10/2024` is 10 January) — unless a part
/// over 12 can only be the day.
fn numeric_date(text: &str, at: usize) -> Option<(NaiveDate, usize)> {
    let rest = text.get(at..)?;
    let sep = rest.bytes().find(|b| !b.is_ascii_digit())?;
    if !matches!(sep, b'.' | b'/') {
        return None;
    }
    // The whole run of figures and that separator (a sentence's full stop left out): three
    // parts, or it is not a date ("1.2.2024.5", "10.01/2024").
    let run = rest
        .bytes()
        .take_while(|&b| b.is_ascii_digit() || b == sep)
        .count();
    let run = rest[..run].trim_end_matches(char::from(sep));
    let [first, second, year] = run.split(char::from(sep)).collect::<Vec<_>>()[..] else {
        return None;
    };
    if !(1..=2).contains(&first.len()) || !(1..=2).contains(&second.len()) || year.len() != 4 {
        return None;
    }
    let (first, second): (u32, u32) = (first.parse().ok()?, second.parse().ok()?);
    let (day, month) = match (sep, first > 12, second > 12) {
        (_, true, false) => (first, second),
        (_, false, true) => (second, first),
        (b'.', _, _) => (first, second),
        _ => (second, first),
    };
    Some((
        NaiveDate::from_ymd_opt(year.parse().ok()?, month, day)?,
        at + run.len(),
    ))
}

/// The expression starting at word `i`: how many words it takes and when it means.
fn parse_at(
    text: &str,
    words: &[Token],
    i: usize,
    anchor: NaiveDate,
    future: bool,
) -> Option<(usize, When)> {
    let w = |k: usize| words.get(i + k).map_or("", |t| t.word.as_str());
    let past = !future;

    // An ISO date: three words (`2023`, `05`, `07`) joined by hyphens.
    if let Some(d) = iso_date(text, words[i].start)
        && words
            .get(i + 2)
            .is_some_and(|t| t.end == words[i].start + 10)
    {
        return Some((3, When::Day(d)));
    }
    // A date in figures: three words (`10`, `01`, `2024`) joined by dots or slashes.
    if let Some((d, end)) = numeric_date(text, words[i].start)
        && words.get(i + 2).is_some_and(|t| t.end == end)
    {
        return Some((3, When::Day(d)));
    }
    // The day before yesterday, the day after tomorrow.
    if w(0) == "the" && w(1) == "day" {
        match (w(2), w(3)) {
            ("before", "yesterday") => return Some((4, When::Day(days(anchor, -2)?))),
            ("after", "tomorrow") => return Some((4, When::Day(days(anchor, 2)?))),
            _ => {}
        }
    }
    match w(0) {
        "yesterday" => return Some((1, When::Day(days(anchor, -1)?))),
        "today" | "tonight" => return Some((1, When::Day(anchor))),
        "tomorrow" => return Some((1, When::Day(days(anchor, 1)?))),
        _ => {}
    }
    // N units ago, N units from now, in N units.
    let counted = |k: usize| -> Option<(usize, u32, &str)> {
        // `a couple of days`, `a few` is too vague to count.
        if w(k) == "a" && w(k + 1) == "couple" && w(k + 2) == "of" {
            return Some((4, 2, w(k + 3)));
        }
        Some((2, number(w(k))?, w(k + 1)))
    };
    if let Some((n, count, unit)) = counted(0) {
        let by = match (w(n), w(n + 1)) {
            ("ago", _) => Some((-(count as i64), 1)),
            ("from", "now") => Some((count as i64, 2)),
            _ => None,
        };
        if let Some((k, extra)) = by
            && let Some(when) = shift(anchor, unit, k)
        {
            return Some((n + extra, when));
        }
    }
    if w(0) == "in"
        && let Some((n, count, unit)) = counted(1)
        && let Some(when) = shift(anchor, unit, count as i64)
    {
        return Some((n + 1, when));
    }
    // last / next / this (coming, past, previous) + a unit, a weekday, a month, a season.
    let dir = match w(0) {
        "last" | "past" | "previous" => Some(-1),
        "next" | "coming" => Some(1),
        "this" => Some(0),
        _ => None,
    };
    if let Some(dir) = dir {
        let unit = w(1);
        let when = match unit {
            "week" => week(anchor, dir),
            "weekend" => weekend(anchor, dir),
            "month" => Some(month_of(months(anchor, dir)?)),
            "year" => Some(When::Year(anchor.year() + dir as i32)),
            "night" if dir == -1 => Some(When::Day(days(anchor, -1)?)),
            "morning" | "afternoon" | "evening" if dir == 0 => Some(When::Day(anchor)),
            _ => {
                if let Some(wd) = weekday(unit) {
                    match dir {
                        0 => Some(When::Day(days(
                            monday(anchor)?,
                            wd.num_days_from_monday() as i64,
                        )?)),
                        d => weekday_near(anchor, wd, d < 0),
                    }
                } else if let Some(m) = month(unit) {
                    Some(match dir {
                        0 => When::Month(anchor.year(), m),
                        d => month_near(anchor, m, d < 0, false),
                    })
                } else if let Some(s) = season(unit) {
                    match dir {
                        0 => season_from(anchor, s, 0),
                        d => other_season(anchor, s, d < 0),
                    }
                } else {
                    None
                }
            }
        };
        if let Some(when) = when {
            return Some((2, when));
        }
    }
    // The weekend, said after a preposition: the last one (or this one, on a weekend),
    // or the next one when the sentence speaks of the future.
    if matches!(w(0), "over" | "on" | "at" | "during") && w(1) == "the" && w(2) == "weekend" {
        let on_weekend = anchor.weekday().num_days_from_monday() >= 5;
        let n = match (future, on_weekend) {
            (_, true) => 0,
            (false, false) => -1,
            (true, false) => 0,
        };
        return Some((3, weekend(anchor, n)?));
    }
    // A weekday on its own, or after `on`.
    let (skip, word) = if w(0) == "on" { (1, w(1)) } else { (0, w(0)) };
    if let Some(wd) = weekday(word) {
        return Some((skip + 1, weekday_near(anchor, wd, past)?));
    }
    // Month names: `May 7`, `May 7th, 2023`, `7 May 2023`, `the 7th of May`, `May 2023`,
    // `in May`. A bare name counts only after a preposition or next to a number (`may`
    // and `march` are verbs too).
    let prep = matches!(
        w(0),
        "in" | "on"
            | "during"
            | "since"
            | "by"
            | "until"
            | "till"
            | "of"
            | "early"
            | "mid"
            | "late"
            | "from"
    );
    let at = if prep { 1 } else { 0 };
    if let Some(m) = month(w(at)) {
        if let Some(d) = day_of_month(w(at + 1)) {
            return match year(w(at + 2)) {
                Some(y) => Some((at + 3, When::Day(NaiveDate::from_ymd_opt(y, m, d)?))),
                None => Some((at + 2, day_near(anchor, m, d, past)?)),
            };
        }
        if let Some(y) = year(w(at + 1)) {
            return Some((at + 2, When::Month(y, m)));
        }
        if prep {
            return Some((2, month_near(anchor, m, past, true)));
        }
    }
    // `7 May [2023]`, `the 7th of May`.
    let at = if w(0) == "the" { 1 } else { 0 };
    if let Some(d) = day_of_month(w(at)) {
        let of = usize::from(w(at + 1) == "of");
        if let Some(m) = month(w(at + 1 + of)) {
            let k = at + 2 + of;
            return match year(w(k)) {
                Some(y) => Some((k + 1, When::Day(NaiveDate::from_ymd_opt(y, m, d)?))),
                None => Some((k, day_near(anchor, m, d, past)?)),
            };
        }
    }
    // `in 2022`, `since 2019`, `the summer of 2022`.
    if prep && let Some(y) = year(w(1)) {
        return Some((2, When::Year(y)));
    }
    if w(0) == "the"
        && let Some(s) = season(w(1))
    {
        if w(2) == "of"
            && let Some(y) = year(w(3))
        {
            let d = NaiveDate::from_ymd_opt(y, s.0, 1)?;
            return Some((4, season_from(d, s, 0)?));
        }
        return Some((2, other_season(anchor, s, past)?));
    }
    None
}

/// `count` units from `anchor` (negative: before it), at the unit's grain: days and weeks
/// to the day, a weekend to its two days, months to the month, years to the year.
fn shift(anchor: NaiveDate, unit: &str, count: i64) -> Option<When> {
    let unit = unit.strip_suffix('s').unwrap_or(unit);
    match unit {
        "day" => Some(When::Day(days(anchor, count)?)),
        "week" => Some(When::Day(days(anchor, 7 * count)?)),
        "fortnight" => Some(When::Day(days(anchor, 14 * count)?)),
        "weekend" => weekend(anchor, if count < 0 { count } else { count - 1 }),
        "month" => Some(month_of(months(anchor, count)?)),
        "year" => Some(When::Year(anchor.year() + count as i32)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Monday 8 May 2023.
    fn anchor() -> NaiveDate {
        NaiveDate::from_ymd_opt(2023, 5, 8).unwrap()
    }

    fn check(expr: &str, iso: &str) {
        let got = resolve(expr, anchor()).map(|w| w.iso());
        assert_eq!(got.as_deref(), Some(iso), "{expr:?}");
    }

    #[test]
    fn a_question_placed_in_time() {
        fn placed(q: &str) -> Option<(String, Bound, &str)> {
            super::placed(q, anchor()).map(|(f, b)| (f.when.iso(), b, &q[f.start..f.end]))
        }
        assert_eq!(
            placed("What did Caroline do in May 2023?"),
            Some(("2023-05".into(), Bound::Within, "in May 2023"))
        );
        assert_eq!(
            placed("What has Bob said since 2019?"),
            Some(("2019".into(), Bound::Since, "since 2019"))
        );
        assert_eq!(
            placed("What had they agreed by March?"),
            Some(("2023-03".into(), Bound::Until, "by March"))
        );
        assert_eq!(
            placed("Who objected last week?").map(|p| p.0),
            Some("2023-05-01/2023-05-07".into())
        );
        // A date after an article names a thing, not when.
        assert_eq!(placed("Who set the May 7 deadline?"), None);
        assert_eq!(placed("Who wrote a 2019 report?"), None);
        assert_eq!(placed("What did Alice say about the budget?"), None);
    }

    #[test]
    fn every_mention_of_a_date() {
        let text = "Last Friday I ran; next week I rest, and on 2 June 2023 I fly.";
        let got: Vec<String> = mentions(text, anchor())
            .iter()
            .map(|f| f.when.iso())
            .collect();
        assert_eq!(got, ["2023-05-05", "2023-05-15/2023-05-21", "2023-06-02"]);
        assert!(mentions("Nothing dated here.", anchor()).is_empty());
    }

    #[test]
    fn a_date_in_figures_puts_the_day_first_with_dots_and_the_month_first_with_slashes() {
        check("10.01.2024", "2024-01-10");
        check("1.2.2024", "2024-02-01");
        check("1/10/2024", "2024-01-10");
        check("25/12/2023", "2023-12-25");
        check("12.25.2023", "2023-12-25");
        for not_a_date in [
            "10.01.24",
            "10.01.20245",
            "1.2.2024.5",
            "31.02.2024",
            "10.01/2024",
            "100.1.2024",
        ] {
            assert_eq!(resolve(not_a_date, anchor()), None, "{not_a_date:?}");
        }
        let said = "We met on 10.01.2024. It rained.";
        let got: Vec<(String, &str)> = mentions(said, anchor())
            .iter()
            .map(|f| (f.when.iso(), &said[f.start..f.end]))
            .collect();
        assert_eq!(got, [("2024-01-10".to_string(), "10.01.2024")]);
        let q = "What is Paola planning to do on 10.01.2024?";
        let (found, _) = placed(q, anchor()).expect("placed");
        assert_eq!(
            (found.when.iso(), &q[found.start..found.end]),
            ("2024-01-10".to_string(), "10.01.2024")
        );
    }

    #[test]
    fn a_when_as_days() {
        let d = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
        assert_eq!(
            When::Month(2024, 2).days(),
            Some((d(2024, 2, 1), d(2024, 2, 29)))
        );
        assert_eq!(
            When::Month(2023, 12).days(),
            Some((d(2023, 12, 1), d(2023, 12, 31)))
        );
        assert_eq!(
            When::Year(2022).days(),
            Some((d(2022, 1, 1), d(2022, 12, 31)))
        );
        assert_eq!(
            When::Day(d(2023, 5, 8)).days(),
            Some((d(2023, 5, 8), d(2023, 5, 8)))
        );
    }

    #[test]
    fn days_relative_to_the_anchor() {
        check("yesterday", "2023-05-07");
        check("today", "2023-05-08");
        check("tonight", "2023-05-08");
        check("tomorrow", "2023-05-09");
        check("the day before yesterday", "2023-05-06");
        check("the day after tomorrow", "2023-05-10");
        check("last night", "2023-05-07");
        check("this morning", "2023-05-08");
        check("two days ago", "2023-05-06");
        check("3 days ago", "2023-05-05");
        check("a couple of days ago", "2023-05-06");
        check("a week ago", "2023-05-01");
        check("two weeks ago", "2023-04-24");
        check("in three days", "2023-05-11");
        check("in 2 weeks", "2023-05-22");
        check("ten days from now", "2023-05-18");
    }

    #[test]
    fn weekdays_count_from_the_anchor() {
        // The anchor is a Monday.
        check("last Friday", "2023-05-05");
        check("last Monday", "2023-05-01");
        check("next Friday", "2023-05-12");
        check("next Monday", "2023-05-15");
        check("this Friday", "2023-05-12");
        check("on Tuesday", "2023-05-02");
        check("Saturday", "2023-05-06");
        // A future sentence looks forward.
        let f = find("I will see her on Tuesday.", anchor()).unwrap();
        assert_eq!(f.when.iso(), "2023-05-09");
        let f = find("We'll meet Thursday", anchor()).unwrap();
        assert_eq!(f.when.iso(), "2023-05-11");
    }

    #[test]
    fn weeks_weekends_months_years_and_seasons() {
        check("last week", "2023-05-01/2023-05-07");
        check("this week", "2023-05-08/2023-05-14");
        check("next week", "2023-05-15/2023-05-21");
        check("last weekend", "2023-05-06/2023-05-07");
        check("this weekend", "2023-05-13/2023-05-14");
        check("next weekend", "2023-05-20/2023-05-21");
        check("over the weekend", "2023-05-06/2023-05-07");
        check("two weekends ago", "2023-04-29/2023-04-30");
        check("last month", "2023-04");
        check("this month", "2023-05");
        check("next month", "2023-06");
        check("two months ago", "2023-03");
        check("a month ago", "2023-04");
        check("last year", "2022");
        check("next year", "2024");
        check("three years ago", "2020");
        check("last summer", "2022-06-01/2022-08-31");
        check("this summer", "2023-06-01/2023-08-31");
        check("last winter", "2022-12-01/2023-02-28");
        check("next spring", "2024-03-01/2024-05-31");
        check("the summer of 2021", "2021-06-01/2021-08-31");
    }

    #[test]
    fn month_names_and_dates() {
        check("in March", "2023-03");
        check("in May", "2023-05");
        check("in June", "2022-06");
        check("last March", "2023-03");
        check("last May", "2022-05");
        check("next March", "2024-03");
        check("in March 2021", "2021-03");
        check("on May 5", "2023-05-05");
        check("May 5th, 2021", "2021-05-05");
        check("the 4th of July", "2022-07-04");
        check("7 May 2023", "2023-05-07");
        check("in 2019", "2019");
        check("2023-04-30", "2023-04-30");
        // Ends of months and leap days are calendar arithmetic.
        let end_of_march = NaiveDate::from_ymd_opt(2024, 3, 31).unwrap();
        assert_eq!(
            resolve("last month", end_of_march).unwrap().iso(),
            "2024-02"
        );
        assert_eq!(
            resolve("yesterday", end_of_march).unwrap().iso(),
            "2024-03-30"
        );
        let new_year = NaiveDate::from_ymd_opt(2024, 1, 1).unwrap();
        assert_eq!(resolve("yesterday", new_year).unwrap().iso(), "2023-12-31");
        assert_eq!(
            resolve("last week", new_year).unwrap().iso(),
            "2023-12-25/2023-12-31"
        );
        assert_eq!(
            resolve("this winter", new_year).unwrap().iso(),
            "2023-12-01/2024-02-29"
        );
    }

    #[test]
    fn words_that_are_not_dates_are_not_taken() {
        for s in [
            "I may go",
            "we march on",
            "one day",
            "a few days ago",
            "the last day",
            "2022 riders",
            "Fridays",
            "the other day",
        ] {
            assert_eq!(resolve(s, anchor()), None, "{s:?}");
        }
        assert_eq!(find("I may go if we march on.", anchor()), None);
    }

    #[test]
    fn the_first_expression_of_a_text_is_found_with_its_span() {
        let t = "Honestly, I went to the support group last Friday and it helped.";
        let f = find(t, anchor()).unwrap();
        assert_eq!(&t[f.start..f.end], "last Friday");
        assert_eq!(
            f.when,
            When::Day(NaiveDate::from_ymd_opt(2023, 5, 5).unwrap())
        );
        assert_eq!(f.when.words(), "5 May 2023");
        let t = "We adopted the dog two weeks ago, in April.";
        assert_eq!(
            &t[find(t, anchor()).unwrap().start..find(t, anchor()).unwrap().end],
            "two weeks ago"
        );
        assert_eq!(find("Nothing about time here.", anchor()), None);
        assert_eq!(When::Month(2023, 4).words(), "April 2023");
        assert_eq!(
            resolve("last weekend", anchor()).unwrap().words(),
            "6 May 2023 \u{2013} 7 May 2023"
        );
    }

    #[test]
    fn questions_that_ask_when() {
        for q in [
            "When did Caroline go to the LGBTQ support group?",
            "when's the vote?",
            "Do you know when did Melanie paint a sunrise?",
            "What year did Alice move?",
            "In which month was the levy raised?",
            "On what date was the treaty signed?",
            "How long ago did Bob quit?",
            "Since when has the depot been open?",
        ] {
            assert!(asks_when(q), "{q}");
        }
        for q in [
            "What did Alice say when Bob objected?",
            "Who proposed the levy?",
            "How long is the harbour line?",
            "Whenever I ask, who answers?",
        ] {
            assert!(!asks_when(q), "{q}");
        }
    }
}
