//! The navigator: answers a question by exploring the level tree through a few structured
//! primitives — `peek`, `grep`, `descend`, `finish` — never by reading the whole scope. The
//! primitives ([`Explorer`]) validate every id against the working set and account for every
//! token; a policy decides which to call. The offline policy ranks with BM25 and answers
//! with the best-supported source sentences, each cited by its exact byte span.

use crate::config::QueryConfig;
use crate::engine::Engine;
use crate::error::Result;
use crate::index::Grep;
use crate::level::Level;
use crate::node::{Node, NodeId};
use crate::plan::Plan;
use crate::text;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

mod hybrid;
pub mod llm;

/// One cited source span. `quote == source_text[start..end]`, always.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Citation {
    pub source: String,
    pub start: u64,
    pub end: u64,
    pub quote: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub action: String,
    pub detail: String,
}

/// The answer and how it was found.
#[derive(Clone, Debug, Serialize)]
pub struct QueryResult {
    pub answer: String,
    pub ready: bool,
    pub confidence: f64,
    pub citations: Vec<Citation>,
    pub iterations: u32,
    pub refinement_history: Vec<String>,
    pub nodes_examined: Vec<String>,
    pub sub_calls_made: u32,
    pub tokens_processed: u64,
    pub trajectory: Vec<Step>,
    /// Model calls, tokens and cost of this query (builds it triggered included).
    pub usage: crate::model::Usage,
}

/// Where a node sits in the plans being explored.
#[derive(Clone, Copy, Debug)]
enum Place {
    Abstract(usize),
    Summary(usize, usize),
    Detailed(usize, usize),
    Full(usize, usize),
}

/// The primitives, with their safeguards and accounting.
pub struct Explorer<'a> {
    engine: &'a Engine,
    plans: Vec<Plan>,
    cfg: QueryConfig,
    now: u64,
    places: HashMap<NodeId, Place>,
    /// METADATA id → the node it tags.
    meta_of: HashMap<NodeId, NodeId>,
    /// The current working set, best first, with scores.
    pub working: Vec<(NodeId, f32)>,
    examined: Vec<NodeId>,
    examined_set: HashSet<NodeId>,
    tokens: u64,
    sub_calls: u32,
    iterations: u32,
    trajectory: Vec<Step>,
    history: Vec<String>,
    no_narrowing: u32,
    /// Dense retrieval, when the engine has an embedder: grep is hybrid.
    dense: Option<crate::hybrid::Dense>,
}

impl<'a> Explorer<'a> {
    pub fn new(engine: &'a Engine, plans: Vec<Plan>, cfg: QueryConfig, now: u64) -> Self {
        let mut places = HashMap::new();
        for (pi, p) in plans.iter().enumerate() {
            places.insert(p.abstract_id, Place::Abstract(pi));
            for (gi, g) in p.groups.iter().enumerate() {
                places.insert(g.summary, Place::Summary(pi, gi));
            }
            for (ci, c) in p.chunks.iter().enumerate() {
                places.insert(c.detailed, Place::Detailed(pi, ci));
                places.insert(c.full, Place::Full(pi, ci));
            }
        }
        let meta_of = plans
            .iter()
            .flat_map(|p| p.metadata.iter().map(|(t, m)| (*m, *t)))
            .collect();
        let working = plans.iter().map(|p| (p.abstract_id, 0.0)).collect();
        Explorer {
            engine,
            plans,
            cfg,
            now,
            places,
            meta_of,
            working,
            examined: Vec::new(),
            examined_set: HashSet::new(),
            tokens: 0,
            sub_calls: 0,
            iterations: 0,
            trajectory: Vec::new(),
            history: Vec::new(),
            no_narrowing: 0,
            dense: engine
                .embedder()
                .map(|e| crate::hybrid::Dense::new(e.clone(), &engine.config().embed)),
        }
    }

    fn step(&mut self, action: &str, detail: String) {
        self.trajectory.push(Step {
            action: action.to_string(),
            detail,
        });
    }

    fn examine(&mut self, id: NodeId) {
        if self.examined_set.insert(id) {
            self.examined.push(id);
        }
    }

    /// Keeps only ids that are in the working set (a policy may name anything).
    fn sanitise(&self, ids: &[NodeId]) -> Vec<NodeId> {
        let allowed: HashSet<NodeId> = self.working.iter().map(|(id, _)| *id).collect();
        let mut seen = HashSet::new();
        ids.iter()
            .filter(|id| allowed.contains(id) && seen.insert(**id))
            .copied()
            .collect()
    }

    pub fn budget_left(&self) -> u64 {
        self.cfg.max_tokens.saturating_sub(self.tokens)
    }

