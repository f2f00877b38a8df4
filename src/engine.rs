//! The engine: one store, one index, one sub-model, one configuration. Every interface (CLI
//! today; HTTP and MCP later) is a thin layer over these methods.

use crate::build::{BuildReport, Builder, Progress};
use crate::chunk::{self, Chunk, Structure};
use crate::config::{Config, Strategy};
use crate::context::{ContextWindow, LevelChoice};
use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::index::Index;
use crate::level::Level;
use crate::model::usage::metered;
use crate::model::{ChatModel, Embedder, Limiter, Meter, Models, Offline, SubModel, Usage};
use crate::navigate::{Explorer, QueryResult};
use crate::node::{Meta, Node, NodeId, Span, full_id};
use crate::plan::Plan;
use crate::source::{self, InputFile, SourceInput};
use crate::store::{
    ChunkRef, ScopeKind, ScopeRecord, SourceEntry, SourcePut, SourceRecord, SourceStep, Store,
};
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Seconds since the Unix epoch. Everything that depends on time takes `now` as a parameter;
/// only the outermost caller reads the clock.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub struct Engine {
    store: Store,
    index: Index,
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
    /// Serialises [`Engine::sync_index`]: one pass applies and commits at a time.
    index_sync: std::sync::Mutex<()>,
    /// The store's directory (`None`: in memory), whose file system writes are checked
    /// against before they begin.
    dir: Option<PathBuf>,
}

/// What an ingest did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IngestReport {
    pub scope: String,
    pub kind: Option<ScopeKind>,
    pub files: usize,
    pub bytes: u64,
    pub added: usize,
    pub replaced: usize,
    pub unchanged: usize,
    pub removed: usize,
    pub chunks_written: usize,
}

/// A complete view of a scope (see [`Engine::view`]).
#[derive(Clone, Debug)]
pub struct View {
    pub plan: Plan,
    /// Levels of the view that lag behind the current sources (empty = fresh).
    pub stale: Vec<Level>,
    /// Sources ingested since the view was built.
    pub pending_sources: usize,
}

/// One `grep` result.
#[derive(Clone, Debug, Serialize)]
pub struct GrepHit {
    pub id: String,
    pub scope: String,
    pub level: Level,
    pub score: f32,
    pub citations: usize,
    pub first_span: Option<Span>,
    pub text: String,
}

/// Store-wide numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    pub scopes: Vec<ScopeStats>,
    pub nodes: usize,
    pub indexed_docs: u64,
    /// Node changes stored but not yet committed to the index (0 after any open, build,
    /// ingest or query: they are applied then).
    pub unindexed: usize,
    pub next_expiry: Option<u64>,
    pub disk_bytes: u64,
    pub tokenizer: &'static str,
    pub model: String,
    /// The embedding model of hybrid retrieval (none: BM25 only).
    pub embed_model: Option<String>,
    /// Stored node vectors (every embedding model).
    pub embeddings: usize,
    /// Nodes made by the offline fallback (or built over one), and how many await the model.
    pub fallbacks: crate::store::FallbackCounts,
    /// On a shared store, every replica's index lag (empty for a directory store).
    pub replicas: Vec<crate::store::ReplicaStatus>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScopeStats {
    pub scope: String,
    pub kind: ScopeKind,
    pub sources: usize,
    pub chunks: usize,
    pub groups: usize,
    pub full_tokens: u64,
    /// Live nodes per level (full, detailed, summary, abstract, metadata) of the current tree.
    pub live_by_level: crate::level::PerLevel<usize>,
    /// Nodes of the current tree that are missing or expired (a build would make them).
    pub stale: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    pub expired: usize,
    pub unreachable: usize,
    pub remaining: usize,
    /// Stored vectors whose node is gone.
    pub embeddings_removed: usize,
}

