//! strata: a hierarchical compression engine with an abstraction-level store.
//!
//! Long context — a debate that grows round by round, a pile of documents — is cut into
//! semantic chunks ([`chunk`]), compressed into five levels ([`Level`]) by a [`SubModel`]
//! (the offline extractive compressor by default), kept in a [`Store`] (sled on disk, or
//! PostgreSQL shared by many processes) with a TTL,
//! indexed with tantivy, and served as token-budgeted context windows or answered with
//! citations to exact source spans.
//!
//! This crate is the `strata` binary and one name for the workspace's layered crates:
//! the engine ([`strata_engine`], re-exported here item by item), the HTTP API
//! ([`server`]), the MCP server ([`mcp`]) and, with feature `eval`, the evaluation
//! harness ([`eval`]).
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

pub use strata_engine::*;
#[cfg(feature = "eval")]
pub use strata_eval as eval;
pub use strata_http as server;
pub use strata_mcp as mcp;
