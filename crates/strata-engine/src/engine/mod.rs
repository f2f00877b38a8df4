//! The engine: one store, one index, one sub-model, one configuration, and the write lock.
//! Every interface (CLI, HTTP, MCP) is a thin layer over its methods, which are grouped by
//! job: [`ingest`] (sources in, under the write protocol), [`levels`] (building a scope's
//! tree and serving its views and context windows), [`query`] (questions and `grep`) and
//! [`maintain`] (stats, gc, reindex). Reading goes through [`Corpus`], the read handle the
//! context windows and the navigator take instead of the engine.

mod forget;
mod ingest;
mod levels;
mod maintain;
mod query;

pub use forget::ForgetReport;
pub use ingest::IngestReport;
pub use levels::{ServedWindow, View, WindowAsk, WindowPart};
pub use maintain::{Bytes, GcReport, LevelBytes, ScopeStats, Stats};
pub use query::{Ask, GrepHit};

use crate::config::Config;
use crate::context::{ContextWindow, LevelChoice};
use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::index::Index;
use crate::model::{ChatModel, Embedder, Limiter, Models, Offline, SubModel};
use crate::node::NodeId;
use crate::plan::Plan;
use crate::store::{PendingMark, ScopeRecord, Store};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub struct Engine {
    store: Store,
    index: Arc<Index>,
    cfg: Config,
    model: Arc<dyn SubModel>,
    fallback: Arc<dyn SubModel>,
    /// The navigating model; `None`: the offline navigator.
    root: Option<Arc<dyn ChatModel>>,
    /// Serves `partition_map` (the sub model when it can chat, else the root model).
    helper: Option<Arc<dyn ChatModel>>,
    /// Embeds nodes (at build time) and questions for hybrid retrieval; `None`: BM25 only.
    embedder: Option<Arc<dyn Embedder>>,
    /// Shared by every model client: one limit on concurrent calls, rates, backoff.
    limiter: Arc<Limiter>,
    /// Serialises writers of scope records (ingest, append, the end of a build). A std
    /// Mutex: it is never held across an await.
    write: std::sync::Mutex<()>,
    /// Orders builds' node writes with [`Engine::forget`] (see `build::Forgets`).
    forgets: crate::build::Forgets,
    /// Serialises [`Engine::sync_index`]: one pass applies and commits at a time.
    index_sync: Arc<std::sync::Mutex<()>>,
    /// The pending marks (node, generation) already applied to an index that keeps its
    /// writes in memory ([`Index::open_overlay`]): each is applied once per process.
    applied_in_memory: std::sync::Mutex<std::collections::HashSet<(NodeId, u64)>>,
    /// The store's directory (`None`: in memory), whose file system writes are checked
    /// against before they begin.
    dir: Option<PathBuf>,
    /// Opened by a command that only reads ([`Engine::open_read_only`]) and nothing written
    /// since: index work left pending by a writer stays pending for the next writer. Set
    /// off by the first write (a build of missing or expired levels, an ingest).
    read_only: AtomicBool,
    /// Each scope's tree as last planned, with the store generation it was planned at
    /// ([`Store::generation`]): a long-lived process (`serve`, `mcp`) plans a scope once
    /// per change, not once per request.
    plans: std::sync::Mutex<HashMap<String, Arc<Planned>>>,
    /// When each scope was last queried (unix seconds): the warmer re-builds the levels
    /// of a scope queried within its TTL before they expire ([`crate::service`]).
    queried: std::sync::Mutex<HashMap<String, u64>>,
}

/// A scope's tree planned at a store generation, and, once asked, when the first of its
/// nodes expires (`None`: one is missing).
pub(crate) struct Planned {
    generation: Option<u64>,
    pub(crate) plan: Arc<Plan>,
    min_deadline: OnceLock<Option<u64>>,
    /// Context windows of the whole tree served at this generation (see
    /// [`Engine::current_window`]), by level choice and budget.
    windows: std::sync::Mutex<HashMap<(LevelChoice, usize), ContextWindow>>,
}

/// What a build that completed a scope's tree leaves beside its view, so that a process
/// that only reads need not read every node's deadline to know the tree is live
/// ([`Engine::planned_complete`]): while the scope's tree is the one built (same
/// [`digest`]) and the store has lost no node since ([`Store::losses`] unchanged), every
/// node of it exists with a deadline no earlier than it had, so the tree is live until
/// `min_deadline`.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Liveness {
    digest: [u8; 32],
    min_deadline: u64,
    losses: u64,
}

