//! The forget routes: `DELETE /scopes/{scope}`, `DELETE /scopes/{scope}/sources/{id}` and
//! `DELETE /debates/{id}` — [`Engine::forget`](strata_engine::Engine::forget) under the write rules
//! of ingest (a token that may not write the scope gets 403, whether or not it exists).

use super::extract::ApiPath;
use super::{ApiResult, AppState, Caller, aragora, blocking, check_write, unknown_scope};
use axum::Json;
use axum::extract::{MatchedPath, State};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_core::clock::unix_now;
use strata_engine::engine::ForgetReport;
use strata_engine::store::ScopeKind;

/// What a forget removed, durably (store flushed, index committed) before this reply.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Forgotten {
    scope: String,
    /// Whether the scope itself went.
    scope_removed: bool,
    /// The sources removed.
    sources: Vec<String>,
    /// Nodes removed per level (`full`, `detailed`, `summary`, `abstract`, `metadata`).
    nodes_by_level: BTreeMap<String, usize>,
    nodes: usize,
    /// Bytes of source text removed.
    bytes: u64,
    /// Bytes of node text removed.
    node_bytes: u64,
    /// Sources the scope still holds; its levels are rebuilt from them.
    remaining_sources: usize,
}

impl From<ForgetReport> for Forgotten {
    fn from(r: ForgetReport) -> Self {
        Forgotten {
            nodes_by_level: r
                .nodes_by_level
                .iter()
                .map(|(l, n)| (l.name().to_string(), *n))
                .collect(),
            scope: r.scope,
            scope_removed: r.scope_removed,
            sources: r.sources,
            nodes: r.nodes,
            bytes: r.bytes,
            node_bytes: r.node_bytes,
            remaining_sources: r.remaining_sources,
        }
    }
}

pub(super) async fn run(
    s: &Arc<AppState>,
    scope: String,
    sources: Vec<String>,
) -> ApiResult<Forgotten> {
    let st = s.clone();
    let name = scope.clone();
    let report = blocking(move || Ok(st.engine.forget(&name, &sources, unix_now())?)).await?;
    // The last query's summary of the scope may quote what was forgotten.
    s.queried.lock().expect("poisoned").remove(&scope);
    Ok(report.into())
}

/// Forgets a whole scope: its sources, every node, vectors and index entries.
#[utoipa::path(delete, path = "/api/v1/scopes/{scope}", tag = "strata",
    params(("scope" = String, Path, description = "The scope")),
    responses((status = 200, description = "Removed durably", body = Forgotten)))]
pub(super) async fn forget_scope(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiPath(scope): ApiPath<String>,
) -> ApiResult<Json<Forgotten>> {
    check_write(&access, &scope)?;
    Ok(Json(run(&s, scope, Vec::new()).await?))
}

/// Forgets one source of a scope and every node derived from it; the rest of the scope
/// is rebuilt on its next compress or read.
#[utoipa::path(delete, path = "/api/v1/scopes/{scope}/sources/{id}", tag = "strata",
    params(("scope" = String, Path, description = "The scope"),
        ("id" = String, Path, description = "The source id, URL-encoded (`docs%2Fa.md`)")),
    responses((status = 200, description = "Removed durably", body = Forgotten)))]
pub(super) async fn forget_source(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    ApiPath((scope, id)): ApiPath<(String, String)>,
) -> ApiResult<Json<Forgotten>> {
    check_write(&access, &scope)?;
    Ok(Json(run(&s, scope, vec![id]).await?))
}

/// Forgets a debate (the scope of that name): every turn and every node.
#[utoipa::path(delete, path = "/api/v1/debates/{id}", tag = "strata",
    params(("id" = String, Path, description = "The debate (a scope name)")),
    responses((status = 200, description = "Removed durably", body = Forgotten)))]
pub(super) async fn forget_debate(
    State(s): State<Arc<AppState>>,
    Caller(access): Caller,
    matched: MatchedPath,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Forgotten>> {
    aragora::check_debate_id(&matched, &id)?;
    check_write(&access, &id)?;
    // A scope of documents is no debate.
    let st = s.clone();
    let name = id.clone();
    let kind = blocking(move || Ok(st.engine.scope_kind(&name)?)).await?;
    if kind != Some(ScopeKind::Debate) {
        return Err(unknown_scope(&id));
    }
    Ok(Json(run(&s, id, Vec::new()).await?))
}
