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
use super::{ApiError, ApiJson, ApiResult, AppState, QuerySummary, blocking, schedule};
use crate::built::{Built, LevelTally};
use crate::config::QueryConfig;
use crate::context::LevelChoice;
use crate::clock::unix_now;
use crate::engine::Engine;
use crate::jobs::{Job, JobOutcome, JobState};
use crate::level::Level;
use crate::metrics::{Compression, Metrics, QUERY_TYPES, QueryEvent, SOURCE_TYPES};
use crate::model::Usage;
use crate::navigate::{Citation, QueryResult, Step};
use crate::node::NodeId;
use crate::store::ScopeKind;
use axum::Json;
use axum::extract::{MatchedPath, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
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

// ------------------------------------------------------------------------------ queries

/// `POST /debates/{id}/query-rlm`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DebateQuery {
    /// The question (at most 10,000 characters).
    query: String,
    /// auto, peek, grep, partition_map, summarize, hierarchical (aragora's), or offline.
    #[serde(default)]
    strategy: Option<String>,
    /// Navigation iterations; outside 1-10 clamped.
    #[serde(default)]
    max_iterations: Option<i64>,
    /// Where navigation starts: ABSTRACT, SUMMARY, DETAILED, RAW (= FULL) or METADATA, any
    /// case.
    #[serde(default)]
    start_level: Option<String>,
}

/// `POST /knowledge/query-rlm`: a question over several scopes.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct KnowledgeQuery {
    query: String,
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    max_iterations: Option<i64>,
    #[serde(default)]
    start_level: Option<String>,
    /// The scopes to search (default: all).
    #[serde(default)]
    scopes: Option<Vec<String>>,
    /// aragora's workspace: a scope to search (added to `scopes`).
    #[serde(default)]
    workspace_id: Option<String>,
    /// Nodes one search may return (1-1000, clamped).
    #[serde(default)]
    max_nodes: Option<i64>,
}

/// `POST /rlm/query`: a question over one context (a scope).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ContextQuery {
    context_id: String,
    query: String,
    #[serde(default)]
    strategy: Option<String>,
    /// With `refine`, the iterations (1-10, clamped); without, the configured default.
    #[serde(default)]
    max_iterations: Option<i64>,
    #[serde(default)]
    start_level: Option<String>,
    #[serde(default)]
    refine: Option<bool>,
}

/// The knobs every query route shares.
struct Knobs<'a> {
    query: &'a str,
    strategy: Option<&'a str>,
    max_iterations: Option<i64>,
    start_level: Option<&'a str>,
    max_nodes: Option<i64>,
}

fn query_config(s: &AppState, k: &Knobs<'_>) -> ApiResult<QueryConfig> {
    let mut cfg = s.engine.config().query.clone();
    if k.query.trim().is_empty() {
        return Err(ApiError::bad("query is empty"));
    }
    let n = k.query.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(ApiError::bad(format!(
            "the query is too long: {n} characters, at most {MAX_QUERY_CHARS}"
        )));
    }
    if let Some(st) = k.strategy {
        cfg.strategy = st.parse()?;
    }
    if let Some(n) = k.max_iterations {
        cfg.max_iterations = n.clamp(1, 10) as u32;
    }
    if let Some(l) = k.start_level {
        cfg.start_level = l.parse()?;
    }
    if let Some(n) = k.max_nodes {
        cfg.max_nodes = n.clamp(1, 1000) as usize;
    }
    Ok(cfg)
}

