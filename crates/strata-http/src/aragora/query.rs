//! `query-rlm` on a debate, a context and the knowledge base: aragora's knobs, strata's answer.

use super::*;
use strata_engine::time::Time;

/// `POST /debates/{id}/query-rlm`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DebateQuery {
    /// The question (at most 10,000 characters).
    query: String,
    /// auto, peek, grep, partition_map, summarize, hierarchical (aragora's), or offline.
    #[serde(default)]
    strategy: Option<String>,
    /// Navigation iterations; outside 1-10 clamped.
    #[serde(default, deserialize_with = "crate::extract::lenient_int")]
    #[schema(value_type = Option<i64>)]
    max_iterations: Option<i64>,
    /// Where navigation starts: ABSTRACT, SUMMARY, DETAILED, RAW (= FULL) or METADATA, any
    /// case.
    #[serde(default)]
    start_level: Option<String>,
    /// Answer from what was gathered after this many milliseconds (0 = no limit; default
    /// `query.time_limit_ms`; at most an hour): `limit_hit` is then `time_limit`.
    #[serde(default)]
    time_limit_ms: Option<i64>,
    /// Only sources said at or after this time (RFC 3339, or a date: from its start).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    since: Option<Time>,
    /// Only sources said at or before this time (RFC 3339, or a date: to its end).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    until: Option<Time>,
}

/// `POST /knowledge/query-rlm`: a question over several scopes.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnowledgeQuery {
    query: String,
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default, deserialize_with = "crate::extract::lenient_int")]
    #[schema(value_type = Option<i64>)]
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
    #[serde(default, deserialize_with = "crate::extract::lenient_int")]
    #[schema(value_type = Option<i64>)]
    max_nodes: Option<i64>,
    /// Answer from what was gathered after this many milliseconds (0 = no limit; default
    /// `query.time_limit_ms`; at most an hour): `limit_hit` is then `time_limit`.
    #[serde(default)]
    time_limit_ms: Option<i64>,
    /// Only sources said at or after this time (RFC 3339, or a date: from its start).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    since: Option<Time>,
    /// Only sources said at or before this time (RFC 3339, or a date: to its end).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    until: Option<Time>,
}

/// `POST /rlm/query`: a question over one context (a scope).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextQuery {
    context_id: String,
    query: String,
    #[serde(default)]
    strategy: Option<String>,
    /// With `refine`, the iterations (1-10, clamped); without, the configured default.
    #[serde(default, deserialize_with = "crate::extract::lenient_int")]
    #[schema(value_type = Option<i64>)]
    max_iterations: Option<i64>,
    #[serde(default)]
    start_level: Option<String>,
    #[serde(default)]
    refine: Option<bool>,
    /// Answer from what was gathered after this many milliseconds (0 = no limit; default
    /// `query.time_limit_ms`; at most an hour): `limit_hit` is then `time_limit`.
    #[serde(default)]
    time_limit_ms: Option<i64>,
    /// Only sources said at or after this time (RFC 3339, or a date: from its start).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    since: Option<Time>,
    /// Only sources said at or before this time (RFC 3339, or a date: to its end).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    until: Option<Time>,
}

/// The knobs every query route shares.
struct Knobs<'a> {
    query: &'a str,
    strategy: Option<&'a str>,
    max_iterations: Option<i64>,
    start_level: Option<&'a str>,
    max_nodes: Option<i64>,
    time_limit_ms: Option<i64>,
    since: Option<Time>,
    until: Option<Time>,
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
    if let Some(ms) = k.time_limit_ms {
        if ms < 0 {
            return Err(ApiError::bad(format!(
                "time_limit_ms must be 0 (no limit) or more, not {ms}"
            )));
        }
        cfg.time_limit_ms = ms.min(3_600_000) as u64;
    }
    cfg.during = strata_engine::time::TimeRange::new(k.since, k.until)?;
    Ok(cfg)
}

/// A query's answer: aragora's fields (`iteration`, `refinement_history` as the earlier
/// answers) and strata's (citations, trajectory, usage, the navigation log).
#[derive(Serialize, ToSchema)]
pub(crate) struct QueryResponse {
    /// Only ever cited source text: the citations' quotes joined (after the date a
    /// question that asks when is answered with, on a line of its own: `when`).
    pub(crate) answer: String,
    /// The date a question that asks when is answered with (ISO 8601), from the time of
    /// what it cites; left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) when: Option<String>,
    pub(crate) ready: bool,
    pub(crate) confidence: f64,
    /// The refinement iteration that gave the answer, 0-based (= earlier answers).
    pub(crate) iteration: usize,
    /// Earlier answers a later one replaced, oldest first.
    pub(crate) refinement_history: Vec<String>,
    pub(crate) nodes_examined: Vec<String>,
    pub(crate) tokens_processed: u64,
    pub(crate) sub_calls_made: u32,
    pub(crate) citations: Vec<Citation>,
    /// Navigation iterations (strata's count).
    pub(crate) iterations: u32,
    /// strata's log of the navigation (the CLI's refinement history).
    pub(crate) navigation_history: Vec<String>,
    pub(crate) trajectory: Vec<Step>,
    pub(crate) usage: Usage,
    /// What the query ran with.
    pub(crate) strategy: String,
    pub(crate) start_level: String,
    pub(crate) max_iterations: u32,
    /// How the run ended: the navigation used up its iterations.
    pub(crate) max_iterations_reached: bool,
    /// What ended it (`max_iterations`, `max_tokens`, `max_sub_calls`, `no_narrowing`,
    /// `time_limit`), `null` when it finished within its budgets.
    pub(crate) limit_hit: Option<String>,
    /// Each budget, used against its limit.
    pub(crate) budgets: Budgets,
    /// One plain sentence on how the run ended (says so when nothing was found).
    pub(crate) outcome: String,
}

