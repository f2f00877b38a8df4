//! Hybrid retrieval: dense vectors next to BM25.
//!
//! At build time every node of the embedded levels gets a vector, once: vectors are keyed
//! by embedder and node id, and node ids are content addresses, so a rebuild, another scope
//! or a later build reaching the same node reuses it ([`embed_plan`]). An embedding server
//! that is down or broken never fails a build: the nodes it could not embed are counted, and
//! retrieval over them is BM25 only.
//!
//! At query time the navigator's grep ranks its candidates by cosine similarity to the
//! question's vector ([`Dense`]) and fuses that ranking with BM25's by reciprocal-rank
//! fusion ([`rrf`]).

use crate::error::Result;
use crate::level::Level;
use crate::model::limit::PRIORITY_NAVIGATION;
use crate::model::{Embedder, ModelError};
use crate::node::NodeId;
use crate::plan::Plan;
use crate::progress::Progress;
use crate::store::{EmbedKey, Store};
use futures::StreamExt as _;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Priority of build-time embedding calls in the shared limiter: after every compression
/// call and every navigation call.
pub(crate) const PRIORITY_EMBED_BUILD: u8 = 0;

/// What the embedding step of a build did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EmbedReport {
    /// The embedder's identity (model and endpoint).
    pub model: String,
    /// Nodes of the embedded levels in the scope's tree (built ones).
    pub nodes: usize,
    /// Vectors computed by this build.
    pub embedded: usize,
    /// Nodes that already had a vector from this embedder.
    pub reused: usize,
    /// Nodes left without a vector: retrieval over them is BM25 only until a later build.
    pub failed: usize,
    /// Embedding requests sent (batches; retries not counted).
    pub requests: usize,
    /// The first error, when any batch failed.
    pub error: Option<String>,
    pub elapsed_ms: u64,
}

/// Gives every node of `levels` in `plan` that is built and has no vector from `embedder`
/// a vector: batches of `embedder.batch()`, up to `concurrency` requests in flight (under
/// the model's shared limiter). The first batch goes alone: when it finds the server down,
/// the others are not sent. Failures are data; only store errors are errors.
pub(crate) async fn embed_plan(
    store: &Store,
    embedder: &dyn Embedder,
    levels: &[Level],
    plan: &Plan,
    now: u64,
    concurrency: usize,
    progress: &dyn Progress,
) -> Result<EmbedReport> {
    let t0 = Instant::now();
    let key = EmbedKey::of(&embedder.identity());
    let mut report = EmbedReport {
        model: embedder.identity(),
        ..EmbedReport::default()
    };
    let mut seen = HashSet::new();
    let mut todo: Vec<(NodeId, String)> = Vec::new();
    for id in levels.iter().flat_map(|&l| plan.ids_at(l)) {
        if !seen.insert(id) {
            continue;
        }
        if store.has_embedding(key, &id)? {
            report.nodes += 1;
            report.reused += 1;
        } else if let Some(n) = store.get_live(&id, now)? {
            report.nodes += 1;
            todo.push((id, n.text));
        }
    }
    if todo.is_empty() {
        report.elapsed_ms = t0.elapsed().as_millis() as u64;
        return Ok(report);
    }
    progress.start(todo.len() as u64, &format!("embedding {}", plan.scope));
    let batches: Vec<Vec<(NodeId, String)>> = todo
        .chunks(embedder.batch().max(1))
        .map(<[_]>::to_vec)
        .collect();
    // Set when the server looks unreachable: batches not yet started are not sent.
    let down = AtomicBool::new(false);
    let run = |batch: Vec<(NodeId, String)>| {
        let down = &down;
        async move {
            if down.load(Ordering::Acquire) {
                let e = "not sent: an earlier batch found the embedding server unavailable";
                return (batch, Err(ModelError::Unavailable(e.into())), false);
            }
            let texts = batch.iter().map(|(_, t)| t.clone()).collect();
            let r = embedder.embed(texts, PRIORITY_EMBED_BUILD).await;
            if matches!(
                r,
                Err(ModelError::Unavailable(_) | ModelError::Timeout | ModelError::RateLimited)
            ) {
                down.store(true, Ordering::Release);
            }
            (batch, r, true)
        }
    };
    let mut batches = batches.into_iter();
    let first = batches.next().map(|b| futures::stream::once(run(b)));
    let rest = futures::stream::iter(batches)
        .map(run)
        .buffer_unordered(concurrency.max(1));
    let mut results = std::pin::pin!(futures::stream::iter(first).flatten().chain(rest));
    while let Some((batch, r, sent)) = results.next().await {
        report.requests += sent as usize;
        progress.inc(batch.len() as u64);
        match r {
            Ok(vectors) if vectors.len() == batch.len() => {
                let items: Vec<(NodeId, Vec<f32>)> =
                    batch.into_iter().map(|(id, _)| id).zip(vectors).collect();
                store.put_embeddings(key, &items)?;
                report.embedded += items.len();
            }
            Ok(vectors) => {
                report.failed += batch.len();
                report.error.get_or_insert(format!(
                    "{} vector(s) for {} text(s)",
                    vectors.len(),
                    batch.len()
                ));
            }
            Err(e) => {
                report.failed += batch.len();
                report.error.get_or_insert(e.to_string());
            }
        }
    }
    progress.finish();
    if let Some(e) = &report.error {
        tracing::warn!(
            model = %report.model,
            failed = report.failed,
            error = %e,
            "nodes left without embeddings; retrieval over them is BM25 only"
        );
    }
    report.elapsed_ms = t0.elapsed().as_millis() as u64;
    Ok(report)
}

