//! What the context API offers: strategies, streaming a context level by level, its modes.

use super::*;

/// One strategy.
#[derive(Serialize, ToSchema)]
pub(crate) struct StrategyInfo {
    name: String,
    description: String,
    use_case: String,
    /// What share of the context a query reads (aragora gives a percentage; strata says
    /// what is read, and each answer's `tokens_processed` the tokens).
    token_reduction: String,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Strategies {
    strategies: BTreeMap<String, StrategyInfo>,
    default: String,
    documentation: String,
}

/// A strategy's name, description, use case and what it reads.
fn describe(s: Strategy) -> (&'static str, &'static str, &'static str, &'static str) {
    match s {
        Strategy::Auto => (
            "Auto",
            "The root model chooses every step when one is configured; otherwise the hierarchical descent",
            "General purpose",
            "varies with the strategy chosen",
        ),
        Strategy::Offline => (
            "Offline",
            "Always the offline (BM25) navigator, its hierarchical descent; no model is called",
            "Deterministic answers, no model cost",
            "reads at most query.max_nodes hits per step, never the whole context",
        ),
        Strategy::Peek => (
            "Peek",
            "Reads the overview and every group's summary, keeps the groups whose text matches, reads their chunks whole",
            "Rapid exploration, questions about what a section says",
            "reads the overview, every group's summary and the matching groups' chunks",
        ),
        Strategy::Grep => (
            "Grep",
            "One flat search over every chunk (detailed and full text), no descent",
            "Finding a specific fact, a name, a number",
            "reads only the chunks the search returns",
        ),
        Strategy::PartitionMap => (
            "Partition Map",
            "Searches each group on its own and lets each group's best chunk compete (a root model: one helper call per group)",
            "Questions whose evidence is spread over many rounds or sections",
            "reads each group's best chunk and the chunks that win",
        ),
        Strategy::Summarize => (
            "Summarize",
            "The compressed levels decide: groups by their SUMMARY, chunks by their DETAILED; full text is read only to cite",
            "Long documents, getting the gist",
            "reads the compressed levels; full text only for the cited spans",
        ),
        Strategy::Hierarchical => (
            "Hierarchical",
            "Down the pre-built tree: ABSTRACT, groups by the evidence beneath them, chunks within the groups",
            "Complex documents, iterative exploration",
            "reads one path down the tree per step",
        ),
        Strategy::Code => (
            "Code",
            "The root model writes one sandboxed Rhai program per iteration that evaluates the whole working set (grep, peek, children, search, llm_query, llm_batch); without a root model, the hierarchical descent",
            "Questions that need many nodes compared or filtered at once",
            "reads what the program selects, within its operation limits",
        ),
    }
}

/// The strategies a query may name (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/rlm/strategies", tag = "rlm-contexts",
    responses((status = 200, description = "The strategies", body = Strategies)))]
pub(crate) async fn strategies() -> Json<Strategies> {
    Json(Strategies {
        strategies: Strategy::ALL
            .into_iter()
            .map(|s| {
                let (name, description, use_case, token_reduction) = describe(s);
                (
                    s.name().to_string(),
                    StrategyInfo {
                        name: name.into(),
                        description: description.into(),
                        use_case: use_case.into(),
                        token_reduction: token_reduction.into(),
                    },
                )
            })
            .collect(),
        default: Strategy::default().name().into(),
        documentation: "docs/USAGE.md, section Strategies".into(),
    })
}

/// `POST /rlm/stream`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamRequest {
    context_id: String,
    /// top_down (default), bottom_up, targeted or progressive.
    #[serde(default)]
    mode: Option<String>,
    /// Only the nodes that match this search.
    #[serde(default)]
    query: Option<String>,
    /// targeted: the level (default SUMMARY; with a `query` and no level, the window for
    /// the query: the turns or passages that bear on it, within `chunk_size` tokens);
    /// otherwise the level to start from.
    #[serde(default)]
    level: Option<String>,
    /// Tokens per chunk, about (default 500).
    #[serde(default, deserialize_with = "crate::extract::lenient_int")]
    #[schema(value_type = Option<usize>)]
    chunk_size: Option<usize>,
    #[serde(default)]
    include_metadata: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct StreamChunk {
    /// The level, upper case.
    level: String,
    content: String,
    token_count: u64,
    is_final: bool,
    /// The node ids in the chunk (when include_metadata).
    metadata: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct StreamResponse {
    context_id: String,
    mode: String,
    /// The query, when one was given (left out otherwise, as aragora's SDK types it).
    #[serde(skip_serializing_if = "Option::is_none")]
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
pub(crate) async fn stream(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiJson(req): ApiJson<StreamRequest>,
) -> ApiResult<Json<StreamResponse>> {
    check_read(&access, &req.context_id)?;
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
    // Targeted at a question: the question-focused window, one chunk.
    if let ("targeted", None, Some(q)) = (mode.as_str(), from, req.query.as_deref())
        && !q.trim().is_empty()
        && let Some(w) = s.engine.focused_in(&view, q, chunk_size, now)?
    {
        let mut metadata = BTreeMap::new();
        if with_meta {
            metadata.insert(
                "node_ids".to_string(),
                w.nodes.iter().map(|n| n.id.clone()).collect(),
            );
        }
        let chunk = StreamChunk {
            level: "FOR".into(),
            content: w.text,
            token_count: w.tokens as u64,
            is_final: true,
            metadata,
        };
        return Ok(Json(StreamResponse {
            context_id: req.context_id,
            mode,
            query: req.query,
            chunks: vec![chunk],
            total_chunks: 1,
            timestamp: iso8601(now),
        }));
    }
    let matching: Option<HashSet<NodeId>> = match &req.query {
        Some(q) if !q.trim().is_empty() => Some(
            s.engine
                .grep(std::slice::from_ref(&req.context_id), q, &levels, 1000, now)
                .await?
                .into_iter()
                .filter_map(|h| NodeId::from_hex(&h.id))
                .collect(),
        ),
        _ => None,
    };
    let mut chunks: Vec<StreamChunk> = Vec::new();
    for (level, nodes) in s
        .engine
        .view_nodes(&view, &levels, matching.as_ref(), now)?
    {
        let mut text = String::new();
        let mut tokens = 0u64;
        let mut ids: Vec<String> = Vec::new();
        for n in nodes {
            if !ids.is_empty() && tokens + n.tokens as u64 > chunk_size as u64 {
                chunks.push(chunk(level, &mut text, &mut tokens, &mut ids, with_meta));
            }
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&n.text);
            tokens += n.tokens as u64;
            ids.push(n.id.to_hex());
        }
        if !ids.is_empty() {
            chunks.push(chunk(level, &mut text, &mut tokens, &mut ids, with_meta));
        }
    }
    if let Some(last) = chunks.last_mut() {
        last.is_final = true;
    }
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
pub(crate) struct StreamMode {
    mode: String,
    description: String,
    use_case: String,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct StreamModes {
    modes: Vec<StreamMode>,
}

/// The modes of `/rlm/stream` (GET; aragora's SDK POSTs).
#[utoipa::path(method(get, post), path = "/api/v1/rlm/stream/modes", tag = "rlm-contexts",
    responses((status = 200, description = "The modes", body = StreamModes)))]
pub(crate) async fn stream_modes() -> Json<StreamModes> {
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
