//! The embedded store (sled): sources, their texts, scopes, nodes, and the expiry index.
//!
//! Trees:
//! - `sources`: [`source_key`] (length-prefixed scope ++ source) → [`SourceRecord`]
//! - `texts`:   [`source_key`] → the source text as ingested (ground truth for citations)
//! - `scopes`:  `scope` → [`ScopeRecord`]
//! - `nodes`:   node id → [`Node`]
//! - `expiry`:  big-endian `expires_at` ++ node id → `()`; a sweep is a range scan.
//! - `embeddings`: 8-byte hash of the embedder's identity ++ node id → unit vector
//!   (`Vec<f32>`). Nodes are content-addressed, so one vector serves every scope and
//!   every rebuild that reaches the node.
//!
//! - `unindexed`: node id → 8-byte generation: nodes written or removed in the store whose
//!   change the index has not committed yet. Set in the same transaction as the change,
//!   cleared (compare-and-swap on the generation) only after tantivy's commit.
//!
//! Values are bincode (serde, standard config) behind a one-byte format version. The key
//! `format` of the default tree holds the layout version of the whole store ([`LAYOUT`]);
//! an older layout is migrated at open, in one transaction.
//!
//! Every write that must survive a crash together is one sled transaction: sled seals a
//! transaction as one batch in its log, so recovery applies all of it or none of it.

use crate::error::{Error, Result};
use crate::node::{Node, NodeId};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

/// The format version byte in front of every value.
const FORMAT: u8 = 1;

/// The layout of the store (key schemes, trees). 1: `scope \0 source` keys (ambiguous);
/// 2: length-prefixed keys, the pending-index set written with every node change.
pub const LAYOUT: u8 = 2;

/// What a scope holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    /// A document collection.
    Doc,
    /// A debate: turns with rounds and speakers.
    Debate,
}

impl std::str::FromStr for ScopeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "doc" | "docs" | "document" => Ok(ScopeKind::Doc),
            "debate" => Ok(ScopeKind::Debate),
            _ => Err(Error::invalid(format!(
                "unknown kind `{s}`: expected doc or debate"
            ))),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScopeRecord {
    pub name: String,
    pub kind: ScopeKind,
    /// Sources in scope order (documents: ingestion order; debates: by round, then arrival).
    pub sources: Vec<SourceEntry>,
    pub next_seq: u64,
    pub created_at: u64,
    pub updated_at: u64,
}

/// A source's place in its scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceEntry {
    pub id: String,
    pub round: Option<u32>,
    pub seq: u64,
}

/// One FULL chunk of a source, as recorded at ingest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    pub id: NodeId,
    pub start: u64,
    pub end: u64,
    pub tokens: u32,
    pub section: u32,
    pub headings: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    pub id: String,
    pub scope: String,
    /// Arrival order within the scope.
    pub seq: u64,
    pub round: Option<u32>,
    pub speaker: Option<String>,
    /// blake3 of the text: re-ingesting an unchanged source is a no-op.
    pub hash: [u8; 32],
    pub bytes: u64,
    /// The chunk budget the source was cut with; another budget re-chunks it.
    pub chunk_tokens: u32,
    pub chunks: Vec<ChunkRef>,
}

/// The store. Cheap to clone: sled trees are reference-counted handles.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    nodes: sled::Tree,
    expiry: sled::Tree,
    /// node id → big-endian deadline (`u64::MAX` = never): liveness without decoding nodes.
    deadlines: sled::Tree,
    sources: sled::Tree,
    texts: sled::Tree,
    scopes: sled::Tree,
    views: sled::Tree,
    jobs: sled::Tree,
    /// Ids of nodes written to the index but not yet committed there.
    unindexed: sled::Tree,
    /// Node vectors per embedder (see [`EmbedKey`]).
    embeddings: sled::Tree,
    /// Wakes the sweeper when a deadline earlier than the one it sleeps on arrives.
    pub(crate) expiry_changed: Arc<Notify>,
    earliest: Arc<AtomicU64>,
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    let mut out = vec![FORMAT];
    let body = bincode::serde::encode_to_vec(v, bincode::config::standard())
        .map_err(|e| Error::DataCorruption(format!("cannot encode value: {e}")))?;
    out.extend_from_slice(&body);
    Ok(out)
}

