//! The store: sources, their texts, scopes, nodes with deadlines, views, jobs, vectors and
//! the pending-index set, behind five traits by job that together make a [`Backend`].
//!
//! [`Store`] is the handle the engine holds (cheap to clone): it encodes what the backends
//! keep as opaque bytes (views, jobs), wakes the TTL sweeper when an earlier deadline
//! arrives, and forwards everything else. Backends: [`sled`](self::sled) (the embedded
//! default, `--db DIR`) and [`memory`] (tests). One conformance suite per trait (`tests.rs`)
//! runs against every backend. Only `store::sled` knows sled.
//!
//! Every backend keeps the write protocol of docs/ARCHITECTURE.md ("Writes"): a
//! [`SourceStep`] is applied whole or not at all; a node, its deadline, its expiry entry and
//! its pending-index mark change together; `flush` returns once everything written before
//! it is durable.

pub mod job;
pub mod memory;
pub mod postgres;
pub mod record;
pub mod sled;
#[cfg(test)]
mod tests;

pub use job::{Claimant, Job, JobKind, JobOutcome, JobState};

use crate::error::{Error, Result};
use crate::node::{FallbackMark, Node, NodeId};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

pub use record::Record;

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

/// A scope as readers see it: its [`ScopeHead`] and every source it lists, in scope order.
/// Backends keep the head and one entry per source apart, so that a step writes the
/// entries it changes, not the whole list (record format 1 held the list inline; such a
/// record is still read, and its list moves out at the scope's next write).
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

impl ScopeRecord {
    /// The record of `head` listing `entries`, put in scope order.
    pub fn of(head: ScopeHead, mut entries: Vec<SourceEntry>) -> ScopeRecord {
        sort_entries(head.kind, &mut entries);
        ScopeRecord {
            name: head.name,
            kind: head.kind,
            sources: entries,
            next_seq: head.next_seq,
            created_at: head.created_at,
            updated_at: head.updated_at,
        }
    }

    /// Its head: everything but the list.
    pub fn head(&self) -> ScopeHead {
        ScopeHead {
            name: self.name.clone(),
            kind: self.kind,
            next_seq: self.next_seq,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    /// Its entry for `source`, if it lists it.
    pub fn entry(&self, source: &str) -> Option<&SourceEntry> {
        self.sources.iter().find(|e| e.id == source)
    }
}

/// Scope order: documents by arrival, a debate's turns by round, then arrival.
pub fn sort_entries(kind: ScopeKind, entries: &mut [SourceEntry]) {
    match kind {
        ScopeKind::Doc => entries.sort_by_key(|e| e.seq),
        ScopeKind::Debate => entries.sort_by_key(|e| (e.round.unwrap_or(0), e.seq)),
    }
}

/// A scope's own record (format 2), without its list of sources: what an append reads and
/// writes, whatever the length of the debate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeHead {
    pub name: String,
    pub kind: ScopeKind,
    /// The arrival number the next new source gets.
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

/// A scope as a backend keeps it: a head whose entries are stored one by one, or (record
/// format 1, written by older stratas) a record holding its list inline. A step on an
/// inline scope moves its list out first ([`StoredScope::entries_to_move`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum StoredScope {
    Head(ScopeHead),
    Inline(ScopeRecord),
}

impl StoredScope {
    /// Decodes a stored scope value of either format.
    pub(crate) fn decode(what: &str, bytes: &[u8]) -> Result<StoredScope> {
        match bytes.first().map(|v| v & !COMPRESSED) {
            Some(v) if v == <ScopeRecord as Record>::VERSION => {
                decode(what, bytes).map(StoredScope::Inline)
            }
            _ => decode(what, bytes).map(StoredScope::Head),
        }
    }

    pub(crate) fn head(&self) -> ScopeHead {
        match self {
            StoredScope::Head(h) => h.clone(),
            StoredScope::Inline(r) => r.head(),
        }
    }

