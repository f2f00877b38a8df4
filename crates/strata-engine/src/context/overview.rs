//! The overview of a whole scope when its ABSTRACT does not fit: the most salient sentences
//! of the scope itself, judged against all of it.
//!
//! The ABSTRACT is made bottom-up, each node from its own inputs only (a round, a run of
//! rounds), so what recurs across a whole debate — a topic raised in round 3, objected to in
//! round 40 and voted on in round 200 — is invisible to the steps that drop sentences on the
//! way up. Here every sentence of the scope is ranked by `text::salience` over the whole
//! scope at once (each turn or section a passage, so a recurring topic is a thread, and a
//! phrase that several passages repeat — "the harbour levy" — marks what the scope is
//! about: `salience::phrases`; repeated sentences counted once), and chosen greedily by
//! salience per √cost (its tokens and its label's: [`COST_POWER`]), less their similarity
//! to what is already chosen. Each chosen part says why (`why` in the window's
//! JSON: its best sentence's salience features and its rank in the greedy order). Scopes too
//! large for that within a request keep the ABSTRACT-based overview.

use super::Item;
use crate::corpus::Corpus;
use crate::error::Result;
use crate::level::Level;
use crate::node::{NodeId, Span};
use crate::plan::Plan;
use crate::store::ScopeKind;
use crate::text::{self, salience};
use crate::token;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// Scopes with more FULL tokens than this keep the ABSTRACT-based overview.
pub(super) const MAX_TOKENS: u64 = 300_000;
/// How much similarity to a chosen sentence takes off another's salience.
const REDUNDANCY: f64 = 0.7;
/// Salience is spent per cost^COST_POWER (a knapsack's greedy order), a sentence's cost
/// being its tokens and its label's ("Okafor (round 36): "): what it takes of the budget
/// standing alone. Chosen on QMSum `val` (the unfocused window at 2,000 tokens: the share
/// of the queried turns' sentences held, 24.2 % at 0.25 without the label's cost, 24.9 %
/// at 0.4 with it, **26.1 % at 0.5**, 27.0 % at 0.75; ROUGE-2 at the summary's length
/// 3.00, 2.94, **2.93**, 2.26; docs/EVAL.md). The offline compressor's own order keeps
/// `salience::COST_POWER` (0.25; part of its identity).
const COST_POWER: f64 = 0.5;

#[derive(Clone, Serialize, Deserialize)]
struct Sent {
    chunk: usize,
    start: usize,
    end: usize,
    /// Exact token count.
    tokens: usize,
    score: f64,
    bag: salience::Bag,
}

impl Sent {
    /// Bytes / 4: what the greedy order divides by (before the exact count).
    fn approx_tokens(&self) -> f64 {
        approx_tokens(self.end - self.start)
    }
}

/// Bytes / 4, at least 1: a cost before the exact count.
fn approx_tokens(bytes: usize) -> f64 {
    (bytes as f64 / 4.0).max(1.0)
}

/// What one FULL chunk's sentences are, independent of the rest of the scope: computed
/// once per chunk (a FULL chunk is immutable and content-addressed) and shared by every
/// ranking of a scope that holds it — an appended turn analyses only itself.
struct Analysed {
    /// Trimmed spans in the chunk's text; empty sentences left out.
    spans: Vec<(usize, usize)>,
    counts: Vec<std::collections::BTreeMap<String, u32>>,
    facts: Vec<text::Facts>,
    /// Exact token counts.
    tokens: Vec<usize>,
}

/// Chunks analysed, by FULL node id; emptied when it holds more than [`ANALYSED_KEPT`]
/// (and by a forget).
static ANALYSED: std::sync::LazyLock<std::sync::Mutex<HashMap<NodeId, std::sync::Arc<Analysed>>>> =
    std::sync::LazyLock::new(Default::default);
const ANALYSED_KEPT: usize = 200_000;

fn analyse(t: &str) -> Analysed {
    let mut a = Analysed {
        spans: Vec::new(),
        counts: Vec::new(),
        facts: Vec::new(),
        tokens: Vec::new(),
    };
    for sp in text::sentences(t) {
        let raw = &t[sp.start..sp.end];
        let lead = raw.len() - raw.trim_start().len();
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            continue;
        }
        a.spans
            .push((sp.start + lead, sp.start + lead + trimmed.len()));
        a.counts.push(text::term_counts(trimmed));
        a.facts.push(text::facts(trimmed));
        a.tokens.push(token::count(trimmed));
    }
    a
}

