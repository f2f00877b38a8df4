//! Maintenance: stats, garbage collection, rebuilding the index.

use super::Engine;
use crate::error::Result;
use crate::node::NodeId;
use crate::store::ScopeKind;
use serde::Serialize;
use std::collections::HashSet;

/// Store-wide numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    pub scopes: Vec<ScopeStats>,
    pub nodes: usize,
    pub indexed_docs: u64,
    /// Node changes stored but not yet committed to the index: 0 after any build, ingest,
    /// gc or query of a writer and after a writer's open, which apply them; a command that
    /// only reads ([`Engine::open_read_only`]) leaves them to the next writer.
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

/// [`Engine::bytes`]: where the bytes of a store and its index go.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Bytes {
    /// The store on disk (sled's files, or PostgreSQL's tables).
    pub disk: u64,
    /// Source texts as ingested, and how many; what they take as stored (compressed).
    pub sources: u64,
    pub source_text: u64,
    pub source_stored: u64,
    /// Nodes by level: count, bytes of their text, bytes of the whole record as stored
    /// (compressed where that pays).
    pub levels: crate::level::PerLevel<LevelBytes>,
    /// Node vectors stored (every embedder), and their bytes as f32 (at the dimension of
    /// the configured embedder's vectors; 0 without one).
    pub embeddings: u64,
    pub embedding_bytes: u64,
    /// What the store's files hold beyond the records above: keys, the expiry and pending
    /// sets, views, jobs, and the storage engine's own overhead.
    pub store_overhead: u64,
    pub index: crate::index::IndexSpace,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LevelBytes {
    pub nodes: u64,
    pub text: u64,
    pub encoded: u64,
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
    /// Sizes and freshness of one scope's current tree.
    pub fn scope_stats(&self, scope: &str, now: u64) -> Result<ScopeStats> {
        let planned = self.planned(scope)?;
        let plan = &planned.plan;
        // Every node's liveness from its deadline alone (no node is decoded), or none read
        // at all when the tree is known live ([`Engine::known_min`]).
        let all_live = self
            .known_min(&planned)?
            .is_some_and(|m| m.is_some_and(|at| at > now));
        let mut live = crate::level::PerLevel::<usize>::default();
        let mut stale = 0;
        for (level, id) in plan.all_ids_by_level() {
            if all_live || self.store.contains_live(&id, now)? {
                live[level] += 1;
            } else {
                stale += 1;
            }
        }
        Ok(ScopeStats {
            scope: plan.scope.clone(),
            kind: plan.kind,
            sources: plan.sources.len(),
            chunks: plan.chunks.len(),
            groups: plan.groups.len(),
            full_tokens: plan.full_tokens,
            live_by_level: live,
            stale,
        })
    }

    /// Where the store's and the index's bytes go (`strata stats --bytes`): reads every
    /// source text and every node once, so it takes as long as a full scan.
    pub fn bytes(&self) -> Result<Bytes> {
        let mut b = Bytes {
            disk: self.store.size_on_disk(),
            ..Bytes::default()
        };
        for rec in self.store.scopes()? {
            for s in &rec.sources {
                if let Some(t) = self.store.get_text(&rec.name, &s.id)? {
                    b.sources += 1;
                    b.source_text += t.len() as u64;
                    b.source_stored += crate::store::record_bytes(&t);
                }
            }
        }
        let ids = self.store.node_ids()?;
        for part in ids.chunks(512) {
            for n in self.store.get_nodes(part)?.into_iter().flatten() {
                let l = &mut b.levels[n.level];
                l.nodes += 1;
                l.text += n.text.len() as u64;
                l.encoded += self.store.stored_bytes(&n)?;
            }
        }
        b.embeddings = self.store.n_embeddings() as u64;
        if let Some(e) = &self.embedder
            && b.embeddings > 0
        {
            let key = crate::store::EmbedKey::of(&e.identity());
            for id in &ids {
                if let Some(v) = self.store.get_embedding(key, id)? {
                    b.embedding_bytes = b.embeddings * 4 * v.len() as u64;
                    break;
                }
            }
        }
        b.index = self.index.space()?;
        let logical = b.source_stored
            + b.levels.iter().map(|(_, l)| l.encoded).sum::<u64>()
            + b.embedding_bytes;
        b.store_overhead = b.disk.saturating_sub(logical);
        Ok(b)
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
        self.writing()?;
        let expired = self.store.sweep(now)?;
        // The ids before the trees: a node another process writes meanwhile (a shared
        // store) is in a tree read after it, never taken for unreachable.
        let stored = self.store.node_ids()?;
        let mut reachable: HashSet<NodeId> = HashSet::new();
        for rec in self.store.scopes()? {
            let plan = self.plan_of(&rec)?;
            reachable.extend(plan.all_ids());
            // The last complete view is still being served while a build runs.
            if let Some(view) = self.last_view(&rec.name)? {
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
        self.writing()?;
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

/// What a long-lived process (`serve`, `mcp`, [`crate::service::Service`]) asks of the
/// engine's store: the verbs, so that no caller outside the engine holds the store itself.
impl Engine {
    /// Durably writes everything written so far.
    pub fn flush(&self) -> Result<()> {
        self.store.flush()
    }

    /// Flushes, and leaves the store quick to open for the next process (a sled store:
    /// a snapshot of its log, which read-only opens do not write). For a process that will
    /// write no more: a command's end, a server's shutdown.
    pub fn checkpoint(&self) -> Result<()> {
        self.store.checkpoint()
    }

    /// Records that this process is alive, on a store other processes write.
    pub fn heartbeat(&self) -> Result<()> {
        self.store.heartbeat()
    }

    /// Wake-ups for the node changes other processes make (`None`: no other process
    /// writes this store).
    pub(crate) fn events(&self) -> Option<crate::store::Events> {
        self.store.events()
    }

    /// Brings this engine's index up to what other processes wrote: the change feed
    /// applied, or the index rebuilt when this replica fell off the feed. Returns how many
    /// node changes it applied (a rebuild: how many nodes it indexed).
    pub fn follow_changes(&self) -> Result<usize> {
        if self.store.index_must_rebuild()? {
            tracing::warn!("this replica fell off the change feed: rebuilding its index");
            self.reindex()
        } else {
            self.sync_index()
        }
    }

    /// The kind of scope `name` (`None`: no such scope).
    pub fn scope_kind(&self, name: &str) -> Result<Option<ScopeKind>> {
        Ok(self.store.get_scope(name)?.map(|r| r.kind))
    }

    /// Starts the sweeper of expired levels on this engine's store; `on_purge` is told
    /// of the nodes each sweep removed.
    pub(crate) fn spawn_sweeper(
        &self,
        clock: crate::expire::Clock,
        on_purge: impl Fn(Vec<NodeId>) + Send + 'static,
    ) -> crate::expire::SweeperGuard {
        crate::expire::spawn_sweeper(self.store.clone(), clock, on_purge)
    }
}
