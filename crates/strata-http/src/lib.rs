//! `strata serve`: the HTTP API a debate runner calls (axum). Handlers only translate HTTP
//! to [`Engine`] calls and back; CPU and disk work runs on blocking threads, never on the
//! async executor's. Every route is served under `/api` and `/api/v1` (aragora's SDK calls
//! the latter); the RLM routes speak aragora's REST API besides strata's ([`aragora`]);
//! errors are RFC 9457 problem details; `/api/openapi.json` documents it all ([`openapi`]).
//! Tokens open all scopes or some ([`access`]); the connections are held to time limits and
//! caps ([`edge`]); `Host`, `Origin` and CORS keep web pages out ([`policy`]). `/mcp`
//! serves the MCP tools over Streamable HTTP on the same engine, tokens and guard ([`mcp`]).

mod aragora;
mod contexts;
mod edge;
mod extract;
mod forget;
mod mcp;
pub mod openapi;
mod policy;

pub use edge::raise_open_file_limit;
use strata_engine::access;
pub use strata_engine::access::Access;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::{Json, Router};
use extract::{ApiPath, ApiQuery};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_core::clock::unix_now;
use strata_core::error::Error;
use strata_engine::config::ServerConfig;
use strata_engine::engine::Engine;
use strata_engine::jobs::{Job, JobKind, JobState, Jobs};
use strata_engine::metrics::Metrics;
use strata_engine::service::Service;
use strata_engine::source::{self, InputFile, Turn};
use strata_engine::store::ScopeKind;

/// Shared by every handler.
pub struct AppState {
    pub engine: Arc<Engine>,
    pub jobs: Arc<Jobs>,
    pub metrics: Arc<Metrics>,
    cfg: ServerConfig,
    tokens: access::Tokens,
    policy: policy::Policy,
    /// The last query's outcome per scope, with its time (aragora's refinement status).
    queried: Mutex<HashMap<String, (u64, QuerySummary)>>,
    /// Queries running now, per scope (refinement-status's `active_queries`).
    active: Mutex<HashMap<String, usize>>,
    /// Cancelled when the server shuts down: ends the `/mcp` sessions and their streams.
    mcp_stop: tokio_util::sync::CancellationToken,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
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
            // The CLI lists the known scopes; a client is told only of the one it named.
            Error::UnknownScope { scope, .. } => return unknown_scope(scope),
            Error::UnknownSource { .. } => StatusCode::NOT_FOUND,
            Error::NotBuilt(_) | Error::InUse(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::DiskFull(_) => StatusCode::INSUFFICIENT_STORAGE,
            Error::Model(_) => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(error = %e, "request failed");
        }
        ApiError::new(status, e.to_string())
    }
}

/// An RFC 9457 problem details document; `error` repeats `detail` (strata's and aragora's
/// clients read `error`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status's reason phrase.
    pub title: String,
    pub status: u16,
    /// What went wrong, one line.
    pub detail: String,
    /// The same as `detail`.
    pub error: String,
}

impl Problem {
    fn new(status: StatusCode, message: String) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail: message.clone(),
            error: message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Problem::new(self.status, self.message);
        let mut r = (self.status, Json(body)).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        r
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A required JSON body whose rejections (not JSON by its content type, malformed JSON,
/// wrong types, body too large or too slow) are problem details with the right 4xx status.
pub struct ApiJson<T>(pub T);

impl<T> FromRequest<Arc<AppState>> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        match extract::json_body(req, state).await? {
            Some(v) => Ok(ApiJson(v)),
            None => Err(extract::body_required()),
        }
    }
}

/// The answer for a scope that does not exist and for one the caller may not see: the same,
/// naming only the scope the caller named.
fn unknown_scope(scope: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("unknown scope `{scope}`"))
}

/// The caller may read `scope` (else 404, as if it did not exist).
fn check_read(access: &Access, scope: &str) -> ApiResult<()> {
    if access.can_read(scope) {
        Ok(())
    } else {
        Err(unknown_scope(scope))
    }
}

/// The caller may write `scope` (which a write may create), else 403. The answer depends
/// on the token's grant alone, never on whether the scope exists.
fn check_write(access: &Access, scope: &str) -> ApiResult<()> {
    if access.can_write(scope) {
        return Ok(());
    }
    let why = if access.can_read(scope) {
        format!("this token may read `{scope}` but not write it")
    } else {
        format!("this token may not write `{scope}`")
    };
    Err(ApiError::new(StatusCode::FORBIDDEN, why))
}

/// The caller's access, set by the token check ([`auth`]) of every `/api` route.
pub(crate) struct Caller(pub(crate) Access);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Access>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the route has no token check",
                )
            })
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

