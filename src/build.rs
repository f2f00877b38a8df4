//! The build: fills a scope's level tree (see [`crate::plan`]) with nodes, as a DAG — a node
//! is compressed as soon as its inputs exist, with no barrier between levels — under one
//! global limit on concurrent sub-model calls. Nodes already in the store and live are cache
//! hits and cost nothing. A failed node is reported as data, never fails the build.
//!
//! A node the offline fallback made is marked in the store ([`FallbackMark`]), and so is a
//! node built over one. Nodes marked because the model did not answer are not cache hits
//! for a build with the model: they are made again, so an outage does not outlive itself.

use crate::config::Config;
use crate::error::Result;
use crate::level::{Level, PerLevel};
use crate::model::limit::Gate;
use crate::model::usage::{self, Meter, Usage};
use crate::model::{CompressRequest, ModelError, Passage, SubModel, offline};
use crate::node::{FallbackMark, Meta, Node, NodeId, Span, merge_spans};
use crate::plan::Plan;
use crate::store::Store;
use crate::text;
use crate::token;
use futures::future::{join, join_all};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Receives build progress (a progress bar on a TTY, nothing in tests).
pub trait Progress: Send + Sync {
    fn start(&self, _total: u64, _what: &str) {}
    fn inc(&self, _n: u64) {}
    fn finish(&self) {}
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl Progress for NoProgress {}

/// A node that could not be built, and why.
#[derive(Clone, Debug, Serialize)]
pub struct BuildFailure {
    pub node: String,
    pub level: Level,
    pub what: String,
    pub error: String,
}

/// What a build did. Partial failure is data: `failures` lists what could not be built.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BuildReport {
    pub scope: String,
    pub nodes_total: usize,
    pub nodes_built: usize,
    pub cache_hits: usize,
    /// Calls to the configured sub-model (retries included).
    pub model_calls: u64,
    /// Nodes whose model output was unusable and were made by the offline compressor.
    pub fallbacks: u64,
    /// Model outputs rejected as empty.
    pub empty: u64,
    /// Model outputs rejected as over budget (or cut off at their token limit).
    pub over_budget: u64,
    /// Model outputs rejected for numbers, dates or names that are not in their inputs.
    pub unfaithful: u64,
    /// Model calls that failed after the client's retries (server errors, timeouts,
    /// undecodable responses).
    pub model_errors: u64,
    /// Nodes marked as made by the fallback while the model did not answer (or built over
    /// such a node) that this build made again.
    pub fallback_retried: u64,
    /// Nodes of the tree that carry a fallback mark after this build: made by the offline
    /// fallback, or built over such a node.
    pub fallback_nodes: u64,
    /// Of those, the ones marked while the model did not answer: the next build retries
    /// them.
    pub fallback_awaiting_model: u64,
    pub failures: Vec<BuildFailure>,
    pub elapsed_ms: u64,
    /// Nodes built at each level (full, detailed, summary, abstract, metadata).
    pub built_by_level: PerLevel<usize>,
    /// Nodes written to the full-text index.
    pub indexed: usize,
    /// Model traffic: calls, tokens and estimated cost per model.
    pub usage: Usage,
    /// The embedding step (hybrid retrieval); absent when no embedder is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<crate::hybrid::EmbedReport>,
}

pub(crate) struct Builder<'a> {
    pub store: &'a Store,
    pub plan: &'a Plan,
    pub model: &'a dyn SubModel,
    /// Replaces the model's output when it fails (the offline compressor in production).
    pub fallback: &'a dyn SubModel,
    pub cfg: &'a Config,
    pub now: u64,
    /// Also rebuild nodes that expire before this time (warming ahead of expiry).
    pub refresh_before: Option<u64>,
    pub progress: &'a dyn Progress,
}

