//! The explorer: the navigator's primitives (`peek`, `grep`, `rank`, `descend`,
//! `narrow_to`, `finish`) with their safeguards and accounting. A policy decides which to
//! call; every search goes through the corpus's one retrieval seam.

use super::{Budget, Budgets, Citation, QueryResult, Step};
use crate::config::QueryConfig;
use crate::corpus::{Corpus, Place, Question, Search, Trees};
use crate::error::Result;
use crate::hybrid::Dense;
use crate::level::Level;
use crate::node::{Node, NodeId};
use crate::plan::Plan;
use std::collections::{HashMap, HashSet};

/// A span a policy cites: a FULL node and a byte range of its source. Not yet verified:
/// [`Explorer::finish`] checks it against the chunk and the source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cited {
    pub(crate) node: NodeId,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl Cited {
    /// The byte range `start..end` of a FULL node's text, as a span of its source.
    pub(crate) fn in_chunk(n: &Node, start: usize, end: usize) -> Cited {
        let base = n.citations[0].start;
        Cited {
            node: n.id,
            start: base + start as u64,
            end: base + end as u64,
        }
    }

    /// Whether the two spans share a byte of one node.
    pub(crate) fn overlaps(&self, other: &Cited) -> bool {
        self.node == other.node && self.start < other.end && other.start < self.end
    }
}

/// How a run ended (see [`QueryResult::outcome`]).
struct Ending {
    max_iterations_reached: bool,
    limit_hit: Option<String>,
    budgets: Budgets,
    outcome: String,
}

/// The primitives, with their safeguards and accounting.
pub(crate) struct Explorer<'a> {
    pub(super) corpus: Corpus<'a>,
    pub(super) trees: Trees,
    pub(super) cfg: QueryConfig,
    pub(super) now: u64,
    /// The current working set, best first, with scores.
    pub(crate) working: Vec<(NodeId, f32)>,
    pub(super) examined: Vec<NodeId>,
    pub(super) examined_set: HashSet<NodeId>,
    pub(super) tokens: u64,
    pub(super) sub_calls: u32,
    pub(super) iterations: u32,
    pub(super) trajectory: Vec<Step>,
    pub(super) history: Vec<String>,
    /// Earlier answers that a later one replaced (refinements), oldest first.
    pub(super) drafts: Vec<String>,
    pub(super) no_narrowing: u32,
    /// The iterations and tokens spent before the current policy took over (see
    /// [`Explorer::restart`]): budgets apply to each policy's own spending.
    pub(super) spent_before: (u32, u64),
    /// What the policies before the current one spent of their own budgets at most
    /// (iterations, tokens) and whether one stopped for lack of narrowing: how a run that
    /// fell back ended is reported from them too.
    earlier: (u32, u64, bool),
    /// The limit that made a policy take its last turn (`max_iterations`, `max_tokens`,
    /// `no_narrowing`), kept across a fallback.
    pub(super) forced: Option<&'static str>,
    /// Dense retrieval, when the engine has an embedder: every search is hybrid.
    pub(super) dense: Option<Dense>,
    /// When navigation began (steps carry their time since).
    started: std::time::Instant,
    /// Cancellation and the time limit: a stopped run answers from what it gathered.
    pub(super) stop: super::Stop,
}

impl<'a> Explorer<'a> {
    pub(crate) fn new(corpus: Corpus<'a>, plans: Vec<Plan>, cfg: QueryConfig, now: u64) -> Self {
        let working = plans.iter().map(|p| (p.abstract_id, 0.0)).collect();
        Explorer {
            corpus,
            trees: Trees::new(plans),
            cfg,
            now,
            working,
            examined: Vec::new(),
            examined_set: HashSet::new(),
            tokens: 0,
            sub_calls: 0,
            iterations: 0,
            trajectory: Vec::new(),
            history: Vec::new(),
            drafts: Vec::new(),
            no_narrowing: 0,
            spent_before: (0, 0),
            earlier: (0, 0, false),
            forced: None,
            dense: corpus.dense(),
            started: std::time::Instant::now(),
            stop: super::Stop::default(),
        }
    }

    /// What may end this query early (cancellation, `query.time_limit_ms`).
    pub(crate) fn set_stop(&mut self, stop: super::Stop) {
        self.stop = stop;
    }

