//! strata: a hierarchical compression engine with an abstraction-level store.
//!
//! Long context — a debate that grows round by round, a pile of documents — is cut into
//! semantic chunks ([`chunk`]), compressed into five levels ([`Level`]) by a [`SubModel`]
//! (the offline extractive compressor by default), kept in a sled [`Store`] with a TTL,
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
//!     .query(&["debate".into()], "who changed position?", unix_now(), &NoProgress)
//!     .await?;
//! for c in &answer.citations {
//!     println!("{} [{}..{}): {}", c.source, c.start, c.end, c.quote);
//! }
//! # Ok(()) }
//! ```

pub mod build;
pub mod chunk;
pub mod config;
pub mod context;
pub(crate) mod corpus;
pub mod disk;
pub mod engine;
pub mod error;
#[cfg(feature = "eval")]
pub mod eval;
pub mod expire;
pub mod hybrid;
pub mod id;
pub mod index;
pub mod jobs;
pub mod level;
pub mod metrics;
pub mod model;
pub mod navigate;
pub mod node;
pub mod plan;
pub mod replica;
pub mod server;
pub mod source;
pub mod store;
pub use store::sled::repair;
pub mod text;
pub mod token;

pub use build::{BuildReport, NoProgress, Progress};
pub use config::Config;
pub use context::{ContextWindow, LevelChoice};
pub use engine::{Engine, GcReport, GrepHit, IngestReport, Stats, View, unix_now};
pub use error::{Error, Result};
pub use level::{Level, PerLevel};
pub use model::{ChatModel, Offline, OpenAi, SubModel, Usage};
pub use navigate::{Citation, QueryResult};
pub use node::{Node, NodeId, Span};
pub use store::{ScopeKind, Store};