struct Run<'a> {
    b: &'a Builder<'a>,
    /// `build.concurrency` for models that do not limit their calls themselves.
    gate: Option<Gate>,
    calls: AtomicU64,
    fallbacks: AtomicU64,
    empty: AtomicU64,
    over_budget: AtomicU64,
    unfaithful: AtomicU64,
    model_errors: AtomicU64,
    hits: AtomicU64,
    /// Whether nodes are marked at all: not when the model is the fallback itself.
    marking: bool,
    /// Whether the store held marks when the build started (else no lookups).
    check_marks: bool,
    /// The mark of every node this build wrote or found with one: a node built over them
    /// is marked too.
    marks: Mutex<HashMap<NodeId, FallbackMark>>,
    /// Marked nodes being made again (their old text, and vectors, are replaced).
    retrying: Mutex<HashSet<NodeId>>,
    retried: AtomicU64,
    built: Mutex<Vec<Node>>,
    failures: Mutex<Vec<BuildFailure>>,
}

impl Builder<'_> {
    /// Runs the build. Returns the report and the nodes it built (for the index).
    pub async fn run(&self) -> Result<(BuildReport, Vec<Node>)> {
        let t0 = Instant::now();
        let marking = self.model.identity() != self.fallback.identity();
        let run = Run {
            b: self,
            gate: (!self.model.self_limited()).then(|| Gate::new(self.cfg.build.concurrency)),
            calls: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            empty: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            unfaithful: AtomicU64::new(0),
            model_errors: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            marking,
            check_marks: marking && self.store.has_fallback_marks(),
            marks: Mutex::new(HashMap::new()),
            retrying: Mutex::new(HashSet::new()),
            retried: AtomicU64::new(0),
            built: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
        };
        self.progress.start(
            self.plan.n_derived() as u64,
            &format!("compressing {}", self.plan.scope),
        );
        let meter = Arc::new(Meter::default());
        usage::metered(meter.clone(), async {
            let summaries = join_all((0..self.plan.groups.len()).map(|gi| run.group(gi))).await;
            if let Some(abs) = run.abstract_node(summaries).await? {
                run.metadata(&abs).await?;
            }
            Ok::<(), crate::Error>(())
        })
        .await?;
        self.progress.finish();
        let built = run.built.into_inner().expect("poisoned");
        let failures = run.failures.into_inner().expect("poisoned");
        let by_level: PerLevel<usize> = built.iter().map(|n| n.level).collect();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let marks = run.marks.into_inner().expect("poisoned");
        let mut usage = Usage::from_meter(&meter, &self.cfg.prices, t0.elapsed());
        usage.invalid_outputs = load(&run.empty) + load(&run.over_budget) + load(&run.unfaithful);
        usage.fallbacks = load(&run.fallbacks);
        let report = BuildReport {
            scope: self.plan.scope.clone(),
            nodes_total: self.plan.n_derived(),
            nodes_built: built.len(),
            cache_hits: run.hits.load(Ordering::Relaxed) as usize,
            model_calls: load(&run.calls),
            fallbacks: load(&run.fallbacks),
            empty: load(&run.empty),
            over_budget: load(&run.over_budget),
            unfaithful: load(&run.unfaithful),
            model_errors: load(&run.model_errors),
            fallback_retried: load(&run.retried),
            fallback_nodes: marks.len() as u64,
            fallback_awaiting_model: marks.values().filter(|m| m.is_retried()).count() as u64,
            failures,
            elapsed_ms: t0.elapsed().as_millis() as u64,
            built_by_level: by_level,
            indexed: 0,
            usage,
            embeddings: None,
        };
        Ok((report, built))
    }
}

