//! The sled backend: the embedded default (`--db DIR`). Only this module knows sled.
//!
//! Trees:
//! - `sources`: [`source_key`] (length-prefixed scope ++ source) → [`SourceRecord`]
//! - `texts`:   [`source_key`] → the source text as ingested (ground truth for citations)
//! - `scopes`:  `scope` → [`ScopeHead`] (format 2; format 1, a [`ScopeRecord`] with its list
//!   inline, is read, and its list moves to `members` at the scope's next write)
//! - `members`: [`source_key`] → [`SourceEntry`]: the sources a scope lists, one entry each,
//!   so that a turn appended writes its own entry, not the list
//! - `nodes`:   node id → [`Node`], or (format 3, [`cited`]) the node with its text kept as
//!   the ranges of its sources' texts it quotes
//! - `deadlines`: node id → big-endian deadline (`u64::MAX` = never): liveness without
//!   decoding nodes; and `losses` (not 32 bytes, so no node id) → the big-endian count of
//!   [`NodeStore::losses`], moved in the transaction of each removal or earlier deadline
//! - `expiry`:  big-endian `expires_at` ++ node id → `()`; a sweep is a range scan.
//! - `unindexed`: node id → 8-byte generation: nodes written or removed whose change the
//!   index has not committed yet. Set in the same transaction as the change, cleared
//!   (compare-and-swap on the generation) only after tantivy's commit.
//! - `embeddings`: 8-byte hash of the embedder's identity ++ node id → unit vector
//!   (`Vec<f32>`). Nodes are content-addressed, so one vector serves every rebuild of
//!   its scope that reaches the node.
//! - `fallbacks`: node id → [`FallbackMark`]: the node was made by the offline fallback
//!   (or built over such a node). Written with the node, removed with it, cleared when the
//!   node is overwritten by a model-made version.
//! - `views`, `jobs`: opaque records (scope → view, big-endian job id → job).
//! - the default tree: `format` (below), and [`live_key`] (`live\0` ++ scope) → what the
//!   last build of the scope left for readers (`Store::put_liveness`). Not beside the
//!   views: a view of a large scope is a value of a megabyte, which sled keeps with its
//!   neighbours in one leaf written as one blob, so reading the small record beside it
//!   read (and writing it rewrote) the megabyte. Older stores kept it in `views` under
//!   scope `\u{1}live`: read there when the new key is missing, removed at the next write.
//!
//! Values are bincode (serde, standard config) behind a one-byte format version. The key
//! `format` of the default tree holds the layout version of the whole store ([`LAYOUT`]);
//! an older layout is migrated at open, in one transaction.
//!
//! Every write that must survive a crash together is one sled transaction: sled seals a
//! transaction as one batch in its log, so recovery applies all of it or none of it.

use super::job::{self, JobTable, LocalQueue};
use super::{
    Claimant, EmbedKey, FallbackCounts, ForgetStep, Job, JobKind, JobQueue, NodeStore, PendingMark,
    Replication, ScopeHead, ScopeRecord, SourceEntry, SourceRecord, SourceStep, SourceStore,
    StoredScope, VectorStore, decode, encode,
};
use crate::error::{Error, Result};
use crate::node::{FallbackMark, Node, NodeId};
use sled::Transactional;

use std::path::Path;

mod cited;
mod keys;
pub mod repair;
mod tx;

pub(crate) use keys::source_key;
use keys::{deadline_of, embed_key, expiry_key, node_id};
use tx::{NodeTx, TxResult, txn_err};

/// The layout of the store (key schemes, trees, record versions). 1: `scope \0 source`
/// keys (ambiguous); 2: length-prefixed keys, the pending-index set written with every
/// node change; 3: node and source records may be format 2 (source times), which a strata
/// of layout 2 cannot read — it refuses the store at open instead of failing on a record.
/// 2 → 3 changes nothing but the layout byte: version 1 records are read as they are.
/// 4: a scope's list of sources is kept one entry per source in `members` (a scope
/// record of format 1 holds it inline until its next write), which a strata of layout 3
/// cannot read; 3 → 4 changes nothing but the layout byte. 5: node records may be format 3
/// (a node's text kept as the ranges of its sources it quotes, [`cited`]), which a strata of
/// layout 4 cannot read; 4 → 5 changes nothing but the layout byte.
pub const LAYOUT: u8 = 5;