    /// Reads nodes of the working set (within the token budget).
    pub fn peek(&mut self, ids: &[NodeId]) -> Result<Vec<Node>> {
        let ids = self.sanitise(ids);
        let mut out = Vec::new();
        let mut tokens = 0;
        for id in ids {
            let n = self.engine.node(&id, self.now)?;
            if !out.is_empty() && self.tokens + n.tokens as u64 > self.cfg.max_tokens {
                break;
            }
            self.tokens += n.tokens as u64;
            tokens += n.tokens as u64;
            self.examine(id);
            out.push(n);
        }
        let levels: Vec<String> = out.iter().map(|n| n.level.to_string()).collect();
        let lv = levels.first().cloned().unwrap_or_default();
        self.step(
            "peek",
            format!("{} {lv} node(s), {tokens} tokens", out.len()),
        );
        Ok(out)
    }

    /// BM25 search over `levels` of the explored scopes, optionally within given nodes,
    /// fused with a dense (embedding) ranking of the same candidates when the engine has
    /// an embedder (see `navigate::hybrid`). Hits outside the current trees (stale index
    /// entries) are dropped.
    pub fn grep(
        &mut self,
        pattern: &str,
        levels: &[Level],
        within: Option<&[NodeId]>,
        limit: usize,
    ) -> Result<Vec<(NodeId, f32)>> {
        let scopes: Vec<String> = self.plans.iter().map(|p| p.scope.clone()).collect();
        let hits = self.engine.index().search(&Grep {
            text: pattern,
            scopes: &scopes,
            levels,
            within,
            limit,
        })?;
        let hits: Vec<(NodeId, f32)> = hits
            .into_iter()
            .filter(|h| self.places.contains_key(&h.id) || self.meta_of.contains_key(&h.id))
            .map(|h| (h.id, h.score))
            .collect();
        // With an embedder: fused with the dense ranking of the same candidates.
        let (hits, how) = self.fuse_dense(pattern, levels, within, limit, hits)?;
        let lv: Vec<&str> = levels.iter().map(|l| l.name()).collect();
        self.step(
            "grep",
            format!(
                "{pattern:?} at {}{}: {} hit(s){how}",
                lv.join("/"),
                if within.is_some() {
                    " within the working set"
                } else {
                    ""
                },
                hits.len()
            ),
        );
        Ok(hits)
    }

    /// The children of working-set nodes: ABSTRACT → SUMMARY → DETAILED → FULL.
    pub fn descend(&mut self, ids: &[NodeId]) -> Vec<NodeId> {
        let ids = self.sanitise(ids);
        let mut out = Vec::new();
        for id in &ids {
            match self.places.get(id) {
                Some(Place::Abstract(pi)) => {
                    out.extend(self.plans[*pi].groups.iter().map(|g| g.summary))
                }
                Some(Place::Summary(pi, gi)) => {
                    let p = &self.plans[*pi];
                    out.extend(p.groups[*gi].chunks.iter().map(|&ci| p.chunks[ci].detailed))
                }
                Some(Place::Detailed(pi, ci)) => out.push(self.plans[*pi].chunks[*ci].full),
                _ => {}
            }
        }
        self.step(
            "descend",
            format!("{} node(s) → {} child node(s)", ids.len(), out.len()),
        );
        out
    }

    /// Replaces the working set, keeping at least `min_keep` nodes (when there are that
    /// many), and records whether it narrowed.
    pub fn narrow_to(&mut self, mut ranked: Vec<(NodeId, f32)>, keep: usize, what: &str) {
        let before = self.working.len();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.dedup_by_key(|x| x.0);
        let keep = keep.max(self.cfg.min_keep);
        ranked.truncate(keep);
        for (id, _) in &ranked {
            self.examine(*id);
        }
        let after = ranked.len();
        self.iterations += 1;
        if after >= before {
            self.no_narrowing += 1;
        } else {
            self.no_narrowing = 0;
        }
        self.history.push(format!(
            "iteration {}: {what}: working set {before} → {after}",
            self.iterations
        ));
        self.working = ranked;
    }

    /// True when the loop must stop: iteration budget spent, token budget spent, or two
    /// iterations in a row without narrowing.
    pub fn exhausted(&self) -> bool {
        self.iterations >= self.cfg.max_iterations
            || self.tokens >= self.cfg.max_tokens
            || self.no_narrowing >= 2
    }

    fn place(&self, id: &NodeId) -> Option<Place> {
        self.places.get(id).copied()
    }

