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
    /// The question terms it holds: in its text, then in its context label.
    fn terms(&self) -> Vec<&str> {
        let mut terms: Vec<&str> = self.tf.keys().map(String::as_str).collect();
        terms.extend(
            self.ctx
                .iter()
                .map(String::as_str)
                .filter(|t| !self.tf.contains_key(*t)),
        );
        terms
    }

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
    /// When the question names who speaks ("what did Caroline realise …"): whether a cited
    /// passage is theirs, by who spoke it (a turn's source). An answer none of whose
    /// passages is theirs does not answer it, however many of its other words it shares
    /// (a question about one person answered from another's turn is how a false premise
    /// looks). `None`: the question names no one as speaking.
    subject_cited: Option<bool>,
    /// When a cited passage is theirs: how well their best one matches the question
    /// against the best match anyone has (its own evidence as a share of the best hit's,
    /// at most 1); the confidence is scaled by it. No constant: chosen on QMSum `train`
    /// and `val` with false premises made by naming another participant
    /// (`scripts/qmsum/qmsum_query.py --swapped`) against a share of 0.8 counting in full
    /// (docs/EVAL.md).
    subject_evidence: f64,
}

/// What the confidence of an answer keeps when no cited passage is by the speaker the
/// question asks about: below the default readiness threshold (`query.ready_threshold`,
/// 0.25) whatever share of the question it covers — another's words are not what they
/// said. (It was 0.4, set when the threshold was 0.5; with the threshold at 0.25 an answer
/// citing only someone else was ready whenever it covered 5/8 of the question.)
const SUBJECT_MISSING: f64 = 0.2;

impl Selection {
    fn confidence(&self) -> f64 {
        self.confidence_in(&self.idf)
    }

