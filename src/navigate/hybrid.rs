//! Hybrid grep: the explorer's BM25 hits fused with a dense ranking of the same candidates
//! (same scopes, levels and `within` restriction) by reciprocal-rank fusion. Every policy
//! calls `grep`, so every level's candidate selection becomes hybrid when the engine has an
//! embedder.

use super::explore::{Explorer, Place};
use crate::error::Result;
use crate::hybrid::rrf_weighted;
use crate::level::Level;
use crate::node::NodeId;

impl Explorer<'_> {
    /// Embeds the question once for this query: greps search with its vector. When that
    /// fails, the refinement history says so and grep stays BM25 only.
    pub async fn embed_question(&mut self, question: &str) {
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
    pub async fn embed_pattern(&mut self, pattern: &str) {
        let Some(dense) = self.dense.as_mut() else {
            return;
        };
        if let Some(e) = dense.embed_query(pattern, false).await {
            self.history.push(format!(
                "embedding the grep pattern {pattern:?} failed ({e}): grep falls back to BM25 only"
            ));
        }
    }

    /// The level of a node of the explored trees.
    fn level_of(&self, id: &NodeId) -> Option<Level> {
        match self.places.get(id) {
            Some(Place::Abstract(_)) => Some(Level::Abstract),
            Some(Place::Summary(..)) => Some(Level::Summary),
            Some(Place::Detailed(..)) => Some(Level::Detailed),
            Some(Place::Full(..)) => Some(Level::Full),
            None => self.meta_of.contains_key(id).then_some(Level::Metadata),
        }
    }

    /// Nodes of the explored trees at `levels` (all levels when empty), within `within`
    /// when given: exactly what the BM25 query may return.
    fn candidates(&self, levels: &[Level], within: Option<&[NodeId]>) -> Vec<NodeId> {
        let wanted = |l: Level| levels.is_empty() || levels.contains(&l);
        if let Some(ids) = within {
            let mut seen = std::collections::HashSet::new();
            return ids
                .iter()
                .filter(|id| self.level_of(id).is_some_and(wanted) && seen.insert(**id))
                .copied()
                .collect();
        }
        let mut out = Vec::new();
        for p in &self.plans {
            if wanted(Level::Abstract) {
                out.push(p.abstract_id);
            }
            if wanted(Level::Summary) {
                out.extend(p.groups.iter().map(|g| g.summary));
            }
            if wanted(Level::Detailed) {
                out.extend(p.chunks.iter().map(|c| c.detailed));
            }
            if wanted(Level::Full) {
                out.extend(p.chunks.iter().map(|c| c.full));
            }
            if wanted(Level::Metadata) {
                let mut m: Vec<NodeId> = p.metadata.values().copied().collect();
                m.sort();
                out.extend(m);
            }
        }
        out
    }

    /// `bm25` fused with the dense ranking of the same candidates, at most `limit` long,
    /// best first, scored by RRF; unchanged when there is no embedder or no query vector.
    /// The string says how the grep was done, for the trajectory.
    pub(super) fn fuse_dense(
        &mut self,
        pattern: &str,
        levels: &[Level],
        within: Option<&[NodeId]>,
        limit: usize,
        bm25: Vec<(NodeId, f32)>,
    ) -> Result<(Vec<(NodeId, f32)>, String)> {
        let Some(mut dense) = self.dense.take() else {
            return Ok((bm25, String::new()));
        };
        let r = (|| {
            let Some(query) = dense.query_vector(pattern) else {
                let why = dense.failure().unwrap_or("no query vector");
                return Ok((bm25, format!(" (BM25 only: {why})")));
            };
            let embedded: Vec<Level> = (if levels.is_empty() {
                &Level::ALL[..]
            } else {
                levels
            })
            .iter()
            .copied()
            .filter(|l| dense.levels().contains(l))
            .collect();
            if embedded.is_empty() {
                return Ok((
                    bm25,
                    " (BM25 only: these levels have no vectors)".to_string(),
                ));
            }
            let candidates = self.candidates(&embedded, within);
            let d = dense.rank(self.engine.store(), &query, &candidates, limit)?;
            let bm25_ids: Vec<NodeId> = bm25.iter().map(|(id, _)| *id).collect();
            let dense_ids: Vec<NodeId> = d.hits.iter().map(|(id, _)| *id).collect();
            let fused: Vec<(NodeId, f32)> = rrf_weighted(
                &[(&bm25_ids, 1.0), (&dense_ids, dense.weight())],
                dense.rrf_k(),
                limit,
            )
            .into_iter()
            .map(|(id, s)| (id, s as f32))
            .collect();
            let how = format!(
                " (hybrid: {} BM25 + {} dense hit(s) of {} candidate(s) with vectors, RRF k={}, dense weight {})",
                bm25_ids.len(),
                dense_ids.len(),
                d.with_vectors,
                dense.rrf_k(),
                dense.weight()
            );
            Ok((fused, how))
        })();
        self.dense = Some(dense);
        r
    }
}