pub(crate) fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T> {
    match bytes.split_first() {
        Some((&FORMAT, body)) => {
            let (v, _) = bincode::serde::decode_from_slice(body, bincode::config::standard())
                .map_err(|e| Error::DataCorruption(format!("{what}: {e}")))?;
            Ok(v)
        }
        Some((v, _)) => Err(Error::DataCorruption(format!(
            "{what}: format version {v}, this strata reads version {FORMAT}"
        ))),
        None => Err(Error::DataCorruption(format!("{what}: empty value"))),
    }
}

/// The short hash of an embedder's identity that prefixes its vectors' keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EmbedKey(pub [u8; 8]);

impl EmbedKey {
    pub fn of(identity: &str) -> EmbedKey {
        let h = blake3::hash(identity.as_bytes());
        let mut k = [0u8; 8];
        k.copy_from_slice(&h.as_bytes()[..8]);
        EmbedKey(k)
    }

    fn key(&self, id: &NodeId) -> [u8; 40] {
        let mut k = [0u8; 40];
        k[..8].copy_from_slice(&self.0);
        k[8..].copy_from_slice(&id.0);
        k
    }
}

/// The key of a source: the scope's length (4 bytes, big-endian), the scope, the source id.
/// The length prefix makes the key unambiguous whatever bytes the two names hold (with a
/// separator, `kb\0x` + `a.md` and `kb` + `x\0a.md` were one key), and a scope's sources
/// are still one prefix range.
pub(crate) fn source_key(scope: &str, source: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + scope.len() + source.len());
    k.extend_from_slice(&(scope.len() as u32).to_be_bytes());
    k.extend_from_slice(scope.as_bytes());
    k.extend_from_slice(source.as_bytes());
    k
}

/// A sled transaction's error as ours (no transaction of ours aborts on purpose).
fn txn_err(what: &str) -> impl FnOnce(TransactionError<()>) -> Error + '_ {
    move |e| match e {
        TransactionError::Storage(e) => Error::from(e),
        TransactionError::Abort(()) => Error::DataCorruption(format!("{what} aborted")),
    }
}

/// A generation for the pending-index mark (see `unindexed`).
fn gen_bytes(g: u64) -> [u8; 8] {
    g.to_be_bytes()
}

/// The bytes of a deadline in the `deadlines` tree (`u64::MAX`: never).
fn deadline_of(v: &[u8], id: &NodeId) -> Result<u64> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| Error::DataCorruption(format!("deadline of {id} is not 8 bytes")))?;
    Ok(u64::from_be_bytes(b))
}

