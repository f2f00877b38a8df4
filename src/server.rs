//! `strata serve`: the HTTP API a debate runner calls (axum). Handlers only translate HTTP
//! to [`Engine`] calls and back; CPU and disk work runs on blocking threads, never on the
//! async executor's.

use crate::config::{QueryConfig, ServerConfig};
use crate::context::{ContextWindow, LevelChoice};
use crate::engine::{Engine, unix_now};
use crate::error::Error;
use crate::expire::{spawn_sweeper, system_clock};
use crate::jobs::{Job, JobKind, JobState, Jobs, WorkerConfig, spawn_workers};
use crate::level::Level;
use crate::metrics::Metrics;
use crate::navigate::QueryResult;
use crate::source::{self, InputFile, Turn};
use crate::store::ScopeKind;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Shared by every handler.
pub struct AppState {
    pub engine: Arc<Engine>,
    pub jobs: Arc<Jobs>,
    pub metrics: Arc<Metrics>,
    cfg: ServerConfig,
    /// Last query time per scope (warming) and the last query's outcome (status).
    queried: Mutex<HashMap<String, (u64, QuerySummary)>>,
}

#[derive(Clone, Debug, Serialize)]
struct QuerySummary {
    query: String,
    ready: bool,
    confidence: f64,
    iterations: u32,
    refinement_history: Vec<String>,
    at: u64,
}

/// A JSON error with an HTTP status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
    fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::Invalid(_) | Error::Io { .. } | Error::Config(_) => StatusCode::BAD_REQUEST,
            Error::UnknownScope { .. } => StatusCode::NOT_FOUND,
            Error::NotBuilt(_) | Error::InUse(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(error = %e, "request failed");
        }
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.message, "status": self.status.as_u16() });
        (self.status, Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// `Json<T>` whose rejections (malformed JSON, wrong types, missing content type, body too
/// large) are JSON errors with the right 4xx status.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(r) => {
                // axum says "Failed to deserialize the JSON body into the target type: {why}";
                // the why (an unknown field, a wrong type, with its line and column) is what
                // the client needs.
                let text = r.body_text();
                let why = text.split_once(": ").map_or(text.as_str(), |(_, w)| w);
                let msg = match &r {
                    JsonRejection::JsonDataError(_) => format!("invalid request body: {why}"),
                    JsonRejection::JsonSyntaxError(_) => {
                        format!("the request body is not valid JSON: {why}")
                    }
                    _ => text.clone(),
                };
                Err(ApiError::new(r.status(), msg))
            }
        }
    }
}

/// Runs CPU or disk work off the async executor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// Serves the API on `listener` until `shutdown` resolves; then stops accepting, lets
/// in-flight requests finish, gives running jobs their grace period (or parks them for the
/// next start), and flushes the store.
pub async fn run(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> crate::Result<()> {
    let cfg = engine.config().server.clone();
    let jobs = Arc::new(Jobs::open_with(
        engine.store().clone(),
        Duration::from_millis(cfg.job_lease_ms),
    )?);
    let metrics = Arc::new(Metrics::new());
    let (stop_tx, stop_rx) = watch::channel(false);

    let hook_metrics = metrics.clone();
    let hook_jobs = jobs.clone();
    let hook: crate::jobs::JobHook = Arc::new(move |job: &Job, report| {
        if let Some(r) = report {
            hook_metrics.observe_build(r);
        }
        let state = match job.state {
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Queued => "parked",
            JobState::Running => "started",
        };
        hook_metrics.jobs.with_label_values(&[state]).inc();
        hook_metrics.job_queue_depth.set(hook_jobs.depth() as i64);
    });
    let workers = spawn_workers(
        engine.clone(),
        jobs.clone(),
        WorkerConfig {
            workers: cfg.workers,
            warm_horizon_secs: cfg.warm_before_secs,
            shutdown_grace: Duration::from_secs(cfg.shutdown_grace_secs),
        },
        stop_rx.clone(),
        hook,
    );
    let sweep_engine = engine.clone();
    // A sweep marks the nodes it removes as pending for the index in the same transaction;
    // applying the marks here keeps the index current (or the next open does).
    let sweeper = spawn_sweeper(engine.store().clone(), system_clock(), move |_ids| {
        if let Err(e) = sweep_engine.sync_index() {
            tracing::warn!(error = %e, "cannot drop swept nodes from the index yet");
        }
    });

    let state = Arc::new(AppState {
        engine: engine.clone(),
        jobs: jobs.clone(),
        metrics: metrics.clone(),
        cfg: cfg.clone(),
        queried: Mutex::new(HashMap::new()),
    });
    // On a shared store, the index follows the other replicas' changes.
    let follower = crate::replica::spawn_follower(engine.clone(), stop_rx.clone());
    let warmer = (cfg.warm_before_secs > 0).then(|| tokio::spawn(warm(state.clone(), stop_rx)));

    let app = router(state);
    tracing::info!(addr = ?listener.local_addr().ok(), "serving");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::Invalid(format!("server: {e}")))?;

    let _ = stop_tx.send(true);
    for w in workers {
        let _ = w.await;
    }
    if let Some(w) = warmer {
        let _ = w.await;
    }
    if let Some(f) = follower {
        let _ = f.await;
    }
    sweeper.stop().await;
    engine.store().flush()?;
    Ok(())
}

