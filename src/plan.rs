//! The level tree of a scope, as ids. Because a derived node's id depends only on its level,
//! its inputs' ids and the compressor identity, the whole tree's ids are known from the FULL
//! chunks before anything is compressed: the build fills what the store lacks, and a context
//! or query request knows exactly which nodes make up the current view.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::level::Level;
use crate::node::{NodeId, derived_id};
use crate::store::{ScopeKind, ScopeRecord, Store};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Identity of the METADATA extractor (always the offline tagger).
pub const TAGS_VERSION: &str = "offline-tags-v1";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedSource {
    pub id: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedChunk {
    pub full: NodeId,
    pub detailed: NodeId,
    pub source: usize,
    pub start: u64,
    pub end: u64,
    pub tokens: u32,
    pub headings: Vec<String>,
    pub group: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedGroup {
    pub summary: NodeId,
    /// Indices into [`Plan::chunks`], in order.
    pub chunks: Vec<usize>,
    pub round: Option<u32>,
    /// Document groups: the source and heading path; debates: `Round N`.
    pub label: String,
    pub full_tokens: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub scope: String,
    pub kind: ScopeKind,
    pub compressor: String,
    pub sources: Vec<PlannedSource>,
    pub chunks: Vec<PlannedChunk>,
    pub groups: Vec<PlannedGroup>,
    pub abstract_id: NodeId,
    /// METADATA node id for each derived node (DETAILED, SUMMARY, ABSTRACT).
    pub metadata: HashMap<NodeId, NodeId>,
    pub full_tokens: u64,
}

/// What goes into a derived node's id besides its inputs: the model and prompt version, and
/// the level targets (another target is another node).
pub fn compressor_identity(model: &str, cfg: &Config) -> String {
    let l = &cfg.levels;
    format!(
        "{model}|d={}|s={}|a={}|amax={}",
        l.detailed_ratio, l.summary_ratio, l.abstract_ratio, l.abstract_max_tokens
    )
}

impl Plan {
    /// Plans `scope` from the store's source records.
    pub fn load(store: &Store, scope: &ScopeRecord, model: &str, cfg: &Config) -> Result<Plan> {
        let compressor = compressor_identity(model, cfg);
        let mut sources = Vec::with_capacity(scope.sources.len());
        let mut chunks: Vec<PlannedChunk> = Vec::new();
        let mut groups: Vec<PlannedGroup> = Vec::new();
        let mut full_tokens = 0u64;
        // One look-up for every record (a shared store answers it in one round trip).
        let ids: Vec<&str> = scope.sources.iter().map(|e| e.id.as_str()).collect();
        let records = store.get_sources(&scope.name, &ids)?;
        for (entry, rec) in scope.sources.iter().zip(records) {
            let rec = rec.ok_or_else(|| {
                Error::DataCorruption(format!(
                    "scope {} lists source {} but the store has no record of it",
                    scope.name, entry.id
                ))
            })?;
            let si = sources.len();
            sources.push(PlannedSource {
                id: rec.id.clone(),
                round: rec.round,
                speaker: rec.speaker.clone(),
            });
            let mut last_section = None;
            for c in &rec.chunks {
                full_tokens += c.tokens as u64;
                let ci = chunks.len();
                let gi = match scope.kind {
                    ScopeKind::Debate => match groups.last() {
                        Some(g) if g.round == rec.round => groups.len() - 1,
                        _ => {
                            groups.push(PlannedGroup {
                                summary: NodeId([0; 32]),
                                chunks: Vec::new(),
                                round: rec.round,
                                label: format!("Round {}", rec.round.unwrap_or(0)),
                                full_tokens: 0,
                            });
                            groups.len() - 1
                        }
                    },
                    ScopeKind::Doc => {
                        let same = last_section == Some(c.section)
                            && groups
                                .last()
                                .is_some_and(|g| g.chunks.len() < cfg.chunk.group_size);
                        last_section = Some(c.section);
                        if !same {
                            let mut label = rec.id.clone();
                            if !c.headings.is_empty() {
                                label = format!("{label} § {}", c.headings.join(" › "));
                            }
                            groups.push(PlannedGroup {
                                summary: NodeId([0; 32]),
                                chunks: Vec::new(),
                                round: None,
                                label,
                                full_tokens: 0,
                            });
                        }
                        groups.len() - 1
                    }
                };
                groups[gi].chunks.push(ci);
                groups[gi].full_tokens += c.tokens as u64;
                chunks.push(PlannedChunk {
                    full: c.id,
                    detailed: derived_id(Level::Detailed, &compressor, &[c.id]),
                    source: si,
                    start: c.start,
                    end: c.end,
                    tokens: c.tokens,
                    headings: c.headings.clone(),
                    group: gi,
                });
            }
        }
        let mut metadata = HashMap::new();
        for c in &chunks {
            metadata.insert(
                c.detailed,
                derived_id(Level::Metadata, TAGS_VERSION, &[c.detailed]),
            );
        }
        for g in &mut groups {
            let inputs: Vec<NodeId> = g.chunks.iter().map(|&ci| chunks[ci].detailed).collect();
            g.summary = derived_id(Level::Summary, &compressor, &inputs);
            metadata.insert(
                g.summary,
                derived_id(Level::Metadata, TAGS_VERSION, &[g.summary]),
            );
        }
        let summaries: Vec<NodeId> = groups.iter().map(|g| g.summary).collect();
        let abstract_id = derived_id(Level::Abstract, &compressor, &summaries);
        metadata.insert(
            abstract_id,
            derived_id(Level::Metadata, TAGS_VERSION, &[abstract_id]),
        );
        Ok(Plan {
            scope: scope.name.clone(),
            kind: scope.kind,
            compressor,
            sources,
            chunks,
            groups,
            abstract_id,
            metadata,
            full_tokens,
        })
    }

    /// Number of derived nodes (what a cold build makes).
    pub fn n_derived(&self) -> usize {
        self.chunks.len() + self.groups.len() + 1 + self.metadata.len()
    }

    /// The ids of the tree's nodes at `level`, each once, in reading order (METADATA
    /// sorted by id).
    pub fn ids_at(&self, level: Level) -> Vec<NodeId> {
        let ids: Vec<NodeId> = match level {
            Level::Full => self.chunks.iter().map(|c| c.full).collect(),
            Level::Detailed => self.chunks.iter().map(|c| c.detailed).collect(),
            Level::Summary => self.groups.iter().map(|g| g.summary).collect(),
            Level::Abstract => vec![self.abstract_id],
            Level::Metadata => {
                let mut v: Vec<NodeId> = self.metadata.values().copied().collect();
                v.sort();
                v
            }
        };
        let mut seen = std::collections::HashSet::new();
        ids.into_iter().filter(|id| seen.insert(*id)).collect()
    }

    /// Every node id of the tree, FULL included.
    pub fn all_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| [c.full, c.detailed])
            .chain(self.groups.iter().map(|g| g.summary))
            .chain(std::iter::once(self.abstract_id))
            .chain(self.metadata.values().copied())
    }

    /// A display label for a chunk's author: `alice (round 3)` in a debate.
    pub fn chunk_label(&self, ci: usize) -> Option<String> {
        let s = &self.sources[self.chunks[ci].source];
        match (&s.speaker, s.round) {
            (Some(sp), Some(r)) => Some(format!("{sp} (round {r})")),
            (Some(sp), None) => Some(sp.clone()),
            _ => None,
        }
    }
}