/// Serves the API on `listener` until `shutdown` resolves; then stops accepting, and gives
/// the requests in progress and the running jobs `server.shutdown_grace_secs` to finish
/// (then requests are answered 503 and jobs parked for the next start), and flushes the
/// store.
pub async fn run(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> strata_engine::Result<()> {
    let cfg = engine.config().server.clone();
    let metrics = Arc::new(Metrics::new());
    let hook_metrics = metrics.clone();
    let hook_engine = engine.clone();
    // Told of every job's start and end; the queue's depth is read when it is.
    let depth: Arc<std::sync::OnceLock<Arc<Jobs>>> = Arc::default();
    let hook_depth = depth.clone();
    let hook: strata_engine::jobs::JobHook = Arc::new(move |job: &Job, report| {
        if let Some(r) = report {
            hook_metrics.observe_build(r);
        }
        aragora::observe_job(&hook_engine, &hook_metrics, job, report);
        let state = match job.state {
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Queued => "parked",
            JobState::Running => "started",
        };
        hook_metrics.jobs.with_label_values(&[state]).inc();
        if let Some(jobs) = hook_depth.get() {
            hook_metrics.job_queue_depth.set(jobs.depth() as i64);
        }
    });
    // The workers, sweeper, index follower and warmer: the engine's, not the server's.
    let service = Service::start_with(engine.clone(), hook)?;
    let jobs = service.jobs().clone();
    let _ = depth.set(jobs.clone());

    let tokens = access::Tokens::new(&cfg);
    let policy = policy::Policy::new(&cfg, tokens.open());
    let state = Arc::new(AppState {
        engine: engine.clone(),
        jobs: jobs.clone(),
        metrics: metrics.clone(),
        cfg: cfg.clone(),
        tokens,
        policy,
        queried: Mutex::new(HashMap::new()),
        active: Mutex::new(HashMap::new()),
        mcp_stop: tokio_util::sync::CancellationToken::new(),
    });
    let mcp_stop = state.mcp_stop.clone();
    let app = router(state);
    let limits = edge::Limits {
        idle: Duration::from_millis(cfg.idle_timeout_ms),
        header: Duration::from_millis(cfg.header_timeout_ms),
        max_connections: edge::connection_cap(cfg.max_connections),
        max_requests: cfg.max_requests,
        grace: Duration::from_secs(cfg.shutdown_grace_secs),
    };
    if limits.max_connections < cfg.max_connections {
        tracing::warn!(
            max_connections = limits.max_connections,
            configured = cfg.max_connections,
            "the open-file limit leaves room for fewer connections than server.max_connections"
        );
    }
    tracing::info!(addr = ?listener.local_addr().ok(), max_connections = limits.max_connections, "serving");
    // The jobs' grace period runs alongside the requests', from the same moment.
    let stop = service.stopper();
    let shutdown = async move {
        shutdown.await;
        stop();
        mcp_stop.cancel();
    };
    edge::serve(listener, app, limits, shutdown).await;
    service.shutdown().await
}

/// The routes under one prefix (`/api` and `/api/v1` serve the same), each with its
/// OpenAPI operation (see [`openapi::ROUTES`]).
fn api_routes() -> Router<Arc<AppState>> {
    let mut r = Router::new();
    for route in openapi::ROUTES {
        r = r.route(route.path, (route.handler)());
    }
    r
}

pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.cfg.body_limit_bytes;
    let guard = middleware::from_fn_with_state(state.clone(), policy::guard);
    let api = api_routes().route_layer(middleware::from_fn_with_state(state.clone(), auth));
    let mcp = Router::new()
        .route_service("/mcp", mcp::service(&state))
        .route_layer(middleware::from_fn_with_state(state.clone(), mcp::guard));
    Router::new()
        .merge(mcp)
        .nest("/api/v1", api.clone())
        .nest("/api", api)
        .route("/api/openapi.json", get(openapi::document))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(openapi::method_not_allowed)
        .layer(guard)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Constructs a route's method router (a plain fn, so the route table is a `const`).
pub(crate) type MakeRoute = fn() -> MethodRouter<Arc<AppState>>;

/// The access the request's bearer token gives (`None`: tokens are configured and it
/// carries none of them).
fn access_of(s: &AppState, headers: &HeaderMap) -> Option<Access> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    s.tokens.access(given)
}