    /// Turns cited sentence ranges of FULL nodes into citations, verifying each quote
    /// against the source text. Unverifiable citations are dropped, never returned.
    pub fn finish(
        mut self,
        cited: Vec<(NodeId, u64, u64)>,
        confidence: f64,
    ) -> Result<QueryResult> {
        let mut citations = Vec::new();
        let mut quotes = Vec::new();
        let mut texts: HashMap<(usize, usize), String> = HashMap::new();
        for (id, start, end) in cited {
            let Some(Place::Full(pi, ci)) = self.place(&id) else {
                continue;
            };
            let p = &self.plans[pi];
            let c = &p.chunks[ci];
            if start < c.start || end > c.end || start >= end {
                continue;
            }
            let src = &p.sources[c.source];
            let key = (pi, c.source);
            let text = match texts.entry(key) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(self.engine.source_text(&p.scope, &src.id)?)
                }
            };
            let Some(quote) = text.get(start as usize..end as usize) else {
                continue;
            };
            quotes.push(quote.to_string());
            citations.push(Citation {
                source: src.id.clone(),
                start,
                end,
                quote: quote.to_string(),
                round: src.round,
                speaker: src.speaker.clone(),
            });
        }
        let confidence = if confidence.is_finite() {
            confidence.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let ready = !citations.is_empty() && confidence >= self.cfg.ready_threshold;
        self.step(
            "finish",
            format!(
                "{} citation(s), confidence {confidence:.2}, ready {ready}",
                citations.len()
            ),
        );
        Ok(QueryResult {
            answer: quotes.join(" … "),
            ready,
            confidence: if citations.is_empty() {
                0.0
            } else {
                confidence
            },
            citations,
            iterations: self.iterations,
            refinement_history: self.history,
            nodes_examined: self.examined.iter().map(NodeId::to_hex).collect(),
            sub_calls_made: self.sub_calls,
            tokens_processed: self.tokens,
            trajectory: self.trajectory,
            usage: Default::default(),
        })
    }
}

/// Words that say who, when and where a node is from: speakers, rounds, the names of its
/// sources (when few) and its heading path. Indexed with the node, and credited to every
/// sentence of a chunk when the question names them.
pub fn context_label(n: &Node) -> String {
    let mut parts: Vec<String> = Vec::new();
    parts.extend(n.meta.speakers.iter().cloned());
    parts.extend(n.meta.rounds.iter().map(|r| format!("round {r}")));
    let mut sources: Vec<&str> = n.citations.iter().map(|s| s.source.as_str()).collect();
    sources.dedup();
    if sources.len() <= 4 {
        for s in sources {
            // A debate turn's id is `file#line`: the file says nothing about the turn.
            if n.meta.speakers.is_empty() {
                let name = std::path::Path::new(s)
                    .file_stem()
                    .and_then(|x| x.to_str())
                    .unwrap_or(s);
                parts.push(name.replace(['-', '_', '.'], " "));
            }
        }
    }
    parts.extend(n.meta.headings.iter().cloned());
    parts.join(" ")
}

/// The offline policy: BM25 drives the descent, sentences are the answer.
/// What a question asks beyond its words: order in time, a round named by what happened in
/// it, and which named speakers are the ones speaking (subjects) rather than spoken about
/// ("who disagreed *with* Okafor").
#[derive(Debug, Default)]
struct Cues {
    earliest: bool,
    latest: bool,
    /// "What did X propose in the round where Y moved …": (main question, anchor clause).
    same_round: Option<(String, String)>,
    /// Analysed terms of speakers the question names as the speaker.
    subjects: HashSet<String>,
    /// Analysed terms of speakers the question names as someone spoken about.
    objects: HashSet<String>,
}

/// Words after which a named speaker is the one spoken about, not the one speaking.
const OBJECT_MARKERS: &[&str] = &[
    "with", "to", "against", "from", "than", "about", "for", "at", "toward", "towards",
];
const EARLIEST: &[&str] = &["first", "earliest", "initially", "originally", "initial"];
const LATEST: &[&str] = &["last", "latest", "final", "finally", "lastly", "recent"];
const SAME_ROUND: &[&str] = &[
    " in the round where ",
    " in the round when ",
    " in the round in which ",
    " in the same round as ",
    " in the same round where ",
    " in the same round that ",
];

/// Query-time normalisation: one line, single spaces, no trailing question mark or
/// quotes, so that the surface of a question does not change what it retrieves.
pub fn normalise_question(q: &str) -> String {
    q.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_matches(|c: char| c == '?' || c == '"' || c == '\'' || c == '“' || c == '”')
        .trim()
        .to_string()
}

