//! `context/{level}`: a level of a debate, whole or within a budget, in aragora's shape.

use super::*;

/// A node of a context window.
#[derive(Serialize, ToSchema)]
pub(crate) struct WindowNode {
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
pub(crate) struct ContextResponse {
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
/// one: all of it; `auto` needs one). GET; aragora's TypeScript SDK POSTs (no body).
#[utoipa::path(method(get, post), path = "/api/v1/debates/{id}/context/{level}", tag = "rlm",
    params(("id" = String, Path, description = "The debate (or document scope)"),
        ("level" = String, Path, description = "ABSTRACT, SUMMARY, DETAILED, RAW/FULL, METADATA or AUTO, any case"),
        ("budget" = Option<usize>, Query, description = "Tokens at most (required for auto)"),
        ("since" = Option<String>, Query, description = "Only turns said at or after this time (RFC 3339 or a date)"),
        ("until" = Option<String>, Query, description = "Only turns said at or before this time (RFC 3339 or a date)"),
        ("for" = Option<String>, Query, description = "Build the window for this question or the turn about to be spoken: the turns that bear on it, with a short overview (the level is then ignored; needs a budget)")),
    responses((status = 200, description = "The window", body = ContextResponse)))]
pub(crate) async fn context(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiPath((id, level)): ApiPath<(String, String)>,
    ApiQuery(params): ApiQuery<HashMap<String, String>>,
) -> ApiResult<Json<ContextResponse>> {
    check_debate_id(&matched, &id)?;
    check_read(&access, &id)?;
    let t0 = Instant::now();
    let choice: LevelChoice = level.parse()?;
    // The level as asked for (aragora's RAW stays RAW), upper case.
    let level_name = level.to_ascii_uppercase();
    let budget: Option<usize> = match params.get("budget") {
        Some(b) => {
            let b = b
                .parse()
                .map_err(|_| ApiError::bad("budget must be a positive whole number of tokens"))?;
            strata_engine::context::check_budget(b)?;
            Some(b)
        }
        None if choice == LevelChoice::Auto || params.contains_key("for") => {
            return Err(ApiError::bad(
                "the auto level and a window `for` a question need a budget: the budget query parameter (?budget=N)",
            ));
        }
        None => None,
    };
    let during = strata_engine::time::TimeRange::parse(
        params.get("since").map(String::as_str),
        params.get("until").map(String::as_str),
    )?;
    let now = unix_now();
    let ask = WindowAsk {
        choice,
        budget,
        focus: params.get("for").cloned(),
        range: during,
    };
    let served = s.engine.serve_window(&id, &ask, now).await?;
    if let Some(r) = &served.report {
        s.metrics.observe_build(r);
    }
    let window = served.window;
    let nodes = served
        .parts
        .into_iter()
        .map(|p| WindowNode {
            id: p.id.to_hex(),
            level: p.level,
            tokens: p.tokens,
            content: p.text,
            token_count: p.tokens,
            key_topics: p.key_topics,
        })
        .collect();
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
        stale_levels: served.stale,
        pending_turns: served.pending_sources,
    }))
}