/// Re-warms scopes that were queried within their TTL before their levels expire.
async fn warm(state: Arc<AppState>, mut stop: watch::Receiver<bool>) {
    let ahead = state.cfg.warm_before_secs;
    let ttl = state.engine.config().store.ttl_secs;
    let every = Duration::from_secs((ahead / 2).clamp(1, 60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let now = unix_now();
        let busy: Vec<String> = state
            .queried
            .lock()
            .expect("poisoned")
            .iter()
            .filter(|(_, (at, _))| ttl == 0 || now.saturating_sub(*at) < ttl)
            .map(|(s, _)| s.clone())
            .collect();
        for scope in busy {
            let expiring = state
                .engine
                .expires_within(&scope, now, ahead)
                .unwrap_or(false);
            if expiring && let Err(e) = state.jobs.enqueue(&scope, JobKind::Warm, now) {
                tracing::warn!(error = %e, %scope, "cannot queue a warming job");
            }
        }
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.cfg.body_limit_bytes;
    let api = Router::new()
        .route("/api/debates/{id}/turns", post(append_turn))
        .route("/api/debates/{id}/compress", post(compress))
        .route("/api/debates/{id}/context/{level}", get(context))
        .route("/api/debates/{id}/query-rlm", post(query_debate))
        .route(
            "/api/debates/{id}/refinement-status",
            get(refinement_status),
        )
        .route("/api/documents", post(ingest_document))
        .route("/api/knowledge/query-rlm", post(query_knowledge))
        .route("/api/jobs/{id}", get(job))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    api.route("/metrics", get(metrics))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

fn authorized(cfg: &ServerConfig, headers: &HeaderMap) -> bool {
    if cfg.token.is_empty() {
        return true;
    }
    use subtle::ConstantTimeEq;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    given.as_bytes().ct_eq(cfg.token.as_bytes()).into()
}

fn unauthorized() -> Response {
    let mut r =
        ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

async fn auth(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if authorized(&s.cfg, req.headers()) {
        next.run(req).await
    } else {
        unauthorized()
    }
}

/// Request latency by method, route and status.
async fn track(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let t0 = Instant::now();
    let resp = next.run(req).await;
    s.metrics
        .http
        .with_label_values(&[method.as_str(), route.as_str(), resp.status().as_str()])
        .observe(t0.elapsed().as_secs_f64());
    resp
}

async fn metrics(State(s): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !s.cfg.metrics_public && !authorized(&s.cfg, &headers) {
        return unauthorized();
    }
    s.metrics.job_queue_depth.set(s.jobs.depth() as i64);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

fn schedule(s: &AppState, scope: &str) -> ApiResult<(Job, bool)> {
    let r = s.jobs.enqueue(scope, JobKind::Compress, unix_now())?;
    s.metrics.job_queue_depth.set(s.jobs.depth() as i64);
    Ok(r)
}

async fn append_turn(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    ApiJson(turn): ApiJson<Turn>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let st = s.clone();
    let (round, speaker) = (turn.round, turn.speaker.clone());
    let scope = id.clone();
    let (report, source) =
        blocking(move || Ok(st.engine.append(&scope, turn, unix_now())?)).await?;
    s.metrics.turns_appended.inc();
    let (job, coalesced) = schedule(&s, &id)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "debate": id, "source": source, "round": round, "speaker": speaker,
            "chunks": report.chunks_written, "job_id": job.id, "coalesced": coalesced,
        })),
    ))
}