impl Run<'_> {
    fn fail(&self, id: NodeId, level: Level, what: String, error: String) {
        tracing::warn!(%what, %error, "node not built");
        self.failures.lock().expect("poisoned").push(BuildFailure {
            node: id.to_hex(),
            level,
            what,
            error,
        });
        self.b.progress.inc(1);
    }

    /// A live node of the store, unless it is marked for a retry (then `None`: made again).
    fn cached(&self, id: &NodeId) -> Result<Option<Node>> {
        let Some(n) = self.b.store.get_live(id, self.horizon())? else {
            return Ok(None);
        };
        if let Some(mark) = self.stored_mark(id)? {
            if mark.is_retried() {
                self.retrying.lock().expect("poisoned").insert(*id);
                self.retried.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            self.marks.lock().expect("poisoned").insert(*id, mark);
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.b.progress.inc(1);
        Ok(Some(n))
    }

    /// The mark a stored node carries (looked up only when the build started with marks).
    fn stored_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>> {
        if !self.check_marks {
            return Ok(None);
        }
        self.b.store.fallback_mark(id)
    }

    /// The mark of a node whose own text came with `own` and that was built over `inputs`:
    /// over an input the model is to remake, the node is remade after it.
    fn mark_over<'i>(
        &self,
        own: Option<FallbackMark>,
        inputs: impl IntoIterator<Item = &'i NodeId>,
    ) -> Option<FallbackMark> {
        if own == Some(FallbackMark::ModelUnavailable) {
            return own;
        }
        let marks = self.marks.lock().expect("poisoned");
        let over = inputs
            .into_iter()
            .any(|i| marks.get(i).is_some_and(|m| m.is_retried()));
        if over {
            Some(FallbackMark::BuiltOverFallback)
        } else {
            own
        }
    }

    fn expires_at(&self) -> Option<u64> {
        match self.b.cfg.store.ttl_secs {
            0 => None,
            ttl => Some(self.b.now.saturating_add(ttl)),
        }
    }

    fn save(&self, node: Node, mark: Option<FallbackMark>) -> Result<Node> {
        if self.retrying.lock().expect("poisoned").remove(&node.id) {
            let old = self.b.store.get_node(&node.id)?;
            if old.is_none_or(|o| o.text != node.text) {
                // Same id, new text: vectors of the old text would mislead dense retrieval.
                self.b.store.remove_node_embeddings(&node.id)?;
            }
        }
        self.b.store.put_node_marked(&node, mark)?;
        if let Some(m) = mark {
            self.marks.lock().expect("poisoned").insert(node.id, m);
        }
        self.built.lock().expect("poisoned").push(node.clone());
        self.b.progress.inc(1);
        Ok(node)
    }

    /// Asks the model, validates the output (faithfulness included), retries, and falls
    /// back to the offline compressor; the fallback's text comes with its mark (why the
    /// model's was not used). Returns `Err` only when even the fallback failed.
    async fn compress(
        &self,
        req: CompressRequest,
    ) -> Result<(String, Option<FallbackMark>), String> {
        let trusted = self.b.model.trusted();
        let req = Arc::new(req);
        let mut last = String::new();
        let mut mark = FallbackMark::Refused;
        for _ in 0..=self.b.cfg.build.retries {
            let out = {
                // Higher levels first: they are on the critical path of the DAG.
                let _permit = match &self.gate {
                    Some(g) => Some(g.acquire(req.level.as_u8()).await),
                    None => None,
                };
                self.calls.fetch_add(1, Ordering::Relaxed);
                self.b.model.compress((*req).clone()).await
            };
            let rejection = match out {
                Ok(text) if trusted => match validate(&text, &req, true) {
                    Ok(()) => return Ok((text, None)),
                    Err(r) => r,
                },
                Ok(text) => {
                    let r = req.clone();
                    // The fact check tokenises and scans every input: rayon's work.
                    match crate::model::spawn_cpu(move || validate(&text, &r, false).map(|()| text))
                        .await
                    {
                        Ok(Ok(text)) => return Ok((text, None)),
                        Ok(Err(r)) => r,
                        Err(panic) => Rejection::Failed(panic),
                    }
                }
                Err(ModelError::Truncated) => {
                    Rejection::OverBudget(ModelError::Truncated.to_string())
                }
                Err(
                    e
                    @ (ModelError::Unavailable(_) | ModelError::RateLimited | ModelError::Timeout),
                ) => Rejection::Unavailable(e.to_string()),
                Err(e) => Rejection::Failed(e.to_string()),
            };
            let (counter, why) = match &rejection {
                Rejection::Empty => (&self.empty, FallbackMark::Empty),
                Rejection::OverBudget(_) => (&self.over_budget, FallbackMark::OverBudget),
                Rejection::Unfaithful(_) => (&self.unfaithful, FallbackMark::Unfaithful),
                Rejection::Unavailable(_) => (&self.model_errors, FallbackMark::ModelUnavailable),
                Rejection::Failed(_) => (&self.model_errors, FallbackMark::Refused),
            };
            counter.fetch_add(1, Ordering::Relaxed);
            // One attempt the model did not answer is enough to try again later: it never
            // had its full say.
            if mark != FallbackMark::ModelUnavailable {
                mark = why;
            }
            last = rejection.to_string();
        }
        let mark = self.marking.then_some(mark);
        let req = Arc::unwrap_or_clone(req);
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(error = %last, "model output replaced by the fallback compressor");
        match self.b.fallback.compress(req.clone()).await {
            Ok(text) if validate(&text, &req, true).is_ok() => Ok((text, mark)),
            Ok(_) => Err(format!("{last}; fallback output unusable too")),
            Err(e) => Err(format!("{last}; fallback failed: {e}")),
        }
    }

    fn horizon(&self) -> u64 {
        self.b.refresh_before.unwrap_or(self.b.now).max(self.b.now)
    }

    /// The common warm case: every node of the group is live and none is to be retried.
    /// Checked on the deadline index (and the marks, if any) without decoding a node.
    fn group_is_live(&self, gi: usize) -> Result<bool> {
        let plan = self.b.plan;
        let g = &plan.groups[gi];
        let mut n = 0;
        let mut marked = Vec::new();
        let ids = g
            .chunks
            .iter()
            .map(|&ci| plan.chunks[ci].detailed)
            .chain(std::iter::once(g.summary));
        let xs: Vec<NodeId> = ids
            .flat_map(|id| std::iter::once(id).chain(plan.metadata.get(&id).copied()))
            .collect();
        // One look-up for the whole group (one round trip on a shared store).
        if !self.b.store.all_live(&xs, self.horizon())? {
            return Ok(false);
        }
        for x in xs {
            if let Some(m) = self.stored_mark(&x)? {
                if m.is_retried() {
                    return Ok(false);
                }
                marked.push((x, m));
            }
            n += 1;
        }
        self.marks.lock().expect("poisoned").extend(marked);
        self.hits.fetch_add(n, Ordering::Relaxed);
        self.b.progress.inc(n);
        Ok(true)
    }

    async fn group(&self, gi: usize) -> Option<NodeId> {
        let plan = self.b.plan;
        let g = &plan.groups[gi];
        match self.group_is_live(gi) {
            Ok(true) => return Some(g.summary),
            Ok(false) => {}
            Err(e) => {
                self.fail(
                    g.summary,
                    Level::Summary,
                    format!("{} summary", g.label),
                    e.to_string(),
                );
                return None;
            }
        }
        let dets: Vec<Option<Node>> = join_all(g.chunks.iter().map(|&ci| self.detailed(ci))).await;
        let metas = join_all(dets.iter().flatten().map(|d| async {
            if let Err(e) = self.metadata(d).await {
                self.fail(d.id, Level::Metadata, "metadata".into(), e.to_string());
            }
        }));
        let summary = async {
            let what = format!("{} summary", g.label);
            if dets.iter().any(Option::is_none) {
                self.fail(
                    g.summary,
                    Level::Summary,
                    what,
                    "an input node failed".into(),
                );
                return None;
            }
            let dets: Vec<&Node> = dets.iter().flatten().collect();
            match self.summary(gi, &dets).await {
                Ok(Some(s)) => {
                    if let Err(e) = self.metadata(&s).await {
                        self.fail(s.id, Level::Metadata, "metadata".into(), e.to_string());
                    }
                    Some(s)
                }
                Ok(None) => None,
                Err(e) => {
                    self.fail(g.summary, Level::Summary, what, e.to_string());
                    None
                }
            }
        };
        join(metas, summary).await.1.map(|s| s.id)
    }

    async fn detailed(&self, ci: usize) -> Option<Node> {
        let c = &self.b.plan.chunks[ci];
        let what = format!(
            "{} [{}..{}) detailed",
            self.b.plan.sources[c.source].id, c.start, c.end
        );
        let r: Result<Option<Node>> = async {
            if let Some(n) = self.cached(&c.detailed)? {
                return Ok(Some(n));
            }
            let full = self.b.store.get_node(&c.full)?.ok_or_else(|| {
                crate::Error::DataCorruption(format!("FULL node {} is missing", c.full))
            })?;
            let target = ((full.tokens as f64) * self.b.cfg.levels.detailed_ratio).ceil() as usize;
            let req = CompressRequest {
                level: Level::Detailed,
                passages: vec![Passage {
                    text: full.text.clone(),
                    // The offline compressor would print the label into the text; a model
                    // needs it to keep who said what in which round.
                    label: if self.b.model.trusted() {
                        None
                    } else {
                        self.b.plan.chunk_label(ci)
                    },
                }],
                target_tokens: target.max(1),
            };
            match self.compress(req).await {
                Ok((text, mark)) => Ok(Some(
                    self.save(
                        self.derived(
                            c.detailed,
                            Level::Detailed,
                            text,
                            vec![full.id],
                            full.citations.clone(),
                            full.meta.clone(),
                        )
                        .await?,
                        mark,
                    )?,
                )),
                Err(e) => {
                    self.fail(c.detailed, Level::Detailed, what.clone(), e);
                    Ok(None)
                }
            }
        }
        .await;
        r.unwrap_or_else(|e| {
            self.fail(c.detailed, Level::Detailed, what, e.to_string());
            None
        })
    }

    async fn summary(&self, gi: usize, dets: &[&Node]) -> Result<Option<Node>> {
        let plan = self.b.plan;
        let g = &plan.groups[gi];
        if let Some(n) = self.cached(&g.summary)? {
            return Ok(Some(n));
        }
        let passages = g
            .chunks
            .iter()
            .zip(dets)
            .map(|(&ci, d)| Passage {
                text: d.text.clone(),
                label: if self.b.model.trusted() {
                    plan.sources[plan.chunks[ci].source].speaker.clone()
                } else {
                    plan.chunk_label(ci)
                },
            })
            .collect();
        let target = (g.full_tokens as f64 * self.b.cfg.levels.summary_ratio).ceil() as usize;
        let req = CompressRequest {
            level: Level::Summary,
            passages,
            target_tokens: target.max(1),
        };
        match self.compress(req).await {
            Ok((text, mark)) => {
                let meta = merge_meta(dets.iter().map(|d| &d.meta));
                let spans = merge_spans(dets.iter().flat_map(|d| d.citations.iter().cloned()));
                let children: Vec<NodeId> = dets.iter().map(|d| d.id).collect();
                let mark = self.mark_over(mark, &children);
                Ok(Some(
                    self.save(
                        self.derived(g.summary, Level::Summary, text, children, spans, meta)
                            .await?,
                        mark,
                    )?,
                ))
            }
            Err(e) => {
                self.fail(g.summary, Level::Summary, format!("{} summary", g.label), e);
                Ok(None)
            }
        }
    }

    async fn abstract_node(&self, summaries: Vec<Option<NodeId>>) -> Result<Option<Node>> {
        let plan = self.b.plan;
        if let Some(n) = self.cached(&plan.abstract_id)? {
            return Ok(Some(n));
        }
        if summaries.iter().any(Option::is_none) || summaries.is_empty() {
            self.fail(
                plan.abstract_id,
                Level::Abstract,
                format!("{} abstract", plan.scope),
                "an input node failed".into(),
            );
            return Ok(None);
        }
        let mut sums: Vec<Node> = Vec::with_capacity(summaries.len());
        for id in summaries.into_iter().flatten() {
            sums.push(self.b.store.get_node(&id)?.ok_or_else(|| {
                crate::Error::DataCorruption(format!("SUMMARY {id} vanished during the build"))
            })?);
        }
        let passages = plan
            .groups
            .iter()
            .zip(&sums)
            .map(|(g, s)| Passage {
                text: s.text.clone(),
                label: Some(g.label.clone()),
            })
            .collect();
        let lv = &self.b.cfg.levels;
        let target = ((plan.full_tokens as f64 * lv.abstract_ratio).ceil() as usize)
            .min(lv.abstract_max_tokens)
            .max(1);
        let req = CompressRequest {
            level: Level::Abstract,
            passages,
            target_tokens: target,
        };
        match self.compress(req).await {
            Ok((text, mark)) => {
                let meta = merge_meta(sums.iter().map(|s| &s.meta));
                let spans = merge_spans(sums.iter().flat_map(|s| s.citations.iter().cloned()));
                let children: Vec<NodeId> = sums.iter().map(|s| s.id).collect();
                let mark = self.mark_over(mark, &children);
                Ok(Some(
                    self.save(
                        self.derived(
                            plan.abstract_id,
                            Level::Abstract,
                            text,
                            children,
                            spans,
                            meta,
                        )
                        .await?,
                        mark,
                    )?,
                ))
            }
            Err(e) => {
                self.fail(
                    plan.abstract_id,
                    Level::Abstract,
                    format!("{} abstract", plan.scope),
                    e,
                );
                Ok(None)
            }
        }
    }

    /// The text of each of `target`'s citations (a DETAILED or SUMMARY node), put together
    /// from the FULL chunks beneath it. FULL nodes are content-addressed and immutable, so
    /// a source replaced while the build runs cannot change what is read here (its text in
    /// the store may already be the new one); a chunk that is gone fails this node only.
    fn cited_text(&self, target: &Node) -> Result<Vec<String>> {
        let fulls: Vec<NodeId> = match target.level {
            Level::Detailed => target.children.clone(),
            _ => {
                let mut v = Vec::with_capacity(target.children.len());
                for d in &target.children {
                    let det = self.b.store.get_node(d)?.ok_or_else(|| {
                        crate::Error::DataCorruption(format!("DETAILED node {d} is missing"))
                    })?;
                    v.extend(det.children);
                }
                v
            }
        };
        let mut pieces: Vec<(Span, String)> = Vec::with_capacity(fulls.len());
        for id in &fulls {
            let n = self.b.store.get_node(id)?.ok_or_else(|| {
                crate::Error::DataCorruption(format!("FULL node {id} is missing"))
            })?;
            let span = n.citations.first().cloned().ok_or_else(|| {
                crate::Error::DataCorruption(format!("FULL node {id} has no span"))
            })?;
            pieces.push((span, n.text));
        }
        pieces.sort_by(|a, b| (&a.0.source, a.0.start).cmp(&(&b.0.source, b.0.start)));
        target
            .citations
            .iter()
            .map(|span| {
                let mut text = String::new();
                let mut at = span.start;
                for (p, t) in &pieces {
                    if p.source == span.source && p.start == at && p.end <= span.end {
                        text.push_str(t);
                        at = p.end;
                    }
                }
                if at != span.end {
                    return Err(crate::Error::DataCorruption(format!(
                        "the chunks of {} [{}..{}) are not all in the store (the source changed during the build?)",
                        span.source, span.start, span.end
                    )));
                }
                Ok(text)
            })
            .collect()
    }

    /// METADATA of `target`: tags extracted from the FULL text beneath it; for the ABSTRACT,
    /// the tags that recur across its SUMMARYs' METADATA (re-reading the whole scope for
    /// one node would cost as much as the rest of the build).
    async fn metadata(&self, target: &Node) -> Result<()> {
        let Some(&id) = self.b.plan.metadata.get(&target.id) else {
            return Ok(());
        };
        if self.cached(&id)?.is_some() {
            return Ok(());
        }
        let tags = if target.level == Level::Abstract {
            let mut children = Vec::new();
            for c in &target.children {
                let mid = self.b.plan.metadata.get(c).copied();
                if let Some(n) = mid
                    .map(|m| self.b.store.get_live(&m, self.b.now))
                    .transpose()?
                    .flatten()
                    && let Some(t) = n.meta.tags
                {
                    children.push(t);
                }
            }
            offline::merge_tags(&children, 16)
        } else {
            let texts = self.cited_text(target)?;
            crate::model::spawn_cpu(move || {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                offline::tags(&refs, 12)
            })
            .await
            .map_err(crate::Error::invalid)?
        };
        let mut meta = target.meta.clone();
        let text = render_tags(&meta, &tags);
        meta.tags = Some(tags);
        // Tags come from the FULL text beneath, never from model output: no mark.
        self.save(
            self.derived(
                id,
                Level::Metadata,
                text,
                vec![target.id],
                target.citations.clone(),
                meta,
            )
            .await?,
            None,
        )?;
        Ok(())
    }

    /// A derived node (its text tokenised on rayon, not on the executor).
    async fn derived(
        &self,
        id: NodeId,
        level: Level,
        text: String,
        children: Vec<NodeId>,
        citations: Vec<Span>,
        meta: Meta,
    ) -> Result<Node> {
        let (text, tokens) = crate::model::spawn_cpu(move || {
            let t = token::count(&text) as u32;
            (text, t)
        })
        .await
        .map_err(crate::Error::invalid)?;
        Ok(Node {
            id,
            scope: self.b.plan.scope.clone(),
            level,
            tokens,
            text,
            children,
            citations,
            meta,
            created_at: self.b.now,
            expires_at: self.expires_at(),
        })
    }
}

