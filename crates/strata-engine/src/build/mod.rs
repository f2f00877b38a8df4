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
use crate::model::Limiter;
use crate::model::limit::PRIORITY_NAVIGATION;
use crate::model::usage::{self, Meter, Usage};
use crate::model::{CompressRequest, ModelError, SubModel, prompts};
use crate::node::{FallbackMark, Node, NodeId};
use crate::plan::Plan;
use crate::plan::Reduced;
use crate::progress::Progress;
use crate::store::Store;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Awaits every future; the outputs in order. Only a future that was woken is polled again:
/// `join_all` of up to 30 futures polls all of them whenever any one is woken, and the
/// build is one task whose tree of joins holds every model call waiting for a place in
/// the limiter, so each wake-up re-polled all of them (issue 23: a 249-document build
/// against a mock model spent a core on it).
pub(crate) async fn join_woken<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    futures
        .into_iter()
        .collect::<FuturesOrdered<F>>()
        .collect()
        .await
}

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
    /// The largest request sent to the model: its prompt plus its reply budget
    /// (`max_tokens`), in real tokens. 0 when no prompt was sent (the offline compressor).
    pub max_request_tokens: u64,
    /// Requests not sent because they would exceed `model.context_tokens` (their node was
    /// made by the fallback, marked `over_context`). The plan sizes every step to fit, so
    /// this stays 0 unless a model's accepted outputs outgrow their budget.
    pub over_context: u64,
    /// Retries that sent the very request whose output had been rejected (at temperature
    /// 0 it gets the same output back). A retry says what was wrong, so this is 0.
    pub identical_retries: u64,
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
    /// Of those, the ones the index was fed while the build still ran (committed with the
    /// rest after it).
    pub indexed_while_building: usize,
    /// Model traffic: calls, tokens and estimated cost per model.
    pub usage: Usage,
    /// The embedding step (hybrid retrieval); absent when no embedder is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<crate::hybrid::EmbedReport>,
}

/// A node of the tree being made: its id once made, `None` when it (or an input) failed.
type Pending<'a> = BoxFuture<'a, Option<NodeId>>;

/// Orders a build's node writes with forgets (`Engine::forget`): every write holds it
/// shared; a forget holds it exclusively while it decides what to remove and removes it,
/// then moves the generation. A build that sees the generation moved since it loaded its
/// plan writes a node only if every input of it is still stored: a forget removes every
/// node over what it forgot, so nothing is ever written over a forgotten source again.
#[derive(Default)]
pub(crate) struct Forgets(std::sync::RwLock<u64>);

impl Forgets {
    /// The number of forgets so far.
    pub(crate) fn generation(&self) -> u64 {
        *self.read()
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, u64> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, u64> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct Builder<'a> {
    pub store: &'a Store,
    pub plan: &'a Plan,
    pub model: &'a dyn SubModel,
    /// Replaces the model's output when it fails (the offline compressor in production).
    pub fallback: &'a dyn SubModel,
    /// The engine's flow control: calls of a model that does not pass it itself (the
    /// offline compressor) hold one of its places, deepest below the ABSTRACT first.
    pub limiter: &'a Limiter,
    pub cfg: &'a Config,
    pub now: u64,
    /// Also rebuild nodes that expire before this time (warming ahead of expiry).
    pub refresh_before: Option<u64>,
    pub progress: &'a dyn Progress,
    /// Forgets, and their generation when the plan was loaded.
    pub forgets: &'a Forgets,
    pub generation: u64,
}

struct Run<'a> {
    b: &'a Builder<'a>,
    /// Whether calls take a place of the limiter here (the model does not itself).
    hold: bool,
    calls: AtomicU64,
    fallbacks: AtomicU64,
    empty: AtomicU64,
    over_budget: AtomicU64,
    unfaithful: AtomicU64,
    model_errors: AtomicU64,
    max_request: AtomicU64,
    over_context: AtomicU64,
    identical_retries: AtomicU64,
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
    /// Each call's place in the limiter's queue: its depth below the ABSTRACT
    /// ([`Plan::call_depths`]), deepest first.
    depths: crate::plan::CallDepths,
    built: Mutex<Vec<Node>>,
    failures: Mutex<Vec<BuildFailure>>,
    /// Whether nodes are written in batches ([`BATCH`]): when the offline compressor makes
    /// them (a node every few hundred microseconds; a transaction each was a quarter of
    /// the build), not a model (a node made by a paid call is written at once).
    batching: bool,
    /// Nodes made and not yet written, in the order they were made, with their marks. The
    /// build reads its own nodes through [`Run::stored`], which looks here first.
    batch: Mutex<Vec<(Node, Option<FallbackMark>)>>,
}

/// How many nodes the offline build writes in one transaction.
const BATCH: usize = 64;

