//! The level tree of a scope, as ids. Because a derived node's id depends only on its level,
//! its inputs' ids and the compressor identity, the whole tree's ids are known from the FULL
//! chunks before anything is compressed: the build fills what the store lacks, and a context
//! or query request knows exactly which nodes make up the current view.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::level::Level;
use crate::model::Inputs;
use crate::model::prompts::{accepted_tokens, frame_tokens, passage_tokens, reply_tokens};
use crate::node::{NodeId, derived_id};
use crate::store::{ScopeKind, ScopeRecord, Store};
use crate::time::Time;
use crate::time::{TimeRange, TimeSpan};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Identity of the METADATA extractor (always the offline tagger). v2: a SUMMARY's tags are
/// the sum of its DETAILEDs' tag counts, not a second reading of their text.
pub const TAGS_VERSION: &str = "offline-tags-v2";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedSource {
    pub id: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
    /// When it was said or written.
    pub time: Option<Time>,
}

impl PlannedSource {
    /// Who said it, in which round, when: `alice (round 3)`, `alice (round 3,
    /// 2026-03-04)`; a document with a time: `2026-03-04`. `None` for a document
    /// without one.
    pub fn label(&self) -> Option<String> {
        let date = self.time.map(|t| t.date_label());
        match (&self.speaker, self.round, date) {
            (Some(sp), Some(r), None) => Some(format!("{sp} (round {r})")),
            (Some(sp), Some(r), Some(d)) => Some(format!("{sp} (round {r}, {d})")),
            (Some(sp), None, None) => Some(sp.clone()),
            (Some(sp), None, Some(d)) => Some(format!("{sp} ({d})")),
            (None, _, d) => d,
        }
    }

    /// [`PlannedSource::label`] under a header that names its round already (a round's
    /// block of turns): who, and when — `alice`, `alice (2026-03-04)`.
    pub fn label_within_round(&self) -> Option<String> {
        let date = self.time.map(|t| t.date_label());
        match (&self.speaker, date) {
            (Some(sp), None) => Some(sp.clone()),
            (Some(sp), Some(d)) => Some(format!("{sp} ({d})")),
            (None, d) => d,
        }
    }

    /// A turn's label split in two, for a block of turns said in one place: where and when
    /// (`Round 3, 2026-03-04`), and who (`alice`). `None` for a source without a speaker or
    /// without a round and a time (its [`PlannedSource::label`] stands alone).
    pub fn place_and_speaker(&self) -> Option<(String, &str)> {
        let sp = self.speaker.as_deref()?;
        let place = match (self.round, self.time.map(|t| t.date_label())) {
            (Some(r), Some(d)) => format!("Round {r}, {d}"),
            (Some(r), None) => format!("Round {r}"),
            (None, Some(d)) => d,
            (None, None) => return None,
        };
        Some((place, sp))
    }
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

/// A node of the reduction above the groups: an intermediate SUMMARY of a run of
/// consecutive groups (layer 1) or of a run of consecutive layer-`k - 1` reductions. A
/// SUMMARY of a longer span, made only so that no prompt exceeds `model.context_tokens`:
/// the SUMMARY level users see is still one node per group, the ABSTRACT the root.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlannedReduction {
    pub id: NodeId,
    /// 1 over groups, `k` over layer `k - 1`.
    pub layer: u32,
    /// What it reduces, in order.
    pub inputs: Vec<Reduced>,
    /// The first and last group beneath it.
    pub groups: (usize, usize),
    /// `Rounds 3–17` in a debate; the first and last group's labels in documents.
    pub label: String,
    pub full_tokens: u64,
    pub target_tokens: usize,
}

/// [`Plan::call_depths`]: each group's SUMMARY's depth (its DETAILEDs are one deeper) and
/// each reduction's; the ABSTRACT's is 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallDepths {
    pub groups: Vec<u32>,
    pub reductions: Vec<u32>,
}

/// An input of a reduction step (a [`PlannedReduction`] or the ABSTRACT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reduced {
    /// A group's SUMMARY (index into [`Plan::groups`]).
    Group(usize),
    /// An intermediate SUMMARY (index into [`Plan::reductions`]).
    Reduction(usize),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub scope: String,
    pub kind: ScopeKind,
    pub compressor: String,
    pub sources: Vec<PlannedSource>,
    pub chunks: Vec<PlannedChunk>,
    pub groups: Vec<PlannedGroup>,
    /// The reduction tree between the groups' SUMMARYs and the ABSTRACT, layer by layer
    /// (empty when every SUMMARY fits one ABSTRACT prompt).
    pub reductions: Vec<PlannedReduction>,
    /// The ABSTRACT's inputs: every group, or the top layer of the reduction.
    pub abstract_inputs: Vec<Reduced>,
    pub abstract_id: NodeId,
    pub abstract_target: usize,
    /// METADATA node id for each derived node (DETAILED, SUMMARY, ABSTRACT): a function of
    /// those ids and [`TAGS_VERSION`], so never stored, and hashed only when first asked
    /// for ([`Plan::metadata`]) — a query that reads no tags does not pay for them.
    #[serde(skip)]
    metadata: std::sync::OnceLock<HashMap<NodeId, NodeId>>,
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

