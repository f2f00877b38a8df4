//! aragora's RLM context API (`/rlm/…`, `aragora/server/handlers/rlm.py`, the SDK's `rlm`
//! namespace) over strata's scopes: a context is a scope. `compress` stores the content as
//! a scope named by its hash (`ctx_…`: the same content is the same context) and builds
//! it; `query` asks it; `stream` hands its levels out in reading order; `contexts`,
//! `context/{id}`, `strategies`, `stream/modes`, `stats`, `status`, `codebase/health` and
//! `/metrics/rlm` describe what exists.

use super::aragora::{QueryResponse, iso8601};
use super::extract::{ApiPath, ApiQuery};
use super::{ApiError, ApiJson, ApiResult, AppState, blocking};
use crate::built::LevelTally;
use crate::config::Strategy;
use crate::clock::unix_now;
use crate::jobs::JobState;
use crate::level::Level;
use crate::metrics::{QUERY_TYPES, SOURCE_TYPES};
use crate::source::{self, InputFile};
use crate::store::ScopeKind;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
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

fn stats_of(b: &crate::built::Built) -> (u64, BTreeMap<String, LevelStat>) {
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
    ApiJson(q): ApiJson<super::aragora::ContextQuery>,
) -> ApiResult<Json<RlmQueryResponse>> {
    let (context_id, refined, answer) = super::aragora::query_context(&s, q).await?;
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

/// Lists the contexts (every scope), `?limit=` (default 50, at most 100) from `?offset=`.
#[utoipa::path(get, path = "/api/v1/rlm/contexts", tag = "rlm-contexts",
    params(("limit" = Option<usize>, Query, description = "At most 100; default 50"),
        ("offset" = Option<usize>, Query, description = "Default 0")),
    responses((status = 200, description = "The contexts", body = ContextList)))]