fn analysed(id: NodeId, t: &str) -> std::sync::Arc<Analysed> {
    if let Some(a) = ANALYSED.lock().expect("analysed cache").get(&id) {
        return a.clone();
    }
    let a = std::sync::Arc::new(analyse(t));
    let mut cache = ANALYSED.lock().expect("analysed cache");
    if cache.len() >= ANALYSED_KEPT {
        cache.clear();
    }
    cache.insert(id, a.clone());
    a
}

/// A heap entry: lazy greedy (values only fall as more is chosen).
struct Entry {
    key: f64,
    idx: usize,
    /// How many sentences were picked when `key` was computed...
    round: usize,
    /// ...and its greatest similarity to them (0 for none): a stale entry is compared
    /// with the sentences picked since, not with all of them again.
    red: f64,
}
impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key
            .total_cmp(&o.key)
            .then_with(|| o.idx.cmp(&self.idx))
    }
}

/// The sentences of a scope with their salience: computed once per set of chunks (a scope
/// changes its FULL chunks with every change) and kept for the next windows of it — in
/// this process ([`RANKED`]) and, written by `Engine::compress` or an `auto` window's
/// on-demand build, in the store beside its view ([`for_view_later`]), so that a process that only reads answers
/// without ranking the scope again. No text: spans, counts by term id, scores, features.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Ranked {
    /// [`key`] of the plan it ranks.
    key: [u8; 32],
    sents: Vec<Sent>,
    /// The statistics' unit of each sentence (repeats share one).
    unit_of: Vec<usize>,
    units: usize,
    /// Each unit's features and recurring-phrase weight (the `why` of the window's JSON).
    features: Vec<salience::Features>,
    phrases: Vec<f64>,
}

/// What the store keeps as a scope's view: the tree of its last complete build, and the
/// overview's ranking of that tree's sentences when the scope is small enough to rank whole,
/// so that a process that only reads does not rank it again.
#[derive(Serialize, Deserialize)]
pub(crate) struct SavedView {
    pub(crate) plan: Plan,
    pub(crate) overview: Option<Ranked>,
}

/// Views are derived data: one of another shape is not read but replaced
/// (`Engine::last_view`). Version 2: sources carry their time. Version 3: a view is a
/// [`SavedView`] (the plan and the overview's ranking). Version 4: the plan without its
/// METADATA ids (derived from the tree when asked for; about half of a large view's bytes).
impl crate::store::Record for SavedView {
    const VERSION: u8 = 4;
}

/// The scopes ranked most recently, newest last, keyed by their chunks' ids.
static RANKED: std::sync::Mutex<Vec<([u8; 32], std::sync::Arc<Ranked>)>> =
    std::sync::Mutex::new(Vec::new());
const RANKED_KEPT: usize = 8;

/// Drops every scope's ranked sentences (a forget: none may outlive its text).
pub(crate) fn forget_cached() {
    RANKED.lock().expect("ranked cache").clear();
    ANALYSED.lock().expect("analysed cache").clear();
}

/// The code a ranking comes from: a ranking stored by a strata whose sentence splitting,
/// term counting, salience or token counting differed — or whose dependencies did (the
/// lock file: Unicode segmentation, the BPE) — is another ranking, recomputed.
static CODE: std::sync::LazyLock<[u8; 32]> = std::sync::LazyLock::new(|| {
    let mut h = blake3::Hasher::new();
    for src in [
        include_str!("overview.rs"),
        include_str!("../../../strata-core/src/text/mod.rs"),
        include_str!("../../../strata-core/src/text/salience.rs"),
        include_str!("../../../strata-core/src/text/facts.rs"),
        include_str!("../../../strata-core/src/text/words.rs"),
        include_str!("../../../strata-core/src/token.rs"),
        include_str!("../../../../Cargo.lock"),
    ] {
        h.update(&(src.len() as u64).to_le_bytes());
        h.update(src.as_bytes());
    }
    *h.finalize().as_bytes()
});

/// What a ranking of `plan` depends on: this code, the scope's kind, its FULL chunks in
/// order.
fn key(plan: &Plan) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&*CODE);
    h.update(&[plan.kind as u8]);
    for c in &plan.chunks {
        h.update(&c.full.0);
    }
    *h.finalize().as_bytes()
}

fn remember(r: &std::sync::Arc<Ranked>) {
    let mut cache = RANKED.lock().expect("ranked cache");
    if !cache.iter().any(|(k, _)| *k == r.key) {
        if cache.len() >= RANKED_KEPT {
            cache.remove(0);
        }
        cache.push((r.key, r.clone()));
    }
}

