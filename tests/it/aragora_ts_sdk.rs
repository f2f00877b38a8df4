//! aragora's TypeScript SDK (`@aragora/sdk`) against `strata serve`. The SDK is not
//! published on npm, so this test replays, as data, every request its RLM namespace
//! (`sdk/typescript/src/namespaces/rlm.ts`) and the RLM/context methods of its debates
//! namespace (`namespaces/debates.ts`) make — method, path, query and body, as
//! `client.ts`'s `request()` puts them on the wire (`Content-Type` and `Accept:
//! application/json` on every request, `params` as the query string) — against the real
//! binary on 127.0.0.1, and holds each answer to the response type the SDK declares
//! (transcribed too): 2xx, every declared field present (optional ones may be absent) with
//! the declared JSON kind. strata's extra fields are allowed.
//!
//! Read at an0mium/aragora commit cd2985adf864aa9fcc10d2c26b906bbd00a0c2b6 (files
//! `sdk/typescript/src/namespaces/rlm.ts`, `namespaces/debates.ts`, `client.ts`).
//!
//! What that source does that a reader should know:
//! - `rlm.ts`'s `compress`, `query` and `stream` pass their body as `{ json: ... }`, but
//!   `client.ts`'s `request()` sends only `options.body` (its `RequestOptions` has no
//!   `json`): over the wire these three POSTs go out without a body, and any server —
//!   aragora's own answers "Request body required" (400) — refuses them. The replay below
//!   sends the bodies the SDK means to send (what a fixed client sends), and
//!   [`bodiless_posts_are_refused_as_aragora_refuses_them`] checks the bodiless wire form is
//!   a 400 problem with aragora's `error` field, not a crash or a 2xx made of nothing.
//! - Out of scope (strata does not implement them, and none is an RLM or context route):
//!   every other request of `debates.ts` — aragora's debate orchestration (create, run,
//!   start/stop/pause/resume/cancel, messages, evidence, consensus, clone, archive, fork,
//!   follow-ups, verify, votes, rounds, agents, timeline, user input, interventions, batch
//!   submission and status, queue, graph and matrix debates, explainability and
//!   counterfactuals, red team, capability probe, deep audit, broadcast and publishing,
//!   dashboard, history, health, statistics and analytics, import/export, compare,
//!   similar, quality, tags, metadata, notes, sharing, cost estimate, debate-this,
//!   reasoning, agent statistics, decision integrity, make-permanent, summary and
//!   search). The RLM/context ones are all below: `compress`, `getContextLevel`,
//!   `queryRlm`, `getRefinementStatus`.

use crate::support::Served;
use serde_json::{Value, json};

/// One request of the SDK and the type of its answer.
struct Call {
    /// The SDK method (`namespace.method`).
    sdk: &'static str,
    method: &'static str,
    /// `{debate}`, `{context}` and `{level}` are filled in.
    path: &'static str,
    query: &'static [(&'static str, &'static str)],
    /// The JSON body; `None`: no body.
    body: Option<Value>,
    /// The declared response type: `"string"`, `"number"`, `"boolean"`, `"unknown"`;
    /// `[T]` an array of T; `{"{}": T}` a `Record<string, T>`; any other object an
    /// interface, a key ending in `?` optional.
    returns: Value,
}

fn call(
    sdk: &'static str,
    method: &'static str,
    path: &'static str,
    query: &'static [(&'static str, &'static str)],
    body: Option<Value>,
    returns: Value,
) -> Call {
    Call {
        sdk,
        method,
        path,
        query,
        body,
        returns,
    }
}