    /// Embeds the question once for this query: searches use its vector. When that fails,
    /// the refinement history says so and search stays BM25 only.
    pub(crate) async fn embed_question(&mut self, question: &str) {
        let Some(dense) = self.dense.as_mut() else {
            return;
        };
        if let Some(e) = dense.embed_query(question, true).await {
            self.history.push(format!(
                "embedding the question failed ({e}): grep falls back to BM25 only"
            ));
        }
    }

    /// Embeds a grep pattern that is not the question (the LLM policy's keywords), so its
    /// dense ranking is about what it asks. After a failure the question's vector (if any)
    /// stands in.
    pub(crate) async fn embed_pattern(&mut self, pattern: &str) {
        let Some(dense) = self.dense.as_mut() else {
            return;
        };
        if let Some(e) = dense.embed_query(pattern, false).await {
            self.history.push(format!(
                "embedding the grep pattern {pattern:?} failed ({e}): grep falls back to BM25 only"
            ));
        }
    }

    pub(super) fn step(&mut self, action: &str, detail: String) {
        self.trajectory.push(Step {
            action: action.to_string(),
            detail,
            iteration: self.iterations,
            at_ms: self.started.elapsed().as_millis() as u64,
            tokens: self.tokens,
            sub_calls: self.sub_calls,
            working: self
                .working
                .iter()
                .take(32)
                .map(|(id, _)| id.to_hex())
                .collect(),
        });
    }

    pub(super) fn examine(&mut self, id: NodeId) {
        if self.examined_set.insert(id) {
            self.examined.push(id);
        }
    }

    /// Keeps only ids that are in the working set (a policy may name anything).
    pub(super) fn sanitise(&self, ids: &[NodeId]) -> Vec<NodeId> {
        let allowed: HashSet<NodeId> = self.working.iter().map(|(id, _)| *id).collect();
        let mut seen = HashSet::new();
        ids.iter()
            .filter(|id| allowed.contains(id) && seen.insert(**id))
            .copied()
            .collect()
    }

    pub(crate) fn budget_left(&self) -> u64 {
        self.cfg.max_tokens.saturating_sub(self.own_tokens())
    }

    /// Iterations the current policy has made.
    pub(super) fn own_iterations(&self) -> u32 {
        self.iterations - self.spent_before.0
    }

    /// Tokens the current policy has read.
    fn own_tokens(&self) -> u64 {
        self.tokens - self.spent_before.1
    }