/// sled's errors as ours: a full disk is its own error whichever write met it, damage
/// points to `strata repair`, the rest is one line. (A function, not `From`: `Error` is
/// strata-core's and `sled::Error` sled's, so neither crate here may implement it.)
pub(crate) fn sled_error(e: sled::Error) -> Error {
    match &e {
        sled::Error::Io(io) if crate::disk::is_full(io) => Error::DiskFull(
            "the file system holding the store ran out of space during a write; \
             nothing acknowledged before it was lost: free some space and retry"
                .into(),
        ),
        sled::Error::Corruption { at, .. } => Error::DataCorruption(format!(
            "sled cannot read part of the store{}; `strata repair` recovers what is readable",
            at.as_ref()
                .map(|p| format!(" (at {p})"))
                .unwrap_or_default()
        )),
        sled::Error::Io(io) => Error::Store(io.to_string()),
        // A read-only open (crates/sled, PATCH.md) met a write: sled's own upkeep of its
        // tree (a node split or merged, a page consolidated) that a read can start after a
        // writer left it half done. The caller opens the store writable and asks again.
        sled::Error::Unsupported(m) if m.contains("opened read-only") => Error::ReadOnly,
        e => Error::Store(e.to_string()),
    }
}

/// `?` on a sled result: its error as ours ([`sled_error`]).
pub(crate) trait SledResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> SledResult<T> for sled::Result<T> {
    fn db(self) -> Result<T> {
        self.map_err(sled_error)
    }
}

pub struct SledBackend {
    db: sled::Db,
    nodes: sled::Tree,
    expiry: sled::Tree,
    deadlines: sled::Tree,
    sources: sled::Tree,
    texts: sled::Tree,
    scopes: sled::Tree,
    members: sled::Tree,
    views: sled::Tree,
    jobs: sled::Tree,
    unindexed: sled::Tree,
    embeddings: sled::Tree,
    fallbacks: sled::Tree,
    queue: LocalQueue,
    /// Sources' texts as nodes of format 3 cite them.
    cited: cited::Texts,
}

/// The key, in the default tree, of what the last build of `scope` left for readers.
fn live_key(scope: &str) -> Vec<u8> {
    let mut k = b"live\0".to_vec();
    k.extend_from_slice(scope.as_bytes());
    k
}

/// The trees a store of [`LAYOUT`] holds: every one [`SledBackend::from_db`] opens (a
/// read-only open must find them all, since opening a missing one would create it).
const TREES: [&str; 12] = [
    "nodes",
    "expiry",
    "deadlines",
    "sources",
    "texts",
    "scopes",
    "members",
    "views",
    "jobs",
    "unindexed",
    "embeddings",
    "fallbacks",
];

