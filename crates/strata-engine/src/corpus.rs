//! The read side: what context windows and the navigator read through, instead of the engine
//! that calls them.
//!
//! [`Corpus`] is a handle on the store, the index and the embedder: it reads live nodes and
//! source texts, analyses text as the index does, and is the one retrieval seam —
//! [`Corpus::search`] is BM25 over the trees a query explores, fused with a dense ranking of
//! the same candidates when an embedder is configured. Every navigation policy searches
//! through it, so none can bypass fusion. [`Trees`] are those trees: the current plans of
//! the scopes explored, and where each node sits in them.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::hybrid::{Dense, rrf_weighted};
use crate::index::{Analysed, Grep, Index, NAME_BOOST};
use crate::level::Level;
use crate::model::Embedder;
use crate::node::{IdMap, Node, NodeId, derived_id};
use crate::plan::Plan;
use crate::store::Store;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

pub(crate) mod placed;
pub(crate) mod speakers;
pub(crate) mod turns;

/// A read handle on one engine's store, index and embedder. Cheap to copy.
#[derive(Clone, Copy)]
pub(crate) struct Corpus<'a> {
    store: &'a Store,
    index: &'a Index,
    embedder: Option<&'a Arc<dyn Embedder>>,
    cfg: &'a Config,
}

/// A question — or any text searched for — analysed once ([`Corpus::question`]) and passed
/// down: every search, sentence score and confidence of one query reads the same terms.
#[derive(Clone, Debug, Default)]
pub(crate) struct Question {
    text: String,
    analysed: Analysed,
    /// Each term's weight: its idf, times [`NAME_BOOST`] for names. Ordered: float sums
    /// over it must not depend on hash order (same answer in every process).
    weights: BTreeMap<String, f64>,
    /// Whether it asks for a set of answers ([`crate::text::asks_for_set`]).
    set: bool,
}

impl Question {
    /// The text as asked.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Its terms as the index sees them (stop words dropped, stemmed, deduplicated).
    pub(crate) fn terms(&self) -> &[String] {
        &self.analysed.terms
    }

    /// Each term's weight: idf, times [`NAME_BOOST`] for names.
    pub(crate) fn weights(&self) -> &BTreeMap<String, f64> {
        &self.weights
    }

    /// What its search holds beyond its words: the nouns it asks for kinds of, and how
    /// many words naming those kinds (`text::kinds`) were searched with it.
    pub(crate) fn kinds_note(&self) -> Option<String> {
        (!self.analysed.kinds_of.is_empty()).then(|| {
            format!(
                "the question asks for kinds of {}: its search also holds {} words naming them, at half a question word's weight ({})",
                self.analysed.kinds_of.join(", "),
                self.analysed.kinds.len(),
                crate::text::kinds::VERSION
            )
        })
    }

    /// The terms of the names it writes with a capital (not its first word).
    pub(crate) fn names(&self) -> &HashSet<String> {
        &self.analysed.names
    }

    /// The question without `terms` (the words that name speakers, for a search that
    /// ranks turns by what they say), or None when nothing else is left.
    pub(crate) fn without(&self, terms: &HashSet<String>) -> Option<Question> {
        if terms.is_empty() {
            return Some(self.clone());
        }
        let kept: Vec<String> = self
            .analysed
            .terms
            .iter()
            .filter(|t| !terms.contains(*t))
            .cloned()
            .collect();
        if kept.is_empty() {
            return None;
        }
        Some(Question {
            text: self.text.clone(),
            analysed: Analysed {
                names: self
                    .analysed
                    .names
                    .iter()
                    .filter(|t| !terms.contains(*t))
                    .cloned()
                    .collect(),
                terms: kept,
                kinds: self.analysed.kinds.clone(),
                kinds_of: self.analysed.kinds_of.clone(),
            },
            weights: self
                .weights
                .iter()
                .filter(|(t, _)| !terms.contains(*t))
                .map(|(t, w)| (t.clone(), *w))
                .collect(),
            set: self.set,
        })
    }

    /// Whether it asks for a set ("which speakers objected", "list every deadline"): then
    /// every passage that supports it is an answer, up to `query.max_set_citations`.
    pub(crate) fn asks_set(&self) -> bool {
        self.set
    }
}

/// One search: a question, the levels searched (all when empty), optionally only some
/// nodes, and how many hits at most.
pub(crate) struct Search<'q> {
    pub(crate) question: &'q Question,
    pub(crate) levels: &'q [Level],
    pub(crate) within: Option<&'q [NodeId]>,
    pub(crate) limit: usize,
}