pub(super) async fn list(
    State(s): State<Arc<AppState>>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> ApiResult<Json<ContextList>> {
    let limit = int_param(&params, "limit", 50, 100)?;
    let offset = int_param(&params, "offset", 0, usize::MAX)?;
    let st = s.clone();
    let (total, contexts) = blocking(move || {
        let names = st.engine.scope_names()?;
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
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ContextDetail>> {
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

/// One strategy.
#[derive(Serialize, ToSchema)]
pub(super) struct StrategyInfo {
    name: String,
    description: String,
    use_case: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct Strategies {
    strategies: BTreeMap<String, StrategyInfo>,
    default: String,
    documentation: String,
}

fn describe(s: Strategy) -> (&'static str, &'static str, &'static str) {
    match s {
        Strategy::Auto => (
            "Auto",
            "The root model chooses every step when one is configured; otherwise the hierarchical descent",
            "General purpose",
        ),
        Strategy::Offline => (
            "Offline",
            "Always the offline (BM25) navigator, its hierarchical descent; no model is called",
            "Deterministic answers, no model cost",
        ),
        Strategy::Peek => (
            "Peek",
            "Reads the overview and every group's summary, keeps the groups whose text matches, reads their chunks whole",
            "Rapid exploration, questions about what a section says",
        ),
        Strategy::Grep => (
            "Grep",
            "One flat search over every chunk (detailed and full text), no descent",
            "Finding a specific fact, a name, a number",
        ),
        Strategy::PartitionMap => (
            "Partition Map",
            "Searches each group on its own and lets each group's best chunk compete (a root model: one helper call per group)",
            "Questions whose evidence is spread over many rounds or sections",
        ),
        Strategy::Summarize => (
            "Summarize",
            "The compressed levels decide: groups by their SUMMARY, chunks by their DETAILED; full text is read only to cite",
            "Long documents, getting the gist",
        ),
        Strategy::Hierarchical => (
            "Hierarchical",
            "Down the pre-built tree: ABSTRACT, groups by the evidence beneath them, chunks within the groups",
            "Complex documents, iterative exploration",
        ),
    }
}

/// The strategies a query may name.
#[utoipa::path(get, path = "/api/v1/rlm/strategies", tag = "rlm-contexts",
    responses((status = 200, description = "The strategies", body = Strategies)))]
pub(super) async fn strategies() -> Json<Strategies> {
    Json(Strategies {
        strategies: Strategy::ALL
            .into_iter()
            .map(|s| {
                let (name, description, use_case) = describe(s);
                (
                    s.name().to_string(),
                    StrategyInfo {
                        name: name.into(),
                        description: description.into(),
                        use_case: use_case.into(),
                    },
                )
            })
            .collect(),
        default: Strategy::default().name().into(),
        documentation: "README.md, section Strategies".into(),
    })
}

/// `POST /rlm/stream`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamRequest {
    context_id: String,
    /// top_down (default), bottom_up, targeted or progressive.
    #[serde(default)]
    mode: Option<String>,
    /// Only the nodes that match this search.
    #[serde(default)]
    query: Option<String>,
    /// targeted: the level (default SUMMARY); otherwise the level to start from.
    #[serde(default)]
    level: Option<String>,
    /// Tokens per chunk, about (default 500).
    #[serde(default)]
    chunk_size: Option<usize>,
    #[serde(default)]
    include_metadata: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct StreamChunk {
    /// The level, upper case.
    level: String,
    content: String,
    token_count: u64,
    is_final: bool,
    /// The node ids in the chunk (when include_metadata).
    metadata: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct StreamResponse {
    context_id: String,
    mode: String,
    query: Option<String>,
    chunks: Vec<StreamChunk>,
    total_chunks: usize,
    timestamp: String,
}

/// The modes, in one place: (mode, description, use case).
const MODES: [(&str, &str, &str); 4] = [
    (
        "top_down",
        "ABSTRACT, then SUMMARY, DETAILED and FULL, each in reading order",
        "When you need a quick overview first",
    ),
    (
        "bottom_up",
        "FULL, then DETAILED, SUMMARY and ABSTRACT",
        "When you need specific details first",
    ),
    (
        "targeted",
        "One level only (`level`, default SUMMARY)",
        "When you know exactly what level you need",
    ),
    (
        "progressive",
        "Like top_down, in chunks of `chunk_size` tokens (the HTTP answer holds them all)",
        "For UIs that show content as it comes",
    ),
];

/// A context's levels in reading order, in chunks of about `chunk_size` tokens.
#[utoipa::path(post, path = "/api/v1/rlm/stream", tag = "rlm-contexts",
    request_body = StreamRequest,
    responses((status = 200, description = "The chunks", body = StreamResponse)))]
pub(super) async fn stream(
    State(s): State<Arc<AppState>>,
    ApiJson(req): ApiJson<StreamRequest>,
) -> ApiResult<Json<StreamResponse>> {
    let mode = req.mode.clone().unwrap_or_else(|| "top_down".into());
    let down = [
        Level::Abstract,
        Level::Summary,
        Level::Detailed,
        Level::Full,
    ];
    let from: Option<Level> = req.level.as_deref().map(str::parse).transpose()?;
    let levels: Vec<Level> = match mode.as_str() {
        "top_down" | "progressive" => down
            .into_iter()
            .filter(|l| from.is_none_or(|f| *l <= f))
            .collect(),
        "bottom_up" => down
            .into_iter()
            .rev()
            .filter(|l| from.is_none_or(|f| *l >= f))
            .collect(),
        "targeted" => vec![from.unwrap_or(Level::Summary)],
        other => {
            return Err(ApiError::bad(format!(
                "unknown mode `{other}`: expected top_down, bottom_up, targeted or progressive"
            )));
        }
    };
    let chunk_size = req.chunk_size.unwrap_or(500).max(1);
    let with_meta = req.include_metadata.unwrap_or(true);
    let now = unix_now();
    s.engine.scope(&req.context_id)?;
    let (view, report) = s.engine.serving_view(&req.context_id, now).await?;
    if let Some(r) = report {
        s.metrics.observe_build(&r);
    }
    let (st, plan, context_id, query) = (
        s.clone(),
        view.plan,
        req.context_id.clone(),
        req.query.clone(),
    );
    let chunks = blocking(move || {
        let matching: Option<HashSet<String>> = match &query {
            Some(q) if !q.trim().is_empty() => Some(
                st.engine
                    .grep(std::slice::from_ref(&context_id), q, &levels, 1000, now)?
                    .into_iter()
                    .map(|h| h.id)
                    .collect(),
            ),
            _ => None,
        };
        let corpus = st.engine.corpus();
        let mut out: Vec<StreamChunk> = Vec::new();
        for level in levels {
            let mut text = String::new();
            let mut tokens = 0u64;
            let mut ids: Vec<String> = Vec::new();
            for id in plan.ids_at(level) {
                let hex = id.to_hex();
                if matching.as_ref().is_some_and(|m| !m.contains(&hex)) {
                    continue;
                }
                let n = corpus.node(&id, now)?;
                if !ids.is_empty() && tokens + n.tokens as u64 > chunk_size as u64 {
                    out.push(chunk(level, &mut text, &mut tokens, &mut ids, with_meta));
                }
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&n.text);
                tokens += n.tokens as u64;
                ids.push(hex);
            }
            if !ids.is_empty() {
                out.push(chunk(level, &mut text, &mut tokens, &mut ids, with_meta));
            }
        }
        if let Some(last) = out.last_mut() {
            last.is_final = true;
        }
        Ok(out)
    })
    .await?;
    Ok(Json(StreamResponse {
        context_id: req.context_id,
        mode,
        query: req.query,
        total_chunks: chunks.len(),
        chunks,
        timestamp: iso8601(now),
    }))
}

fn chunk(
    level: Level,
    text: &mut String,
    tokens: &mut u64,
    ids: &mut Vec<String>,
    with_meta: bool,
) -> StreamChunk {
    let mut metadata = BTreeMap::new();
    let ids = std::mem::take(ids);
    if with_meta {
        metadata.insert("node_ids".to_string(), ids);
    }
    StreamChunk {
        level: level.name().to_ascii_uppercase(),
        content: std::mem::take(text),
        token_count: std::mem::take(tokens),
        is_final: false,
        metadata,
    }
}

#[derive(Serialize, ToSchema)]
pub(super) struct StreamMode {
    mode: String,
    description: String,
    use_case: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct StreamModes {
    modes: Vec<StreamMode>,
}

/// The modes of `/rlm/stream`.
#[utoipa::path(get, path = "/api/v1/rlm/stream/modes", tag = "rlm-contexts",
    responses((status = 200, description = "The modes", body = StreamModes)))]
pub(super) async fn stream_modes() -> Json<StreamModes> {
    Json(StreamModes {
        modes: MODES
            .iter()
            .map(|(m, d, u)| StreamMode {
                mode: m.to_string(),
                description: d.to_string(),
                use_case: u.to_string(),
            })
            .collect(),
    })
}

#[derive(Serialize, ToSchema)]
pub(super) struct CacheStats {
    /// Nodes builds found live.
    hits: u64,
    /// Nodes builds had to make.
    misses: u64,
    hit_rate: f64,
}

#[derive(Serialize, ToSchema)]
pub(super) struct ContextsStats {
    stored: usize,
    /// The first 20.
    ids: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub(super) struct SystemStats {
    /// aragora's external `rlm` package: never (strata is its own).
    has_official_rlm: bool,
    compressor_available: bool,
    rlm_available: bool,
    /// The compressor's identity (model and prompt version).
    compressor: String,
}

#[derive(Serialize, ToSchema)]
pub(super) struct RlmStats {
    cache: CacheStats,
    contexts: ContextsStats,
    system: SystemStats,
    timestamp: String,
    nodes: usize,
    indexed_docs: u64,
    unindexed: usize,
    disk_bytes: u64,
}

/// Cache, contexts and store numbers.
#[utoipa::path(get, path = "/api/v1/rlm/stats", tag = "rlm-contexts",
    responses((status = 200, description = "The numbers", body = RlmStats)))]