impl SledBackend {
    /// The embedders that have vectors here (keys are embedder prefix ++ node id: one
    /// seek per distinct prefix).
    fn embed_prefixes(&self) -> Result<Vec<EmbedKey>> {
        let mut out = Vec::new();
        let mut from = [0u8; 8];
        while let Some((k, _)) = self.embeddings.range(&from[..]..).next().transpose().db()? {
            let prefix: [u8; 8] = k
                .get(..8)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| Error::DataCorruption("embedding key is not 40 bytes".into()))?;
            out.push(EmbedKey(prefix));
            match u64::from_be_bytes(prefix).checked_add(1) {
                Some(next) => from = next.to_be_bytes(),
                None => break,
            }
        }
        Ok(out)
    }

    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<SledBackend> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            err: source,
        })?;
        Self::open_with(dir, Some(500))
    }

    /// Opens the existing store in `dir` for a command that only reads, without writing a
    /// byte: sled's read-only open (`crates/sled`, PATCH.md) recovers in memory and leaves
    /// the log, the snapshot and the blobs as they are (the next writable open zero-fills
    /// and snapshots as before), with no background flusher and no closing flush; a write
    /// through it fails. `None` when the store cannot be read that way: an older layout
    /// (migrated by the next writable open), a missing table, or files that need repair
    /// (see `repair`) — the caller opens it writable instead.
    pub fn open_read_only(dir: &Path) -> Result<Option<SledBackend>> {
        let path = dir.join("store");
        if !path.join("db").is_file() || !path.join("conf").is_file() {
            return Ok(None);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let db = loop {
            match sled::Config::new()
                .path(&path)
                .cache_capacity(256 * 1024 * 1024)
                .flush_every_ms(None)
                .read_only(true)
                .open()
            {
                Ok(db) => break db,
                Err(sled::Error::Io(io))
                    if io.to_string().starts_with("could not acquire lock") =>
                {
                    if std::time::Instant::now() >= deadline {
                        return Err(Error::InUse(dir.to_path_buf()));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => {
                    tracing::debug!("read-only open failed ({e}): opening writable");
                    return Ok(None);
                }
            }
        };
        let names: std::collections::HashSet<sled::IVec> = db.tree_names().into_iter().collect();
        let complete = TREES.iter().all(|t| names.contains(t.as_bytes()));
        match db.get("format").db()? {
            Some(v) if complete && v.len() == 1 && v[0] == LAYOUT => Self::from_db(db).map(Some),
            _ => Ok(None),
        }
    }

    fn open_with(dir: &Path, flush_every_ms: Option<u64>) -> Result<SledBackend> {
        // Files a full disk or a crash left unreadable are set aside and the open
        // retried; see `repair`. A lock held a moment longer by a handle of this process
        // that is closing (sled's flusher thread ends after the last `Db` is dropped) is
        // waited for, briefly; a lock another process holds is reported in one line.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let (db, repaired) = loop {
            match repair::open_db(&dir.join("store"), || {
                sled::Config::new()
                    .cache_capacity(256 * 1024 * 1024)
                    .flush_every_ms(flush_every_ms)
            }) {
                Ok(v) => break v,
                // sled reports a store locked by another process as a generic I/O error
                // whose message carries fs2's raw error; say it once, plainly.
                Err(sled::Error::Io(io))
                    if io.to_string().starts_with("could not acquire lock") =>
                {
                    if std::time::Instant::now() >= deadline {
                        return Err(Error::InUse(dir.to_path_buf()));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => return Err(sled_error(e)),
            }
        };
        for action in repaired {
            tracing::warn!("{action}");
        }
        Self::from_db(db)
    }

    /// A store that lives in memory only (tests, benchmarks).
    pub fn temporary() -> Result<SledBackend> {
        Self::from_db(sled::Config::new().temporary(true).open().db()?)
    }

    pub(crate) fn from_db(db: sled::Db) -> Result<SledBackend> {
        let layout = match db.get("format").db()? {
            None => {
                db.insert("format", &[LAYOUT]).db()?;
                LAYOUT
            }
            Some(v) if v.len() == 1 && v[0] <= LAYOUT => v[0],
            Some(v) => {
                return Err(Error::DataCorruption(format!(
                    "store layout {:?} is newer than this strata reads ({LAYOUT}): upgrade strata",
                    v.as_ref()
                )));
            }
        };
        let s = SledBackend {
            nodes: db.open_tree("nodes").db()?,
            expiry: db.open_tree("expiry").db()?,
            deadlines: db.open_tree("deadlines").db()?,
            sources: db.open_tree("sources").db()?,
            texts: db.open_tree("texts").db()?,
            scopes: db.open_tree("scopes").db()?,
            members: db.open_tree("members").db()?,
            views: db.open_tree("views").db()?,
            jobs: db.open_tree("jobs").db()?,
            unindexed: db.open_tree("unindexed").db()?,
            embeddings: db.open_tree("embeddings").db()?,
            fallbacks: db.open_tree("fallbacks").db()?,
            queue: LocalQueue::default(),
            cited: cited::Texts::new(),
            db,
        };
        if layout < 2 {
            s.migrate_from_1()?;
        } else if layout < LAYOUT {
            s.db.insert("format", &[LAYOUT]).db()?;
            s.db.flush().db()?;
        }
        Ok(s)
    }

    /// Layout 1 → 2 (and so to [`LAYOUT`]): source keys `scope \0 source` become length-prefixed. Scope names
    /// never held NUL, so the first NUL splits an old key exactly. One transaction: a crash
    /// leaves layout 1 whole, and the next open migrates again.
    fn migrate_from_1(&self) -> Result<()> {
        let mut moves: Vec<(sled::IVec, Vec<u8>)> = Vec::new();
        for k in self.sources.iter().keys() {
            let k = k.db()?;
            let Some(at) = k.iter().position(|&b| b == 0) else {
                return Err(Error::DataCorruption(
                    "a layout-1 source key has no separator".into(),
                ));
            };
            let scope = std::str::from_utf8(&k[..at])
                .map_err(|_| Error::DataCorruption("a source key is not UTF-8".into()))?;
            let source = std::str::from_utf8(&k[at + 1..])
                .map_err(|_| Error::DataCorruption("a source key is not UTF-8".into()))?;
            moves.push((k.clone(), source_key(scope, source)));
        }
        tracing::info!(
            sources = moves.len(),
            "migrating the store to layout {LAYOUT}"
        );
        let meta: &sled::Tree = &self.db;
        (meta, &self.sources, &self.texts)
            .transaction(|(m, so, te)| {
                for (old, new) in &moves {
                    if let Some(v) = so.remove(old)? {
                        so.insert(new.as_slice(), v)?;
                    }
                    if let Some(v) = te.remove(old)? {
                        te.insert(new.as_slice(), v)?;
                    }
                }
                m.insert("format", &[LAYOUT][..])?;
                Ok(())
            })
            .map_err(txn_err("migration"))?;
        self.db.flush().db()?;
        Ok(())
    }

    /// The text of `source` in `scope` as nodes cite it (`fresh`: read from the tree, not
    /// from memory).
    fn cited_text(
        &self,
        scope: &str,
        source: &str,
        fresh: bool,
    ) -> Result<Option<std::sync::Arc<str>>> {
        self.cited
            .get(&self.texts, &source_key(scope, source), fresh)
    }

    /// A node as the `nodes` tree keeps it: its text as what it quotes of the texts it
    /// cites when that pays ([`cited`]).
    fn encode_node(&self, node: &Node) -> Result<Vec<u8>> {
        if node.level == crate::level::Level::Metadata {
            return cited::encode_node(node, &[]);
        }
        let texts = cited::bases_of(node, |c| {
            self.cited
                .citable(&self.texts, &source_key(&node.scope, &c.source))
        })?;
        cited::encode_node(node, &cited::spans_of(node, &texts))
    }

    fn decode_node(&self, id: &NodeId, value: &[u8]) -> Result<Option<Node>> {
        cited::decode_node(*id, &format!("node {id}"), value, |scope, c, fresh| {
            self.cited_text(scope, &c.source, fresh)
        })
    }

    /// Runs `f` over the node trees in one transaction.
    fn node_tx<T>(&self, what: &str, f: impl Fn(&NodeTx<'_>) -> TxResult<T>) -> Result<T> {
        (
            &self.nodes,
            &self.expiry,
            &self.deadlines,
            &self.unindexed,
            &self.fallbacks,
        )
            .transaction(|(n, e, d, u, fb)| {
                f(&NodeTx {
                    nodes: n,
                    expiry: e,
                    deadlines: d,
                    unindexed: u,
                    fallbacks: fb,
                })
            })
            .map_err(txn_err(what))
    }
}

impl NodeStore for SledBackend {
    fn put_nodes(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()> {
        let values = nodes
            .iter()
            .map(|n| self.encode_node(n))
            .collect::<Result<Vec<_>>>()?;
        let mark = mark.map(|m| encode(&m)).transpose()?;
        self.node_tx("node write", |tx| {
            for (node, v) in nodes.iter().zip(&values) {
                tx.put(node, v, mark.as_deref())?;
            }
            Ok(())
        })
    }

    fn get_node(&self, id: &NodeId) -> Result<Option<Node>> {
        match self.nodes.get(id.0).db()? {
            Some(v) => self.decode_node(id, &v),
            None => Ok(None),
        }
    }

    fn deadline(&self, id: &NodeId) -> Result<Option<u64>> {
        match self.deadlines.get(id.0).db()? {
            Some(v) => Ok(Some(deadline_of(&v, id)?)),
            None => Ok(None),
        }
    }

    fn remove_node(&self, id: &NodeId) -> Result<bool> {
        self.node_tx("node removal", |tx| tx.remove(id))
    }

    fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let mut removed = Vec::new();
        let end = expiry_key(now, &NodeId([0xff; 32]));
        for item in self.expiry.range(..=&end[..]) {
            let (k, _) = item.db()?;
            let id = node_id(&k[8..40], "expiry")?;
            let gone = self.node_tx("sweep", |tx| {
                tx.expiry.remove(&k)?;
                // The node may have been rewritten with a later deadline since this entry
                // was made; only an expired node goes.
                if tx.old_deadline(&id)?.is_some_and(|at| at <= now) {
                    tx.remove(&id)
                } else {
                    Ok(false)
                }
            })?;
            if gone {
                removed.push(id);
            }
        }
        Ok(removed)
    }

    fn losses(&self) -> Result<Option<u64>> {
        Ok(Some(match self.deadlines.get(tx::LOSSES).db()? {
            Some(v) => keys::losses_of(&v)?,
            None => 0,
        }))
    }

    fn next_deadline(&self) -> Result<Option<u64>> {
        Ok(self.expiry.first().db()?.map(|(k, _)| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&k[..8]);
            u64::from_be_bytes(b)
        }))
    }

    fn node_ids(&self) -> Result<Vec<NodeId>> {
        self.nodes
            .iter()
            .keys()
            .map(|k| node_id(&k.db()?, "node"))
            .collect()
    }

    fn n_nodes(&self) -> usize {
        self.nodes.len()
    }

    fn stored_bytes(&self, id: &NodeId) -> Result<Option<u64>> {
        Ok(self.nodes.get(id.0).db()?.map(|v| v.len() as u64))
    }

    fn fallback_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>> {
        match self.fallbacks.get(id.0).db()? {
            Some(v) => Ok(Some(decode(&format!("fallback mark of {id}"), &v)?)),
            None => Ok(None),
        }
    }

    fn n_fallback_marks(&self) -> usize {
        self.fallbacks.len()
    }

    fn fallback_counts(&self) -> Result<FallbackCounts> {
        let mut c = FallbackCounts::default();
        for v in self.fallbacks.iter().values() {
            c.nodes += 1;
            if decode::<FallbackMark>("fallback mark", &v.db()?)?.is_retried() {
                c.awaiting_model += 1;
            }
        }
        Ok(c)
    }

    fn pending_index(&self) -> Result<Vec<PendingMark>> {
        self.unindexed
            .iter()
            .map(|kv| {
                let (k, v) = kv.db()?;
                // Layout-1 marks had no generation: 0.
                let generation = <[u8; 8]>::try_from(v.as_ref()).map_or(0, u64::from_be_bytes);
                Ok(PendingMark {
                    id: node_id(&k, "unindexed")?,
                    generation,
                })
            })
            .collect()
    }

    fn n_pending_index(&self) -> usize {
        self.unindexed.len()
    }

    fn clear_pending_index(&self, done: &[PendingMark]) -> Result<()> {
        for m in done {
            let current = self.unindexed.get(m.id.0).db()?;
            let same = current.as_ref().is_some_and(|v| {
                <[u8; 8]>::try_from(v.as_ref()).map_or(0, u64::from_be_bytes) == m.generation
            });
            if same {
                // Err(CompareAndSwapError) = the mark changed since: keep it.
                let _ = self
                    .unindexed
                    .compare_and_swap(m.id.0, current, None as Option<&[u8]>)
                    .db()?;
            }
        }
        Ok(())
    }
}

impl SledBackend {
    fn stored_scope(&self, name: &str) -> Result<Option<StoredScope>> {
        match self.scopes.get(name.as_bytes()).db()? {
            Some(v) => Ok(Some(StoredScope::decode(&format!("scope {name}"), &v)?)),
            None => Ok(None),
        }
    }

    /// A stored scope with its list: the inline one, or its entries in `members`.
    fn with_entries(&self, stored: StoredScope) -> Result<ScopeRecord> {
        match stored {
            StoredScope::Inline(r) => Ok(r),
            StoredScope::Head(h) => {
                let entries = self
                    .members
                    .scan_prefix(source_key(&h.name, ""))
                    .values()
                    .map(|v| decode(&format!("an entry of scope {}", h.name), &v.db()?))
                    .collect::<Result<Vec<SourceEntry>>>()?;
                Ok(ScopeRecord::of(h, entries))
            }
        }
    }

    /// Inside a step's transaction: a scope stored in format 1 (its list inline) moves the
    /// entries the step does not remove to `members`. A value that does not decode aborts
    /// the transaction, its error kept in `bad`.
    fn move_inline_list(
        sc: &sled::transaction::TransactionalTree,
        me: &sled::transaction::TransactionalTree,
        name: &str,
        removed: &[String],
        bad: &std::cell::RefCell<Option<Error>>,
    ) -> TxResult<()> {
        let abort = |e: Error| {
            *bad.borrow_mut() = Some(e);
            sled::transaction::ConflictableTransactionError::Abort(())
        };
        let Some(v) = sc.get(name.as_bytes())? else {
            return Ok(());
        };
        let stored = StoredScope::decode(&format!("scope {name}"), &v).map_err(abort)?;
        for entry in stored.entries_to_move(removed) {
            me.insert(source_key(name, &entry.id), encode(&entry).map_err(abort)?)?;
        }
        Ok(())
    }
}

impl SourceStore for SledBackend {
    fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>> {
        self.stored_scope(name)?
            .map(|s| self.with_entries(s))
            .transpose()
    }

    fn get_scope_head(&self, name: &str) -> Result<Option<ScopeHead>> {
        Ok(self.stored_scope(name)?.map(|s| s.head()))
    }

    fn get_entry(&self, scope: &str, source: &str) -> Result<Option<SourceEntry>> {
        match self.stored_scope(scope)? {
            None => Ok(None),
            Some(StoredScope::Inline(r)) => Ok(r.entry(source).cloned()),
            Some(StoredScope::Head(_)) => match self.members.get(source_key(scope, source)).db()? {
                Some(v) => Ok(Some(decode(&format!("entry {source}"), &v)?)),
                None => Ok(None),
            },
        }
    }

    fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        self.scopes
            .iter()
            .values()
            .map(|v| self.with_entries(StoredScope::decode("scope", &v.db()?)?))
            .collect()
    }

    fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>> {
        match self.sources.get(source_key(scope, source)).db()? {
            Some(v) => Ok(Some(decode(&format!("source {source}"), &v)?)),
            None => Ok(None),
        }
    }

    fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>> {
        match self.texts.get(source_key(scope, source)).db()? {
            Some(v) => Ok(Some(decode(&format!("text of {source}"), &v)?)),
            None => Ok(None),
        }
    }

    fn write_sources(&self, step: &SourceStep) -> Result<()> {
        let name = step.scope.name.as_str();
        let scope = encode(&step.scope)?;
        let list = step
            .list
            .iter()
            .map(|e| Ok((source_key(name, &e.id), encode(e)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut puts = Vec::with_capacity(step.put.len());
        for p in &step.put {
            let nodes = p
                .nodes
                .iter()
                .map(|n| {
                    let bases = cited::bases_in(n, &p.record.id, &p.text);
                    Ok((n, cited::encode_node(n, &bases)?))
                })
                .collect::<Result<Vec<_>>>()?;
            puts.push((
                source_key(&step.scope.name, &p.record.id),
                encode(&p.record)?,
                encode(&p.text)?,
                nodes,
            ));
        }
        let removed: Vec<Vec<u8>> = step
            .remove_sources
            .iter()
            .map(|id| source_key(&step.scope.name, id))
            .collect();
        let bad = std::cell::RefCell::new(None);
        let r = (
            &self.scopes,
            &self.members,
            &self.sources,
            &self.texts,
            &self.nodes,
            &self.expiry,
            &self.deadlines,
            &self.unindexed,
            &self.fallbacks,
        )
            .transaction(|(sc, me, so, te, n, e, d, u, fb)| {
                let tx = NodeTx {
                    nodes: n,
                    expiry: e,
                    deadlines: d,
                    unindexed: u,
                    fallbacks: fb,
                };
                // A scope of format 1 moves its list out first (once).
                Self::move_inline_list(sc, me, name, &step.remove_sources, &bad)?;
                for (key, value) in &list {
                    me.insert(key.as_slice(), value.as_slice())?;
                }
                for (key, record, text, nodes) in &puts {
                    for (node, v) in nodes {
                        tx.put(node, v, None)?;
                    }
                    so.insert(key.as_slice(), record.as_slice())?;
                    te.insert(key.as_slice(), text.as_slice())?;
                }
                for id in &step.remove_nodes {
                    tx.remove(id)?;
                }
                for key in &removed {
                    so.remove(key.as_slice())?;
                    te.remove(key.as_slice())?;
                    me.remove(key.as_slice())?;
                }
                sc.insert(name.as_bytes(), scope.as_slice())?;
                Ok(())
            })
            .map_err(|e| bad.take().unwrap_or_else(|| txn_err("source write")(e)));
        // Texts kept in memory that changed (nodes check what they read anyway).
        for key in puts.iter().map(|p| &p.0).chain(&removed) {
            self.cited.forget(key);
        }
        r
    }

    fn forget(&self, step: &ForgetStep) -> Result<()> {
        let name = step.scope.as_str();
        let record = step.record.as_ref().map(encode).transpose()?;
        let mut removed: Vec<Vec<u8>> = step
            .remove_sources
            .iter()
            .map(|id| source_key(name, id))
            .collect();
        if step.record.is_none() {
            // The scope goes: every entry it lists, whatever the step names.
            for k in self.members.scan_prefix(source_key(name, "")).keys() {
                removed.push(k.db()?.to_vec());
            }
        }
        // Vectors are keyed by embedder ++ node id: every embedder's key of every node.
        let prefixes = self.embed_prefixes()?;
        let vectors: Vec<Vec<u8>> = step
            .remove_nodes
            .iter()
            .flat_map(|id| prefixes.iter().map(move |p| embed_key(*p, id).to_vec()))
            .collect();
        let bad = std::cell::RefCell::new(None);
        let r = (
            &self.scopes,
            &self.members,
            &self.sources,
            &self.texts,
            &self.nodes,
            &self.expiry,
            &self.deadlines,
            &self.unindexed,
            &self.fallbacks,
            &self.views,
            &self.embeddings,
            &*self.db,
        )
            .transaction(|(sc, me, so, te, n, e, d, u, fb, vi, em, root)| {
                let tx = NodeTx {
                    nodes: n,
                    expiry: e,
                    deadlines: d,
                    unindexed: u,
                    fallbacks: fb,
                };
                for id in &step.remove_nodes {
                    tx.remove(id)?;
                }
                for k in &vectors {
                    em.remove(k.as_slice())?;
                }
                if record.is_some() {
                    Self::move_inline_list(sc, me, name, &step.remove_sources, &bad)?;
                }
                for key in &removed {
                    so.remove(key.as_slice())?;
                    te.remove(key.as_slice())?;
                    me.remove(key.as_slice())?;
                }
                match &record {
                    Some(r) => sc.insert(name.as_bytes(), r.as_slice())?,
                    None => sc.remove(name.as_bytes())?,
                };
                vi.remove(name.as_bytes())?;
                vi.remove(super::liveness_key(name).as_bytes())?;
                root.remove(live_key(name))?;
                Ok(())
            })
            .map_err(|e| bad.take().unwrap_or_else(|| txn_err("forget")(e)));
        for key in &removed {
            self.cited.forget(key);
        }
        r
    }

    fn put_view(&self, scope: &str, bytes: Vec<u8>) -> Result<()> {
        self.views.insert(scope.as_bytes(), bytes).db()?;
        Ok(())
    }

    fn get_view(&self, scope: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.views.get(scope.as_bytes()).db()?.map(|v| v.to_vec()))
    }

    fn put_liveness(&self, scope: &str, bytes: Vec<u8>) -> Result<()> {
        self.db.insert(live_key(scope), bytes).db()?;
        let old = super::liveness_key(scope);
        if self.views.contains_key(old.as_bytes()).db()? {
            self.views.remove(old.as_bytes()).db()?;
        }
        Ok(())
    }

    fn get_liveness(&self, scope: &str) -> Result<Option<Vec<u8>>> {
        match self.db.get(live_key(scope)).db()? {
            Some(v) => Ok(Some(v.to_vec())),
            None => self.get_view(&super::liveness_key(scope)),
        }
    }
}

impl VectorStore for SledBackend {
    fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for (id, v) in vectors {
            batch.insert(&embed_key(model, id)[..], encode(v)?);
        }
        self.embeddings.apply_batch(batch).db()?;
        Ok(())
    }

    fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>> {
        match self.embeddings.get(embed_key(model, id)).db()? {
            Some(v) => Ok(Some(decode(&format!("embedding of {id}"), &v)?)),
            None => Ok(None),
        }
    }

    fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool> {
        self.embeddings.contains_key(embed_key(model, id)).db()
    }

    fn n_embeddings(&self) -> usize {
        self.embeddings.len()
    }

    fn remove_orphan_embeddings(&self) -> Result<usize> {
        let mut orphans = Vec::new();
        for k in self.embeddings.iter().keys() {
            let k = k.db()?;
            if k.len() != 40 {
                return Err(Error::DataCorruption(
                    "embedding key is not 40 bytes".into(),
                ));
            }
            if !self.nodes.contains_key(&k[8..]).db()? {
                orphans.push(k);
            }
        }
        let mut batch = sled::Batch::default();
        for k in &orphans {
            batch.remove(k.clone());
        }
        self.embeddings.apply_batch(batch).db()?;
        Ok(orphans.len())
    }

    fn remove_node_embeddings(&self, id: &NodeId) -> Result<()> {
        for p in self.embed_prefixes()? {
            self.embeddings.remove(embed_key(p, id)).db()?;
        }
        Ok(())
    }
}

impl JobQueue for SledBackend {
    fn enqueue_job(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        self.queue.enqueue(self, scope, kind, now)
    }

    fn claim_job(&self, _who: &Claimant, now: u64) -> Result<Option<Job>> {
        self.queue.claim(self, now)
    }

    fn renew_job(&self, _id: u64, _who: &Claimant) -> Result<bool> {
        // One process holds the store: nobody can take a claim back.
        Ok(true)
    }

    fn finish_job(&self, job: &Job, _who: &Claimant, keep: usize) -> Result<bool> {
        self.queue.finish(self, job, keep)
    }

    fn requeue_abandoned(&self, _who: &Claimant) -> Result<usize> {
        self.queue.requeue_running(self)
    }

    fn get_job(&self, id: u64) -> Result<Option<Job>> {
        job::get(self, id)
    }

    fn jobs(&self) -> Result<Vec<Job>> {
        job::all(self)
    }
}

impl Replication for SledBackend {
    fn flush(&self) -> Result<()> {
        self.db.flush().db()?;
        Ok(())
    }

    fn checkpoint(&self) -> Result<()> {
        self.db.checkpoint().db()
    }

    fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

impl JobTable for SledBackend {
    fn next_job_id(&self) -> Result<u64> {
        // sled persists its id generator ahead of use, so an id survives crashes unique.
        Ok(self.db.generate_id().db()? + 1)
    }

    fn put_job_bytes(&self, id: u64, bytes: Vec<u8>) -> Result<()> {
        self.jobs.insert(id.to_be_bytes(), bytes).db()?;
        Ok(())
    }

    fn get_job_bytes(&self, id: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.jobs.get(id.to_be_bytes()).db()?.map(|v| v.to_vec()))
    }

    fn remove_job_bytes(&self, id: u64) -> Result<()> {
        self.jobs.remove(id.to_be_bytes()).db()?;
        Ok(())
    }

    fn job_bytes(&self) -> Result<Vec<Vec<u8>>> {
        self.jobs
            .iter()
            .values()
            .map(|v| Ok(v.db()?.to_vec()))
            .collect()
    }

    fn flush_jobs(&self) -> Result<()> {
        self.db.flush().db()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
