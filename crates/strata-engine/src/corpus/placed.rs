//! Where a question places itself in time, and what that leaves to read: `query` and the
//! question-focused window read what was said then.

use super::Corpus;
use crate::error::Result;
use crate::node::NodeId;
use crate::plan::Plan;
use crate::time::TimeRange;
use std::collections::HashSet;

/// What a question's own date leaves to read: [`placed`].
#[derive(Default)]
pub(crate) struct Placed {
    /// The plans cut to what was said then and what mentions then, and the question
    /// without its date expression (a time is no word a turn holds, and a month's capital
    /// is no name a set answer must hold); `None`: everything is read, the question as
    /// asked.
    pub(crate) cut: Option<(Vec<Plan>, String)>,
    /// What the history says of it; `None` when the question places itself nowhere (or
    /// cannot be placed: no time given anywhere, or a range given outright).
    pub(crate) note: Option<String>,
}

/// A range a question places itself in reaches this many days past its end: what
/// happened is told then or after. On REALTALK `dev`'s 41 questions naming a date (real
/// conversations with timed messages; scripts/realtalk), the range cut at its end held a
/// gold message in the 1,000-token `--for` window for 25 of them (everything read when
/// nothing said then bears on the rest of the question), reaching one day past it
/// 29, two days 29, not placing the questions at all 31 (docs/EVAL.md).
const TOLD_AFTER_DAYS: usize = 1;

/// A question that places what it asks about in time — "in May 2023", "last week",
/// "since 2019" ([`crate::text::time::placed`]), resolved against the latest time said in
/// the scopes (a question about a conversation is asked after it) — reads what was said
/// then (and the day after: [`TOLD_AFTER_DAYS`]), as `query.during` would, and what was
/// said at another time that mentions a date then (a July turn's "last month" for June: [`crate::text::time::mentions`], resolved
/// against that turn's own time), when no range was given and the scopes hold something
/// said then. A date after an article names a thing ("the May 7 deadline") and restricts
/// nothing; scopes without times, or with nothing said then, are read whole. The note
/// says which.
pub(crate) fn placed(
    corpus: &Corpus<'_>,
    question: &str,
    plans: &[Plan],
    given: &TimeRange,
) -> Result<Placed> {
    use crate::text::time::{Bound, mentions, placed};
    use crate::time::{Time, TimeSpan};
    let latest = plans
        .iter()
        .flat_map(|p| p.sources.iter().filter_map(|s| s.time))
        .max();
    let (Some(latest), true) = (latest, given.is_all()) else {
        return Ok(Placed::default());
    };
    let Some((found, bound)) = placed(question, latest.date()) else {
        return Ok(Placed::default());
    };
    let Some((first, last)) = found.when.days() else {
        return Ok(Placed::default());
    };
    // What happened on a day is told then or after ("we made pasta" the next evening), and
    // a message's time may be written in another zone than the day the question names.
    let last = (0..TOLD_AFTER_DAYS).fold(last, |d, _| d.succ_opt().unwrap_or(d));
    let range = TimeRange {
        since: (bound != Bound::Until).then(|| Time::from_date(first)),
        until: (bound != Bound::Since).then(|| Time::from_date(last)),
    };
    let said = &question[found.start..found.end];
    let placed_note = format!(
        "the question places itself in time ({said:?}: {}, read against {latest}, the latest time said)",
        found.when.iso()
    );
    let said_then =
        |p: &Plan, c: &crate::plan::PlannedChunk| range.contains(p.sources[c.source].time.as_ref());
    let then: usize = plans
        .iter()
        .map(|p| p.chunks.iter().filter(|c| said_then(p, c)).count())
        .sum();
    if then == 0 {
        return Ok(Placed {
            cut: None,
            note: Some(format!(
                "{placed_note}: nothing was said {range}, so everything is read, the question as asked"
            )),
        });
    }
    let (mut mentioning, mut total) = (0, 0);
    let mut kept = Vec::new();
    for p in plans {
        total += p.chunks.len();
        // Chunks said at another time: do they mention a date in the range?
        let others: Vec<(NodeId, Time)> = p
            .chunks
            .iter()
            .filter(|c| !said_then(p, c))
            .filter_map(|c| p.sources[c.source].time.map(|t| (c.full, t)))
            .collect();
        let ids: Vec<NodeId> = others.iter().map(|(id, _)| *id).collect();
        let mut mention: HashSet<NodeId> = HashSet::new();
        for ((id, t), n) in others.iter().zip(corpus.nodes(&ids)?) {
            let Some(n) = n else { continue };
            if mentions(&n.text, t.date())
                .iter()
                .filter_map(|f| f.when.days())
                .any(|(a, b)| {
                    range.overlaps(Some(&TimeSpan {
                        first: Time::from_date(a),
                        last: Time::from_date(b),
                    }))
                })
            {
                mention.insert(*id);
            }
        }
        mentioning += mention.len();
        kept.extend(p.keeping(|c| said_then(p, c) || mention.contains(&c.full)));
    }
    let rest = format!("{}{}", &question[..found.start], &question[found.end..]);
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    let rest = rest
        .replace(" ?", "?")
        .replace(" .", ".")
        .replace(" ,", ",")
        .replace(" !", "!");
    Ok(Placed {
        cut: Some((kept, rest)),
        note: Some(format!(
            "{placed_note}: only what was said {range} is read ({then} chunks), and what was said at other times that mentions a date then ({mentioning}), of {total}; the question without those words"
        )),
    })
}