/// Why a model output was not used.
#[derive(Debug, PartialEq)]
enum Rejection {
    Empty,
    OverBudget(String),
    Unfaithful(String),
    /// The model did not answer: connection refused, timeouts, 5xx or 429 after retries.
    Unavailable(String),
    /// The server refused the request or sent something that is no completion.
    Failed(String),
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Empty => f.write_str("empty output"),
            Rejection::OverBudget(m)
            | Rejection::Unfaithful(m)
            | Rejection::Unavailable(m)
            | Rejection::Failed(m) => f.write_str(m),
        }
    }
}

/// Model output is untrusted: it must be non-empty text within reach of its budget, and
/// every number, date and name in it must occur in its inputs. A `trusted` compressor
/// (the offline one, which may keep one whole sentence over budget rather than cut it,
/// and only ever copies sentences) is only checked for emptiness.
fn validate(text: &str, req: &CompressRequest, trusted: bool) -> Result<(), Rejection> {
    let input_blank = req.passages.iter().all(|p| p.text.trim().is_empty());
    if text.trim().is_empty() && !input_blank {
        return Err(Rejection::Empty);
    }
    if trusted {
        return Ok(());
    }
    let t = token::count(text);
    let limit = req.target_tokens + req.target_tokens / 2 + 16;
    if t > limit {
        return Err(Rejection::OverBudget(format!(
            "output of {t} tokens is over the budget of {}",
            req.target_tokens
        )));
    }
    let unsupported = unsupported_facts(text, &req.passages);
    if !unsupported.is_empty() {
        return Err(Rejection::Unfaithful(format!(
            "not in the input: {}",
            unsupported.join(", ")
        )));
    }
    Ok(())
}