/// Every request of `rlm.ts` and the RLM/context requests of `debates.ts`, in an order
/// that makes each meaningful (the context exists before it is read).
fn calls() -> Vec<Call> {
    // rlm.ts's types.
    let compression_result = json!({
        "original_tokens": "number",
        "compressed_tokens": "number",
        "compression_ratio": "number",
        "levels": {"{}": {"nodes": "number", "tokens": "number"}},
        "source_type": "string",
    });
    let context_summary = json!({
        "id": "string",
        "source_type": "string",
        "original_tokens": "number",
        "created_at": "string",
    });
    let mut context_details = context_summary.clone();
    context_details.as_object_mut().unwrap().extend(
        json!({
            "compressed_tokens": "number",
            "compression_ratio": "number",
            "levels": {"{}": {"nodes": "number", "tokens": "number", "node_ids": ["string"]}},
            "summary_preview?": [{"id": "string", "content": "string"}],
        })
        .as_object()
        .unwrap()
        .clone(),
    );
    let query_result = json!({
        "answer": "string",
        "metadata": {
            "context_id": "string",
            "strategy": "string",
            "refined": "boolean",
            "confidence?": "number",
            "iterations?": "number",
            "tokens_processed?": "number",
            "sub_calls_made?": "number",
        },
        "timestamp": "string",
    });
    let stream_result = json!({
        "context_id": "string",
        "mode": "string",
        "query?": "string",
        "chunks": [{
            "level": "string",
            "content": "string",
            "token_count": "number",
            "is_final": "boolean",
            "metadata?": {"{}": "unknown"},
        }],
        "total_chunks": "number",
        "timestamp": "string",
    });
    let rlm_stats = json!({
        "cache": {"hits?": "number", "misses?": "number", "size?": "number", "error?": "string"},
        "contexts": {"stored": "number", "ids": ["string"]},
        "system": {
            "has_official_rlm": "boolean",
            "compressor_available": "boolean",
            "rlm_available": "boolean",
        },
        "timestamp": "string",
    });
    let context_level = json!({
        "level": "string",
        "content": "string",
        "token_count": "number",
        "nodes": [{
            "id": "string",
            "content": "string",
            "token_count": "number",
            "key_topics": ["string"],
        }],
    });
    let text = "The harbour board met on Monday. The ferry needs 12 berths, and the tram \
                depot will be at Millbrook next to the river. The audit confirmed 38,000 \
                daily riders. The board approved the budget of 420 million after a long \
                debate about the bridge.";
    vec![
        // ---------------------------------------------------------------- rlm.ts
        call(
            "rlm.compress",
            "POST",
            "/api/v1/rlm/compress",
            &[],
            Some(json!({"content": text, "source_type": "text", "levels": 4})),
            json!({
                "context_id": "string",
                "compression_result": compression_result,
                "created_at": "string",
            }),
        ),
        call(
            "rlm.getStats",
            "POST",
            "/api/v1/rlm/stats",
            &[],
            None,
            rlm_stats,
        ),
        call(
            "rlm.getStrategies",
            "POST",
            "/api/v1/rlm/strategies",
            &[],
            None,
            json!({
                "strategies": {"{}": {
                    "name": "string",
                    "description": "string",
                    "use_case": "string",
                    "token_reduction": "string",
                }},
                "default": "string",
                "documentation": "string",
            }),
        ),
        call(
            "rlm.query",
            "POST",
            "/api/v1/rlm/query",
            &[],
            Some(json!({
                "context_id": "{context}",
                "query": "How many daily riders did the audit confirm?",
                "strategy": "auto",
                "refine": false,
                "max_iterations": 3,
            })),
            query_result.clone(),
        ),
        call(
            "rlm.query (refine, options)",
            "POST",
            "/api/v1/rlm/query",
            &[],
            Some(json!({
                "context_id": "{context}",
                "query": "Where will the tram depot be?",
                "strategy": "grep",
                "refine": true,
                "max_iterations": 2,
            })),
            query_result,
        ),
        call(
            "rlm.listContexts",
            "POST",
            "/api/v1/rlm/contexts",
            &[],
            None,
            json!({
                "contexts": [context_summary.clone()],
                "total": "number",
                "limit": "number",
                "offset": "number",
            }),
        ),
        call(
            "rlm.listContexts (limit, offset)",
            "POST",
            "/api/v1/rlm/contexts",
            &[("limit", "10"), ("offset", "1")],
            None,
            json!({
                "contexts": [context_summary],
                "total": "number",
                "limit": "number",
                "offset": "number",
            }),
        ),
        call(
            "rlm.getContext",
            "GET",
            "/api/v1/rlm/context/{context}",
            &[],
            None,
            context_details.clone(),
        ),
        call(
            "rlm.getContext (includeContent)",
            "GET",
            "/api/v1/rlm/context/{context}",
            &[("include_content", "true")],
            None,
            context_details,
        ),
        call(
            "rlm.getStreamModes",
            "POST",
            "/api/v1/rlm/stream/modes",
            &[],
            None,
            json!({"modes": [{"mode": "string", "description": "string", "use_case": "string"}]}),
        ),
        // `query` and `level` undefined: JSON.stringify leaves them out.
        call(
            "rlm.stream",
            "POST",
            "/api/v1/rlm/stream",
            &[],
            Some(json!({
                "context_id": "{context}",
                "mode": "top_down",
                "chunk_size": 500,
                "include_metadata": true,
            })),
            stream_result.clone(),
        ),
        call(
            "rlm.stream (options)",
            "POST",
            "/api/v1/rlm/stream",
            &[],
            Some(json!({
                "context_id": "{context}",
                "mode": "targeted",
                "query": "ferry berths",
                "level": "SUMMARY",
                "chunk_size": 200,
                "include_metadata": false,
            })),
            stream_result,
        ),
        call(
            "rlm.getCodebaseHealth",
            "GET",
            "/api/v1/rlm/codebase/health",
            &[],
            None,
            json!({"{}": "unknown"}),
        ),
        call(
            "rlm.resetCodebaseHealth",
            "DELETE",
            "/api/v1/rlm/codebase/health",
            &[],
            None,
            json!({"reset": "boolean"}),
        ),
        call(
            "rlm.analyzeCodebaseHealth",
            "POST",
            "/api/v1/rlm/codebase/health",
            &[],
            None,
            json!({"{}": "unknown"}),
        ),
        // ---------------------------------------------------------------- debates.ts
        // `targetLevels` undefined: left out.
        call(
            "debates.compress",
            "POST",
            "/api/v1/debates/{debate}/compress",
            &[],
            Some(json!({"compression_ratio": 0.3})),
            json!({
                "original_tokens": "number",
                "compressed_tokens": {"{}": "number"},
                "compression_ratios": {"{}": "number"},
                "time_seconds": "number",
                "levels_created": "number",
            }),
        ),
        call(
            "debates.compress (options)",
            "POST",
            "/api/v1/debates/{debate}/compress",
            &[],
            Some(json!({"target_levels": ["ABSTRACT", "SUMMARY"], "compression_ratio": 0.5})),
            json!({
                "original_tokens": "number",
                "compressed_tokens": {"{}": "number"},
                "compression_ratios": {"{}": "number"},
                "time_seconds": "number",
                "levels_created": "number",
            }),
        ),
        call(
            "debates.getContextLevel",
            "POST",
            "/api/v1/debates/{debate}/context/{level}",
            &[],
            None,
            context_level,
        ),
        call(
            "debates.queryRlm",
            "POST",
            "/api/v1/debates/{debate}/query-rlm",
            &[],
            Some(json!({
                "query": "How many berths does the ferry need?",
                "strategy": "auto",
                "max_iterations": 3,
                "start_level": "SUMMARY",
            })),
            json!({
                "answer": "string",
                "ready": "boolean",
                "iteration": "number",
                "refinement_history": ["unknown"],
                "confidence": "number",
                "nodes_examined": ["unknown"],
                "tokens_processed": "number",
                "sub_calls_made": "number",
            }),
        ),
        call(
            "debates.getRefinementStatus",
            "POST",
            "/api/v1/debates/{debate}/refinement-status",
            &[],
            None,
            json!({
                "debate_id": "string",
                "active_queries": "number",
                "cached_contexts": "number",
                "status": "string",
            }),
        ),
        // Last: the context goes.
        call(
            "rlm.deleteContext",
            "DELETE",
            "/api/v1/rlm/context/{context}",
            &[],
            None,
            json!({"success": "boolean", "context_id": "string", "message": "string"}),
        ),
    ]
}