    /// The entries an inline record lists that a step removing `removed` keeps: they are
    /// written one by one in the step that replaces the record with its head.
    pub(crate) fn entries_to_move(&self, removed: &[String]) -> Vec<SourceEntry> {
        match self {
            StoredScope::Head(_) => Vec::new(),
            StoredScope::Inline(r) => r
                .sources
                .iter()
                .filter(|e| !removed.contains(&e.id))
                .cloned()
                .collect(),
        }
    }
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
    /// When it was said or written (record format 2; `None` in older records).
    pub time: Option<crate::time::Time>,
}

/// One ingest step for [`Store::write_sources`], applied whole or not at all. Its size is
/// what it changes: the scope's head, the entries of the sources it adds or moves, the
/// sources and nodes it writes or removes — never the scope's whole list.
#[derive(Debug)]
pub struct SourceStep {
    /// The scope's head after the step.
    pub scope: ScopeHead,
    /// Entries the scope lists from now on (new sources, or a source whose round changed);
    /// every other entry stays as it is.
    pub list: Vec<SourceEntry>,
    /// Sources added or replaced: record, text, FULL nodes.
    pub put: Vec<SourcePut>,
    /// Sources removed from the scope (record, text and entry).
    pub remove_sources: Vec<String>,
    /// Nodes removed (FULL chunks of replaced or removed sources).
    pub remove_nodes: Vec<NodeId>,
}

/// One forget step for [`Store::forget`], applied whole or not at all: sources leave their
/// scope with every node derived from them.
#[derive(Debug)]
pub struct ForgetStep {
    pub scope: String,
    /// The scope's head after the step; `None`: the scope itself goes, with every entry.
    pub record: Option<ScopeHead>,
    /// Sources removed (record, text and entry).
    pub remove_sources: Vec<String>,
    /// Nodes removed (each with its deadline, expiry entry, fallback mark and vectors of
    /// every embedder, and marked pending for the index).
    pub remove_nodes: Vec<NodeId>,
}

/// A source added or replaced by a [`SourceStep`].
#[derive(Debug)]
pub struct SourcePut {
    pub record: SourceRecord,
    pub text: String,
    pub nodes: Vec<Node>,
}

/// A node whose change (write or removal) the index has not committed yet. The
/// generation tells a mark read before a later change of the same node from the new mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingMark {
    pub id: NodeId,
    pub generation: u64,
}

/// How many stored nodes carry a [`FallbackMark`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FallbackCounts {
    /// Nodes made by the offline fallback, or built over such a node.
    pub nodes: usize,
    /// Those the next build with the model makes again (the model did not answer).
    pub awaiting_model: usize,
}

/// The short hash of an embedder's identity that prefixes its vectors' keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EmbedKey(pub [u8; 8]);

impl EmbedKey {
    pub fn of(identity: &str) -> EmbedKey {
        let h = blake3::hash(identity.as_bytes());
        let mut k = [0u8; 8];
        k.copy_from_slice(&h.as_bytes()[..8]);
        EmbedKey(k)
    }
}

/// Where [`Store::put_liveness`] keeps a scope's record among the views: no scope name
/// holds a control character.
pub(crate) fn liveness_key(scope: &str) -> String {
    format!("{scope}\u{1}live")
}

/// What the engine needs from storage, by job: [`NodeStore`], [`SourceStore`],
/// [`VectorStore`], [`JobQueue`], [`Replication`]. Every type that implements the five is a
/// `Backend`. Implementations keep the write protocol described in the module docs; the
/// conformance suite (`store/tests.rs`) checks each job on every backend.
pub trait Backend: NodeStore + SourceStore + VectorStore + JobQueue + Replication {}

impl<T: NodeStore + SourceStore + VectorStore + JobQueue + Replication> Backend for T {}