/// What sizes the groups and the reduction: the model's context and the level targets.
struct Sizing {
    context: usize,
    detailed_ratio: f64,
    summary_ratio: f64,
    abstract_ratio: f64,
    /// The most an intermediate SUMMARY or the ABSTRACT may ask for: small enough that
    /// any four of them and the reply fit one prompt, so every layer shrinks.
    cap: usize,
    frame_text: usize,
    frame_summaries: usize,
    frame_abstract: usize,
}

impl Sizing {
    fn new(cfg: &Config) -> Sizing {
        let l = &cfg.levels;
        let context = cfg.model.context_tokens;
        let frame_summaries = frame_tokens(Level::Summary, Inputs::Summaries);
        let frame_abstract = frame_tokens(Level::Abstract, Inputs::Summaries);
        let room = context.saturating_sub(frame_summaries.max(frame_abstract) + 4 * 48);
        Sizing {
            context,
            detailed_ratio: l.detailed_ratio,
            summary_ratio: l.summary_ratio,
            abstract_ratio: l.abstract_ratio,
            // 4 inputs of up to 1.5× the cap plus a reply of up to 1.5× it: 7.5× the cap.
            cap: (room * 2 / 15).min(l.abstract_max_tokens).max(1),
            frame_text: frame_tokens(Level::Summary, Inputs::Text),
            frame_summaries,
            frame_abstract,
        }
    }

    fn detailed_target(&self, tokens: u64) -> usize {
        ((tokens as f64 * self.detailed_ratio).ceil() as usize).max(1)
    }

    fn summary_target(&self, full: u64) -> usize {
        ((full as f64 * self.summary_ratio).ceil() as usize).max(1)
    }

    fn reduction_target(&self, full: u64) -> usize {
        ((full as f64 * self.abstract_ratio).ceil() as usize)
            .min(self.cap)
            .max(1)
    }

    /// Whether a group's SUMMARY prompt over DETAILED nodes of `inputs` tokens (their
    /// accepted sizes and labels, summed) for a group of `full` tokens fits the context.
    fn group_fits(&self, inputs: usize, full: u64) -> bool {
        self.frame_text + inputs + reply_tokens(self.summary_target(full)) <= self.context
    }
}

/// An item of a reduction layer: a node whose output size is bounded by its target.
#[derive(Clone)]
struct Item {
    what: Reduced,
    id: NodeId,
    /// Accepted size of its text plus its passage's tags and label, in tokens.
    cost: usize,
    full: u64,
    groups: (usize, usize),
}

