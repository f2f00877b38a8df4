//! `execute_analysis`: a sandboxed script over the session's segments and sub-query
//! results. This module checks the arguments, gathers the inputs the script sees (the
//! constants `segments` and `sub_queries`) and runs it in [`strata_engine::script`] (Rhai with
//! operation, depth, size, memory, call and wall-time limits; no files, network,
//! processes or modules). A segment is bound as a table the script reads an item at a
//! time (`segments[id].len()`, `segments[id][i]`, `for item in segments[id]`), so a
//! whole-corpus segment costs nothing until read. Its primitives are answered by the
//! navigator's one script host (`navigate::primitives`) over this module's view: `grep`
//! and `search` over the segments' scopes, `peek` and `children` of live nodes,
//! `llm_query` / `llm_batch` through the engine's sub-model (concurrent, under the shared
//! limiter); `final(answer, ids)` ends it.

use super::read;
use super::session::{Segment, Session, SubQueryRecord};
use super::{ToolError, provenance_time};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use strata_core::level::Level;
use strata_engine::engine::Engine;
use strata_engine::model::ChatModel;
use strata_engine::navigate::primitives::{Answer, Primitives, View};
use strata_engine::node::NodeId;
use strata_engine::script::{self, Bindings, Limits, ScriptError, Table};

/// Most operations and wall time a script may use, and their defaults.
const MAX_OPERATIONS: u64 = 10_000_000;
const DEFAULT_OPERATIONS: u64 = 1_000_000;
const MAX_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_TIMEOUT_MS: u64 = 5_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteAnalysis {
    /// A Rhai script. It sees `segments` (id → a table of items: `len()`, `[i]`, `for`,
    /// `map`, `filter`) and `sub_queries` (id → result) and returns its answer as its last
    /// expression.
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
pub(crate) struct Inputs {
    pub(crate) segments: Vec<Arc<Segment>>,
    pub(crate) sub_queries: Vec<Arc<SubQueryRecord>>,
    pub(crate) max_operations: u64,
    pub(crate) timeout_ms: u64,
    /// The scopes of the segments given (where `grep` and `search` look; none = every
    /// scope).
    pub(crate) scopes: Vec<String>,
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
    let mut segments: Vec<Arc<Segment>> = Vec::new();
    let mut scopes: Vec<String> = Vec::new();
    for id in &a.segments {
        let seg = session.segment(id)?;
        if !scopes.contains(&seg.scope) {
            scopes.push(seg.scope.clone());
        }
        if !segments.iter().any(|s| s.id == seg.id) {
            segments.push(seg);
        }
    }
    let mut sub_queries: Vec<Arc<SubQueryRecord>> = Vec::new();
    for id in &a.sub_queries {
        let rec = session.sub_query(id)?;
        if !sub_queries.iter().any(|r| r.id == rec.id) {
            sub_queries.push(rec);
        }
    }
    Ok(Inputs {
        segments,
        sub_queries,
        max_operations,
        timeout_ms,
        scopes,
    })
}

/// Runs `execute_analysis`: the script's value (or its `final` answer and ids), what it
/// used, and the provenance. A script that breaks a limit or fails is a tool error naming
/// why, in one line; nothing it did is kept.
pub(crate) async fn execute_analysis(
    engine: &Engine,
    session: &Session,
    a: ExecuteAnalysis,
    now: u64,
) -> Result<Value, ToolError> {
    let inputs = inputs(session, &a)?;
    let limits = Limits {
        max_operations: inputs.max_operations,
        wall_time: std::time::Duration::from_millis(inputs.timeout_ms),
        ..Limits::default()
    };
    let mut bindings = Bindings::new();
    bindings.insert_tables(
        "segments",
        inputs
            .segments
            .iter()
            .map(|s| (s.id.clone(), Arc::new(Items(s.clone())) as Arc<dyn Table>))
            .collect(),
    );
    bindings.insert(
        "sub_queries",
        Value::Object(
            inputs
                .sub_queries
                .iter()
                .map(|r| (r.id.clone(), r.result.clone()))
                .collect::<Map<String, Value>>(),
        ),
    );
    let mut host = Primitives::new(Corpus {
        engine,
        scopes: inputs.scopes.clone(),
        now,
        helper: engine.sub_chat().cloned(),
        sub_calls: 0,
    });
    let out = script::run(&a.script, &bindings, &limits, &mut host)
        .await
        .map_err(|e| match e {
            ScriptError::Invalid(_) => ToolError::Invalid(e.to_string()),
            e => ToolError::Failed(e.to_string()),
        })?;
    Ok(json!({
        "value": out.value,
        "final": out.final_answer.map(|f| json!({"answer": f.answer, "ids": f.ids})),
        "operations": out.operations,
        "primitive_calls": out.calls,
        "sub_calls": host.view().sub_calls,
        "elapsed_ms": out.elapsed_ms,
        "memory_peak_bytes": out.memory_peak,
        "provenance": {
            "segments": inputs.segments.len(),
            "sub_queries": inputs.sub_queries.len(),
            "scopes": inputs.scopes,
            "limits": {"max_operations": inputs.max_operations, "timeout_ms": inputs.timeout_ms},
            "timestamp": provenance_time(now),
        },
    }))
}

/// A segment as a script reads it: an item at a time, as `load_corpus` pages show them.
struct Items(Arc<Segment>);

impl Table for Items {
    fn len(&self) -> usize {
        self.0.items.len()
    }
    fn item(&self, i: usize) -> Value {
        let mut v = serde_json::to_value(&self.0.items[i]).expect("an item serializes");
        v["index"] = json!(i);
        v
    }
}

/// `execute_analysis`'s view: every live node of the segments' scopes (every scope when
/// no segment is given), the engine's sub-model for helper calls, no budget but the
/// script's limits.
struct Corpus<'e> {
    engine: &'e Engine,
    scopes: Vec<String>,
    now: u64,
    helper: Option<Arc<dyn ChatModel>>,
    sub_calls: u32,
}