/// The numbers, dates and names of `text` that its inputs (texts and labels) do not
/// contain. Numbers compare by their digits (`38,000` = `38000`); names and months by
/// their words, ignoring case and possessives (`Alice's` is `alice`, a speaker label).
fn unsupported_facts(text: &str, passages: &[Passage]) -> Vec<String> {
    use unicode_segmentation::UnicodeSegmentation;
    fn number(s: &str) -> String {
        let d: String = s
            .chars()
            .filter(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        d.trim_matches('.').to_string()
    }
    fn word(w: &str) -> String {
        let w = w.to_lowercase();
        for suffix in ["'s", "\u{2019}s"] {
            if let Some(stem) = w.strip_suffix(suffix) {
                return stem.to_string();
            }
        }
        w
    }
    let mut numbers = std::collections::HashSet::new();
    let mut words = std::collections::HashSet::new();
    let inputs = passages
        .iter()
        .flat_map(|p| [Some(p.text.as_str()), p.label.as_deref()])
        .flatten();
    for t in inputs {
        for run in t.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ',')) {
            if run.chars().any(|c| c.is_ascii_digit()) {
                numbers.insert(number(run));
            }
        }
        words.extend(t.unicode_words().map(word));
    }
    let mut out: Vec<String> = Vec::new();
    let mut miss = |what: &str| {
        if !out.iter().any(|o| o == what) {
            out.push(what.to_string());
        }
    };
    for s in text::sentences(text) {
        let f = text::facts(&text[s.start..s.end]);
        for n in &f.numbers {
            if !numbers.contains(&number(n)) {
                miss(n);
            }
        }
        for item in f.dates.iter().chain(&f.entities) {
            let ok = item.unicode_words().all(|w| {
                if w.chars().any(|c| c.is_ascii_digit()) {
                    numbers.contains(&number(w))
                } else {
                    crate::text::is_stopword(&w.to_lowercase()) || words.contains(&word(w))
                }
            });
            if !ok {
                miss(item);
            }
        }
    }
    out
}

