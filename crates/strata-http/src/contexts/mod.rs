//! aragora's RLM context API (`/rlm/…`, `aragora/server/handlers/rlm.py`, the SDK's `rlm`
//! namespace) over strata's scopes: a context is a scope. `compress` stores the content as
//! a scope named by its hash (`ctx_…`: the same content is the same context) and builds
//! it; `query` asks it; `stream` hands its levels out in reading order; `contexts`,
//! `context/{id}`, `strategies`, `stream/modes`, `stats`, `status`, `codebase/health` and
//! `/metrics/rlm` describe what exists.

use super::aragora::{QueryResponse, iso8601};
use super::extract::{ApiPath, ApiQuery};
use super::{
    Access, ApiError, ApiJson, ApiResult, AppState, Caller, blocking, check_read, check_write,
};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use strata_core::clock::unix_now;
use strata_core::level::Level;
use strata_engine::built::LevelTally;
use strata_engine::config::Strategy;
use strata_engine::jobs::JobState;
use strata_engine::metrics::{QUERY_TYPES, SOURCE_TYPES};
use strata_engine::node::NodeId;
use strata_engine::source::{self, InputFile};
use strata_engine::store::ScopeKind;
use utoipa::ToSchema;

/// `POST /rlm/compress`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RlmCompressRequest {
    /// The text to compress. A `debate` is JSON Lines of `{round, speaker, text}`.
    content: String,
    /// text (default), code or debate.
    #[serde(default)]
    source_type: Option<String>,
    /// aragora's level count (1-5); strata always builds its five levels.
    #[serde(default)]
    levels: Option<i64>,
}

/// One level of a context.
#[derive(Serialize, ToSchema)]
pub(super) struct LevelStat {
    nodes: usize,
    tokens: u64,
}

/// What a context compression built.
#[derive(Serialize, ToSchema)]
pub(super) struct CompressionResult {
    original_tokens: u64,
    /// Tokens of the derived levels (DETAILED, SUMMARY, ABSTRACT).
    compressed_tokens: u64,
    compression_ratio: f64,
    /// Every level: live nodes and their tokens.
    levels: BTreeMap<String, LevelStat>,
    source_type: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct RlmCompressResponse {
    /// The context's id (a scope name): pass it to `/rlm/query` and `/rlm/stream`.
    context_id: String,
    compression_result: CompressionResult,
    created_at: String,
    job_id: u64,
    /// `done` (200) or `queued`/`running` (202: the wait ran out).
    state: JobState,
    time_seconds: f64,
}

fn stats_of(b: &strata_engine::built::Built) -> (u64, BTreeMap<String, LevelStat>) {
    let compressed = [Level::Detailed, Level::Summary, Level::Abstract]
        .iter()
        .map(|l| b.levels[*l].tokens)
        .sum();
    let levels = b
        .levels
        .iter()
        .map(|(l, t)| {
            (
                l.name().to_ascii_uppercase(),
                LevelStat {
                    nodes: t.live,
                    tokens: t.tokens,
                },
            )
        })
        .collect();
    (compressed, levels)
}

/// Compresses content into a new context (a scope) and waits for its levels (at most
/// `?wait=` seconds, default 25).
#[utoipa::path(post, path = "/api/v1/rlm/compress", tag = "rlm-contexts",
    params(("wait" = Option<u64>, Query, description = "Seconds (0-60) to wait for the build; default 25")),
    request_body = RlmCompressRequest,
    responses((status = 200, description = "Built", body = RlmCompressResponse),
        (status = 202, description = "Still building", body = RlmCompressResponse)))]