/// The levels `getContextLevel` takes.
const LEVELS: [&str; 4] = ["ABSTRACT", "SUMMARY", "DETAILED", "RAW"];

/// Whether `v` is of type `ty` (see [`Call::returns`]); the first mismatch, with where.
fn conforms(v: &Value, ty: &Value, at: &str) -> Result<(), String> {
    let kind = |ok: bool, want: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("{at}: expected {want}, got {v}"))
        }
    };
    match ty {
        Value::String(t) => match t.as_str() {
            "string" => kind(v.is_string(), "a string"),
            "number" => kind(v.is_number(), "a number"),
            "boolean" => kind(v.is_boolean(), "a boolean"),
            "unknown" => Ok(()),
            other => panic!("no such type {other}"),
        },
        Value::Array(elem) => {
            let Some(items) = v.as_array() else {
                return kind(false, "an array");
            };
            for (i, item) in items.iter().enumerate() {
                conforms(item, &elem[0], &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        Value::Object(fields) => {
            let Some(obj) = v.as_object() else {
                return kind(false, "an object");
            };
            if let Some(t) = fields.get("{}") {
                for (k, item) in obj {
                    conforms(item, t, &format!("{at}.{k}"))?;
                }
                return Ok(());
            }
            for (key, t) in fields {
                let (name, optional) = match key.strip_suffix('?') {
                    Some(n) => (n, true),
                    None => (key.as_str(), false),
                };
                match obj.get(name) {
                    Some(item) => conforms(item, t, &format!("{at}.{name}"))?,
                    None if optional => {}
                    None => return Err(format!("{at}: no field `{name}` in {v}")),
                }
            }
            Ok(())
        }
        other => panic!("not a type: {other}"),
    }
}

/// Fills `{context}` in a body.
fn fill(body: &Value, context: &str) -> Value {
    match body {
        Value::String(s) if s == "{context}" => Value::String(context.into()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), fill(v, context)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The request as the SDK's `request()` sends it (no API key).
async fn send(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Value) {
    send_as(http, base, None, method, path, query, body).await
}

/// The same with the SDK's `apiKey` (`Authorization: Bearer`).
async fn send_as(
    http: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Value) {
    // `url.searchParams.append(key, String(value))`: the values here need no escaping.
    let qs: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let url = if qs.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{}", qs.join("&"))
    };
    let mut r = http
        .request(method.parse().unwrap(), url)
        .header("content-type", "application/json")
        .header("accept", "application/json");
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    let r = r.send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

fn debate_turns() -> Vec<Value> {
    [
        (
            1,
            "alice",
            "The ferry needs 12 berths if the night service runs.",
        ),
        (
            1,
            "bob",
            "The tram depot will be at Millbrook, next to the river.",
        ),
        (
            2,
            "alice",
            "The audit confirmed 38,000 daily riders on the line.",
        ),
        (2, "carol", "I propose we fund the bridge before the depot."),
    ]
    .into_iter()
    .map(|(round, speaker, text)| json!({"round": round, "speaker": speaker, "text": text}))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rlm_request_of_the_typescript_sdk_answers_its_declared_type() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "", &[]);
    let base = format!("http://{}", s.addr);
    let http = crate::support::http_client();
    // The debate the debates.ts calls read, appended with strata's own route.
    for t in debate_turns() {
        let (code, v) = send(
            &http,
            &base,
            "POST",
            "/api/v1/debates/d1/turns",
            &[],
            Some(&t),
        )
        .await;
        assert_eq!(code, 201, "{v}");
    }
    let mut context = String::new();
    let mut replayed = Vec::new();
    for c in calls() {
        let levels: &[&str] = if c.path.contains("{level}") {
            &LEVELS
        } else {
            &[""]
        };
        for level in levels {
            let path = c
                .path
                .replace("{debate}", "d1")
                .replace("{context}", &context)
                .replace("{level}", level);
            let body = c.body.as_ref().map(|b| fill(b, &context));
            let (code, v) = send(&http, &base, c.method, &path, c.query, body.as_ref()).await;
            let what = format!("{} ({} {path})", c.sdk, c.method);
            assert!((200..300).contains(&code), "{what}: {code} {v}");
            if let Err(e) = conforms(&v, &c.returns, "response") {
                panic!("{what}: {e}");
            }
            if c.sdk == "rlm.compress" {
                context = v["context_id"].as_str().unwrap().to_string();
            }
            replayed.push(what);
        }
    }
    // Every call ran (getContextLevel once per level).
    assert_eq!(replayed.len(), calls().len() + LEVELS.len() - 1);
    assert!(context.starts_with("ctx_"), "{context}");
    // What the answers say is about what was sent, not filler: the contexts list names
    // the debate and no longer the deleted context, which is gone; the debate's level
    // holds its turns.
    let (_, v) = send(&http, &base, "POST", "/api/v1/rlm/contexts", &[], None).await;
    let ids: Vec<&str> = v["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        !ids.contains(&context.as_str()) && ids.contains(&"d1"),
        "{v}"
    );
    let path = format!("/api/v1/rlm/context/{context}");
    for method in ["GET", "DELETE"] {
        let (code, v) = send(&http, &base, method, &path, &[], None).await;
        assert_eq!(code, 404, "{method} after delete: {v}");
    }
    let (_, v) = send(
        &http,
        &base,
        "POST",
        "/api/v1/debates/d1/context/RAW",
        &[],
        None,
    )
    .await;
    assert!(v["content"].as_str().unwrap().contains("Millbrook"), "{v}");
}

/// `rlm.deleteContext` honours the tokens as the other routes do (a context the token may
/// not read is unknown, one it may read but not write is 403) and removes the context
/// durably: it stays gone after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_context_honours_tokens_and_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"[server]
token = "admin"

[[server.tokens]]
token = "reader"
scopes = ["ctx_*"]
access = "read"

[[server.tokens]]
token = "writer"
scopes = ["ctx_*"]
access = "write"

[[server.tokens]]
token = "team"
scopes = ["team-*"]
access = "write"
"#;
    let http = crate::support::http_client();
    let s = Served::start(dir.path(), config, &[]);
    let base = format!("http://{}", s.addr);
    let body =
        json!({"content": "The ferry needs 12 berths at Millbrook quay.", "source_type": "text"});
    let compress = "/api/v1/rlm/compress";
    let (code, v) = send_as(
        &http,
        &base,
        Some("writer"),
        "POST",
        compress,
        &[],
        Some(&body),
    )
    .await;
    assert!((200..300).contains(&code), "{v}");
    let ctx = v["context_id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/rlm/context/{ctx}");
    for (token, status) in [
        (None, 401),
        (Some("nope"), 401),
        (Some("team"), 404),
        (Some("reader"), 403),
    ] {
        let (code, v) = send_as(&http, &base, token, "DELETE", &path, &[], None).await;
        assert_eq!(code, status, "{token:?}: {v}");
    }
    let unknown = "/api/v1/rlm/context/ctx_0123456789abcdef";
    let (code, v) = send_as(&http, &base, Some("admin"), "DELETE", unknown, &[], None).await;
    assert_eq!(code, 404, "{v}");
    // The refused deletes removed nothing.
    let (code, _) = send_as(&http, &base, Some("reader"), "GET", &path, &[], None).await;
    assert_eq!(code, 200);
    let (code, v) = send_as(&http, &base, Some("writer"), "DELETE", &path, &[], None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(v["context_id"], json!(ctx), "{v}");
    assert_eq!(v["scope_removed"], true, "{v}");
    drop(s);
    let s = Served::start(dir.path(), config, &[]);
    let base = format!("http://{}", s.addr);
    let (code, v) = send_as(&http, &base, Some("admin"), "GET", &path, &[], None).await;
    assert_eq!(code, 404, "after a restart: {v}");
    let contexts = "/api/v1/rlm/contexts";
    let (_, v) = send_as(&http, &base, Some("admin"), "GET", contexts, &[], None).await;
    assert_eq!(v["total"], 0, "{v}");
    // The same content compressed again makes the context anew.
    let (code, v) = send_as(
        &http,
        &base,
        Some("writer"),
        "POST",
        compress,
        &[],
        Some(&body),
    )
    .await;
    assert!((200..300).contains(&code), "{v}");
    assert_eq!(v["context_id"], json!(ctx));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodiless_posts_are_refused_as_aragora_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "", &[]);
    let base = format!("http://{}", s.addr);
    let http = crate::support::http_client();
    for path in [
        "/api/v1/rlm/compress",
        "/api/v1/rlm/query",
        "/api/v1/rlm/stream",
    ] {
        let (code, v) = send(&http, &base, "POST", path, &[], None).await;
        assert_eq!(code, 400, "{path}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
}

#[test]
fn the_type_check_rejects_what_the_sdk_would_not_read() {
    let ty = json!({"a": "number", "b?": "string", "c": [{"d": "boolean"}], "e": {"{}": "number"}});
    let ok = json!({"a": 1, "c": [{"d": true}], "e": {"x": 2}, "extra": null});
    assert_eq!(conforms(&ok, &ty, "r"), Ok(()));
    for bad in [
        json!({"c": [], "e": {}}),
        json!({"a": "1", "c": [], "e": {}}),
        json!({"a": 1, "b": null, "c": [], "e": {}}),
        json!({"a": 1, "c": [{"d": 1}], "e": {}}),
        json!({"a": 1, "c": [], "e": {"x": "2"}}),
        json!({"a": 1, "c": {}, "e": {}}),
    ] {
        assert!(conforms(&bad, &ty, "r").is_err(), "{bad}");
    }
}
