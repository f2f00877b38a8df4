//! Turns ranked for a question in their conversation: the question-focused window
//! (`context --for`) packs them, and the offline navigator cites them (`query`).
//!
//! A turn's own retrieval score (BM25, fused with dense retrieval when configured) is
//! only part of its evidence: a discussion runs over several turns, so a turn next to a
//! strong hit shares some of its score, and a reply answers in other words than the
//! question it replies to, so the turn right after a hit that asks a question shares more.

use super::{Corpus, Place, Trees};
use crate::error::Result;
use crate::text::{self, salience};
use std::collections::{BTreeMap, HashMap};

/// How much of the nearby hits' scores a turn takes, and over how many turns a hit's
/// share decays by a factor e.
const NEIGHBOUR: f64 = 1.0;
const SPREAD: f64 = 6.0;
/// A hit (or reply) with at least this share of the best hit's score is evidence of its
/// own: the first pass of [`passes`].
pub(crate) const EVIDENCE_FLOOR: f64 = 0.3;
/// How much of the score of a question just before it a turn takes (its reply).
const REPLY: f64 = 0.6;
/// A turn longer than this many tokens is cited by `query` as an excerpt (a question-focused
/// window has its own length: `context::focus`).
pub(crate) const EXCERPT_TOKENS: usize = 60;

/// A turn's evidence for a question, in the conversation: its own retrieval score (over
/// the best hit's), what the hits near it lend it (a discussion runs over several turns,
/// decaying by a factor e every [`SPREAD`] turns), and what the question just before it
/// lends it when it replies (a reply answers in other words than the question).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TurnScore {
    pub(crate) plan: usize,
    pub(crate) chunk: usize,
    pub(crate) hit: f64,
    pub(crate) neighbour: f64,
    pub(crate) reply: f64,
    /// Whether a speaker the question names as the one speaking said it, or it reports
    /// what they did ("Okafor proposes …" in a clerk's minutes).
    pub(crate) named_speaker: bool,
}

impl TurnScore {
    /// Its own score plus the larger of what its neighbours or the question it replies
    /// to lend it.
    pub(crate) fn score(&self) -> f64 {
        self.hit + self.neighbour.max(self.reply)
    }

    /// Its own score plus the reply credit only: its evidence of its own.
    pub(crate) fn direct(&self) -> f64 {
        self.hit + self.reply
    }

    /// The features, named, as `why` shows them.
    pub(crate) fn why(&self) -> BTreeMap<String, f64> {
        let mut why = BTreeMap::new();
        why.insert("retrieval".to_string(), round3(self.hit));
        if self.neighbour > 0.0 {
            why.insert("neighbour".to_string(), round3(self.neighbour));
        }
        if self.reply > 0.0 {
            why.insert("reply_to_question".to_string(), round3(self.reply));
        }
        if self.named_speaker {
            why.insert("named_speaker".to_string(), 1.0);
        }
        why.insert("score".to_string(), round3(self.score()));
        why
    }
}

/// The order in which a window takes `turns`: first the distinct pieces of evidence (a
/// hit, or a reply to a question that hit, with at least [`EVIDENCE_FLOOR`] of the best
/// hit's score), those of a speaker the question names as the one speaking first (when
/// the caller names them), each by their own evidence; then every turn by its score with
/// the discussion around it. A turn may appear in both passes (it is taken once); ties in
/// reading order.
pub(crate) fn passes(turns: &[TurnScore]) -> (Vec<usize>, Vec<usize>) {
    let mut first: Vec<usize> = (0..turns.len())
        .filter(|&i| turns[i].direct() >= EVIDENCE_FLOOR)
        .collect();
    let at = |i: usize| (turns[i].plan, turns[i].chunk);
    first.sort_by(|&a, &b| {
        turns[b]
            .named_speaker
            .cmp(&turns[a].named_speaker)
            .then(turns[b].direct().total_cmp(&turns[a].direct()))
            .then(at(a).cmp(&at(b)))
    });
    let mut second: Vec<usize> = (0..turns.len()).collect();
    second.sort_by(|&a, &b| {
        turns[b]
            .score()
            .total_cmp(&turns[a].score())
            .then(at(a).cmp(&at(b)))
    });
    (first, second)
}