impl Engine {
    /// Opens the store and index under `dir` (created if missing). A missing or unreadable
    /// index is rebuilt from the store.
    /// `dir` may also be a `postgres://` URL: the engine is then a replica of that
    /// database, its index in a directory of its own (`crate::replica`).
    pub fn open(dir: &Path, cfg: Config) -> Result<Engine> {
        if let Some(url) = crate::replica::database_url(dir) {
            return crate::replica::open(url, cfg);
        }
        let store = Store::open(dir)?;
        Engine::open_on(store, &dir.join("index"), Some(dir.to_path_buf()), cfg)
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
            index,
            cfg,
            model: models.sub,
            fallback: Arc::new(Offline),
            root: models.root,
            helper: models.helper,
            embedder: models.embedder,
            limiter: models.limiter,
            write: std::sync::Mutex::new(()),
            index_sync: std::sync::Mutex::new(()),
            dir: None,
        })
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
    pub fn sync_index(&self) -> Result<usize> {
        let _g = self.index_sync.lock().expect("index sync lock poisoned");
        let pending = self.store.pending_index()?;
        if pending.is_empty() {
            return Ok(0);
        }
        for batch in pending.chunks(4096) {
            let mut nodes = Vec::with_capacity(batch.len());
            let mut gone = Vec::new();
            let ids: Vec<NodeId> = batch.iter().map(|m| m.id).collect();
            for (id, node) in ids.iter().zip(self.store.get_nodes(&ids)?) {
                match node {
                    Some(n) => nodes.push(n),
                    None => gone.push(*id),
                }
            }
            self.index.delete(&gone)?;
            self.index.upsert(&nodes)?;
        }
        self.index.commit()?;
        self.store.clear_pending_index(&pending)?;
        Ok(pending.len())
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
        self
    }

    /// Replaces the fallback compressor (tests of failure handling).
    pub fn with_fallback(mut self, fallback: Arc<dyn SubModel>) -> Engine {
        self.fallback = fallback;
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn index(&self) -> &Index {
        &self.index
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
        let rec = self.scope(scope)?;
        Plan::load(&self.store, &rec, &self.model.identity(), &self.cfg)
    }

    // ---------------------------------------------------------------- ingest

    /// Reads, validates and ingests files into `scope`. Every file is read and validated
    /// before anything is written: one bad file changes nothing.
    pub fn ingest_files(
        &self,
        scope: &str,
        kind: Option<ScopeKind>,
        paths: &[PathBuf],
        now: u64,
    ) -> Result<IngestReport> {
        if paths.is_empty() {
            return Err(Error::invalid("no files given"));
        }
        crate::id::scope(scope)?;
        let existing = self.store.get_scope(scope)?;
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let k = kind
                .or(existing.as_ref().map(|s| s.kind))
                .unwrap_or_else(|| source::guess_kind(p));
            files.push(source::read_file(p, k)?);
        }
        let kinds: HashSet<_> = files.iter().map(|f| f.kind).collect();
        if kinds.len() > 1 {
            return Err(Error::invalid(
                "a scope holds either documents or one debate: pass --kind, or ingest them into separate scopes",
            ));
        }
        self.ingest(scope, &files, now)
    }

    /// Ingests already-validated inputs. For a debate file, turns of an earlier version of
    /// the same file that are gone now are removed.
    ///
    /// The write protocol (docs/ARCHITECTURE.md, "Writes"): chunking and token counting run
    /// before the write lock is taken; under the lock, each file is one store transaction
    /// (its sources' records, texts and FULL nodes, the chunks they replace, the scope's
    /// membership); the lock is released before the flush, and the report is returned only
    /// after the flush, so what it reports is durable. The index catches up afterwards from
    /// the durable pending set ([`Engine::sync_index`]).
    pub fn ingest(&self, scope: &str, files: &[InputFile], now: u64) -> Result<IngestReport> {
        crate::id::scope(scope)?;
        for f in files {
            for s in &f.sources {
                check_source(s)?;
            }
        }
        self.ensure_room(files.iter().map(|f| f.bytes).sum())?;
        let prepared: Vec<Vec<Option<Vec<Chunk>>>> = files
            .iter()
            .map(|f| {
                f.sources
                    .iter()
                    .map(|s| self.prepare(scope, f.kind, s))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        let report = {
            let _w = self.write.lock().expect("write lock poisoned");
            // Other processes sharing the store write this scope's record too.
            let _s = self.store.lock_scope(scope)?;
            self.ingest_locked(scope, files, prepared, now)?
        };
        self.store.flush()?;
        self.sync_index_or_warn();
        Ok(report)
    }

    /// Chunks a source before the write lock is taken (the CPU-heavy part of an ingest), or
    /// `None` when the store already holds it unchanged (checked again under the lock).
    fn prepare(&self, scope: &str, kind: ScopeKind, s: &SourceInput) -> Result<Option<Vec<Chunk>>> {
        let budget = self.cfg.chunk.tokens;
        if let Some(old) = self.store.get_source(scope, &s.id)?
            && unchanged(&old, s, budget)
        {
            return Ok(None);
        }
        Ok(Some(chunk::chunk(&s.text, structure_of(kind), budget)))
    }

    fn ingest_locked(
        &self,
        scope: &str,
        files: &[InputFile],
        prepared: Vec<Vec<Option<Vec<Chunk>>>>,
        now: u64,
    ) -> Result<IngestReport> {
        let kind = files.first().map(|f| f.kind).unwrap_or(ScopeKind::Doc);
        let mut rec = match self.store.get_scope(scope)? {
            Some(r) if r.kind != kind => {
                return Err(Error::invalid(format!(
                    "scope `{scope}` holds {}s; this input is a {}",
                    kind_name(r.kind),
                    kind_name(kind)
                )));
            }
            Some(r) => r,
            None => ScopeRecord {
                name: scope.to_string(),
                kind,
                sources: Vec::new(),
                next_seq: 0,
                created_at: now,
                updated_at: now,
            },
        };
        let mut report = IngestReport {
            scope: scope.to_string(),
            kind: Some(kind),
            files: files.len(),
            ..Default::default()
        };
        for (f, chunks) in files.iter().zip(prepared) {
            report.bytes += f.bytes;
            let mut step = SourceStep {
                scope: rec.clone(),
                put: Vec::new(),
                remove_sources: Vec::new(),
                remove_nodes: Vec::new(),
            };
            // A re-ingested debate file may have lost turns; single turns appended
            // without a file (`path` empty) never remove anything.
            if kind == ScopeKind::Debate && !f.path.as_os_str().is_empty() {
                let prefix = format!("{}#", f.path.display());
                let keep: HashSet<&str> = f.sources.iter().map(|s| s.id.as_str()).collect();
                let gone: Vec<String> = rec
                    .sources
                    .iter()
                    .filter(|e| e.id.starts_with(&prefix) && !keep.contains(e.id.as_str()))
                    .map(|e| e.id.clone())
                    .collect();
                for id in gone {
                    if let Some(old) = self.store.get_source(scope, &id)? {
                        step.remove_nodes.extend(old.chunks.iter().map(|c| c.id));
                    }
                    rec.sources.retain(|e| e.id != id);
                    step.remove_sources.push(id);
                    report.removed += 1;
                }
            }
            for (s, chunks) in f.sources.iter().zip(chunks) {
                match self.stage_source(&mut rec, &mut step, s, chunks, now)? {
                    Outcome::Added => report.added += 1,
                    Outcome::Replaced => report.replaced += 1,
                    Outcome::Unchanged => report.unchanged += 1,
                }
            }
            if step.put.is_empty() && step.remove_sources.is_empty() {
                continue;
            }
            report.chunks_written += step.put.iter().map(|p| p.nodes.len()).sum::<usize>();
            rec.updated_at = now;
            sort_sources(&mut rec);
            step.scope = rec.clone();
            self.store.write_sources(&step)?;
        }
        Ok(report)
    }

    /// Appends (or replaces) one debate turn under `source_id`.
    pub fn append_turn(
        &self,
        scope: &str,
        source_id: String,
        turn: source::Turn,
        now: u64,
    ) -> Result<IngestReport> {
        let input = source::turn_input(source_id, turn)?;
        let file = InputFile::single(ScopeKind::Debate, "", input);
        self.ingest(scope, &[file], now)
    }

    /// Adds one source to `step` (and to the scope record `rec`), or finds it unchanged.
    /// `chunks` were cut before the lock; `None` means the source looked unchanged then.
    fn stage_source(
        &self,
        rec: &mut ScopeRecord,
        step: &mut SourceStep,
        s: &SourceInput,
        chunks: Option<Vec<Chunk>>,
        now: u64,
    ) -> Result<Outcome> {
        let budget = self.cfg.chunk.tokens;
        let old = self.store.get_source(&rec.name, &s.id)?;
        let listed = rec.sources.iter().find(|e| e.id == s.id).map(|e| e.seq);
        if let Some(o) = &old
            && listed.is_some()
            && unchanged(o, s, budget)
        {
            return Ok(Outcome::Unchanged);
        }
        // Changed since it was prepared (or never prepared): chunk it now.
        let chunks = match chunks {
            Some(c) => c,
            None => chunk::chunk(&s.text, structure_of(rec.kind), budget),
        };
        let hash = *blake3::hash(s.text.as_bytes()).as_bytes();
        let nodes = full_nodes(&rec.name, s, &chunks, now);
        // A source the scope lists keeps its place; anything else gets the next number
        // (a record the scope does not list is a leftover, never a place).
        let seq = match listed {
            Some(seq) => seq,
            None => {
                rec.next_seq += 1;
                rec.next_seq - 1
            }
        };
        let record = SourceRecord {
            id: s.id.clone(),
            scope: rec.name.clone(),
            seq,
            round: s.round,
            speaker: s.speaker.clone(),
            hash,
            bytes: s.text.len() as u64,
            chunk_tokens: budget as u32,
            chunks: chunks
                .iter()
                .zip(&nodes)
                .map(|(c, n)| ChunkRef {
                    id: n.id,
                    start: c.start as u64,
                    end: c.end as u64,
                    tokens: c.tokens as u32,
                    section: c.section,
                    headings: c.headings.clone(),
                })
                .collect(),
        };
        if let Some(o) = &old {
            let new_ids: HashSet<NodeId> = nodes.iter().map(|n| n.id).collect();
            step.remove_nodes.extend(
                o.chunks
                    .iter()
                    .map(|c| c.id)
                    .filter(|id| !new_ids.contains(id)),
            );
        }
        rec.sources.retain(|e| e.id != s.id);
        rec.sources.push(SourceEntry {
            id: s.id.clone(),
            round: s.round,
            seq,
        });
        step.put.push(SourcePut {
            record,
            text: s.text.clone(),
            nodes,
        });
        Ok(if listed.is_some() {
            Outcome::Replaced
        } else {
            Outcome::Added
        })
    }

    // ---------------------------------------------------------------- build

    /// Appends one debate turn under a fresh source id (`scope#turn-N`), creating the debate
    /// if needed. Safe to call concurrently: appends are serialised and none is lost. The
    /// turn is durable on return; it becomes searchable with the next build or query.
    ///
    /// N comes from the scope record, which is written in the same transaction as the turn,
    /// so a crash can never hand out a number twice; an id the store already holds (a
    /// leftover of an older strata) is skipped, never replaced.
    pub fn append(
        &self,
        scope: &str,
        turn: source::Turn,
        now: u64,
    ) -> Result<(IngestReport, String)> {
        crate::id::scope(scope)?;
        // Validate and chunk before the lock; the id only names the source.
        let probe = source::turn_input(format!("{scope}#turn"), turn)?;
        check_source(&probe)?;
        self.ensure_room(probe.text.len() as u64)?;
        let chunks = chunk::chunk(&probe.text, Structure::Turn, self.cfg.chunk.tokens);
        let (report, id) = {
            let _w = self.write.lock().expect("write lock poisoned");
            let _s = self.store.lock_scope(scope)?;
            let rec = self.store.get_scope(scope)?;
            let mut n = rec.as_ref().map_or(0, |r| r.next_seq) + 1;
            let id = loop {
                let id = format!("{scope}#turn-{n}");
                let listed = rec
                    .as_ref()
                    .is_some_and(|r| r.sources.iter().any(|e| e.id == id));
                if !listed && self.store.get_source(scope, &id)?.is_none() {
                    break id;
                }
                n += 1;
            };
            let input = SourceInput {
                id: id.clone(),
                ..probe
            };
            let file = InputFile::single(ScopeKind::Debate, "", input);
            (
                self.ingest_locked(scope, &[file], vec![vec![Some(chunks)]], now)?,
                id,
            )
        };
        self.store.flush()?;
        Ok((report, id))
    }

    /// Builds (or refreshes) every level of `scope`. Nodes that are live in the store are
    /// cache hits: an unchanged scope makes zero compressor calls.
    pub async fn compress(
        &self,
        scope: &str,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<BuildReport> {
        self.compress_with(scope, now, None, progress).await
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
            .build_plan(scope, now, refresh_before, progress)
            .await?
            .0)
    }

    /// Builds the current tree of `scope`; returns the report and the tree it built (which
    /// a concurrent append may already have superseded).
    async fn build_plan(
        &self,
        scope: &str,
        now: u64,
        refresh_before: Option<u64>,
        progress: &dyn Progress,
    ) -> Result<(BuildReport, Plan)> {
        let rec = self.scope(scope)?;
        let plan = Plan::load(&self.store, &rec, &self.model.identity(), &self.cfg)?;
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
            cfg: &self.cfg,
            now,
            refresh_before,
            progress,
        };
        let (mut report, _built) = builder.run().await?;
        report.indexed = self.sync_index()?;
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
        if report.failures.is_empty() {
            // The newest complete view, served while a later build is still running.
            self.store.put_view(scope, &plan)?;
        }
        self.store.flush()?;
        Ok((report, plan))
    }

    /// The newest complete view of `scope` without building anything: the current tree if
    /// every node of it is live, else the last complete build's tree (if still live), with
    /// the levels that lag the sources. `None` when neither is complete (build first).
    pub fn view(&self, scope: &str, now: u64) -> Result<Option<View>> {
        let current = self.plan(scope)?;
        if self.is_complete(&current, now)? {
            return Ok(Some(View {
                plan: current,
                stale: Vec::new(),
                pending_sources: 0,
            }));
        }
        let Some(snap) = self.store.get_view::<Plan>(scope)? else {
            return Ok(None);
        };
        if snap.compressor != current.compressor || !self.is_complete(&snap, now)? {
            return Ok(None);
        }
        let ids = |p: &Plan, l: Level| -> Vec<NodeId> {
            match l {
                Level::Full => p.chunks.iter().map(|c| c.full).collect(),
                Level::Detailed => p.chunks.iter().map(|c| c.detailed).collect(),
                Level::Summary => p.groups.iter().map(|g| g.summary).collect(),
                Level::Abstract => vec![p.abstract_id],
                Level::Metadata => {
                    let mut v: Vec<NodeId> = p.metadata.values().copied().collect();
                    v.sort();
                    v
                }
            }
        };
        let stale = Level::ALL
            .into_iter()
            .filter(|&l| ids(&snap, l) != ids(&current, l))
            .collect();
        let known: HashSet<&str> = snap.sources.iter().map(|s| s.id.as_str()).collect();
        let pending_sources = current
            .sources
            .iter()
            .filter(|s| !known.contains(s.id.as_str()))
            .count();
        Ok(Some(View {
            plan: snap,
            stale,
            pending_sources,
        }))
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
        let plan = self.plan(scope)?;
        if self.is_complete(&plan, now)? {
            return Ok((plan, None));
        }
        let (report, built) = self.build_plan(scope, now, None, progress).await?;
        Ok((built, Some(report)))
    }

    /// The read handle context windows and the navigator read through.
    pub(crate) fn corpus(&self) -> Corpus<'_> {
        Corpus::new(&self.store, &self.index, self.embedder.as_ref(), &self.cfg)
    }

    /// A live node of `plan`, or a clear error when the build could not make it.
    pub fn node(&self, id: &NodeId, now: u64) -> Result<Node> {
        self.corpus().node(id, now)
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
        crate::context::check_budget(budget)?;
        let (plan, _) = self.ensure_built(scope, now, progress).await?;
        crate::context::window(&self.corpus(), &plan, choice, budget, now)
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
            .ensure_built(scope, now, &crate::build::NoProgress)
            .await?;
        Ok((
            View {
                plan,
                stale: Vec::new(),
                pending_sources: 0,
            },
            report,
        ))
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

    /// Answers `question` over `scopes` (all scopes when empty) with cited source spans.
    pub async fn query(
        &self,
        scopes: &[String],
        question: &str,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<QueryResult> {
        self.query_with(scopes, question, &self.cfg.query, now, progress)
            .await
    }

    /// [`Engine::query`] with per-request navigator settings (iterations, start level...).
    pub async fn query_with(
        &self,
        scopes: &[String],
        question: &str,
        qcfg: &crate::config::QueryConfig,
        now: u64,
        progress: &dyn Progress,
    ) -> Result<QueryResult> {
        if question.trim().is_empty() {
            return Err(Error::invalid("the question is empty"));
        }
        let t0 = std::time::Instant::now();
        let meter = Arc::new(Meter::default());
        let mut r = metered(meter.clone(), async {
            let names = if scopes.is_empty() {
                let all = self.scope_names()?;
                if all.is_empty() {
                    return Err(Error::invalid("no scopes yet: run `strata ingest` first"));
                }
                all
            } else {
                scopes.to_vec()
            };
            let mut plans = Vec::with_capacity(names.len());
            for s in &names {
                plans.push(self.ensure_built(s, now, progress).await?.0);
            }
            // Appends leave their chunks pending; a query searches everything stored.
            self.sync_index()?;
            let mut explorer = Explorer::new(self.corpus(), plans, qcfg.clone(), now);
            explorer.embed_question(question).await;
            match self
                .root
                .as_ref()
                .filter(|_| qcfg.strategy == Strategy::Auto)
            {
                Some(root) => {
                    let helper = self.helper.as_deref().unwrap_or(root.as_ref());
                    crate::navigate::llm::run(explorer, question, root.as_ref(), helper).await
                }
                None => crate::navigate::offline(explorer, question),
            }
        })
        .await?;
        let (invalid, fallbacks) = (r.usage.invalid_outputs, r.usage.fallbacks);
        r.usage = Usage::from_meter(&meter, &self.cfg.prices, t0.elapsed());
        r.usage.invalid_outputs = invalid;
        r.usage.fallbacks = fallbacks;
        Ok(r)
    }

    /// BM25 search over the current trees of `scopes` (all when empty) at `levels` (all
    /// when empty): the `grep` primitive, exposed for people and agents.
    pub fn grep(
        &self,
        scopes: &[String],
        pattern: &str,
        levels: &[Level],
        limit: usize,
        now: u64,
    ) -> Result<Vec<GrepHit>> {
        let names = if scopes.is_empty() {
            self.scope_names()?
        } else {
            for s in scopes {
                self.scope(s)?;
            }
            scopes.to_vec()
        };
        let mut current: HashSet<NodeId> = HashSet::new();
        for s in &names {
            current.extend(self.plan(s)?.all_ids());
        }
        self.sync_index()?;
        let hits = self.index.search(&crate::index::Grep {
            query: &self.index.analyse_query(pattern),
            scopes: &names,
            levels,
            within: None,
            limit: limit.saturating_mul(2).max(limit),
        })?;
        let mut out = Vec::new();
        for h in hits {
            if out.len() >= limit || !current.contains(&h.id) {
                continue;
            }
            if let Some(n) = self.store.get_live(&h.id, now)? {
                out.push(GrepHit {
                    id: n.id.to_hex(),
                    scope: n.scope,
                    level: n.level,
                    score: h.score,
                    citations: n.citations.len(),
                    first_span: n.citations.first().cloned(),
                    text: n.text,
                });
            }
        }
        Ok(out)
    }

    // ---------------------------------------------------------------- maintenance

    /// Sizes and freshness of one scope's current tree.
    pub fn scope_stats(&self, scope: &str, now: u64) -> Result<ScopeStats> {
        let rec = self.scope(scope)?;
        let plan = Plan::load(&self.store, &rec, &self.model.identity(), &self.cfg)?;
        let mut live = crate::level::PerLevel::<usize>::default();
        let mut stale = 0;
        for id in plan.all_ids() {
            match self.store.get_live(&id, now)? {
                Some(n) => live[n.level] += 1,
                None => stale += 1,
            }
        }
        Ok(ScopeStats {
            scope: rec.name.clone(),
            kind: rec.kind,
            sources: plan.sources.len(),
            chunks: plan.chunks.len(),
            groups: plan.groups.len(),
            full_tokens: plan.full_tokens,
            live_by_level: live,
            stale,
        })
    }

    pub fn stats(&self, now: u64) -> Result<Stats> {
        let mut scopes = Vec::new();
        for name in self.scope_names()? {
            scopes.push(self.scope_stats(&name, now)?);
        }
        Ok(Stats {
            scopes,
            nodes: self.store.n_nodes(),
            indexed_docs: self.index.n_docs(),
            unindexed: self.store.n_pending_index(),
            next_expiry: self.store.next_deadline()?,
            disk_bytes: self.store.size_on_disk(),
            tokenizer: crate::token::TOKENIZER,
            model: self.model.identity(),
            embed_model: self.embedder.as_ref().map(|e| e.identity()),
            embeddings: self.store.n_embeddings(),
            fallbacks: self.store.fallback_counts()?,
            replicas: self.store.replicas()?,
        })
    }

    /// Removes expired nodes, and nodes no scope's current tree reaches (left behind by
    /// changed sources or another compressor), from the store and the index.
    pub fn gc(&self, now: u64) -> Result<GcReport> {
        let expired = self.store.sweep(now)?;
        // The ids before the trees: a node another process writes meanwhile (a shared
        // store) is in a tree read after it, never taken for unreachable.
        let stored = self.store.node_ids()?;
        let mut reachable: HashSet<NodeId> = HashSet::new();
        for rec in self.store.scopes()? {
            let plan = Plan::load(&self.store, &rec, &self.model.identity(), &self.cfg)?;
            reachable.extend(plan.all_ids());
            // The last complete view is still being served while a build runs.
            if let Some(view) = self.store.get_view::<Plan>(&rec.name)? {
                reachable.extend(view.all_ids());
            }
        }
        let mut unreachable = Vec::new();
        for id in stored {
            if !reachable.contains(&id) {
                unreachable.push(id);
            }
        }
        for id in &unreachable {
            // FULL nodes are always reachable from their source record; only derived
            // nodes are ever unreachable.
            self.store.remove_node(id)?;
        }
        let embeddings_removed = self.store.remove_orphan_embeddings()?;
        self.store.flush()?;
        self.sync_index()?;
        Ok(GcReport {
            expired: expired.len(),
            unreachable: unreachable.len(),
            remaining: self.store.n_nodes(),
            embeddings_removed,
        })
    }

    /// Rebuilds the index from the store: every stored node. Marks of changes made while
    /// it runs stay pending for the next [`Engine::sync_index`].
    pub fn reindex(&self) -> Result<usize> {
        let _g = self.index_sync.lock().expect("index sync lock poisoned");
        let pending = self.store.pending_index()?;
        self.index.delete_all()?;
        let mut n = 0;
        let mut batch = Vec::new();
        for id in self.store.node_ids()? {
            if let Some(node) = self.store.get_node(&id)? {
                batch.push(node);
            }
            if batch.len() >= 4096 {
                n += batch.len();
                self.index.upsert(&batch)?;
                batch.clear();
            }
        }
        n += batch.len();
        self.index.upsert(&batch)?;
        self.index.commit()?;
        self.store.clear_pending_index(&pending)?;
        Ok(n)
    }
}

enum Outcome {
    Added,
    Replaced,
    Unchanged,
}

fn kind_name(k: ScopeKind) -> &'static str {
    match k {
        ScopeKind::Doc => "document",
        ScopeKind::Debate => "debate",
    }
}