/// What a search found, best first, and how it searched (for the trajectory: empty for
/// BM25 without an embedder, else `(hybrid: …)` or `(BM25 only: why)`).
pub(crate) struct Found {
    pub(crate) hits: Vec<(NodeId, f32)>,
    pub(crate) how: String,
}

impl<'a> Corpus<'a> {
    pub(crate) fn new(
        store: &'a Store,
        index: &'a Index,
        embedder: Option<&'a Arc<dyn Embedder>>,
        cfg: &'a Config,
    ) -> Corpus<'a> {
        Corpus {
            store,
            index,
            embedder,
            cfg,
        }
    }

    /// A live node, or a clear error when the build could not make it.
    pub(crate) fn node(&self, id: &NodeId, now: u64) -> Result<Node> {
        self.store.get_live(id, now)?.ok_or_else(|| {
            Error::NotBuilt(format!(
                "node {id} is not available (its build failed; see `strata compress`)"
            ))
        })
    }

    /// Several nodes in one read (FULL nodes never expire; derived ones may be missing).
    pub(crate) fn nodes(&self, ids: &[NodeId]) -> Result<Vec<Option<Node>>> {
        self.store.get_nodes(ids)
    }

    /// The view stored for `scope` (what is derived data above the corpus decides its type).
    pub(crate) fn view<T: crate::store::Record>(&self, scope: &str) -> Result<Option<T>> {
        self.store.get_view(scope)
    }

    /// The text of a source as ingested.
    pub(crate) fn source_text(&self, scope: &str, source: &str) -> Result<String> {
        self.store.get_text(scope, source)?.ok_or_else(|| {
            Error::DataCorruption(format!("source {source} of scope {scope} has no text"))
        })
    }

    /// `text`'s terms as the index sees them: stop words dropped, stemmed, deduplicated.
    pub(crate) fn analyze(&self, text: &str) -> Vec<String> {
        self.index.analyze(text)
    }

    /// `n`'s sentences as the navigator scores them, analysed once per FULL chunk.
    pub(crate) fn sentences_of(&self, n: &Node) -> Arc<[crate::index::ScoredSentence]> {
        self.index.sentences_of(n)
    }

    /// Every term of `text` as the index sees it, repeats kept.
    pub(crate) fn analyze_all(&self, text: &str) -> Vec<String> {
        self.index.analyze_all(text)
    }

    /// The pairs of terms that stand side by side in `text` (`Index::adjacent_pairs`).
    pub(crate) fn adjacent_pairs(
        &self,
        text: &str,
    ) -> std::collections::BTreeSet<(String, String)> {
        self.index.adjacent_pairs(text)
    }

    /// Inverse document frequency of an analysed term within `scopes` (empty: every scope).
    pub(crate) fn idf(&self, term: &str, scopes: &[String]) -> f64 {
        self.index.idf(term, scopes)
    }

    /// `text` analysed once, for every search and score of it, its words weighed by their
    /// statistics within `scopes` (the text it is asked of; empty: every scope).
    pub(crate) fn question(&self, text: &str, scopes: &[String]) -> Question {
        let analysed = self.index.analyse_query(text);
        let weights = analysed
            .terms
            .iter()
            .map(|t| {
                let boost = if analysed.names.contains(t) {
                    NAME_BOOST
                } else {
                    1.0
                };
                (t.clone(), boost * self.index.idf(t, scopes))
            })
            .collect();
        Question {
            text: text.to_string(),
            set: crate::text::asks_for_set(text),
            analysed,
            weights,
        }
    }

    /// The question's term weights within `scopes` ([`Index::scoped_idf`], names boosted as
    /// in [`Question::weights`]): what its answer's confidence is measured in.
    pub(crate) fn scoped_weights(
        &self,
        q: &Question,
        scopes: &[String],
    ) -> crate::error::Result<BTreeMap<String, f64>> {
        let idf = self.index.scoped_idf(&q.analysed.terms, scopes)?;
        Ok(idf
            .into_iter()
            .map(|(t, w)| {
                let boost = if q.analysed.names.contains(&t) {
                    NAME_BOOST
                } else {
                    1.0
                };
                (t, boost * w)
            })
            .collect())
    }

    /// The dense side of one query (its vectors, read once), when an embedder is
    /// configured.
    pub(crate) fn dense(&self) -> Option<Dense> {
        self.embedder
            .map(|e| Dense::new(e.clone(), &self.cfg.embed))
    }

    /// The retrieval seam: BM25 over `trees` (hits outside them, stale index entries, are
    /// dropped), fused by weighted reciprocal-rank fusion with the dense ranking of the very
    /// candidates the BM25 query could return when `dense` is given and has a query vector.
    pub(crate) fn search(
        &self,
        trees: &Trees,
        s: &Search<'_>,
        dense: Option<&mut Dense>,
    ) -> Result<Found> {
        let scopes = trees.scopes();
        let hits = self.index.search(&Grep {
            query: &s.question.analysed,
            scopes: &scopes,
            levels: s.levels,
            within: s.within,
            limit: s.limit,
        })?;
        let mut bm25: Vec<(NodeId, f32)> = Vec::with_capacity(hits.len());
        for h in hits {
            if trees.place(&h.id).is_some() || self.tagged_by(trees, &h.id)?.is_some() {
                bm25.push((h.id, h.score));
            }
        }
        match dense {
            None => Ok(Found {
                hits: bm25,
                how: String::new(),
            }),
            Some(dense) => self.fuse(trees, s, bm25, dense),
        }
    }

    /// The node of `trees` that `meta` is the METADATA node of, if it is one. Unless the
    /// trees' whole map of METADATA ids is made already, read from `meta`'s record (the
    /// node it tags is its one child) and checked against the tree: a search meets a few
    /// METADATA nodes, a tree has thousands, each a hash to derive.
    pub(crate) fn tagged_by(&self, trees: &Trees, meta: &NodeId) -> Result<Option<NodeId>> {
        if let Some(map) = trees.meta_of.get() {
            return Ok(map.get(meta).copied());
        }
        Ok(match self.store.get_node(meta)? {
            Some(n) if n.level == Level::Metadata => match n.children.as_slice() {
                [owner] => trees.tags(meta, owner),
                _ => None,
            },
            _ => None,
        })
    }

    /// `bm25` fused with the dense ranking of the same candidates, at most `limit` long,
    /// best first, scored by RRF; unchanged when there is no query vector or the levels
    /// searched have no vectors.
    fn fuse(
        &self,
        trees: &Trees,
        s: &Search<'_>,
        bm25: Vec<(NodeId, f32)>,
        dense: &mut Dense,
    ) -> Result<Found> {
        let Some(query) = dense.query_vector(s.question.text()) else {
            let why = dense.failure().unwrap_or("no query vector");
            return Ok(Found {
                hits: bm25,
                how: format!(" (BM25 only: {why})"),
            });
        };
        let embedded: Vec<Level> = (if s.levels.is_empty() {
            &Level::ALL[..]
        } else {
            s.levels
        })
        .iter()
        .copied()
        .filter(|l| dense.levels().contains(l))
        .collect();
        if embedded.is_empty() {
            return Ok(Found {
                hits: bm25,
                how: " (BM25 only: these levels have no vectors)".to_string(),
            });
        }
        let candidates = trees.candidates(&embedded, s.within);
        let d = dense.rank(self.store, &query, &candidates, s.limit)?;
        let bm25_ids: Vec<NodeId> = bm25.iter().map(|(id, _)| *id).collect();
        let dense_ids: Vec<NodeId> = d.hits.iter().map(|(id, _)| *id).collect();
        let hits: Vec<(NodeId, f32)> = rrf_weighted(
            &[(&bm25_ids, 1.0), (&dense_ids, dense.weight())],
            dense.rrf_k(),
            s.limit,
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
        Ok(Found { hits, how })
    }
}