    /// The confidence with the question's terms weighted by `weights` (a term missing
    /// there keeps its own weight): the share of the weight its citations cover.
    fn confidence_in(&self, weights: &BTreeMap<String, f64>) -> f64 {
        let w = |t: &String| weights.get(t).or_else(|| self.idf.get(t)).copied();
        let total: f64 = self.idf.keys().filter_map(w).sum::<f64>().max(1e-9);
        let share = self
            .covered
            .iter()
            .filter(|t| self.idf.contains_key(*t))
            .filter_map(w)
            .sum::<f64>()
            / total;
        match self.subject_cited {
            Some(false) => share * SUBJECT_MISSING,
            Some(true) => share * self.subject_evidence,
            None => share,
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
    let question = ex.question(&normalise_question(question));
    if question.terms().is_empty() {
        ex.history
            .push("the question has no searchable words (only stop words?)".into());
        return Ok((Vec::new(), 0.0));
    }
    if let Some(note) = question.kinds_note() {
        ex.history.push(note);
    }
    // Confidence is measured in the words' weight in the text asked (a word it never
    // holds weighs most: a question whose premise is not in the text is not answered by
    // what it does hold), retrieval in the whole index's.
    let scoped = ex.corpus.scoped_weights(&question, &ex.trees.scopes())?;
    let cues = Cues::of(ex, &question);
    if let Some(SameRound { main, anchor }) = &cues.same_round
        && let Some(sel) = same_round(ex, main, anchor)?
    {
        let confidence = sel.confidence_in(&scoped);
        return Ok((strip(sel.cited), confidence));
    }
    if wants_set(ex, &question) {
        let Some(sel) = answer_set(ex, &question, &cues)? else {
            return Ok((Vec::new(), 0.0));
        };
        let confidence = sel.confidence_in(&scoped);
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
    let confidence = sel.confidence_in(&scoped);
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

/// Candidates offered to a model's judgement (the LLM policy's fan-out), and those the
/// offline cut considers, need this share of the best one's evidence.
const SET_OFFER_SHARE: f64 = 0.3;

/// The candidates of a set answer: per read chunk its best sentence (or pair) that may
/// answer, best first.
pub(crate) struct SetCandidates {
    cands: Vec<Cand>,
    /// Indices into `cands`, one per chunk, best own evidence first.
    order: Vec<usize>,
    idf: BTreeMap<String, f64>,
    /// Each read chunk's speaker, round or document (`node::context_label`).
    labels: BTreeMap<NodeId, String>,
    /// Chunks read.
    chunks: usize,
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

    /// The offline decision, from the distribution of the candidates' own evidence: of those
    /// with at least [`SET_OFFER_SHARE`] of the best one's, the ones before the largest drop
    /// between consecutive scores (the drop from the last of them to the next candidate, or
    /// to that floor when there is none, counts too), at most `cap`, as positions in
    /// `order`. One candidate far ahead of the rest is a set of one; a run of near-equal
    /// ones is cited whole.
    pub(crate) fn supported(&self, cap: usize) -> Vec<usize> {
        let n = self.order.len();
        if n == 0 {
            return Vec::new();
        }
        let floor = SET_OFFER_SHARE * self.own(0);
        let above = (0..n).take_while(|&i| self.own(i) >= floor).count().max(1);
        let after = |i: usize| {
            if i + 1 < n {
                self.own(i + 1).max(0.0)
            } else {
                floor
            }
        };
        let mut cut = 0;
        let mut widest = f64::NEG_INFINITY;
        for i in 0..above {
            let drop = self.own(i) - after(i);
            if drop > widest + 1e-12 {
                widest = drop;
                cut = i;
            }
        }
        (0..=cut).take(cap).collect()
    }

    /// Why position `i` (in `order`) was cited: its features, named.
    fn why(&self, i: usize) -> String {
        let c = &self.cands[self.order[i]];
        let terms = c.terms();
        format!(
            "{}: own evidence {:.3} ({:.2} of the best; terms {}), read as chunk {}",
            self.labels.get(&c.node).map_or("?", String::as_str),
            c.own,
            c.own / self.own(0).max(1e-12),
            if terms.is_empty() {
                "none (a reply: its opening's words)".to_string()
            } else {
                terms.join(", ")
            },
            c.rank + 1
        )
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
        }
        Selection {
            cited: order.iter().map(|&i| c[i].to_quote()).collect(),
            rounds: order.iter().map(|&i| c[i].round).collect(),
            covered: covered
                .into_iter()
                .filter(|t| self.idf.contains_key(t))
                .collect(),
            idf: self.idf.clone(),
            subject_cited: None,
            subject_evidence: 1.0,
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
            "a set question ({}): read {} chunk(s), {} candidate sentence(s); {} support it, cited {}",
            crate::text::question::VERSION,
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
    let question = ex.question(&normalise_question(question));
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
        ..
    }) = retrieve(ex, question, cues, true)?
    else {
        return Ok(None);
    };
    // Replies ("Aye.", "None from me.") say what they are about through the turn they
    // answer: read them, and their openings.
    let replies = replies::replies(ex, &mut chunks)?;
    let idf = question.weights().clone();
    let mut cands = candidates(ex, &chunks, &idf, &chunk_rank, cues);
    with_replies(ex, &mut cands, &chunks, &replies, &idf, cues);
    anchored(&mut cands, question.names());
    phrase_anchored(ex, &mut cands, question, &chunks, &replies, &idf);
    contrast(&mut cands, &idf);
    // One candidate per chunk: its best eligible sentence (or pair).
    let mut best_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
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
        order,
        idf,
        labels: chunks
            .iter()
            .map(|n| (n.id, crate::node::context_label(n)))
            .collect(),
        chunks: chunks.len(),
    }))
}

/// Keeps to the set's anchor: the names a set question writes ("Which members objected to
/// the *Sharynvun* bridge toll?") restrict what it asks about, so a chunk that holds none of
/// them — in its sentences or its speaker/round label — is no member, whatever other word
/// of the question it holds ("the deadline of danger…" for "Which deadlines were set for
/// the Sharynvun toll?"). Only when some chunk read holds every name the chunks hold at
/// all; a name no chunk holds restricts nothing. Zeroes the others' evidence.
fn anchored(cands: &mut [Cand], names: &std::collections::HashSet<String>) {
    if names.is_empty() {
        return;
    }
    let mut terms_of: BTreeMap<NodeId, BTreeSet<&str>> = BTreeMap::new();
    for c in cands.iter().filter(|c| c.own > 0.0) {
        let e = terms_of.entry(c.node).or_default();
        e.extend(c.tf.keys().map(String::as_str));
        e.extend(c.ctx.iter().map(String::as_str));
    }
    let held: BTreeSet<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|t| terms_of.values().any(|ts| ts.contains(t)))
        .collect();
    if held.is_empty() {
        return;
    }
    let members: BTreeSet<NodeId> = terms_of
        .iter()
        .filter(|(_, ts)| held.iter().all(|t| ts.contains(t)))
        .map(|(n, _)| *n)
        .collect();
    if members.is_empty() {
        return;
    }
    for c in cands.iter_mut() {
        if !members.contains(&c.node) {
            c.own = 0.0;
        }
    }
}

