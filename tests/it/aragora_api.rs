//! aragora's REST API as strata serves it, without the SDK: both prefixes, bodies without
//! a JSON content type refused (415), problem details for every error (404, 405, a bad `%FF` id), the
//! aragora fields, clamping, the 10,000-character limit, strategies that do what they say,
//! and an OpenAPI document whose every operation is served.

use crate::support::Server;
use serde_json::{Value, json};
use strata::Config;

fn turn(round: u32, speaker: &str, text: &str) -> Value {
    json!({"round": round, "speaker": speaker, "text": text})
}

/// A debate `d1` of four turns, built.
async fn debate(s: &Server) {
    for (r, sp, text) in [
        (
            1,
            "alice",
            "The tram would cost 420 million and open in 2031.",
        ),
        (1, "bob", "I oppose the tram; buses cost a quarter of that."),
        (2, "alice", "The audit confirmed 38,000 daily riders."),
        (2, "bob", "I now support the tram after the audit."),
    ] {
        let (code, v) = s.post("/api/v1/debates/d1/turns", turn(r, sp, text)).await;
        assert_eq!(code, 201, "{v}");
    }
}

/// A request's status, content type, `Allow` header and body.
async fn send(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<(&str, &str)>,
) -> (u16, String, String, Value) {
    let mut r = s.req(method, path);
    if let Some((ct, b)) = body {
        r = r.header("content-type", ct).body(b.to_string());
    }
    let r = r.send().await.unwrap();
    let h = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (ct, allow) = (h("content-type"), h("allow"));
    let code = r.status().as_u16();
    (code, ct, allow, r.json().await.unwrap_or(Value::Null))
}