/// Where a node sits in the trees being explored: (plan, group) or (plan, chunk) indices.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place {
    Abstract(usize),
    Summary(usize, usize),
    Detailed(usize, usize),
    Full(usize, usize),
}

/// The current trees of the scopes a query explores, with every node's place: what a
/// search may return, and how to step down from a node.
#[derive(Clone)]
pub(crate) struct Trees {
    pub(crate) plans: Vec<Plan>,
    places: IdMap<Place>,
    /// METADATA id → the node it tags, made at the first question about a METADATA node.
    meta_of: std::sync::OnceLock<IdMap<NodeId>>,
}

impl Trees {
    pub(crate) fn new(plans: Vec<Plan>) -> Trees {
        let n: usize = plans
            .iter()
            .map(|p| 2 * p.chunks.len() + p.groups.len() + 1)
            .sum();
        let mut places = IdMap::with_capacity_and_hasher(n, Default::default());
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
        Trees {
            plans,
            places,
            meta_of: std::sync::OnceLock::new(),
        }
    }

    fn meta_of(&self) -> &IdMap<NodeId> {
        self.meta_of.get_or_init(|| {
            self.plans
                .iter()
                .flat_map(|p| p.metadata().iter().map(|(t, m)| (*m, *t)))
                .collect()
        })
    }