fn unauthorized() -> Response {
    let mut r =
        ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

async fn auth(State(s): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    match access_of(&s, req.headers()) {
        Some(access) => {
            req.extensions_mut().insert(access);
            next.run(req).await
        }
        None => unauthorized(),
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

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "service", security(),
    responses((status = 200, description = "`{\"status\": \"ok\"}`", content_type = "application/json")))]
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Prometheus metrics: strata's and aragora's names (`aragora_rlm_*`).
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain")))]
async fn metrics(State(s): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // Any token will do: the metrics name no scope.
    if !s.cfg.metrics_public && access_of(&s, &headers).is_none() {
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

/// What an append did.
#[derive(Serialize, utoipa::ToSchema)]
struct TurnAppended {
    debate: String,
    /// The turn's source id (`debate#turn-N`).
    source: String,
    round: u32,
    speaker: String,
    chunks: usize,
    /// The build job that compresses the new turn.
    job_id: u64,
    /// True when the job was already queued.
    coalesced: bool,
}

/// Appends a debate turn; schedules the incremental compression of its ancestors.
#[utoipa::path(post, path = "/api/v1/debates/{id}/turns", tag = "strata",
    params(("id" = String, Path, description = "The debate (a scope name)")),
    request_body = Turn,
    responses((status = 201, description = "Stored durably", body = TurnAppended)))]
async fn append_turn(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
    ApiJson(turn): ApiJson<Turn>,
) -> ApiResult<(StatusCode, Json<TurnAppended>)> {
    aragora::check_debate_id(&matched, &id)?;
    check_write(&access, &id)?;
    let st = s.clone();
    let (round, speaker) = (turn.round, turn.speaker.clone());
    let scope = id.clone();
    let (report, source) =
        blocking(move || Ok(st.engine.append(&scope, turn, unix_now())?)).await?;
    s.metrics.turns_appended.inc();
    let (job, coalesced) = schedule(&s, &id)?;
    Ok((
        StatusCode::CREATED,
        Json(TurnAppended {
            debate: id,
            source,
            round,
            speaker,
            chunks: report.chunks_written,
            job_id: job.id,
            coalesced,
        }),
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct DocumentRequest {
    scope: String,
    source: String,
    text: String,
    /// When it was written: an RFC 3339 time or a date.
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "2026-03-04")]
    time: Option<strata_engine::time::Time>,
}

/// What a document ingest did.
#[derive(Serialize, utoipa::ToSchema)]
struct DocumentIngested {
    scope: String,
    added: usize,
    replaced: usize,
    unchanged: usize,
    chunks: usize,
    job_id: u64,
    coalesced: bool,
}

/// Adds (or replaces) a document in a scope; schedules its compression.
#[utoipa::path(post, path = "/api/v1/documents", tag = "strata",
    request_body = DocumentRequest,
    responses((status = 201, description = "Stored durably", body = DocumentIngested)))]
async fn ingest_document(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiJson(d): ApiJson<DocumentRequest>,
) -> ApiResult<(StatusCode, Json<DocumentIngested>)> {
    check_write(&access, &d.scope)?;
    if d.source.trim().is_empty() {
        return Err(ApiError::bad("source is empty: name the document"));
    }
    let st = s.clone();
    let scope = d.scope.clone();
    let report = blocking(move || {
        let mut input = source::document(&d.source, d.text)?;
        input.time = d.time;
        let file = InputFile::single(ScopeKind::Doc, &d.source, input);
        Ok(st.engine.ingest(&d.scope, &[file], unix_now())?)
    })
    .await?;
    let (job, coalesced) = schedule(&s, &scope)?;
    Ok((
        StatusCode::CREATED,
        Json(DocumentIngested {
            scope,
            added: report.added,
            replaced: report.replaced,
            unchanged: report.unchanged,
            chunks: report.chunks_written,
            job_id: job.id,
            coalesced,
        }),
    ))
}

/// `GET /api/jobs/{id}[?wait=SECS]`: the job; with `wait`, answered when the job is done
/// or failed, or after at most `wait` seconds (≤ 60), whichever comes first.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "strata",
    params(("id" = u64, Path, description = "The job id"),
        ("wait" = Option<u64>, Query, description = "Seconds (0-60) to wait for the job to end")),
    responses((status = 200, description = "The job", body = Job)))]
async fn job(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> ApiResult<Json<Job>> {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad("a job id is a whole number"))?;
    let wait: Option<u64> = match params.get("wait") {
        None => None,
        Some(w) => Some(
            w.parse()
                .ok()
                .filter(|&n| n <= MAX_JOB_WAIT_SECS)
                .ok_or_else(|| {
                    ApiError::bad(format!(
                        "wait must be a whole number of seconds from 0 to {MAX_JOB_WAIT_SECS}"
                    ))
                })?,
        ),
    };
    let no_job = || ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}"));
    // A job belongs to its scope: one the caller may not see is no job (checked before any
    // wait, which would tell when it ends).
    let job = s
        .jobs
        .get(id)?
        .filter(|j| access.can_read(&j.scope))
        .ok_or_else(no_job)?;
    let job = match wait {
        None => Some(job),
        Some(secs) => s.jobs.wait(id, Duration::from_secs(secs)).await?,
    };
    job.map(Json).ok_or_else(no_job)
}

/// Longest `?wait=` of `GET /api/jobs/{id}`.
const MAX_JOB_WAIT_SECS: u64 = 60;
