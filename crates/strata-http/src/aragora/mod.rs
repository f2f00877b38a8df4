//! The RLM routes as aragora's REST API (its ADR-008, `aragora/server/handlers/features/
//! rlm.py` and `handlers/rlm.py`) and its Python SDK (`aragora-sdk`) speak them, with
//! strata's richer fields beside aragora's names. Where aragora answers with a stub (its
//! refinement-status, its hard-coded dashboard averages), strata answers with the real
//! thing under the same names.
//!
//! - debate routes: `compress` answers with what was built, `context/{level}` needs no
//!   budget for a fixed level, `query-rlm` takes aragora's strategies and start levels and
//!   clamps `max_iterations`, `refinement-status` counts running queries and cached levels;
//! - `knowledge/query-rlm` takes `workspace_id` (a scope) and `max_nodes` and answers
//!   `sources`;
//! - `/rlm/…`: aragora's context API (compress content into a context, query it, list,
//!   stream it level by level, strategies, stats, status, health) over strata's scopes;
//! - `/metrics/rlm`: aragora's dashboard numbers, computed from the metrics.

use super::extract::{ApiPath, ApiQuery, OptJson};
use super::{
    Access, ApiError, ApiJson, ApiResult, AppState, Caller, QuerySummary, blocking, check_read,
    check_write, schedule,
};
use axum::Json;
use axum::extract::{MatchedPath, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_core::clock::unix_now;
use strata_core::level::Level;
use strata_engine::WindowAsk;
use strata_engine::built::{Built, LevelTally};
use strata_engine::config::QueryConfig;
use strata_engine::context::LevelChoice;
use strata_engine::engine::Engine;
use strata_engine::jobs::{Job, JobOutcome, JobState};
use strata_engine::metrics::{Compression, Metrics, QUERY_TYPES, QueryEvent, SOURCE_TYPES};
use strata_engine::model::Usage;
use strata_engine::navigate::{Budgets, Citation, QueryResult, Step};
use strata_engine::store::ScopeKind;
use utoipa::ToSchema;

/// aragora's limit on a question.
pub(super) const MAX_QUERY_CHARS: usize = 10_000;
/// How long `compress` waits for its build before answering 202 (below the 30 s default
/// timeout of aragora's SDK); `?wait=` overrides it.
const COMPRESS_WAIT_SECS: u64 = 25;
/// Longest `?wait=` of `compress`.
const MAX_COMPRESS_WAIT_SECS: u64 = 60;
/// The levels aragora names, and what `compress` reports by default.
const ARAGORA_LEVELS: [&str; 3] = ["ABSTRACT", "SUMMARY", "DETAILED"];

// ------------------------------------------------------------------------ ids and names

/// aragora's rule for debate ids and workspace ids: `[A-Za-z0-9_-]{1,100}`.
fn aragora_id(id: &str) -> bool {
    (1..=100).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Under `/api/v1` a debate id follows aragora's rule; under `/api` strata's wider names
/// (checked by the engine) stay usable.
pub(super) fn check_debate_id(matched: &MatchedPath, id: &str) -> ApiResult<()> {
    if matched.as_str().starts_with("/api/v1/") && !aragora_id(id) {
        return Err(ApiError::bad(format!(
            "invalid debate id {id:?}: /api/v1 debate ids are 1-100 characters of A-Z, a-z, 0-9, - and _"
        )));
    }
    Ok(())
}

/// A level as aragora writes it.
fn upper(level: Level) -> String {
    level.name().to_ascii_uppercase()
}

/// aragora's `source_type` of a scope.
pub(super) fn source_type(kind: ScopeKind, sources: &[String]) -> &'static str {
    match kind {
        ScopeKind::Debate => "debate",
        // A context `/rlm/compress` made from code: its one source is `ctx_….code`.
        ScopeKind::Doc if sources.len() == 1 && sources[0].ends_with(".code") => "code",
        ScopeKind::Doc => "text",
    }
}

/// The metrics' `source_type` label of a scope kind.
fn kind_label(kind: ScopeKind) -> &'static str {
    match kind {
        ScopeKind::Debate => SOURCE_TYPES[0],
        ScopeKind::Doc => SOURCE_TYPES[1],
    }
}

/// Unix seconds as ISO 8601 UTC (`2026-11-22T22:00:00Z`), as aragora's timestamps read.
pub(super) fn iso8601(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

mod compress;
mod context;
mod query;
mod status;

pub(super) use compress::*;
pub(super) use context::*;
pub(super) use query::*;
pub(super) use status::*;