/// Reciprocal-rank fusion: each item scores Σ 1 / (k + rank) over the lists it is in
/// (ranks from 1; a repeat within one list counts once). Best first; ties go to the item
/// with the better single rank, then the smaller item. At most `limit` items.
#[cfg(test)]
pub(crate) fn rrf<T: Copy + Eq + Hash + Ord>(
    lists: &[&[T]],
    k: f64,
    limit: usize,
) -> Vec<(T, f64)> {
    let weighted: Vec<(&[T], f64)> = lists.iter().map(|l| (*l, 1.0)).collect();
    rrf_weighted(&weighted, k, limit)
}

/// [`rrf`] with a weight per list: score = Σ weight / (k + rank).
pub(crate) fn rrf_weighted<T: Copy + Eq + Hash + Ord>(
    lists: &[(&[T], f64)],
    k: f64,
    limit: usize,
) -> Vec<(T, f64)> {
    let mut acc: HashMap<T, (f64, usize)> = HashMap::new();
    for &(list, weight) in lists {
        let mut seen = HashSet::new();
        for (i, item) in list.iter().filter(|x| seen.insert(**x)).enumerate() {
            let rank = i + 1;
            let e = acc.entry(*item).or_insert((0.0, usize::MAX));
            e.0 += weight / (k + rank as f64);
            e.1 = e.1.min(rank);
        }
    }
    let mut out: Vec<(T, f64, usize)> = acc.into_iter().map(|(t, (s, r))| (t, s, r)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)));
    out.truncate(limit);
    out.into_iter().map(|(t, s, _)| (t, s)).collect()
}

/// The dense side of one query: the embedder, the vectors of the texts searched for, and
/// the node vectors read so far.
pub(crate) struct Dense {
    embedder: Arc<dyn Embedder>,
    key: EmbedKey,
    levels: Vec<Level>,
    k: f64,
    weight: f64,
    min_similarity: f32,
    question: Option<String>,
    queries: HashMap<String, Arc<Vec<f32>>>,
    /// Why embedding a query text failed; no further attempts in this query.
    failed: Option<String>,
    nodes: HashMap<NodeId, Option<Arc<Vec<f32>>>>,
}

/// The outcome of one dense ranking, for the trajectory.
pub(crate) struct DenseHits {
    pub hits: Vec<(NodeId, f32)>,
    /// Candidates that had a vector.
    pub with_vectors: usize,
}

impl Dense {
    pub(crate) fn new(embedder: Arc<dyn Embedder>, cfg: &crate::config::EmbedConfig) -> Dense {
        Dense {
            key: EmbedKey::of(&embedder.identity()),
            embedder,
            levels: cfg.levels().unwrap_or_else(|_| {
                vec![
                    Level::Full,
                    Level::Detailed,
                    Level::Summary,
                    Level::Abstract,
                ]
            }),
            k: cfg.rrf_k,
            weight: cfg.dense_weight,
            min_similarity: cfg.min_similarity as f32,
            question: None,
            queries: HashMap::new(),
            failed: None,
            nodes: HashMap::new(),
        }
    }

    /// Levels whose nodes have vectors.
    pub(crate) fn levels(&self) -> &[Level] {
        &self.levels
    }

    pub(crate) fn rrf_k(&self) -> f64 {
        self.k
    }

    /// The dense ranking's weight in the fusion.
    pub(crate) fn weight(&self) -> f64 {
        self.weight
    }