/// Nodes with their deadlines, fallback marks and pending-index marks.
pub trait NodeStore: Send + Sync {
    /// Writes nodes (each with deadline, expiry entry, pending-index mark and fallback
    /// mark — `None` clears an earlier one) atomically.
    fn put_nodes(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()>;

    fn get_node(&self, id: &NodeId) -> Result<Option<Node>>;

    /// The node's deadline (`u64::MAX`: never expires), without reading the node.
    fn deadline(&self, id: &NodeId) -> Result<Option<u64>>;

    /// Removes a node with its deadline, expiry entry and fallback mark and marks it
    /// pending, atomically.
    fn remove_node(&self, id: &NodeId) -> Result<bool>;

    /// Removes every node whose deadline is at or before `now` (each removal marked
    /// pending); returns their ids.
    fn sweep(&self, now: u64) -> Result<Vec<NodeId>>;

    /// The earliest deadline of any node.
    fn next_deadline(&self) -> Result<Option<u64>>;

    /// A count that grows with every write that removes a node or brings a node's deadline
    /// earlier, in the same atomic step as that write (persisted with the nodes): while it
    /// has not moved, a set of nodes that all existed still does, each with a deadline no
    /// earlier than it had. `None`: this backend does not keep one (nothing may be
    /// concluded from it).
    fn losses(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    fn node_ids(&self) -> Result<Vec<NodeId>>;

    fn n_nodes(&self) -> usize;

    /// The bytes the node's record takes as stored, when this backend keeps it otherwise
    /// than [`record_bytes`] says (`None`: it does not, or the node is not there).
    fn stored_bytes(&self, _id: &NodeId) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Many nodes at once, in the order of `ids` (a shared store answers in one round
    /// trip what would be one per node).
    fn get_nodes(&self, ids: &[NodeId]) -> Result<Vec<Option<Node>>> {
        ids.iter().map(|id| self.get_node(id)).collect()
    }

    /// Many nodes' deadlines at once, in the order of `ids`.
    fn deadlines(&self, ids: &[NodeId]) -> Result<Vec<Option<u64>>> {
        ids.iter().map(|id| self.deadline(id)).collect()
    }

    fn fallback_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>>;

    fn n_fallback_marks(&self) -> usize;

    fn fallback_counts(&self) -> Result<FallbackCounts>;

    fn pending_index(&self) -> Result<Vec<PendingMark>>;

    fn n_pending_index(&self) -> usize;

    /// Clears marks whose generation is unchanged.
    fn clear_pending_index(&self, done: &[PendingMark]) -> Result<()>;
}

/// Scopes, their sources and texts (written and forgotten a whole step at a time), and
/// each scope's last complete view.
pub trait SourceStore: Send + Sync {
    /// The scope with every source it lists, in scope order.
    fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>>;

    /// The scope's head alone: one read, whatever the scope's size.
    fn get_scope_head(&self, name: &str) -> Result<Option<ScopeHead>>;

    /// The scope's entry for `source`, if it lists it: one read.
    fn get_entry(&self, scope: &str, source: &str) -> Result<Option<SourceEntry>>;

    fn scopes(&self) -> Result<Vec<ScopeRecord>>;

    fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>>;

    fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>>;

    /// Many source records of one scope at once, in the order of `ids`.
    fn get_sources(&self, scope: &str, ids: &[&str]) -> Result<Vec<Option<SourceRecord>>> {
        ids.iter().map(|id| self.get_source(scope, id)).collect()
    }

    /// Applies an ingest step whole or not at all.
    fn write_sources(&self, step: &SourceStep) -> Result<()>;

    /// Applies a forget step whole or not at all: its sources, texts and nodes go (each
    /// node's vectors too, and its pending-index mark is set), the scope record is
    /// replaced or removed, and the scope's last complete view is removed (it cites what
    /// was forgotten).
    fn forget(&self, step: &ForgetStep) -> Result<()>;

    fn put_view(&self, scope: &str, bytes: Vec<u8>) -> Result<()>;

    fn get_view(&self, scope: &str) -> Result<Option<Vec<u8>>>;

    /// What a build leaves for readers of `scope` ([`Store::put_liveness`]); removed by a
    /// forget of the scope. Kept beside the views unless a backend keeps it apart.
    fn put_liveness(&self, scope: &str, bytes: Vec<u8>) -> Result<()> {
        self.put_view(&liveness_key(scope), bytes)
    }

    fn get_liveness(&self, scope: &str) -> Result<Option<Vec<u8>>> {
        self.get_view(&liveness_key(scope))
    }
}

/// Node vectors, per embedder.
pub trait VectorStore: Send + Sync {
    fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()>;

    fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>>;

    fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool>;

    fn n_embeddings(&self) -> usize;

    /// Removes the vectors (of every embedder) whose node is gone; returns how many.
    fn remove_orphan_embeddings(&self) -> Result<usize>;

    /// Removes one node's vectors of every embedder.
    fn remove_node_embeddings(&self, id: &NodeId) -> Result<()>;
}

/// The job queue: each job claimed by exactly one worker of one process.
pub trait JobQueue: Send + Sync {
    /// Queues a job of `kind` for `scope` (durably, with an id never handed out before),
    /// or returns the queued one of the same kind for the scope (`true`: coalesced).
    fn enqueue_job(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)>;

    /// Claims the oldest queued job whose scope has no running job: it becomes `Running`
    /// (started at `now`, one more attempt), held by `who` for its lease. `None`: nothing
    /// to claim.
    fn claim_job(&self, who: &Claimant, now: u64) -> Result<Option<Job>>;

    /// Extends the lease on a claimed job; `false`: the claim was lost (another process
    /// took the job back after the lease ran out).
    fn renew_job(&self, id: u64, who: &Claimant) -> Result<bool>;

    /// Records the end of a claimed job (`Done`, `Failed`, or `Queued` to park it) if `who`
    /// still holds it, and keeps only the newest `keep` finished jobs. `false`: the claim
    /// was lost and nothing was written.
    fn finish_job(&self, job: &Job, who: &Claimant, keep: usize) -> Result<bool>;

    /// Queues again the running jobs whose process is gone: at open, every job this
    /// replica's previous process left running, and any job whose lease ran out.
    fn requeue_abandoned(&self, who: &Claimant) -> Result<usize>;

    /// How long until the lease of a running job runs out (then an idle worker can take
    /// it back). `None`: no lease to wait for.
    fn next_lease_expiry(&self) -> Result<Option<std::time::Duration>> {
        Ok(None)
    }

    fn get_job(&self, id: u64) -> Result<Option<Job>>;

    /// Every job, oldest (lowest id) first.
    fn jobs(&self) -> Result<Vec<Job>>;

    /// How many jobs wait to run.
    fn queued_jobs(&self) -> Result<usize> {
        Ok(self
            .jobs()?
            .iter()
            .filter(|j| j.state == JobState::Queued)
            .count())
    }
}

/// Several processes on one store (the embedded backends have one process: the defaults),
/// and the store as a whole: durability, size.
pub trait Replication: Send + Sync {
    /// Holds `scope`'s record against writers in other processes until the guard drops:
    /// ingest and append read the record, number the turns and write it under it. The
    /// embedded backends need nothing (the engine's write lock covers their one process).
    fn lock_scope(&self, _scope: &str) -> Result<ScopeLock> {
        Ok(ScopeLock::none())
    }

    /// Wake-ups for changes other processes made. `None`: no other process writes.
    fn events(&self) -> Option<Events> {
        None
    }

    /// Whether other processes write to this store too (their writes are not seen by
    /// [`Store::generation`]).
    fn shared(&self) -> bool {
        false
    }

    /// Whether this process's index can no longer catch up from the change feed (the
    /// feed was pruned past it): rebuild the index from the store.
    fn index_must_rebuild(&self) -> Result<bool> {
        Ok(false)
    }

    /// Every replica's index position (shared stores).
    fn replicas(&self) -> Result<Vec<ReplicaStatus>> {
        Ok(Vec::new())
    }

    /// Says this replica is alive (shared stores forget replicas silent for a day).
    fn heartbeat(&self) -> Result<()> {
        Ok(())
    }

    /// The name this process claims jobs under.
    fn replica_name(&self) -> String {
        "local".into()
    }

    /// Makes everything written so far durable.
    fn flush(&self) -> Result<()>;

    /// Flushes, and leaves the store quick to open for the next process (sled: a snapshot
    /// of its log, so that a read-only open — which writes none — does not scan all this
    /// process wrote). For a process that will write no more.
    fn checkpoint(&self) -> Result<()> {
        self.flush()
    }

    fn size_on_disk(&self) -> u64;
}

/// A scope's record held against other processes' writers ([`Replication::lock_scope`]);
/// released on drop.
pub struct ScopeLock(#[allow(dead_code)] Option<Box<dyn Send>>);

impl ScopeLock {
    pub fn none() -> ScopeLock {
        ScopeLock(None)
    }

    pub fn held(guard: Box<dyn Send>) -> ScopeLock {
        ScopeLock(Some(guard))
    }
}

/// Counters that move when another process changes the store: node writes and removals
/// (the change feed) and the job queue. A `watch` channel: a missed value is never a
/// missed wake-up.
#[derive(Clone)]
pub struct Events {
    pub nodes: tokio::sync::watch::Receiver<u64>,
    pub jobs: tokio::sync::watch::Receiver<u64>,
}

/// One replica's place in the change feed (`strata stats`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaStatus {
    pub name: String,
    /// Nodes changed since the replica's index last committed (0: current).
    pub behind: usize,
    /// Seconds since the replica last synced its index or said it was alive.
    pub seen_secs_ago: u64,
    /// Whether this is the process asking.
    pub this: bool,
}

/// The store handle. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// Wakes the sweeper when a deadline earlier than the one it sleeps on arrives.
    expiry_changed: Arc<Notify>,
    earliest: Arc<AtomicU64>,
    /// Bumped after every write of this handle (and its clones) that can change a scope's
    /// tree or its nodes' liveness: what [`Store::generation`] reports.
    generation: Arc<AtomicU64>,
    /// Opened without the right to write ([`Store::open_read_only`]).
    read_only: bool,
}

/// A value as the backends keep it: its type's format version byte, then bincode — or,
/// for a body of at least [`COMPRESS_FROM`] bytes that zstd shrinks by a tenth or more, the
/// version byte with [`COMPRESSED`] set, then the zstd frame of the body. Texts (sources,
/// nodes) and long scope records shrink several times over; small records stay plain.
pub(crate) fn encode<T: Record>(v: &T) -> Result<Vec<u8>> {
    let bad =
        |e: bincode::error::EncodeError| Error::DataCorruption(format!("cannot encode value: {e}"));
    let config = bincode::config::standard();
    // Sized first, then encoded once, straight after the version byte (a source's text
    // is copied once, into a buffer of the right size); a long body is then compressed
    // from that buffer, and kept plain when that does not pay.
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(v, &mut size, config).map_err(bad)?;
    let mut out = Vec::with_capacity(1 + size.bytes_written);
    out.push(T::VERSION);
    bincode::serde::encode_into_std_write(v, &mut out, config).map_err(bad)?;
    if size.bytes_written >= COMPRESS_FROM {
        let packed = with_context(
            &COMPRESSOR,
            || zstd::bulk::Compressor::new(COMPRESSION_LEVEL),
            |z| z.compress(&out[1..]),
        )
        .map_err(|e| Error::DataCorruption(format!("cannot compress value: {e}")))?;
        if packed.len() * 10 <= size.bytes_written * 9 {
            out.clear();
            out.push(T::VERSION | COMPRESSED);
            out.extend_from_slice(&packed);
            out.shrink_to_fit();
        }
    }
    Ok(out)
}

thread_local! {
    /// Each thread's zstd contexts, made once: making one per value was 5 % of a build.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `f` with this thread's context in `key`, made by `make` the first time.
fn with_context<C, T>(
    key: &'static std::thread::LocalKey<std::cell::RefCell<Option<C>>>,
    make: impl FnOnce() -> std::io::Result<C>,
    f: impl FnOnce(&mut C) -> std::io::Result<T>,
) -> std::io::Result<T> {
    key.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(make()?);
        }
        f(c.as_mut().expect("made above"))
    })
}

