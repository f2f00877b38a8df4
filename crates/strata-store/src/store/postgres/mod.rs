//! The PostgreSQL backend (`--db postgres://...`): one corpus shared by any number of
//! `strata serve` replicas and CLI processes. Only this module knows tokio-postgres.
//!
//! **Calls.** [`Backend`](super::Backend) is synchronous and is called from async code; the client is
//! async. So the backend owns a small tokio runtime of its own (two threads) that drives a
//! connection pool (deadpool-postgres); a call spawns its future there and blocks the
//! calling thread on a channel until it is done — never a nested `block_on`, so it is
//! safe from any thread, inside another runtime or not.
//!
//! **Durability.** Every write is one transaction, committed before the call returns,
//! with `synchronous_commit = on` for the session: a committed transaction is on disk, so
//! `flush` has nothing left to do. An ingest step ([`SourceStep`]) is one transaction;
//! a node, its deadline, its fallback mark and its row in the change feed are written in
//! the same statement batch of one transaction.
//!
//! **Many processes.** A scope's record is written under a session-level advisory lock
//! on the scope ([`Replication::lock_scope`]), fenced by a version column; jobs are claimed
//! with `FOR UPDATE SKIP LOCKED` under a lease (one running job per scope is a unique
//! index); node changes go to a feed (`node_changes`) that each replica's index follows
//! from its own watermark, woken by `LISTEN/NOTIFY`. See docs/ARCHITECTURE.md.

mod jobs;
mod nodes;
mod replicas;
mod schema;
pub mod scratch;
mod sources;

use super::job::{Claimant, Job, JobKind, JobOutcome, JobState};
use super::{
    EmbedKey, Events, FallbackCounts, ForgetStep, JobQueue, NodeStore, PendingMark, ReplicaStatus,
    Replication, ScopeHead, ScopeLock, ScopeRecord, SourceEntry, SourceRecord, SourceStep,
    SourceStore, StoredScope, VectorStore, decode, encode,
};
use crate::error::{Error, Result};
use crate::node::{FallbackMark, Node, NodeId};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, NoTls};

/// Whether `db` names a PostgreSQL database rather than a directory.
pub fn is_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// `url` with its password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &authority[..colon],
            &rest[at..]
        ),
        _ => url.to_string(),
    }
}

/// Replicas silent this long are forgotten: the feed is pruned past them, and they
/// rebuild their index when they come back.
const FORGET_REPLICAS_AFTER_SECS: i64 = 24 * 3600;
/// How often a replica prunes the feed (with its heartbeat).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Advisory lock classes (the first key of the two-key form).
const LOCK_SCOPE: i32 = 0x5354_5201;
const LOCK_ENQUEUE: i32 = 0x5354_5202;
const LOCK_MIGRATE: i32 = 0x5354_5203;
/// Held shared by every transaction that writes the change feed, from its first statement
/// (before it has a transaction id) to its commit: how a replica tells the feed's writers
/// among the transactions in progress.
const LOCK_FEED: i32 = 0x5354_5204;

/// The CTE `horizon(h)`: a transaction id below which every feed row is final (committed
/// or rolled back). The oldest transaction in progress that may write the feed — one that
/// holds [`LOCK_FEED`], or that finished between this statement's snapshot and its look
/// at the lock table — else the snapshot's `xmax`. Transactions of other applications
/// (or other databases of the cluster) do not hold it back. Parameter `$4` is
/// [`LOCK_FEED`].
const HORIZON: &str = "snap AS (SELECT pg_current_snapshot() AS s), \
     writers AS (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND classid = $4::int4::oid AND objid = 0 AND objsubid = 2), \
     others AS (SELECT transactionid::text::bigint AS x FROM pg_locks \
         WHERE locktype = 'transactionid' AND granted AND mode = 'ExclusiveLock' \
         AND pid NOT IN (SELECT pid FROM writers)), \
     running AS (SELECT x::text::bigint AS x8 FROM snap, pg_snapshot_xip(snap.s) AS x), \
     horizon AS (SELECT LEAST( \
         (SELECT pg_snapshot_xmax(s)::text::bigint FROM snap), \
         (SELECT min(x8) FROM running WHERE x8 % 4294967296 NOT IN (SELECT x FROM others)) \
     ) AS h)";

/// What a query inside the backend can fail with, before it becomes a [`crate::error::Error`].
#[derive(Debug)]
enum PgError {
    Pg(tokio_postgres::Error),
    Pool(String),
    Strata(Error),
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Pg(e)
    }
}