fn expiry_key(at: u64, id: &NodeId) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..8].copy_from_slice(&at.to_be_bytes());
    k[8..].copy_from_slice(&id.0);
    k
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            err: source,
        })?;
        let db = sled::Config::new()
            .path(dir.join("store"))
            .cache_capacity(256 * 1024 * 1024)
            .open()
            .map_err(|e| match e {
                // sled reports a store locked by another process as a generic I/O error
                // whose message carries fs2's raw error; say it once, plainly.
                sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock") => {
                    Error::InUse(dir.to_path_buf())
                }
                e => Error::from(e),
            })?;
        Self::from_db(db)
    }

    /// A store that lives in memory only (tests, benchmarks).
    pub fn temporary() -> Result<Store> {
        Self::from_db(sled::Config::new().temporary(true).open()?)
    }

    fn from_db(db: sled::Db) -> Result<Store> {
        let layout = match db.get("format")? {
            None => {
                db.insert("format", &[LAYOUT])?;
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
        let s = Store {
            nodes: db.open_tree("nodes")?,
            expiry: db.open_tree("expiry")?,
            deadlines: db.open_tree("deadlines")?,
            sources: db.open_tree("sources")?,
            texts: db.open_tree("texts")?,
            scopes: db.open_tree("scopes")?,
            views: db.open_tree("views")?,
            jobs: db.open_tree("jobs")?,
            unindexed: db.open_tree("unindexed")?,
            embeddings: db.open_tree("embeddings")?,
            db,
            expiry_changed: Arc::new(Notify::new()),
            earliest: Arc::new(AtomicU64::new(u64::MAX)),
        };
        if layout < LAYOUT {
            s.migrate_from_1()?;
        }
        Ok(s)
    }

    /// Layout 1 → 2: source keys `scope \0 source` become length-prefixed. Scope names
    /// never held NUL, so the first NUL splits an old key exactly. One transaction: a crash
    /// leaves layout 1 whole, and the next open migrates again.
    fn migrate_from_1(&self) -> Result<()> {
        let mut moves: Vec<(sled::IVec, Vec<u8>)> = Vec::new();
        for k in self.sources.iter().keys() {
            let k = k?;
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
        self.db.flush()?;
        Ok(())
    }

    // ---- nodes ----

    /// Writes a node with its deadline, expiry entry and pending-index mark, atomically.
    pub fn put_node(&self, node: &Node) -> Result<()> {
        self.put_nodes(std::slice::from_ref(node))
    }

    /// Writes nodes (each with its deadline, expiry entry and pending-index mark) in one
    /// transaction.
    pub fn put_nodes(&self, nodes: &[Node]) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let values = nodes.iter().map(encode).collect::<Result<Vec<_>>>()?;
        (&self.nodes, &self.expiry, &self.deadlines, &self.unindexed)
            .transaction(|(n, e, d, u)| {
                let tx = NodeTx {
                    nodes: n,
                    expiry: e,
                    deadlines: d,
                    unindexed: u,
                };
                for (node, v) in nodes.iter().zip(&values) {
                    tx.put(node, v)?;
                }
                Ok(())
            })
            .map_err(txn_err("node write"))?;
        self.note_deadlines(nodes.iter().filter_map(|n| n.expires_at));
        Ok(())
    }

    /// Wakes the sweeper when a deadline earlier than the one it sleeps on arrives.
    fn note_deadlines(&self, deadlines: impl Iterator<Item = u64>) {
        if let Some(at) = deadlines.min()
            && at < self.earliest.fetch_min(at, Ordering::AcqRel)
        {
            self.expiry_changed.notify_one();
        }
    }

    /// The node, whether or not it has expired.
    pub fn get_node(&self, id: &NodeId) -> Result<Option<Node>> {
        match self.nodes.get(id.0)? {
            Some(v) => Ok(Some(decode(&format!("node {id}"), &v)?)),
            None => Ok(None),
        }
    }

    /// The node if it exists and has not expired at `now`. Expired nodes are never served.
    pub fn get_live(&self, id: &NodeId, now: u64) -> Result<Option<Node>> {
        Ok(self.get_node(id)?.filter(|n| n.is_live(now)))
    }

    /// Whether a live node exists, without reading the node itself.
    pub fn contains_live(&self, id: &NodeId, now: u64) -> Result<bool> {
        Ok(match self.deadlines.get(id.0)? {
            Some(v) => deadline_of(&v, id)? > now,
            None => false,
        })
    }

    /// Removes a node (with its deadline and expiry entry) and marks it for removal from
    /// the index, atomically. Returns whether it existed.
    pub fn remove_node(&self, id: &NodeId) -> Result<bool> {
        let removed = (&self.nodes, &self.expiry, &self.deadlines, &self.unindexed)
            .transaction(|(n, e, d, u)| {
                NodeTx {
                    nodes: n,
                    expiry: e,
                    deadlines: d,
                    unindexed: u,
                }
                .remove(id)
            })
            .map_err(txn_err("node removal"))?;
        Ok(removed)
    }

    /// Removes every node whose deadline is at or before `now`; returns their ids. Each
    /// removal marks the node for removal from the index in the same transaction.
    pub fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let mut removed = Vec::new();
        let end = expiry_key(now, &NodeId([0xff; 32]));
        for item in self.expiry.range(..=&end[..]) {
            let (k, _) = item?;
            let mut id = [0u8; 32];
            id.copy_from_slice(&k[8..40]);
            let id = NodeId(id);
            let gone = (&self.nodes, &self.expiry, &self.deadlines, &self.unindexed)
                .transaction(|(n, e, d, u)| {
                    e.remove(&k)?;
                    // The node may have been rewritten with a later deadline since this
                    // entry was made; only an expired node goes.
                    let expired = match d.get(id.0)? {
                        Some(v) => {
                            deadline_of(&v, &id)
                                .map_err(|_| ConflictableTransactionError::Abort(()))?
                                <= now
                        }
                        None => false,
                    };
                    if !expired {
                        return Ok(false);
                    }
                    NodeTx {
                        nodes: n,
                        expiry: e,
                        deadlines: d,
                        unindexed: u,
                    }
                    .remove(&id)
                })
                .map_err(txn_err("sweep"))?;
            if gone {
                removed.push(id);
            }
        }
        self.earliest
            .store(self.next_deadline()?.unwrap_or(u64::MAX), Ordering::Release);
        Ok(removed)
    }

    /// The earliest deadline in the expiry index.
    pub fn next_deadline(&self) -> Result<Option<u64>> {
        Ok(self.expiry.first()?.map(|(k, _)| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&k[..8]);
            u64::from_be_bytes(b)
        }))
    }

    pub fn node_ids(&self) -> impl Iterator<Item = Result<NodeId>> + '_ {
        self.nodes.iter().keys().map(|k| {
            let k = k?;
            let arr: [u8; 32] = k
                .as_ref()
                .try_into()
                .map_err(|_| Error::DataCorruption("node key is not 32 bytes".into()))?;
            Ok(NodeId(arr))
        })
    }

    pub fn n_nodes(&self) -> usize {
        self.nodes.len()
    }

    // ---- scopes ----

    pub fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>> {
        match self.scopes.get(name.as_bytes())? {
            Some(v) => Ok(Some(decode(&format!("scope {name}"), &v)?)),
            None => Ok(None),
        }
    }

    pub fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        self.scopes
            .iter()
            .values()
            .map(|v| decode("scope", &v?))
            .collect()
    }

    // ---- sources ----

    pub fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>> {
        match self.sources.get(source_key(scope, source))? {
            Some(v) => Ok(Some(decode(&format!("source {source}"), &v)?)),
            None => Ok(None),
        }
    }

    pub fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>> {
        match self.texts.get(source_key(scope, source))? {
            Some(v) => Ok(Some(decode(&format!("text of {source}"), &v)?)),
            None => Ok(None),
        }
    }

    /// Applies one ingest step atomically: the scope's new record, the sources it adds or
    /// replaces (record, text and FULL nodes), the sources and nodes it removes, and the
    /// pending-index marks of every node it writes or removes. A crash leaves the store
    /// before or after the whole step, never in between: the scope never lists a source
    /// the store lacks, a replaced source's old chunks go only with its new ones, and the
    /// scope's turn counter moves with the turn it numbered.
    pub fn write_sources(&self, step: &SourceStep) -> Result<()> {
        let scope = encode(&step.scope)?;
        let mut puts = Vec::with_capacity(step.put.len());
        for p in &step.put {
            let nodes = p
                .nodes
                .iter()
                .map(|n| Ok((n, encode(n)?)))
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
        (
            &self.scopes,
            &self.sources,
            &self.texts,
            &self.nodes,
            &self.expiry,
            &self.deadlines,
            &self.unindexed,
        )
            .transaction(|(sc, so, te, n, e, d, u)| {
                let tx = NodeTx {
                    nodes: n,
                    expiry: e,
                    deadlines: d,
                    unindexed: u,
                };
                for (key, record, text, nodes) in &puts {
                    for (node, v) in nodes {
                        tx.put(node, v)?;
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
                }
                sc.insert(step.scope.name.as_bytes(), scope.as_slice())?;
                Ok(())
            })
            .map_err(txn_err("source write"))?;
        Ok(())
    }

    // ---- the pending-index set: node changes the index has not committed ----

    /// Nodes whose change (write or removal) the index has not committed yet, with the
    /// generation of their mark.
    pub fn pending_index(&self) -> Result<Vec<(NodeId, Vec<u8>)>> {
        self.unindexed
            .iter()
            .map(|kv| {
                let (k, v) = kv?;
                let arr: [u8; 32] = k
                    .as_ref()
                    .try_into()
                    .map_err(|_| Error::DataCorruption("unindexed key is not 32 bytes".into()))?;
                Ok((NodeId(arr), v.to_vec()))
            })
            .collect()
    }

    /// How many node changes the index has not committed yet.
    pub fn n_pending_index(&self) -> usize {
        self.unindexed.len()
    }

    pub fn has_pending_index(&self) -> bool {
        !self.unindexed.is_empty()
    }

    /// Clears the marks of changes the index has committed. A mark whose generation moved
    /// since it was read (the node changed again meanwhile) stays for the next pass.
    pub fn clear_pending_index(&self, done: &[(NodeId, Vec<u8>)]) -> Result<()> {
        for (id, generation) in done {
            // Err(CompareAndSwapError) = the mark changed: keep it.
            let _ = self.unindexed.compare_and_swap(
                id.0,
                Some(generation.as_slice()),
                None as Option<&[u8]>,
            )?;
        }
        Ok(())
    }

    /// Forgets every mark (after a full reindex from the store).
    pub fn clear_all_pending_index(&self) -> Result<()> {
        self.unindexed.clear()?;
        Ok(())
    }

    // ---- embeddings: node vectors per embedder ----

    pub fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for (id, v) in vectors {
            batch.insert(&model.key(id)[..], encode(v)?);
        }
        self.embeddings.apply_batch(batch)?;
        Ok(())
    }

    pub fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>> {
        match self.embeddings.get(model.key(id))? {
            Some(v) => Ok(Some(decode(&format!("embedding of {id}"), &v)?)),
            None => Ok(None),
        }
    }

    pub fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool> {
        Ok(self.embeddings.contains_key(model.key(id))?)
    }

    /// Vectors stored, for every embedder.
    pub fn n_embeddings(&self) -> usize {
        self.embeddings.len()
    }

    /// Removes the vectors (of every embedder) whose node is no longer in the store.
    pub fn remove_orphan_embeddings(&self) -> Result<usize> {
        let mut orphans = Vec::new();
        for k in self.embeddings.iter().keys() {
            let k = k?;
            if k.len() != 40 {
                return Err(Error::DataCorruption(
                    "embedding key is not 40 bytes".into(),
                ));
            }
            if !self.nodes.contains_key(&k[8..])? {
                orphans.push(k);
            }
        }
        let mut batch = sled::Batch::default();
        for k in &orphans {
            batch.remove(k.clone());
        }
        self.embeddings.apply_batch(batch)?;
        Ok(orphans.len())
    }

    // ---- views: the last complete tree of each scope ----

    pub fn put_view<T: Serialize>(&self, scope: &str, view: &T) -> Result<()> {
        self.views.insert(scope.as_bytes(), encode(view)?)?;
        Ok(())
    }

    pub fn get_view<T: DeserializeOwned>(&self, scope: &str) -> Result<Option<T>> {
        match self.views.get(scope.as_bytes())? {
            Some(v) => Ok(Some(decode(&format!("view of {scope}"), &v)?)),
            None => Ok(None),
        }
    }

    // ---- jobs: the background queue, surviving restarts ----

    pub fn next_job_id(&self) -> Result<u64> {
        Ok(self.db.generate_id()? + 1)
    }

    pub fn put_job<T: Serialize>(&self, id: u64, job: &T) -> Result<()> {
        self.jobs.insert(id.to_be_bytes(), encode(job)?)?;
        Ok(())
    }

    pub fn get_job<T: DeserializeOwned>(&self, id: u64) -> Result<Option<T>> {
        match self.jobs.get(id.to_be_bytes())? {
            Some(v) => Ok(Some(decode(&format!("job {id}"), &v)?)),
            None => Ok(None),
        }
    }

    pub fn remove_job(&self, id: u64) -> Result<()> {
        self.jobs.remove(id.to_be_bytes())?;
        Ok(())
    }

    /// Every job, oldest first.
    pub fn jobs<T: DeserializeOwned>(&self) -> Result<Vec<T>> {
        self.jobs
            .iter()
            .values()
            .map(|v| decode("job", &v?))
            .collect()
    }

    /// Durably writes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

/// One ingest step for [`Store::write_sources`].
#[derive(Debug)]
pub struct SourceStep {
    /// The scope's record after the step.
    pub scope: ScopeRecord,
    /// Sources added or replaced: record, text, FULL nodes.
    pub put: Vec<SourcePut>,
    /// Sources removed from the scope (record and text).
    pub remove_sources: Vec<String>,
    /// Nodes removed (FULL chunks of replaced or removed sources).
    pub remove_nodes: Vec<NodeId>,
}

/// A source added or replaced by a [`SourceStep`].
#[derive(Debug)]
pub struct SourcePut {
    pub record: SourceRecord,
    pub text: String,
    pub nodes: Vec<Node>,
}

/// The node trees inside one transaction: a node, its deadline, its expiry entry and its
/// pending-index mark always change together.
struct NodeTx<'a> {
    nodes: &'a TransactionalTree,
    expiry: &'a TransactionalTree,
    deadlines: &'a TransactionalTree,
    unindexed: &'a TransactionalTree,
}