impl Cues {
    fn of(ex: &Explorer<'_>, q: &str) -> Cues {
        let index = ex.engine.index();
        let words: Vec<String> = q
            .split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|w| !w.is_empty())
            .map(|w| w.trim_end_matches("'s").to_lowercase())
            .collect();
        let mut c = Cues {
            earliest: words.iter().any(|w| EARLIEST.contains(&w.as_str())),
            latest: words.iter().any(|w| LATEST.contains(&w.as_str())),
            ..Default::default()
        };
        let lower = format!(" {} ", q.to_lowercase());
        for m in SAME_ROUND {
            if let Some(i) = lower.find(m) {
                let main = lower[..i].trim().to_string();
                let anchor = lower[i + m.len()..].trim().to_string();
                if !main.is_empty() && !anchor.is_empty() {
                    // Keep the original casing (names) of both halves.
                    let off = i.saturating_sub(1);
                    let orig_main = q.get(..off).unwrap_or(&main).trim().to_string();
                    let orig_anchor = q
                        .get(off + m.len() - 1..)
                        .unwrap_or(&anchor)
                        .trim()
                        .to_string();
                    c.same_round = Some((orig_main, orig_anchor));
                }
                break;
            }
        }
        let mut speakers: HashSet<String> = HashSet::new();
        for p in &ex.plans {
            for s in &p.sources {
                if let Some(sp) = &s.speaker {
                    speakers.insert(sp.to_lowercase());
                }
            }
        }
        for (i, w) in words.iter().enumerate() {
            if !speakers.contains(w) {
                continue;
            }
            let object = i > 0 && OBJECT_MARKERS.contains(&words[i - 1].as_str());
            for t in index.analyze(w) {
                if object {
                    c.objects.insert(t);
                } else {
                    c.subjects.insert(t);
                }
            }
        }
        // A name both spoken and spoken about (rare) counts as the speaker.
        let both: Vec<String> = c.objects.intersection(&c.subjects).cloned().collect();
        for t in both {
            c.objects.remove(&t);
        }
        c
    }
}

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

