//! strata's storage, layers 4–5 of docs/ARCHITECTURE.md: the store (`store`: the
//! storage traits, the sled, memory and PostgreSQL backends, `strata repair`) and the
//! free-space checks (`disk`). It depends on strata-core only; the `strata` crate
//! re-exports each module under its old name (`strata::store`, `crate::disk` inside it).
//!
//! An item here is `pub` when a higher crate uses it: `pub` is the crate boundary.

#![warn(unreachable_pub)]

// The vocabulary under the names the modules here have always used (`crate::node`).
pub(crate) use strata_core::{clock, config, error, level, node, time};

pub mod disk;
pub mod store;
pub use store::sled::repair;
