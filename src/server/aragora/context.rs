//! `context/{level}`: a level of a debate, whole or within a budget, in aragora's shape.

use super::*;

/// A node of a context window.
#[derive(Serialize, ToSchema)]
pub(in crate::server) struct WindowNode {
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
pub(in crate::server) struct ContextResponse {
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
pub(in crate::server) async fn context(
    State(s): State<Arc<AppState>>,
    access: Access,
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
            crate::context::check_budget(b)?;
            Some(b)
        }
        None if choice == LevelChoice::Auto || params.contains_key("for") => {
            return Err(ApiError::bad(
                "the auto level and a window `for` a question need a budget: the budget query parameter (?budget=N)",
            ));
        }
        None => None,
    };
    let during = crate::time::TimeRange::parse(
        params.get("since").map(String::as_str),
        params.get("until").map(String::as_str),
    )?;
    let now = unix_now();
    let (view, report) = s.engine.serving_view(&id, now).await?;
    if let Some(r) = report {
        s.metrics.observe_build(&r);
    }
    let whole = during.is_all();
    let (st, plan) = (s.clone(), view.plan.within(&during)?);
    let focus = params.get("for").cloned();
    let scope = id.clone();
    let (window, nodes) = blocking(move || {
        let corpus = st.engine.corpus();
        let budget = budget.unwrap_or(usize::MAX);
        let focused = match &focus {
            Some(text) => crate::context::focused(&corpus, &plan, text, budget, now)?,
            None => None,
        };
        let w = match focused {
            Some(w) => w,
            None => {
                // The current tree, whole: its window is remembered until the next write.
                let current = match whole {
                    true => st
                        .engine
                        .window_if_current(&scope, &plan, choice, budget, now)?,
                    false => None,
                };
                match current {
                    Some(w) => w,
                    None => crate::context::window(&corpus, &plan, choice, budget, now)?,
                }
            }
        };
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