impl Plan {
    /// Plans `scope` from the store's source records.
    pub fn load(store: &Store, scope: &ScopeRecord, model: &str, cfg: &Config) -> Result<Plan> {
        let compressor = compressor_identity(model, cfg);
        // The current group's SUMMARY prompt inputs, for splitting a group too large for
        // one prompt (a huge round, a small context).
        let mut group_cost = 0usize;
        let mut sources = Vec::with_capacity(scope.sources.len());
        let mut chunks: Vec<PlannedChunk> = Vec::new();
        let mut groups: Vec<PlannedGroup> = Vec::new();
        let mut full_tokens = 0u64;
        // One look-up for every record (a shared store answers it in one round trip).
        let ids: Vec<&str> = scope.sources.iter().map(|e| e.id.as_str()).collect();
        let records = store.get_sources(&scope.name, &ids)?;
        // Sized after the records are read: its frames are counted with the tokenizer,
        // which a command may still be building on another thread (`token::warm`).
        let sizing = Sizing::new(cfg);
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
                time: rec.time,
            });
            let mut last_section = None;
            for c in &rec.chunks {
                full_tokens += c.tokens as u64;
                let ci = chunks.len();
                let label = sources[si].label();
                let cost = accepted_tokens(sizing.detailed_target(c.tokens as u64))
                    + passage_tokens(label.as_deref());
                // Whether the chunk still fits the current group's SUMMARY prompt.
                let fits = groups.last().is_none_or(|g| {
                    g.chunks.is_empty()
                        || sizing.group_fits(group_cost + cost, g.full_tokens + c.tokens as u64)
                });
                let gi = match scope.kind {
                    ScopeKind::Debate => match groups.last() {
                        Some(g) if g.round == rec.round && fits => groups.len() - 1,
                        last => {
                            let part = match last {
                                Some(g) if g.round == rec.round => {
                                    groups
                                        .iter()
                                        .rev()
                                        .take_while(|g| g.round == rec.round)
                                        .count()
                                        + 1
                                }
                                _ => 1,
                            };
                            let mut label = format!("Round {}", rec.round.unwrap_or(0));
                            if part > 1 {
                                label.push_str(&format!(", part {part}"));
                            }
                            groups.push(PlannedGroup {
                                summary: NodeId([0; 32]),
                                chunks: Vec::new(),
                                round: rec.round,
                                label,
                                full_tokens: 0,
                            });
                            group_cost = 0;
                            groups.len() - 1
                        }
                    },
                    ScopeKind::Doc => {
                        let same = last_section == Some(c.section)
                            && fits
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
                            group_cost = 0;
                        }
                        groups.len() - 1
                    }
                };
                group_cost += cost;
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
        for g in &mut groups {
            let inputs: Vec<NodeId> = g.chunks.iter().map(|&ci| chunks[ci].detailed).collect();
            g.summary = derived_id(Level::Summary, &compressor, &inputs);
        }
        let reducer = format!("{compressor}|ctx={}", sizing.context);
        let (reductions, abstract_inputs, abstract_target) =
            reduce(&groups, &sizing, &reducer, scope.kind, full_tokens, cfg);
        let top: Vec<NodeId> = abstract_inputs
            .iter()
            .map(|r| match *r {
                Reduced::Group(gi) => groups[gi].summary,
                Reduced::Reduction(ri) => reductions[ri].id,
            })
            .collect();
        let abstract_id = derived_id(Level::Abstract, &reducer, &top);
        Ok(Plan {
            scope: scope.name.clone(),
            kind: scope.kind,
            compressor,
            sources,
            chunks,
            groups,
            reductions,
            abstract_inputs,
            abstract_id,
            abstract_target,
            metadata: Default::default(),
            full_tokens,
        })
    }

    /// The id of a reduction step's input.
    pub fn reduced_id(&self, r: Reduced) -> NodeId {
        match r {
            Reduced::Group(gi) => self.groups[gi].summary,
            Reduced::Reduction(ri) => self.reductions[ri].id,
        }
    }

    /// The label of a reduction step's input.
    pub fn reduced_label(&self, r: Reduced) -> &str {
        match r {
            Reduced::Group(gi) => &self.groups[gi].label,
            Reduced::Reduction(ri) => &self.reductions[ri].label,
        }
    }

    /// Number of derived nodes (what a cold build makes).
    pub fn n_derived(&self) -> usize {
        self.chunks.len() + self.groups.len() + self.reductions.len() + 1 + self.metadata().len()
    }

    /// The METADATA node of each DETAILED, SUMMARY (of a group) and the ABSTRACT, by the
    /// node it tags; hashed at the first call.
    pub fn metadata(&self) -> &HashMap<NodeId, NodeId> {
        self.metadata.get_or_init(|| {
            self.chunks
                .iter()
                .map(|c| c.detailed)
                .chain(self.groups.iter().map(|g| g.summary))
                .chain(std::iter::once(self.abstract_id))
                .map(|t| (t, derived_id(Level::Metadata, TAGS_VERSION, &[t])))
                .collect()
        })
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
                let mut v: Vec<NodeId> = self.metadata().values().copied().collect();
                v.sort();
                v
            }
        };
        let mut seen = std::collections::HashSet::new();
        ids.into_iter().filter(|id| seen.insert(*id)).collect()
    }

    /// [`Plan::all_ids`] with each node's level (the reduction's nodes are SUMMARYs).
    pub fn all_ids_by_level(&self) -> impl Iterator<Item = (Level, NodeId)> + '_ {
        self.tree_ids_by_level()
            .chain(self.metadata().values().map(|&id| (Level::Metadata, id)))
    }

    /// How many model calls, one after another, each step of the build is from the
    /// ABSTRACT, itself included: the ABSTRACT 1, an input of it 2, and so on. A DETAILED is
    /// one more than its group's SUMMARY. Every node of the tree has one parent (an
    /// in-tree), so starting the waiting calls deepest first (Hu's rule) is what an optimal
    /// schedule of calls of equal length does; the build's priorities and the benchmark's
    /// ideal both read it.
    pub fn call_depths(&self) -> CallDepths {
        let mut groups = vec![2u32; self.groups.len()];
        let mut reductions = vec![2u32; self.reductions.len()];
        fn set(r: Reduced, d: u32, groups: &mut [u32], reductions: &mut [u32]) {
            match r {
                Reduced::Group(g) => groups[g] = d,
                Reduced::Reduction(ri) => reductions[ri] = d,
            }
        }
        for &r in &self.abstract_inputs {
            set(r, 2, &mut groups, &mut reductions);
        }
        // Layer by layer: a reduction's parent comes after it.
        for ri in (0..self.reductions.len()).rev() {
            let d = reductions[ri] + 1;
            for &r in &self.reductions[ri].inputs {
                set(r, d, &mut groups, &mut reductions);
            }
        }
        CallDepths { groups, reductions }
    }

    /// [`Plan::all_ids_by_level`] but METADATA, in the tree's order: FULL and DETAILED of
    /// each chunk, the groups' SUMMARYs, the reduction's, the ABSTRACT.
    pub fn tree_ids_by_level(&self) -> impl Iterator<Item = (Level, NodeId)> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| [(Level::Full, c.full), (Level::Detailed, c.detailed)])
            .chain(self.groups.iter().map(|g| (Level::Summary, g.summary)))
            .chain(self.reductions.iter().map(|r| (Level::Summary, r.id)))
            .chain(std::iter::once((Level::Abstract, self.abstract_id)))
    }

    /// Every node id of the tree, FULL and the intermediate SUMMARYs of the reduction
    /// included.
    pub fn all_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.all_ids_by_level().map(|(_, id)| id)
    }

    /// A display label for a chunk's author: `alice (round 3)` in a debate, `alice
    /// (round 3, 2026-03-04)` when the turn has a time ([`PlannedSource::label`]).
    pub fn chunk_label(&self, ci: usize) -> Option<String> {
        self.sources[self.chunks[ci].source].label()
    }

    /// The time of a chunk's source.
    pub fn chunk_time(&self, ci: usize) -> Option<Time> {
        self.sources[self.chunks[ci].source].time
    }

    /// The times of the chunks of a group: the earliest and the latest (`None` when
    /// none has one).
    pub fn group_time(&self, gi: usize) -> Option<TimeSpan> {
        self.groups[gi]
            .chunks
            .iter()
            .filter_map(|&ci| self.chunk_time(ci).map(TimeSpan::of))
            .reduce(TimeSpan::merge)
    }

    /// [`Plan::during`], or an error saying nothing in the scope was said in `range`.
    pub fn within(&self, range: &TimeRange) -> Result<Plan> {
        self.during(range).ok_or_else(|| {
            Error::invalid(format!(
                "nothing in `{}` was said {range} (sources without a time are left out when a time range is given)",
                self.scope
            ))
        })
    }

    /// The part of this tree whose sources were said within `range`, for reading (a
    /// window, a query), never for building: the chunks whose source time is in the
    /// range, the groups with such a chunk (a group's SUMMARY counts when its time span
    /// overlaps the range), the ABSTRACT (the overview of the whole scope) and the
    /// METADATA of what is kept. The reduction between the groups and the ABSTRACT is
    /// left out (the ABSTRACT's inputs are the kept groups). `None` when no chunk is in
    /// the range; the plan itself when the range is unbounded.
    pub fn during(&self, range: &TimeRange) -> Option<Plan> {
        if range.is_all() {
            return Some(self.clone());
        }
        self.keeping(|c| range.contains(self.sources[c.source].time.as_ref()))
    }

    /// The part of this tree made of the chunks `keep` holds to, as [`Plan::during`] makes
    /// it (for reading only); `None` when it keeps none.
    pub fn keeping(&self, keep: impl Fn(&PlannedChunk) -> bool) -> Option<Plan> {
        let mut chunks: Vec<PlannedChunk> = Vec::new();
        let mut groups: Vec<PlannedGroup> = Vec::new();
        for g in &self.groups {
            let kept: Vec<&PlannedChunk> = g
                .chunks
                .iter()
                .map(|&ci| &self.chunks[ci])
                .filter(|c| keep(c))
                .collect();
            if kept.is_empty() {
                continue;
            }
            let gi = groups.len();
            let first = chunks.len();
            chunks.extend(kept.into_iter().map(|c| PlannedChunk {
                group: gi,
                ..c.clone()
            }));
            groups.push(PlannedGroup {
                chunks: (first..chunks.len()).collect(),
                full_tokens: chunks[first..].iter().map(|c| c.tokens as u64).sum(),
                ..g.clone()
            });
        }
        if chunks.is_empty() {
            return None;
        }
        Some(Plan {
            scope: self.scope.clone(),
            kind: self.kind,
            compressor: self.compressor.clone(),
            sources: self.sources.clone(),
            full_tokens: chunks.iter().map(|c| c.tokens as u64).sum(),
            chunks,
            abstract_inputs: (0..groups.len()).map(Reduced::Group).collect(),
            groups,
            reductions: Vec::new(),
            abstract_id: self.abstract_id,
            abstract_target: self.abstract_target,
            metadata: Default::default(),
        })
    }
}