pub(super) async fn stats(State(s): State<Arc<AppState>>) -> ApiResult<Json<RlmStats>> {
    let st = s.clone();
    let stats = blocking(move || Ok(st.engine.stats(unix_now())?)).await?;
    let (hits, misses) = (s.metrics.cache_hits.get(), s.metrics.cache_misses.get());
    let ids: Vec<String> = stats.scopes.iter().map(|sc| sc.scope.clone()).collect();
    Ok(Json(RlmStats {
        cache: CacheStats {
            hits,
            misses,
            hit_rate: ratio(hits as f64, (hits + misses) as f64),
        },
        contexts: ContextsStats {
            stored: ids.len(),
            ids: ids.into_iter().take(20).collect(),
        },
        system: SystemStats {
            has_official_rlm: false,
            compressor_available: true,
            rlm_available: true,
            compressor: s.engine.model_identity(),
        },
        timestamp: iso8601(unix_now()),
        nodes: stats.nodes,
        indexed_docs: stats.indexed_docs,
        unindexed: stats.unindexed,
        disk_bytes: stats.disk_bytes,
    }))
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

#[derive(Serialize, ToSchema)]
pub(super) struct RlmReadiness {
    has_official_rlm: bool,
    rlm_available: bool,
    /// Every scope's tree is built and live.
    context_ready: bool,
    /// The largest request body accepted.
    max_content_bytes: usize,
}

#[derive(Serialize, ToSchema)]
pub(super) struct CodebaseHealth {
    /// `available` (the store holds scopes, the index is in step), `indexing` (changes
    /// await the index) or `missing` (no scope yet).
    status: String,
    scopes: usize,
    sources: usize,
    nodes: usize,
    indexed_docs: u64,
    unindexed: usize,
    rlm: RlmReadiness,
    timestamp: String,
}

/// The health of what strata serves from: its store and index (aragora's codebase
/// context is strata's corpus).
#[utoipa::path(get, path = "/api/v1/rlm/codebase/health", tag = "rlm-contexts",
    responses((status = 200, description = "The health", body = CodebaseHealth)))]