/// Keeps to the set's anchor when it is a phrase. Two words of the question that stand side
/// by side in it and somewhere in the chunks read ("Who opposed the *stadium roof*?") name
/// what it asks about, as a name does; a chunk refers to the phrase when it holds its more
/// specific word (the higher idf: "tourism" of "tourism industry"), anywhere — a reply
/// through the turn it answers too. When some chunk with evidence refers to one, a candidate
/// in a chunk that refers to none and holds a single word of the question ("oppose", said of
/// something else) is no member: before the contrast, which would otherwise take that word,
/// held by few chunks, for what tells the members apart, and drop every turn about the roof
/// that objects in other words ("argues against"). A candidate holding two or more of the
/// question's words keeps its evidence ("I want to offer an amendment" for "Which amendments
/// were offered to the schedule?"). No list: the phrases come from the question and the text.
fn phrase_anchored(
    ex: &Explorer<'_>,
    cands: &mut [Cand],
    question: &Question,
    chunks: &[crate::node::Node],
    replies: &std::collections::HashMap<NodeId, replies::ReplyTo>,
    idf: &BTreeMap<String, f64>,
) {
    let asked = ex.corpus.adjacent_pairs(question.text());
    if asked.is_empty() {
        return;
    }
    let mut phrases: BTreeSet<(String, String)> = BTreeSet::new();
    let mut words: BTreeMap<NodeId, BTreeSet<String>> = BTreeMap::new();
    for n in chunks {
        let mut text = n.text.clone();
        if let Some(r) = replies.get(&n.id) {
            text.push('\n');
            text.push_str(&r.opening);
        }
        let pairs = ex.corpus.adjacent_pairs(&text);
        phrases.extend(pairs.into_iter().filter(|p| asked.contains(p)));
        words.insert(n.id, ex.corpus.analyze(&text).into_iter().collect());
    }
    let weight = |t: &String| idf.get(t).copied().unwrap_or(0.0);
    let specific: BTreeSet<&String> = phrases
        .iter()
        .map(|(a, b)| if weight(a) > weight(b) { a } else { b })
        .collect();
    let refers = |n: &NodeId| {
        words
            .get(n)
            .is_some_and(|ws| specific.iter().any(|t| ws.contains(*t)))
    };
    if !cands.iter().any(|c| c.own > 0.0 && refers(&c.node)) {
        return;
    }
    for c in cands.iter_mut() {
        let held = c.tf.len() + c.ctx.iter().filter(|t| !c.tf.contains_key(*t)).count();
        if held < 2 && !refers(&c.node) {
            c.own = 0.0;
        }
    }
}

