//! A scope's levels: building its tree, the views served while a build runs, and context
//! windows.

use super::Engine;
use crate::build::{BuildReport, Builder};
use crate::context::{ContextWindow, LevelChoice};
use crate::error::Result;
use crate::level::Level;
use crate::model::Meter;
use crate::model::usage::metered;
use crate::node::{Node, NodeId};
use crate::plan::Plan;
use crate::progress::Progress;
use crate::time::TimeRange;
use std::collections::HashSet;
use std::sync::Arc;

/// A complete view of a scope (see [`Engine::view`]).
#[derive(Clone, Debug)]
pub struct View {
    /// Shared with the engine's cache of the current tree: a clone costs nothing, and the
    /// METADATA ids a reader derives ([`Plan::metadata`]) stay derived for the next one.
    pub plan: Arc<Plan>,
    /// Levels of the view that lag behind the current sources (empty = fresh).
    pub stale: Vec<Level>,
    /// Sources ingested since the view was built.
    pub pending_sources: usize,
}

/// A window as a server serves it ([`Engine::serve_window`]): from the newest complete
/// view, each node with its text and the keywords of its chunk, group or scope.
#[derive(Clone, Debug)]
pub struct ServedWindow {
    pub window: ContextWindow,
    /// The window's nodes, in its order.
    pub parts: Vec<WindowPart>,
    /// Levels of the view served that lag behind the current sources (empty = fresh).
    pub stale: Vec<Level>,
    /// Sources ingested since the view served was built.
    pub pending_sources: usize,
    /// The build a request with no complete view waited for.
    pub report: Option<BuildReport>,
}

/// One node of a [`ServedWindow`].
#[derive(Clone, Debug)]
pub struct WindowPart {
    pub id: NodeId,
    pub level: Level,
    pub tokens: u32,
    /// The node's whole text.
    pub text: String,
    /// Keywords of the node: its own METADATA's, or those of its chunk, group or scope.
    pub key_topics: Vec<String>,
}

/// What [`Engine::serve_window`] builds: a level (or `auto`) within `budget` tokens (none:
/// the whole level; `auto` and `focus` need one), or,
/// with `focus`, the window for that question (the level is then the fallback for a
/// question with no searchable words), of what was said within `range`.
#[derive(Clone, Debug)]
pub struct WindowAsk {
    pub choice: LevelChoice,
    pub budget: Option<usize>,
    pub focus: Option<String>,
    pub range: TimeRange,
}

impl Engine {
    /// What of `plan` is live at `now`, per level: planned nodes, live nodes, their tokens.
    pub fn tally(&self, plan: &Plan, now: u64) -> Result<crate::built::Built> {
        crate::built::tally(&self.store, plan, now)
    }

