//! The embedded store (sled): sources, their texts, scopes, nodes, and the expiry index.
//!
//! Trees:
//! - `sources`: `scope \0 source` → [`SourceRecord`]
//! - `texts`:   `scope \0 source` → the source text as ingested (ground truth for citations)
//! - `scopes`:  `scope` → [`ScopeRecord`]
//! - `nodes`:   node id → [`Node`]
//! - `expiry`:  big-endian `expires_at` ++ node id → `()`; a sweep is a range scan.
//! - `embeddings`: 8-byte hash of the embedder's identity ++ node id → unit vector
//!   (`Vec<f32>`). Nodes are content-addressed, so one vector serves every scope and
//!   every rebuild that reaches the node.
//!
//! Values are bincode (serde, standard config) behind a one-byte format version.

use crate::error::{Error, Result};
use crate::node::{Node, NodeId};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sled::Transactional;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

/// The format version byte in front of every value.
const FORMAT: u8 = 1;

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

fn source_key(scope: &str, source: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(scope.len() + source.len() + 1);
    k.extend_from_slice(scope.as_bytes());
    k.push(0);
    k.extend_from_slice(source.as_bytes());
    k
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
        // (disk full) Sled files that a full disk or a crash left unreadable are set aside
        // and the open retried; see `repair`.
        let (db, repaired) = crate::repair::open_db(&dir.join("store"), || {
            sled::Config::new().cache_capacity(256 * 1024 * 1024)
        })
        .map_err(|e| match e {
            sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock => {
                Error::Store(sled::Error::Io(std::io::Error::new(
                    io.kind(),
                    format!(
                        "{} is in use by another strata process ({io})",
                        dir.display()
                    ),
                )))
            }
            e => Error::from(e),
        })?;
        for action in repaired {
            tracing::warn!("{action}");
        }
        Self::from_db(db)
    }

    /// A store that lives in memory only (tests, benchmarks).
    pub fn temporary() -> Result<Store> {
        Self::from_db(sled::Config::new().temporary(true).open()?)
    }

    pub(crate) fn from_db(db: sled::Db) -> Result<Store> {
        match db.get("format")? {
            Some(v) if v.as_ref() != [FORMAT] => {
                return Err(Error::DataCorruption(format!(
                    "store format {:?}, this strata reads {FORMAT}",
                    v.as_ref()
                )));
            }
            Some(_) => {}
            None => {
                db.insert("format", &[FORMAT])?;
            }
        }
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
        Ok(s)
    }

    // ---- nodes ----

    /// Writes a node and its expiry entry atomically.
    pub fn put_node(&self, node: &Node) -> Result<()> {
        let value = encode(node)?;
        let old = self.get_node(&node.id)?;
        let deadline = node.expires_at.unwrap_or(u64::MAX).to_be_bytes();
        (&self.nodes, &self.expiry, &self.deadlines)
            .transaction(|(nodes, expiry, deadlines)| {
                if let Some(old_at) = old.as_ref().and_then(|o| o.expires_at) {
                    expiry.remove(&expiry_key(old_at, &node.id)[..])?;
                }
                nodes.insert(&node.id.0[..], value.as_slice())?;
                deadlines.insert(&node.id.0[..], &deadline[..])?;
                if let Some(at) = node.expires_at {
                    expiry.insert(&expiry_key(at, &node.id)[..], &[][..])?;
                }
                Ok(())
            })
            .map_err(|e: sled::transaction::TransactionError<()>| match e {
                // (disk full) `from`, not `Store`: ENOSPC becomes `DiskFull`.
                sled::transaction::TransactionError::Storage(e) => Error::from(e),
                sled::transaction::TransactionError::Abort(()) => {
                    Error::DataCorruption("node write aborted".into())
                }
            })?;
        if let Some(at) = node.expires_at
            && at < self.earliest.fetch_min(at, Ordering::AcqRel)
        {
            self.expiry_changed.notify_one();
        }
        Ok(())
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
            Some(v) => {
                let b: [u8; 8] = v.as_ref().try_into().map_err(|_| {
                    Error::DataCorruption(format!("deadline of {id} is not 8 bytes"))
                })?;
                u64::from_be_bytes(b) > now
            }
            None => false,
        })
    }

    pub fn remove_node(&self, id: &NodeId) -> Result<bool> {
        let Some(old) = self.get_node(id)? else {
            return Ok(false);
        };
        if let Some(at) = old.expires_at {
            self.expiry.remove(expiry_key(at, id))?;
        }
        self.nodes.remove(id.0)?;
        self.deadlines.remove(id.0)?;
        Ok(true)
    }

    /// Removes every node whose deadline is at or before `now`; returns their ids.
    pub fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let mut removed = Vec::new();
        let end = expiry_key(now, &NodeId([0xff; 32]));
        for item in self.expiry.range(..=&end[..]) {
            let (k, _) = item?;
            let mut id = [0u8; 32];
            id.copy_from_slice(&k[8..40]);
            let id = NodeId(id);
            self.expiry.remove(&k)?;
            // The node may have been rewritten with a later deadline; only remove it if the
            // node itself is expired.
            if let Some(n) = self.get_node(&id)?
                && !n.is_live(now)
            {
                self.nodes.remove(id.0)?;
                self.deadlines.remove(id.0)?;
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

    pub fn put_scope(&self, rec: &ScopeRecord) -> Result<()> {
        self.scopes.insert(rec.name.as_bytes(), encode(rec)?)?;
        Ok(())
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

    /// Writes a source's record and text together.
    pub fn put_source(&self, rec: &SourceRecord, text: &str) -> Result<()> {
        let key = source_key(&rec.scope, &rec.id);
        let r = encode(rec)?;
        let t = encode(&text)?;
        (&self.sources, &self.texts)
            .transaction(|(s, t_tree)| {
                s.insert(key.as_slice(), r.as_slice())?;
                t_tree.insert(key.as_slice(), t.as_slice())?;
                Ok(())
            })
            .map_err(|e: sled::transaction::TransactionError<()>| match e {
                // (disk full) `from`, not `Store`: ENOSPC becomes `DiskFull`.
                sled::transaction::TransactionError::Storage(e) => Error::from(e),
                sled::transaction::TransactionError::Abort(()) => {
                    Error::DataCorruption("source write aborted".into())
                }
            })?;
        Ok(())
    }

    pub fn remove_source(&self, scope: &str, source: &str) -> Result<()> {
        let key = source_key(scope, source);
        self.sources.remove(&key)?;
        self.texts.remove(&key)?;
        Ok(())
    }

    // ---- nodes staged for the index but not committed there ----

    pub fn mark_unindexed(&self, ids: impl IntoIterator<Item = NodeId>) -> Result<()> {
        let mut batch = sled::Batch::default();
        for id in ids {
            batch.insert(&id.0[..], &[][..]);
        }
        self.unindexed.apply_batch(batch)?;
        Ok(())
    }

    pub fn has_unindexed(&self) -> bool {
        !self.unindexed.is_empty()
    }

    pub fn unindexed(&self) -> Result<Vec<NodeId>> {
        self.unindexed
            .iter()
            .keys()
            .map(|k| {
                let k = k?;
                let arr: [u8; 32] = k
                    .as_ref()
                    .try_into()
                    .map_err(|_| Error::DataCorruption("unindexed key is not 32 bytes".into()))?;
                Ok(NodeId(arr))
            })
            .collect()
    }

    pub fn clear_unindexed(&self) -> Result<()> {
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
