//! The engine: one store, one index, one sub-model, one configuration. Every interface (CLI
//! today; HTTP and MCP later) is a thin layer over these methods.

use crate::build::{BuildReport, Builder, Progress};
use crate::chunk::{self, Structure};
use crate::config::Config;
use crate::context::{ContextWindow, LevelChoice};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::level::Level;
use crate::model::usage::metered;
use crate::model::{ChatModel, Embedder, Limiter, Meter, Models, Offline, SubModel, Usage};
use crate::navigate::{Explorer, QueryResult};
use crate::node::{Meta, Node, NodeId, Span, full_id};
use crate::plan::Plan;
use crate::source::{self, InputFile, SourceInput};
use crate::store::{ChunkRef, ScopeKind, ScopeRecord, SourceEntry, SourceRecord, Store};
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
    pub live_by_level: [usize; 5],
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
    pub fn open(dir: &Path, cfg: Config) -> Result<Engine> {
        let store = Store::open(dir)?;
        let (index, fresh) = Index::open(&dir.join("index"))?;
        let e = Engine::from_parts(store, index, cfg)?;
        if fresh && e.store.n_nodes() > 0 {
            tracing::info!("index missing: rebuilding it from the store");
            e.reindex(unix_now())?;
        } else {
            e.recover_index()?;
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

    /// Adds nodes to the index writer and records them as not yet committed, so a crash
    /// before [`Engine::commit_index`] is repaired at the next open.
    fn stage(&self, nodes: &[Node]) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        self.store.mark_unindexed(nodes.iter().map(|n| n.id))?;
        self.index.upsert(nodes)
    }

    /// Makes staged index writes durable and searchable. Appends leave this to the build
    /// that follows them (a commit costs far more than an append); every other write path
    /// commits before it returns.
    pub fn commit_index(&self) -> Result<()> {
        if self.store.has_unindexed() {
            self.index.commit()?;
            self.store.clear_unindexed()?;
        }
        Ok(())
    }

    /// Indexes nodes a crash left stored but uncommitted.
    fn recover_index(&self) -> Result<()> {
        let ids = self.store.unindexed()?;
        if ids.is_empty() {
            return Ok(());
        }
        tracing::info!(
            n = ids.len(),
            "indexing nodes an interrupted run left behind"
        );
        let mut nodes = Vec::new();
        for id in ids {
            if let Some(n) = self.store.get_node(&id)? {
                nodes.push(n);
            }
        }
        self.index.upsert(&nodes)?;
        self.index.commit()?;
        self.store.clear_unindexed()
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
        validate_scope_name(scope)?;
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
    pub fn ingest(&self, scope: &str, files: &[InputFile], now: u64) -> Result<IngestReport> {
        let _w = self.write.lock().expect("write lock poisoned");
        let r = self.ingest_locked(scope, files, now)?;
        self.commit_index()?;
        Ok(r)
    }

    fn ingest_locked(&self, scope: &str, files: &[InputFile], now: u64) -> Result<IngestReport> {
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
        let mut to_index: Vec<Node> = Vec::new();
        let mut to_unindex: Vec<NodeId> = Vec::new();
        for f in files {
            report.bytes += f.bytes;
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
                    to_unindex.extend(self.remove_source(&mut rec, &id)?);
                    report.removed += 1;
                }
            }
            for s in &f.sources {
                let (outcome, added, removed) = self.put_source(&mut rec, s, now)?;
                match outcome {
                    Outcome::Added => report.added += 1,
                    Outcome::Replaced => report.replaced += 1,
                    Outcome::Unchanged => report.unchanged += 1,
                }
                report.chunks_written += added.len();
                to_index.extend(added);
                to_unindex.extend(removed);
            }
        }
        self.index.delete(&to_unindex)?;
        self.stage(&to_index)?;
        rec.updated_at = now;
        sort_sources(&mut rec);
        self.store.put_scope(&rec)?;
        self.store.flush()?;
        Ok(report)
    }

    /// Appends (or replaces) one debate turn — the incremental path a debate runner uses.
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

    fn put_source(
        &self,
        rec: &mut ScopeRecord,
        s: &SourceInput,
        now: u64,
    ) -> Result<(Outcome, Vec<Node>, Vec<NodeId>)> {
        let hash = *blake3::hash(s.text.as_bytes()).as_bytes();
        let budget = self.cfg.chunk.tokens;
        let old = self.store.get_source(&rec.name, &s.id)?;
        if let Some(o) = &old
            && o.hash == hash
            && o.round == s.round
            && o.speaker == s.speaker
            && o.chunk_tokens as usize == budget
        {
            return Ok((Outcome::Unchanged, Vec::new(), Vec::new()));
        }
        let structure = match rec.kind {
            ScopeKind::Doc => Structure::Document,
            ScopeKind::Debate => Structure::Turn,
        };
        let chunks = chunk::chunk(&s.text, structure, budget);
        let meta = Meta {
            rounds: s.round.into_iter().collect(),
            speakers: s.speaker.iter().cloned().collect(),
            headings: Vec::new(),
            tags: None,
        };
        let nodes: Vec<Node> = chunks
            .iter()
            .map(|c| {
                let text = s.text[c.start..c.end].to_string();
                Node {
                    id: full_id(&s.id, c.start, c.end, &text),
                    scope: rec.name.clone(),
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
            .collect();
        let seq = match &old {
            Some(o) => o.seq,
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
        // New chunks first, then the record that points at them, then the old chunks go:
        // a crash in between leaves the old or the new version whole, never neither.
        for n in &nodes {
            self.store.put_node(n)?;
        }
        self.store.put_source(&record, &s.text)?;
        let mut removed = Vec::new();
        if let Some(o) = &old {
            let new_ids: HashSet<NodeId> = nodes.iter().map(|n| n.id).collect();
            for c in &o.chunks {
                if !new_ids.contains(&c.id) {
                    self.store.remove_node(&c.id)?;
                    removed.push(c.id);
                }
            }
        }
        rec.sources.retain(|e| e.id != s.id);
        rec.sources.push(SourceEntry {
            id: s.id.clone(),
            round: s.round,
            seq,
        });
        let outcome = if old.is_some() {
            Outcome::Replaced
        } else {
            Outcome::Added
        };
        Ok((outcome, nodes, removed))
    }

    fn remove_source(&self, rec: &mut ScopeRecord, id: &str) -> Result<Vec<NodeId>> {
        let mut removed = Vec::new();
        if let Some(old) = self.store.get_source(&rec.name, id)? {
            for c in &old.chunks {
                self.store.remove_node(&c.id)?;
                removed.push(c.id);
            }
        }
        self.store.remove_source(&rec.name, id)?;
        rec.sources.retain(|e| e.id != id);
        Ok(removed)
    }

    // ---------------------------------------------------------------- build

    /// Appends one debate turn under a fresh source id (`scope#turn-N`), creating the debate
    /// if needed. Safe to call concurrently: appends are serialised and none is lost. The
    /// turn is durable on return; it becomes searchable with the next build (which a
    /// context or query request runs on demand).
    pub fn append(
        &self,
        scope: &str,
        turn: source::Turn,
        now: u64,
    ) -> Result<(IngestReport, String)> {
        validate_scope_name(scope)?;
        let _w = self.write.lock().expect("write lock poisoned");
        let next = self.store.get_scope(scope)?.map_or(0, |r| r.next_seq);
        let id = format!("{scope}#turn-{}", next + 1);
        let input = source::turn_input(id.clone(), turn)?;
        let file = InputFile::single(ScopeKind::Debate, "", input);
        Ok((self.ingest_locked(scope, &[file], now)?, id))
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
        let (mut report, built) = builder.run().await?;
        report.indexed = built.len();
        self.stage(&built)?;
        self.commit_index()?;
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
        for id in plan.all_ids() {
            if !self.store.contains_live(&id, now)? {
                return Ok(false);
            }
        }
        Ok(true)
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

    /// A live node of `plan`, or a clear error when the build could not make it.
    pub fn node(&self, id: &NodeId, now: u64) -> Result<Node> {
        self.store.get_live(id, now)?.ok_or_else(|| {
            Error::invalid(format!(
                "node {id} is not available (its build failed; see `strata compress`)"
            ))
        })
    }

    /// The text of a source as ingested.
    pub fn source_text(&self, scope: &str, source: &str) -> Result<String> {
        self.store.get_text(scope, source)?.ok_or_else(|| {
            Error::DataCorruption(format!("source {source} of scope {scope} has no text"))
        })
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
        if budget == 0 {
            return Err(Error::invalid("the budget must be at least 1 token"));
        }
        let (plan, _) = self.ensure_built(scope, now, progress).await?;
        crate::context::window(self, &plan, choice, budget, now)
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
            let mut explorer = Explorer::new(self, plans, qcfg.clone(), now);
            explorer.embed_question(question).await;
            match self.root.as_ref().filter(|_| qcfg.strategy != "offline") {
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
        let hits = self.index.search(&crate::index::Grep {
            text: pattern,
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
        let mut live = [0usize; 5];
        let mut stale = 0;
        for id in plan.all_ids() {
            match self.store.get_live(&id, now)? {
                Some(n) => live[n.level.as_u8() as usize] += 1,
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
            next_expiry: self.store.next_deadline()?,
            disk_bytes: self.store.size_on_disk(),
            tokenizer: crate::token::TOKENIZER,
            model: self.model.identity(),
            embed_model: self.embedder.as_ref().map(|e| e.identity()),
            embeddings: self.store.n_embeddings(),
            fallbacks: self.store.fallback_counts()?,
        })
    }

    /// Removes expired nodes, and nodes no scope's current tree reaches (left behind by
    /// changed sources or another compressor), from the store and the index.
    pub fn gc(&self, now: u64) -> Result<GcReport> {
        let expired = self.store.sweep(now)?;
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
        for id in self.store.node_ids() {
            let id = id?;
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
        self.index.delete(&expired)?;
        self.index.delete(&unreachable)?;
        self.index.commit()?;
        self.store.flush()?;
        Ok(GcReport {
            expired: expired.len(),
            unreachable: unreachable.len(),
            remaining: self.store.n_nodes(),
            embeddings_removed,
        })
    }

    /// Rebuilds the index from the store: every live node of every scope's current tree.
    pub fn reindex(&self, now: u64) -> Result<usize> {
        self.index.delete_all()?;
        let mut n = 0;
        for rec in self.store.scopes()? {
            let plan = Plan::load(&self.store, &rec, &self.model.identity(), &self.cfg)?;
            let mut batch = Vec::new();
            for id in plan.all_ids() {
                if let Some(node) = self.store.get_live(&id, now)? {
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
        }
        self.index.commit()?;
        self.store.clear_unindexed()?;
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

fn validate_scope_name(scope: &str) -> Result<()> {
    if scope.trim().is_empty() || scope.contains('\0') || scope.len() > 200 {
        return Err(Error::invalid(
            "a scope name must be 1-200 characters, without NUL",
        ));
    }
    Ok(())
}