    /// Builds (or refreshes) every level of `scope`. Nodes that are live in the store are
    /// cache hits: an unchanged scope makes zero compressor calls. It also ranks the
    /// sentences of the scope for the `auto` overview and stores the ranking with the view
    /// (`context::overview`), so that the processes that read next do not rank it again
    /// (so does the on-demand build of an `auto` window); the builds of jobs and of other
    /// reads leave that to the first `auto` window.
    pub async fn compress(
        &self,
        scope: &str,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<BuildReport> {
        Ok(self.build_plan(scope, now, None, progress, true).await?.0)
    }

    /// [`Engine::compress`], also rebuilding nodes that expire before `refresh_before`
    /// (warming: a busy scope is refreshed before its levels expire).
    pub async fn compress_with(
        &self,
        scope: &str,
        now: u64,
        refresh_before: Option<u64>,
        progress: &dyn Progress,
    ) -> Result<BuildReport> {
        Ok(self
            .build_plan(scope, now, refresh_before, progress, false)
            .await?
            .0)
    }

    /// Builds the current tree of `scope`; returns the report and the tree it built (which
    /// a concurrent append may already have superseded). `rank`: store the overview's
    /// ranking with the view.
    async fn build_plan(
        &self,
        scope: &str,
        now: u64,
        refresh_before: Option<u64>,
        progress: &dyn Progress,
        rank: bool,
    ) -> Result<(BuildReport, Plan)> {
        self.writing()?;
        // Before the plan: a forget that commits after this moves the generation, and
        // the build then writes nothing over what it removed.
        let generation = self.forgets.generation();
        let mut plan = self.plan(scope)?;
        if !self.is_complete(&plan, now)? {
            // A build writes at most about its scope's text again per level (~4 bytes a
            // token); a scope with nothing stale writes next to nothing.
            self.ensure_room(plan.full_tokens.saturating_mul(4))?;
        }
        let builder = Builder {
            store: &self.store,
            plan: &plan,
            model: self.model.as_ref(),
            fallback: self.fallback.as_ref(),
            limiter: &self.limiter,
            cfg: &self.cfg,
            now,
            refresh_before,
            progress,
            forgets: &self.forgets,
            generation,
        };
        // The overview's ranking reads only the FULL chunks: they are read now and ranked
        // on the CPU pool while the build waits on its model calls (a debate of 2,000
        // turns: ~0.3 s of CPU that would otherwise come after the last call); kept only
        // if the build has no failure. Dropping the build drops the wait for it too.
        let ranking = if rank {
            crate::context::overview::for_view_later(&self.corpus(), &plan)?
        } else {
            None
        };
        // The index is fed the nodes as they are written ([`Engine::feed_index`]); the
        // commit after the last call has only the rest to do.
        let fed = Arc::new(super::Fed::default());
        let stop = tokio::sync::Notify::new();
        let build = async {
            let r = match ranking {
                Some(work) => {
                    let (built, r) = tokio::join!(builder.run(), crate::model::spawn_cpu(work));
                    (built, Some(r.map_err(crate::Error::Internal)))
                }
                None => (builder.run().await, None),
            };
            stop.notify_one();
            r
        };
        let ((built, ranking), ()) = tokio::join!(build, self.feed_index(&fed, &stop));
        let (mut report, _built) = built?;
        report.indexed = self.sync_index_fed(&fed)?;
        report.indexed_while_building = fed.len();
        if let Some(embedder) = &self.embedder {
            // Vectors for the nodes that lack one; a failing server is reported, not fatal.
            let meter = Arc::new(Meter::default());
            let levels = self.cfg.embed.levels()?;
            let r = metered(
                meter.clone(),
                crate::hybrid::embed_plan(
                    &self.store,
                    embedder.as_ref(),
                    &levels,
                    &plan,
                    now,
                    self.cfg.build.concurrency,
                    progress,
                ),
            )
            .await?;
            report.usage.add(&meter, &self.cfg.prices);
            report.embeddings = Some(r);
        }
        // Ranked before the forget lock is taken (a forget waits for the view's write, not
        // for this); a forget meanwhile discards it with the view.
        let overview = match ranking {
            Some(r) if report.failures.is_empty() => Some(r?),
            _ => None,
        };
        {
            let forgets = self.forgets.read();
            if *forgets != generation {
                // A forget ran meanwhile: vectors this build wrote for nodes it removed
                // go, and the plan is no view (it may cite what was forgotten).
                let ids: Vec<NodeId> = plan.all_ids().collect();
                for (id, n) in ids.iter().zip(self.store.get_nodes(&ids)?) {
                    if n.is_none() {
                        self.store.remove_node_embeddings(id)?;
                    }
                }
            } else if report.failures.is_empty() {
                // The newest complete view, served while a later build is still running.
                crate::fail::point("build:before-view");
                let saved = crate::context::overview::SavedView { plan, overview };
                self.store.put_view(scope, &saved)?;
                plan = saved.plan;
                self.certify(&plan)?;
            }
        }
        crate::fail::point("build:before-flush");
        self.store.flush()?;
        Ok((report, plan))
    }

    /// The newest complete view of `scope` without building anything: the current tree if
    /// every node of it is live, else the last complete build's tree (if still live), with
    /// the levels that lag the sources. `None` when neither is complete (build first).
    pub fn view(&self, scope: &str, now: u64) -> Result<Option<View>> {
        let planned = self.planned(scope)?;
        if self.planned_complete(&planned, now)? {
            return Ok(Some(View {
                plan: Arc::clone(&planned.plan),
                stale: Vec::new(),
                pending_sources: 0,
            }));
        }
        let current = &planned.plan;
        let Some(snap) = self.last_view(scope)? else {
            return Ok(None);
        };
        if snap.compressor != current.compressor || !self.is_complete(&snap, now)? {
            return Ok(None);
        }
        let stale = Level::ALL
            .into_iter()
            .filter(|&l| snap.ids_at(l) != current.ids_at(l))
            .collect();
        let known: HashSet<&str> = snap.sources.iter().map(|s| s.id.as_str()).collect();
        let pending_sources = current
            .sources
            .iter()
            .filter(|s| !known.contains(s.id.as_str()))
            .count();
        Ok(Some(View {
            plan: Arc::new(snap),
            stale,
            pending_sources,
        }))
    }

    /// The last complete view of `scope`. Views are derived data: one this strata cannot
    /// decode (written by an older one, whose plan had other fields) is ignored as if
    /// there were none, and replaced at the next complete build.
    pub(crate) fn last_view(&self, scope: &str) -> Result<Option<Plan>> {
        match self
            .store
            .get_view::<crate::context::overview::SavedView>(scope)
        {
            Err(crate::Error::DataCorruption(e)) => {
                tracing::warn!(scope, error = %e, "ignoring a view that does not decode");
                Ok(None)
            }
            r => r.map(|v| v.map(|v| v.plan)),
        }
    }

    fn is_complete(&self, plan: &Plan, now: u64) -> Result<bool> {
        self.store
            .all_live(&plan.all_ids().collect::<Vec<_>>(), now)
    }

    /// Makes sure every node of `scope`'s tree is live, building what is missing or
    /// expired. Context and query call this: an expired node is rebuilt, never served.
    pub async fn ensure_built(
        &self,
        scope: &str,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<(Plan, Option<BuildReport>)> {
        self.ensure_built_for(scope, now, progress, false).await
    }

    /// [`Engine::ensure_built`]; `rank`: a build also ranks the overview and stores the
    /// ranking with the view (an `auto` window is about to rank it anyway).
    async fn ensure_built_for(
        &self,
        scope: &str,
        now: u64,
        progress: &dyn Progress,
        rank: bool,
    ) -> Result<(Plan, Option<BuildReport>)> {
        let planned = self.planned(scope)?;
        if self.planned_complete(&planned, now)? {
            return Ok((Plan::clone(&planned.plan), None));
        }
        let (report, built) = self.build_plan(scope, now, None, progress, rank).await?;
        Ok((built, Some(report)))
    }

    /// A live node of `plan`, or a clear error when the build could not make it.
    pub fn node(&self, id: &NodeId, now: u64) -> Result<Node> {
        self.corpus().node(id, now)
    }

    /// The nodes `ids` that are live at `now`, in order (`None` for one that is missing or
    /// expired), read in one batch.
    pub fn live_nodes(&self, ids: &[NodeId], now: u64) -> Result<Vec<Option<Node>>> {
        Ok(self
            .store
            .get_nodes(ids)?
            .into_iter()
            .map(|n| n.filter(|n| n.is_live(now)))
            .collect())
    }

    /// The text of a source as ingested.
    pub fn source_text(&self, scope: &str, source: &str) -> Result<String> {
        self.corpus().source_text(scope, source)
    }

    // ---------------------------------------------------------------- reading

    /// `scope` at a level (or `auto`) within `budget` tokens. Missing or expired nodes are
    /// rebuilt first.
    pub async fn context(
        &self,
        scope: &str,
        choice: LevelChoice,
        budget: usize,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<ContextWindow> {
        self.context_during(scope, choice, budget, &TimeRange::ALL, now, progress)
            .await
    }

    /// [`Engine::context`] of what was said within `range` (`context --since/--until`):
    /// the window is built over [`Plan::during`] — the chunks said in the range, their
    /// groups, and the overview of the whole scope.
    pub async fn context_during(
        &self,
        scope: &str,
        choice: LevelChoice,
        budget: usize,
        range: &TimeRange,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<ContextWindow> {
        crate::context::check_budget(budget)?;
        if range.is_all() {
            // A live tree serves its remembered window (until the next write).
            let planned = self.planned(scope)?;
            if self.planned_complete(&planned, now)? {
                return self.current_window(&planned, choice, budget, now);
            }
        }
        let rank = choice == LevelChoice::Auto && range.is_all();
        let (plan, _) = self.ensure_built_for(scope, now, progress, rank).await?;
        let plan = plan.within(range)?;
        crate::context::window(&self.corpus(), &plan, choice, budget, now)
    }

    /// The best view of `scope` for `question` (or for the turn about to be spoken) within
    /// `budget` tokens: the turns or passages that bear on it, as excerpts with their
    /// labels, after a short overview ([`crate::context`]'s `focus`). A question with no
    /// searchable words gets the unfocused `auto` window. `range` keeps what was said within
    /// it (`--since`/`--until`; unbounded: everything).
    pub async fn context_for(
        &self,
        scope: &str,
        question: &str,
        budget: usize,
        range: &TimeRange,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<ContextWindow> {
        crate::context::check_budget(budget)?;
        let (plan, _) = self.ensure_built(scope, now, progress).await?;
        let plan = plan.within(range)?;
        let corpus = self.corpus();
        let w = crate::navigate::off_executor(|| {
            crate::context::focused(&corpus, &plan, question, budget, range, now)
        })?;
        match w {
            Some(w) => Ok(w),
            None => {
                let mut w = crate::context::window(&corpus, &plan, LevelChoice::Auto, budget, now)?;
                w.focus = Some(question.to_string());
                Ok(w)
            }
        }
    }

    /// The tree a caller that must not wait for a rebuild is served from: the newest
    /// complete view ([`Engine::view`], with the levels that lag the sources), or, when
    /// there is none (first request, everything expired), the current tree built now.
    /// The build report says whether it built.
    pub async fn serving_view(&self, scope: &str, now: u64) -> Result<(View, Option<BuildReport>)> {
        if let Some(v) = self.view(scope, now)? {
            return Ok((v, None));
        }
        let (plan, report) = self
            .ensure_built(scope, now, &crate::progress::NoProgress)
            .await?;
        Ok((
            View {
                plan: Arc::new(plan),
                stale: Vec::new(),
                pending_sources: 0,
            },
            report,
        ))
    }

    /// A window served without waiting for a rebuild (`serve`'s context routes): from
    /// [`Engine::serving_view`], the remembered window when that view is the current
    /// tree, each node with its text and key topics.
    pub async fn serve_window(
        &self,
        scope: &str,
        ask: &WindowAsk,
        now: u64,
    ) -> Result<ServedWindow> {
        let budget = match ask.budget {
            Some(b) => crate::context::check_budget(b).map(|()| b)?,
            None if ask.choice == LevelChoice::Auto || ask.focus.is_some() => {
                return Err(crate::error::Error::Invalid(
                    "the auto level and a window for a question need a budget".into(),
                ));
            }
            None => usize::MAX,
        };
        let (view, report) = self.serving_view(scope, now).await?;
        let part;
        let plan: &Plan = match ask.range.is_all() {
            true => &view.plan,
            false => {
                part = view.plan.within(&ask.range)?;
                &part
            }
        };
        crate::navigate::off_executor(|| {
            let corpus = self.corpus();
            let focused = match &ask.focus {
                Some(q) => crate::context::focused(&corpus, plan, q, budget, &ask.range, now)?,
                None => None,
            };
            let window = match focused {
                Some(w) => w,
                None => {
                    // The current tree, whole: its window is remembered until the next write.
                    let current = match ask.range.is_all() {
                        true => self.window_if_current(scope, plan, ask.choice, budget, now)?,
                        false => None,
                    };
                    match current {
                        Some(w) => w,
                        None => crate::context::window(&corpus, plan, ask.choice, budget, now)?,
                    }
                }
            };
            // Each node's keywords come from the METADATA of its chunk, group or scope.
            let detailed_of: std::collections::HashMap<NodeId, NodeId> =
                match window.nodes.iter().any(|n| n.level == Level::Full) {
                    true => plan.chunks.iter().map(|c| (c.full, c.detailed)).collect(),
                    false => Default::default(),
                };
            let mut parts = Vec::with_capacity(window.nodes.len());
            for n in &window.nodes {
                let id = NodeId::from_hex(&n.id).ok_or_else(|| {
                    crate::error::Error::DataCorruption(format!("a window names node `{}`", n.id))
                })?;
                let node = corpus.node(&id, now)?;
                let key_topics = if n.level == Level::Metadata {
                    node.meta.tags.as_ref().map(|t| t.keywords.clone())
                } else {
                    let owner = detailed_of.get(&id).copied().unwrap_or(id);
                    match plan.metadata().get(&owner) {
                        Some(m) => corpus.node(m, now)?.meta.tags.map(|t| t.keywords),
                        None => None,
                    }
                };
                parts.push(WindowPart {
                    id,
                    level: n.level,
                    tokens: n.tokens,
                    text: node.text,
                    key_topics: key_topics.unwrap_or_default(),
                });
            }
            Ok(ServedWindow {
                window,
                parts,
                stale: view.stale,
                pending_sources: view.pending_sources,
                report,
            })
        })
    }

    /// The question-focused window of a view being served (`None` when `question` has no
    /// searchable words), within `budget` tokens.
    pub fn focused_in(
        &self,
        view: &View,
        question: &str,
        budget: usize,
        now: u64,
    ) -> Result<Option<ContextWindow>> {
        let corpus = self.corpus();
        crate::navigate::off_executor(|| {
            crate::context::focused(&corpus, &view.plan, question, budget, &TimeRange::ALL, now)
        })
    }

    /// The live nodes of a view being served at each of `levels`, in scope order, each
    /// level's in one list; with `only`, just the nodes whose ids it holds.
    pub fn view_nodes(
        &self,
        view: &View,
        levels: &[Level],
        only: Option<&HashSet<NodeId>>,
        now: u64,
    ) -> Result<Vec<(Level, Vec<Node>)>> {
        let corpus = self.corpus();
        crate::navigate::off_executor(|| {
            let mut out = Vec::with_capacity(levels.len());
            for &level in levels {
                let mut nodes = Vec::new();
                for id in view.plan.ids_at(level) {
                    if only.is_some_and(|m| !m.contains(&id)) {
                        continue;
                    }
                    nodes.push(corpus.node(&id, now)?);
                }
                out.push((level, nodes));
            }
            Ok(out)
        })
    }

    /// Whether `scope`'s levels expire within `ahead` seconds of `now` (a warming job
    /// should rebuild them first). Every node of a build shares its deadline, so the
    /// ABSTRACT tells for all.
    pub fn expires_within(&self, scope: &str, now: u64, ahead: u64) -> Result<bool> {
        let plan = self.plan(scope)?;
        Ok(self
            .store
            .get_node(&plan.abstract_id)?
            .and_then(|n| n.expires_at)
            .is_some_and(|at| at <= now + ahead))
    }
}