/// The reduction above the groups: layers of intermediate SUMMARYs until their tokens
/// fit one ABSTRACT prompt. Each layer packs consecutive items greedily, left to right,
/// as many as fit one prompt (by each input's accepted size and label in real tokens, the
/// prompt's instructions and the reply budget). Greedy from the left is prefix-stable:
/// appending to the scope changes only the last run of each layer, so an append
/// recompresses one node per layer, O(log n). Returns the reductions, the ABSTRACT's
/// inputs and its target.
fn reduce(
    groups: &[PlannedGroup],
    sizing: &Sizing,
    reducer: &str,
    kind: ScopeKind,
    full_tokens: u64,
    cfg: &Config,
) -> (Vec<PlannedReduction>, Vec<Reduced>, usize) {
    let lv = &cfg.levels;
    let abstract_target = ((full_tokens as f64 * lv.abstract_ratio).ceil() as usize)
        .min(lv.abstract_max_tokens)
        .min(sizing.cap)
        .max(1);
    let mut items: Vec<Item> = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| Item {
            what: Reduced::Group(gi),
            id: g.summary,
            cost: accepted_tokens(sizing.summary_target(g.full_tokens))
                + passage_tokens(Some(&g.label)),
            full: g.full_tokens,
            groups: (gi, gi),
        })
        .collect();
    let abstract_fits = |items: &[Item]| {
        sizing.frame_abstract
            + items.iter().map(|i| i.cost).sum::<usize>()
            + reply_tokens(abstract_target)
            <= sizing.context
    };
    let mut reductions: Vec<PlannedReduction> = Vec::new();
    let mut layer = 0u32;
    while items.len() > 1 && !abstract_fits(&items) {
        layer += 1;
        let mut next: Vec<Item> = Vec::new();
        let mut i = 0;
        while i < items.len() {
            let mut j = i + 1;
            let mut cost = items[i].cost;
            let mut full = items[i].full;
            while j < items.len() {
                let (c, f) = (cost + items[j].cost, full + items[j].full);
                let fits = sizing.frame_summaries + c + reply_tokens(sizing.reduction_target(f))
                    <= sizing.context;
                if !fits {
                    break;
                }
                (cost, full) = (c, f);
                j += 1;
            }
            if j == i + 1 && layer > 1 && i + 1 < items.len() {
                // Never a layer that does not shrink (only with a context too small for
                // two capped inputs; the build's measurement still stops what is over).
                j = i + 2;
                full += items[i + 1].full;
            }
            let run = &items[i..j];
            let inputs: Vec<Reduced> = run.iter().map(|x| x.what).collect();
            let ids: Vec<NodeId> = run.iter().map(|x| x.id).collect();
            let id = derived_id(Level::Summary, reducer, &ids);
            let span = (run[0].groups.0, run[run.len() - 1].groups.1);
            let label = span_label(groups, span, kind);
            let target = sizing.reduction_target(full);
            next.push(Item {
                what: Reduced::Reduction(reductions.len()),
                id,
                cost: accepted_tokens(target) + passage_tokens(Some(&label)),
                full,
                groups: span,
            });
            reductions.push(PlannedReduction {
                id,
                layer,
                inputs,
                groups: span,
                label,
                full_tokens: full,
                target_tokens: target,
            });
            i = j;
        }
        items = next;
    }
    (
        reductions,
        items.iter().map(|i| i.what).collect(),
        abstract_target,
    )
}

/// The label of a reduction over groups `first..=last`: `Rounds 3–17` in a debate, the
/// first and last group's labels in documents.
fn span_label(groups: &[PlannedGroup], (first, last): (usize, usize), kind: ScopeKind) -> String {
    let (a, b) = (&groups[first], &groups[last]);
    match (kind, a.round, b.round) {
        (ScopeKind::Debate, Some(x), Some(y)) if x == y => format!("Round {x}"),
        (ScopeKind::Debate, Some(x), Some(y)) => format!("Rounds {x}\u{2013}{y}"),
        _ if first == last => a.label.clone(),
        _ => format!("{} \u{2013} {}", a.label, b.label),
    }
}