fn sort_sources(rec: &mut ScopeRecord) {
    match rec.kind {
        ScopeKind::Doc => rec.sources.sort_by_key(|e| e.seq),
        ScopeKind::Debate => rec.sources.sort_by_key(|e| (e.round.unwrap_or(0), e.seq)),
    }
}

/// How a source of a scope of `kind` is cut.
fn structure_of(kind: ScopeKind) -> Structure {
    match kind {
        ScopeKind::Doc => Structure::Document,
        ScopeKind::Debate => Structure::Turn,
    }
}

/// Whether the stored record `old` already holds `s` as it would be ingested now.
fn unchanged(old: &SourceRecord, s: &SourceInput, budget: usize) -> bool {
    old.hash == *blake3::hash(s.text.as_bytes()).as_bytes()
        && old.round == s.round
        && old.speaker == s.speaker
        && old.chunk_tokens as usize == budget
}

/// The names a source brings into the store, checked by the one set of rules (`id`).
fn check_source(s: &SourceInput) -> Result<()> {
    crate::id::source(&s.id)?;
    if let Some(sp) = &s.speaker {
        crate::id::speaker(sp).map_err(|e| Error::invalid(format!("{}: {e}", s.id)))?;
    }
    Ok(())
}

/// The FULL nodes of a source cut into `chunks`.
fn full_nodes(scope: &str, s: &SourceInput, chunks: &[Chunk], now: u64) -> Vec<Node> {
    let meta = Meta {
        rounds: s.round.into_iter().collect(),
        speakers: s.speaker.iter().cloned().collect(),
        headings: Vec::new(),
        tags: None,
    };
    chunks
        .iter()
        .map(|c| {
            let text = s.text[c.start..c.end].to_string();
            Node {
                id: full_id(&s.id, c.start, c.end, &text),
                scope: scope.to_string(),
                level: Level::Full,
                tokens: c.tokens as u32,
                text,
                children: Vec::new(),
                citations: vec![Span {
                    source: s.id.clone(),
                    start: c.start as u64,
                    end: c.end as u64,
                }],
                meta: Meta {
                    headings: c.headings.clone(),
                    ..meta.clone()
                },
                created_at: now,
                expires_at: None,
            }
        })
        .collect()
}