/// The version byte's flag for a zstd-compressed body (format versions stay below it).
pub(crate) const COMPRESSED: u8 = 0x80;
/// Bodies shorter than this are never compressed.
const COMPRESS_FROM: usize = 256;
/// zstd's level: a fast one (records are written on the append path).
const COMPRESSION_LEVEL: i32 = 3;
/// A compressed body never decompresses to more than this (a corrupt frame cannot ask
/// for more memory).
const MAX_DECOMPRESSED: usize = 1 << 30;

/// The bytes a record (a node, a source's text) takes as stored: format byte and body,
/// compressed where [`encode`] compresses it; keys and the storage engine's overhead
/// aside. What `strata stats --bytes` adds up.
pub fn record_bytes<T: Record>(v: &T) -> u64 {
    encode(v).map_or(0, |v| v.len() as u64)
}

/// A value [`encode`] wrote, by this strata or an older one ([`Record::decode_old`]).
pub(crate) fn decode<T: Record>(what: &str, bytes: &[u8]) -> Result<T> {
    let corrupt = |e: bincode::error::DecodeError| Error::DataCorruption(format!("{what}: {e}"));
    let unpacked;
    let (v, body) = match bytes.split_first() {
        Some((&v, packed)) if v & COMPRESSED != 0 => {
            // The frame says how long its content is (`encode` writes it): a buffer of
            // that size, not of the cap (a fresh mapping of 1 GiB per value, its pages
            // faulted in one by one, cost a 50 KB text ~0.1 ms).
            let cap = zstd::zstd_safe::get_frame_content_size(packed)
                .ok()
                .flatten()
                .map_or(MAX_DECOMPRESSED, |n| {
                    usize::try_from(n).map_or(MAX_DECOMPRESSED, |n| n.min(MAX_DECOMPRESSED))
                });
            unpacked = with_context(&DECOMPRESSOR, zstd::bulk::Decompressor::new, |z| {
                z.decompress(packed, cap)
            })
            .map_err(|e| {
                Error::DataCorruption(format!(
                    "{what}: a compressed value that does not decompress: {e}"
                ))
            })?;
            (v & !COMPRESSED, unpacked.as_slice())
        }
        Some((&v, body)) => (v, body),
        None => return Err(Error::DataCorruption(format!("{what}: empty value"))),
    };
    if v == T::VERSION {
        let (v, _) = bincode::serde::decode_from_slice(body, bincode::config::standard())
            .map_err(corrupt)?;
        return Ok(v);
    }
    match T::decode_old(v, body) {
        Some(r) => r.map_err(corrupt),
        None => Err(Error::DataCorruption(format!(
            "{what}: format version {v}, this strata reads {}",
            T::versions_read()
        ))),
    }
}