/// What one pass of retrieval chose.
struct Selection {
    /// (FULL node, start, end, quote), the primary citation first.
    cited: Vec<(NodeId, u64, u64, String)>,
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
pub fn offline(mut ex: Explorer<'_>, question: &str) -> Result<QueryResult> {
    let question = normalise_question(question);
    let terms = ex.engine.index().analyze(&question);
    if terms.is_empty() {
        ex.history
            .push("the question has no searchable words (only stop words?)".into());
        return ex.finish(Vec::new(), 0.0);
    }
    let cues = Cues::of(&ex, &question);
    if let Some((main, anchor)) = &cues.same_round
        && let Some(sel) = same_round(&mut ex, main, anchor)?
    {
        let confidence = sel.confidence();
        return ex.finish(strip(sel.cited), confidence);
    }
    let Some(mut sel) = answer(&mut ex, &question, &cues, true)? else {
        return ex.finish(Vec::new(), 0.0);
    };
    if sel.confidence() < 0.999 && !ex.exhausted() {
        second_hop(&mut ex, &question, &cues, &mut sel)?;
    }
    let confidence = sel.confidence();
    ex.finish(strip(sel.cited), confidence)
}

fn strip(cited: Vec<(NodeId, u64, u64, String)>) -> Vec<(NodeId, u64, u64)> {
    cited.into_iter().map(|(n, s, e, _)| (n, s, e)).collect()
}

/// Names in `quote` the question does not contain, rarest first: what a second hop looks
/// for ("… baked by a chef called Tircaltir." → "Tircaltir").
fn bridges(ex: &Explorer<'_>, quote: &str, question_terms: &[String]) -> Vec<(String, f64)> {
    let index = ex.engine.index();
    let mut out: Vec<(String, f64)> = Vec::new();
    for e in text::facts(quote).entities {
        let ts = index.analyze(&e);
        if ts.is_empty() || ts.iter().all(|t| question_terms.contains(t)) {
            continue;
        }
        let idf = ts.iter().map(|t| index.idf(t)).fold(0.0, f64::max);
        if !out.iter().any(|(x, _)| *x == e) {
            out.push((e, idf));
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// Multi-hop: the first answer names something (a bridge) and leaves question terms
/// uncovered; ask for the bridge together with the uncovered terms and add the best
/// sentence that contains the bridge.
fn second_hop(
    ex: &mut Explorer<'_>,
    question: &str,
    cues: &Cues,
    sel: &mut Selection,
) -> Result<()> {
    let terms: Vec<String> = sel.idf.keys().cloned().collect();
    let uncovered: Vec<String> = terms
        .iter()
        .filter(|t| !sel.covered.contains(*t))
        .cloned()
        .collect();
    let Some((_, _, _, quote)) = sel.cited.first() else {
        return Ok(());
    };
    // The bridge comes from the sentence that matched (a cited pair's other sentence may
    // name unrelated things).
    let index = ex.engine.index();
    let matched = text::sentences(quote)
        .into_iter()
        .rev()
        .map(|s| &quote[s.start..s.end])
        .max_by_key(|s| {
            let got = index.analyze(s);
            terms.iter().filter(|t| got.contains(t)).count()
        })
        .unwrap_or(quote);
    let Some((bridge, _)) = bridges(ex, matched, &terms).into_iter().next() else {
        return Ok(());
    };
    // The uncovered words as the question has them (the index's terms are stems).
    let words: Vec<&str> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| {
            let a = index.analyze(w);
            !a.is_empty() && a.iter().all(|t| uncovered.contains(t))
        })
        .collect();
    let hop_q = format!("{bridge} {}", words.join(" "));
    ex.history
        .push(format!("second hop through {bridge:?}: {hop_q:?}"));
    let bridge_terms = index.analyze(&bridge);
    let hop_cues = Cues {
        subjects: cues.subjects.clone(),
        objects: cues.objects.clone(),
        ..Default::default()
    };
    let Some(hop) = answer(ex, &hop_q, &hop_cues, false)? else {
        return Ok(());
    };
    // The best hop sentence that names the bridge and is not cited already.
    let found = hop.cited.iter().find_map(|c| {
        let (n, s, e, q) = c;
        let fresh = !sel
            .cited
            .iter()
            .any(|(m, a, b, _)| m == n && a < e && s < b);
        let got = index.analyze(q);
        (fresh && bridge_terms.iter().all(|t| got.contains(t))).then(|| (c.clone(), got))
    });
    let Some((best, got)) = found.filter(|(_, got)| uncovered.iter().any(|t| got.contains(t)))
    else {
        ex.history
            .push("second hop found nothing that links the bridge to the question".into());
        return Ok(());
    };
    let max = ex.cfg.max_citations.max(2);
    if sel.cited.len() >= max {
        sel.cited.truncate(max - 1);
        sel.rounds.truncate(max - 1);
    }
    sel.cited.push(best);
    sel.rounds.push(None);
    sel.covered
        .extend(got.into_iter().filter(|t| sel.idf.contains_key(t)));
    Ok(())
}

/// "What did X propose in the round where Y moved …": find the anchor turn, then answer the
/// main question from X's turns of that round. None when the anchor or the speaker's turn
/// cannot be found (the caller answers the whole question instead).
fn same_round(ex: &mut Explorer<'_>, main: &str, anchor: &str) -> Result<Option<Selection>> {
    let main_cues = Cues::of(ex, main);
    if main_cues.subjects.is_empty() {
        return Ok(None);
    }
    let anchor_cues = Cues::of(ex, anchor);
    let Some(a) = answer(ex, anchor, &anchor_cues, true)? else {
        return Ok(None);
    };
    let Some(Some(round)) = a.rounds.first().copied() else {
        return Ok(None);
    };
    // The main speaker's turns in that round.
    let index = ex.engine.index();
    let mut turns: Vec<NodeId> = Vec::new();
    for p in &ex.plans {
        for c in &p.chunks {
            let s = &p.sources[c.source];
            if s.round == Some(round)
                && s.speaker.as_ref().is_some_and(|sp| {
                    index
                        .analyze(sp)
                        .iter()
                        .any(|t| main_cues.subjects.contains(t))
                })
            {
                turns.push(c.full);
            }
        }
    }
    if turns.is_empty() {
        ex.history.push(format!(
            "round {round} has no turn by the speaker the question names"
        ));
        return Ok(None);
    }
    ex.history.push(format!(
        "the anchor is in round {round}: reading {} turn(s) of the named speaker",
        turns.len()
    ));
    ex.working = turns.iter().map(|id| (*id, 1.0)).collect();
    let chunks = ex.peek(&turns)?;
    let terms = index.analyze(main);
    let idf = weights(index, main, &terms);
    let rank: HashMap<NodeId, f64> = turns.iter().map(|id| (*id, 1.0)).collect();
    let mut cands = candidates(ex, &chunks, &idf, &rank, &main_cues);
    cands.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.start.cmp(&b.start)));
    // No sentence shares a word with the main question: the turn's first sentence stands
    // for it (the question asked what this speaker said then).
    let main_pick = match cands.first() {
        Some(c) => (
            c.node,
            c.start,
            c.end,
            c.quote.clone(),
            c.tf.keys().cloned().collect(),
        ),
        None => {
            let n = &chunks[0];
            let Some(s) = text::sentences(&n.text).into_iter().next() else {
                return Ok(None);
            };
            let base = n.citations[0].start;
            (
                n.id,
                base + s.start as u64,
                base + s.end as u64,
                n.text[s.start..s.end].to_string(),
                BTreeSet::new(),
            )
        }
    };
    let mut covered: BTreeSet<String> = main_pick.4;
    covered.extend(
        main_cues
            .subjects
            .iter()
            .filter(|t| idf.contains_key(*t))
            .cloned(),
    );
    let mut cited = vec![(main_pick.0, main_pick.1, main_pick.2, main_pick.3)];
    let mut rounds = vec![Some(round)];
    if let Some(first) = a.cited.first() {
        cited.push(first.clone());
        rounds.push(Some(round));
    }
    Ok(Some(Selection {
        cited,
        covered,
        idf,
        rounds,
    }))
}

/// Read chunks, and how well each matched as a whole (normalised to the best).
type Retrieved = (Vec<Node>, HashMap<NodeId, f64>);

/// Steps 1–4 of a pass: rank scopes, pick groups, pick chunks, read them. Returns the read
/// chunks and how well each matched as a whole (normalised to the best).
fn retrieve(
    ex: &mut Explorer<'_>,
    question: &str,
    cues: &Cues,
    first_pass: bool,
) -> Result<Option<Retrieved>> {
    let cfg = ex.cfg.clone();
    let widen = if cues.earliest || cues.latest { 2 } else { 1 };
    // 1. Start at the top: read the abstracts (several scopes: rank them first).
    ex.working = ex.plans.iter().map(|p| (p.abstract_id, 0.0)).collect();
    let abstracts: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
    if ex.plans.len() > 1 {
        let hits = ex.grep(
            question,
            &[Level::Abstract, Level::Metadata],
            None,
            4 * ex.plans.len(),
        )?;
        let mut best: HashMap<NodeId, f32> = HashMap::new();
        for (id, s) in hits {
            let target = ex.meta_of.get(&id).copied().unwrap_or(id);
            if let Some(Place::Abstract(pi)) = ex.place(&target) {
                let a = ex.plans[pi].abstract_id;
                let e = best.entry(a).or_insert(0.0);
                *e = e.max(s);
            }
        }
        // Scopes without a hit stay in play (their detail may still match) but rank last.
        let ranked = abstracts
            .iter()
            .map(|a| (*a, best.get(a).copied().unwrap_or(0.0)))
            .collect();
        ex.narrow_to(
            ranked,
            abstracts.len(),
            "ranked scopes by abstract and metadata",
        );
    }
    let top: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
    if first_pass && cfg.start_level == Level::Abstract {
        ex.peek(&top)?;
    }

    // 2. Which groups? Evidence from every level beneath, mapped to its group.
    let summaries = ex.descend(&top);
    let hits = ex.grep(
        question,
        &[Level::Summary, Level::Detailed, Level::Full],
        None,
        400,
    )?;
    let mut group_score: HashMap<NodeId, f32> = HashMap::new();
    for (id, s) in &hits {
        let summary = match ex.place(id) {
            Some(Place::Summary(pi, gi)) => ex.plans[pi].groups[gi].summary,
            Some(Place::Detailed(pi, ci)) | Some(Place::Full(pi, ci)) => {
                let p = &ex.plans[pi];
                p.groups[p.chunks[ci].group].summary
            }
            _ => continue,
        };
        // The best hit decides.
        let e = group_score.entry(summary).or_insert(0.0);
        *e = e.max(*s);
    }
    if group_score.is_empty() {
        ex.history.push("no passage matches the question".into());
        return Ok(None);
    }
    let ranked: Vec<(NodeId, f32)> = summaries
        .iter()
        .filter_map(|s| group_score.get(s).map(|v| (*s, *v)))
        .collect();
    ex.working = summaries.iter().map(|s| (*s, 0.0)).collect();
    ex.narrow_to(
        ranked,
        cfg.top_groups * widen,
        "grep over summary/detailed/full picked groups",
    );

    // 3. Descend into the kept groups; rank their chunks by DETAILED and FULL evidence.
    if !ex.exhausted() {
        let groups: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
        let group_rank: HashMap<NodeId, f32> = ex.working.iter().copied().collect();
        let detailed = ex.descend(&groups);
        let mut within: Vec<NodeId> = detailed.clone();
        for d in &detailed {
            if let Some(Place::Detailed(pi, ci)) = ex.place(d) {
                within.push(ex.plans[pi].chunks[ci].full);
            }
        }
        let hits = ex.grep(
            question,
            &[Level::Detailed, Level::Full],
            Some(&within),
            200,
        )?;
        let mut chunk_score: HashMap<NodeId, f32> = HashMap::new();
        for (id, s) in hits {
            let full = match ex.place(&id) {
                Some(Place::Detailed(pi, ci)) | Some(Place::Full(pi, ci)) => {
                    ex.plans[pi].chunks[ci].full
                }
                _ => continue,
            };
            let e = chunk_score.entry(full).or_insert(0.0);
            *e = e.max(s);
        }
        // Chunks with no hit of their own inherit a fraction of their group's score.
        let mut ranked = Vec::new();
        for d in &detailed {
            if let Some(Place::Detailed(pi, ci)) = ex.place(d) {
                let p = &ex.plans[pi];
                let full = p.chunks[ci].full;
                let g = p.groups[p.chunks[ci].group].summary;
                let inherited = 0.1 * group_rank.get(&g).copied().unwrap_or(0.0);
                ranked.push((
                    full,
                    chunk_score.get(&full).copied().unwrap_or(0.0) + inherited,
                ));
            }
        }
        ex.working = within.iter().map(|id| (*id, 0.0)).collect();
        // FULL ids are what the next step reads.
        ex.working
            .retain(|(id, _)| matches!(ex.places.get(id), Some(Place::Full(..))));
        ex.narrow_to(
            ranked,
            cfg.top_chunks * widen,
            "grep within the groups picked chunks",
        );
    }

    // 4. Read the kept chunks (descending any non-FULL nodes left by an early stop).
    let mut fulls: Vec<NodeId> = Vec::new();
    let mut frontier: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for id in frontier {
            match ex.place(&id) {
                Some(Place::Full(..)) => fulls.push(id),
                _ => next.push(id),
            }
        }
        if next.is_empty() {
            break;
        }
        let down = ex.descend(&next);
        ex.working = down.iter().map(|id| (*id, 0.0)).collect();
        frontier = down;
    }
    fulls.truncate((cfg.top_chunks * widen).max(cfg.min_keep));
    // How well each chunk as a whole matched (normalised to the best): a sentence inherits
    // some of its chunk's evidence, so the right passage beats a stray short sentence.
    let chunk_rank: HashMap<NodeId, f64> = {
        let best = ex
            .working
            .iter()
            .map(|(_, s)| *s)
            .fold(0.0f32, f32::max)
            .max(1e-6);
        ex.working
            .iter()
            .map(|(id, s)| (*id, (*s / best) as f64))
            .collect()
    };
    ex.working = fulls.iter().map(|id| (*id, 0.0)).collect();
    let chunks = ex.peek(&fulls)?;
    Ok(Some((chunks, chunk_rank)))
}

