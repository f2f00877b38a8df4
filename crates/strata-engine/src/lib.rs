//! strata: a hierarchical compression engine with an abstraction-level store.
//!
//! Long context — a debate that grows round by round, a pile of documents — is cut into
//! semantic chunks ([`chunk`]), compressed into five levels ([`Level`]) by a [`SubModel`]
//! (the offline extractive compressor by default), kept in a [`Store`] (sled on disk, or
//! PostgreSQL shared by many processes) with a TTL,
//! indexed with tantivy, and served as token-budgeted context windows or answered with
//! citations to exact source spans.
//!
//! ```no_run
//! # async fn demo() -> strata::Result<()> {
//! use strata::{Engine, Config, LevelChoice, NoProgress, unix_now};
//! let engine = Engine::open(std::path::Path::new("strata-data"), Config::default())?;
//! engine.ingest_files("debate", None, &["data/debate.jsonl".into()], unix_now())?;
//! engine.compress("debate", unix_now(), &NoProgress).await?;
//! let window = engine
//!     .context("debate", LevelChoice::Auto, 2000, unix_now(), &NoProgress)
//!     .await?;
//! let answer = engine
//!     .query(&strata::Ask::new(&["debate".into()], "who changed position?", unix_now()))
//!     .await?;
//! for c in &answer.citations {
//!     println!("{} [{}..{}): {}", c.source, c.start, c.end, c.quote);
//! }
//! # Ok(()) }
//! ```

#![warn(unreachable_pub)]

// The vocabulary (layers 1-3) is the strata-core crate; its modules keep their names here
// (`crate::level`, `strata::config`), with the visibility they had as modules of this crate.
pub use strata_core::{chunk, config, node, time, token};
pub(crate) use strata_core::{clock, error, id, level, progress, text};
// The store (layers 4-5) is the strata-store crate, re-exported the same way.
pub use strata_store::{disk, repair, store};

pub mod access;
mod build;
pub mod built;
pub mod context;
mod corpus;
pub mod engine;
pub mod expire;
#[doc(hidden)]
pub mod fail;
mod hybrid;
mod index;
pub mod jobs;
pub mod metrics;
pub mod model;
pub mod navigate;
pub mod plan;
pub mod replica;
pub mod script;
pub mod service;
pub mod source;
pub mod trace;

pub use build::{BuildFailure, BuildReport};
pub use clock::unix_now;
pub use config::Config;
pub use context::{ContextWindow, LevelChoice};
pub use engine::{
    Ask, Bytes, Engine, ForgetReport, GcReport, GrepHit, IngestReport, LevelBytes, ScopeStats,
    ServedWindow, Stats, View, WindowAsk, WindowPart,
};
pub use error::{Error, ModelError, Result};
pub use index::IndexSpace;
pub use level::{Level, PerLevel};
pub use model::{ChatModel, Offline, OpenAi, SubModel, Usage};
pub use navigate::{Budget, Budgets, Citation, QueryResult, Step, Stop};
pub use node::{Node, NodeId, Span};
pub use progress::{NoProgress, Progress};
pub use store::{ScopeKind, Store};
pub use time::{Time, TimeRange};

/// The bundled sample documents' texts (`data/docs`), in file-name order: tests that hold
/// a faster path to the one it replaces read them.
#[cfg(test)]
pub(crate) fn sample_documents() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/docs");
    let mut paths: Vec<_> = std::fs::read_dir(&root)
        .expect("the sample documents")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("text"))
        .collect()
}