type TxResult<T> = std::result::Result<T, ConflictableTransactionError<()>>;

impl NodeTx<'_> {
    fn old_deadline(&self, id: &NodeId) -> TxResult<Option<u64>> {
        match self.deadlines.get(id.0)? {
            Some(v) => Ok(Some(
                deadline_of(&v, id).map_err(|_| ConflictableTransactionError::Abort(()))?,
            )),
            None => Ok(None),
        }
    }

    fn mark_pending(&self, id: &NodeId) -> TxResult<()> {
        let g = self.unindexed.generate_id()?;
        self.unindexed.insert(&id.0[..], &gen_bytes(g)[..])?;
        Ok(())
    }

    fn put(&self, node: &Node, value: &[u8]) -> TxResult<()> {
        if let Some(old_at) = self.old_deadline(&node.id)?
            && old_at != u64::MAX
        {
            self.expiry.remove(&expiry_key(old_at, &node.id)[..])?;
        }
        let deadline = node.expires_at.unwrap_or(u64::MAX);
        self.nodes.insert(&node.id.0[..], value)?;
        self.deadlines
            .insert(&node.id.0[..], &deadline.to_be_bytes()[..])?;
        if let Some(at) = node.expires_at {
            self.expiry.insert(&expiry_key(at, &node.id)[..], &[][..])?;
        }
        self.mark_pending(&node.id)
    }

    fn remove(&self, id: &NodeId) -> TxResult<bool> {
        let old_at = self.old_deadline(id)?;
        if let Some(at) = old_at
            && at != u64::MAX
        {
            self.expiry.remove(&expiry_key(at, id)[..])?;
        }
        self.deadlines.remove(&id.0[..])?;
        let existed = self.nodes.remove(&id.0[..])?.is_some();
        if existed {
            self.mark_pending(id)?;
        }
        Ok(existed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::Level;
    use crate::node::{Meta, Span};

    fn node(k: u8, expires_at: Option<u64>) -> Node {
        Node {
            id: NodeId([k; 32]),
            scope: "s".into(),
            level: Level::Full,
            text: format!("node {k}"),
            children: Vec::new(),
            citations: vec![Span {
                source: "a".into(),
                start: 0,
                end: 1,
            }],
            tokens: 2,
            meta: Meta::default(),
            created_at: 0,
            expires_at,
        }
    }

    fn scope_record(name: &str, sources: &[&str]) -> ScopeRecord {
        ScopeRecord {
            name: name.into(),
            kind: ScopeKind::Doc,
            sources: sources
                .iter()
                .enumerate()
                .map(|(i, s)| SourceEntry {
                    id: s.to_string(),
                    round: None,
                    seq: i as u64,
                })
                .collect(),
            next_seq: sources.len() as u64,
            created_at: 0,
            updated_at: 0,
        }
    }

    fn record(scope: &str, id: &str) -> SourceRecord {
        SourceRecord {
            id: id.into(),
            scope: scope.into(),
            seq: 0,
            round: None,
            speaker: None,
            hash: [0; 32],
            bytes: 1,
            chunk_tokens: 400,
            chunks: Vec::new(),
        }
    }

    // Regression: `kb\0x` + `a.md` and `kb` + `x\0a.md` were one key, so a document
    // posted to one scope replaced a document of another.
    #[test]
    fn source_keys_cannot_collide() {
        assert_ne!(source_key("kb\0x", "a.md"), source_key("kb", "x\0a.md"));
        assert_ne!(source_key("ab", "c"), source_key("a", "bc"));
        let s = Store::temporary().unwrap();
        for (scope, src, text) in [("kb\0x", "a.md", "one"), ("kb", "x\0a.md", "two")] {
            s.write_sources(&SourceStep {
                scope: scope_record(scope, &[src]),
                put: vec![SourcePut {
                    record: record(scope, src),
                    text: text.into(),
                    nodes: Vec::new(),
                }],
                remove_sources: Vec::new(),
                remove_nodes: Vec::new(),
            })
            .unwrap();
        }
        assert_eq!(s.get_text("kb\0x", "a.md").unwrap().as_deref(), Some("one"));
        assert_eq!(s.get_text("kb", "x\0a.md").unwrap().as_deref(), Some("two"));
    }

    #[test]
    fn every_node_change_is_pending_until_cleared() {
        let s = Store::temporary().unwrap();
        s.put_node(&node(1, None)).unwrap();
        s.put_node(&node(2, Some(10))).unwrap();
        let first = s.pending_index().unwrap();
        assert_eq!(first.len(), 2);
        s.clear_pending_index(&first).unwrap();
        assert!(!s.has_pending_index());
        // A removal and a sweep are changes the index must see too.
        assert!(s.remove_node(&NodeId([1; 32])).unwrap());
        assert_eq!(s.sweep(10).unwrap(), vec![NodeId([2; 32])]);
        assert_eq!(s.n_pending_index(), 2);
        // A node changed again after its mark was read keeps a mark.
        let read = s.pending_index().unwrap();
        s.put_node(&node(1, None)).unwrap();
        s.clear_pending_index(&read).unwrap();
        let left: Vec<NodeId> = s
            .pending_index()
            .unwrap()
            .into_iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(left, vec![NodeId([1; 32])]);
    }

    #[test]
    fn a_layout_1_store_is_migrated_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::Config::new()
                .path(dir.path().join("store"))
                .open()
                .unwrap();
            db.insert("format", &[1u8]).unwrap();
            let old_key = b"kb\0docs/a.md".to_vec();
            db.open_tree("sources")
                .unwrap()
                .insert(&old_key, encode(&record("kb", "docs/a.md")).unwrap())
                .unwrap();
            db.open_tree("texts")
                .unwrap()
                .insert(&old_key, encode(&"text of a").unwrap())
                .unwrap();
            db.open_tree("scopes")
                .unwrap()
                .insert("kb", encode(&scope_record("kb", &["docs/a.md"])).unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(
            s.get_text("kb", "docs/a.md").unwrap().as_deref(),
            Some("text of a")
        );
        assert!(s.get_source("kb", "docs/a.md").unwrap().is_some());
        drop(s);
        // Opening again finds layout 2 and changes nothing.
        let s = Store::open(dir.path()).unwrap();
        assert!(s.get_source("kb", "docs/a.md").unwrap().is_some());
    }

    #[test]
    fn a_newer_layout_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::Config::new()
                .path(dir.path().join("store"))
                .open()
                .unwrap();
            db.insert("format", &[LAYOUT + 1]).unwrap();
            db.flush().unwrap();
        }
        let e = Store::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("newer") && !e.contains('\n'), "{e}");
    }
}