impl Store {
    /// A store over `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Store {
        Store {
            backend,
            expiry_changed: Arc::new(Notify::new()),
            earliest: Arc::new(AtomicU64::new(u64::MAX)),
            generation: Arc::new(AtomicU64::new(0)),
            read_only: false,
        }
    }

    /// Whether this store was opened without the right to write
    /// ([`Store::open_read_only`]): every write through it fails.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// A counter this process bumps after every write that can change a scope's tree or
    /// whether its nodes are live (nodes written or removed, sources written). Derived
    /// state read at generation `g` (read before the store is) is current while the
    /// generation is still `g` — in this process. `None` when other processes write to the
    /// same store (PostgreSQL): their writes bump nothing here, so nothing may be cached.
    pub fn generation(&self) -> Option<u64> {
        match self.backend.shared() {
            true => None,
            false => Some(self.generation.load(Ordering::Acquire)),
        }
    }

    /// Marks a write (see [`Store::generation`]); called after it, failed or not.
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Resolves when a deadline earlier than the one the sweeper sleeps on arrives.
    pub fn expiry_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.expiry_changed.notified()
    }

    /// Opens (or creates) the sled store in `dir`.
    pub fn open(dir: &Path) -> Result<Store> {
        Ok(Store::new(Arc::new(self::sled::SledBackend::open(dir)?)))
    }

    /// Opens the existing sled store in `dir` for a command that only reads: nothing is
    /// written to its files, and a write through it fails (`SledBackend::open_read_only`).
    /// A store that cannot be read that way (an older layout, files that need repair) is
    /// opened writable, as by [`Store::open`]; [`Store::is_read_only`] tells which.
    pub fn open_read_only(dir: &Path) -> Result<Store> {
        match self::sled::SledBackend::open_read_only(dir)? {
            Some(b) => {
                let mut s = Store::new(Arc::new(b));
                s.read_only = true;
                Ok(s)
            }
            None => Store::open(dir),
        }
    }

    /// Opens (or creates) the PostgreSQL store at `url` as replica `replica`, with a pool of
    /// `pool_size` connections; `keep` lives as long as the store (the lock on the
    /// replica's index directory).
    pub fn open_postgres(
        url: &str,
        replica: &str,
        pool_size: usize,
        keep: Option<Box<dyn Send + Sync>>,
    ) -> Result<Store> {
        Ok(Store::new(Arc::new(self::postgres::PgBackend::open(
            url, replica, pool_size, keep,
        )?)))
    }

    /// A sled store that lives in memory only (tests, benchmarks).
    pub fn temporary() -> Result<Store> {
        Ok(Store::new(Arc::new(self::sled::SledBackend::temporary()?)))
    }

    /// A store of plain maps in memory (tests).
    pub fn in_memory() -> Store {
        Store::new(Arc::new(memory::MemoryBackend::default()))
    }

    // ---- nodes ----

    /// Writes a node with its deadline, expiry entry and pending-index mark, atomically; a
    /// fallback mark it had is cleared (its model made it).
    pub fn put_node(&self, node: &Node) -> Result<()> {
        self.put_node_marked(node, None)
    }

    /// Writes a node, its deadline, expiry entry, pending-index mark and fallback mark
    /// (`None`: made by its model, which clears an earlier mark) atomically.
    pub fn put_node_marked(&self, node: &Node, mark: Option<FallbackMark>) -> Result<()> {
        self.write_nodes(std::slice::from_ref(node), mark)
    }

    /// Writes nodes made by their model (each with its deadline, expiry entry and
    /// pending-index mark) in one atomic step.
    pub fn put_nodes(&self, nodes: &[Node]) -> Result<()> {
        self.write_nodes(nodes, None)
    }

    /// Writes nodes, each with its deadline, expiry entry, pending-index mark and the
    /// fallback `mark`, in one atomic step.
    pub fn put_nodes_marked(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()> {
        self.write_nodes(nodes, mark)
    }

    fn write_nodes(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let r = self.backend.put_nodes(nodes, mark);
        self.bump();
        r?;
        if let Some(at) = nodes.iter().filter_map(|n| n.expires_at).min()
            && at < self.earliest.fetch_min(at, Ordering::AcqRel)
        {
            self.expiry_changed.notify_one();
        }
        Ok(())
    }

    /// The node, whether or not it has expired.
    pub fn get_node(&self, id: &NodeId) -> Result<Option<Node>> {
        self.backend.get_node(id)
    }

    /// The node if it exists and has not expired at `now`. Expired nodes are never served.
    pub fn get_live(&self, id: &NodeId, now: u64) -> Result<Option<Node>> {
        Ok(self.get_node(id)?.filter(|n| n.is_live(now)))
    }

    /// Whether a live node exists, without reading the node itself.
    pub fn contains_live(&self, id: &NodeId, now: u64) -> Result<bool> {
        Ok(self.backend.deadline(id)?.is_some_and(|at| at > now))
    }

    /// The earliest deadline of the nodes `ids` (one look-up for all of them); `None` when
    /// one of them is missing. They are all live at `now` iff it is after `now`.
    pub fn min_deadline(&self, ids: &[NodeId]) -> Result<Option<u64>> {
        let mut min = u64::MAX;
        for d in self.backend.deadlines(ids)? {
            match d {
                Some(at) => min = min.min(at),
                None => return Ok(None),
            }
        }
        Ok(Some(min))
    }

    /// Whether every one of `ids` is a live node (one look-up for all of them).
    pub fn all_live(&self, ids: &[NodeId], now: u64) -> Result<bool> {
        Ok(self
            .backend
            .deadlines(ids)?
            .iter()
            .all(|d| d.is_some_and(|at| at > now)))
    }

    /// Many nodes at once, in the order of `ids`, whether or not they expired.
    pub fn get_nodes(&self, ids: &[NodeId]) -> Result<Vec<Option<Node>>> {
        self.backend.get_nodes(ids)
    }

    /// The bytes a node's record takes in the store (`strata stats --bytes`).
    pub fn stored_bytes(&self, node: &Node) -> Result<u64> {
        Ok(self
            .backend
            .stored_bytes(&node.id)?
            .unwrap_or_else(|| record_bytes(node)))
    }

    /// Removes a node (with its deadline and expiry entry) and marks it for removal from
    /// the index, atomically. Returns whether it existed.
    pub fn remove_node(&self, id: &NodeId) -> Result<bool> {
        let r = self.backend.remove_node(id);
        self.bump();
        r
    }

    /// Removes every node whose deadline is at or before `now`; returns their ids. Each
    /// removal marks the node for removal from the index in the same atomic step.
    pub fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let removed = self.backend.sweep(now);
        self.bump();
        let removed = removed?;
        self.earliest
            .store(self.next_deadline()?.unwrap_or(u64::MAX), Ordering::Release);
        Ok(removed)
    }

    /// [`NodeStore::losses`].
    pub fn losses(&self) -> Result<Option<u64>> {
        self.backend.losses()
    }

    /// The earliest deadline of any node.
    pub fn next_deadline(&self) -> Result<Option<u64>> {
        self.backend.next_deadline()
    }

    pub fn node_ids(&self) -> Result<Vec<NodeId>> {
        self.backend.node_ids()
    }

    pub fn n_nodes(&self) -> usize {
        self.backend.n_nodes()
    }

    // ---- fallback marks: nodes the offline fallback made, or that were built over one ----

    /// The node's fallback mark (`None`: its model made it, or there is no such node).
    pub fn fallback_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>> {
        self.backend.fallback_mark(id)
    }

    /// Whether any node carries a mark (the common case, none, costs no lookups).
    pub fn has_fallback_marks(&self) -> bool {
        self.backend.n_fallback_marks() > 0
    }

    /// Marked nodes: all, and those the next build with the model retries.
    pub fn fallback_counts(&self) -> Result<FallbackCounts> {
        self.backend.fallback_counts()
    }

    // ---- scopes and sources ----

    pub fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>> {
        self.backend.get_scope(name)
    }

    /// The scope's head alone (one read; [`Store::get_scope`] reads its whole list).
    pub fn get_scope_head(&self, name: &str) -> Result<Option<ScopeHead>> {
        self.backend.get_scope_head(name)
    }

    /// The scope's entry for `source`, if it lists it (one read).
    pub fn get_entry(&self, scope: &str, source: &str) -> Result<Option<SourceEntry>> {
        self.backend.get_entry(scope, source)
    }

    pub fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        self.backend.scopes()
    }

    pub fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>> {
        self.backend.get_source(scope, source)
    }

    pub fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>> {
        self.backend.get_text(scope, source)
    }

    /// Many source records of one scope at once, in the order of `ids`.
    pub fn get_sources(&self, scope: &str, ids: &[&str]) -> Result<Vec<Option<SourceRecord>>> {
        self.backend.get_sources(scope, ids)
    }

    /// Applies one ingest step atomically: the scope's new head and entries, the sources it adds or
    /// replaces (record, text and FULL nodes), the sources and nodes it removes, and the
    /// pending-index marks of every node it writes or removes. A crash leaves the store
    /// before or after the whole step, never in between: the scope never lists a source
    /// the store lacks, a replaced source's old chunks go only with its new ones, and the
    /// scope's turn counter moves with the turn it numbered.
    pub fn write_sources(&self, step: &SourceStep) -> Result<()> {
        let r = self.backend.write_sources(step);
        self.bump();
        r
    }

    /// Applies one forget step atomically (see [`ForgetStep`]): a crash leaves the store
    /// before or after the whole step, never in between.
    pub fn forget(&self, step: &ForgetStep) -> Result<()> {
        let r = self.backend.forget(step);
        self.bump();
        r
    }

    // ---- the pending-index set: node changes the index has not committed ----

    /// Nodes whose change (write or removal) the index has not committed yet.
    pub fn pending_index(&self) -> Result<Vec<PendingMark>> {
        self.backend.pending_index()
    }

    /// How many node changes the index has not committed yet.
    pub fn n_pending_index(&self) -> usize {
        self.backend.n_pending_index()
    }

    pub fn has_pending_index(&self) -> bool {
        self.n_pending_index() > 0
    }

    /// Clears the marks of changes the index has committed. A mark whose generation moved
    /// since it was read (the node changed again meanwhile) stays for the next pass.
    pub fn clear_pending_index(&self, done: &[PendingMark]) -> Result<()> {
        self.backend.clear_pending_index(done)
    }

    // ---- embeddings: node vectors per embedder ----

    pub fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()> {
        self.backend.put_embeddings(model, vectors)
    }

    pub fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>> {
        self.backend.get_embedding(model, id)
    }

    pub fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool> {
        self.backend.has_embedding(model, id)
    }

    /// Vectors stored, for every embedder.
    pub fn n_embeddings(&self) -> usize {
        self.backend.n_embeddings()
    }

    /// Removes the vectors (of every embedder) whose node is no longer in the store.
    pub fn remove_orphan_embeddings(&self) -> Result<usize> {
        self.backend.remove_orphan_embeddings()
    }

    /// Drops the node's vectors of every embedder: its text is about to change under
    /// the same id (a fallback node remade by the model), so they no longer describe it.
    pub fn remove_node_embeddings(&self, id: &NodeId) -> Result<()> {
        self.backend.remove_node_embeddings(id)
    }

    // ---- views: the last complete tree of each scope ----

    /// What a writer leaves beside `scope`'s view for the processes that read it next (see
    /// [`NodeStore::losses`]); removed with the view by a forget.
    pub fn put_liveness<T: Record>(&self, scope: &str, record: &T) -> Result<()> {
        self.backend.put_liveness(scope, encode(record)?)
    }

    pub fn get_liveness<T: Record>(&self, scope: &str) -> Result<Option<T>> {
        match self.backend.get_liveness(scope)? {
            Some(v) => Ok(Some(decode(&format!("liveness of {scope}"), &v)?)),
            None => Ok(None),
        }
    }

    pub fn put_view<T: Record>(&self, scope: &str, view: &T) -> Result<()> {
        self.backend.put_view(scope, encode(view)?)
    }

    pub fn get_view<T: Record>(&self, scope: &str) -> Result<Option<T>> {
        match self.backend.get_view(scope)? {
            Some(v) => Ok(Some(decode(&format!("view of {scope}"), &v)?)),
            None => Ok(None),
        }
    }

    // ---- jobs: the background queue, surviving restarts ----

    pub fn enqueue_job(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        self.backend.enqueue_job(scope, kind, now)
    }

    pub fn claim_job(&self, who: &Claimant, now: u64) -> Result<Option<Job>> {
        self.backend.claim_job(who, now)
    }

    pub fn renew_job(&self, id: u64, who: &Claimant) -> Result<bool> {
        self.backend.renew_job(id, who)
    }

    pub fn finish_job(&self, job: &Job, who: &Claimant, keep: usize) -> Result<bool> {
        self.backend.finish_job(job, who, keep)
    }

    pub fn requeue_abandoned(&self, who: &Claimant) -> Result<usize> {
        self.backend.requeue_abandoned(who)
    }

    pub fn next_lease_expiry(&self) -> Result<Option<std::time::Duration>> {
        self.backend.next_lease_expiry()
    }

    pub fn get_job(&self, id: u64) -> Result<Option<Job>> {
        self.backend.get_job(id)
    }

    /// Every job, oldest first.
    pub fn jobs(&self) -> Result<Vec<Job>> {
        self.backend.jobs()
    }

    /// How many jobs wait to run.
    pub fn queued_jobs(&self) -> Result<usize> {
        self.backend.queued_jobs()
    }

    // ---- several processes on one store ----

    /// Holds `scope`'s record against writers in other processes until dropped.
    pub fn lock_scope(&self, scope: &str) -> Result<ScopeLock> {
        self.backend.lock_scope(scope)
    }

    /// Wake-ups for changes other processes made (`None`: no other process writes).
    pub fn events(&self) -> Option<Events> {
        self.backend.events()
    }

    /// Whether the index must be rebuilt from the store (it fell off the change feed).
    pub fn index_must_rebuild(&self) -> Result<bool> {
        self.backend.index_must_rebuild()
    }

    /// Every replica's index position (empty for the embedded backends).
    pub fn replicas(&self) -> Result<Vec<ReplicaStatus>> {
        self.backend.replicas()
    }

    pub fn heartbeat(&self) -> Result<()> {
        self.backend.heartbeat()
    }

    /// The name this process claims jobs under.
    pub fn replica_name(&self) -> String {
        self.backend.replica_name()
    }

    /// Durably writes everything to disk.
    pub fn flush(&self) -> Result<()> {
        self.backend.flush()
    }

    /// See [`Replication::checkpoint`]; nothing on a store opened read-only.
    pub fn checkpoint(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.backend.checkpoint()
    }

    pub fn size_on_disk(&self) -> u64 {
        self.backend.size_on_disk()
    }
}

