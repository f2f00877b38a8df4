//! `execute_analysis`: a sandboxed script over the session's segments and sub-query
//! results. This module checks the arguments and gathers the inputs the script sees; the
//! sandbox (issue 11, item 2: a rhai engine with operation, depth, size and time limits) is
//! not part of this build, so a call that passes every check says so.

use super::ToolError;
use super::session::Session;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Most operations and wall time a script may use, and their defaults.
const MAX_OPERATIONS: u64 = 10_000_000;
const DEFAULT_OPERATIONS: u64 = 1_000_000;
const MAX_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_TIMEOUT_MS: u64 = 5_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteAnalysis {
    /// A Rhai script. It sees `segments` (id → items) and `sub_queries` (id → result) and
    /// returns its answer as its last expression.
    pub(crate) script: String,
    /// Segment ids (from load_corpus) the script may read.
    #[serde(default)]
    pub(crate) segments: Vec<String>,
    /// Sub-query result ids (from sub_query) the script may read.
    #[serde(default)]
    pub(crate) sub_queries: Vec<String>,
    /// Most operations the script may run (default 1,000,000, at most 10,000,000).
    pub(crate) max_operations: Option<u64>,
    /// Most wall time in milliseconds (default 5,000, at most 60,000).
    pub(crate) timeout_ms: Option<u64>,
}

/// What a script runs over, and under which limits.
#[derive(Debug)]
pub(crate) struct Inputs {
    /// `{"segments": {id: [item...]}, "sub_queries": {id: result}}`.
    pub(crate) data: Value,
    pub(crate) max_operations: u64,
    pub(crate) timeout_ms: u64,
}

/// Checks the arguments and gathers the inputs (unknown ids are invalid arguments).
pub(crate) fn inputs(session: &Session, a: &ExecuteAnalysis) -> Result<Inputs, ToolError> {
    if a.script.trim().is_empty() {
        return Err(ToolError::Invalid("script is empty".into()));
    }
    let max_operations = a.max_operations.unwrap_or(DEFAULT_OPERATIONS);
    if max_operations == 0 || max_operations > MAX_OPERATIONS {
        return Err(ToolError::Invalid(format!(
            "max_operations must be 1 to {MAX_OPERATIONS}"
        )));
    }
    let timeout_ms = a.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(ToolError::Invalid(format!(
            "timeout_ms must be 1 to {MAX_TIMEOUT_MS}"
        )));
    }
    let mut segments = Map::new();
    for id in &a.segments {
        let seg = session.segment(id)?;
        segments.insert(seg.id.clone(), json!(seg.items));
    }
    let mut sub_queries = Map::new();
    for id in &a.sub_queries {
        let rec = session.sub_query(id)?;
        sub_queries.insert(rec.id.clone(), rec.result.clone());
    }
    Ok(Inputs {
        data: json!({ "segments": segments, "sub_queries": sub_queries }),
        max_operations,
        timeout_ms,
    })
}

/// Runs `execute_analysis`.
pub(crate) fn execute_analysis(session: &Session, a: ExecuteAnalysis) -> Result<Value, ToolError> {
    let inputs = inputs(session, &a)?;
    let n = |k: &str| inputs.data[k].as_object().map_or(0, Map::len);
    Err(ToolError::Failed(format!(
        "execute_analysis is not available in this build: the script sandbox is not compiled in (the arguments were checked: {} segment(s), {} sub-query result(s), limits {} operations and {} ms)",
        n("segments"),
        n("sub_queries"),
        inputs.max_operations,
        inputs.timeout_ms
    )))
}