impl Corpus<'_> {
    fn node_id(id: &str) -> Result<NodeId, String> {
        NodeId::from_hex(id).ok_or_else(|| format!("`{}` is not a node id", id.escape_debug()))
    }

    fn hits(&self, pattern: &str, levels: &[Level], limit: usize) -> Answer {
        let hits = strata_engine::navigate::wait_for(self.engine.grep(
            &self.scopes,
            pattern,
            levels,
            limit,
            self.now,
        ))
        .map_err(|e| e.to_string())?;
        read::with_spans(self.engine, hits, self.now)
            .map(Value::from)
            .map_err(|e| e.to_string())
    }
}

impl View for Corpus<'_> {
    /// Every level unless one is named.
    fn grep(&mut self, pattern: &str, level: Option<Level>, limit: usize) -> Answer {
        let levels: Vec<Level> = level.into_iter().collect();
        self.hits(pattern, &levels, limit)
    }

    fn search(&mut self, query: &str, limit: usize) -> Answer {
        self.hits(query, &[], limit)
    }

    fn peek(&mut self, id: &str) -> Answer {
        let nid = Self::node_id(id)?;
        let n = self
            .engine
            .live_nodes(&[nid], self.now)
            .map_err(|e| e.to_string())?
            .pop()
            .flatten()
            .ok_or_else(|| format!("no live node `{id}`"))?;
        Ok(read::node_json(id, &n))
    }

    fn children(&mut self, id: &str) -> Answer {
        let node = self.peek(id)?;
        Ok(node["children"].clone())
    }

    fn helper(&self) -> Result<&dyn ChatModel, String> {
        self.helper.as_deref().ok_or_else(|| {
            "no model to ask: start strata mcp with --model (or --root-model) and --base-url"
                .to_string()
        })
    }

    fn sub_calls_left(&self) -> Option<usize> {
        None
    }

    fn sub_called(&mut self, _what: &str, asked: usize, _failed: usize) {
        self.sub_calls += asked as u32;
    }
}