#[cfg(test)]
mod encoding_tests {
    use super::*;

    #[test]
    fn long_values_are_stored_compressed_and_read_back_whole() {
        let text = "The harbour levy was capped at forty million. ".repeat(200);
        let v = encode(&text).unwrap();
        assert_eq!(v[0], <String as Record>::VERSION | COMPRESSED);
        assert!(v.len() * 5 < text.len(), "{} of {}", v.len(), text.len());
        assert_eq!(decode::<String>("text", &v).unwrap(), text);
        // Short values stay plain, byte for byte what a strata before compression wrote.
        let short = "Aye.".to_string();
        let v = encode(&short).unwrap();
        assert_eq!(v[0], <String as Record>::VERSION);
        assert_eq!(v, record::v1::encode(&short));
        assert_eq!(decode::<String>("text", &v).unwrap(), short);
        // A long value written plain (by an older strata) still reads.
        assert_eq!(
            decode::<String>("text", &record::v1::encode(&text)).unwrap(),
            text
        );
    }

    #[test]
    fn a_damaged_compressed_value_is_data_corruption_not_a_panic() {
        let text = "A long enough value to be compressed, said many times. ".repeat(50);
        let mut v = encode(&text).unwrap();
        let n = v.len();
        v[n / 2] ^= 0xff;
        v.truncate(n - 3);
        match decode::<String>("source s", &v) {
            Err(Error::DataCorruption(m)) => assert!(m.starts_with("source s: "), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