impl From<Error> for PgError {
    fn from(e: Error) -> Self {
        PgError::Strata(e)
    }
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => PgError::Pg(e),
            e => PgError::Pool(e.to_string()),
        }
    }
}

impl PgError {
    fn code(&self) -> Option<&SqlState> {
        match self {
            PgError::Pg(e) => e.code(),
            _ => None,
        }
    }

    /// A conflict with another transaction that running it again resolves.
    fn is_transient(&self) -> bool {
        matches!(
            self.code(),
            Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
        )
    }

    fn into_error(self, what: &str) -> Error {
        match self {
            PgError::Strata(e) => e,
            PgError::Pool(m) => Error::Store(format!("PostgreSQL ({what}): {m}")),
            PgError::Pg(e) => match e.as_db_error() {
                Some(db) => Error::Store(format!(
                    "PostgreSQL ({what}): {} [{}]",
                    db.message(),
                    db.code().code()
                )),
                None => Error::Store(format!("PostgreSQL ({what}): {}", one_line(&e))),
            },
        }
    }
}

/// An error and its causes on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cause = c.source();
    }
    s.replace('\n', " ")
}

type PgResult<T> = std::result::Result<T, PgError>;

/// Runs `f` again (a few times, with a short backoff) when it lost a serialization or
/// deadlock conflict with another transaction; its transaction was rolled back.
async fn retrying<T, F, Fut>(mut f: F) -> PgResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = PgResult<T>>,
{
    let mut attempt = 0u32;
    loop {
        match f().await {
            Err(e) if e.is_transient() && attempt < 8 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(2 << attempt.min(6))).await;
            }
            r => return r,
        }
    }
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn node_id(b: &[u8]) -> PgResult<NodeId> {
    let arr: [u8; 32] = b
        .try_into()
        .map_err(|_| Error::DataCorruption("a node id in PostgreSQL is not 32 bytes".into()))?;
    Ok(NodeId(arr))
}

fn text_of(b: Vec<u8>, what: &str) -> PgResult<String> {
    String::from_utf8(b).map_err(|_| {
        PgError::Strata(Error::DataCorruption(format!(
            "{what} in PostgreSQL is not UTF-8"
        )))
    })
}

/// The first key of an advisory lock on `name` (a hash: a collision only serialises two
/// scopes' writers).
fn lock_key(name: &str) -> i32 {
    let h = blake3::hash(name.as_bytes());
    i32::from_le_bytes(h.as_bytes()[..4].try_into().expect("4 bytes"))
}

/// Nodes as the columns of an `unnest` insert, one row per id (the last write of an id
/// wins, as it would in sequence), sorted by id so that concurrent writers lock rows in
/// one order.
struct NodeRows {
    ids: Vec<Vec<u8>>,
    expires: Vec<Option<i64>>,
    marks: Vec<Option<Vec<u8>>>,
    bodies: Vec<Vec<u8>>,
}

impl NodeRows {
    fn of<'a>(
        nodes: impl IntoIterator<Item = &'a Node>,
        mark: Option<FallbackMark>,
    ) -> Result<NodeRows> {
        let mark = mark.map(|m| encode(&m)).transpose()?;
        let mut rows = BTreeMap::new();
        for n in nodes {
            rows.insert(n.id.0, (n.expires_at.map(i64_of), encode(n)?));
        }
        let mut out = NodeRows {
            ids: Vec::with_capacity(rows.len()),
            expires: Vec::with_capacity(rows.len()),
            marks: Vec::with_capacity(rows.len()),
            bodies: Vec::with_capacity(rows.len()),
        };
        for (id, (at, body)) in rows {
            out.ids.push(id.to_vec());
            out.expires.push(at);
            out.marks.push(mark.clone());
            out.bodies.push(body);
        }
        Ok(out)
    }
}

const UPSERT_NODES: &str = "INSERT INTO nodes (id, expires_at, fallback, body) \
     SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::bytea[]) \
     ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at, \
     fallback = EXCLUDED.fallback, body = EXCLUDED.body";
const FEED: &str = "INSERT INTO node_changes (id) SELECT unnest($1::bytea[])";

/// Announces a transaction that will write the change feed (see [`HORIZON`]): its first
/// statement, before it has a transaction id.
async fn feed_writer(tx: &deadpool_postgres::Transaction<'_>) -> PgResult<()> {
    let st = tx
        .prepare_cached("SELECT pg_advisory_xact_lock_shared($1, 0)")
        .await?;
    tx.execute(&st, &[&LOCK_FEED]).await?;
    Ok(())
}