pub(super) async fn compress(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    ApiJson(req): ApiJson<RlmCompressRequest>,
) -> ApiResult<(StatusCode, Json<RlmCompressResponse>)> {
    let t0 = Instant::now();
    let source_type = req.source_type.unwrap_or_else(|| "text".into());
    if !matches!(source_type.as_str(), "text" | "code" | "debate") {
        return Err(ApiError::bad(
            "invalid source_type: expected text, code or debate",
        ));
    }
    if let Some(n) = req.levels
        && !(1..=5).contains(&n)
    {
        return Err(ApiError::bad("levels must be an integer between 1 and 5"));
    }
    if req.content.trim().is_empty() {
        return Err(ApiError::bad("content is empty"));
    }
    let hash = blake3::hash(format!("{source_type}\n{}", req.content).as_bytes());
    let id = format!("ctx_{}", &hash.to_hex()[..16]);
    check_write(&access, &id)?;
    let wait = super::aragora::wait_param(&params)?;
    // The source is named after the context: node ids hash the source id, and two
    // contexts must not share a node.
    let (st, scope, kind) = (s.clone(), id.clone(), source_type.clone());
    let name = format!("{id}.{source_type}");
    blocking(move || {
        let file = if kind == "debate" {
            let sources = source::debate(&name, &req.content)?;
            InputFile {
                path: name.clone().into(),
                kind: ScopeKind::Debate,
                bytes: req.content.len() as u64,
                sources,
            }
        } else {
            let input = source::document(&name, req.content)?;
            InputFile::single(ScopeKind::Doc, &name, input)
        };
        Ok(st.engine.ingest(&scope, &[file], unix_now())?)
    })
    .await?;
    let (job, _) = super::aragora::build_and_wait(&s, &id, wait).await?;
    let built = super::aragora::tally_of(&s, &id).await?;
    let (compressed, levels) = stats_of(&built);
    let created = s.engine.scope(&id)?.created_at;
    Ok((
        super::aragora::status_of(&job),
        Json(RlmCompressResponse {
            context_id: id,
            compression_result: CompressionResult {
                original_tokens: built.full_tokens,
                compressed_tokens: compressed,
                compression_ratio: if built.full_tokens > 0 {
                    compressed as f64 / built.full_tokens as f64
                } else {
                    1.0
                },
                levels,
                source_type,
            },
            created_at: iso8601(created),
            job_id: job.id,
            state: job.state,
            time_seconds: t0.elapsed().as_secs_f64(),
        }),
    ))
}

/// The answer to `/rlm/query`: the query's fields, and aragora's `metadata`.
#[derive(Serialize, ToSchema)]
pub(super) struct RlmQueryResponse {
    #[serde(flatten)]
    result: QueryResponse,
    metadata: RlmQueryMetadata,
    timestamp: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct RlmQueryMetadata {
    context_id: String,
    strategy: String,
    refined: bool,
    confidence: f64,
    /// Navigation iterations.
    iterations: u32,
    tokens_processed: u64,
    sub_calls_made: u32,
}

/// Asks a context (any scope) a question.
#[utoipa::path(post, path = "/api/v1/rlm/query", tag = "rlm-contexts",
    request_body = super::aragora::ContextQuery,
    responses((status = 200, description = "The answer", body = RlmQueryResponse)))]
pub(super) async fn query(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiJson(q): ApiJson<super::aragora::ContextQuery>,
) -> ApiResult<Json<RlmQueryResponse>> {
    let (context_id, refined, answer) = super::aragora::query_context(&s, &access, q).await?;
    Ok(Json(RlmQueryResponse {
        metadata: RlmQueryMetadata {
            context_id,
            strategy: answer.strategy.clone(),
            refined,
            confidence: answer.confidence,
            iterations: answer.iterations,
            tokens_processed: answer.tokens_processed,
            sub_calls_made: answer.sub_calls_made,
        },
        result: answer,
        timestamp: iso8601(unix_now()),
    }))
}

/// One stored context.
#[derive(Serialize, ToSchema)]
pub(super) struct ContextSummary {
    id: String,
    source_type: String,
    original_tokens: u64,
    created_at: String,
    sources: usize,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ContextList {
    contexts: Vec<ContextSummary>,
    total: usize,
    limit: usize,
    offset: usize,
}

fn int_param(
    params: &HashMap<String, String>,
    name: &str,
    default: usize,
    max: usize,
) -> ApiResult<usize> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .map(|n| n.min(max))
            .map_err(|_| ApiError::bad(format!("{name} must be a whole number"))),
    }
}

/// Lists the contexts (every scope the caller may see), `?limit=` (default 50, at most 100)
/// from `?offset=` (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/rlm/contexts", tag = "rlm-contexts",
    params(("limit" = Option<usize>, Query, description = "At most 100; default 50"),
        ("offset" = Option<usize>, Query, description = "Default 0")),
    responses((status = 200, description = "The contexts", body = ContextList)))]