/// Scores every sentence (and adjacent pair) of the read chunks: BM25 over the candidate
/// sentences (so a long sentence does not win by sheer length), plus credit for question
/// terms that name the chunk's speaker, round or document.
fn candidates(
    ex: &Explorer<'_>,
    chunks: &[Node],
    idf: &BTreeMap<String, f64>,
    chunk_rank: &HashMap<NodeId, f64>,
    cues: &Cues,
) -> Vec<Cand> {
    let index = ex.engine.index();
    let total: f64 = idf.values().sum::<f64>().max(1e-9);
    let mut cands = Vec::new();
    for (rank, n) in chunks.iter().enumerate() {
        let base = n.citations[0].start;
        // A speaker spoken about is not credited for being the turn's speaker.
        let ctx: BTreeSet<String> = index
            .analyze(&context_label(n))
            .into_iter()
            .filter(|t| idf.contains_key(t) && !cues.objects.contains(t))
            .collect();
        let round = match ex.place(&n.id) {
            Some(Place::Full(pi, ci)) => {
                let p = &ex.plans[pi];
                p.sources[p.chunks[ci].source].round
            }
            _ => None,
        };
        for s in text::sentences(&n.text) {
            let raw = &n.text[s.start..s.end];
            let trimmed_start = s.start + (raw.len() - raw.trim_start().len());
            let trimmed_end = s.end - (raw.len() - raw.trim_end().len());
            if trimmed_end <= trimmed_start {
                continue;
            }
            let all = index.analyze_all(raw);
            let len = all.len().max(1);
            let mut tf: BTreeMap<String, u32> = BTreeMap::new();
            for t in all {
                if idf.contains_key(&t) {
                    *tf.entry(t).or_insert(0) += 1;
                }
            }
            if tf.is_empty() {
                continue;
            }
            cands.push(Cand {
                node: n.id,
                start: base + trimmed_start as u64,
                end: base + trimmed_end as u64,
                quote: n.text[trimmed_start..trimmed_end].to_string(),
                tf,
                ctx: ctx.clone(),
                len,
                own: 0.0,
                score: 0.0,
                rank,
                round,
            });
        }
    }
    // Two adjacent sentences of one chunk may answer together what neither does alone
    // ("...four essential human freedoms. The first is freedom of speech..."): add each
    // such pair as one candidate span; length normalisation keeps pairs from winning by size.
    let singles = cands.len();
    for i in 1..singles {
        let (a, b) = (&cands[i - 1], &cands[i]);
        if a.node != b.node {
            continue;
        }
        let adds = b.tf.keys().any(|t| !a.tf.contains_key(t));
        let adds_back = a.tf.keys().any(|t| !b.tf.contains_key(t));
        if !(adds && adds_back) {
            continue;
        }
        let mut tf = a.tf.clone();
        for (t, f) in &b.tf {
            *tf.entry(t.clone()).or_insert(0) += f;
        }
        let n = chunks.iter().find(|n| n.id == a.node).expect("own chunk");
        let base = n.citations[0].start;
        let quote = n.text[(a.start - base) as usize..(b.end - base) as usize].to_string();
        cands.push(Cand {
            node: a.node,
            start: a.start,
            end: b.end,
            quote,
            tf,
            ctx: a.ctx.clone(),
            len: a.len + b.len,
            own: 0.0,
            score: 0.0,
            rank: a.rank,
            round: a.round,
        });
    }
    // A question that names a speaker as the speaker asks what that speaker said: their
    // turns get full credit for the name, and other speakers merely mentioning them none.
    let speaker_terms = &cues.subjects;
    let avg = cands.iter().map(|c| c.len).sum::<usize>() as f64 / cands.len().max(1) as f64;
    let (k1, b) = (1.2, 0.75);
    for c in &mut cands {
        let norm = k1 * (1.0 - b + b * c.len as f64 / avg.max(1.0));
        let mut s = 0.0;
        for (t, &f) in &c.tf {
            if speaker_terms.contains(t) && !c.ctx.contains(t) {
                continue;
            }
            s += idf[t] * (f as f64 * (k1 + 1.0)) / (f as f64 + norm);
        }
        for t in c.ctx.iter().filter(|t| !c.tf.contains_key(*t)) {
            s += if speaker_terms.contains(t) { 1.0 } else { 0.5 } * idf[t];
        }
        let chunk = chunk_rank.get(&c.node).copied().unwrap_or(0.0);
        c.own = s / total;
        c.score = 0.7 * c.own + 0.3 * chunk - 0.01 * c.rank as f64;
        // "What did chen …" is about chen's turns: another speaker's sentence is a weaker
        // answer however well its words match.
        if !speaker_terms.is_empty() && !c.ctx.iter().any(|t| speaker_terms.contains(t)) {
            c.score *= 0.5;
        }
    }
    cands
}