async fn write_nodes(tx: &deadpool_postgres::Transaction<'_>, rows: &NodeRows) -> PgResult<()> {
    if rows.ids.is_empty() {
        return Ok(());
    }
    let st = tx.prepare_cached(UPSERT_NODES).await?;
    tx.execute(&st, &[&rows.ids, &rows.expires, &rows.marks, &rows.bodies])
        .await?;
    feed(tx, &rows.ids).await
}

/// Rows in the change feed for `ids`, and a wake-up for the replicas at commit.
async fn feed(tx: &deadpool_postgres::Transaction<'_>, ids: &Vec<Vec<u8>>) -> PgResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let st = tx.prepare_cached(FEED).await?;
    tx.execute(&st, &[ids]).await?;
    tx.batch_execute("NOTIFY strata_nodes").await?;
    Ok(())
}

/// Removes nodes; returns the ids that existed (their feed rows written).
async fn remove_nodes(
    tx: &deadpool_postgres::Transaction<'_>,
    ids: &Vec<Vec<u8>>,
) -> PgResult<Vec<Vec<u8>>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let st = tx
        .prepare_cached("DELETE FROM nodes WHERE id = ANY($1) RETURNING id")
        .await?;
    let gone: Vec<Vec<u8>> = tx
        .query(&st, &[ids])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    feed(tx, &gone).await?;
    Ok(gone)
}

/// The store's scope locks held by this process: scope → the record's version when the
/// lock was taken (-1: no record yet), moved by this process's own writes.
type Fences = Arc<Mutex<HashMap<String, i64>>>;

