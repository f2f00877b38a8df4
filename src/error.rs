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
    /// Reading an input file failed.
    /// (The cause is part of the message, not a separate `source`, so that a printed
    /// chain does not say it twice.)
    #[error("cannot read {}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    /// The embedded store failed (locked by another process, damaged, ...). Not `#[from]`:
    /// the conversion below sends a full disk to [`Error::DiskFull`], and a sled error kept
    /// as a `source` would be printed twice in a `{:#}` chain.
    #[error("store: {0}")]
    Store(sled::Error),
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
    Model(#[from] crate::model::ModelError),
    /// A configuration file or variable is wrong.
    #[error("config: {0}")]
    Config(String),
}

// (disk full) A full disk is its own error, whichever write met it.
impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
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
            _ => Error::Store(e),
        }
    }
}

impl Error {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