fn is_problem(code: u16, ct: &str, v: &Value) {
    assert_eq!(ct, "application/problem+json", "{code} {v}");
    assert_eq!(v["status"], code, "{v}");
    assert_eq!(v["type"], "about:blank", "{v}");
    assert!(v["title"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(!e.is_empty() && !e.contains('\n'), "{v}");
    assert_eq!(v["detail"], v["error"], "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_problem_details() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    debate(&s).await;
    use reqwest::Method as M;
    let long = "q".repeat(10_001);
    let long_body = json!({ "query": long }).to_string();
    for (method, path, body, status) in [
        (M::GET, "/no/such/route", None, 404),
        (M::GET, "/api/v1/nothing", None, 404),
        (M::DELETE, "/api/v1/debates/d1/turns", None, 405),
        (M::GET, "/api/debates/d1/turns", None, 405),
        (M::PUT, "/api/v1/rlm/status", None, 405),
        // Not UTF-8 once decoded: axum's plain-text rejection before.
        (M::GET, "/api/debates/%FF/context/summary", None, 400),
        (M::GET, "/api/v1/jobs/%FF", None, 400),
        (
            M::GET,
            "/api/v1/debates/d1/context/summary?budget=%FF",
            None,
            400,
        ),
        // aragora's id rule on /api/v1; strata's names on /api (then: no such scope).
        (M::GET, "/api/v1/debates/bad.id/context/summary", None, 400),
        (M::GET, "/api/debates/bad.id/context/summary", None, 404),
        (M::GET, "/api/v1/debates/d1/context/auto", None, 400),
        (M::GET, "/api/v1/debates/d1/context/sideways", None, 400),
        (
            M::POST,
            "/api/v1/debates/d1/query-rlm",
            Some(("application/json", "{not json")),
            400,
        ),
        (
            M::POST,
            "/api/v1/debates/d1/query-rlm",
            Some(("application/json", long_body.as_str())),
            400,
        ),
        (
            M::POST,
            "/api/v1/debates/d1/query-rlm",
            Some(("application/json", r#"{"query": "q", "strategy": "magic"}"#)),
            400,
        ),
        (
            M::POST,
            "/api/v1/debates/d1/query-rlm",
            Some((
                "application/json",
                r#"{"query": "q", "start_level": "TOP"}"#,
            )),
            400,
        ),
        (M::POST, "/api/v1/debates/d1/query-rlm", None, 400),
        (
            M::POST,
            "/api/v1/debates/d1/query-rlm",
            Some(("application/json", r#"{"query": "q", "time_limit_ms": -5}"#)),
            400,
        ),
        (
            M::POST,
            "/api/v1/knowledge/query-rlm",
            Some((
                "application/json",
                r#"{"query": "q", "workspace_id": "a b"}"#,
            )),
            400,
        ),
        // aragora's server: `workspace_id is required`.
        (
            M::POST,
            "/api/v1/knowledge/query-rlm",
            Some(("application/json", r#"{"query": "q"}"#)),
            400,
        ),
        (
            M::POST,
            "/api/v1/rlm/query",
            Some((
                "application/json",
                r#"{"context_id": "ctx_none", "query": "q"}"#,
            )),
            404,
        ),
    ] {
        let (code, ct, allow, v) = send(&s, method.clone(), path, body).await;
        assert_eq!(code, status, "{method} {path}: {v}");
        is_problem(code, &ct, &v);
        if code == 405 {
            assert!(!allow.is_empty(), "{path}: no Allow header");
            assert!(
                v["error"]
                    .as_str()
                    .unwrap()
                    .contains(&allow.replace(", ", " or "))
            );
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_prefixes_speak_aragora_and_strata() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    // A body sent as `curl -d` sends it (a form content type, which any web page can post
    // to any address) is refused, unread: `-H 'content-type: application/json'` is needed.
    let (code, ct, _, v) = send(
        &s,
        reqwest::Method::POST,
        "/api/debates/d1/turns",
        Some((
            "application/x-www-form-urlencoded",
            r#"{"round": 1, "speaker": "alice", "text": "The tram would cost 420 million."}"#,
        )),
    )
    .await;
    assert_eq!(code, 415, "{v}");
    is_problem(code, &ct, &v);
    assert!(
        v["error"].as_str().unwrap().contains("application/json"),
        "{v}"
    );
    debate(&s).await;
    // compress without a body answers with what was built.
    let (code, _, _, c) = send(
        &s,
        reqwest::Method::POST,
        "/api/v1/debates/d1/compress",
        None,
    )
    .await;
    assert_eq!(code, 200, "{c}");
    assert_eq!(c["levels_created"], 5, "{c}");
    assert_eq!(c["complete"], true);
    assert_eq!(c["state"], "done");
    let original = c["original_tokens"].as_u64().unwrap();
    for l in ["ABSTRACT", "SUMMARY", "DETAILED"] {
        let t = c["compressed_tokens"][l].as_u64().unwrap();
        assert!(t > 0, "{c}");
        let r = c["compression_ratios"][l].as_f64().unwrap();
        assert!((r - t as f64 / original as f64).abs() < 1e-9);
    }
    assert_eq!(c["levels"]["FULL"]["tokens"].as_u64().unwrap(), original);

    // The same question on both prefixes: the same answer, aragora's fields and strata's.
    let q = json!({"query": "How many daily riders did the audit confirm?", "max_iterations": 0});
    let (_, a) = s.post("/api/debates/d1/query-rlm", q.clone()).await;
    let (code, b) = s.post("/api/v1/debates/d1/query-rlm", q).await;
    assert_eq!(code, 200, "{b}");
    assert_eq!(a["answer"], b["answer"]);
    assert!(b["answer"].as_str().unwrap().contains("38,000"), "{b}");
    assert_eq!(b["max_iterations"], 1, "0 is clamped to 1");
    assert_eq!(b["iteration"], 0);
    assert_eq!(b["refinement_history"], json!([]));
    for f in [
        "nodes_examined",
        "citations",
        "navigation_history",
        "trajectory",
    ] {
        assert!(!b[f].as_array().unwrap().is_empty(), "{f}: {b}");
    }
    // A number or, as aragora's server takes it, a string of digits.
    for (given, clamped) in [
        (json!(99), 10),
        (json!(-5), 1),
        (json!(7), 7),
        (json!("3"), 3),
        (json!(" 12 "), 10),
    ] {
        let q = json!({"query": "audit riders", "max_iterations": given});
        let (code, v) = s.post("/api/v1/debates/d1/query-rlm", q).await;
        assert_eq!(
            (code, v["max_iterations"].as_u64()),
            (200, Some(clamped)),
            "{v}"
        );
    }
    let q = json!({"query": "audit riders", "max_iterations": "three"});
    let (code, v) = s.post("/api/v1/debates/d1/query-rlm", q).await;
    assert_eq!(code, 422, "{v}");
    assert!(v["error"].as_str().unwrap().contains("whole number"), "{v}");
    // A time limit the query stays within changes nothing.
    let q =
        json!({"query": "How many daily riders did the audit confirm?", "time_limit_ms": 60000});
    let (code, v) = s.post("/api/v1/debates/d1/query-rlm", q).await;
    assert_eq!((code, &v["limit_hit"]), (200, &Value::Null), "{v}");
    assert!(v["answer"].as_str().unwrap().contains("38,000"), "{v}");
    // 10,000 characters is the limit, not 10,001.
    let q = json!({"query": format!("riders {}", "x".repeat(10_000 - 7))});
    assert_eq!(s.post("/api/v1/debates/d1/query-rlm", q).await.0, 200);

    // context: no budget needed for a level; aragora's fields.
    let (code, w) = s.get("/api/v1/debates/d1/context/detailed").await;
    assert_eq!(code, 200, "{w}");
    assert_eq!(w["level"], "DETAILED");
    assert_eq!(w["budget"], Value::Null);
    assert_eq!(w["content"], w["text"]);
    assert_eq!(w["token_count"], w["tokens"]);
    assert_eq!(w["nodes"].as_array().unwrap().len(), 4, "{w}");
    assert!(
        w["nodes"][0]["key_topics"]
            .as_array()
            .is_some_and(|k| !k.is_empty())
    );
    let (_, w) = s.get("/api/debates/d1/context/Raw?budget=30").await;
    assert_eq!(w["level"], "RAW");
    assert!(w["tokens"].as_u64().unwrap() <= 30);

    // refinement-status: GET and POST, on both prefixes.
    for (m, p) in [
        (reqwest::Method::GET, "/api/debates/d1/refinement-status"),
        (
            reqwest::Method::POST,
            "/api/v1/debates/d1/refinement-status",
        ),
    ] {
        let (code, _, _, st) = send(&s, m, p, None).await;
        assert_eq!(code, 200, "{st}");
        assert_eq!(st["debate_id"], "d1");
        assert_eq!(st["status"], "idle");
        assert_eq!(
            (
                st["active_queries"].as_u64(),
                st["cached_contexts"].as_u64()
            ),
            (Some(0), Some(5))
        );
        // The four turns; the form post wrote nothing.
        assert_eq!(st["sources"], 4);
    }

    // aragora's metric names beside strata's.
    let m = s.metrics().await;
    for name in [
        "aragora_rlm_queries_total{level=\"ABSTRACT\",query_type=\"debate\"}",
        "aragora_rlm_compressions_total{source_type=\"debate\",status=\"success\"}",
        "aragora_rlm_refinement_iterations_count{strategy=\"auto\"}",
        "aragora_rlm_cache_misses_total",
        "rlm_refinement_success_total",
    ] {
        assert!(m.contains(name), "{name} missing");
    }
    s.stop().await;
}

/// Each strategy starts with (or favours) its primitive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategies_start_with_their_primitive() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    debate(&s).await;
    let ask = |strategy: &'static str, start: &'static str| {
        let s = &s;
        async move {
            let q = json!({"query": "How many daily riders did the audit confirm?",
                "strategy": strategy, "start_level": start});
            let (code, v) = s.post("/api/v1/debates/d1/query-rlm", q).await;
            assert_eq!(code, 200, "{v}");
            assert!(
                v["answer"].as_str().unwrap().contains("38,000"),
                "{strategy}: {v}"
            );
            v["trajectory"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    format!(
                        "{}: {}",
                        t["action"].as_str().unwrap(),
                        t["detail"].as_str().unwrap()
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let t = ask("grep", "ABSTRACT").await;
    assert!(
        t[0].starts_with("grep: ") && t[0].contains("at detailed/full"),
        "{t:?}"
    );
    assert!(!t.iter().any(|s| s.starts_with("descend")), "{t:?}");
    let t = ask("peek", "ABSTRACT").await;
    assert!(t[0].starts_with("peek: 1 abstract"), "{t:?}");
    assert!(
        t.iter().any(|s| s.starts_with("peek: 2 summary node(s)")),
        "{t:?}"
    );
    assert!(!t.iter().any(|s| s.starts_with("grep")), "{t:?}");
    let t = ask("partition_map", "SUMMARY").await;
    assert!(
        t.iter()
            .any(|s| s.starts_with("partition_map: 2 partition(s)")),
        "{t:?}"
    );
    let t = ask("summarize", "SUMMARY").await;
    assert!(t.iter().any(|s| s.contains("at summary:")), "{t:?}");
    assert!(t.iter().any(|s| s.contains("at detailed within")), "{t:?}");
    let t = ask("hierarchical", "ABSTRACT").await;
    assert!(t[0].starts_with("peek: 1 abstract"), "{t:?}");
    assert!(
        t.iter().any(|s| s.contains("at summary/detailed/full")),
        "{t:?}"
    );
    let t = ask("hierarchical", "RAW").await;
    assert!(t[0].contains("at full:"), "{t:?}");
    s.stop().await;
}

/// Every operation of the document is served (not 404 "no such route", not 405).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    debate(&s).await;
    let (code, doc) = s.get("/api/openapi.json").await;
    assert_eq!(code, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 40, "{}", paths.len());
    for (path, item) in paths {
        let concrete = path
            .replace("{level}", "summary")
            .replace("{id}", if path.contains("/jobs/") { "1" } else { "d1" });
        for (method, op) in item.as_object().unwrap() {
            assert!(op["responses"]["400"]["content"]["application/problem+json"].is_object());
            let m: reqwest::Method = method.to_uppercase().parse().unwrap();
            let body = (m == reqwest::Method::POST).then_some(("application/json", "{}"));
            let (code, _, _, v) = send(&s, m, &concrete, body).await;
            assert_ne!(code, 405, "{method} {concrete}: {v}");
            assert!(
                !(code == 404 && v["error"] == "no such route"),
                "{method} {concrete} is documented but not served"
            );
        }
    }
    s.stop().await;
}