    /// Where a node of the trees sits (METADATA nodes have no place).
    pub(crate) fn place(&self, id: &NodeId) -> Option<Place> {
        self.places.get(id).copied()
    }

    /// `owner` if `meta` is its METADATA node and it is a node of the trees that has one (a
    /// DETAILED, a group's SUMMARY, an ABSTRACT).
    pub(crate) fn tags(&self, meta: &NodeId, owner: &NodeId) -> Option<NodeId> {
        let tagged = matches!(
            self.places.get(owner),
            Some(Place::Detailed(..) | Place::Summary(..) | Place::Abstract(_))
        );
        (tagged && derived_id(Level::Metadata, crate::plan::TAGS_VERSION, &[*owner]) == *meta)
            .then_some(*owner)
    }

    /// The nodes with a place (every level but METADATA), in no particular order.
    pub(crate) fn placed(&self) -> impl Iterator<Item = &NodeId> {
        self.places.keys()
    }

    /// The scopes explored.
    pub(crate) fn scopes(&self) -> Vec<String> {
        self.plans.iter().map(|p| p.scope.clone()).collect()
    }

    /// The level of a node of the trees.
    pub(crate) fn level_of(&self, id: &NodeId) -> Option<Level> {
        match self.places.get(id) {
            Some(Place::Abstract(_)) => Some(Level::Abstract),
            Some(Place::Summary(..)) => Some(Level::Summary),
            Some(Place::Detailed(..)) => Some(Level::Detailed),
            Some(Place::Full(..)) => Some(Level::Full),
            None => self.meta_of().contains_key(id).then_some(Level::Metadata),
        }
    }

    /// Nodes of the trees at `levels` (all levels when empty), within `within` when given:
    /// exactly what a BM25 search may return.
    pub(crate) fn candidates(&self, levels: &[Level], within: Option<&[NodeId]>) -> Vec<NodeId> {
        let wanted = |l: Level| levels.is_empty() || levels.contains(&l);
        if let Some(ids) = within {
            let mut seen = HashSet::new();
            return ids
                .iter()
                .filter(|id| self.level_of(id).is_some_and(wanted) && seen.insert(**id))
                .copied()
                .collect();
        }
        let order = [
            Level::Abstract,
            Level::Summary,
            Level::Detailed,
            Level::Full,
            Level::Metadata,
        ];
        self.plans
            .iter()
            .flat_map(|p| {
                order
                    .into_iter()
                    .filter(|&l| wanted(l))
                    .flat_map(|l| p.ids_at(l))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::source::Turn;

    /// A METADATA node is told apart from its record (the node it tags, checked against
    /// the tree) exactly as the whole map of the tree's METADATA ids tells it.
    #[test]
    fn metadata_found_from_its_record_is_what_the_whole_map_says() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        for i in 0..12u32 {
            let turn = Turn {
                round: 1 + i / 3,
                speaker: ["ada", "bo", "cy"][i as usize % 3].into(),
                text: format!(
                    "Turn {i}: the harbour line should open by June {}.",
                    2030 + i
                ),
                time: None,
            };
            e.append_turn("d", format!("t{i}"), turn, 1_000).unwrap();
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(e.compress("d", 1_000, &crate::NoProgress))
            .unwrap();
        let plan = e.plan("d").unwrap();
        let lazy = Trees::new(vec![plan.clone()]);
        let whole = Trees::new(vec![plan.clone()]);
        assert!(whole.level_of(&NodeId([7; 32])).is_none()); // makes the whole map
        assert!(whole.meta_of.get().is_some() && lazy.meta_of.get().is_none());
        let corpus = e.corpus();
        let metadata = plan.metadata();
        assert_eq!(metadata.len(), plan.chunks.len() + plan.groups.len() + 1);
        for (owner, meta) in metadata {
            for t in [&lazy, &whole] {
                assert_eq!(corpus.tagged_by(t, meta).unwrap(), Some(*owner));
            }
        }
        // Nodes of the tree that are not METADATA, and an id that is no node at all.
        let others = plan.tree_ids_by_level().map(|(_, id)| id);
        for id in others.chain([NodeId([7; 32])]) {
            for t in [&lazy, &whole] {
                assert_eq!(corpus.tagged_by(t, &id).unwrap(), None);
            }
        }
        assert!(
            lazy.meta_of.get().is_none(),
            "the lazy trees never made the map"
        );
    }
}
