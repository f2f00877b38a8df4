//! `refinement-status`: running queries and levels servable without a build.

use super::*;

/// How a debate's levels and queries stand: aragora's fields and strata's.
#[derive(Serialize, ToSchema)]
pub(crate) struct RefinementStatus {
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
pub(crate) async fn refinement_status(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RefinementStatus>> {
    check_debate_id(&matched, &id)?;
    check_read(&access, &id)?;
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
