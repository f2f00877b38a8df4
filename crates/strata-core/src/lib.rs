//! strata's vocabulary, layers 1–3 of docs/ARCHITECTURE.md: the clock, errors, progress,
//! levels, text analysis, a source's time, tokens, the chunker, the configuration, names
//! (ids) and the node model. It depends on no other strata crate; the `strata` crate
//! re-exports each module under its old name (`strata::level`, `crate::level` inside it).
//!
//! An item here is `pub` when a higher crate uses it: `pub` is the crate boundary.

#![warn(unreachable_pub)]

pub mod chunk;
pub mod clock;
pub mod config;
pub mod error;
pub mod id;
pub mod level;
pub mod memo;
pub mod node;
pub mod progress;
pub mod text;
pub mod time;
pub mod token;

pub use error::{Error, ModelError, Result};
pub use level::{Level, PerLevel};