pub(super) async fn list(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> ApiResult<Json<ContextList>> {
    let limit = int_param(&params, "limit", 50, 100)?;
    let offset = int_param(&params, "offset", 0, usize::MAX)?;
    let st = s.clone();
    let (total, contexts) = blocking(move || {
        let names = access.visible(st.engine.scope_names()?);
        let mut out = Vec::new();
        for name in names.iter().skip(offset).take(limit) {
            let rec = st.engine.scope(name)?;
            let plan = st.engine.plan(name)?;
            let sources: Vec<String> = rec.sources.iter().map(|e| e.id.clone()).collect();
            out.push(ContextSummary {
                id: name.clone(),
                source_type: super::aragora::source_type(rec.kind, &sources).into(),
                original_tokens: plan.full_tokens,
                created_at: iso8601(rec.created_at),
                sources: sources.len(),
            });
        }
        Ok((names.len(), out))
    })
    .await?;
    Ok(Json(ContextList {
        contexts,
        total,
        limit,
        offset,
    }))
}

/// One context in detail.
#[derive(Serialize, ToSchema)]
pub(super) struct ContextDetail {
    id: String,
    source_type: String,
    original_tokens: u64,
    compressed_tokens: u64,
    compression_ratio: f64,
    /// Every level: planned and live nodes, tokens, the first ten node ids.
    levels: BTreeMap<String, ContextLevel>,
    created_at: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ContextLevel {
    #[serde(flatten)]
    tally: LevelTally,
    nodes: usize,
    node_ids: Vec<String>,
}

/// One context: its levels.
#[utoipa::path(get, path = "/api/v1/rlm/context/{id}", tag = "rlm-contexts",
    params(("id" = String, Path, description = "The context (a scope)")),
    responses((status = 200, description = "The context", body = ContextDetail)))]
pub(super) async fn detail(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ContextDetail>> {
    check_read(&access, &id)?;
    let st = s.clone();
    let d = blocking(move || {
        let rec = st.engine.scope(&id)?;
        let plan = st.engine.plan(&id)?;
        let built = st.engine.tally(&plan, unix_now())?;
        let (compressed, _) = stats_of(&built);
        let sources: Vec<String> = rec.sources.iter().map(|e| e.id.clone()).collect();
        let levels = built
            .levels
            .iter()
            .map(|(l, t)| {
                let ids = plan.ids_at(l);
                (
                    l.name().to_ascii_uppercase(),
                    ContextLevel {
                        tally: *t,
                        nodes: t.live,
                        node_ids: ids.iter().take(10).map(|i| i.to_hex()).collect(),
                    },
                )
            })
            .collect();
        Ok(ContextDetail {
            source_type: super::aragora::source_type(rec.kind, &sources).into(),
            original_tokens: built.full_tokens,
            compressed_tokens: compressed,
            compression_ratio: if built.full_tokens > 0 {
                compressed as f64 / built.full_tokens as f64
            } else {
                1.0
            },
            levels,
            created_at: iso8601(rec.created_at),
            id,
        })
    })
    .await?;
    Ok(Json(d))
}

/// What `DELETE /rlm/context/{id}` did: aragora's fields and what was removed.
#[derive(Serialize, ToSchema)]
pub(super) struct ContextDeleted {
    success: bool,
    context_id: String,
    message: String,
    #[serde(flatten)]
    forgotten: super::forget::Forgotten,
}

/// Deletes a context: its scope is forgotten — sources, every node, vectors and index
/// entries — durably before the answer. A context the token may not read is unknown
/// (404, as for GET), one it may read but not write is 403.
#[utoipa::path(delete, path = "/api/v1/rlm/context/{id}", tag = "rlm-contexts",
    params(("id" = String, Path, description = "The context (a scope)")),
    responses((status = 200, description = "Deleted durably", body = ContextDeleted)))]
pub(super) async fn delete(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ContextDeleted>> {
    check_read(&access, &id)?;
    s.engine.scope(&id)?;
    check_write(&access, &id)?;
    let forgotten = super::forget::run(&s, id.clone(), Vec::new()).await?;
    Ok(Json(ContextDeleted {
        success: true,
        message: "Context deleted".into(),
        context_id: id,
        forgotten,
    }))
}

mod stats;
mod stream;

pub(super) use stats::*;
pub(super) use stream::*;
