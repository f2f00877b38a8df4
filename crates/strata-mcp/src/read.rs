//! The engine's own operations as tools: `context`, `query`, `grep`, `peek`. Each is one
//! engine call; what is added here is the provenance (source spans, time, model).

use super::{LevelName, ToolError, provenance_time};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use strata_core::level::Level;
use strata_core::progress::NoProgress;
use strata_engine::context::LevelChoice;
use strata_engine::engine::{Engine, GrepHit};
use strata_engine::node::{Node, NodeId};

/// Most node ids one `peek` reads, and most bytes of one source range.
const MAX_PEEK_IDS: usize = 50;
const MAX_PEEK_BYTES: u64 = 64 * 1024;
const MAX_GREP: usize = 100;

/// A context window's level: one of the five, or `auto` (the best mix under the budget).
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WindowLevel {
    #[default]
    Auto,
    Full,
    Detailed,
    Summary,
    Abstract,
    Metadata,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Context {
    pub(crate) scope: String,
    /// Default: auto.
    #[serde(default)]
    pub(crate) level: WindowLevel,
    /// Most tokens (cl100k) of the window.
    pub(crate) budget: usize,
    /// Build the window for this question (or the turn about to be spoken): the turns or
    /// passages that bear on it, each with its exact spans and why it was chosen, after a
    /// short overview. `level` is then ignored.
    #[serde(default, rename = "for")]
    pub(crate) focus: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Query {
    pub(crate) question: String,
    /// Scopes to search (default: every scope).
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    /// Answer from what was gathered after this many milliseconds (default
    /// `query.time_limit_ms`; 0 = no limit): `limit_hit` is then `time_limit`.
    #[serde(default)]
    pub(crate) time_limit_ms: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Grep {
    /// Words to search for (BM25 over the levels, stemmed).
    pub(crate) pattern: String,
    /// Scopes to search (default: every scope).
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    /// Levels to search (default: every level).
    #[serde(default)]
    pub(crate) levels: Vec<LevelName>,
    /// Most hits (default 10, at most 100).
    pub(crate) limit: Option<usize>,
}

/// Either `ids` (nodes), or `scope` + `source` with an optional byte range `start..end`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Peek {
    /// Node ids (hex, from grep, load_corpus or context) to read, at most 50.
    #[serde(default)]
    pub(crate) ids: Vec<String>,
    pub(crate) scope: Option<String>,
    /// A source id of `scope`, read from `start` to `end` (UTF-8 byte offsets; default:
    /// the whole source, at most 64 KiB).
    pub(crate) source: Option<String>,
    pub(crate) start: Option<u64>,
    pub(crate) end: Option<u64>,
}

pub(crate) async fn context(engine: &Engine, a: Context, now: u64) -> Result<Value, ToolError> {
    let choice = match a.level {
        WindowLevel::Auto => LevelChoice::Auto,
        WindowLevel::Full => LevelChoice::Fixed(Level::Full),
        WindowLevel::Detailed => LevelChoice::Fixed(Level::Detailed),
        WindowLevel::Summary => LevelChoice::Fixed(Level::Summary),
        WindowLevel::Abstract => LevelChoice::Fixed(Level::Abstract),
        WindowLevel::Metadata => LevelChoice::Fixed(Level::Metadata),
    };
    let w = match &a.focus {
        Some(text) => {
            engine
                .context_for(
                    &a.scope,
                    text,
                    a.budget,
                    &strata_engine::time::TimeRange::default(),
                    now,
                    &NoProgress,
                )
                .await?
        }
        None => {
            engine
                .context(&a.scope, choice, a.budget, now, &NoProgress)
                .await?
        }
    };
    let ids: Vec<NodeId> = w
        .nodes
        .iter()
        .filter_map(|n| NodeId::from_hex(&n.id))
        .collect();
    let spans = super::blocking(|| engine.live_nodes(&ids, now))?;
    let mut v = serde_json::to_value(&w).map_err(|e| ToolError::Failed(e.to_string()))?;
    if let Some(nodes) = v["nodes"].as_array_mut() {
        for (n, node) in nodes.iter_mut().zip(spans) {
            // An excerpt's own spans stand; a whole node cites every span beneath it.
            if n.get("spans").is_none() {
                n["spans"] = json!(node.map(|n| n.citations).unwrap_or_default());
            }
        }
    }
    v["provenance"] = json!({
        "compressor": engine.model_identity(),
        "timestamp": provenance_time(now),
    });
    Ok(v)
}

/// `query`; `stop` is the request's cancellation (a client's `notifications/cancelled`:
/// the query stops at once, and MCP sends no reply to a cancelled request).
pub(crate) async fn query(
    engine: &Engine,
    a: Query,
    now: u64,
    stop: strata_engine::navigate::Stop,
) -> Result<Value, ToolError> {
    let mut qcfg = engine.config().query.clone();
    if let Some(ms) = a.time_limit_ms {
        qcfg.time_limit_ms = ms;
    }
    let r = engine
        .query(
            &strata_engine::Ask::new(&a.scopes, &a.question, now)
                .settings(&qcfg)
                .stop(stop),
        )
        .await?;
    let mut v = serde_json::to_value(&r).map_err(|e| ToolError::Failed(e.to_string()))?;
    v["provenance"] = json!({
        "scopes": if a.scopes.is_empty() { engine.scope_names()? } else { a.scopes },
        "navigator": match engine.config().model.root.trim() {
            "" => "offline",
            root => root,
        },
        "compressor": engine.model_identity(),
        "timestamp": provenance_time(now),
    });
    Ok(v)
}

pub(crate) async fn grep(engine: &Engine, a: Grep, now: u64) -> Result<Value, ToolError> {
    if a.pattern.trim().is_empty() {
        return Err(ToolError::Invalid("pattern is empty".into()));
    }
    let limit = a.limit.unwrap_or(10);
    if limit == 0 || limit > MAX_GREP {
        return Err(ToolError::Invalid(format!("limit must be 1 to {MAX_GREP}")));
    }
    let levels: Vec<Level> = a.levels.iter().map(|l| l.level()).collect();
    let hits = engine
        .grep(&a.scopes, &a.pattern, &levels, limit, now)
        .await?;
    let hits = super::blocking(|| with_spans(engine, hits, now))?;
    Ok(json!({
        "hits": hits,
        "provenance": {
            "pattern": a.pattern,
            "scopes": if a.scopes.is_empty() { engine.scope_names()? } else { a.scopes },
            "levels": levels,
            "timestamp": provenance_time(now),
        },
    }))
}

/// Grep hits, each with the source spans of its node.
pub(crate) fn with_spans(
    engine: &Engine,
    hits: Vec<GrepHit>,
    now: u64,
) -> strata_engine::Result<Vec<Value>> {
    let ids: Vec<NodeId> = hits
        .iter()
        .filter_map(|h| NodeId::from_hex(&h.id))
        .collect();
    let nodes = engine.live_nodes(&ids, now)?;
    Ok(hits
        .into_iter()
        .zip(nodes)
        .map(|(h, n)| {
            let mut v = serde_json::to_value(&h).expect("a hit serializes");
            v["spans"] = json!(n.map(|n| n.citations).unwrap_or_default());
            v
        })
        .collect())
}

/// A node as `peek` shows it: text, level, children, metadata, source spans.
pub(crate) fn node_json(id: &str, n: &Node) -> Value {
    json!({
        "id": id,
        "scope": n.scope,
        "level": n.level,
        "text": n.text,
        "tokens": n.tokens,
        "children": n.children.iter().map(NodeId::to_hex).collect::<Vec<_>>(),
        "meta": n.meta,
        "spans": n.citations,
    })
}

pub(crate) fn peek(engine: &Engine, a: Peek, now: u64) -> Result<Value, ToolError> {
    match (a.ids.is_empty(), &a.scope, &a.source) {
        (false, None, None) if a.start.is_none() && a.end.is_none() => {
            peek_nodes(engine, &a.ids, now)
        }
        (true, Some(scope), Some(source)) => {
            peek_source(engine, scope, source, a.start, a.end, now)
        }
        _ => Err(ToolError::Invalid(
            "give either `ids`, or `scope` and `source` (with an optional `start` and `end`)"
                .into(),
        )),
    }
}

fn peek_nodes(engine: &Engine, ids: &[String], now: u64) -> Result<Value, ToolError> {
    if ids.len() > MAX_PEEK_IDS {
        return Err(ToolError::Invalid(format!(
            "{} ids given; peek reads at most {MAX_PEEK_IDS}",
            ids.len()
        )));
    }
    let parsed = ids
        .iter()
        .map(|s| {
            NodeId::from_hex(s).ok_or_else(|| {
                ToolError::Invalid(format!(
                    "`{}` is not a node id (64 hex digits)",
                    s.escape_debug()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let nodes = engine.live_nodes(&parsed, now)?;
    let mut out = Vec::with_capacity(nodes.len());
    for (id, n) in ids.iter().zip(nodes) {
        let n = n.ok_or_else(|| {
            ToolError::Invalid(format!(
                "no live node `{id}` (it never existed, or expired: ask again with ids from a fresh grep or load_corpus)"
            ))
        })?;
        out.push(node_json(id, &n));
    }
    Ok(json!({
        "nodes": out,
        "provenance": { "timestamp": provenance_time(now) },
    }))
}

fn peek_source(
    engine: &Engine,
    scope: &str,
    source: &str,
    start: Option<u64>,
    end: Option<u64>,
    now: u64,
) -> Result<Value, ToolError> {
    // The scope must exist and list the source (an unknown one names the known scopes).
    let plan = engine.plan(scope)?;
    if !plan.sources.iter().any(|s| s.id == source) {
        return Err(ToolError::Invalid(format!(
            "scope `{scope}` has no source `{}`",
            source.escape_debug()
        )));
    }
    let text = engine.source_text(scope, source)?;
    let len = text.len() as u64;
    let start = start.unwrap_or(0);
    let end = end.unwrap_or(len.min(start.saturating_add(MAX_PEEK_BYTES)));
    if start > end || end > len {
        return Err(ToolError::Invalid(format!(
            "bytes {start}..{end} are not within source `{source}` (0..{len})"
        )));
    }
    if end - start > MAX_PEEK_BYTES {
        return Err(ToolError::Invalid(format!(
            "bytes {start}..{end} are {} bytes; peek reads at most {MAX_PEEK_BYTES} at once",
            end - start
        )));
    }
    let slice = text.get(start as usize..end as usize).ok_or_else(|| {
        ToolError::Invalid(format!(
            "bytes {start}..{end} of `{source}` cut a character: use offsets from spans"
        ))
    })?;
    Ok(json!({
        "scope": scope,
        "source": source,
        "start": start,
        "end": end,
        "source_bytes": len,
        "text": slice,
        "spans": [{ "source": source, "start": start, "end": end }],
        "provenance": { "timestamp": provenance_time(now) },
    }))
}