async fn compress(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    s.engine.scope(&id)?;
    let (job, coalesced) = schedule(&s, &id)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "job_id": job.id, "state": job.state, "coalesced": coalesced })),
    ))
}

#[derive(Serialize)]
struct ContextResponse {
    #[serde(flatten)]
    window: ContextWindow,
    /// Levels of this view that lag behind the newest turns (a build is catching up).
    stale_levels: Vec<Level>,
    pending_turns: usize,
}

async fn context(
    State(s): State<Arc<AppState>>,
    Path((id, level)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<ContextResponse>> {
    let budget: usize = params
        .get("budget")
        .ok_or_else(|| ApiError::bad("the budget query parameter is required (?budget=N)"))?
        .parse()
        .map_err(|_| ApiError::bad("budget must be a positive whole number of tokens"))?;
    crate::context::check_budget(budget)?;
    let choice: LevelChoice = level.parse()?;
    let now = unix_now();
    let (view, report) = s.engine.serving_view(&id, now).await?;
    if let Some(r) = report {
        s.metrics.observe_build(&r);
    }
    let (st, plan) = (s.clone(), view.plan);
    let window = blocking(move || {
        Ok(crate::context::window(
            &st.engine.corpus(),
            &plan,
            choice,
            budget,
            now,
        )?)
    })
    .await?;
    let (stale, pending) = (view.stale, view.pending_sources);
    Ok(Json(ContextResponse {
        window,
        stale_levels: stale,
        pending_turns: pending,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryRequest {
    query: String,
    /// `auto` (default: the LLM navigator when a root model is configured, else the
    /// offline one) or `offline` (the heuristic BM25 policy).
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    max_iterations: Option<u32>,
    /// Where navigation starts: `abstract` (default) or `summary`.
    #[serde(default)]
    start_level: Option<String>,
    /// Knowledge queries: the scopes to search (default: all).
    #[serde(default)]
    scopes: Option<Vec<String>>,
}

fn query_config(s: &AppState, q: &QueryRequest) -> ApiResult<QueryConfig> {
    let mut cfg = s.engine.config().query.clone();
    if let Some(st) = &q.strategy {
        cfg.strategy = st.parse()?;
    }
    if let Some(n) = q.max_iterations {
        if n == 0 || n > 100 {
            return Err(ApiError::bad("max_iterations must be between 1 and 100"));
        }
        cfg.max_iterations = n;
    }
    if let Some(l) = &q.start_level {
        let level: Level = l.parse()?;
        if !matches!(level, Level::Abstract | Level::Summary | Level::Metadata) {
            return Err(ApiError::bad(
                "start_level must be abstract, metadata or summary",
            ));
        }
        cfg.start_level = level;
    }
    if q.query.trim().is_empty() {
        return Err(ApiError::bad("query is empty"));
    }
    Ok(cfg)
}

async fn run_query(
    s: &Arc<AppState>,
    scopes: Vec<String>,
    q: QueryRequest,
) -> ApiResult<QueryResult> {
    let cfg = query_config(s, &q)?;
    let now = unix_now();
    let t0 = Instant::now();
    // Navigation reads sled and tantivy synchronously between its awaits: run it on a
    // blocking thread (driving its model calls through the runtime handle) so the
    // executor's threads keep serving other requests.
    let (st, sc, question) = (s.clone(), scopes.clone(), q.query.clone());
    let handle = tokio::runtime::Handle::current();
    let r = blocking(move || {
        Ok(handle.block_on(st.engine.query_with(
            &sc,
            &question,
            &cfg,
            now,
            &crate::build::NoProgress,
        ))?)
    })
    .await?;
    s.metrics.observe_query(&r, t0.elapsed().as_secs_f64());
    let summary = QuerySummary {
        query: q.query.clone(),
        ready: r.ready,
        confidence: r.confidence,
        iterations: r.iterations,
        refinement_history: r.refinement_history.clone(),
        at: now,
    };
    let mut queried = s.queried.lock().expect("poisoned");
    let names = if scopes.is_empty() {
        s.engine.scope_names()?
    } else {
        scopes
    };
    for name in names {
        queried.insert(name, (now, summary.clone()));
    }
    Ok(r)
}

async fn query_debate(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    ApiJson(q): ApiJson<QueryRequest>,
) -> ApiResult<Json<QueryResult>> {
    if q.scopes.is_some() {
        return Err(ApiError::bad(
            "scopes belongs to /api/knowledge/query-rlm; a debate query searches its debate",
        ));
    }
    s.engine.scope(&id)?;
    Ok(Json(run_query(&s, vec![id], q).await?))
}

async fn query_knowledge(
    State(s): State<Arc<AppState>>,
    ApiJson(q): ApiJson<QueryRequest>,
) -> ApiResult<Json<QueryResult>> {
    let scopes = q.scopes.clone().unwrap_or_default();
    for sc in &scopes {
        s.engine.scope(sc)?;
    }
    Ok(Json(run_query(&s, scopes, q).await?))
}

async fn refinement_status(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    s.engine.scope(&id)?;
    let now = unix_now();
    let (st, scope) = (s.clone(), id.clone());
    let stats = blocking(move || Ok(st.engine.scope_stats(&scope, now)?)).await?;
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
    let levels: serde_json::Map<String, serde_json::Value> = Level::ALL
        .iter()
        .map(|l| (l.name().to_string(), json!(stats.live_by_level[*l])))
        .collect();
    Ok(Json(json!({
        "debate": id,
        "sources": stats.sources,
        "chunks": stats.chunks,
        "groups": stats.groups,
        "full_tokens": stats.full_tokens,
        "live_nodes_by_level": levels,
        "stale_nodes": stats.stale,
        "complete": stats.stale == 0,
        "pending_jobs": pending,
        "last_job": last_job,
        "last_query": last_query,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentRequest {
    scope: String,
    source: String,
    text: String,
}

async fn ingest_document(
    State(s): State<Arc<AppState>>,
    ApiJson(d): ApiJson<DocumentRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    if d.source.trim().is_empty() {
        return Err(ApiError::bad("source is empty: name the document"));
    }
    let st = s.clone();
    let scope = d.scope.clone();
    let report = blocking(move || {
        let input = source::document(&d.source, d.text)?;
        let file = InputFile::single(ScopeKind::Doc, &d.source, input);
        Ok(st.engine.ingest(&d.scope, &[file], unix_now())?)
    })
    .await?;
    let (job, coalesced) = schedule(&s, &scope)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "scope": scope, "added": report.added, "replaced": report.replaced,
            "unchanged": report.unchanged, "chunks": report.chunks_written,
            "job_id": job.id, "coalesced": coalesced,
        })),
    ))
}

/// `GET /api/jobs/{id}[?wait=SECS]`: the job; with `wait`, answered when the job is done
/// or failed, or after at most `wait` seconds (≤ 60), whichever comes first.
async fn job(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<Job>> {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad("a job id is a whole number"))?;
    let job = match params.get("wait") {
        None => s.jobs.get(id)?,
        Some(w) => {
            let secs: u64 = w
                .parse()
                .ok()
                .filter(|&n| n <= MAX_JOB_WAIT_SECS)
                .ok_or_else(|| {
                    ApiError::bad(format!(
                        "wait must be a whole number of seconds from 0 to {MAX_JOB_WAIT_SECS}"
                    ))
                })?;
            s.jobs.wait(id, Duration::from_secs(secs)).await?
        }
    };
    job.map(Json)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}")))
}

/// Longest `?wait=` of `GET /api/jobs/{id}`.
const MAX_JOB_WAIT_SECS: u64 = 60;
