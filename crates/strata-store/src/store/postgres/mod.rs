//! The PostgreSQL backend (`--db postgres://...`): one corpus shared by any number of
//! `strata serve` replicas and CLI processes. Only this module knows tokio-postgres.
//!
//! **Calls.** [`Backend`] is synchronous and is called from async code; the client is
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
//! on the scope ([`Backend::lock_scope`]), fenced by a version column; jobs are claimed
//! with `FOR UPDATE SKIP LOCKED` under a lease (one running job per scope is a unique
//! index); node changes go to a feed (`node_changes`) that each replica's index follows
//! from its own watermark, woken by `LISTEN/NOTIFY`. See docs/ARCHITECTURE.md.

mod schema;
pub mod scratch;

use super::job::{Claimant, Job, JobKind, JobOutcome, JobState};
use super::{
    Backend, EmbedKey, Events, FallbackCounts, ForgetStep, PendingMark, ReplicaStatus, ScopeLock,
    ScopeRecord, SourceRecord, SourceStep, decode, encode,
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

const JOB_COLS: &str =
    "id, scope, kind, state, created_at, started_at, finished_at, attempts, outcome, error";

fn job_of(r: &tokio_postgres::Row) -> PgResult<Job> {
    let id: i64 = r.get(0);
    let kind = match r.get::<_, &str>(2) {
        "compress" => JobKind::Compress,
        "warm" => JobKind::Warm,
        k => {
            return Err(Error::DataCorruption(format!("job {id}: unknown kind {k:?}")).into());
        }
    };
    let state = match r.get::<_, &str>(3) {
        "queued" => JobState::Queued,
        "running" => JobState::Running,
        "done" => JobState::Done,
        "failed" => JobState::Failed,
        s => {
            return Err(Error::DataCorruption(format!("job {id}: unknown state {s:?}")).into());
        }
    };
    let outcome = match r.get::<_, Option<&[u8]>>(8) {
        Some(b) => Some(decode::<JobOutcome>(&format!("outcome of job {id}"), b)?),
        None => None,
    };
    Ok(Job {
        id: u64_of(id),
        scope: text_of(r.get(1), "a job's scope")?,
        kind,
        state,
        created_at: u64_of(r.get(4)),
        started_at: r.get::<_, Option<i64>>(5).map(u64_of),
        finished_at: r.get::<_, Option<i64>>(6).map(u64_of),
        attempts: u32::try_from(r.get::<_, i32>(7)).unwrap_or(0),
        outcome,
        error: r.get(9),
    })
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

    /// Makes sure this replica has a row (a position in the feed). A replica that had
    /// none, on a feed that was ever pruned, rebuilds its index.
    fn register(&self, at_open: bool) -> Result<()> {
        let name = self.replica.clone();
        let (inserted, pruned) = self.tx("replica registration", move |tx| {
            let name = name.clone();
            Box::pin(async move {
                let pruned: i64 = tx
                    .query_one(
                        "SELECT value FROM strata_meta WHERE key = 'feed_pruned_below'",
                        &[],
                    )
                    .await?
                    .get(0);
                let r = tx
                    .query_one(
                        "INSERT INTO replicas (name, watermark) VALUES ($1, 0) \
                         ON CONFLICT (name) DO UPDATE SET seen_at = now() \
                         RETURNING (xmax = 0), watermark",
                        &[&name],
                    )
                    .await?;
                let (inserted, w): (bool, i64) = (r.get(0), r.get(1));
                Ok((inserted || w < pruned, pruned))
            })
        })?;
        if inserted && pruned > 0 {
            if !at_open {
                tracing::warn!(
                    replica = %self.replica,
                    "this replica was forgotten (silent for a day); its index is rebuilt"
                );
            }
            self.rebuild.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Drops the feed rows every remembered replica has indexed, and forgets replicas
    /// silent for [`FORGET_REPLICAS_AFTER_SECS`]. At most every [`PRUNE_EVERY`].
    fn prune(&self) -> Result<()> {
        {
            let mut last = self.last_prune.lock().expect("poisoned");
            if last.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        self.tx("feed pruning", |tx| {
            Box::pin(async move {
                tx.execute(
                    "DELETE FROM replicas WHERE seen_at < now() - $1 * interval '1 second'",
                    &[&(FORGET_REPLICAS_AFTER_SECS as f64)],
                )
                .await?;
                let low: Option<i64> = tx
                    .query_one("SELECT min(watermark) FROM replicas", &[])
                    .await?
                    .get(0);
                if let Some(low) = low {
                    tx.execute(
                        "UPDATE strata_meta SET value = GREATEST(value, $1) \
                         WHERE key = 'feed_pruned_below'",
                        &[&low],
                    )
                    .await?;
                    tx.execute("DELETE FROM node_changes WHERE xid < $1", &[&low])
                        .await?;
                }
                Ok(())
            })
        })
    }

    /// Listens for the replicas' wake-ups on a connection of its own, reconnecting when
    /// it drops (and then signalling both, since anything may have changed meanwhile).
    fn listen(&self) -> Events {
        let (nodes_tx, nodes) = watch::channel(0u64);
        let (jobs_tx, jobs) = watch::channel(0u64);
        let config = self.config.clone();
        self.handle.spawn(async move {
            loop {
                match config.connect(NoTls).await {
                    Ok((client, mut conn)) => {
                        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                        let driver = tokio::spawn(async move {
                            let mut messages = futures::stream::poll_fn(move |cx| {
                                conn.poll_message(cx)
                            });
                            use futures::StreamExt as _;
                            while let Some(m) = messages.next().await {
                                match m {
                                    Ok(AsyncMessage::Notification(n)) => {
                                        let _ = tx.send(n.channel().to_string());
                                    }
                                    Ok(_) => {}
                                    Err(_) => break,
                                }
                            }
                        });
                        if client
                            .batch_execute("LISTEN strata_nodes; LISTEN strata_jobs")
                            .await
                            .is_ok()
                        {
                            nodes_tx.send_modify(|n| *n += 1);
                            jobs_tx.send_modify(|n| *n += 1);
                            while let Some(channel) = rx.recv().await {
                                match channel.as_str() {
                                    "strata_nodes" => nodes_tx.send_modify(|n| *n += 1),
                                    _ => jobs_tx.send_modify(|n| *n += 1),
                                }
                            }
                        }
                        driver.abort();
                        drop(client);
                    }
                    Err(e) => {
                        tracing::warn!(error = %one_line(&e), "cannot listen for other replicas' changes; retrying");
                    }
                }
                if nodes_tx.is_closed() && jobs_tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Events { nodes, jobs }
    }
}

/// A held scope lock: the pooled connection whose session holds the advisory lock.
struct PgScopeLock {
    client: Option<deadpool_postgres::Object>,
    key: i32,
    scope: String,
    handle: tokio::runtime::Handle,
    fences: Fences,
}

impl Drop for PgScopeLock {
    fn drop(&mut self) {
        self.fences.lock().expect("poisoned").remove(&self.scope);
        let Some(client) = self.client.take() else {
            return;
        };
        let key = self.key;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let ok = client
                .execute("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_SCOPE, &key])
                .await
                .is_ok();
            if !ok {
                // Never hand a session that may still hold the lock back to the pool:
                // closing it releases the lock.
                drop(deadpool_postgres::Object::take(client));
            }
            let _ = tx.send(());
        });
        let _ = rx.recv();
    }
}

impl Backend for PgBackend {
    fn put_nodes(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()> {
        let rows = Arc::new(NodeRows::of(nodes, mark)?);
        self.tx("node write", move |tx| {
            let rows = rows.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                write_nodes(tx, &rows).await
            })
        })
    }

    fn get_node(&self, id: &NodeId) -> Result<Option<Node>> {
        let key = id.0.to_vec();
        let body = self.read("node read", move |c| {
            let id = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT body FROM nodes WHERE id = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&id])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        body.map(|b| decode(&format!("node {id}"), &b)).transpose()
    }

    fn deadline(&self, id: &NodeId) -> Result<Option<u64>> {
        let id = id.0.to_vec();
        self.read("deadline read", move |c| {
            let id = id.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT expires_at FROM nodes WHERE id = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&id])
                    .await?
                    .map(|r| r.get::<_, Option<i64>>(0).map_or(u64::MAX, u64_of)))
            })
        })
    }

    fn remove_node(&self, id: &NodeId) -> Result<bool> {
        let ids = Arc::new(vec![id.0.to_vec()]);
        self.tx("node removal", move |tx| {
            let ids = ids.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                Ok(!remove_nodes(tx, &ids).await?.is_empty())
            })
        })
    }

    fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let now = i64_of(now);
        let gone = self.tx("sweep", move |tx| {
            Box::pin(async move {
                feed_writer(tx).await?;
                let st = tx
                    .prepare_cached("DELETE FROM nodes WHERE expires_at <= $1 RETURNING id")
                    .await?;
                let gone: Vec<Vec<u8>> = tx
                    .query(&st, &[&now])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                feed(tx, &gone).await?;
                Ok(gone)
            })
        })?;
        let mut ids = gone
            .iter()
            .map(|b| node_id(b))
            .collect::<PgResult<Vec<_>>>()
            .map_err(|e| e.into_error("sweep"))?;
        ids.sort();
        Ok(ids)
    }

    fn next_deadline(&self) -> Result<Option<u64>> {
        self.read("next deadline", |c| {
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT min(expires_at) FROM nodes")
                    .await?;
                Ok(c.query_one(&st, &[])
                    .await?
                    .get::<_, Option<i64>>(0)
                    .map(u64_of))
            })
        })
    }

    fn node_ids(&self) -> Result<Vec<NodeId>> {
        self.read("node ids", |c| {
            Box::pin(async move {
                c.query("SELECT id FROM nodes ORDER BY id", &[])
                    .await?
                    .iter()
                    .map(|r| node_id(r.get(0)))
                    .collect()
            })
        })
    }

    fn n_nodes(&self) -> usize {
        self.count("nodes", "SELECT count(*) FROM nodes")
    }

    fn get_nodes(&self, ids: &[NodeId]) -> Result<Vec<Option<Node>>> {
        let keys: Arc<Vec<Vec<u8>>> = Arc::new(ids.iter().map(|id| id.0.to_vec()).collect());
        let rows = self.read("node reads", move |c| {
            let keys = keys.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT id, body FROM nodes WHERE id = ANY($1)")
                    .await?;
                Ok(c.query(&st, &[&*keys])
                    .await?
                    .into_iter()
                    .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
                    .collect::<HashMap<_, _>>())
            })
        })?;
        ids.iter()
            .map(|id| {
                rows.get(&id.0[..])
                    .map(|b| decode(&format!("node {id}"), b))
                    .transpose()
            })
            .collect()
    }

    fn deadlines(&self, ids: &[NodeId]) -> Result<Vec<Option<u64>>> {
        let keys: Arc<Vec<Vec<u8>>> = Arc::new(ids.iter().map(|id| id.0.to_vec()).collect());
        let rows = self.read("deadline reads", move |c| {
            let keys = keys.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT id, expires_at FROM nodes WHERE id = ANY($1)")
                    .await?;
                Ok(c.query(&st, &[&*keys])
                    .await?
                    .into_iter()
                    .map(|r| {
                        (
                            r.get::<_, Vec<u8>>(0),
                            r.get::<_, Option<i64>>(1).map_or(u64::MAX, u64_of),
                        )
                    })
                    .collect::<HashMap<_, _>>())
            })
        })?;
        Ok(ids.iter().map(|id| rows.get(&id.0[..]).copied()).collect())
    }

    fn get_sources(&self, scope: &str, ids: &[&str]) -> Result<Vec<Option<SourceRecord>>> {
        let name = scope.as_bytes().to_vec();
        let keys: Arc<Vec<Vec<u8>>> =
            Arc::new(ids.iter().map(|id| id.as_bytes().to_vec()).collect());
        let rows = self.read("source reads", move |c| {
            let (name, keys) = (name.clone(), keys.clone());
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT id, record FROM sources WHERE scope = $1 AND id = ANY($2)",
                    )
                    .await?;
                Ok(c.query(&st, &[&name, &*keys])
                    .await?
                    .into_iter()
                    .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
                    .collect::<HashMap<_, _>>())
            })
        })?;
        ids.iter()
            .map(|id| {
                rows.get(id.as_bytes())
                    .map(|b| decode(&format!("source {id}"), b))
                    .transpose()
            })
            .collect()
    }

    fn fallback_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>> {
        let key = id.0.to_vec();
        let b = self.read("fallback mark", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT fallback FROM nodes WHERE id = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&key])
                    .await?
                    .and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("fallback mark of {id}"), &b))
            .transpose()
    }

    fn n_fallback_marks(&self) -> usize {
        self.count(
            "fallback marks",
            "SELECT count(*) FROM nodes WHERE fallback IS NOT NULL",
        )
    }

    fn fallback_counts(&self) -> Result<FallbackCounts> {
        let marks = self.read("fallback marks", |c| {
            Box::pin(async move {
                Ok(
                    c.query("SELECT fallback FROM nodes WHERE fallback IS NOT NULL", &[])
                        .await?
                        .iter()
                        .map(|r| r.get::<_, Vec<u8>>(0))
                        .collect::<Vec<_>>(),
                )
            })
        })?;
        let mut c = FallbackCounts::default();
        for m in marks {
            c.nodes += 1;
            if decode::<FallbackMark>("fallback mark", &m)?.is_retried() {
                c.awaiting_model += 1;
            }
        }
        Ok(c)
    }

    fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>> {
        let key = name.as_bytes().to_vec();
        let b = self.read("scope read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT body FROM scopes WHERE name = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&key])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("scope {name}"), &b)).transpose()
    }

    fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        let bodies = self.read("scopes", |c| {
            Box::pin(async move {
                Ok(c.query("SELECT body FROM scopes ORDER BY name", &[])
                    .await?
                    .iter()
                    .map(|r| r.get::<_, Vec<u8>>(0))
                    .collect::<Vec<_>>())
            })
        })?;
        bodies.iter().map(|b| decode("scope", b)).collect()
    }

    fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>> {
        let (s, id) = (scope.as_bytes().to_vec(), source.as_bytes().to_vec());
        let b = self.read("source read", move |c| {
            let (s, id) = (s.clone(), id.clone());
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT record FROM sources WHERE scope = $1 AND id = $2")
                    .await?;
                Ok(c.query_opt(&st, &[&s, &id])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("source {source}"), &b))
            .transpose()
    }

    fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>> {
        let (s, id) = (scope.as_bytes().to_vec(), source.as_bytes().to_vec());
        self.read("text read", move |c| {
            let (s, id) = (s.clone(), id.clone());
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT text FROM sources WHERE scope = $1 AND id = $2")
                    .await?;
                match c.query_opt(&st, &[&s, &id]).await? {
                    Some(r) => Ok(Some(text_of(r.get(0), "a source text")?)),
                    None => Ok(None),
                }
            })
        })
    }

    fn write_sources(&self, step: &SourceStep) -> Result<()> {
        struct Step {
            scope: String,
            name: Vec<u8>,
            body: Vec<u8>,
            nodes: NodeRows,
            source_ids: Vec<Vec<u8>>,
            records: Vec<Vec<u8>>,
            texts: Vec<Vec<u8>>,
            remove_nodes: Vec<Vec<u8>>,
            remove_sources: Vec<Vec<u8>>,
            fence: Option<i64>,
        }
        let scope = step.scope.name.clone();
        let fence = self.fences.lock().expect("poisoned").get(&scope).copied();
        let s = Arc::new(Step {
            name: scope.as_bytes().to_vec(),
            body: encode(&step.scope)?,
            nodes: NodeRows::of(step.put.iter().flat_map(|p| &p.nodes), None)?,
            source_ids: step
                .put
                .iter()
                .map(|p| p.record.id.as_bytes().to_vec())
                .collect(),
            records: step
                .put
                .iter()
                .map(|p| encode(&p.record))
                .collect::<Result<_>>()?,
            texts: step
                .put
                .iter()
                .map(|p| p.text.as_bytes().to_vec())
                .collect(),
            remove_nodes: step.remove_nodes.iter().map(|id| id.0.to_vec()).collect(),
            remove_sources: step
                .remove_sources
                .iter()
                .map(|id| id.as_bytes().to_vec())
                .collect(),
            fence,
            scope,
        });
        let s2 = s.clone();
        let version = self.tx("source write", move |tx| {
            let s = s2.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                let st = tx
                    .prepare_cached("SELECT version FROM scopes WHERE name = $1 FOR UPDATE")
                    .await?;
                let now = tx
                    .query_opt(&st, &[&s.name])
                    .await?
                    .map_or(-1, |r| r.get::<_, i64>(0));
                if let Some(expected) = s.fence
                    && expected != now
                {
                    return Err(Error::Store(format!(
                        "scope `{}` changed while this process held its lock (the connection holding it was lost); nothing was written: retry",
                        s.scope
                    ))
                    .into());
                }
                write_nodes(tx, &s.nodes).await?;
                if !s.source_ids.is_empty() {
                    let st = tx
                        .prepare_cached(
                            "INSERT INTO sources (scope, id, record, text) \
                             SELECT $1, * FROM unnest($2::bytea[], $3::bytea[], $4::bytea[]) \
                             ON CONFLICT (scope, id) DO UPDATE \
                             SET record = EXCLUDED.record, text = EXCLUDED.text",
                        )
                        .await?;
                    tx.execute(&st, &[&s.name, &s.source_ids, &s.records, &s.texts])
                        .await?;
                }
                remove_nodes(tx, &s.remove_nodes).await?;
                if !s.remove_sources.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM sources WHERE scope = $1 AND id = ANY($2)")
                        .await?;
                    tx.execute(&st, &[&s.name, &s.remove_sources]).await?;
                }
                let st = tx
                    .prepare_cached(
                        "INSERT INTO scopes (name, body) VALUES ($1, $2) \
                         ON CONFLICT (name) DO UPDATE \
                         SET body = EXCLUDED.body, version = scopes.version + 1 \
                         RETURNING version",
                    )
                    .await?;
                Ok(tx.query_one(&st, &[&s.name, &s.body]).await?.get::<_, i64>(0))
            })
        })?;
        if let Some(v) = self.fences.lock().expect("poisoned").get_mut(&s.scope) {
            *v = version;
        }
        Ok(())
    }

    fn forget(&self, step: &ForgetStep) -> Result<()> {
        struct Step {
            scope: String,
            name: Vec<u8>,
            body: Option<Vec<u8>>,
            remove_nodes: Vec<Vec<u8>>,
            remove_sources: Vec<Vec<u8>>,
            fence: Option<i64>,
        }
        let scope = step.scope.clone();
        let fence = self.fences.lock().expect("poisoned").get(&scope).copied();
        let s = Arc::new(Step {
            name: scope.as_bytes().to_vec(),
            body: step.record.as_ref().map(encode).transpose()?,
            remove_nodes: step.remove_nodes.iter().map(|id| id.0.to_vec()).collect(),
            remove_sources: step
                .remove_sources
                .iter()
                .map(|id| id.as_bytes().to_vec())
                .collect(),
            fence,
            scope,
        });
        let s2 = s.clone();
        let version = self.tx("forget", move |tx| {
            let s = s2.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                let st = tx
                    .prepare_cached("SELECT version FROM scopes WHERE name = $1 FOR UPDATE")
                    .await?;
                let now = tx
                    .query_opt(&st, &[&s.name])
                    .await?
                    .map_or(-1, |r| r.get::<_, i64>(0));
                if let Some(expected) = s.fence
                    && expected != now
                {
                    return Err(Error::Store(format!(
                        "scope `{}` changed while this process held its lock (the connection holding it was lost); nothing was written: retry",
                        s.scope
                    ))
                    .into());
                }
                remove_nodes(tx, &s.remove_nodes).await?;
                if !s.remove_nodes.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM embeddings WHERE id = ANY($1)")
                        .await?;
                    tx.execute(&st, &[&s.remove_nodes]).await?;
                }
                if !s.remove_sources.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM sources WHERE scope = $1 AND id = ANY($2)")
                        .await?;
                    tx.execute(&st, &[&s.name, &s.remove_sources]).await?;
                }
                let st = tx
                    .prepare_cached("DELETE FROM views WHERE scope = $1")
                    .await?;
                tx.execute(&st, &[&s.name]).await?;
                match &s.body {
                    Some(body) => {
                        let st = tx
                            .prepare_cached(
                                "UPDATE scopes SET body = $2, version = version + 1 \
                                 WHERE name = $1 RETURNING version",
                            )
                            .await?;
                        Ok(tx.query_one(&st, &[&s.name, body]).await?.get::<_, i64>(0))
                    }
                    None => {
                        let st = tx
                            .prepare_cached("DELETE FROM scopes WHERE name = $1")
                            .await?;
                        tx.execute(&st, &[&s.name]).await?;
                        Ok(-1)
                    }
                }
            })
        })?;
        if let Some(v) = self.fences.lock().expect("poisoned").get_mut(&s.scope) {
            *v = version;
        }
        Ok(())
    }

    fn pending_index(&self) -> Result<Vec<PendingMark>> {
        let name = self.replica.clone();
        let rows = self.read("change feed", move |c| {
            let name = name.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT id, max(seq) FROM node_changes \
                         WHERE xid >= (SELECT watermark FROM replicas WHERE name = $1) \
                         GROUP BY id ORDER BY id",
                    )
                    .await?;
                c.query(&st, &[&name])
                    .await?
                    .iter()
                    .map(|r| {
                        Ok(PendingMark {
                            id: node_id(r.get(0))?,
                            generation: u64_of(r.get(1)),
                        })
                    })
                    .collect::<PgResult<Vec<_>>>()
            })
        })?;
        Ok(rows)
    }

    fn n_pending_index(&self) -> usize {
        let name = self.replica.clone();
        let r = self.read("change feed", move |c| {
            let name = name.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT count(DISTINCT id) FROM node_changes \
                         WHERE xid >= (SELECT watermark FROM replicas WHERE name = $1)",
                    )
                    .await?;
                Ok(c.query_one(&st, &[&name]).await?.get::<_, i64>(0))
            })
        });
        match r {
            Ok(n) => usize::try_from(n).unwrap_or(0),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count pending index changes");
                0
            }
        }
    }

    /// Moves this replica's watermark past every feed row the index has applied: to the
    /// oldest transaction still running, or to the oldest row not covered by `done` (a
    /// change made after the marks were read), whichever is lower. Rows above it that
    /// were applied are applied again next time (idempotent), none is skipped.
    fn clear_pending_index(&self, done: &[PendingMark]) -> Result<()> {
        if done.is_empty() {
            return Ok(());
        }
        let name = self.replica.clone();
        let ids: Arc<Vec<Vec<u8>>> = Arc::new(done.iter().map(|m| m.id.0.to_vec()).collect());
        let gens: Arc<Vec<i64>> = Arc::new(done.iter().map(|m| i64_of(m.generation)).collect());
        self.tx("index watermark", move |tx| {
            let (name, ids, gens) = (name.clone(), ids.clone(), gens.clone());
            Box::pin(async move {
                let st = tx
                    .prepare_cached(
                        &format!("WITH {HORIZON}, done(id, g) AS (SELECT * FROM unnest($2::bytea[], $3::int8[])), \
                         w AS (SELECT watermark FROM replicas WHERE name = $1), \
                         open AS (SELECT min(c.xid) AS x FROM node_changes c \
                                  LEFT JOIN done d ON d.id = c.id \
                                  WHERE c.xid >= (SELECT watermark FROM w) \
                                  AND (d.g IS NULL OR c.seq > d.g)) \
                         UPDATE replicas SET seen_at = now(), watermark = GREATEST(watermark, \
                             LEAST((SELECT h FROM horizon), (SELECT x FROM open))) \
                         WHERE name = $1"
                        ),
                    )
                    .await?;
                tx.execute(&st, &[&name, &*ids, &*gens, &LOCK_FEED]).await?;
                Ok(())
            })
        })
    }

    fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()> {
        let mut rows = BTreeMap::new();
        for (id, v) in vectors {
            rows.insert(id.0.to_vec(), encode(v)?);
        }
        let (ids, vecs): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
        let data = Arc::new((model.0.to_vec(), ids, vecs));
        self.tx("vector write", move |tx| {
            let d = data.clone();
            Box::pin(async move {
                let st = tx
                    .prepare_cached(
                        "INSERT INTO embeddings (model, id, vector) \
                         SELECT $1, * FROM unnest($2::bytea[], $3::bytea[]) \
                         ON CONFLICT (model, id) DO UPDATE SET vector = EXCLUDED.vector",
                    )
                    .await?;
                tx.execute(&st, &[&d.0, &d.1, &d.2]).await?;
                Ok(())
            })
        })
    }

    fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>> {
        let key = (model.0.to_vec(), id.0.to_vec());
        let b = self.read("vector read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT vector FROM embeddings WHERE model = $1 AND id = $2")
                    .await?;
                Ok(c.query_opt(&st, &[&key.0, &key.1])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("embedding of {id}"), &b))
            .transpose()
    }

    fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool> {
        let key = (model.0.to_vec(), id.0.to_vec());
        self.read("vector read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT 1 FROM embeddings WHERE model = $1 AND id = $2")
                    .await?;
                Ok(c.query_opt(&st, &[&key.0, &key.1]).await?.is_some())
            })
        })
    }

    fn n_embeddings(&self) -> usize {
        self.count("vectors", "SELECT count(*) FROM embeddings")
    }

    fn remove_orphan_embeddings(&self) -> Result<usize> {
        let n = self.tx("vector cleanup", |tx| {
            Box::pin(async move {
                Ok(tx
                    .execute(
                        "DELETE FROM embeddings e \
                         WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = e.id)",
                        &[],
                    )
                    .await?)
            })
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn remove_node_embeddings(&self, id: &NodeId) -> Result<()> {
        let id = id.0.to_vec();
        self.tx("vector removal", move |tx| {
            let id = id.clone();
            Box::pin(async move {
                tx.execute("DELETE FROM embeddings WHERE id = $1", &[&id])
                    .await?;
                Ok(())
            })
        })
    }

    fn put_view(&self, scope: &str, bytes: Vec<u8>) -> Result<()> {
        let data = Arc::new((scope.as_bytes().to_vec(), bytes));
        self.tx("view write", move |tx| {
            let d = data.clone();
            Box::pin(async move {
                let st = tx
                    .prepare_cached(
                        "INSERT INTO views (scope, body) VALUES ($1, $2) \
                         ON CONFLICT (scope) DO UPDATE SET body = EXCLUDED.body",
                    )
                    .await?;
                tx.execute(&st, &[&d.0, &d.1]).await?;
                Ok(())
            })
        })
    }

    fn get_view(&self, scope: &str) -> Result<Option<Vec<u8>>> {
        let key = scope.as_bytes().to_vec();
        self.read("view read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT body FROM views WHERE scope = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&key])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })
    }

    fn enqueue_job(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        let scope = scope.as_bytes().to_vec();
        let key = lock_key(&String::from_utf8_lossy(&scope));
        let now = i64_of(now);
        self.tx("job enqueue", move |tx| {
            let scope = scope.clone();
            Box::pin(async move {
                // Two replicas queueing for one scope at once coalesce too.
                tx.execute(
                    "SELECT pg_advisory_xact_lock($1, $2)",
                    &[&LOCK_ENQUEUE, &key],
                )
                .await?;
                let found = tx
                    .query_opt(
                        &format!(
                            "SELECT {JOB_COLS} FROM jobs WHERE scope = $1 AND kind = $2 \
                             AND state = 'queued' ORDER BY id LIMIT 1"
                        ),
                        &[&scope, &kind.name()],
                    )
                    .await?;
                if let Some(r) = found {
                    return Ok((job_of(&r)?, true));
                }
                let r = tx
                    .query_one(
                        &format!(
                            "INSERT INTO jobs (id, scope, kind, state, created_at) \
                             VALUES (nextval('job_ids'), $1, $2, 'queued', $3) \
                             RETURNING {JOB_COLS}"
                        ),
                        &[&scope, &kind.name(), &now],
                    )
                    .await?;
                tx.batch_execute("NOTIFY strata_jobs").await?;
                Ok((job_of(&r)?, false))
            })
        })
    }

    fn claim_job(&self, who: &Claimant, now: u64) -> Result<Option<Job>> {
        let owner = who.owner.clone();
        let lease_ms = who.lease.as_millis() as f64;
        let now = i64_of(now);
        let pool = self.pool.clone();
        self.run("job claim", async move {
            // A claim that collides with another replica's claim of the same scope (the
            // unique index on running jobs) tries again; it then skips that scope.
            let mut attempt = 0;
            loop {
                let r: PgResult<Option<Job>> = async {
                    let mut c = pool.get().await?;
                    let tx = c.transaction().await?;
                    // Leases that ran out: their replica died. Their jobs are queued again.
                    let requeued = tx
                        .execute(
                            "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL \
                             WHERE state = 'running' AND lease_until < clock_timestamp()",
                            &[],
                        )
                        .await?;
                    if requeued > 0 {
                        tx.batch_execute("NOTIFY strata_jobs").await?;
                    }
                    let st = tx
                        .prepare_cached(&format!(
                            "UPDATE jobs SET state = 'running', owner = $1, \
                             lease_until = clock_timestamp() + $2 * interval '1 millisecond', \
                             started_at = $3, attempts = attempts + 1 \
                             WHERE id = (SELECT j.id FROM jobs j WHERE j.state = 'queued' \
                                 AND NOT EXISTS (SELECT 1 FROM jobs r \
                                     WHERE r.scope = j.scope AND r.state = 'running') \
                                 ORDER BY j.id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                             RETURNING {JOB_COLS}"
                        ))
                        .await?;
                    let job = match tx.query_opt(&st, &[&owner, &lease_ms, &now]).await? {
                        Some(r) => Some(job_of(&r)?),
                        None => None,
                    };
                    tx.commit().await?;
                    Ok(job)
                }
                .await;
                match r {
                    Err(e)
                        if attempt < 8
                            && (e.is_transient()
                                || e.code() == Some(&SqlState::UNIQUE_VIOLATION)) =>
                    {
                        attempt += 1;
                    }
                    r => return r,
                }
            }
        })
    }

    fn renew_job(&self, id: u64, who: &Claimant) -> Result<bool> {
        let (id, owner) = (i64_of(id), who.owner.clone());
        let lease_ms = who.lease.as_millis() as f64;
        self.tx("job lease", move |tx| {
            let owner = owner.clone();
            Box::pin(async move {
                let n = tx
                    .execute(
                        "UPDATE jobs SET lease_until = clock_timestamp() + $3 * interval '1 millisecond' \
                         WHERE id = $1 AND owner = $2 AND state = 'running'",
                        &[&id, &owner, &lease_ms],
                    )
                    .await?;
                Ok(n == 1)
            })
        })
    }

    fn finish_job(&self, job: &Job, who: &Claimant, keep: usize) -> Result<bool> {
        let job = Arc::new(job.clone());
        let outcome = Arc::new(job.outcome.as_ref().map(encode).transpose()?);
        let owner = who.owner.clone();
        let keep = i64::try_from(keep.max(1)).unwrap_or(i64::MAX);
        self.tx("job end", move |tx| {
            let (job, outcome, owner) = (job.clone(), outcome.clone(), owner.clone());
            Box::pin(async move {
                let error = job.error.as_ref().map(|e| e.replace('\0', " "));
                let n = tx
                    .execute(
                        "UPDATE jobs SET state = $3, started_at = $4, finished_at = $5, \
                         outcome = $6, error = $7, owner = NULL, lease_until = NULL \
                         WHERE id = $1 AND owner = $2 AND state = 'running' AND attempts = $8",
                        &[
                            &i64_of(job.id),
                            &owner,
                            &job.state.name(),
                            &job.started_at.map(i64_of),
                            &job.finished_at.map(i64_of),
                            &*outcome,
                            &error,
                            &i32::try_from(job.attempts).unwrap_or(i32::MAX),
                        ],
                    )
                    .await?;
                if n != 1 {
                    return Ok(false);
                }
                tx.execute(
                    "DELETE FROM jobs WHERE state IN ('done', 'failed') AND id < \
                     (SELECT id FROM jobs WHERE state IN ('done', 'failed') \
                      ORDER BY id DESC OFFSET $1::int8 - 1 LIMIT 1)",
                    &[&keep],
                )
                .await?;
                tx.batch_execute("NOTIFY strata_jobs").await?;
                Ok(true)
            })
        })
    }

    fn requeue_abandoned(&self, who: &Claimant) -> Result<usize> {
        let owner = who.owner.clone();
        let n = self.tx("job requeue", move |tx| {
            let owner = owner.clone();
            Box::pin(async move {
                // This replica's previous process is gone (one live process per name),
                // and so is every replica whose lease ran out.
                let n = tx
                    .execute(
                        "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL \
                         WHERE state = 'running' \
                         AND (owner = $1 OR lease_until < clock_timestamp())",
                        &[&owner],
                    )
                    .await?;
                if n > 0 {
                    tx.batch_execute("NOTIFY strata_jobs").await?;
                }
                Ok(n)
            })
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn next_lease_expiry(&self) -> Result<Option<Duration>> {
        let ms = self.read("job leases", |c| {
            Box::pin(async move {
                Ok(c.query_one(
                    "SELECT (extract(epoch FROM min(lease_until) - clock_timestamp()) * 1000)::float8 \
                     FROM jobs WHERE state = 'running'",
                    &[],
                )
                .await?
                .get::<_, Option<f64>>(0))
            })
        })?;
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64)))
    }

    fn get_job(&self, id: u64) -> Result<Option<Job>> {
        let id = i64_of(id);
        self.read("job read", move |c| {
            Box::pin(async move {
                match c
                    .query_opt(
                        &format!("SELECT {JOB_COLS} FROM jobs WHERE id = $1"),
                        &[&id],
                    )
                    .await?
                {
                    Some(r) => Ok(Some(job_of(&r)?)),
                    None => Ok(None),
                }
            })
        })
    }

    fn jobs(&self) -> Result<Vec<Job>> {
        self.read("jobs", |c| {
            Box::pin(async move {
                c.query(&format!("SELECT {JOB_COLS} FROM jobs ORDER BY id"), &[])
                    .await?
                    .iter()
                    .map(job_of)
                    .collect()
            })
        })
    }

    fn queued_jobs(&self) -> Result<usize> {
        let n = self.read("jobs", |c| {
            Box::pin(async move {
                Ok(
                    c.query_one("SELECT count(*) FROM jobs WHERE state = 'queued'", &[])
                        .await?
                        .get::<_, i64>(0),
                )
            })
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn lock_scope(&self, scope: &str) -> Result<ScopeLock> {
        let key = lock_key(scope);
        let name = scope.as_bytes().to_vec();
        let pool = self.pool.clone();
        let (client, version) = self.run("scope lock", async move {
            let c = pool.get().await?;
            c.execute("SELECT pg_advisory_lock($1, $2)", &[&LOCK_SCOPE, &key])
                .await?;
            let v = c
                .query_opt("SELECT version FROM scopes WHERE name = $1", &[&name])
                .await
                .map(|r| r.map_or(-1, |r| r.get::<_, i64>(0)));
            match v {
                Ok(v) => Ok((c, v)),
                Err(e) => {
                    // Closing the session releases the lock.
                    drop(deadpool_postgres::Object::take(c));
                    Err(e.into())
                }
            }
        })?;
        self.fences
            .lock()
            .expect("poisoned")
            .insert(scope.to_string(), version);
        Ok(ScopeLock::held(Box::new(PgScopeLock {
            client: Some(client),
            key,
            scope: scope.to_string(),
            handle: self.handle.clone(),
            fences: self.fences.clone(),
        })))
    }

    fn events(&self) -> Option<Events> {
        Some(self.events.get_or_init(|| self.listen()).clone())
    }

    fn shared(&self) -> bool {
        true
    }

    fn index_must_rebuild(&self) -> Result<bool> {
        Ok(self.rebuild.swap(false, Ordering::SeqCst))
    }

    fn replicas(&self) -> Result<Vec<ReplicaStatus>> {
        let me = self.replica.clone();
        self.read("replicas", move |c| {
            let me = me.clone();
            Box::pin(async move {
                Ok(c.query(
                    "SELECT r.name, \
                     (SELECT count(DISTINCT id) FROM node_changes c WHERE c.xid >= r.watermark), \
                     extract(epoch FROM now() - r.seen_at)::float8 \
                     FROM replicas r ORDER BY r.name",
                    &[],
                )
                .await?
                .iter()
                .map(|r| {
                    let name: String = r.get(0);
                    ReplicaStatus {
                        this: name == me,
                        name,
                        behind: usize::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                        seen_secs_ago: r.get::<_, f64>(2).max(0.0) as u64,
                    }
                })
                .collect())
            })
        })
    }

    fn heartbeat(&self) -> Result<()> {
        self.register(false)?;
        self.prune()
    }

    fn replica_name(&self) -> String {
        self.replica.clone()
    }

    fn flush(&self) -> Result<()> {
        // Every write committed with synchronous_commit on: durable already.
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        let r = self.read("database size", |c| {
            Box::pin(async move {
                Ok(
                    c.query_one("SELECT pg_database_size(current_database())", &[])
                        .await?
                        .get::<_, i64>(0),
                )
            })
        });
        r.map(u64_of).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::tests::{node, record, scope_record};
    use crate::store::{SourcePut, SourceStep};

    /// Two replicas (two stores, as two processes would have) on one fresh database.
    fn two(test: &str) -> Option<(String, Store, Store)> {
        let pg = scratch::Scratch::for_test(test)?;
        let url = pg.database().unwrap();
        let a = Store::open_postgres(&url, "a", 4, None).unwrap();
        let b = Store::open_postgres(&url, "b", 4, None).unwrap();
        Some((url, a, b))
    }

    fn who(owner: &str, lease_ms: u64) -> Claimant {
        Claimant {
            owner: owner.into(),
            lease: Duration::from_millis(lease_ms),
        }
    }

    fn step(scope: &str, src: &str, n: u8) -> SourceStep {
        SourceStep {
            scope: scope_record(scope, &[src]),
            put: vec![SourcePut {
                record: record(scope, src),
                text: format!("text {n}"),
                nodes: vec![node(n, None)],
            }],
            remove_sources: Vec::new(),
            remove_nodes: Vec::new(),
        }
    }

    #[test]
    fn a_job_is_claimed_by_one_replica_and_taken_back_when_its_lease_runs_out() {
        let Some((_, a, b)) = two("job_claims") else {
            return;
        };
        let (job, _) = a.enqueue_job("kb", JobKind::Compress, 1).unwrap();
        // a claims it with a lease that runs out at once (a dead replica); b sees no job
        // to claim until then, then takes it back.
        let mine = a.claim_job(&who("a", 1), 2).unwrap().unwrap();
        assert_eq!(mine.id, job.id);
        let deadline = Instant::now() + Duration::from_secs(10);
        let theirs = loop {
            if let Some(j) = b.claim_job(&who("b", 60_000), 3).unwrap() {
                break j;
            }
            assert!(Instant::now() < deadline, "the lease never ran out");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!((theirs.id, theirs.attempts), (job.id, 2));
        // The replica that lost its claim can neither renew nor record the end.
        assert!(!a.renew_job(job.id, &who("a", 1)).unwrap());
        let mut late = mine.clone();
        late.state = JobState::Done;
        assert!(!a.finish_job(&late, &who("a", 1), 10).unwrap());
        let mut done = theirs.clone();
        done.state = JobState::Done;
        assert!(b.finish_job(&done, &who("b", 60_000), 10).unwrap());
        assert_eq!(a.get_job(job.id).unwrap().unwrap().state, JobState::Done);
        // A live lease is respected: a's claim of a new job stays a's.
        a.enqueue_job("kb", JobKind::Compress, 4).unwrap();
        assert!(a.claim_job(&who("a", 60_000), 5).unwrap().is_some());
        assert!(b.claim_job(&who("b", 60_000), 5).unwrap().is_none());
        assert!(b.next_lease_expiry().unwrap().unwrap() > Duration::from_secs(30));
    }

    #[test]
    fn each_replica_follows_the_change_feed_from_its_own_place() {
        let Some((_, a, b)) = two("feed") else {
            return;
        };
        let mut events = b.events().unwrap();
        let seen = *events.nodes.borrow_and_update();
        a.put_nodes(&[node(1, None), node(2, Some(5))]).unwrap();
        // b is woken by a's commit (LISTEN/NOTIFY).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(30), events.nodes.changed())
                .await
                .expect("no notification")
                .unwrap();
        });
        assert!(*events.nodes.borrow() > seen);
        let pa = a.pending_index().unwrap();
        let pb = b.pending_index().unwrap();
        assert_eq!(pa.len(), 2);
        assert_eq!(pa, pb);
        a.clear_pending_index(&pa).unwrap();
        assert_eq!(a.n_pending_index(), 0);
        assert_eq!(b.n_pending_index(), 2, "b's index has not seen them");
        let lag: Vec<(String, usize, bool)> = a
            .replicas()
            .unwrap()
            .into_iter()
            .map(|r| (r.name, r.behind, r.this))
            .collect();
        assert_eq!(
            lag,
            vec![("a".to_string(), 0, true), ("b".to_string(), 2, false)]
        );
        // A removal by b is a change for a.
        b.sweep(5).unwrap();
        assert_eq!(
            a.pending_index()
                .unwrap()
                .iter()
                .map(|m| m.id)
                .collect::<Vec<_>>(),
            vec![NodeId([2; 32])]
        );
        b.clear_pending_index(&pb).unwrap();
        assert_eq!(b.n_pending_index(), 1, "the sweep came after b's read");
    }

    #[test]
    fn a_scope_is_written_by_one_process_at_a_time() {
        let Some((url, a, b)) = two("scope_lock") else {
            return;
        };
        let held = a.lock_scope("debate").unwrap();
        // b's lock waits until a lets go (seen in pg_locks, not guessed with a timer).
        let (tx, rx) = std::sync::mpsc::channel();
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || {
            let g = b2.lock_scope("debate").unwrap();
            tx.send(()).unwrap();
            drop(g);
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !waiting_for_advisory_lock(&url) {
            assert!(Instant::now() < deadline, "b never waited for the lock");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(rx.try_recv().is_err(), "b got the lock a holds");
        a.write_sources(&step("debate", "t1", 1)).unwrap();
        drop(held);
        rx.recv().unwrap();
        waiter.join().unwrap();
        // Another scope is not held up by it.
        let _other = b.lock_scope("another").unwrap();
        let _g = a.lock_scope("debate").unwrap();
    }

    #[test]
    fn a_writer_whose_lock_was_lost_writes_nothing() {
        let Some((_, a, b)) = two("fence") else {
            return;
        };
        a.write_sources(&step("debate", "t1", 1)).unwrap();
        let g = a.lock_scope("debate").unwrap();
        // b writes without the lock, as if a's lock had gone with its connection.
        b.write_sources(&step("debate", "t2", 2)).unwrap();
        let e = a
            .write_sources(&step("debate", "t3", 3))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("changed while this process held its lock"),
            "{e}"
        );
        assert!(a.get_source("debate", "t3").unwrap().is_none());
        drop(g);
        // With the lock taken again, writes go through.
        let _g = a.lock_scope("debate").unwrap();
        a.write_sources(&step("debate", "t3", 3)).unwrap();
        a.write_sources(&step("debate", "t4", 4)).unwrap();
    }

    #[test]
    fn a_schema_newer_than_the_binary_is_refused_in_one_line() {
        let Some(pg) = scratch::Scratch::for_test("newer_schema") else {
            return;
        };
        let url = pg.database().unwrap();
        drop(Store::open_postgres(&url, "a", 2, None).unwrap());
        scratch_execute(
            &url,
            "INSERT INTO strata_migrations (version, description) VALUES (999, 'future')",
        );
        let e = PgBackend::open(&url, "a", 2, None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("schema version 999, newer than this strata"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        // Opening again changes nothing in a current schema.
        let url2 = pg.database().unwrap();
        drop(Store::open_postgres(&url2, "a", 2, None).unwrap());
        let s = Store::open_postgres(&url2, "a", 2, None).unwrap();
        assert_eq!(s.n_nodes(), 0);
    }

    /// A database a strata before source times left (schema 1, version 1 records) opens:
    /// migration 2 is applied and its records read as records without a time.
    #[test]
    fn a_schema_1_database_with_version_1_records_opens() {
        use crate::store::record::v1;
        let Some(pg) = scratch::Scratch::for_test("schema_1_records") else {
            return;
        };
        let url = pg.database().unwrap();
        drop(Store::open_postgres(&url, "a", 2, None).unwrap());
        let n = node(7, None);
        let old = v1::Node {
            id: n.id,
            scope: n.scope.clone(),
            level: n.level,
            text: n.text.clone(),
            children: Vec::new(),
            citations: n.citations.clone(),
            tokens: n.tokens,
            meta: v1::Meta {
                rounds: vec![2],
                speakers: vec!["bob".into()],
                headings: Vec::new(),
                tags: None,
            },
            created_at: n.created_at,
            expires_at: None,
        };
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        scratch_execute(
            &url,
            &format!(
                "DELETE FROM strata_migrations WHERE version >= 2;
                 DELETE FROM strata_meta WHERE key = 'record_format';
                 INSERT INTO nodes (id, expires_at, body) VALUES ('\\x{}', NULL, '\\x{}');",
                hex(&n.id.0),
                hex(&v1::encode(&old))
            ),
        );
        let s = Store::open_postgres(&url, "a", 2, None).unwrap();
        let got = s.get_node(&n.id).unwrap().unwrap();
        assert_eq!(
            (got.meta.speakers.as_slice(), got.meta.time),
            (&["bob".to_string()][..], None)
        );
        assert_eq!(got.text, n.text);
    }

    fn scratch_execute(url: &str, sql: &str) {
        scratch::execute(url, sql).unwrap();
    }

    fn waiting_for_advisory_lock(url: &str) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (c, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
            tokio::spawn(conn);
            let r = c
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                    &[],
                )
                .await
                .unwrap();
            r.get::<_, i64>(0) > 0
        })
    }

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(
            redact("postgres://strata:s3cret@db:5432/strata"),
            "postgres://strata:***@db:5432/strata"
        );
        assert_eq!(
            redact("postgresql://u@h/d?sslmode=disable"),
            "postgresql://u@h/d?sslmode=disable"
        );
        assert_eq!(redact("postgres://h/d"), "postgres://h/d");
        assert!(is_url("postgres://h/d") && is_url("postgresql://h") && !is_url("data/db"));
    }

    #[test]
    fn an_unreachable_database_is_one_line() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = PgBackend::open(
            &format!("postgres://strata:pw@127.0.0.1:{port}/strata"),
            "t",
            2,
            None,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("cannot reach PostgreSQL at 127.0.0.1:"), "{e}");
        assert!(!e.contains('\n') && !e.contains("pw"), "{e}");
    }
}
