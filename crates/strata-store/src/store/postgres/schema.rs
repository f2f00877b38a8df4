//! The schema of the PostgreSQL store, created and migrated by strata itself.
//!
//! `strata_migrations` lists the versions applied. At open, under a transaction-level
//! advisory lock (so replicas starting together migrate once), every version the binary
//! knows and the database lacks is applied in order, in the same transaction; a database
//! whose newest version is unknown to this binary (a newer strata migrated it) is refused
//! with one line.
//!
//! Names (scopes, source ids) are `bytea`: a `text` column cannot hold NUL, which a name
//! may. Records the engine never queries by field (nodes, scope and source records,
//! views, vectors) are the same bincode-with-format-byte values the sled store keeps;
//! what a query selects on (deadlines, fallback marks, job states and leases, the change
//! feed) is a column with an index.

/// One schema version: what it does, and its SQL.
pub(super) struct Migration {
    pub version: i32,
    pub description: &'static str,
    pub sql: &'static str,
}

/// Every version, oldest first. Append only: a released version never changes.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "nodes with deadlines, sources, scopes, views, vectors, jobs, the change feed",
        sql: r#"
CREATE TABLE strata_meta (
    key text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO strata_meta VALUES ('feed_pruned_below', 0);

CREATE TABLE scopes (
    name bytea PRIMARY KEY,
    body bytea NOT NULL,
    -- Moves with every write: a writer holding the scope's lock checks it did not move
    -- under it (a lock lost with its connection).
    version bigint NOT NULL DEFAULT 0
);

CREATE TABLE sources (
    scope bytea NOT NULL,
    id bytea NOT NULL,
    record bytea NOT NULL,
    -- The source text as ingested (UTF-8): the ground truth of every citation.
    text bytea NOT NULL,
    PRIMARY KEY (scope, id)
);

CREATE TABLE nodes (
    id bytea PRIMARY KEY,
    -- Unix seconds; NULL: never expires.
    expires_at bigint,
    -- A FallbackMark when the offline fallback made the node (or it was built over one).
    fallback bytea,
    body bytea NOT NULL
);
CREATE INDEX nodes_expires_at ON nodes (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX nodes_fallback ON nodes (id) WHERE fallback IS NOT NULL;

-- The change feed: one row per node write or removal, in the transaction of the change.
-- `xid` is the writing transaction's id: every row below the oldest transaction still
-- running is final, which is how a replica knows how far its index is complete.
CREATE TABLE node_changes (
    seq bigserial PRIMARY KEY,
    xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    id bytea NOT NULL
);
CREATE INDEX node_changes_xid ON node_changes (xid);

-- Each replica's index position in the feed: every change of a transaction below
-- `watermark` is in its index.
CREATE TABLE replicas (
    name text PRIMARY KEY,
    watermark bigint NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE embeddings (
    model bytea NOT NULL,
    id bytea NOT NULL,
    vector bytea NOT NULL,
    PRIMARY KEY (model, id)
);
CREATE INDEX embeddings_id ON embeddings (id);

CREATE TABLE views (
    scope bytea PRIMARY KEY,
    body bytea NOT NULL
);

CREATE SEQUENCE job_ids;
CREATE TABLE jobs (
    id bigint PRIMARY KEY,
    scope bytea NOT NULL,
    kind text NOT NULL,
    state text NOT NULL,
    created_at bigint NOT NULL,
    started_at bigint,
    finished_at bigint,
    attempts integer NOT NULL DEFAULT 0,
    outcome bytea,
    error text,
    -- The replica holding a running job, and until when without renewal.
    owner text,
    lease_until timestamptz
);
-- A scope is built by one worker of one replica at a time.
CREATE UNIQUE INDEX jobs_one_running_per_scope ON jobs (scope) WHERE state = 'running';
CREATE INDEX jobs_queued ON jobs (id) WHERE state = 'queued';
"#,
    },
    Migration {
        version: 2,
        description: "node and source records in format 2 (source times)",
        // Nothing moves: the records are bodies, and version 1 bodies are still read
        // (`store::record`). What changes is who may open the database: a strata before
        // source times cannot read version 2 bodies, and this version is how it learns so
        // at open, in one line, instead of failing on the first timed record.
        sql: r#"
INSERT INTO strata_meta VALUES ('record_format', 2);
"#,
    },
    Migration {
        version: 3,
        description: "a scope's sources one row each (members); scope bodies in format 2",
        // Nothing moves here either: a scope body of format 1 (its list inline) is read as
        // it is, and its list moves to `members` in the scope's next write. A strata
        // before this version cannot read a format 2 body: this version refuses it at open.
        sql: r#"
CREATE TABLE members (
    scope bytea NOT NULL,
    id bytea NOT NULL,
    entry bytea NOT NULL,
    PRIMARY KEY (scope, id)
);
UPDATE strata_meta SET value = 3 WHERE key = 'record_format';
"#,
    },
];

/// The newest version this binary knows.
pub(super) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}