impl crate::store::Record for Liveness {}

/// Which nodes a tree holds, in one hash: the ordered ids of its levels but METADATA, and
/// the version of the tags, since each METADATA id is a function of the node it tags and
/// that version ([`Plan::metadata`]); they are not hashed here, so that a reader checks a
/// tree's liveness without deriving them. (Until 2026-11-28 the digest held the METADATA
/// ids themselves: a record left by an older build does not match and counts for nothing
/// until the next build leaves one.)
fn digest(plan: &Plan) -> [u8; 32] {
    // One contiguous input, which blake3 hashes several chunks at a time.
    let mut ids: Vec<u8> = Vec::with_capacity(32 * (2 * plan.chunks.len() + plan.groups.len() + 2));
    for (_, id) in plan.tree_ids_by_level() {
        ids.extend_from_slice(&id.0);
    }
    let mut h = blake3::Hasher::new();
    h.update(&ids);
    h.update(b"tags:");
    h.update(crate::plan::TAGS_VERSION.as_bytes());
    *h.finalize().as_bytes()
}

/// How many windows (level choice × budget) one scope's tree remembers.
const WINDOWS_KEPT: usize = 32;

impl Engine {
    /// Opens the store and index under `dir` (created if missing). A missing or unreadable
    /// index is rebuilt from the store.
    /// `dir` may also be a `postgres://` URL: the engine is then a replica of that
    /// database, its index in a directory of its own (`crate::replica`).
    pub fn open(dir: &Path, cfg: Config) -> Result<Engine> {
        if let Some(url) = crate::replica::database_url(dir) {
            let (store, index_dir) = crate::replica::connect(url, &cfg)?;
            return Engine::open_on(store, &index_dir, None, cfg);
        }
        let store = Store::open(dir)?;
        Engine::open_on(store, &dir.join("index"), Some(dir.to_path_buf()), cfg)
    }

    /// Opens the store and index under `dir` for a command that only reads (`stats`,
    /// `context`, `query`, `grep`, `trace`): nothing of strata's is written — no index
    /// catch-up or commit on disk (index work a writer left pending is applied to the
    /// index in memory, so searches see every stored node; [`Engine::stats`] reports it
    /// as `unindexed` and the next writer does it on disk), no flush — unless
    /// the command must write after all: context and query build missing or expired
    /// levels first, as with [`Engine::open`]. What sled writes at every open is in
    /// `SledBackend::open_read_only`. A missing or unreadable index is rebuilt as by
    /// [`Engine::open`] (the store is the truth; searches need it); a directory that holds
    /// no store yet opens as an empty store in memory, and creates nothing. A
    /// `postgres://` URL opens as with [`Engine::open`].
    pub fn open_read_only(dir: &Path, cfg: Config) -> Result<Engine> {
        if crate::replica::database_url(dir).is_some() {
            return Engine::open(dir, cfg);
        }
        // sled may need to write even to read (see `Error::ReadOnly`): then as a writer.
        match Engine::open_sled_read_only(dir, cfg.clone()) {
            Err(Error::ReadOnly) => {
                tracing::info!("sled must finish upkeep a writer left: opening the store writable");
                Engine::open(dir, cfg)
            }
            r => r,
        }
    }

