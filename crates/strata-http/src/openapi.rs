//! The route table and the OpenAPI 3.1 document generated from the handlers' types
//! (utoipa). Every route is served under `/api/v1` and `/api`; the handlers are annotated
//! once (with their `/api/v1` path) and the document lists both. Every operation may also
//! answer with RFC 9457 problem details (`application/problem+json`).

use super::{MakeRoute, Problem, aragora, contexts, forget};
use axum::Json;
use axum::routing::{delete, get, post};
use serde_json::{Value, json};
use utoipa::OpenApi;

/// One route under a prefix: its path, its methods (as the document lists them) and how
/// to make its handler.
pub(crate) struct Route {
    pub(crate) path: &'static str,
    pub(crate) methods: &'static [&'static str],
    pub(crate) handler: MakeRoute,
}

/// Every route under `/api` and `/api/v1`, in one place: the router is built from it and
/// a test holds the document to it.
pub(crate) const ROUTES: &[Route] = &[
    Route {
        path: "/debates/{id}",
        methods: &["delete"],
        handler: || delete(forget::forget_debate),
    },
    Route {
        path: "/debates/{id}/turns",
        methods: &["post"],
        handler: || post(super::append_turn),
    },
    Route {
        path: "/debates/{id}/compress",
        methods: &["post"],
        handler: || post(aragora::compress),
    },
    Route {
        path: "/debates/{id}/context/{level}",
        methods: &["get", "post"],
        handler: || get(aragora::context).post(aragora::context),
    },
    Route {
        path: "/debates/{id}/query-rlm",
        methods: &["post"],
        handler: || post(aragora::query_debate),
    },
    Route {
        path: "/debates/{id}/refinement-status",
        methods: &["get", "post"],
        handler: || get(aragora::refinement_status).post(aragora::refinement_status),
    },
    Route {
        path: "/scopes/{scope}",
        methods: &["delete"],
        handler: || delete(forget::forget_scope),
    },
    Route {
        path: "/scopes/{scope}/sources/{id}",
        methods: &["delete"],
        handler: || delete(forget::forget_source),
    },
    Route {
        path: "/documents",
        methods: &["post"],
        handler: || post(super::ingest_document),
    },
    Route {
        path: "/knowledge/query-rlm",
        methods: &["post"],
        handler: || post(aragora::query_knowledge),
    },
    Route {
        path: "/jobs/{id}",
        methods: &["get"],
        handler: || get(super::job),
    },
    Route {
        path: "/rlm/compress",
        methods: &["post"],
        handler: || post(contexts::compress),
    },
    Route {
        path: "/rlm/query",
        methods: &["post"],
        handler: || post(contexts::query),
    },
    Route {
        path: "/rlm/contexts",
        methods: &["get", "post"],
        handler: || get(contexts::list).post(contexts::list),
    },
    Route {
        path: "/rlm/context/{id}",
        methods: &["get", "delete"],
        handler: || get(contexts::detail).delete(contexts::delete),
    },
    Route {
        path: "/rlm/strategies",
        methods: &["get", "post"],
        handler: || get(contexts::strategies).post(contexts::strategies),
    },
    Route {
        path: "/rlm/stream",
        methods: &["post"],
        handler: || post(contexts::stream),
    },
    Route {
        path: "/rlm/stream/modes",
        methods: &["get", "post"],
        handler: || get(contexts::stream_modes).post(contexts::stream_modes),
    },
    Route {
        path: "/rlm/stats",
        methods: &["get", "post"],
        handler: || get(contexts::stats).post(contexts::stats),
    },
    Route {
        path: "/rlm/status",
        methods: &["get", "post"],
        handler: || get(contexts::status).post(contexts::status),
    },
    Route {
        path: "/rlm/codebase/health",
        methods: &["get", "post", "delete"],
        handler: || {
            get(contexts::codebase_health)
                .post(contexts::codebase_health)
                .delete(contexts::codebase_health_reset)
        },
    },
    Route {
        path: "/metrics/rlm",
        methods: &["get", "post"],
        handler: || get(contexts::dashboard).post(contexts::dashboard),
    },
];

/// The routes outside the prefixes: (path, methods).
pub(crate) const OTHER_ROUTES: &[(&str, &[&str])] = &[
    ("/api/openapi.json", &["get"]),
    ("/metrics", &["get"]),
    ("/healthz", &["get"]),
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "strata",
        description = "Hierarchical compression with an abstraction-level store: context windows at five levels and answers cited to exact source spans. Every route under /api/v1 is also served under /api. The RLM routes speak aragora's REST API (ADR-008) besides strata's own fields. Errors are RFC 9457 problem details (application/problem+json) with an `error` field.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        super::append_turn,
        super::ingest_document,
        super::job,
        forget::forget_scope,
        forget::forget_source,
        forget::forget_debate,
        aragora::compress,
        aragora::context,
        aragora::query_debate,
        aragora::refinement_status,
        aragora::query_knowledge,
        contexts::compress,
        contexts::query,
        contexts::list,
        contexts::detail,
        contexts::delete,
        contexts::strategies,
        contexts::stream,
        contexts::stream_modes,
        contexts::stats,
        contexts::status,
        contexts::codebase_health,
        contexts::codebase_health_reset,
        contexts::dashboard,
        document,
        super::metrics,
        super::healthz,
    ),
    components(schemas(Problem)),
    security(("bearer" = [])),
    modifiers(&Bearer),
    tags(
        (name = "rlm", description = "aragora's debate RLM routes (ADR-008), with strata's fields"),
        (name = "rlm-contexts", description = "aragora's RLM context API over strata's scopes"),
        (name = "strata", description = "strata's own routes"),
        (name = "service", description = "Documentation, metrics, health"),
    )
)]
struct ApiDoc;