pub struct PgBackend {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    pool: Pool,
    config: tokio_postgres::Config,
    /// This process's replica name: its index's place in the feed, its job claims.
    replica: String,
    /// Where the database is, for messages (no password).
    place: String,
    fences: Fences,
    /// Set when the replica's feed position was lost (it was forgotten and the feed
    /// pruned): the index must be rebuilt. Taken once.
    rebuild: AtomicBool,
    events: OnceLock<Events>,
    last_prune: Mutex<Option<Instant>>,
    /// Kept as long as the backend lives (the lock on the replica's index directory).
    _keep: Option<Box<dyn Send + Sync>>,
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        // Not `Runtime::drop`, which blocks and panics inside another runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Where a connection config points, without its password.
fn place_of(cfg: &tokio_postgres::Config) -> String {
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let db = cfg.get_dbname().or(cfg.get_user()).unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

impl PgBackend {
    /// Connects to `url` (a `postgres://` URL or a libpq key=value string) with a pool of
    /// `pool_size` connections, creates or migrates the schema, and registers this
    /// process as replica `replica` (one live process per name). `keep` lives as long as
    /// the backend. Errors are one line: the database unreachable, a schema newer than
    /// this binary.
    pub fn open(
        url: &str,
        replica: &str,
        pool_size: usize,
        keep: Option<Box<dyn Send + Sync>>,
    ) -> Result<PgBackend> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            Error::Config(format!(
                "--db {}: not a PostgreSQL connection string ({e})",
                redact(url)
            ))
        })?;
        config
            .application_name("strata")
            .options("-c synchronous_commit=on")
            .connect_timeout(Duration::from_secs(10));
        let place = place_of(&config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("strata-postgres")
            .enable_all()
            .build()
            .map_err(|e| Error::Store(format!("cannot start the PostgreSQL runtime: {e}")))?;
        let handle = rt.handle().clone();
        let mgr = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            let _enter = rt.enter();
            Pool::builder(mgr)
                .max_size(pool_size.max(2))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .create_timeout(Some(Duration::from_secs(10)))
                .wait_timeout(Some(Duration::from_secs(60)))
                .build()
                .map_err(|e| Error::Store(format!("PostgreSQL pool: {e}")))?
        };
        let b = PgBackend {
            rt: Some(rt),
            handle,
            pool,
            config,
            replica: replica.to_string(),
            place,
            fences: Arc::default(),
            rebuild: AtomicBool::new(false),
            events: OnceLock::new(),
            last_prune: Mutex::new(None),
            _keep: keep,
        };
        let pool = b.pool.clone();
        let place = b.place.clone();
        b.run("connect", async move {
            pool.get().await.map(drop).map_err(|e| {
                PgError::Strata(Error::Store(format!(
                    "cannot reach PostgreSQL at {place}: {}",
                    match e {
                        deadpool_postgres::PoolError::Backend(e) => one_line(&e),
                        e => e.to_string(),
                    }
                )))
            })
        })?;
        b.migrate()?;
        b.register(true)?;
        Ok(b)
    }

    /// Runs `f` on the backend's runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl Future<Output = PgResult<T>> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(f.await);
        });
        match rx.recv() {
            Ok(r) => r.map_err(|e| e.into_error(what)),
            Err(_) => Err(Error::Store(format!(
                "PostgreSQL ({what}): the store's runtime stopped"
            ))),
        }
    }

    /// Runs `f` in one transaction (again, when it lost a conflict with another).
    fn tx<T, F>(&self, what: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> Fn(
                &'a deadpool_postgres::Transaction<'a>,
            )
                -> std::pin::Pin<Box<dyn Future<Output = PgResult<T>> + Send + 'a>>
            + Send
            + Sync
            + 'static,
    {
        let pool = self.pool.clone();
        self.run(what, async move {
            retrying(|| async {
                let mut c = pool.get().await?;
                let tx = c.transaction().await?;
                let v = f(&tx).await?;
                tx.commit().await?;
                Ok(v)
            })
            .await
        })
    }

    /// Runs one read (no transaction of its own).
    fn read<T, F>(&self, what: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> Fn(
                &'a deadpool_postgres::Client,
            )
                -> std::pin::Pin<Box<dyn Future<Output = PgResult<T>> + Send + 'a>>
            + Send
            + Sync
            + 'static,
    {
        let pool = self.pool.clone();
        self.run(what, async move {
            let c = pool.get().await?;
            f(&c).await
        })
    }

    /// The rows `sql` selects for the ids `keys` — its last parameter, `= ANY(..)`, after
    /// `scope` as `$1` when given — by their first column (the id), each made a value by
    /// `value`: the one way batches of nodes, deadlines and source records are read.
    fn by_ids<V: Send + 'static>(
        &self,
        what: &'static str,
        sql: &'static str,
        scope: Option<Vec<u8>>,
        keys: Vec<Vec<u8>>,
        value: fn(&tokio_postgres::Row) -> V,
    ) -> Result<HashMap<Vec<u8>, V>> {
        let (scope, keys) = (Arc::new(scope), Arc::new(keys));
        self.read(what, move |c| {
            let (scope, keys) = (scope.clone(), keys.clone());
            Box::pin(async move {
                let st = c.prepare_cached(sql).await?;
                let rows = match &*scope {
                    Some(s) => c.query(&st, &[s, &*keys]).await?,
                    None => c.query(&st, &[&*keys]).await?,
                };
                Ok(rows
                    .iter()
                    .map(|r| (r.get::<_, Vec<u8>>(0), value(r)))
                    .collect())
            })
        })
    }

    /// A count that cannot fail the caller (`n_nodes` and friends): 0 and a warning.
    fn count(&self, what: &'static str, sql: &'static str) -> usize {
        let r = self.read(what, move |c| {
            Box::pin(async move {
                let st = c.prepare_cached(sql).await?;
                Ok(c.query_one(&st, &[]).await?.get::<_, i64>(0))
            })
        });
        match r {
            Ok(n) => usize::try_from(n).unwrap_or(0),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count {what}");
                0
            }
        }
    }

    fn migrate(&self) -> Result<()> {
        let place = self.place.clone();
        self.tx("schema migration", move |tx| {
            let place = place.clone();
            Box::pin(async move {
                tx.batch_execute(
                    "CREATE TABLE IF NOT EXISTS strata_migrations (
                         version integer PRIMARY KEY,
                         description text NOT NULL,
                         applied_at timestamptz NOT NULL DEFAULT now())",
                )
                .await?;
                tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_MIGRATE])
                    .await?;
                let have: i32 = tx
                    .query_one(
                        "SELECT coalesce(max(version), 0) FROM strata_migrations",
                        &[],
                    )
                    .await?
                    .get(0);
                let latest = schema::latest();
                if have > latest {
                    return Err(Error::Store(format!(
                        "the database at {place} has schema version {have}, newer than this strata knows ({latest}): upgrade strata"
                    ))
                    .into());
                }
                for m in schema::MIGRATIONS.iter().filter(|m| m.version > have) {
                    tracing::info!(version = m.version, "migrating the PostgreSQL schema");
                    tx.batch_execute(m.sql).await?;
                    tx.execute(
                        "INSERT INTO strata_migrations (version, description) VALUES ($1, $2)",
                        &[&m.version, &m.description],
                    )
                    .await?;
                }
                Ok(())
            })
        })
    }
}

#[cfg(test)]
mod tests;