    fn open_sled_read_only(dir: &Path, cfg: Config) -> Result<Engine> {
        if !dir.join("store").exists() {
            let e = Engine::from_parts(Store::in_memory(), Index::in_memory()?, cfg)?;
            e.read_only.store(true, Ordering::Relaxed);
            return Ok(e);
        }
        // Opened once: a missing or unreadable index takes the writer's path, where it is
        // rebuilt from the store.
        let Some(index) = Index::open_existing(&dir.join("index"))? else {
            return Engine::open(dir, cfg);
        };
        let store = Store::open_read_only(dir)?;
        if store.index_must_rebuild()? {
            drop(store);
            drop(index);
            return Engine::open(dir, cfg);
        }
        // Only the pending set is looked at: counting the store's nodes to compare with
        // the index's documents (what a writer's open does) reads every node record, a
        // fifth of a read-only command's time on a large store. `strata stats` reports
        // both counts. Work a writer left pending is applied to the index in memory
        // ([`Index::open_overlay`]): searches see every stored node, the disk is not
        // written, and the marks stay for the next writer.
        let pending = store.n_pending_index();
        let index = if pending > 0 {
            drop(index);
            match Index::open_overlay(&dir.join("index"))? {
                Some(overlay) => overlay,
                None => {
                    drop(store);
                    return Engine::open(dir, cfg);
                }
            }
        } else {
            index
        };
        let mut e = Engine::from_parts(store, index, cfg)?;
        e.dir = Some(dir.to_path_buf());
        e.read_only.store(true, Ordering::Relaxed);
        if e.index.is_overlay() {
            let n = e.apply_pending()?;
            tracing::info!(
                n,
                "index work a writer left pending applied in memory (the next command that \
                 writes, e.g. `strata reindex`, does it on disk)"
            );
        }
        Ok(e)
    }