impl Builder<'_> {
    /// Runs the build. Returns the report and the nodes it built (for the index).
    pub(crate) async fn run(&self) -> Result<(BuildReport, Vec<Node>)> {
        let t0 = Instant::now();
        let marking = self.model.identity() != self.fallback.identity();
        let run = Run {
            b: self,
            hold: !self.model.self_limited(),
            calls: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            empty: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            unfaithful: AtomicU64::new(0),
            model_errors: AtomicU64::new(0),
            max_request: AtomicU64::new(0),
            over_context: AtomicU64::new(0),
            identical_retries: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            marking,
            check_marks: marking && self.store.has_fallback_marks(),
            marks: Mutex::new(HashMap::new()),
            retrying: Mutex::new(HashSet::new()),
            retried: AtomicU64::new(0),
            depths: self.plan.call_depths(),
            built: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
            batching: !marking,
            batch: Mutex::new(Vec::new()),
        };
        self.progress.start(
            self.plan.n_derived() as u64,
            &format!("compressing {}", self.plan.scope),
        );
        let meter = Arc::new(Meter::default());
        let built = usage::metered(meter.clone(), async {
            // The tree as futures: every node has one parent, so each future is awaited by
            // its parent only; a reduction starts as soon as its own inputs exist.
            let plan = self.plan;
            let mut groups: Vec<Option<Pending<'_>>> = (0..plan.groups.len())
                .map(|gi| Some(run.group(gi).boxed()))
                .collect();
            let mut reductions: Vec<Option<Pending<'_>>> = Vec::new();
            fn take<'a>(
                r: Reduced,
                groups: &mut [Option<Pending<'a>>],
                reductions: &mut [Option<Pending<'a>>],
            ) -> Option<Pending<'a>> {
                match r {
                    Reduced::Group(gi) => groups[gi].take(),
                    Reduced::Reduction(ri) => reductions[ri].take(),
                }
            }
            for (ri, red) in plan.reductions.iter().enumerate() {
                let inputs: Vec<Pending<'_>> = red
                    .inputs
                    .iter()
                    .filter_map(|&r| take(r, &mut groups, &mut reductions))
                    .collect();
                let run = &run;
                reductions.push(Some(
                    async move { run.reduction(ri, join_woken(inputs).await).await }.boxed(),
                ));
            }
            let top: Vec<Pending<'_>> = plan
                .abstract_inputs
                .iter()
                .filter_map(|&r| take(r, &mut groups, &mut reductions))
                .collect();
            let summaries = join_woken(top).await;
            if let Some(abs) = run.abstract_node(summaries).await? {
                run.metadata(&abs, &[]).await?;
            }
            Ok::<(), crate::Error>(())
        })
        .await;
        // What was made is written even when the build stops on an error.
        let written = run.write_batch(&mut run.batch.lock().expect("poisoned"));
        built?;
        written?;
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
            max_request_tokens: load(&run.max_request),
            over_context: load(&run.over_context),
            identical_retries: load(&run.identical_retries),
            fallback_retried: load(&run.retried),
            fallback_nodes: marks.len() as u64,
            fallback_awaiting_model: marks.values().filter(|m| m.is_retried()).count() as u64,
            failures,
            elapsed_ms: t0.elapsed().as_millis() as u64,
            built_by_level: by_level,
            indexed: 0,
            indexed_while_building: 0,
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
        if self.batching {
            let mut batch = self.batch.lock().expect("poisoned");
            batch.push((node.clone(), mark));
            if batch.len() >= BATCH {
                self.write_batch(&mut batch)?;
            }
        } else {
            self.write_batch(&mut vec![(node.clone(), mark)])?;
        }
        if let Some(m) = mark {
            self.marks.lock().expect("poisoned").insert(node.id, m);
        }
        self.built.lock().expect("poisoned").push(node.clone());
        self.b.progress.inc(1);
        Ok(node)
    }

    /// Writes `batch` (emptied): one transaction per run of nodes with the same mark, in
    /// the order they were made, so a node is never stored before its inputs. After a
    /// forget moved the generation, a node is written only if each of its inputs is still
    /// stored or written before it here (a forget removes every node over what it forgot);
    /// the others are not, and the build is told to run again (`NotBuilt`).
    fn write_batch(&self, batch: &mut Vec<(Node, Option<FallbackMark>)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut nodes = std::mem::take(batch);
        let forgets = self.b.forgets.read();
        let mut refused = 0;
        if *forgets != self.b.generation {
            let mut here: HashSet<NodeId> = HashSet::new();
            let mut kept = Vec::with_capacity(nodes.len());
            for (node, mark) in nodes {
                let outside: Vec<NodeId> = node
                    .children
                    .iter()
                    .filter(|c| !here.contains(*c))
                    .copied()
                    .collect();
                if self
                    .b
                    .store
                    .get_nodes(&outside)?
                    .iter()
                    .all(Option::is_some)
                {
                    here.insert(node.id);
                    kept.push((node, mark));
                } else {
                    refused += 1;
                }
            }
            nodes = kept;
        }
        let written = nodes.len();
        let mut run: Vec<Node> = Vec::new();
        let mut run_mark = None;
        for (node, mark) in nodes {
            if mark != run_mark && !run.is_empty() {
                self.b
                    .store
                    .put_nodes_marked(&std::mem::take(&mut run), run_mark)?;
            }
            run_mark = mark;
            run.push(node);
        }
        self.b.store.put_nodes_marked(&run, run_mark)?;
        drop(forgets);
        for _ in 0..written {
            crate::fail::point("build:node-written");
        }
        if refused > 0 {
            return Err(crate::Error::NotBuilt(format!(
                "{}: sources were forgotten while this build ran; build again",
                self.b.plan.scope
            )));
        }
        Ok(())
    }

    /// A node this build made and has not written yet.
    fn unwritten(&self, id: &NodeId) -> Option<Node> {
        if !self.batching {
            return None;
        }
        let batch = self.batch.lock().expect("poisoned");
        batch
            .iter()
            .rev()
            .find(|(n, _)| n.id == *id)
            .map(|(n, _)| n.clone())
    }

    /// A node this build reads (an input of the next): the batch not yet written first,
    /// then the store.
    fn stored(&self, id: &NodeId) -> Result<Option<Node>> {
        match self.unwritten(id) {
            Some(node) => Ok(Some(node)),
            None => self.b.store.get_node(id),
        }
    }

    /// [`Run::stored`], live at `now`.
    fn stored_live(&self, id: &NodeId, now: u64) -> Result<Option<Node>> {
        match self.unwritten(id) {
            Some(node) => Ok(node.is_live(now).then_some(node)),
            None => self.b.store.get_live(id, now),
        }
    }

    /// Asks the model, validates the output (faithfulness included), retries, and falls
    /// back to the offline compressor; the fallback's text comes with its mark (why the
    /// model's was not used). Returns `Err` only when even the fallback failed.
    async fn compress(
        &self,
        req: CompressRequest,
    ) -> Result<(String, Option<FallbackMark>), String> {
        let trusted = self.b.model.trusted();
        let mut req = Arc::new(req);
        let mut last = String::new();
        let mut mark = FallbackMark::Refused;
        // The requests whose outputs were rejected: a retry must differ from each.
        let mut rejected: Vec<Arc<CompressRequest>> = Vec::new();
        for attempt in 0..=self.b.cfg.build.retries {
            if let Some(prompt) = self.b.model.prompt(&req) {
                // Measured in real tokens, on rayon (it tokenises every input).
                let tokens = crate::model::spawn_cpu(move || {
                    prompts::prompt_tokens(&prompt) + prompt.max_tokens as usize
                })
                .await
                .map_err(|e| format!("measuring the prompt: {e}"))?;
                self.max_request.fetch_max(tokens as u64, Ordering::Relaxed);
                let context = self.b.cfg.model.context_tokens;
                if tokens > context {
                    self.over_context.fetch_add(1, Ordering::Relaxed);
                    if attempt == 0 {
                        mark = FallbackMark::OverContext;
                    }
                    last = format!(
                        "a prompt of {tokens} tokens with its reply would exceed model.context_tokens ({context}): not sent"
                    );
                    break;
                }
            }
            if rejected.iter().any(|r| **r == *req) {
                self.identical_retries.fetch_add(1, Ordering::Relaxed);
            }
            let out = {
                let _place = match self.hold {
                    true => Some(self.b.limiter.hold(req.priority).await),
                    false => None,
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
            // A rejected output is not asked for again with the same request (at
            // temperature 0 it would come back): the retry says what was wrong. A request
            // the model did not answer is sent again as it was.
            if let Some(note) = rejection.feedback(attempt + 2) {
                rejected.push(req.clone());
                let mut next = (*req).clone();
                next.feedback = Some(note);
                req = Arc::new(next);
            }
        }
        let mark = self.marking.then_some(mark);
        let mut req = Arc::unwrap_or_clone(req);
        req.feedback = None;
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(error = %last, "model output replaced by the fallback compressor");
        match self.b.fallback.compress(req.clone()).await {
            Ok(text) if validate(&text, &req, true).is_ok() => Ok((text, mark)),
            Ok(_) => Err(format!("{last}; fallback output unusable too")),
            Err(e) => Err(format!("{last}; fallback failed: {e}")),
        }
    }
}

/// A build call's place in the limiter's queue: the calls deepest below the ABSTRACT first
/// (Hu's rule: its depth is the length of the chain of calls it starts), all below
/// navigation's priority.
fn priority(depth: u32) -> u8 {
    depth.clamp(1, u32::from(PRIORITY_NAVIGATION) - 1) as u8
}

mod nodes;
mod validate;

use validate::{Rejection, validate};