pub(super) async fn codebase_health(
    State(s): State<Arc<AppState>>,
) -> ApiResult<Json<CodebaseHealth>> {
    let st = s.clone();
    let stats = blocking(move || Ok(st.engine.stats(unix_now())?)).await?;
    let status = if stats.scopes.is_empty() {
        "missing"
    } else if stats.unindexed > 0 {
        "indexing"
    } else {
        "available"
    };
    Ok(Json(CodebaseHealth {
        status: status.into(),
        scopes: stats.scopes.len(),
        sources: stats.scopes.iter().map(|sc| sc.sources).sum(),
        nodes: stats.nodes,
        indexed_docs: stats.indexed_docs,
        unindexed: stats.unindexed,
        rlm: RlmReadiness {
            has_official_rlm: false,
            rlm_available: true,
            context_ready: !stats.scopes.is_empty() && stats.scopes.iter().all(|sc| sc.stale == 0),
            max_content_bytes: s.cfg.body_limit_bytes,
        },
        timestamp: iso8601(unix_now()),
    }))
}

#[derive(Serialize, ToSchema)]
pub(super) struct RlmStatus {
    available: bool,
    provider: String,
    version: String,
    features: Vec<String>,
}

/// What this server offers (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/rlm/status", tag = "rlm-contexts",
    responses((status = 200, description = "The status", body = RlmStatus)))]