impl QueryResponse {
    fn new(r: QueryResult, cfg: &QueryConfig) -> QueryResponse {
        QueryResponse {
            answer: r.answer,
            when: r.when,
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
            max_iterations_reached: r.max_iterations_reached,
            limit_hit: r.limit_hit,
            budgets: r.budgets,
            outcome: r.outcome,
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
    // The engine keeps its synchronous work (scoring, index commits) off the executor.
    let r = s
        .engine
        .query(&strata_engine::Ask::new(&scopes, &question, now).settings(&cfg))
        .await?;
    if !s.cfg.trace_file.is_empty() {
        let (path, records) = (
            std::path::PathBuf::from(&s.cfg.trace_file),
            strata_engine::trace::records(&question, &names, &r, now),
        );
        // A trace that cannot be written is logged, never the query's failure.
        if let Err(e) = blocking(move || Ok(strata_engine::trace::append(&path, &records)?)).await {
            tracing::warn!(error = %e.message, "query trace not written");
        }
    }
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
pub(crate) async fn query_debate(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
    ApiJson(q): ApiJson<DebateQuery>,
) -> ApiResult<Json<QueryResponse>> {
    check_debate_id(&matched, &id)?;
    check_read(&access, &id)?;
    let cfg = query_config(
        &s,
        &Knobs {
            query: &q.query,
            strategy: q.strategy.as_deref(),
            max_iterations: q.max_iterations,
            start_level: q.start_level.as_deref(),
            max_nodes: None,
            time_limit_ms: q.time_limit_ms,
            since: q.since,
            until: q.until,
        },
    )?;
    s.engine.scope(&id)?;
    let r = run_query(&s, vec![id], q.query, cfg.clone(), QUERY_TYPES[0]).await?;
    Ok(Json(QueryResponse::new(r, &cfg)))
}

/// Answers a question over one context (a scope): `/rlm/query`. Returns the context, whether
/// it was refined (`refine`: the given iterations; otherwise the configured ones) and the
/// answer.
pub(crate) async fn query_context(
    s: &Arc<AppState>,
    access: &Access,
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
            time_limit_ms: q.time_limit_ms,
            since: q.since,
            until: q.until,
        },
    )?;
    if !access.can_read(&q.context_id) || s.engine.scope(&q.context_id).is_err() {
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
pub(crate) struct KnowledgeResponse {
    #[serde(flatten)]
    result: QueryResponse,
    /// The cited sources, each once, in citation order.
    sources: Vec<String>,
    /// The scopes searched (empty: all).
    scopes: Vec<String>,
    workspace_id: Option<String>,
}

/// Answers a question across scopes (aragora's knowledge mound: a workspace is a scope).
/// Under `/api/v1` a query names its `workspace_id` (or strata's `scopes`), as aragora's
/// server requires (400 otherwise); under `/api` none named searches every scope the
/// caller may read.
#[utoipa::path(post, path = "/api/v1/knowledge/query-rlm", tag = "rlm",
    request_body = KnowledgeQuery,
    responses((status = 200, description = "The answer", body = KnowledgeResponse)))]
pub(crate) async fn query_knowledge(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiJson(q): ApiJson<KnowledgeQuery>,
) -> ApiResult<Json<KnowledgeResponse>> {
    if matched.as_str().starts_with("/api/v1/") && q.workspace_id.is_none() && q.scopes.is_none() {
        return Err(ApiError::bad(
            "workspace_id is required: the workspace (a scope) to search (under /api, a query without one searches every scope)",
        ));
    }
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
            time_limit_ms: q.time_limit_ms,
            since: q.since,
            until: q.until,
        },
    )?;
    for sc in &scopes {
        check_read(&access, sc)?;
        s.engine.scope(sc)?;
    }
    // No scope named: every scope the caller may see (for a scoped token, named one by one).
    let searched = if scopes.is_empty() && !access.is_full() {
        let visible = access.visible(s.engine.scope_names()?);
        if visible.is_empty() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "this token opens no scope that exists yet",
            ));
        }
        visible
    } else {
        scopes.clone()
    };
    let r = run_query(&s, searched, q.query, cfg.clone(), QUERY_TYPES[1]).await?;
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
