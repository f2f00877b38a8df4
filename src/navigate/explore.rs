//! The explorer: the navigator's primitives (`peek`, `grep`, `descend`, `narrow_to`,
//! `finish`) with their safeguards and accounting. A policy decides which to call.

use super::{Citation, QueryResult, Step};
use crate::config::QueryConfig;
use crate::engine::Engine;
use crate::error::Result;
use crate::index::Grep;
use crate::level::Level;
use crate::node::{Node, NodeId};
use crate::plan::Plan;
use std::collections::{HashMap, HashSet};

/// Where a node sits in the plans being explored.
#[derive(Clone, Copy, Debug)]
pub(super) enum Place {
    Abstract(usize),
    Summary(usize, usize),
    Detailed(usize, usize),
    Full(usize, usize),
}

/// The primitives, with their safeguards and accounting.
pub struct Explorer<'a> {
    pub(super) engine: &'a Engine,
    pub(super) plans: Vec<Plan>,
    pub(super) cfg: QueryConfig,
    pub(super) now: u64,
    pub(super) places: HashMap<NodeId, Place>,
    /// METADATA id → the node it tags.
    pub(super) meta_of: HashMap<NodeId, NodeId>,
    /// The current working set, best first, with scores.
    pub working: Vec<(NodeId, f32)>,
    pub(super) examined: Vec<NodeId>,
    pub(super) examined_set: HashSet<NodeId>,
    pub(super) tokens: u64,
    pub(super) sub_calls: u32,
    pub(super) iterations: u32,
    pub(super) trajectory: Vec<Step>,
    pub(super) history: Vec<String>,
    pub(super) no_narrowing: u32,
    /// Dense retrieval, when the engine has an embedder: grep is hybrid.
    pub(super) dense: Option<crate::hybrid::Dense>,
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

    pub(super) fn step(&mut self, action: &str, detail: String) {
        self.trajectory.push(Step {
            action: action.to_string(),
            detail,
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

    pub(super) fn place(&self, id: &NodeId) -> Option<Place> {
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