pub(crate) fn merge_meta<'a>(metas: impl Iterator<Item = &'a Meta>) -> Meta {
    let mut m = Meta::default();
    for x in metas {
        for r in &x.rounds {
            if !m.rounds.contains(r) {
                m.rounds.push(*r);
            }
        }
        for s in &x.speakers {
            if !m.speakers.contains(s) {
                m.speakers.push(s.clone());
            }
        }
        if m.headings.is_empty() {
            m.headings = x.headings.clone();
        }
    }
    m.rounds.sort_unstable();
    m
}

fn render_tags(meta: &Meta, t: &crate::node::Tags) -> String {
    let mut parts = Vec::new();
    if !meta.speakers.is_empty() {
        parts.push(format!("speakers: {}", meta.speakers.join(", ")));
    }
    if let (Some(a), Some(b)) = (meta.rounds.first(), meta.rounds.last()) {
        parts.push(if a == b {
            format!("round: {a}")
        } else {
            format!("rounds: {a}-{b}")
        });
    }
    if !meta.headings.is_empty() {
        parts.push(format!("section: {}", meta.headings.join(" › ")));
    }
    for (name, v) in [
        ("entities", &t.entities),
        ("numbers", &t.numbers),
        ("dates", &t.dates),
        ("keywords", &t.keywords),
    ] {
        if !v.is_empty() {
            parts.push(format!("{name}: {}", v.join(", ")));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(level: Level, passages: &[(&str, Option<&str>)], target: usize) -> CompressRequest {
        CompressRequest {
            level,
            passages: passages
                .iter()
                .map(|(t, l)| Passage {
                    text: t.to_string(),
                    label: l.map(str::to_string),
                })
                .collect(),
            target_tokens: target,
        }
    }

    #[test]
    fn faithful_rewrites_pass_and_invented_facts_do_not() {
        let r = req(
            Level::Summary,
            &[
                (
                    "The 2029 audit put the cost at $1.57 billion, and 38,000 riders by March 2031.",
                    Some("bob (round 7)"),
                ),
                ("PARTA's forecast is too rosy.", Some("alice (round 7)")),
            ],
            60,
        );
        let ok = "In round 7, Bob cited the 2029 audit: $1.57 billion and 38000 riders by \
                  March 2031. Alice called PARTA's forecast too rosy.";
        assert_eq!(validate(ok, &r, false), Ok(()));
        for (bad, fact) in [
            ("Bob said the audit found $2.1 billion.", "2.1"),
            ("Bob cited the 2030 audit.", "2030"),
            ("Bob and Carol Danvers agreed in round 7.", "Carol Danvers"),
            ("The audit was due in April 2031.", "April 2031"),
        ] {
            match validate(bad, &r, false) {
                Err(Rejection::Unfaithful(m)) => assert!(m.contains(fact), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(validate("  ", &r, false), Err(Rejection::Empty));
        let long = "Bob cited the audit. ".repeat(40);
        assert!(matches!(
            validate(&long, &r, false),
            Err(Rejection::OverBudget(_))
        ));
        // The offline compressor is trusted: only emptiness is checked.
        assert_eq!(validate(&long, &r, true), Ok(()));
    }
}