/// The ranking of `plan` to store with its view, when the scope is small enough to rank
/// whole ([`MAX_TOKENS`]; else `None`), in two steps so that it can run while a build
/// waits on its model: the chunks' texts are read now, and the returned work (which owns
/// what it needs) ranks them, keeping the ranking in this process too.
pub(crate) fn for_view_later(
    corpus: &Corpus<'_>,
    plan: &Plan,
) -> Result<Option<impl FnOnce() -> Ranked + Send + 'static>> {
    if plan.full_tokens > MAX_TOKENS || plan.chunks.is_empty() {
        return Ok(None);
    }
    let key = key(plan);
    let work = match cached(&key) {
        Some(r) => Rank::Known(r),
        None => Rank::From(Box::new(plan.clone()), full_texts(corpus, plan)?),
    };
    Ok(Some(move || match work {
        Rank::Known(r) => r.as_ref().clone(),
        Rank::From(plan, texts) => compute(&plan, key, texts).as_ref().clone(),
    }))
}

/// What [`for_view_later`] leaves to do: nothing (this process ranked these chunks), or
/// rank the texts of a plan's chunks.
enum Rank {
    Known(std::sync::Arc<Ranked>),
    From(Box<Plan>, Vec<String>),
}

/// This process's ranking of the chunks `key` names, if it has one.
fn cached(key: &[u8; 32]) -> Option<std::sync::Arc<Ranked>> {
    RANKED
        .lock()
        .expect("ranked cache")
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, r)| r.clone())
}

/// `plan`'s ranking: this process's, else `stored` (the one its view holds) when it ranks
/// these chunks with this code, else computed.
fn ranked(
    corpus: &Corpus<'_>,
    plan: &Plan,
    stored: Option<&dyn Fn() -> Result<Option<Ranked>>>,
) -> Result<std::sync::Arc<Ranked>> {
    let key = key(plan);
    if let Some(r) = cached(&key) {
        return Ok(r);
    }
    if let Some(stored) = stored
        && let Some(r) = stored()?
        && r.key == key
        && r.unit_of.len() == r.sents.len()
        && r.sents.iter().all(|s| s.chunk < plan.chunks.len())
        && r.unit_of.iter().all(|&u| u < r.units)
        && r.features.len() == r.units
        && r.phrases.len() == r.units
    {
        let r = std::sync::Arc::new(r);
        tracing::debug!(scope = %plan.scope, "overview ranking read from the store");
        remember(&r);
        return Ok(r);
    }
    let texts = full_texts(corpus, plan)?;
    Ok(compute(plan, key, texts))
}

/// The text of every FULL chunk of `plan`, in order.
fn full_texts(corpus: &Corpus<'_>, plan: &Plan) -> Result<Vec<String>> {
    let ids: Vec<NodeId> = plan.chunks.iter().map(|c| c.full).collect();
    Ok(corpus
        .nodes(&ids)?
        .into_iter()
        .map(|n| n.map(|n| n.text).unwrap_or_default())
        .collect())
}

/// The FULL text of each of `plan`'s chunks numbered in `chunks`, by number.
fn chunk_texts(
    corpus: &Corpus<'_>,
    plan: &Plan,
    chunks: &[usize],
) -> Result<HashMap<usize, String>> {
    let ids: Vec<NodeId> = chunks.iter().map(|&ci| plan.chunks[ci].full).collect();
    Ok(chunks
        .iter()
        .zip(corpus.nodes(&ids)?)
        .map(|(&ci, n)| (ci, n.map(|n| n.text).unwrap_or_default()))
        .collect())
}

