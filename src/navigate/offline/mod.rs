//! The offline policy: BM25 drives the descent, sentences are the answer.

use super::{Cited, Explorer, QueryResult};
use crate::corpus::Question;
use crate::error::Result;
use crate::node::NodeId;
use std::collections::{BTreeMap, BTreeSet};

mod cues;
mod hops;
mod replies;
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
    /// The speakers the question names as the one speaking ("what did Caroline realise
    /// …"): an answer none of whose passages is theirs does not answer it, however many of
    /// its other words it shares (a question about one person answered from another's
    /// turn is how a false premise looks).
    subjects: BTreeSet<String>,
}

/// What the confidence of an answer keeps when no cited passage is by the speaker the
/// question asks about: below any readiness threshold that makes sense.
const SUBJECT_MISSING: f64 = 0.4;

impl Selection {
    fn confidence(&self) -> f64 {
        let total: f64 = self.idf.values().sum::<f64>().max(1e-9);
        let share = self
            .covered
            .iter()
            .filter_map(|t| self.idf.get(t))
            .sum::<f64>()
            / total;
        if !self.subjects.is_empty() && self.subjects.is_disjoint(&self.covered) {
            share * SUBJECT_MISSING
        } else {
            share
        }
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
    if wants_set(ex, &question) {
        let Some(sel) = answer_set(ex, &question, &cues)? else {
            return Ok((Vec::new(), 0.0));
        };
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

/// Whether `question` is answered as a set: it asks for one and set answers are on
/// (`query.max_set_citations` > 0; 0 answers every question as before).
pub(crate) fn wants_set(ex: &Explorer<'_>, question: &Question) -> bool {
    question.asks_set() && ex.cfg.max_set_citations > 0
}

fn strip(cited: Vec<Quote>) -> Vec<Cited> {
    cited.into_iter().map(|q| q.at).collect()
}

/// How much of the best candidate's own evidence another candidate needs to be cited in a
/// set answer on its own strength.
const SET_SHARE: f64 = 0.6;
/// Candidates offered to a model's judgement (the LLM policy's fan-out) need this share
/// of the best one's evidence: a wider net than [`SET_SHARE`], the model decides.
const SET_OFFER_SHARE: f64 = 0.3;

/// The candidates of a set answer: per read chunk its best sentence (or pair) that may
/// answer, best first.
pub(crate) struct SetCandidates {
    cands: Vec<Cand>,
    /// Whether each performs the act the question asks about.
    performs: Vec<bool>,
    /// Indices into `cands`, one per chunk, best own evidence first.
    order: Vec<usize>,
    idf: BTreeMap<String, f64>,
    act_terms: Vec<String>,
    /// Each read chunk's speaker, round or document (`node::context_label`).
    labels: BTreeMap<NodeId, String>,
    /// Chunks read, candidate sentences scored, and the act answers were held to.
    chunks: usize,
    act: Option<crate::text::Act>,
}

/// One candidate as a model is shown it.
pub(crate) struct SetItem {
    pub(crate) quote: String,
    /// The chunk's speaker, round or document (`node::context_label`).
    pub(crate) label: String,
}

impl SetCandidates {
    fn own(&self, i: usize) -> f64 {
        self.cands[self.order[i]].own
    }

    /// The candidates worth a model's judgement, best first, at most `max`; `positions`
    /// in `order` (what [`SetCandidates::cite`] takes) are their indices.
    pub(crate) fn offered(&self, max: usize) -> Vec<SetItem> {
        let floor = SET_OFFER_SHARE * self.own(0);
        (0..self.order.len())
            .filter(|&i| self.own(i) >= floor)
            .take(max)
            .map(|i| {
                let c = &self.cands[self.order[i]];
                SetItem {
                    quote: c.quote.clone(),
                    label: self.labels.get(&c.node).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The offline decision: every candidate with [`SET_SHARE`] of the best one's own
    /// evidence, at most `cap`, as positions in `order`.
    pub(crate) fn supported(&self, cap: usize) -> Vec<usize> {
        let floor = SET_SHARE * self.own(0);
        (0..self.order.len())
            .filter(|&i| self.own(i) >= floor)
            .take(cap)
            .collect()
    }

    /// The selection of `chosen` (positions in `order`): the best first, the rest in
    /// reading order.
    fn selection(&self, chosen: &[usize]) -> Selection {
        let mut picked: Vec<usize> = chosen.iter().map(|&i| self.order[i]).collect();
        picked.sort_by(|&a, &b| {
            self.cands[b]
                .own
                .total_cmp(&self.cands[a].own)
                .then(self.cands[a].rank.cmp(&self.cands[b].rank))
        });
        let mut rest: Vec<usize> = picked.iter().skip(1).copied().collect();
        let c = &self.cands;
        rest.sort_by_key(|&i| (c[i].round, c[i].rank, c[i].start));
        let order: Vec<usize> = picked.first().copied().into_iter().chain(rest).collect();
        let mut covered: BTreeSet<String> = BTreeSet::new();
        for &i in &order {
            covered.extend(c[i].tf.keys().chain(c[i].ctx.iter()).cloned());
            if self.performs[i] {
                covered.extend(self.act_terms.iter().cloned());
            }
        }
        Selection {
            cited: order.iter().map(|&i| c[i].to_quote()).collect(),
            rounds: order.iter().map(|&i| c[i].round).collect(),
            covered: covered
                .into_iter()
                .filter(|t| self.idf.contains_key(t))
                .collect(),
            idf: self.idf.clone(),
            subjects: BTreeSet::new(),
        }
    }

    /// What to cite for `chosen` (positions in `order`), and the confidence.
    pub(crate) fn cite(&self, chosen: &[usize]) -> (Vec<Cited>, f64) {
        let sel = self.selection(chosen);
        let confidence = sel.confidence();
        (strip(sel.cited), confidence)
    }

    /// How many candidates there are (one per chunk that may answer).
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    fn describe(&self, supported: usize, cited: usize) -> String {
        format!(
            "a set question{}: read {} chunk(s), {} candidate sentence(s); {} support it, cited {}",
            match self.act {
                Some(a) => format!(" about acts of the kind {}", a.name()),
                None => String::new(),
            },
            self.chunks,
            self.cands.len(),
            supported,
            cited
        )
    }
}

/// The candidates of a set question (see [`answer_set`]); None when nothing was found.
pub(crate) fn set_candidates(
    ex: &mut Explorer<'_>,
    question: &str,
) -> Result<Option<SetCandidates>> {
    let question = ex.corpus.question(&normalise_question(question));
    if question.terms().is_empty() {
        return Ok(None);
    }
    let cues = Cues::of(ex, &question);
    gather_set(ex, &question, &cues)
}

fn gather_set(
    ex: &mut Explorer<'_>,
    question: &Question,
    cues: &Cues,
) -> Result<Option<SetCandidates>> {
    let Some(Retrieved {
        mut chunks,
        chunk_rank,
    }) = retrieve(ex, question, cues, true)?
    else {
        return Ok(None);
    };
    // Replies ("Aye.", "None from me.") say what they are about through the turn they
    // answer: read them, and their openings.
    let replies = replies::replies(ex, &mut chunks, question.act().map(|(a, _)| a))?;
    let idf = question.weights().clone();
    let total: f64 = idf.values().sum::<f64>().max(1e-9);
    let mut cands = candidates(
        ex,
        &chunks,
        &idf,
        &chunk_rank,
        cues,
        question.act().map(|(a, _)| a),
    );
    with_replies(ex, &mut cands, &chunks, &replies, &idf, cues);
    // "… with a specific date", "which deadlines": a sentence that holds a date has the
    // kind of value asked for, whether or not it says the word.
    // (Not the act's own word: "which deadlines did members commit to" credits it as
    // the act already.)
    let act_words: Vec<String> = question.act().map(|(_, t)| t.to_vec()).unwrap_or_default();
    let date_terms: Vec<&String> = idf
        .keys()
        .filter(|t| t.starts_with("date") || t.starts_with("deadlin"))
        .filter(|t| !act_words.contains(t))
        .collect();
    if !date_terms.is_empty() {
        for c in &mut cands {
            if !crate::text::facts(&c.quote).dates.is_empty() {
                let missing: f64 = date_terms
                    .iter()
                    .filter(|t| !c.tf.contains_key(**t))
                    .map(|t| idf[*t])
                    .sum();
                c.own += missing / total;
            }
        }
    }
    let act = question.act();
    let performs: Vec<bool> = cands
        .iter()
        .map(|c| {
            act.is_some_and(|(a, _)| {
                crate::text::acts_of(&c.quote).contains(&a)
                    || replies
                        .get(&c.node)
                        .is_some_and(|r| (r.whole || r.start == c.start) && r.acts.contains(&a))
            })
        })
        .collect();
    let by_act = performs.iter().any(|p| *p);
    let act_terms: Vec<String> = act.map(|(_, t)| t.to_vec()).unwrap_or_default();
    // A sentence that performs the asked act is credited with the question's words for
    // it, as if it held them. (Plain term coverage instead of BM25 was measured too: it
    // spares long sentences BM25's length normalisation but cites fewer of the
    // hand-written sets, 0.40 recall against 0.46; docs/EVAL.md.)
    for (c, p) in cands.iter_mut().zip(&performs) {
        if *p {
            let missing: f64 = act_terms
                .iter()
                .filter(|t| !c.tf.contains_key(*t) && !c.ctx.contains(*t))
                .filter_map(|t| idf.get(t))
                .sum();
            c.own += missing / total;
        }
    }
    // One candidate per chunk: its best eligible sentence (or pair).
    let mut best_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
        if by_act && !performs[i] {
            continue;
        }
        let e = best_of.entry(c.node).or_insert(i);
        let b = &cands[*e];
        if c.own > b.own || (c.own == b.own && c.len < b.len) {
            *e = i;
        }
    }
    let mut order: Vec<usize> = best_of.into_values().collect();
    order.sort_by(|&a, &b| {
        cands[b]
            .own
            .total_cmp(&cands[a].own)
            .then(cands[a].rank.cmp(&cands[b].rank))
            .then(cands[a].start.cmp(&cands[b].start))
    });
    if order.is_empty() || cands[order[0]].own <= 0.0 {
        ex.history.push(format!(
            "read {} chunk(s): no sentence shares a word with the question",
            chunks.len()
        ));
        return Ok(None);
    }
    Ok(Some(SetCandidates {
        cands,
        performs,
        order,
        idf,
        act_terms,
        labels: chunks
            .iter()
            .map(|n| (n.id, crate::node::context_label(n)))
            .collect(),
        chunks: chunks.len(),
        act: act.filter(|_| by_act).map(|(a, _)| a),
    }))
}

/// Credits each reply sentence among `cands` (adding it when it shares no word with the
/// question: "Aye.") with the words of the turn it answers.
fn with_replies(
    ex: &Explorer<'_>,
    cands: &mut Vec<Cand>,
    chunks: &[crate::node::Node],
    replies: &std::collections::HashMap<NodeId, replies::ReplyTo>,
    idf: &BTreeMap<String, f64>,
    cues: &Cues,
) {
    let total: f64 = idf.values().sum::<f64>().max(1e-9);
    for (rank, n) in chunks.iter().enumerate() {
        let Some(r) = replies.get(&n.id) else {
            continue;
        };
        if !cands.iter().any(|c| c.node == n.id && c.start == r.start) {
            let ctx = ex
                .corpus
                .analyze(&crate::node::context_label(n))
                .into_iter()
                .filter(|t| idf.contains_key(t) && !cues.objects.contains(t))
                .collect();
            cands.push(Cand {
                node: n.id,
                start: r.start,
                end: r.end,
                quote: r.quote.clone(),
                tf: BTreeMap::new(),
                ctx,
                len: ex.corpus.analyze_all(&r.quote).len().max(1),
                own: 0.0,
                score: 0.0,
                rank,
                round: ex.round_of(&n.id),
            });
        }
        let inherited: BTreeSet<String> = ex
            .corpus
            .analyze_all(&r.opening)
            .into_iter()
            .filter(|t| idf.contains_key(t))
            .collect();
        for c in cands
            .iter_mut()
            .filter(|c| c.node == n.id && (r.whole || c.start == r.start))
        {
            let new: Vec<String> = inherited
                .iter()
                .filter(|t| !c.tf.contains_key(*t) && !c.ctx.contains(*t))
                .cloned()
                .collect();
            // What the reply is about is what its opening says: full weight.
            c.own += new.iter().map(|t| idf[t]).sum::<f64>() / total;
            c.ctx.extend(new);
        }
    }
}

/// A set question ("which speakers objected to …", "list every deadline …"): every read
/// chunk that independently supports the question is cited — its best sentence — up to
/// `query.max_set_citations`. A sentence supports it when its own evidence (question terms
/// and context labels, without credit from its chunk's retrieval) reaches [`SET_SHARE`]
/// of the best sentence's. When the question asks about a dialogue act and some read
/// sentence performs it, only such sentences answer, and each is credited with the
/// question's words for the act ("I withdraw my earlier figure" answers "who changed
/// position"): an act is what a set of turns has in common, whatever their words.
fn answer_set(
    ex: &mut Explorer<'_>,
    question: &Question,
    cues: &Cues,
) -> Result<Option<Selection>> {
    let Some(set) = gather_set(ex, question, cues)? else {
        return Ok(None);
    };
    let all = set.supported(usize::MAX).len();
    let chosen = set.supported(ex.cfg.max_set_citations.max(1));
    ex.history.push(set.describe(all, chosen.len()));
    Ok(Some(set.selection(&chosen)))
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
    let mut cands = candidates(ex, &chunks, &idf, &chunk_rank, cues, None);
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
        subjects: cues.subjects.iter().cloned().collect(),
    }))
}