/// A query's answer: aragora's fields (`iteration`, `refinement_history` as the earlier
/// answers) and strata's (citations, trajectory, usage, the navigation log).
#[derive(Serialize, ToSchema)]
pub(super) struct QueryResponse {
    /// Only ever cited source text: the citations' quotes joined.
    pub(super) answer: String,
    pub(super) ready: bool,
    pub(super) confidence: f64,
    /// The refinement iteration that gave the answer, 0-based (= earlier answers).
    pub(super) iteration: usize,
    /// Earlier answers a later one replaced, oldest first.
    pub(super) refinement_history: Vec<String>,
    pub(super) nodes_examined: Vec<String>,
    pub(super) tokens_processed: u64,
    pub(super) sub_calls_made: u32,
    pub(super) citations: Vec<Citation>,
    /// Navigation iterations (strata's count).
    pub(super) iterations: u32,
    /// strata's log of the navigation (the CLI's refinement history).
    pub(super) navigation_history: Vec<String>,
    pub(super) trajectory: Vec<Step>,
    pub(super) usage: Usage,
    /// What the query ran with.
    pub(super) strategy: String,
    pub(super) start_level: String,
    pub(super) max_iterations: u32,
}

impl QueryResponse {
    fn new(r: QueryResult, cfg: &QueryConfig) -> QueryResponse {
        QueryResponse {
            answer: r.answer,
            ready: r.ready,
            confidence: r.confidence,
            iteration: r.drafts.len(),
            refinement_history: r.drafts,
            nodes_examined: r.nodes_examined,
            tokens_processed: r.tokens_processed,
            sub_calls_made: r.sub_calls_made,
            citations: r.citations,
            iterations: r.iterations,
            navigation_history: r.refinement_history,
            trajectory: r.trajectory,
            usage: r.usage,
            strategy: cfg.strategy.to_string(),
            start_level: upper(cfg.start_level),
            max_iterations: cfg.max_iterations,
        }
    }
}

/// Counts a running query against its scopes until dropped.
struct Active<'a> {
    s: &'a AppState,
    scopes: Vec<String>,
}

impl<'a> Active<'a> {
    fn new(s: &'a AppState, scopes: Vec<String>) -> Active<'a> {
        let mut a = s.active.lock().expect("poisoned");
        for sc in &scopes {
            *a.entry(sc.clone()).or_insert(0) += 1;
        }
        drop(a);
        Active { s, scopes }
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        let mut a = self.s.active.lock().expect("poisoned");
        for sc in &self.scopes {
            if let Some(n) = a.get_mut(sc) {
                *n -= 1;
                if *n == 0 {
                    a.remove(sc);
                }
            }
        }
    }
}

async fn run_query(
    s: &Arc<AppState>,
    scopes: Vec<String>,
    question: String,
    cfg: QueryConfig,
    query_type: &str,
) -> ApiResult<QueryResult> {
    let now = unix_now();
    let t0 = Instant::now();
    let names = if scopes.is_empty() {
        s.engine.scope_names()?
    } else {
        scopes.clone()
    };
    let _active = Active::new(s, names.clone());
    // Navigation reads sled and tantivy synchronously between its awaits: run it on a
    // blocking thread (driving its model calls through the runtime handle) so the
    // executor's threads keep serving other requests.
    let (st, sc, q, qcfg) = (s.clone(), scopes, question.clone(), cfg.clone());
    let handle = tokio::runtime::Handle::current();
    let r = blocking(move || {
        Ok(handle.block_on(
            st.engine
                .query_with(&sc, &q, &qcfg, now, &crate::progress::NoProgress),
        )?)
    })
    .await?;
    let seconds = t0.elapsed().as_secs_f64();
    s.metrics.observe_query(&r, seconds);
    let level = upper(cfg.start_level);
    s.metrics.observe_query_as(
        &QueryEvent {
            query_type,
            level: &level,
            strategy: cfg.strategy.name(),
            seconds,
        },
        Some(&r),
    );
    let summary = QuerySummary {
        query: question,
        ready: r.ready,
        confidence: r.confidence,
        iterations: r.iterations,
        refinement_history: r.refinement_history.clone(),
        at: now,
    };
    let mut queried = s.queried.lock().expect("poisoned");
    for name in names {
        queried.insert(name, (now, summary.clone()));
    }
    Ok(r)
}

/// Answers a question about one debate with cited source spans.
#[utoipa::path(post, path = "/api/v1/debates/{id}/query-rlm", tag = "rlm",
    params(("id" = String, Path, description = "The debate")),
    request_body = DebateQuery,
    responses((status = 200, description = "The answer", body = QueryResponse)))]