/// `plan`'s ranking from its chunks' `texts` (CPU only; kept in this process).
fn compute(plan: &Plan, key: [u8; 32], texts: Vec<String>) -> std::sync::Arc<Ranked> {
    let ids: Vec<NodeId> = plan.chunks.iter().map(|c| c.full).collect();
    let chunks: Vec<std::sync::Arc<Analysed>> = {
        use rayon::prelude::*;
        texts
            .par_iter()
            .zip(&ids)
            .map(|(t, id)| analysed(*id, t))
            .collect()
    };
    let mut sents: Vec<Sent> = Vec::new();
    let mut ks: Vec<usize> = Vec::new();
    let mut terms = salience::TermIds::default();
    for (ci, a) in chunks.iter().enumerate() {
        for (k, &(start, end)) in a.spans.iter().enumerate() {
            sents.push(Sent {
                chunk: ci,
                start,
                end,
                tokens: a.tokens[k],
                score: 0.0,
                bag: terms.bag(&a.counts[k]),
            });
            ks.push(k);
        }
    }
    // A sentence repeated word for word is one unit for the statistics: a repeat is not a
    // thread.
    let mut unit_of: Vec<usize> = Vec::with_capacity(sents.len());
    let (scores, features, phrases): (Vec<f64>, Vec<salience::Features>, Vec<f64>) = {
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut units: Vec<salience::Unit<'_>> = Vec::new();
        let mut counts = Vec::new();
        let mut facts = Vec::new();
        for (s, &k) in sents.iter().zip(&ks) {
            let t = &texts[s.chunk][s.start..s.end];
            let u = *first.entry(t).or_insert_with(|| {
                units.push(salience::Unit {
                    text: t,
                    passage: match plan.kind {
                        ScopeKind::Debate => plan.chunks[s.chunk].source,
                        ScopeKind::Doc => s.chunk,
                    },
                });
                counts.push(&chunks[s.chunk].counts[k]);
                facts.push(&chunks[s.chunk].facts[k]);
                units.len() - 1
            });
            unit_of.push(u);
        }
        let features = salience::features_of(&units, &counts, &facts);
        let phrases = salience::phrases(&units);
        let scores = features
            .iter()
            .zip(&phrases)
            .map(|(f, &p)| salience::overview_score(f, p))
            .collect();
        (scores, features, phrases)
    };
    for (s, &u) in sents.iter_mut().zip(&unit_of) {
        s.score = scores[u];
    }
    let r = std::sync::Arc::new(Ranked {
        key,
        sents,
        unit_of,
        units: scores.len(),
        features,
        phrases,
    });
    tracing::debug!(scope = %plan.scope, sentences = r.sents.len(), "overview ranking computed");
    remember(&r);
    r
}