    /// Why query embedding failed, if it did.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Embeds `text` (once per query; not again after a failure). `question` marks the
    /// text whose vector stands in for greps of texts that were not embedded. Returns the
    /// error of this attempt.
    pub(crate) async fn embed_query(&mut self, text: &str, question: bool) -> Option<String> {
        if question {
            self.question = Some(text.to_string());
        }
        if self.queries.contains_key(text) || self.failed.is_some() {
            return None;
        }
        match self
            .embedder
            .embed(vec![text.to_string()], PRIORITY_NAVIGATION)
            .await
        {
            Ok(mut v) if v.len() == 1 => {
                self.queries
                    .insert(text.to_string(), Arc::new(v.pop().expect("one vector")));
                None
            }
            Ok(v) => {
                let e = format!("{} vector(s) for 1 text", v.len());
                self.failed = Some(e.clone());
                Some(e)
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                Some(e.to_string())
            }
        }
    }

    /// The vector to search with for `pattern`: its own, else the question's.
    pub(crate) fn query_vector(&self, pattern: &str) -> Option<Arc<Vec<f32>>> {
        self.queries.get(pattern).cloned().or_else(|| {
            self.question
                .as_ref()
                .and_then(|q| self.queries.get(q).cloned())
        })
    }

    fn vector(&mut self, store: &Store, id: &NodeId) -> Result<Option<Arc<Vec<f32>>>> {
        if let Some(v) = self.nodes.get(id) {
            return Ok(v.clone());
        }
        let v = store.get_embedding(self.key, id)?.map(Arc::new);
        self.nodes.insert(*id, v.clone());
        Ok(v)
    }

    /// `candidates` ranked by cosine similarity to `query` (above `min_similarity`), best
    /// first, at most `limit`. Candidates without a vector are left out.
    pub(crate) fn rank(
        &mut self,
        store: &Store,
        query: &[f32],
        candidates: &[NodeId],
        limit: usize,
    ) -> Result<DenseHits> {
        let mut hits = Vec::new();
        let mut with_vectors = 0;
        for id in candidates {
            let Some(v) = self.vector(store, id)? else {
                continue;
            };
            with_vectors += 1;
            if let Some(s) = crate::model::embed::cosine(query, &v)
                && s > self.min_similarity
            {
                hits.push((*id, s));
            }
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(limit);
        Ok(DenseHits { hits, with_vectors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_sums_reciprocal_ranks() {
        let bm25 = ['a', 'b', 'c'];
        let dense = ['c', 'd', 'a'];
        let fused = rrf(&[&bm25, &dense], 60.0, 10);
        let score = |x: char| fused.iter().find(|(t, _)| *t == x).unwrap().1;
        assert!((score('a') - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-12);
        assert!((score('c') - (1.0 / 63.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert!((score('b') - 1.0 / 62.0).abs() < 1e-12);
        assert!((score('d') - 1.0 / 62.0).abs() < 1e-12);
        // a and c tie on score and best rank: the smaller item first; b and d likewise.
        let order: Vec<char> = fused.iter().map(|(t, _)| *t).collect();
        assert_eq!(order, ['a', 'c', 'b', 'd']);
    }

    #[test]
    fn rrf_favours_agreement_truncates_and_ignores_repeats() {
        // Second in both lists beats first in one.
        let fused = rrf(&[&[1, 2, 3][..], &[4, 2, 5][..]], 60.0, 2);
        assert_eq!(fused.iter().map(|x| x.0).collect::<Vec<_>>(), [2, 1]);
        // A repeat within a list does not count twice or shift later ranks.
        let fused = rrf(&[&[7, 7, 8][..]], 1.0, 10);
        assert_eq!(fused, vec![(7, 0.5), (8, 1.0 / 3.0)]);
        // k controls how fast rank credit falls: with k = 0, first place is worth 1.
        assert_eq!(rrf(&[&[9][..]], 0.0, 1), vec![(9, 1.0)]);
        assert!(rrf::<u8>(&[], 60.0, 5).is_empty());
        assert!(rrf(&[&[1][..]], 60.0, 0).is_empty());
        // A lighter second list: its first item no longer ties with the first list's.
        let w = rrf_weighted(&[(&[1, 2][..], 1.0), (&[2, 1][..], 0.5)], 60.0, 2);
        assert_eq!(w[0].0, 1);
        assert!((w[0].1 - (1.0 / 61.0 + 0.5 / 62.0)).abs() < 1e-12);
    }
}
