//! Question-focused windows (`strata context --for TEXT`): the best view of a scope for a
//! question, or for the turn about to be spoken, within a budget.
//!
//! The turns (FULL chunks) are ranked by the one retrieval seam (`Corpus::search`: BM25,
//! fused with dense retrieval when configured) and then by their place in the
//! conversation: a turn next to a strong hit shares some of its score (a discussion runs
//! over several turns), and the turn right after a hit that asks a question shares more
//! (a reply answers in other words than the question). The best turns are packed as
//! excerpts — a short turn whole, a long one cut to its sentences that bear on the
//! question — each naming its speaker, under a header of the round and date it was said in
//! (once per block), in reading order, after a short overview of the whole scope when the
//! budget allows, so that the excerpts can be placed.
//! Every part cites its exact spans, and says why it was chosen.

use super::{ContextNode, ContextWindow};
use crate::corpus::placed::{Placed, placed};
use crate::corpus::turns::{passes, turn_scores};
use crate::corpus::{Corpus, Search, Trees};
use crate::error::Result;
use crate::level::Level;
use crate::node::Span;
use crate::plan::Plan;
use crate::text;
use crate::time::TimeRange;
use crate::token;
use std::collections::{BTreeMap, HashMap};

/// The first pass (the turns that are evidence of their own, `turns::passes`) may use
/// this share of the budget.
const EVIDENCE_SHARE: f64 = 0.5;
/// A turn longer than this many tokens is shown as an excerpt: the run of its sentences that
/// bears most on the question ([`excerpt`]). Chosen on QMSum `val` (all 35 meetings; the
/// `--for` windows at 500 / 1,000 / 2,000 tokens, `scripts/qmsum/qmsum_eval.py`): at 60 the
/// windows held fewer of the gold turns' bytes than BM25's whole turns packed at 500 tokens
/// (17.2 against 17.4 %); 80 is the shortest that holds more at every budget (18.7 / 28.1 /
/// 42.0 % against 17.4 / 25.5 / 32.4 %) and keeps a gold turn whole for as many questions
/// (81.9 / 92.4 / 97.5 %; 100 and 120 hold more bytes and fewer questions' turns: 90.3 and
/// 89.0 % at 1,000; docs/EVAL.md). `query` cites excerpts of `turns::EXCERPT_TOKENS`.
const EXCERPT_TOKENS: usize = 80;
/// Turns ranked: at most this many hits are read.
const MAX_HITS: usize = 400;
/// The overview's share of the budget, and the budget below which there is none.
const OVERVIEW_SHARE: f64 = 0.1;
const OVERVIEW_MIN_BUDGET: usize = 800;

/// The window for `question` over `plan`'s scope, or `None` when the question has no
/// searchable words or none of them is found (the caller serves the unfocused window
/// instead; a question placed in time gets the unfocused window of what was said then).
/// `given` is the time range `plan` was cut to, if any: without one, a question (not a
/// turn about to be spoken: it ends with a question mark) that places itself in time
/// ("What did Caroline do in June 2023?") is read as `query` reads it — what was said
/// then, and what mentions then (`corpus::placed`).
pub(crate) fn window(
    corpus: &Corpus<'_>,
    plan: &Plan,
    question: &str,
    budget: usize,
    given: &TimeRange,
    now: u64,
) -> Result<Option<ContextWindow>> {
    focused(corpus, plan, question, budget, given, now, true)
}