    /// Whether nothing has been written since [`Engine::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    /// Called by every path that writes, before it does: from then on this engine keeps
    /// the index up to date like any writer. A store opened without the right to write
    /// ([`Store::is_read_only`]) refuses here, before anything is written: the caller
    /// opens it writable ([`Engine::open`]) and asks again.
    fn writing(&self) -> Result<()> {
        if self.store.is_read_only() {
            return Err(crate::error::Error::ReadOnly);
        }
        self.read_only.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Opens an engine on `store` with its index in `index_dir`; `dir` is the directory
    /// whose file system writes are checked against (`None`: no check).
    pub fn open_on(
        store: Store,
        index_dir: &Path,
        dir: Option<PathBuf>,
        cfg: Config,
    ) -> Result<Engine> {
        let (index, fresh) = Index::open(index_dir)?;
        let mut e = Engine::from_parts(store, index, cfg)?;
        e.dir = dir;
        let lost = e.store.index_must_rebuild()?;
        if (fresh || lost) && e.store.n_nodes() > 0 {
            tracing::info!("index missing: rebuilding it from the store");
            e.reindex()?;
            return Ok(e);
        }
        let n = e.sync_index()?;
        if n > 0 {
            tracing::info!(n, "indexed node changes an interrupted run left behind");
        }
        // Belt and braces: the pending set covers every change, so the counts agree; if
        // they do not (an index from before the pending set, a damaged index), rebuild.
        let (docs, nodes) = (e.index.n_docs(), e.store.n_nodes() as u64);
        if docs != nodes {
            tracing::info!(
                docs,
                nodes,
                "index and store disagree: rebuilding the index"
            );
            e.reindex()?;
        }
        Ok(e)
    }

    /// An engine that lives in memory (tests, benchmarks).
    pub fn in_memory(cfg: Config) -> Result<Engine> {
        Engine::from_parts(Store::temporary()?, Index::in_memory()?, cfg)
    }

    /// The models come from `cfg.model` (API keys from the variables it names).
    fn from_parts(store: Store, index: Index, cfg: Config) -> Result<Engine> {
        let models = Models::from_config(&cfg, &|k| std::env::var(k).ok())?;
        Ok(Engine {
            store,
            index: Arc::new(index),
            cfg,
            model: models.sub,
            fallback: Arc::new(Offline),
            root: models.root,
            helper: models.helper,
            embedder: models.embedder,
            limiter: models.limiter,
            write: std::sync::Mutex::new(()),
            forgets: Default::default(),
            index_sync: Arc::default(),
            applied_in_memory: std::sync::Mutex::default(),
            dir: None,
            read_only: AtomicBool::new(false),
            plans: Default::default(),
            queried: Default::default(),
        })
    }

    /// Scopes queried within the last `within` seconds before `now` (every scope ever
    /// queried when `within` is 0), sorted.
    pub fn recently_queried(&self, now: u64, within: u64) -> Vec<String> {
        let mut v: Vec<String> = self
            .queried
            .lock()
            .expect("poisoned")
            .iter()
            .filter(|(_, at)| within == 0 || now.saturating_sub(**at) < within)
            .map(|(s, _)| s.clone())
            .collect();
        v.sort();
        v
    }

    pub(crate) fn note_queried(&self, scopes: &[String], now: u64) {
        let mut q = self.queried.lock().expect("poisoned");
        for s in scopes {
            q.insert(s.clone(), now);
        }
    }

    pub(crate) fn forget_queried(&self, scope: &str) {
        self.queried.lock().expect("poisoned").remove(scope);
    }

    /// Navigates with `root` (the LLM policy) instead of the offline navigator; `helper`
    /// serves `partition_map` (default: `root`).
    pub fn with_root(
        mut self,
        root: Arc<dyn ChatModel>,
        helper: Option<Arc<dyn ChatModel>>,
    ) -> Engine {
        self.root = Some(root);
        self.helper = helper;
        self
    }

    /// Uses `embedder` for hybrid retrieval (`None`: BM25 only).
    pub fn with_embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Engine {
        self.embedder = embedder;
        self
    }

    /// The embedding model of hybrid retrieval, if one is configured.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The model that serves sub-calls (the navigator's `partition_map`, MCP's
    /// `sub_query`): the sub model when it can chat, else the root model; `None` when
    /// both are offline.
    pub fn sub_chat(&self) -> Option<&Arc<dyn ChatModel>> {
        self.helper.as_ref().or(self.root.as_ref())
    }

    /// The flow control every model client of this engine shares.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// Brings the index up to the store. Every node write or removal leaves a durable mark
    /// in the store's pending set in the same transaction as the change; this applies the
    /// marked changes to the index, commits it, and only then clears those marks (a mark
    /// that moved meanwhile stays). Run at open, at the end of every build, ingest and gc,
    /// and before every query: the index never lags the store without the store knowing.
    /// Returns how many node changes it applied.
    /// An engine opened read-only that has written nothing leaves the pending work to
    /// the next writer and returns 0 — unless it found work pending at open: its index
    /// then keeps its writes in memory ([`Index::open_overlay`]), and the marks it has not
    /// applied yet are applied there and left in place.
    pub fn sync_index(&self) -> Result<usize> {
        self.sync_index_fed(&Fed::default())
    }

    /// [`Engine::sync_index`] after a build that fed the index while it ran
    /// ([`Engine::feed_index`]): the marks in `fed` (same node, same generation) are in the
    /// writer already, and are only committed and cleared.
    pub(crate) fn sync_index_fed(&self, fed: &Fed) -> Result<usize> {
        if self.index.is_overlay() {
            return self.apply_pending();
        }
        if self.is_read_only() {
            return Ok(0);
        }
        self.apply_and_clear_pending(fed)
    }

    /// Applies the pending marks not applied yet to an index that keeps its writes in
    /// memory and commits it there; the marks stay.
    fn apply_pending(&self) -> Result<usize> {
        debug_assert!(self.index.is_overlay());
        let _g = self.index_sync.lock().expect("index sync lock poisoned");
        let mut applied = self.applied_in_memory.lock().expect("applied marks lock");
        let new: Vec<PendingMark> = self
            .store
            .pending_index()?
            .into_iter()
            .filter(|m| !applied.contains(&(m.id, m.generation)))
            .collect();
        self.apply(&new)?;
        applied.extend(new.iter().map(|m| (m.id, m.generation)));
        Ok(new.len())
    }

    fn apply_and_clear_pending(&self, fed: &Fed) -> Result<usize> {
        let _g = self.index_sync.lock().expect("index sync lock poisoned");
        let pending = self.store.pending_index()?;
        if pending.is_empty() {
            return Ok(0);
        }
        let rest: Vec<PendingMark> = {
            let fed = fed.0.lock().expect("fed marks lock poisoned");
            pending
                .iter()
                .filter(|m| !fed.contains(&(m.id, m.generation)))
                .copied()
                .collect()
        };
        write_marked(&self.store, &self.index, &rest)?;
        self.index.commit()?;
        self.store.clear_pending_index(&pending)?;
        Ok(pending.len())
    }

    fn apply(&self, pending: &[PendingMark]) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        write_marked(&self.store, &self.index, pending)?;
        self.index.commit()
    }