/// The overview of `plan`'s scope in at most `limit` tokens, or `None` when the scope is
/// too large for it (see [`MAX_TOKENS`]) or nothing fits. No sentence of a group that
/// `shown` holds the window's text of (a round placed below the overview) and that this
/// text quotes is chosen.
pub(super) fn salient(
    corpus: &Corpus<'_>,
    plan: &Plan,
    limit: usize,
    now: u64,
    shown: &[Option<&str>],
) -> Result<Option<Item>> {
    let _ = now;
    if plan.full_tokens > MAX_TOKENS || plan.chunks.is_empty() {
        return Ok(None);
    }
    let stored = || match corpus.view::<SavedView>(&plan.scope) {
        Ok(v) => Ok(v.and_then(|v| v.overview)),
        // A view this strata does not read: derived data, replaced at the next build.
        Err(crate::Error::DataCorruption(_)) => Ok(None),
        Err(e) => Err(e),
    };
    // Ranked (a stored ranking carries its sentences' counts) before the first count: a
    // count needs the tokenizer, which a command loads on another thread meanwhile.
    let ranked = ranked(corpus, plan, Some(&stored))?;
    let header = "## Overview (salient sentences)".to_string();
    let header_cost = token::count(&header) + 2;
    if limit <= header_cost {
        return Ok(None);
    }
    let Ranked {
        sents,
        unit_of,
        units,
        features,
        phrases,
        ..
    } = &*ranked;
    if sents.is_empty() {
        return Ok(None);
    }
    let mut taken_unit = vec![false; *units];
    let labels: Vec<Option<String>> = (0..plan.chunks.len())
        .map(|ci| plan.chunk_label(ci))
        .collect();
    // A sentence is valued standing alone: its tokens and its label's as placed below
    // (the label, ": " and the line break), whether or not its turn has a part in the
    // window already.
    let label_cost: Vec<f64> = labels
        .iter()
        .map(|l| l.as_ref().map_or(0.0, |l| approx_tokens(l.len()) + 2.0))
        .collect();
    let key = |s: &Sent, redundancy: f64| {
        (s.score - REDUNDANCY * redundancy)
            / (s.approx_tokens() + label_cost[s.chunk]).powf(COST_POWER)
    };
    // Sentences the window quotes below the overview: only the chunks of those rounds
    // are read.
    let mut quoted = vec![false; sents.len()];
    let below: Vec<usize> = (0..plan.chunks.len())
        .filter(|&ci| {
            shown
                .get(plan.chunks[ci].group)
                .is_some_and(Option::is_some)
        })
        .collect();
    if !below.is_empty() {
        let texts = chunk_texts(corpus, plan, &below)?;
        for (i, s) in sents.iter().enumerate() {
            if let (Some(t), Some(Some(body))) =
                (texts.get(&s.chunk), shown.get(plan.chunks[s.chunk].group))
            {
                quoted[i] = t.get(s.start..s.end).is_some_and(|x| body.contains(x));
            }
        }
    }
    let mut heap: BinaryHeap<Entry> = sents
        .iter()
        .enumerate()
        .filter(|(i, s)| s.score > 0.0 && !quoted[*i])
        .map(|(i, s)| Entry {
            key: key(s, 0.0),
            idx: i,
            round: 0,
            red: 0.0,
        })
        .collect();
    let mut picked: Vec<usize> = Vec::new();
    let mut chunk_used = vec![false; plan.chunks.len()];
    let mut used = header_cost;
    while let Some(e) = heap.pop() {
        let s = &sents[e.idx];
        // What no longer fits is dropped before it is scored again (the budget only
        // shrinks; a part costs its tokens and at least one for its separator).
        if taken_unit[unit_of[e.idx]] || s.tokens + 1 > limit - used {
            continue;
        }
        if e.round != picked.len() {
            // Stale: re-score against what is chosen now and put it back.
            let red = picked[e.round..]
                .iter()
                .map(|&p| sents[p].bag.cosine(&s.bag))
                .fold(e.red, f64::max);
            if s.score - REDUNDANCY * red <= 0.0 {
                continue;
            }
            heap.push(Entry {
                key: key(s, red),
                idx: e.idx,
                round: picked.len(),
                red,
            });
            continue;
        }
        let label_cost = match (&labels[s.chunk], chunk_used[s.chunk]) {
            (Some(l), false) => token::count(l) + 2,
            _ => 1,
        };
        let c = s.tokens + label_cost;
        if used + c > limit {
            continue;
        }
        used += c;
        chunk_used[s.chunk] = true;
        taken_unit[unit_of[e.idx]] = true;
        picked.push(e.idx);
    }
    if picked.is_empty() {
        return Ok(None);
    }
    // Why: each chunk's best sentence's features, and its rank in the greedy order.
    let mut why: Vec<(NodeId, std::collections::BTreeMap<String, f64>)> = Vec::new();
    for (rank, &i) in picked.iter().enumerate() {
        let full = plan.chunks[sents[i].chunk].full;
        if why.iter().any(|(n, _)| *n == full) {
            continue;
        }
        let mut w = features[unit_of[i]].named();
        let p = phrases[unit_of[i]];
        w.insert("phrases".to_string(), (p * 1000.0).round() / 1000.0);
        w.insert(
            "salience".to_string(),
            (salience::overview_score(&features[unit_of[i]], p) * 1000.0).round() / 1000.0,
        );
        w.insert("rank".to_string(), rank as f64 + 1.0);
        why.push((full, w));
    }
    picked.sort_by_key(|&i| (sents[i].chunk, sents[i].start));
    // The texts of the chunks picked from, read now: only those.
    let mut from: Vec<usize> = picked.iter().map(|&i| sents[i].chunk).collect();
    from.dedup();
    let texts = chunk_texts(corpus, plan, &from)?;
    let text_of = |s: &Sent| texts[&s.chunk].get(s.start..s.end).unwrap_or_default();
    let mut body = String::new();
    let mut nodes: Vec<(NodeId, Level, u32)> = Vec::new();
    let mut excerpts: Vec<(NodeId, Span)> = Vec::new();
    let mut last_chunk = None;
    for &i in &picked {
        let s = &sents[i];
        let c = &plan.chunks[s.chunk];
        if last_chunk == Some(s.chunk) {
            body.push(' ');
        } else {
            if !body.is_empty() {
                body.push('\n');
            }
            if let Some(l) = &labels[s.chunk] {
                body.push_str(l);
                body.push_str(": ");
            }
            nodes.push((c.full, Level::Full, c.tokens));
        }
        body.push_str(text_of(s));
        excerpts.push((
            c.full,
            Span {
                source: plan.sources[c.source].id.clone(),
                start: c.start + s.start as u64,
                end: c.start + s.end as u64,
            },
        ));
        last_chunk = Some(s.chunk);
    }
    Ok(Some(Item {
        header: Some(header),
        body,
        nodes,
        order: super::OVERVIEW,
        groups: (0, plan.groups.len().saturating_sub(1)),
        partial: true,
        excerpts,
        why,
    }))
}