fn focused(
    corpus: &Corpus<'_>,
    plan: &Plan,
    question: &str,
    budget: usize,
    given: &TimeRange,
    now: u64,
    place: bool,
) -> Result<Option<ContextWindow>> {
    super::check_budget(budget)?;
    let asked = question;
    let whole = plan;
    let Placed { cut, note: placed } = match place && text::salience::is_question(question) {
        true => placed(corpus, question, std::slice::from_ref(plan), given)?,
        false => Placed::default(),
    };
    let was_cut = cut.is_some();
    let (plan, question) = match cut {
        Some((mut plans, question)) if plans.len() == 1 => {
            (std::borrow::Cow::Owned(plans.remove(0)), question)
        }
        _ => (std::borrow::Cow::Borrowed(plan), question.to_string()),
    };
    let (plan, question) = (&*plan, question.as_str());
    let q = corpus.question(question, std::slice::from_ref(&plan.scope));
    // Nothing to search for, or nothing found: the caller serves the unfocused window; a
    // question placed in time ("What happened last week?") gets the unfocused window of
    // what was said then.
    let unfocused = |placed: Option<String>| -> Result<Option<ContextWindow>> {
        let Some(placed) = placed else {
            return Ok(None);
        };
        let mut w = super::window(corpus, plan, super::LevelChoice::Auto, budget, now)?;
        w.focus = Some(asked.to_string());
        w.placed = Some(placed);
        Ok(Some(w))
    };
    if q.terms().is_empty() {
        return unfocused(placed);
    }
    let trees = Trees::new(vec![plan.clone()]);
    let mut dense = corpus.dense();
    if let Some(d) = dense.as_mut() {
        // The question's vector, without which the fusion below is BM25 alone (a failure
        // is recorded there and the window is BM25's).
        crate::model::wait_for(d.embed_query(question, true));
    }
    let found = corpus.search(
        &trees,
        &Search {
            question: &q,
            levels: &[Level::Full],
            within: None,
            limit: MAX_HITS.min(plan.chunks.len().max(1)),
        },
        dense.as_mut(),
    )?;
    let mut texts: HashMap<(usize, usize), String> = HashMap::new();
    // The window searches with every word of the question, the words naming a speaker
    // too (a turn's label holds them): unlike `query`'s citations (`corpus::speakers`),
    // a window is judged by how much of the asked-about discussion it holds, and the
    // named speaker's turns, short and cheap, are most of it (QMSum `val`: ranking
    // without those words and the named speaker's turns first held 51.1 % of the gold
    // turns at 2,000 tokens against 53.6 %; docs/EVAL.md).
    let scored = turn_scores(
        corpus,
        &trees,
        &found.hits,
        &crate::corpus::speakers::Named::default(),
        now,
        &mut texts,
    )?;
    let mut text_of = |ci: usize| -> Result<String> {
        if let Some(t) = texts.get(&(0, ci)) {
            return Ok(t.clone());
        }
        let t = corpus.node(&plan.chunks[ci].full, now)?.text;
        texts.insert((0, ci), t.clone());
        Ok(t)
    };
    if scored.is_empty() {
        // Nothing said then bears on the rest of the question: the rest is read against
        // everything (its date may name a day nothing was said of it); when nothing
        // anywhere bears on it either, the window of what was said then.
        if was_cut && let Some(mut w) = focused(corpus, whole, question, budget, given, now, false)?
        {
            w.focus = Some(asked.to_string());
            w.placed = placed.map(|p| {
                format!("{p}; nothing said then bears on the rest of the question, so everything is read for it")
            });
            return Ok(Some(w));
        }
        return unfocused(placed);
    }
    let turns = &scored;
    let considered = turns.len();
    // Two passes: first the distinct pieces of evidence (hits, and replies to questions
    // that hit), best first, within a share of the budget, so that a window holds many of
    // them rather than the neighbourhood of one; then the discussion around them.
    let (first, second) = passes(&scored);

    // The overview, to place the excerpts.
    let mut used = 0usize;
    let mut overview = None;
    if budget >= OVERVIEW_MIN_BUDGET {
        let abs = super::overview(plan, &corpus.node(&plan.abstract_id, now)?);
        let limit = (OVERVIEW_SHARE * budget as f64) as usize;
        if let Some(item) = super::summary_of_whole(corpus, plan, &abs, limit, now, &[])? {
            used += token::count(&item.render()) + 2;
            overview = Some(item);
        }
    }

    // Excerpts, best first, while they fit. A turn's line names its speaker; where and when
    // it was said heads the block of excerpts said there (`## Round 5, 2024-01-10`), once
    // for all of them: a chat's messages are short, and a label repeated on each would take
    // a third of the window.
    struct Excerpt {
        chunk: usize,
        start: usize,
        end: usize,
        place: Option<String>,
        line: String,
        why: BTreeMap<String, f64>,
    }
    let mut chosen: Vec<Excerpt> = Vec::new();
    let mut places: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut taken = vec![false; turns.len()];
    let first_limit = used + (EVIDENCE_SHARE * (budget - used.min(budget)) as f64) as usize;
    let passes = first
        .iter()
        .map(|&i| (i, 1, first_limit))
        .chain(second.iter().map(|&i| (i, 2, budget)));
    for (ti, pass, limit) in passes {
        if used >= budget {
            break;
        }
        if taken[ti] || used >= limit {
            continue;
        }
        let t = &turns[ti];
        let body = text_of(t.chunk)?;
        let (start, end) = excerpt(corpus, &q, &body, budget - used);
        if end <= start {
            continue;
        }
        let raw = &body[start..end];
        let start = start + (raw.len() - raw.trim_start().len());
        let piece = raw.trim();
        let source = &plan.sources[plan.chunks[t.chunk].source];
        let (place, line) = match source.place_and_speaker() {
            Some((place, sp)) => (Some(place), format!("{sp}: {piece}")),
            None => (None, super::labelled(source.label(), piece)),
        };
        let header = match &place {
            Some(p) if !places.contains(p) => token::count(&place_header(p)) + 1,
            _ => 0,
        };
        let c = token::count(&line) + 1 + header;
        if used + c > limit {
            continue;
        }
        used += c;
        taken[ti] = true;
        if let Some(p) = &place {
            places.insert(p.clone());
        }
        // Its features, named, for the turns taken only.
        let mut why = t.why();
        why.insert("pass".to_string(), pass as f64);
        why.insert("rank".to_string(), chosen.len() as f64 + 1.0);
        chosen.push(Excerpt {
            chunk: t.chunk,
            start,
            end: start + piece.len(),
            place,
            line,
            why,
        });
    }
    chosen.sort_by_key(|e| (e.chunk, e.start));

    // Render; trim the weakest excerpts if the joins pushed the count over.
    loop {
        let mut parts: Vec<String> = Vec::new();
        if let Some(o) = &overview {
            parts.push(o.render());
        }
        if !chosen.is_empty() {
            let mut lines: Vec<String> = Vec::with_capacity(chosen.len());
            let mut at: Option<&str> = None;
            for e in &chosen {
                if let Some(p) = e.place.as_deref()
                    && at != Some(p)
                {
                    lines.push(place_header(p));
                }
                at = e.place.as_deref();
                lines.push(e.line.clone());
            }
            parts.push(lines.join("\n"));
        }
        let text = parts.join("\n\n");
        let tokens = token::count(&text);
        if tokens > budget {
            if let Some(worst) = chosen
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.why["rank"].total_cmp(&b.1.why["rank"]))
                .map(|(i, _)| i)
            {
                chosen.remove(worst);
                continue;
            }
            if overview.take().is_some() {
                continue;
            }
        }
        let mut nodes = Vec::new();
        if let Some(o) = &overview {
            for &(id, level, tokens) in &o.nodes {
                nodes.push(ContextNode {
                    id: id.to_hex(),
                    level,
                    tokens,
                    part: "overview",
                    covers: super::covers(plan, o.groups),
                    partial: o.partial,
                    spans: o
                        .excerpts
                        .iter()
                        .filter(|(n, _)| *n == id)
                        .map(|(_, sp)| sp.clone())
                        .collect(),
                    why: BTreeMap::new(),
                });
            }
        }
        for e in &chosen {
            let c = &plan.chunks[e.chunk];
            let src = &plan.sources[c.source];
            nodes.push(ContextNode {
                id: c.full.to_hex(),
                level: Level::Full,
                tokens: c.tokens,
                part: "evidence",
                covers: super::covers(plan, (c.group, c.group)),
                partial: e.start as u64 > 0 || (e.end as u64) < c.end - c.start,
                spans: vec![Span {
                    source: src.id.clone(),
                    start: c.start + e.start as u64,
                    end: c.start + e.end as u64,
                }],
                why: e.why.clone(),
            });
        }
        let held = chosen.len();
        return Ok(Some(ContextWindow {
            scope: plan.scope.clone(),
            level: "for".to_string(),
            budget,
            tokens,
            text,
            nodes,
            omitted: considered.saturating_sub(held),
            focus: Some(asked.to_string()),
            placed,
        }));
    }
}

