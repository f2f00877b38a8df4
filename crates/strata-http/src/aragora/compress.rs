//! `compress`: schedules a build, waits a while for it, answers with what was built.

use super::*;

/// `POST /debates/{id}/compress`; the body may be left out.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompressRequest {
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
pub(crate) struct CompressResponse {
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

pub(crate) fn wait_param(params: &HashMap<String, String>) -> ApiResult<u64> {
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
pub(crate) async fn build_and_wait(
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

pub(crate) async fn tally_of(s: &Arc<AppState>, scope: &str) -> ApiResult<Built> {
    let (st, sc) = (s.clone(), scope.to_string());
    blocking(move || {
        let plan = st.engine.plan(&sc)?;
        Ok(st.engine.tally(&plan, unix_now())?)
    })
    .await
}

pub(crate) fn status_of(job: &Job) -> StatusCode {
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
pub(crate) async fn compress(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
    OptJson(req): OptJson<CompressRequest>,
) -> ApiResult<(StatusCode, Json<CompressResponse>)> {
    check_debate_id(&matched, &id)?;
    // A build schedules work (and model calls): a write.
    check_write(&access, &id)?;
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
pub(crate) fn observe_job(
    engine: &Engine,
    m: &Metrics,
    job: &Job,
    report: Option<&strata_engine::BuildReport>,
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