    /// Feeds the index the nodes a build writes while it runs, without committing: a
    /// pass at most every [`FEED_EVERY`] once [`FEED_AFTER`] writes have piled up, on the
    /// CPU pool, until `stop` is notified. The tantivy writer indexes them on its own thread
    /// meanwhile, so the commit after the build's last call is short (issue 23: 0.2 s of a
    /// 40-document build came after its last call). Crash semantics do not change: the
    /// marks stay until [`Engine::sync_index_fed`] commits after the build.
    /// Not for an index that keeps its writes in memory, a read-only engine, or a store
    /// other processes write to (no generation here counts its writes).
    pub(crate) async fn feed_index(&self, fed: &Arc<Fed>, stop: &tokio::sync::Notify) {
        if self.index.is_overlay() || self.is_read_only() {
            return;
        }
        let Some(mut seen) = self.store.generation() else {
            return;
        };
        loop {
            tokio::select! {
                _ = stop.notified() => return,
                _ = tokio::time::sleep(FEED_EVERY) => {}
            }
            // Each pass reads every pending mark: passes grow with what was fed, so a
            // build of n nodes reads O(n log n) marks, and leaves at most a sixteenth of
            // its nodes to the commit.
            let now = self.store.generation().unwrap_or(seen);
            let fed_so_far = fed.0.lock().expect("fed marks lock poisoned").len() as u64;
            if now.saturating_sub(seen) < FEED_AFTER.max(fed_so_far / 16) {
                continue;
            }
            seen = now;
            let (store, index, sync, fed) = (
                self.store.clone(),
                self.index.clone(),
                self.index_sync.clone(),
                fed.clone(),
            );
            let fed_now = crate::model::spawn_cpu(move || {
                let _g = sync.lock().expect("index sync lock poisoned");
                let new: Vec<PendingMark> = {
                    let fed = fed.0.lock().expect("fed marks lock poisoned");
                    store
                        .pending_index()?
                        .into_iter()
                        .filter(|m| !fed.contains(&(m.id, m.generation)))
                        .collect()
                };
                write_marked(&store, &index, &new)?;
                let mut fed = fed.0.lock().expect("fed marks lock poisoned");
                fed.extend(new.iter().map(|m| (m.id, m.generation)));
                Ok::<_, Error>(())
            })
            .await;
            match fed_now {
                Ok(Ok(())) => {}
                // The commit after the build applies whatever was not fed.
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "feeding the index during the build");
                    return;
                }
                Err(panic) => {
                    tracing::warn!(error = %panic, "feeding the index during the build");
                    return;
                }
            }
        }
    }

    /// Refuses a write of about `input` bytes before it begins when the store's file
    /// system lacks the room for it (`store.min_free_mb`; see [`crate::disk`]): sled must
    /// never meet a full disk mid-write.
    fn ensure_room(&self, input: u64) -> Result<()> {
        match &self.dir {
            Some(dir) => {
                crate::disk::ensure_room(dir, crate::disk::need_for(input, &self.cfg.store))
            }
            None => Ok(()),
        }
    }

    /// [`Engine::sync_index`] where a failure must not fail what already succeeded (the
    /// store is durable; the marks stay, and the next open, build or query retries).
    fn sync_index_or_warn(&self) {
        if let Err(e) = self.sync_index() {
            tracing::warn!(error = %e, "index not updated yet; it catches up at the next build or query");
        }
    }

    /// Uses `model` for compression (the offline compressor stays the fallback).
    pub fn with_model(mut self, model: Arc<dyn SubModel>) -> Engine {
        self.model = model;
        // Another compressor identity: other derived ids.
        self.plans = Default::default();
        self
    }

    /// Replaces the fallback compressor (tests of failure handling).
    pub fn with_fallback(mut self, fallback: Arc<dyn SubModel>) -> Engine {
        self.fallback = fallback;
        self
    }

    /// The store itself, for tests and benchmarks that inspect or damage it (feature
    /// `testing`, which only the package's own dev-dependency turns on): no front end
    /// reaches past the engine's operations.
    #[cfg(feature = "testing")]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The index itself, for tests (feature `testing`, as [`Engine::store`]).
    #[cfg(feature = "testing")]
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The store, for the job queue the service runs over it (`service.rs`).
    pub(crate) fn store_for_jobs(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn model_identity(&self) -> String {
        self.model.identity()
    }

    // ---------------------------------------------------------------- scopes and plans

    pub fn scope(&self, name: &str) -> Result<ScopeRecord> {
        crate::id::scope(name)?;
        self.store.get_scope(name)?.ok_or_else(|| {
            let known: Vec<String> = self
                .store
                .scopes()
                .map(|v| v.into_iter().map(|s| s.name).collect())
                .unwrap_or_default();
            Error::UnknownScope {
                scope: name.to_string(),
                known: if known.is_empty() {
                    "none yet; run `strata ingest` first".into()
                } else {
                    known.join(", ")
                },
            }
        })
    }

    pub fn scope_names(&self) -> Result<Vec<String>> {
        Ok(self.store.scopes()?.into_iter().map(|s| s.name).collect())
    }

    /// The current level tree of `scope`, as ids.
    pub fn plan(&self, scope: &str) -> Result<Plan> {
        Ok(Plan::clone(&self.planned(scope)?.plan))
    }

    /// The current level tree of `scope`, planned once per change of the store: reused
    /// while the store's generation is the one it was planned at (read before the scope
    /// is, so a write that lands meanwhile makes the next request plan again). A store
    /// that other processes write to is planned every time.
    pub(crate) fn planned(&self, scope: &str) -> Result<Arc<Planned>> {
        let generation = self.store.generation();
        if let Some(g) = generation
            && let Some(p) = self.plans.lock().expect("plan cache poisoned").get(scope)
            && p.generation == Some(g)
        {
            return Ok(p.clone());
        }
        let p = Arc::new(Planned {
            generation,
            plan: Arc::new(self.plan_of(&self.scope(scope)?)?),
            min_deadline: OnceLock::new(),
            windows: Default::default(),
        });
        if generation.is_some() {
            let mut plans = self.plans.lock().expect("plan cache poisoned");
            // A tree planned meanwhile at a later generation stays.
            if plans
                .get(scope)
                .is_none_or(|old| old.generation <= generation)
            {
                plans.insert(scope.to_string(), p.clone());
            }
        }
        Ok(p)
    }

    /// Whether every node of a planned tree is live at `now`. The earliest deadline of its
    /// nodes is read once per generation: until a write, the tree is complete exactly
    /// while `now` is before it.
    pub(crate) fn planned_complete(&self, p: &Planned, now: u64) -> Result<bool> {
        let min = match self.known_min(p)? {
            Some(m) => m,
            None => {
                let ids: Vec<NodeId> = p.plan.all_ids().collect();
                let m = self.store.min_deadline(&ids)?;
                self.keep_min(p, m);
                m
            }
        };
        Ok(min.is_some_and(|at| at > now))
    }

    /// The earliest deadline of a planned tree's nodes (`Some(None)`: one is missing) when
    /// it is known without reading every node's: remembered for this generation, or left
    /// by the build of the tree ([`Engine::certified_min`]).
    pub(crate) fn known_min(&self, p: &Planned) -> Result<Option<Option<u64>>> {
        if let Some(m) = p.min_deadline.get() {
            return Ok(Some(*m));
        }
        let Some(m) = self.certified_min(&p.plan)? else {
            return Ok(None);
        };
        self.keep_min(p, Some(m));
        Ok(Some(Some(m)))
    }

    /// Remembers a planned tree's earliest deadline — only if no write landed since the
    /// tree was planned.
    fn keep_min(&self, p: &Planned, m: Option<u64>) {
        if p.generation.is_some() && self.store.generation() == p.generation {
            let _ = p.min_deadline.set(m);
        }
    }

    /// The earliest deadline of `plan`'s nodes as the last build of its scope left it
    /// ([`Liveness`]), when that build's tree is `plan` and no node has been removed nor
    /// brought to an earlier deadline since: two reads instead of one per node.
    fn certified_min(&self, plan: &Plan) -> Result<Option<u64>> {
        let Some(losses) = self.store.losses()? else {
            return Ok(None);
        };
        let left = match self.store.get_liveness::<Liveness>(&plan.scope) {
            Ok(l) => l,
            // Derived data: one that does not decode is as if there were none.
            Err(Error::DataCorruption(_)) => None,
            Err(e) => return Err(e),
        };
        Ok(left
            .filter(|l| l.losses == losses && l.digest == digest(plan))
            .map(|l| l.min_deadline))
    }

    /// Leaves [`Liveness`] for `plan`, a tree just built whole: its nodes' earliest
    /// deadline, read after the count of losses (a loss meanwhile makes it count for
    /// nothing). Backends that keep no count get nothing.
    pub(crate) fn certify(&self, plan: &Plan) -> Result<()> {
        let Some(losses) = self.store.losses()? else {
            return Ok(());
        };
        let ids: Vec<NodeId> = plan.all_ids().collect();
        if let Some(min_deadline) = self.store.min_deadline(&ids)? {
            self.store.put_liveness(
                &plan.scope,
                &Liveness {
                    digest: digest(plan),
                    min_deadline,
                    losses,
                },
            )?;
        }
        Ok(())
    }

    /// The current level tree of the scope `rec` describes.
    fn plan_of(&self, rec: &ScopeRecord) -> Result<Plan> {
        Plan::load(&self.store, rec, &self.model.identity(), &self.cfg)
    }

    /// [`crate::context::window`] of a planned tree, whole (no time range), which the
    /// caller has found complete at `now` ([`Engine::planned_complete`]). Remembered with
    /// the tree: a window depends on nothing but the tree, its nodes' texts and the
    /// request (`now` only decides liveness, and the tree stays live until its earliest
    /// deadline), so until the next write the same request gets the same window without
    /// reading or counting anything again.
    pub(crate) fn current_window(
        &self,
        p: &Planned,
        choice: LevelChoice,
        budget: usize,
        now: u64,
    ) -> Result<ContextWindow> {
        let key = (choice, budget);
        if let Some(w) = p.windows.lock().expect("window cache poisoned").get(&key) {
            return Ok(w.clone());
        }
        let w = crate::context::window(&self.corpus(), &p.plan, choice, budget, now)?;
        if p.generation.is_some() && self.store.generation() == p.generation {
            let mut windows = p.windows.lock().expect("window cache poisoned");
            if windows.len() >= WINDOWS_KEPT {
                windows.clear();
            }
            windows.insert(key, w.clone());
        }
        Ok(w)
    }

    /// [`Engine::current_window`] when `plan` (a view being served) is `scope`'s current
    /// tree and complete at `now`; `None` otherwise (a stale view, a tree cut to a time
    /// range is not passed here).
    pub(crate) fn window_if_current(
        &self,
        scope: &str,
        plan: &Plan,
        choice: LevelChoice,
        budget: usize,
        now: u64,
    ) -> Result<Option<ContextWindow>> {
        let p = self.planned(scope)?;
        // The ABSTRACT's id hashes the whole tree above the FULL chunks.
        if p.plan.abstract_id != plan.abstract_id
            || p.plan.chunks.len() != plan.chunks.len()
            || !self.planned_complete(&p, now)?
        {
            return Ok(None);
        }
        self.current_window(&p, choice, budget, now).map(Some)
    }

    /// The read handle context windows and the navigator read through.
    pub(crate) fn corpus(&self) -> Corpus<'_> {
        Corpus::new(&self.store, &self.index, self.embedder.as_ref(), &self.cfg)
    }
}

/// How often a running build may feed the index, and after how many store writes at least.
const FEED_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
const FEED_AFTER: u64 = 64;

/// The pending marks (node, generation) a build fed the index while it ran
/// ([`Engine::feed_index`]): written to the tantivy writer, not committed yet.
#[derive(Default)]
pub(crate) struct Fed(std::sync::Mutex<std::collections::HashSet<(NodeId, u64)>>);

impl Fed {
    pub(crate) fn len(&self) -> usize {
        self.0.lock().expect("fed marks lock poisoned").len()
    }
}

/// Writes the marked changes to the index's writer (a removed node is deleted, a stored one
/// replaced), without committing.
fn write_marked(store: &Store, index: &Index, marks: &[PendingMark]) -> Result<()> {
    for batch in marks.chunks(4096) {
        let mut nodes = Vec::with_capacity(batch.len());
        let mut gone = Vec::new();
        let ids: Vec<NodeId> = batch.iter().map(|m| m.id).collect();
        for (id, node) in ids.iter().zip(store.get_nodes(&ids)?) {
            match node {
                Some(n) => nodes.push(n),
                None => gone.push(*id),
            }
        }
        index.delete(&gone)?;
        index.upsert(&nodes)?;
    }
    Ok(())
}