/// The header of a block of excerpts said in one place: `## Round 5, 2024-01-10`.
fn place_header(place: &str) -> String {
    format!("## {place}")
}

/// The byte range of `body` to show for the question: the whole turn when it is short,
/// else the run of sentences around the one that bears most on the question (its weight of
/// question terms), grown while it stays within [`EXCERPT_TOKENS`] and `room`.
pub(crate) fn excerpt(
    corpus: &Corpus<'_>,
    q: &crate::corpus::Question,
    body: &str,
    room: usize,
) -> (usize, usize) {
    let limit = EXCERPT_TOKENS.min(room);
    let whole = token::count(body.trim());
    if whole <= limit {
        return (0, body.trim_end().len());
    }
    let sents = text::sentences(body);
    if sents.is_empty() {
        return (0, 0);
    }
    let weights = q.weights();
    let weight = |i: usize| -> f64 {
        let s = &body[sents[i].start..sents[i].end];
        let mut terms = corpus.analyze(s);
        terms.dedup();
        terms.iter().filter_map(|t| weights.get(t)).sum()
    };
    let scores: Vec<f64> = (0..sents.len()).map(weight).collect();
    let best = (0..sents.len())
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(b.cmp(&a)))
        .expect("some sentence");
    let tokens = |a: usize, b: usize| token::count(body[sents[a].start..sents[b].end].trim());
    let (mut a, mut b) = (best, best);
    if tokens(a, b) > limit {
        return (0, 0);
    }
    loop {
        // Grow towards the side whose next sentence bears more on the question; the
        // following sentence on ties (an answer tends to go on after its opening).
        let next = (b + 1 < sents.len()).then(|| (scores[b + 1], b + 1));
        let prev = (a > 0).then(|| (scores[a - 1], a - 1));
        let grow = match (prev, next) {
            (Some(p), Some(n)) => {
                if p.0 > n.0 {
                    Some((p.1, b))
                } else {
                    Some((a, n.1))
                }
            }
            (Some(p), None) => Some((p.1, b)),
            (None, Some(n)) => Some((a, n.1)),
            (None, None) => None,
        };
        match grow {
            Some((na, nb)) if tokens(na, nb) <= limit => (a, b) = (na, nb),
            _ => break,
        }
    }
    (sents[a].start, sents[b].end)
}