pub(super) async fn query_debate(
    State(s): State<Arc<AppState>>,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
    ApiJson(q): ApiJson<DebateQuery>,
) -> ApiResult<Json<QueryResponse>> {
    check_debate_id(&matched, &id)?;
    let cfg = query_config(
        &s,
        &Knobs {
            query: &q.query,
            strategy: q.strategy.as_deref(),
            max_iterations: q.max_iterations,
            start_level: q.start_level.as_deref(),
            max_nodes: None,
        },
    )?;
    s.engine.scope(&id)?;
    let r = run_query(&s, vec![id], q.query, cfg.clone(), QUERY_TYPES[0]).await?;
    Ok(Json(QueryResponse::new(r, &cfg)))
}

/// Answers a question over one context (a scope): `/rlm/query`. Returns the context, whether
/// it was refined (`refine`: the given iterations; otherwise the configured ones) and the
/// answer.
pub(super) async fn query_context(
    s: &Arc<AppState>,
    q: ContextQuery,
) -> ApiResult<(String, bool, QueryResponse)> {
    let refine = q.refine.unwrap_or(false);
    let cfg = query_config(
        s,
        &Knobs {
            query: &q.query,
            strategy: q.strategy.as_deref(),
            max_iterations: if refine { q.max_iterations } else { None },
            start_level: q.start_level.as_deref(),
            max_nodes: None,
        },
    )?;
    if s.engine.scope(&q.context_id).is_err() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("context not found: {:?}", q.context_id),
        ));
    }
    let r = run_query(
        s,
        vec![q.context_id.clone()],
        q.query,
        cfg.clone(),
        QUERY_TYPES[2],
    )
    .await?;
    Ok((q.context_id, refine, QueryResponse::new(r, &cfg)))
}

/// A knowledge query's answer: the query's fields, and aragora's `sources`.
#[derive(Serialize, ToSchema)]
pub(super) struct KnowledgeResponse {
    #[serde(flatten)]
    result: QueryResponse,
    /// The cited sources, each once, in citation order.
    sources: Vec<String>,
    /// The scopes searched (empty: all).
    scopes: Vec<String>,
    workspace_id: Option<String>,
}

/// Answers a question across scopes (aragora's knowledge mound: a workspace is a scope).
#[utoipa::path(post, path = "/api/v1/knowledge/query-rlm", tag = "rlm",
    request_body = KnowledgeQuery,
    responses((status = 200, description = "The answer", body = KnowledgeResponse)))]
pub(super) async fn query_knowledge(
    State(s): State<Arc<AppState>>,
    ApiJson(q): ApiJson<KnowledgeQuery>,
) -> ApiResult<Json<KnowledgeResponse>> {
    let mut scopes = q.scopes.clone().unwrap_or_default();
    if let Some(w) = &q.workspace_id {
        if !aragora_id(w) {
            return Err(ApiError::bad(format!(
                "invalid workspace_id {w:?}: 1-100 characters of A-Z, a-z, 0-9, - and _"
            )));
        }
        if !scopes.contains(w) {
            scopes.push(w.clone());
        }
    }
    let cfg = query_config(
        &s,
        &Knobs {
            query: &q.query,
            strategy: q.strategy.as_deref(),
            max_iterations: q.max_iterations,
            start_level: q.start_level.as_deref(),
            max_nodes: q.max_nodes,
        },
    )?;
    for sc in &scopes {
        s.engine.scope(sc)?;
    }
    let r = run_query(&s, scopes.clone(), q.query, cfg.clone(), QUERY_TYPES[1]).await?;
    let mut seen = HashSet::new();
    let sources = r
        .citations
        .iter()
        .filter(|c| seen.insert(c.source.clone()))
        .map(|c| c.source.clone())
        .collect();
    Ok(Json(KnowledgeResponse {
        result: QueryResponse::new(r, &cfg),
        sources,
        scopes,
        workspace_id: q.workspace_id,
    }))
}