    /// Reads nodes of the working set (within the token budget).
    pub(crate) fn peek(&mut self, ids: &[NodeId]) -> Result<Vec<Node>> {
        let ids = self.sanitise(ids);
        let mut out = Vec::new();
        let mut tokens = 0;
        for id in ids {
            let n = self.corpus.node(&id, self.now)?;
            if !out.is_empty() && self.own_tokens() + n.tokens as u64 > self.cfg.max_tokens {
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

    /// Searches `levels` of the explored trees, optionally within given nodes, through the
    /// corpus's retrieval seam (BM25, fused with the dense ranking of the same candidates
    /// when the engine has an embedder).
    pub(crate) fn grep(
        &mut self,
        question: &Question,
        levels: &[Level],
        within: Option<&[NodeId]>,
        limit: usize,
    ) -> Result<Vec<(NodeId, f32)>> {
        let pattern = question.text();
        let s = Search {
            question,
            levels,
            within,
            limit,
        };
        let found = self.corpus.search(&self.trees, &s, self.dense.as_mut())?;
        let (hits, how) = (found.hits, found.how);
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

    /// `text` analysed once, its words weighed by their statistics within the scopes
    /// explored ([`Corpus::question`]).
    pub(crate) fn question(&self, text: &str) -> Question {
        self.corpus.question(text, &self.trees.scopes())
    }

    /// `ids` ranked by a search for `question` among them, through the same seam as `grep`.
    /// Every id is kept: those without a hit score 0; ties keep the given order.
    pub(crate) fn rank(
        &mut self,
        question: &Question,
        ids: Vec<NodeId>,
    ) -> Result<Vec<(NodeId, f32)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut levels: Vec<Level> = ids
            .iter()
            .map(|id| self.trees.level_of(id).unwrap_or(Level::Full))
            .collect();
        levels.sort();
        levels.dedup();
        let s = Search {
            question,
            levels: &levels,
            within: Some(&ids),
            limit: ids.len(),
        };
        let found = self.corpus.search(&self.trees, &s, self.dense.as_mut())?;
        self.step(
            "rank",
            format!(
                "{} node(s) by {:?}: {} hit(s){}",
                ids.len(),
                question.text(),
                found.hits.len(),
                found.how
            ),
        );
        let score: HashMap<NodeId, f32> = found.hits.into_iter().collect();
        let mut ranked: Vec<(NodeId, f32)> = ids
            .into_iter()
            .map(|id| (id, score.get(&id).copied().unwrap_or(0.0)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(ranked)
    }

    /// The children of working-set nodes: ABSTRACT → SUMMARY → DETAILED → FULL.
    pub(crate) fn descend(&mut self, ids: &[NodeId]) -> Vec<NodeId> {
        let ids = self.sanitise(ids);
        let mut out = Vec::new();
        for id in &ids {
            let plans = &self.trees.plans;
            match self.trees.place(id) {
                Some(Place::Abstract(pi)) => out.extend(plans[pi].groups.iter().map(|g| g.summary)),
                Some(Place::Summary(pi, gi)) => {
                    let p = &plans[pi];
                    out.extend(p.groups[gi].chunks.iter().map(|&ci| p.chunks[ci].detailed))
                }
                Some(Place::Detailed(pi, ci)) => out.push(plans[pi].chunks[ci].full),
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
    pub(crate) fn narrow_to(&mut self, mut ranked: Vec<(NodeId, f32)>, keep: usize, what: &str) {
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
            self.own_iterations()
        ));
        self.working = ranked;
    }

    /// True when the loop must stop: iteration budget spent, token budget spent, or two
    /// iterations in a row without narrowing.
    pub(crate) fn exhausted(&self) -> bool {
        self.own_iterations() >= self.cfg.max_iterations
            || self.own_tokens() >= self.cfg.max_tokens
            || self.no_narrowing >= 2
    }

    pub(super) fn place(&self, id: &NodeId) -> Option<Place> {
        self.trees.place(id)
    }

    /// The text an answer citing `cited` would have (unverifiable spans left out): what
    /// an earlier, replaced answer said.
    pub(crate) fn answer_text(&self, cited: &[Cited]) -> Result<String> {
        let mut quotes = Vec::new();
        for c in cited {
            let Some(Place::Full(pi, ci)) = self.place(&c.node) else {
                continue;
            };
            let p = &self.trees.plans[pi];
            let chunk = &p.chunks[ci];
            if c.start < chunk.start || c.end > chunk.end || c.start >= c.end {
                continue;
            }
            let text = self
                .corpus
                .source_text(&p.scope, &p.sources[chunk.source].id)?;
            if let Some(q) = text.get(c.start as usize..c.end as usize) {
                quotes.push(q.to_string());
            }
        }
        Ok(quotes.join(" … "))
    }

    /// Turns cited sentence ranges of FULL nodes into citations, verifying each quote
    /// against the source text. Unverifiable citations are dropped, never returned.
    pub(crate) fn finish(mut self, cited: Vec<Cited>, confidence: f64) -> Result<QueryResult> {
        let mut citations = Vec::new();
        let mut quotes = Vec::new();
        let mut texts: HashMap<(usize, usize), String> = HashMap::new();
        for Cited {
            node: id,
            start,
            end,
        } in cited
        {
            let Some(Place::Full(pi, ci)) = self.place(&id) else {
                continue;
            };
            let p = &self.trees.plans[pi];
            let c = &p.chunks[ci];
            if start < c.start || end > c.end || start >= end {
                continue;
            }
            let src = &p.sources[c.source];
            let key = (pi, c.source);
            let text = match texts.entry(key) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(self.corpus.source_text(&p.scope, &src.id)?)
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
                time: src.time,
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
        let ending = self.ending(!citations.is_empty());
        Ok(QueryResult {
            answer: quotes.join(" … "),
            when: None,
            ready,
            confidence: if citations.is_empty() {
                0.0
            } else {
                confidence
            },
            citations,
            iterations: self.iterations,
            refinement_history: self.history,
            drafts: self.drafts,
            nodes_examined: self.examined.iter().map(NodeId::to_hex).collect(),
            sub_calls_made: self.sub_calls,
            tokens_processed: self.tokens,
            trajectory: self.trajectory,
            usage: Default::default(),
            max_iterations_reached: ending.max_iterations_reached,
            limit_hit: ending.limit_hit,
            budgets: ending.budgets,
            outcome: ending.outcome,
        })
    }

    /// How the run ended: the budget it ran out of (of any policy it ran, a fallback's
    /// included), used against limit, and one plain sentence.
    fn ending(&self, answered: bool) -> Ending {
        let mut iterations = Budget {
            used: self.own_iterations().max(self.earlier.0) as u64,
            limit: self.cfg.max_iterations as u64,
        };
        if self.forced == Some("max_iterations") {
            // The turn the policy was told was its last is an iteration it used.
            iterations.used = iterations.used.max(iterations.limit);
        }
        let tokens = Budget {
            used: self.own_tokens().max(self.earlier.1),
            limit: self.cfg.max_tokens,
        };
        let sub_calls = Budget {
            used: self.sub_calls as u64,
            limit: self.cfg.max_sub_calls as u64,
        };
        let spent = |b: &Budget| b.used >= b.limit;
        let hit = if spent(&iterations) {
            Some(("max_iterations", "the iteration limit", &iterations))
        } else if spent(&tokens) {
            Some(("max_tokens", "the token budget", &tokens))
        } else if spent(&sub_calls) {
            Some(("max_sub_calls", "the sub-call budget", &sub_calls))
        } else {
            None
        };
        let no_narrowing =
            self.no_narrowing >= 2 || self.earlier.2 || self.forced == Some("no_narrowing");
        let found = if answered {
            "answered from what was gathered"
        } else {
            "nothing was found that answers the question"
        };
        if let Some(reason) = self.stop.reason() {
            let ms = self.started.elapsed().as_millis();
            let outcome = match reason {
                "time_limit" => format!(
                    "stopped at the time limit ({ms} ms of {} ms): {found}",
                    self.stop.time_limit_ms()
                ),
                _ => format!("cancelled after {ms} ms: {found}"),
            };
            return Ending {
                max_iterations_reached: spent(&iterations),
                limit_hit: Some(reason.to_string()),
                budgets: Budgets {
                    iterations,
                    tokens,
                    sub_calls,
                },
                outcome,
            };
        }
        let outcome = match (hit, no_narrowing) {
            (Some((_, what, b)), _) => {
                format!("stopped at {what} ({} of {}): {found}", b.used, b.limit)
            }
            (None, true) => format!("stopped after two iterations without narrowing: {found}"),
            (None, false) if answered => "answered within its budgets".to_string(),
            (None, false) => format!("{found} within its budgets"),
        };
        Ending {
            max_iterations_reached: spent(&iterations),
            limit_hit: hit
                .map(|(name, ..)| name.to_string())
                .or_else(|| no_narrowing.then(|| "no_narrowing".to_string())),
            budgets: Budgets {
                iterations,
                tokens,
                sub_calls,
            },
            outcome,
        }
    }

    /// Runs `f` as if on a fresh explorer over the same trees — the working set the trees'
    /// ABSTRACTs, budgets its own — then puts this explorer's working set, budgets,
    /// iterations, trajectory, history and drafts back. What `f` read stays counted (tokens,
    /// examined nodes); its history is returned. The LLM policy's evidence check runs the
    /// offline selection this way.
    pub(crate) fn aside<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> (T, Vec<String>) {
        let abstracts = self
            .trees
            .plans
            .iter()
            .map(|p| (p.abstract_id, 0.0))
            .collect();
        let working = std::mem::replace(&mut self.working, abstracts);
        let saved = (self.no_narrowing, self.spent_before, self.iterations);
        let trajectory = std::mem::take(&mut self.trajectory);
        let history = std::mem::take(&mut self.history);
        let drafts = self.drafts.len();
        self.no_narrowing = 0;
        self.spent_before = (self.iterations, self.tokens);
        let out = f(self);
        let aside = std::mem::replace(&mut self.history, history);
        self.trajectory = trajectory;
        self.working = working;
        (self.no_narrowing, self.spent_before, self.iterations) = saved;
        self.drafts.truncate(drafts);
        (out, aside)
    }

    /// Starts over for another policy after this one gave up: the working set is the
    /// trees' ABSTRACTs again and the budgets are the new policy's own, while what was done
    /// so far (trajectory, history, examined nodes, tokens, sub-calls, iterations) stays
    /// and is reported with the new policy's result.
    pub(crate) fn restart(mut self) -> Self {
        self.earlier = (
            self.earlier.0.max(self.own_iterations()),
            self.earlier.1.max(self.own_tokens()),
            self.earlier.2 || self.no_narrowing >= 2,
        );
        self.working = self
            .trees
            .plans
            .iter()
            .map(|p| (p.abstract_id, 0.0))
            .collect();
        self.no_narrowing = 0;
        self.spent_before = (self.iterations, self.tokens);
        self
    }
}

mod turns;

#[cfg(test)]
mod tests;