/// Bearer-token auth (when `server.token` or `server.tokens` is set).
struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Errors every operation may answer with.
const ERRORS: [(&str, &str); 12] = [
    (
        "400",
        "Bad input (a bad id, level, strategy, budget or body)",
    ),
    ("401", "A token is configured and the request lacks it"),
    (
        "403",
        "The token may not write that scope, or a write from an origin not in server.cors_origins",
    ),
    (
        "404",
        "No such scope, source, job or context (or one the token may not see)",
    ),
    ("405", "The route does not take that method"),
    (
        "408",
        "The body did not arrive within server.body_timeout_ms",
    ),
    ("413", "The body is larger than server.body_limit_bytes"),
    ("415", "A body that is not sent as application/json"),
    (
        "421",
        "Without a token: a Host that is not localhost, an IP address or in server.allowed_hosts",
    ),
    (
        "422",
        "The body is JSON of the wrong shape (unknown field, wrong type)",
    ),
    ("500", "The server failed"),
    (
        "503",
        "Too many requests or connections (Retry-After), the server is stopping, or a node is missing",
    ),
];

/// The OpenAPI 3.1 document: the annotated operations (under `/api/v1`) listed under
/// `/api` as well, operation ids made unique, and the problem responses added.
pub fn spec() -> Value {
    let doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serialises");
    let mut doc = doc;
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    let mut out = serde_json::Map::new();
    for (path, item) in paths {
        let mut copies = vec![(path.clone(), item.clone())];
        if let Some(rest) = path.strip_prefix("/api/v1/") {
            copies.push((format!("/api/{rest}"), item));
        }
        for (p, mut item) in copies {
            if let Some(ops) = item.as_object_mut() {
                for (method, op) in ops.iter_mut() {
                    op["operationId"] = json!(operation_id(method, &p));
                    let responses = op["responses"].as_object_mut();
                    if let Some(r) = responses {
                        for (code, why) in ERRORS {
                            r.entry(code).or_insert_with(|| {
                                json!({
                                    "description": why,
                                    "content": {"application/problem+json": {
                                        "schema": {"$ref": "#/components/schemas/Problem"}
                                    }}
                                })
                            });
                        }
                    }
                }
            }
            out.insert(p, item);
        }
    }
    doc["paths"] = Value::Object(out);
    doc
}

/// `post_api_v1_debates_id_query_rlm`.
fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_string();
    for c in path.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c);
        } else if !id.ends_with('_') {
            id.push('_');
        }
    }
    id.trim_end_matches('_').to_string()
}

/// The methods a concrete path is served with (empty: no such route).
pub(crate) fn methods_of(path: &str) -> Vec<&'static str> {
    let matches = |template: &str| {
        let (t, p): (Vec<&str>, Vec<&str>) =
            (template.split('/').collect(), path.split('/').collect());
        t.len() == p.len()
            && t.iter()
                .zip(&p)
                .all(|(t, p)| (t.starts_with('{') && !p.is_empty()) || t == p)
    };
    let prefixed = ROUTES
        .iter()
        .flat_map(|r| ["/api/v1", "/api"].map(|prefix| (format!("{prefix}{}", r.path), r.methods)));
    let others = OTHER_ROUTES.iter().map(|(p, m)| (p.to_string(), *m));
    prefixed
        .chain(others)
        .find(|(t, _)| matches(t))
        .map(|(_, m)| m.to_vec())
        .unwrap_or_default()
}

/// A 405 as problem details, naming the methods the route takes (also in `Allow`).
pub(super) async fn method_not_allowed(uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let methods: Vec<String> = methods_of(uri.path())
        .iter()
        .map(|m| m.to_ascii_uppercase())
        .collect();
    let mut r = super::ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        format!("{} takes {}", uri.path(), methods.join(" or ")),
    )
    .into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&methods.join(", ")) {
        r.headers_mut().insert(axum::http::header::ALLOW, v);
    }
    r
}

/// This document.
#[utoipa::path(get, path = "/api/openapi.json", tag = "service", security(),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
pub(super) async fn document() -> Json<Value> {
    Json(spec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The document lists exactly the routes the router serves, with their methods.
    #[test]
    fn the_document_lists_every_route() {
        let doc = spec();
        let paths = doc["paths"].as_object().unwrap();
        let mut want: BTreeSet<(String, String)> = BTreeSet::new();
        for r in ROUTES {
            for prefix in ["/api/v1", "/api"] {
                for m in r.methods {
                    want.insert((format!("{prefix}{}", r.path), m.to_string()));
                }
            }
        }
        for (p, ms) in OTHER_ROUTES {
            for m in *ms {
                want.insert((p.to_string(), m.to_string()));
            }
        }
        let got: BTreeSet<(String, String)> = paths
            .iter()
            .flat_map(|(p, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| ["get", "post", "put", "delete", "patch"].contains(&k.as_str()))
                    .map(move |m| (p.clone(), m.clone()))
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(doc["openapi"], "3.1.0");
        let ids: Vec<&str> = paths
            .values()
            .flat_map(|i| i.as_object().unwrap().values())
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        let unique: BTreeSet<&str> = ids.iter().copied().collect();
        assert_eq!(ids.len(), unique.len(), "operation ids repeat");
    }
}