// ------------------------------------------------------------------------------ compress

/// `POST /debates/{id}/compress`; the body may be left out.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CompressRequest {
    /// The levels to report (ABSTRACT, SUMMARY, DETAILED, RAW; any case). Default:
    /// ABSTRACT, SUMMARY, DETAILED. strata always builds all five.
    #[serde(default)]
    target_levels: Option<Vec<String>>,
    /// Accepted for aragora's SDK; strata's level sizes are the configuration's `[levels]`
    /// (part of every node id), so it does not change what is built.
    #[serde(default)]
    compression_ratio: Option<f64>,
}

/// What a compress built: aragora's numbers and strata's job.
#[derive(Serialize, ToSchema)]
pub(super) struct CompressResponse {
    /// Tokens of the source text.
    original_tokens: u64,
    /// Tokens of each requested level's live nodes.
    compressed_tokens: BTreeMap<String, u64>,
    /// `compressed_tokens` over `original_tokens`.
    compression_ratios: BTreeMap<String, f64>,
    /// Wall time of the request (the wait for the build included).
    time_seconds: f64,
    /// Levels of the tree whose every node is live (5 when complete).
    levels_created: usize,
    /// Every node of the tree is live.
    complete: bool,
    /// All five levels: nodes planned, live, and their tokens.
    levels: BTreeMap<String, LevelTally>,
    job_id: u64,
    /// `done` (200), or `queued`/`running` (202: the wait ran out; poll the job).
    state: JobState,
    coalesced: bool,
    outcome: Option<JobOutcome>,
}

pub(super) fn wait_param(params: &HashMap<String, String>) -> ApiResult<u64> {
    match params.get("wait") {
        None => Ok(COMPRESS_WAIT_SECS),
        Some(w) => w
            .parse()
            .ok()
            .filter(|&n| n <= MAX_COMPRESS_WAIT_SECS)
            .ok_or_else(|| {
                ApiError::bad(format!(
                    "wait must be a whole number of seconds from 0 to {MAX_COMPRESS_WAIT_SECS}"
                ))
            }),
    }
}

/// Schedules a build of `scope` and waits (at most `wait` seconds) for it to end.
pub(super) async fn build_and_wait(
    s: &Arc<AppState>,
    scope: &str,
    wait: u64,
) -> ApiResult<(Job, bool)> {
    let (job, coalesced) = schedule(s, scope)?;
    let job = if wait > 0 {
        s.jobs
            .wait(job.id, Duration::from_secs(wait))
            .await?
            .unwrap_or(job)
    } else {
        job
    };
    if job.state == JobState::Failed {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the build of {scope:?} failed (job {}): {}",
                job.id,
                job.error.as_deref().unwrap_or("no reason recorded")
            ),
        ));
    }
    Ok((job, coalesced))
}

pub(super) async fn tally_of(s: &Arc<AppState>, scope: &str) -> ApiResult<Built> {
    let (st, sc) = (s.clone(), scope.to_string());
    blocking(move || {
        let plan = st.engine.plan(&sc)?;
        Ok(st.engine.tally(&plan, unix_now())?)
    })
    .await
}

pub(super) fn status_of(job: &Job) -> StatusCode {
    if job.state == JobState::Done {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    }
}

fn all_levels(b: &Built) -> BTreeMap<String, LevelTally> {
    b.levels.iter().map(|(l, t)| (upper(l), *t)).collect()
}