pub(super) async fn status(State(s): State<Arc<AppState>>) -> Json<RlmStatus> {
    let mut features: Vec<String> = [
        "compression",
        "queries",
        "refinement",
        "streaming",
        "citations",
    ]
    .map(String::from)
    .to_vec();
    if !s.engine.config().model.root.is_empty() && s.engine.config().model.root != "offline" {
        features.push("root_model".into());
    }
    if s.engine.embedder().is_some() {
        features.push("hybrid_retrieval".into());
    }
    Json(RlmStatus {
        available: true,
        provider: "strata".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        features,
    })
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct DashCompressions {
    total: u64,
    by_type: BTreeMap<String, u64>,
    avg_ratio: f64,
    tokens_saved: u64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct DashQueries {
    total: u64,
    by_type: BTreeMap<String, u64>,
    avg_duration: f64,
    success_rate: f64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct DashCache {
    hits: u64,
    misses: u64,
    hit_rate: f64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct DashRefinement {
    avg_iterations: f64,
    success_rate: f64,
    ready_false_total: u64,
}

/// aragora's RLM dashboard, from the Prometheus metrics of this process.
#[derive(Serialize, ToSchema)]
pub(super) struct RlmDashboard {
    compressions: DashCompressions,
    queries: DashQueries,
    cache: DashCache,
    refinement: DashRefinement,
}

/// aragora's dashboard numbers (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/metrics/rlm", tag = "rlm-contexts",
    responses((status = 200, description = "The numbers", body = RlmDashboard)))]
pub(super) async fn dashboard(State(s): State<Arc<AppState>>) -> Json<RlmDashboard> {
    let a = &s.metrics.aragora;
    let mut by_type = BTreeMap::new();
    let (mut ratio_sum, mut ratio_n, mut saved) = (0.0, 0u64, 0u64);
    for st in SOURCE_TYPES {
        let n = a.compressions.with_label_values(&[st, "success"]).get()
            + a.compressions.with_label_values(&[st, "failure"]).get();
        if n > 0 {
            by_type.insert(st.to_string(), n);
        }
        let h = a.compression_ratio.with_label_values(&[st]);
        ratio_sum += h.get_sample_sum();
        ratio_n += h.get_sample_count();
        saved += a.tokens_saved.with_label_values(&[st]).get();
    }
    let mut q_by_type = BTreeMap::new();
    let (mut dur_sum, mut dur_n) = (0.0, 0u64);
    for qt in QUERY_TYPES {
        let h = a.query_duration.with_label_values(&[qt]);
        if h.get_sample_count() > 0 {
            q_by_type.insert(qt.to_string(), h.get_sample_count());
        }
        dur_sum += h.get_sample_sum();
        dur_n += h.get_sample_count();
    }
    let (mut it_sum, mut it_n, mut ok) = (0.0, 0u64, 0u64);
    for st in Strategy::ALL {
        let h = a.refinement_iterations.with_label_values(&[st.name()]);
        it_sum += h.get_sample_sum();
        it_n += h.get_sample_count();
        ok += a.refinement_success.with_label_values(&[st.name()]).get();
    }
    let not_ready = s.metrics.ready_false.get();
    let (hits, misses) = (a.cache_hits.get(), a.cache_misses.get());
    Json(RlmDashboard {
        compressions: DashCompressions {
            total: by_type.values().sum(),
            by_type,
            avg_ratio: ratio(ratio_sum, ratio_n as f64),
            tokens_saved: saved,
        },
        queries: DashQueries {
            total: dur_n,
            by_type: q_by_type,
            avg_duration: ratio(dur_sum, dur_n as f64),
            success_rate: ratio(ok as f64, (ok + not_ready) as f64),
        },
        cache: DashCache {
            hits,
            misses,
            hit_rate: ratio(hits as f64, (hits + misses) as f64),
        },
        refinement: DashRefinement {
            avg_iterations: ratio(it_sum, it_n as f64),
            success_rate: ratio(ok as f64, (ok + not_ready) as f64),
            ready_false_total: not_ready,
        },
    })
}
