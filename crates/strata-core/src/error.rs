//! One error type for the library. Subsystems convert into it with `#[from]`; only the
//! binary wraps errors in `anyhow` with context.

use std::path::PathBuf;

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input from the user: a malformed file, an unknown level, a zero budget. The message
    /// is meant to be shown as is.
    #[error("{0}")]
    Invalid(String),
    /// A scope that was never ingested.
    #[error("unknown scope `{scope}` (known scopes: {known})")]
    UnknownScope { scope: String, known: String },
    /// A source its scope does not hold.
    #[error("scope `{scope}` has no source `{source_id}`")]
    UnknownSource { scope: String, source_id: String },
    /// Reading an input file failed.
    /// (The cause is part of the message, not a separate `source`, so that a printed
    /// chain does not say it twice.)
    #[error("cannot read {}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    /// The embedded store failed (an I/O error, a damaged file...). The cause is part of
    /// the message, not a `source`, so that a printed chain says it once.
    #[error("store: {0}")]
    Store(String),
    /// Another process holds the store open.
    #[error(
        "{} is in use by another strata process (stop it, or point --db elsewhere)",
        .0.display()
    )]
    InUse(PathBuf),
    /// A write through a store opened read-only — a command that only reads had to build
    /// missing or expired levels after all, or sled had to finish upkeep of its tree that
    /// a writer left half done: refused before anything was written; the command opens
    /// the store writable and runs again.
    #[error("the store was opened read-only, and this must write to it")]
    ReadOnly,
    /// The file system holding the store is full, or would be after this write: the write
    /// was refused before it began, or failed without touching what was acknowledged before.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// The store holds bytes we cannot decode: a newer format or a damaged file.
    #[error("data corruption: {0}")]
    DataCorruption(String),
    /// The full-text index failed; it can always be rebuilt with `strata reindex`.
    #[error("index: {0} (rebuild it with `strata reindex`)")]
    Index(String),
    /// A sub-model call failed after its retries.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// A node the request needs does not exist because its build failed (or has not run):
    /// the request was fine, the engine cannot serve it yet.
    #[error("{0}")]
    NotBuilt(String),
    /// A configuration file or variable is wrong.
    #[error("config: {0}")]
    Config(String),
    /// A bug of ours, not the caller's: a worker panicked. HTTP 500.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a sub-model call failed. The build retries, then falls back to the offline
/// compressor, and reports the failure as data.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    #[error("model server unavailable: {0}")]
    Unavailable(String),
    #[error("rate limited")]
    RateLimited,
    #[error("timed out")]
    Timeout,
    #[error("unusable output: {0}")]
    BadOutput(String),
    #[error("the reply was cut off at its token limit (over budget)")]
    Truncated,
    #[error("{0}")]
    Failed(String),
    /// The query was cancelled or ran out of time (see `navigate::Stop`).
    #[error("stopped: {0}")]
    Stopped(String),
}