/// Builds (or refreshes) a debate's levels and answers with what was built; after
/// `?wait=` seconds (default 25) without the build ending, 202 with the job to poll.
#[utoipa::path(post, path = "/api/v1/debates/{id}/compress", tag = "rlm",
    params(("id" = String, Path, description = "The debate"),
        ("wait" = Option<u64>, Query, description = "Seconds (0-60) to wait for the build; default 25")),
    request_body(content = CompressRequest, description = "May be left out"),
    responses(
        (status = 200, description = "Built", body = CompressResponse),
        (status = 202, description = "Still building: poll GET /api/v1/jobs/{job_id}", body = CompressResponse)))]
pub(super) async fn compress(
    State(s): State<Arc<AppState>>,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    OptJson(req): OptJson<CompressRequest>,
) -> ApiResult<(StatusCode, Json<CompressResponse>)> {
    check_debate_id(&matched, &id)?;
    let t0 = Instant::now();
    let wanted: Vec<String> = req
        .target_levels
        .unwrap_or_else(|| ARAGORA_LEVELS.map(String::from).to_vec());
    let mut targets = Vec::new();
    for name in &wanted {
        let level: Level = name.parse()?;
        targets.push((name.to_ascii_uppercase(), level));
    }
    if let Some(r) = req.compression_ratio
        && !(r > 0.0 && r <= 1.0)
    {
        return Err(ApiError::bad("compression_ratio must be in (0, 1]"));
    }
    let wait = wait_param(&params)?;
    s.engine.scope(&id)?;
    let (job, coalesced) = build_and_wait(&s, &id, wait).await?;
    let built = tally_of(&s, &id).await?;
    let original = built.full_tokens;
    let mut compressed_tokens = BTreeMap::new();
    let mut compression_ratios = BTreeMap::new();
    for (name, level) in targets {
        let t = built.levels[level].tokens;
        compressed_tokens.insert(name.clone(), t);
        if original > 0 {
            compression_ratios.insert(name, t as f64 / original as f64);
        }
    }
    let complete = built.complete_levels();
    Ok((
        status_of(&job),
        Json(CompressResponse {
            original_tokens: original,
            compressed_tokens,
            compression_ratios,
            time_seconds: t0.elapsed().as_secs_f64(),
            levels_created: complete.len(),
            complete: complete.len() == Level::ALL.len(),
            levels: all_levels(&built),
            job_id: job.id,
            state: job.state,
            coalesced,
            outcome: job.outcome,
        }),
    ))
}

/// Records a finished build under aragora's compression metrics (the job hook).
pub(super) fn observe_job(
    engine: &Engine,
    m: &Metrics,
    job: &Job,
    report: Option<&crate::BuildReport>,
) {
    let success = match (job.state, report) {
        (JobState::Done, Some(_)) => true,
        (JobState::Failed, _) => false,
        _ => return,
    };
    let Ok(rec) = engine.scope(&job.scope) else {
        return;
    };
    let built = engine
        .plan(&job.scope)
        .and_then(|p| engine.tally(&p, unix_now()));
    let (compressed, levels) = match &built {
        Ok(b) => (
            [Level::Detailed, Level::Summary, Level::Abstract]
                .iter()
                .map(|l| b.levels[*l].tokens)
                .sum(),
            b.complete_levels().len(),
        ),
        Err(_) => (0, 0),
    };
    m.observe_compression(&Compression {
        source_type: kind_label(rec.kind),
        original_tokens: built.as_ref().map_or(0, |b| b.full_tokens),
        compressed_tokens: compressed,
        levels,
        seconds: report.map_or(0.0, |r| r.elapsed_ms as f64 / 1000.0),
        success,
    });
}

// ------------------------------------------------------------------------------- context

/// A node of a context window.
#[derive(Serialize, ToSchema)]
pub(super) struct WindowNode {
    id: String,
    level: Level,
    tokens: u32,
    /// The node's text.
    content: String,
    /// The same as `tokens`.
    token_count: u32,
    /// Keywords of the node (from its METADATA).
    key_topics: Vec<String>,
}