/// Every turn (FULL chunk, of a conversation or a document) of `trees` with some evidence
/// for the question whose FULL-level `hits` are given, in reading order (plan, chunk).
/// Scores are over the best hit's; `named` are the speakers the question names as the
/// one speaking ([`super::speakers::named`]). The texts read to tell questions (and, for
/// a hit, whether it reports what a named speaker did) are kept in `texts` by (plan,
/// chunk).
pub(crate) fn turn_scores(
    corpus: &Corpus<'_>,
    trees: &Trees,
    hits: &[(crate::node::NodeId, f32)],
    named: &super::speakers::Named,
    now: u64,
    texts: &mut HashMap<(usize, usize), String>,
) -> Result<Vec<TurnScore>> {
    let top = hits.first().map_or(0.0, |h| h.1 as f64).max(1e-9);
    let mut out = Vec::new();
    for (pi, plan) in trees.plans.iter().enumerate() {
        let n = plan.chunks.len();
        let mut hit: Vec<f64> = vec![0.0; n];
        for (id, score) in hits {
            if let Some(Place::Full(p, ci)) = trees.place(id)
                && p == pi
            {
                hit[ci] = *score as f64 / top;
            }
        }
        // A chunk is a turn when its source is one (it has a speaker or a round). Two
        // neighbouring chunks belong to one discussion when they are of one source, or both
        // turns: the documents of a knowledge base are not each other's context.
        let turn = |ci: usize| {
            let s = &plan.sources[plan.chunks[ci].source];
            s.speaker.is_some() || s.round.is_some()
        };
        let linked = |i: usize| {
            plan.chunks[i - 1].source == plan.chunks[i].source || (turn(i - 1) && turn(i))
        };
        // Exponential smoothing both ways within a discussion, linear time.
        let decay = (-1.0 / SPREAD).exp();
        let (mut fwd, mut bwd) = (vec![0.0; n], vec![0.0; n]);
        for i in 0..n {
            fwd[i] = hit[i]
                + if i > 0 && linked(i) {
                    decay * fwd[i - 1]
                } else {
                    0.0
                };
        }
        for i in (0..n).rev() {
            bwd[i] = hit[i]
                + if i + 1 < n && linked(i + 1) {
                    decay * bwd[i + 1]
                } else {
                    0.0
                };
        }
        for ci in 0..n {
            let prev = if ci > 0 { hit[ci - 1] } else { 0.0 };
            let neighbour = NEIGHBOUR * (fwd[ci] + bwd[ci] - 2.0 * hit[ci]);
            let mut reply = 0.0;
            if prev > 0.0
                && plan.chunks[ci - 1].source != plan.chunks[ci].source
                && turn(ci - 1)
                && turn(ci)
            {
                let text = match texts.entry((pi, ci - 1)) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(corpus.node(&plan.chunks[ci - 1].full, now)?.text)
                    }
                };
                if ends_with_question(text) {
                    reply = REPLY * prev;
                }
            }
            let mut named_speaker = plan.sources[plan.chunks[ci].source]
                .speaker
                .as_ref()
                .is_some_and(|s| named.subjects.contains(s));
            if !named_speaker && hit[ci] > 0.0 && !named.subjects.is_empty() {
                // Minutes: another's turn that reports what they did ("Okafor proposes …").
                let text = match texts.entry((pi, ci)) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(corpus.node(&plan.chunks[ci].full, now)?.text)
                    }
                };
                named_speaker = named.reported_in(corpus, text);
            }
            let t = TurnScore {
                plan: pi,
                chunk: ci,
                hit: hit[ci],
                neighbour,
                reply,
                named_speaker,
            };
            if t.score() > 0.0 {
                out.push(t);
            }
        }
    }
    Ok(out)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Whether a turn's last sentence asks a question.
fn ends_with_question(text: &str) -> bool {
    text::sentences(text)
        .iter()
        .rev()
        .map(|s| text[s.start..s.end].trim())
        .find(|s| !s.is_empty())
        .is_some_and(salience::is_question)
}