/// Each question term's weight: its idf, times [`crate::index::NAME_BOOST`] for names.
fn weights(index: &crate::index::Index, question: &str, terms: &[String]) -> BTreeMap<String, f64> {
    let names = index.name_terms(question);
    terms
        .iter()
        .map(|t| {
            let boost = if names.contains(t) {
                crate::index::NAME_BOOST
            } else {
                1.0
            };
            (t.clone(), boost * index.idf(t))
        })
        .collect()
}

/// One pass: retrieve, score, choose. The first citation is the answer; others are added
/// when they cover question terms the chosen ones do not, or when they are parallel
/// evidence (the same terms, nearly the same score: "the three ingredients").
fn answer(
    ex: &mut Explorer<'_>,
    question: &str,
    cues: &Cues,
    first_pass: bool,
) -> Result<Option<Selection>> {
    let cfg = ex.cfg.clone();
    let index = ex.engine.index();
    let terms = index.analyze(question);
    if terms.is_empty() {
        return Ok(None);
    }
    let Some((chunks, chunk_rank)) = retrieve(ex, question, cues, first_pass)? else {
        return Ok(None);
    };
    // Ordered maps: float sums must not depend on hash order (same answer in every process).
    let idf = weights(index, question, &terms);
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
        cited: order
            .iter()
            .map(|&i| {
                let c = &cands[i];
                (c.node, c.start, c.end, c.quote.clone())
            })
            .collect(),
        rounds: order.iter().map(|&i| cands[i].round).collect(),
        covered: covered
            .into_iter()
            .filter(|t| idf.contains_key(t))
            .collect(),
        idf,
    }))
}