/// Re-scores set candidates by what tells them apart. The chunks a set question reads were
/// retrieved for its words, so the words they all share (most often its topic: "the
/// harbour levy") say nothing about which of them answer; the words only some hold (what
/// was done about it: "objected", "deadlines") do. Each question term is weighted by its
/// idf in the index times its idf among the chunks that compete, `ln((N + 1) / df)` with
/// `N` those chunks and `df` those where the term is in a candidate (its sentences or its
/// speaker/round label); a candidate's own evidence becomes the weight of the terms it
/// covers over the weight of them all, and one that holds only terms most of them share
/// gets none. Pseudo-relevance contrast, not a word list.
fn contrast(cands: &mut [Cand], idf: &BTreeMap<String, f64>) {
    // The pool: the chunks whose best candidate has [`SET_OFFER_SHARE`] of the best one's
    // evidence (retrieval reads more, for recall; what they hold is compared among these).
    let best = cands.iter().map(|c| c.own).fold(0.0, f64::max);
    let pool: BTreeSet<NodeId> = cands
        .iter()
        .filter(|c| c.own > 0.0 && c.own >= SET_OFFER_SHARE * best)
        .map(|c| c.node)
        .collect();
    let mut terms_of: BTreeMap<NodeId, BTreeSet<&str>> = BTreeMap::new();
    for c in cands.iter().filter(|c| pool.contains(&c.node)) {
        let e = terms_of.entry(c.node).or_default();
        e.extend(c.tf.keys().map(String::as_str));
        e.extend(c.ctx.iter().map(String::as_str));
    }
    let n = terms_of.len() as f64;
    if n < 2.0 {
        return;
    }
    let weight: BTreeMap<&str, f64> = idf
        .iter()
        .map(|(t, w)| {
            let df = terms_of
                .values()
                .filter(|ts| ts.contains(t.as_str()))
                .count() as f64;
            (t.as_str(), w * ((n + 1.0) / df.max(1.0)).ln())
        })
        .collect();
    let total: f64 = weight.values().sum::<f64>().max(1e-12);
    // The terms that tell candidates apart: in at most half of the read chunks.
    let telling: BTreeSet<&str> = idf
        .keys()
        .filter(|t| {
            let df = terms_of
                .values()
                .filter(|ts| ts.contains(t.as_str()))
                .count() as f64;
            df > 0.0 && df <= n / 2.0
        })
        .map(String::as_str)
        .collect();
    for c in cands.iter_mut() {
        if !pool.contains(&c.node) {
            c.own = 0.0;
            continue;
        }
        let covered: f64 = weight
            .iter()
            .filter(|(t, _)| c.tf.contains_key(**t) || c.ctx.contains(**t))
            .map(|(_, w)| w)
            .sum();
        let tells = telling
            .iter()
            .any(|t| c.tf.contains_key(*t) || c.ctx.contains(*t));
        // A candidate with only the words every chunk has is no answer of its own when
        // some candidate has more.
        c.own = if tells || telling.is_empty() {
            covered / total
        } else {
            0.0
        };
    }
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
            .filter(|c| c.node == n.id && c.start == r.start)
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
/// chunk competes with its best sentence, scored by its own evidence (question terms and
/// context labels, without credit from its chunk's retrieval); the cut is where those
/// scores drop most ([`SetCandidates::supported`]), at most `query.max_set_citations`.
/// The history says why each citation was chosen (its features, named).
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
    for &i in &chosen {
        ex.history.push(format!("cited {}", set.why(i)));
    }
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
    let Some(Retrieved {
        chunks,
        chunk_rank,
        turns,
    }) = retrieve(ex, question, cues, first_pass)?
    else {
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
    // A question with one answer about a conversation's turns: the best turns, as the
    // conversation ranks them, each by its best sentence (or an excerpt, when none holds a
    // question word: a reply), unless the question asks for the first or last of something
    // (the rounds decide that, below).
    let by_turn = if cues.earliest || cues.latest {
        None
    } else {
        by_turn(
            ex,
            &chunks,
            &turns,
            &idf,
            &cues.named,
            &mut cands,
            cfg.max_citations,
        )
    };
    if let Some((picked, whys)) = by_turn {
        // Confidence: the share of the question the best single cited passage covers.
        // Passages that each hold some of its words do not together answer it (a question
        // whose premise the text does not hold is matched piecemeal).
        // A question that names who speaks is answered by what they said: of the cited
        // passages, theirs decide when one is (a false premise names someone who did not
        // say it, and another's passage covering its words does not answer it).
        let weight = |ts: &BTreeSet<String>| ts.iter().filter_map(|t| idf.get(t)).sum::<f64>();
        let theirs: Vec<usize> = picked
            .iter()
            .copied()
            .filter(|&i| by_them(ex, &cands[i], &cues.named))
            .collect();
        let from = if theirs.is_empty() { &picked } else { &theirs };
        let covered: BTreeSet<String> = from
            .iter()
            .map(|&i| terms_of(&cands[i]))
            .max_by(|a, b| weight(a).total_cmp(&weight(b)))
            .unwrap_or_default();
        ex.history.push(format!(
            "read {} chunk(s), {} candidate sentence(s); cited the best {} of {} ranked turn(s)",
            chunks.len(),
            cands.len(),
            picked.len(),
            turns.len()
        ));
        for (k, (&i, why)) in picked.iter().zip(&whys).enumerate() {
            let c = &cands[i];
            let terms = c.terms();
            ex.history.push(format!(
                "cited {}: turn ranked {} ({}); its {}",
                if k == 0 { "first" } else { "also" },
                why.0 + 1,
                why.1
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.3}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if c.tf.is_empty() && c.rank < chunks.len() {
                    // A sentence of a read chunk holding no question word: the question
                    // asks only what its speaker said (reply excerpts rank after every
                    // read chunk).
                    format!(
                        "sentence of theirs (the question's only words name who speaks: {})",
                        terms.join(", ")
                    )
                } else if c.tf.is_empty() {
                    if terms.is_empty() {
                        "excerpt (no sentence holds a question word)".to_string()
                    } else {
                        format!(
                            "excerpt, a reply (no sentence holds a question word; the question \
                             it answers holds {})",
                            terms.join(", ")
                        )
                    }
                } else {
                    format!("best sentence, terms {}", terms.join(", "))
                }
            ));
        }
        // How well their best cited turn matches what the question asks, against the best
        // turn anyone has (its retrieval share without the words that name them, plus the
        // credit of a reply): a false premise names someone whose turns hold little of what
        // another's turn holds.
        let evidence = theirs
            .iter()
            .filter_map(|&i| turns.iter().find(|t| t.id == cands[i].node))
            .map(|t| t.scores.direct())
            .fold(0.0, f64::max);
        let named = || {
            cues.named
                .subjects
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        };
        // (A second hop's answer is read for its sentences, not its confidence.)
        let mut sel = chosen_of(ex, &cands, &picked, covered, idf, cues);
        sel.subject_evidence = evidence.min(1.0);
        match sel.subject_cited.filter(|_| first_pass) {
            Some(false) => ex.history.push(format!(
                "confidence: no cited turn is by {} (named as the one speaking): it keeps \
                 {SUBJECT_MISSING} of what the best cited turn covers",
                named()
            )),
            Some(true) => ex.history.push(format!(
                "confidence: what the best cited turn by {} covers, times its own evidence \
                 against the best hit's ({:.3})",
                named(),
                evidence.min(1.0)
            )),
            None => {}
        }
        return Ok(Some(sel));
    }
    let Some(best) = cands.first() else {
        ex.history.push(format!(
            "read {} chunk(s): no sentence shares a word with the question",
            chunks.len()
        ));
        return Ok(None);
    };
    let best_terms = terms_of(best);
    let (best_own, best_score) = (best.own, best.score);
    let parallel = |c: &Cand| c.own >= 0.7 * best_own && terms_of(c).is_superset(&best_terms);
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
        if (c.score >= 0.75 * best_score && adds) || (enumerate && parallel(c) && !twin) {
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
    for (k, &i) in order.iter().enumerate() {
        let c = &cands[i];
        let terms = c.terms();
        ex.history.push(format!(
            "cited {}: score {:.3} (own evidence {:.3}, chunk {} of {}), terms {}{}",
            if k == 0 { "first" } else { "also" },
            c.score,
            c.own,
            c.rank + 1,
            chunks.len(),
            terms.join(", "),
            if k > 0 && parallel(c) {
                "; parallel to the first"
            } else {
                ""
            }
        ));
    }
    Ok(Some(chosen_of(ex, &cands, &order, covered, idf, cues)))
}

/// The selection citing `cands[order]`, in that order, covering the question terms of
/// `covered` that `idf` weighs, and whether a cited turn is by a speaker the question
/// names as the one speaking.
fn chosen_of(
    ex: &Explorer<'_>,
    cands: &[Cand],
    order: &[usize],
    covered: BTreeSet<String>,
    idf: BTreeMap<String, f64>,
    cues: &Cues,
) -> Selection {
    Selection {
        cited: order.iter().map(|&i| cands[i].to_quote()).collect(),
        rounds: order.iter().map(|&i| cands[i].round).collect(),
        covered: covered
            .into_iter()
            .filter(|t| idf.contains_key(t))
            .collect(),
        idf,
        subject_cited: (!cues.named.subjects.is_empty())
            .then(|| order.iter().any(|&i| by_them(ex, &cands[i], &cues.named))),
        subject_evidence: 1.0,
    }
}

/// The terms of `idf` (a question's) that the turn before the FULL chunk `node` holds:
/// the question a reply answers.
fn replied(ex: &Explorer<'_>, node: &NodeId, idf: &BTreeMap<String, f64>) -> BTreeSet<String> {
    let Some(crate::corpus::Place::Full(pi, ci)) = ex.place(node) else {
        return BTreeSet::new();
    };
    let Some(prev) = ci.checked_sub(1).map(|c| ex.trees.plans[pi].chunks[c].full) else {
        return BTreeSet::new();
    };
    match ex.corpus.node(&prev, ex.now) {
        Ok(n) => ex
            .corpus
            .analyze(&n.text)
            .into_iter()
            .filter(|t| idf.contains_key(t))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Whether the candidate `c` is what a speaker the question names as the one speaking
/// (`named`) said or did: their own turn ([`speaks`]) unless the sentence speaks of the one
/// they speak to (`text::addressed`: "It sounds like your first yoga class was quite an
/// experience!" is no answer to "When is her first yoga class?" asked of the one who said
/// it), or a sentence that opens with their name as who acts (`Named::opens`: "Okafor
/// proposes capping the budget …" in a clerk's minutes).
fn by_them(ex: &Explorer<'_>, c: &Cand, named: &crate::corpus::speakers::Named) -> bool {
    (speaks(ex, &c.node, &named.subjects) && !crate::text::addressed(&c.quote))
        || named.opens(&ex.corpus, &c.quote)
}

/// Whether the FULL chunk `node` is a turn by one of `speakers`.
fn speaks(ex: &Explorer<'_>, node: &NodeId, speakers: &BTreeSet<String>) -> bool {
    match ex.place(node) {
        Some(crate::corpus::Place::Full(pi, ci)) => {
            let p = &ex.trees.plans[pi];
            p.sources[p.chunks[ci].source]
                .speaker
                .as_ref()
                .is_some_and(|s| speakers.contains(s))
        }
        _ => false,
    }
}

/// A cited turn's rank in its conversation and its named features.
type TurnWhy = (usize, BTreeMap<String, f64>);

/// A turn after the first is cited when its own evidence (retrieval plus reply credit) is
/// at least this share of the best hit's: what makes a turn evidence of its own in the
/// question-focused window (its first pass), so that a turn that only sits near a hit is
/// not an answer.
const EVIDENCE_SHARE: f64 = crate::corpus::turns::EVIDENCE_FLOOR;

/// The best `max` turns of `turns` that are evidence of their own ([`EVIDENCE_SHARE`]; the
/// first always), the turns of a speaker the question names as the
/// one speaking (`subjects`) first. Each is cited by its best candidate in `cands` (sorted
/// best first) or, when none of its sentences holds a question word and it replies to a
/// question that matched, by its opening (added to `cands`). Returns the candidates'
/// indices, best turn first, with each turn's rank and features; None when no turn was
/// ranked or read.
fn by_turn(
    ex: &Explorer<'_>,
    chunks: &[crate::node::Node],
    turns: &[retrieve::RankedTurn],
    idf: &BTreeMap<String, f64>,
    named: &crate::corpus::speakers::Named,
    cands: &mut Vec<Cand>,
    max: usize,
) -> Option<(Vec<usize>, Vec<TurnWhy>)> {
    let mut picked: Vec<usize> = Vec::new();
    let mut whys = Vec::new();
    // A question that names a speaker as the one speaking ("what did chen propose") asks
    // what they said or did: their turns (and turns reporting what they did, in minutes:
    // `TurnScore::named_speaker`) come first, in their order.
    let mut order: Vec<(usize, &retrieve::RankedTurn)> = turns.iter().enumerate().collect();
    if !named.subjects.is_empty() {
        order.sort_by_key(|(_, t)| !t.scores.named_speaker);
    }
    for (rank, t) in order {
        if picked.len() >= max.max(1) {
            break;
        }
        if !picked.is_empty() && t.scores.direct() < EVIDENCE_SHARE {
            continue;
        }
        if let Some(i) = cands.iter().position(|c| c.node == t.id) {
            picked.push(i);
        } else if let Some(n) = chunks
            .iter()
            .find(|n| n.id == t.id)
            .filter(|_| t.scores.reply > 0.0)
        {
            // A reply to a question that matched answers in other words: its opening, its
            // first sentences that are not questions, while they run on and fit in an
            // excerpt. (A turn that only sits near a hit and holds no question word is
            // not cited.)
            let sents = ex.corpus.sentences_of(n);
            let Some(first) = sents.first() else {
                continue;
            };
            let (a, mut b) = first.trimmed;
            for s in sents.iter().skip(1) {
                let (sa, sb) = s.trimmed;
                if !n.text[b..sa].trim().is_empty()
                    || crate::token::count(&n.text[a..sb]) > crate::corpus::turns::EXCERPT_TOKENS
                {
                    break;
                }
                b = sb;
            }
            let quote = n.text[a..b].to_string();
            let base = n.citations[0].start;
            cands.push(Cand {
                node: n.id,
                start: base + a as u64,
                end: base + (a + quote.len()) as u64,
                quote,
                tf: BTreeMap::new(),
                // A reply answers the question before it in other words: what of the
                // question asked that question holds is what the reply covers.
                ctx: replied(ex, &n.id, idf),
                len: 1,
                own: 0.0,
                score: 0.0,
                rank: chunks.len(),
                round: ex.round_of(&n.id),
            });
            picked.push(cands.len() - 1);
        } else {
            continue;
        }
        whys.push((rank, t.scores.why()));
    }
    (!picked.is_empty()).then_some((picked, whys))
}
