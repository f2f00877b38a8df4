//! The offline policy: BM25 drives the descent, sentences are the answer.

use super::{Cited, Explorer, QueryResult};
use crate::corpus::Question;
use crate::error::Result;
use crate::node::NodeId;
use std::collections::{BTreeMap, BTreeSet};

mod cues;
mod hops;
mod retrieve;
mod score;

use cues::normalise_question;
use cues::{Cues, SameRound};
use hops::{same_round, second_hop};
use retrieve::{Retrieved, retrieve};
use score::candidates;

/// A candidate answer span: one sentence of a read chunk, or two adjacent ones.
struct Cand {
    node: NodeId,
    start: u64,
    end: u64,
    quote: String,
    tf: BTreeMap<String, u32>,
    ctx: BTreeSet<String>,
    len: usize,
    /// The sentence's own evidence (BM25 and context credit, normalised), without its
    /// chunk's: what parallel evidence is compared on.
    own: f64,
    score: f64,
    rank: usize,
    round: Option<u32>,
}

impl Cand {
    fn to_quote(&self) -> Quote {
        Quote {
            at: Cited {
                node: self.node,
                start: self.start,
                end: self.end,
            },
            text: self.quote.clone(),
        }
    }
}

/// A chosen answer span and its text.
#[derive(Clone, Debug)]
struct Quote {
    at: Cited,
    text: String,
}

/// What one pass of retrieval chose.
struct Selection {
    /// The primary citation first.
    cited: Vec<Quote>,
    covered: BTreeSet<String>,
    idf: BTreeMap<String, f64>,
    rounds: Vec<Option<u32>>,
}

impl Selection {
    fn confidence(&self) -> f64 {
        let total: f64 = self.idf.values().sum::<f64>().max(1e-9);
        self.covered
            .iter()
            .filter_map(|t| self.idf.get(t))
            .sum::<f64>()
            / total
    }
}

/// The offline policy: BM25 (fused with dense retrieval when configured) drives the
/// descent, sentences are the answer. Questions that name a round by what happened in it
/// are answered in two steps; answers that leave question terms uncovered and name
/// something the question does not (a bridge) get a second hop.
pub(crate) fn offline(mut ex: Explorer<'_>, question: &str) -> Result<QueryResult> {
    let (cited, confidence) = select(&mut ex, question)?;
    ex.finish(cited, confidence)
}

/// What the offline policy would cite for `question`, best first, and its confidence,
/// without finishing: the evidence another policy can check its answer against.
pub(crate) fn select(ex: &mut Explorer<'_>, question: &str) -> Result<(Vec<Cited>, f64)> {
    let question = ex.corpus.question(&normalise_question(question));
    if question.terms().is_empty() {
        ex.history
            .push("the question has no searchable words (only stop words?)".into());
        return Ok((Vec::new(), 0.0));
    }
    let cues = Cues::of(ex, &question);
    if let Some(SameRound { main, anchor }) = &cues.same_round
        && let Some(sel) = same_round(ex, main, anchor)?
    {
        let confidence = sel.confidence();
        return Ok((strip(sel.cited), confidence));
    }
    let Some(mut sel) = answer(ex, &question, &cues, true)? else {
        return Ok((Vec::new(), 0.0));
    };
    if sel.confidence() < 0.999 && !ex.exhausted() {
        let before: Vec<Cited> = strip(sel.cited.clone());
        second_hop(ex, &question, &cues, &mut sel)?;
        // The hop refined the answer: the first one is an earlier answer.
        if strip(sel.cited.clone()) != before {
            let draft = ex.answer_text(&before)?;
            ex.drafts.push(draft);
        }
    }
    let confidence = sel.confidence();
    Ok((strip(sel.cited), confidence))
}

fn strip(cited: Vec<Quote>) -> Vec<Cited> {
    cited.into_iter().map(|q| q.at).collect()
}

/// One pass: retrieve, score, choose. The first citation is the answer; others are added
/// when they cover question terms the chosen ones do not, or when they are parallel
/// evidence (the same terms, nearly the same score: "the three ingredients").
fn answer(
    ex: &mut Explorer<'_>,
    question: &Question,
    cues: &Cues,
    first_pass: bool,
) -> Result<Option<Selection>> {
    let cfg = ex.cfg.clone();
    if question.terms().is_empty() {
        return Ok(None);
    }
    let Some(Retrieved { chunks, chunk_rank }) = retrieve(ex, question, cues, first_pass)? else {
        return Ok(None);
    };
    let idf = question.weights().clone();
    let mut cands = candidates(ex, &chunks, &idf, &chunk_rank, cues);
    cands.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.rank.cmp(&b.rank))
            .then(a.start.cmp(&b.start))
    });
    let terms_of = |c: &Cand| -> BTreeSet<String> {
        c.tf.keys()
            .filter(|t| !cues.subjects.contains(*t) || c.ctx.contains(*t))
            .chain(c.ctx.iter())
            .cloned()
            .collect()
    };
    let Some(best) = cands.first() else {
        ex.history.push(format!(
            "read {} chunk(s): no sentence shares a word with the question",
            chunks.len()
        ));
        return Ok(None);
    };
    let best_terms = terms_of(best);
    let parallel = |c: &Cand| c.own >= 0.7 * best.own && terms_of(c).is_superset(&best_terms);
    // "Who first …" / "… last …": of the parallel candidates, the earliest (latest) round
    // is the answer.
    let mut primary = 0usize;
    if cues.earliest || cues.latest {
        let mut best_round: Option<u32> = None;
        for (i, c) in cands.iter().enumerate() {
            let (Some(r), true) = (c.round, parallel(c)) else {
                continue;
            };
            let better = match best_round {
                None => true,
                Some(b) => (cues.earliest && r < b) || (!cues.earliest && r > b),
            };
            if better {
                best_round = Some(r);
                primary = i;
            }
        }
    }
    let mut chosen: Vec<usize> = vec![primary];
    let mut covered: BTreeSet<String> = terms_of(&cands[primary]);
    for (i, c) in cands.iter().enumerate() {
        if chosen.len() >= cfg.max_citations {
            break;
        }
        if chosen.contains(&i) {
            continue;
        }
        let overlaps = chosen.iter().any(|&o| {
            let o = &cands[o];
            o.node == c.node && o.start < c.end && c.start < o.end
        });
        if overlaps {
            continue;
        }
        let ts = terms_of(c);
        let adds = ts.iter().any(|t| !covered.contains(t));
        let twin = chosen.iter().any(|&o| cands[o].quote == c.quote);
        // A question about the first (last) of something wants one item, not its twins.
        let enumerate = !(cues.earliest || cues.latest);
        if (c.score >= 0.75 * best.score && adds) || (enumerate && parallel(c) && !twin) {
            covered.extend(ts);
            chosen.push(i);
        }
    }
    // The primary citation first; the rest in reading order (chunks by rank, then position).
    let mut rest: Vec<usize> = chosen[1..].to_vec();
    rest.sort_by_key(|&i| (cands[i].rank, cands[i].start));
    let order: Vec<usize> = std::iter::once(chosen[0]).chain(rest).collect();
    ex.history.push(format!(
        "read {} chunk(s), {} candidate sentence(s); cited {}",
        chunks.len(),
        cands.len(),
        order.len()
    ));
    Ok(Some(Selection {
        cited: order.iter().map(|&i| cands[i].to_quote()).collect(),
        rounds: order.iter().map(|&i| cands[i].round).collect(),
        covered: covered
            .into_iter()
            .filter(|t| idf.contains_key(t))
            .collect(),
        idf,
    }))
}
