//! Numbers of the context API: stats, readiness, status, the dashboard. A scoped token
//! sees the scopes it may read and their numbers; the store's own figures (index
//! documents, disk bytes) and the process's metrics are the same for every caller and name
//! no scope.

use super::*;

/// The store's stats as `access` may see them: its scopes only, and `nodes` counting
/// their live nodes (every node of the store for full access).
async fn visible_stats(s: &Arc<AppState>, access: &Access) -> ApiResult<strata_engine::Stats> {
    let st = s.clone();
    let mut stats = blocking(move || Ok(st.engine.stats(unix_now())?)).await?;
    if !access.is_full() {
        stats.scopes.retain(|sc| access.can_read(&sc.scope));
        stats.nodes = stats
            .scopes
            .iter()
            .map(|sc| sc.live_by_level.iter().map(|(_, n)| *n).sum::<usize>())
            .sum();
    }
    Ok(stats)
}

#[derive(Serialize, ToSchema)]
pub(crate) struct CacheStats {
    /// Nodes builds found live.
    hits: u64,
    /// Nodes builds had to make.
    misses: u64,
    hit_rate: f64,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ContextsStats {
    stored: usize,
    /// The first 20.
    ids: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct SystemStats {
    /// aragora's external `rlm` package: never (strata is its own).
    has_official_rlm: bool,
    compressor_available: bool,
    rlm_available: bool,
    /// The compressor's identity (model and prompt version).
    compressor: String,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct RlmStats {
    cache: CacheStats,
    contexts: ContextsStats,
    system: SystemStats,
    timestamp: String,
    nodes: usize,
    indexed_docs: u64,
    unindexed: usize,
    disk_bytes: u64,
}

/// Cache, contexts and store numbers (GET; aragora's TypeScript SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/rlm/stats", tag = "rlm-contexts",
    responses((status = 200, description = "The numbers", body = RlmStats)))]
pub(crate) async fn stats(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
) -> ApiResult<Json<RlmStats>> {
    let stats = visible_stats(&s, &access).await?;
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
pub(crate) struct RlmReadiness {
    has_official_rlm: bool,
    rlm_available: bool,
    /// Every scope's tree is built and live.
    context_ready: bool,
    /// The largest request body accepted.
    max_content_bytes: usize,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct CodebaseHealth {
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
    /// DELETE only: always false (there is no codebase analysis to reset; see
    /// [`codebase_health_reset`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    reset: Option<bool>,
}

/// The health of what strata serves from: its store and index (aragora's codebase
/// context is strata's corpus). GET or POST: aragora's server answers a POST (its SDK's
/// `analyzeCodebaseHealth`) with the same report, its POST handler leaving the path to
/// the GET one; strata runs no analysis either.
#[utoipa::path(method(get, post), path = "/api/v1/rlm/codebase/health", tag = "rlm-contexts",
    responses((status = 200, description = "The health", body = CodebaseHealth)))]
pub(crate) async fn codebase_health(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
) -> ApiResult<Json<CodebaseHealth>> {
    let stats = visible_stats(&s, &access).await?;
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
        reset: None,
    }))
}

/// `DELETE` (aragora's SDK's `resetCodebaseHealth`): the health report, with `reset:
/// false`. aragora's server keeps no codebase health data to reset: its DELETE handler
/// handles only `/rlm/context/{id}` and leaves this path to the GET handler, which answers
/// the report. strata does the same (nothing is removed, so no write access is needed) and
/// adds the `reset` field the SDK's type declares, false: nothing was reset.
#[utoipa::path(delete, path = "/api/v1/rlm/codebase/health", tag = "rlm-contexts",
    responses((status = 200, description = "The health; `reset` is false", body = CodebaseHealth)))]
pub(crate) async fn codebase_health_reset(
    state: State<Arc<AppState>>,
    Caller(access): Caller,
) -> ApiResult<Json<CodebaseHealth>> {
    let Json(mut h) = codebase_health(state, Caller(access)).await?;
    h.reset = Some(false);
    Ok(Json(h))
}

#[derive(Serialize, ToSchema)]
pub(crate) struct RlmStatus {
    available: bool,
    provider: String,
    version: String,
    features: Vec<String>,
}

/// What this server offers (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/rlm/status", tag = "rlm-contexts",
    responses((status = 200, description = "The status", body = RlmStatus)))]
pub(crate) async fn status(State(s): State<Arc<AppState>>) -> Json<RlmStatus> {
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
pub(crate) struct DashCompressions {
    total: u64,
    by_type: BTreeMap<String, u64>,
    avg_ratio: f64,
    tokens_saved: u64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DashQueries {
    total: u64,
    by_type: BTreeMap<String, u64>,
    avg_duration: f64,
    success_rate: f64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DashCache {
    hits: u64,
    misses: u64,
    hit_rate: f64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DashRefinement {
    avg_iterations: f64,
    success_rate: f64,
    ready_false_total: u64,
}

/// aragora's RLM dashboard, from the Prometheus metrics of this process.
#[derive(Serialize, ToSchema)]
pub(crate) struct RlmDashboard {
    compressions: DashCompressions,
    queries: DashQueries,
    cache: DashCache,
    refinement: DashRefinement,
}

/// aragora's dashboard numbers (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/metrics/rlm", tag = "rlm-contexts",
    responses((status = 200, description = "The numbers", body = RlmDashboard)))]
pub(crate) async fn dashboard(State(s): State<Arc<AppState>>) -> Json<RlmDashboard> {
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