/// A context window: aragora's fields (`level` upper case, `content`, `token_count`) and
/// strata's.
#[derive(Serialize, ToSchema)]
pub(super) struct ContextResponse {
    /// The requested level, upper case (`AUTO` for the mix).
    level: String,
    /// The window's text (the same as `text`).
    content: String,
    /// Real cl100k tokens of `content` (the same as `tokens`).
    token_count: usize,
    nodes: Vec<WindowNode>,
    scope: String,
    /// The budget asked for (none: the whole level).
    budget: Option<usize>,
    tokens: usize,
    text: String,
    /// Nodes of the level that did not fit.
    omitted: usize,
    /// Levels of this view that lag behind the newest turns (a build is catching up).
    stale_levels: Vec<Level>,
    pending_turns: usize,
}

/// A debate (or any scope) at one level, within `?budget=` tokens (a fixed level without
/// one: all of it; `auto` needs one).
#[utoipa::path(get, path = "/api/v1/debates/{id}/context/{level}", tag = "rlm",
    params(("id" = String, Path, description = "The debate (or document scope)"),
        ("level" = String, Path, description = "ABSTRACT, SUMMARY, DETAILED, RAW/FULL, METADATA or AUTO, any case"),
        ("budget" = Option<usize>, Query, description = "Tokens at most (required for auto)")),
    responses((status = 200, description = "The window", body = ContextResponse)))]
pub(super) async fn context(
    State(s): State<Arc<AppState>>,
    matched: MatchedPath,
    ApiPath((id, level)): ApiPath<(String, String)>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> ApiResult<Json<ContextResponse>> {
    check_debate_id(&matched, &id)?;
    let t0 = Instant::now();
    let choice: LevelChoice = level.parse()?;
    // The level as asked for (aragora's RAW stays RAW), upper case.
    let level_name = level.to_ascii_uppercase();
    let budget: Option<usize> = match params.get("budget") {
        Some(b) => {
            let b = b
                .parse()
                .map_err(|_| ApiError::bad("budget must be a positive whole number of tokens"))?;
            crate::context::check_budget(b)?;
            Some(b)
        }
        None if choice == LevelChoice::Auto => {
            return Err(ApiError::bad(
                "the auto level needs a budget: the budget query parameter (?budget=N)",
            ));
        }
        None => None,
    };
    let now = unix_now();
    let (view, report) = s.engine.serving_view(&id, now).await?;
    if let Some(r) = report {
        s.metrics.observe_build(&r);
    }
    let (st, plan) = (s.clone(), view.plan);
    let (window, nodes) = blocking(move || {
        let corpus = st.engine.corpus();
        let w = crate::context::window(&corpus, &plan, choice, budget.unwrap_or(usize::MAX), now)?;
        // Each node's keywords come from the METADATA of its chunk, group or scope.
        let detailed_of: HashMap<NodeId, NodeId> =
            plan.chunks.iter().map(|c| (c.full, c.detailed)).collect();
        let mut nodes = Vec::with_capacity(w.nodes.len());
        for n in &w.nodes {
            let id = NodeId::from_hex(&n.id)
                .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "bad node id"))?;
            let node = corpus.node(&id, now)?;
            let key_topics = if n.level == Level::Metadata {
                node.meta.tags.as_ref().map(|t| t.keywords.clone())
            } else {
                let owner = detailed_of.get(&id).copied().unwrap_or(id);
                match plan.metadata.get(&owner) {
                    Some(m) => corpus.node(m, now)?.meta.tags.map(|t| t.keywords),
                    None => None,
                }
            };
            nodes.push(WindowNode {
                id: n.id.clone(),
                level: n.level,
                tokens: n.tokens,
                content: node.text,
                token_count: n.tokens,
                key_topics: key_topics.unwrap_or_default(),
            });
        }
        Ok((w, nodes))
    })
    .await?;
    s.metrics.observe_query_as(
        &QueryEvent {
            query_type: QUERY_TYPES[3],
            level: &level_name,
            strategy: "",
            seconds: t0.elapsed().as_secs_f64(),
        },
        None,
    );
    Ok(Json(ContextResponse {
        level: level_name,
        content: window.text.clone(),
        token_count: window.tokens,
        nodes,
        scope: window.scope,
        budget,
        tokens: window.tokens,
        text: window.text,
        omitted: window.omitted,
        stale_levels: view.stale,
        pending_turns: view.pending_sources,
    }))
}

// ---------------------------------------------------------------------- refinement status

/// How a debate's levels and queries stand: aragora's fields and strata's.
#[derive(Serialize, ToSchema)]
pub(super) struct RefinementStatus {
    debate_id: String,
    /// Queries of this debate running now.
    active_queries: usize,
    /// Levels of the current tree served without a build (every node live), 0-5.
    cached_contexts: usize,
    /// `refining` (a query runs), `compressing` (a build is queued or runs) or `idle`.
    status: String,
    last_query_time: Option<String>,
    /// The same as `debate_id`.
    debate: String,
    sources: usize,
    chunks: usize,
    groups: usize,
    full_tokens: u64,
    live_nodes_by_level: BTreeMap<String, usize>,
    stale_nodes: usize,
    complete: bool,
    pending_jobs: Vec<u64>,
    last_job: Option<Job>,
    last_query: Option<QuerySummary>,
}

/// Where a debate's refinement stands (GET; aragora's SDK also POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/debates/{id}/refinement-status", tag = "rlm",
    params(("id" = String, Path, description = "The debate")),
    responses((status = 200, description = "The status", body = RefinementStatus)))]
pub(super) async fn refinement_status(
    State(s): State<Arc<AppState>>,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RefinementStatus>> {
    check_debate_id(&matched, &id)?;
    s.engine.scope(&id)?;
    let now = unix_now();
    let (st, scope) = (s.clone(), id.clone());
    let (stats, built) = blocking(move || {
        let stats = st.engine.scope_stats(&scope, now)?;
        let plan = st.engine.plan(&scope)?;
        Ok((stats, st.engine.tally(&plan, now)?))
    })
    .await?;
    let jobs: Vec<Job> = s
        .jobs
        .all()?
        .into_iter()
        .filter(|j| j.scope == id)
        .collect();
    let pending: Vec<u64> = jobs
        .iter()
        .filter(|j| matches!(j.state, JobState::Queued | JobState::Running))
        .map(|j| j.id)
        .collect();
    let last_job = jobs
        .iter()
        .rev()
        .find(|j| matches!(j.state, JobState::Done | JobState::Failed))
        .cloned();
    let last_query = s
        .queried
        .lock()
        .expect("poisoned")
        .get(&id)
        .map(|(_, q)| q.clone());
    let active = s
        .active
        .lock()
        .expect("poisoned")
        .get(&id)
        .copied()
        .unwrap_or(0);
    let status = if active > 0 {
        "refining"
    } else if !pending.is_empty() {
        "compressing"
    } else {
        "idle"
    };
    Ok(Json(RefinementStatus {
        debate_id: id.clone(),
        active_queries: active,
        cached_contexts: built.complete_levels().len(),
        status: status.into(),
        last_query_time: last_query.as_ref().map(|q| iso8601(q.at)),
        debate: id,
        sources: stats.sources,
        chunks: stats.chunks,
        groups: stats.groups,
        full_tokens: stats.full_tokens,
        live_nodes_by_level: stats
            .live_by_level
            .iter()
            .map(|(l, n)| (l.name().to_string(), *n))
            .collect(),
        stale_nodes: stats.stale,
        complete: stats.stale == 0,
        pending_jobs: pending,
        last_job,
        last_query,
    }))
}
