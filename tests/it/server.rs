//! `strata serve` over real HTTP on 127.0.0.1: every route, auth, bad input, concurrent
//! appends, jobs that survive a restart, and Prometheus metrics.

use crate::support::Server;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use strata::{Config, Engine};

fn turn(round: u32, speaker: &str, text: &str) -> Value {
    json!({"round": round, "speaker": speaker, "text": text})
}

/// Parses Prometheus text exposition: every sample line is `name{labels} value`.
fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (name, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line}"));
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        if let Some(open) = name.find('{') {
            assert!(name.ends_with('}'), "bad labels in {line}");
            assert!(
                name[open + 1..name.len() - 1]
                    .split(',')
                    .all(|kv| kv.contains("=\""))
            );
        }
        out.push((name.to_string(), v));
    }
    out
}

fn metric(samples: &[(String, f64)], name: &str) -> f64 {
    samples
        .iter()
        .filter(|(n, _)| n == name || n.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_works_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    assert_eq!(s.get("/healthz").await, (200, json!({"status": "ok"})));

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
        let (code, v) = s.post("/api/debates/d1/turns", turn(r, sp, text)).await;
        assert_eq!(code, 201, "{v}");
        assert_eq!(v["speaker"], sp);
        assert!(v["job_id"].is_u64());
    }
    // compress answers when the build is done (or after ?wait= seconds, 202).
    let (code, v) = s.post("/api/debates/d1/compress", json!({})).await;
    assert_eq!(code, 200, "{v}");
    let job = s.wait_job(v["job_id"].as_u64().unwrap()).await;
    assert_eq!(job["state"], "done", "{job}");

    let (code, w) = s.get("/api/debates/d1/context/auto?budget=200").await;
    assert_eq!(code, 200, "{w}");
    assert!(w["tokens"].as_u64().unwrap() <= 200);
    assert_eq!(w["stale_levels"], json!([]));
    assert!(w["text"].as_str().unwrap().contains("38,000"));
    let (code, w) = s.get("/api/debates/d1/context/summary?budget=500").await;
    assert_eq!(code, 200);
    assert!(
        w["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["level"] == "summary")
    );

    let (code, q) = s
        .post(
            "/api/debates/d1/query-rlm",
            json!({"query": "how many daily riders did the audit confirm?", "strategy": "auto", "max_iterations": 4, "start_level": "summary"}),
        )
        .await;
    assert_eq!(code, 200, "{q}");
    assert!(q["answer"].as_str().unwrap().contains("38,000"));
    assert_eq!(q["citations"][0]["speaker"], "alice");
    assert_eq!(q["citations"][0]["round"], 2);
    // start_level=summary skips reading the abstract.
    assert_ne!(q["trajectory"][0]["action"], "peek");

    let (code, st) = s.get("/api/debates/d1/refinement-status").await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["complete"], true);
    assert_eq!(st["sources"], 4);
    assert_eq!(st["last_query"]["ready"], q["ready"]);

    let (code, d) = s
        .post("/api/documents", json!({"scope": "kb", "source": "notes/tram.md", "text": "# Tram\n\nThe depot will be at Millbrook, next to the river.\n"}))
        .await;
    assert_eq!(code, 201, "{d}");
    s.wait_job(d["job_id"].as_u64().unwrap()).await;
    let (code, k) = s
        .post(
            "/api/knowledge/query-rlm",
            json!({"query": "where will the depot be?"}),
        )
        .await;
    assert_eq!(code, 200, "{k}");
    assert_eq!(k["citations"][0]["source"], "notes/tram.md");
    let (code, k) = s
        .post(
            "/api/knowledge/query-rlm",
            json!({"query": "tram", "scopes": ["kb"]}),
        )
        .await;
    assert_eq!(code, 200, "{k}");

    let m = parse_metrics(&s.metrics().await);
    assert!(metric(&m, "rlm_refinement_iterations_count") >= 3.0);
    assert_eq!(metric(&m, "strata_turns_appended_total"), 4.0);
    assert!(metric(&m, "strata_compression_calls_total") > 0.0);
    assert!(metric(&m, "strata_http_request_duration_seconds_count") > 10.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_4xx_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.body_limit_bytes = 4096;
    let s = Server::start(dir.path(), cfg).await;
    s.post("/api/debates/d/turns", turn(1, "a", "hello there"))
        .await;
    let huge = "x".repeat(10_000);
    for (code, v) in [
        s.post_raw("/api/debates/d/turns", "{not json").await,
        s.post_raw(
            "/api/debates/d/turns",
            r#"{"round": "one", "speaker": "a", "text": "x"}"#,
        )
        .await,
        s.post_raw("/api/debates/d/turns", r#"{"round": 1, "speaker": "a"}"#)
            .await,
        s.post("/api/debates/d/turns", turn(1, "a", "   ")).await,
        s.post("/api/debates/d/turns", turn(1, "a", &huge)).await,
        s.get("/api/debates/nope/context/auto?budget=10").await,
        s.get("/api/debates/d/context/auto?budget=0").await,
        s.get("/api/debates/d/context/auto").await,
        s.get("/api/debates/d/context/sideways?budget=10").await,
        s.post("/api/debates/nope/query-rlm", json!({"query": "q"}))
            .await,
        s.post(
            "/api/debates/d/query-rlm",
            json!({"query": "q", "strategy": "magic"}),
        )
        .await,
        s.post("/api/debates/d/query-rlm", json!({"query": ""}))
            .await,
        s.post("/api/debates/nope/compress", json!({})).await,
        s.get("/api/debates/nope/refinement-status").await,
        s.get("/api/jobs/abc").await,
        s.get("/api/jobs/1?wait=forever").await,
        s.get("/api/jobs/1?wait=61").await,
        s.get("/api/jobs/999999").await,
        s.post(
            "/api/documents",
            json!({"scope": "d", "source": "x.md", "text": "a debate is not a document"}),
        )
        .await,
        s.post(
            "/api/documents",
            json!({"scope": "k", "source": "", "text": "t"}),
        )
        .await,
        s.get("/no/such/route").await,
    ] {
        assert!((400..500).contains(&code), "{code} {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{code} {v}"
        );
        assert_eq!(v["status"], code);
    }
    // Spot-check statuses that matter to clients.
    assert_eq!(
        s.get("/api/debates/nope/context/auto?budget=10").await.0,
        404
    );
    assert_eq!(
        s.post("/api/debates/d/turns", turn(1, "a", &huge)).await.0,
        413
    );
    assert_eq!(s.post_raw("/api/debates/d/turns", "{not json").await.0, 400);
    // Nothing bad got in.
    let (_, st) = s.get("/api/debates/d/refinement-status").await;
    assert_eq!(st["sources"], 1);
    s.stop().await;
}

/// Issue 9: NUL bytes, a JSON array as a turn and unknown fields were accepted silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_arrays_and_unknown_fields_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    let (code, v) = s
        .post("/api/debates/d/turns", turn(1, "a", "hello there"))
        .await;
    assert_eq!(code, 201, "{v}");
    for ((code, v), status, expect) in [
        (
            s.post("/api/debates/d/turns", turn(1, "a", "nul\0byte"))
                .await,
            400,
            "the text contains the control character U+0000 at byte offset 3",
        ),
        (
            s.post("/api/debates/d/turns", turn(1, "a\u{1b}", "x"))
                .await,
            400,
            "the speaker contains the control character U+001B",
        ),
        (
            s.post_raw("/api/debates/d/turns", r#"[1, "a", "text"]"#)
                .await,
            422,
            "invalid request body: invalid type: sequence, expected a debate turn object",
        ),
        (
            s.post_raw("/api/debates/d/turns", r#""just text""#).await,
            422,
            "expected a debate turn object",
        ),
        (
            s.post_raw(
                "/api/debates/d/turns",
                r#"{"round": 1, "speaker": "a", "text": "x", "mood": "calm"}"#,
            )
            .await,
            422,
            "invalid request body: mood: unknown field `mood`, expected one of `round`, `speaker`, `text`",
        ),
        (
            s.post_raw("/api/debates/d/turns", "{not json").await,
            400,
            "the request body is not valid JSON: key must be a string at line 1 column 2",
        ),
        (
            s.post(
                "/api/documents",
                json!({"scope": "k", "source": "a.md", "text": "line one\nbad \u{7}bell"}),
            )
            .await,
            400,
            "a.md contains the control character U+0007 at byte offset 13 (line 2)",
        ),
        (
            s.post(
                "/api/documents",
                json!({"scope": "k", "source": "a.md", "text": "t", "author": "me"}),
            )
            .await,
            422,
            "unknown field `author`",
        ),
    ] {
        assert_eq!(code, status, "{v}");
        let e = v["error"].as_str().unwrap();
        assert!(e.contains(expect), "expected {expect:?} in {e:?}");
        assert!(!e.contains('\n'), "{e:?}");
    }
    // Nothing bad got in.
    let (_, st) = s.get("/api/debates/d/refinement-status").await;
    assert_eq!(st["sources"], 1);
    assert_eq!(s.get("/api/debates/k/refinement-status").await.0, 404);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_protects_the_api_but_not_health() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.token = "s3cret".into();
    cfg.server.metrics_public = false;
    let s = Server::start(dir.path(), cfg).await;
    let anon = crate::support::http_client();
    let url = |p: &str| format!("{}{p}", s.base);
    assert_eq!(
        anon.get(url("/healthz")).send().await.unwrap().status(),
        200
    );
    for (path, token) in [
        ("/api/jobs/1", None),
        ("/api/jobs/1", Some("wrong")),
        ("/metrics", None),
    ] {
        let mut r = anon.get(url(path));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
    }
    let r = anon
        .post(url("/api/debates/d/turns"))
        .json(&turn(1, "a", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // With the token everything works.
    assert_eq!(
        s.post("/api/debates/d/turns", turn(1, "a", "hello"))
            .await
            .0,
        201
    );
    assert!(s.metrics().await.contains("strata_turns_appended_total 1"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_lose_nothing_and_keep_round_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Server::start(dir.path(), Config::default()).await);
    let mut tasks = Vec::new();
    for client in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for round in 1..=15u32 {
                let text = format!(
                    "Client {client} speaks in round {round} with marker m{client}x{round}."
                );
                let (code, v) = s
                    .post(
                        "/api/debates/busy/turns",
                        turn(round, &format!("agent{client}"), &text),
                    )
                    .await;
                assert_eq!(code, 201, "{v}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Until the levels catch up a context request serves the last complete view; wait for
    // a build that has seen every turn.
    let (_, v) = s.post("/api/debates/busy/compress", json!({})).await;
    s.wait_job(v["job_id"].as_u64().unwrap()).await;
    let (code, w) = s.get("/api/debates/busy/context/full?budget=100000").await;
    assert_eq!(w["stale_levels"], json!([]), "{w}");
    assert_eq!(code, 200, "{w}");
    let text = w["text"].as_str().unwrap();
    let mut last_round = 0;
    for round in 1..=15 {
        let pos = text.find(&format!("## Round {round} (full)")).unwrap();
        assert!(pos >= last_round, "round {round} out of order");
        last_round = pos;
        for client in 0..4 {
            assert!(
                text.contains(&format!("m{client}x{round}.")),
                "lost turn {client}/{round}"
            );
        }
    }
    let (_, st) = s.get("/api/debates/busy/refinement-status").await;
    assert_eq!(st["sources"], 60);
    Arc::try_unwrap(s).ok().unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.workers = 0; // nothing runs jobs in the first life
    let s = Server::start(dir.path(), cfg).await;
    s.post(
        "/api/debates/d/turns",
        turn(1, "a", "The ferry costs 12 million."),
    )
    .await;
    let (code, v) = s.post("/api/debates/d/compress?wait=0", json!({})).await;
    assert_eq!(code, 202);
    let id = v["job_id"].as_u64().unwrap();
    // A duplicate request coalesces into the queued job.
    let (_, again) = s.post("/api/debates/d/compress?wait=0", json!({})).await;
    assert_eq!(again["job_id"].as_u64().unwrap(), id);
    assert_eq!(again["coalesced"], true);
    assert_eq!(s.get(&format!("/api/jobs/{id}")).await.1["state"], "queued");
    assert!(s.metrics().await.contains("strata_job_queue_depth 1"));
    s.stop().await;

    let s = Server::start(dir.path(), Config::default()).await;
    let job = s.wait_job(id).await;
    assert_eq!(job["state"], "done", "{job}");
    assert!(job["outcome"]["nodes_built"].as_u64().unwrap() > 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_during_a_rebuild_serves_the_last_complete_view() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.workers = 0; // the appended turn's build never runs by itself
    let s = Server::start(dir.path(), cfg).await;
    s.post(
        "/api/debates/d/turns",
        turn(1, "a", "The first plan costs 10 million."),
    )
    .await;
    // First request: no complete view yet, so it is built on demand.
    let (code, w) = s.get("/api/debates/d/context/summary?budget=500").await;
    assert_eq!(code, 200, "{w}");
    assert_eq!(w["stale_levels"], json!([]));
    s.post(
        "/api/debates/d/turns",
        turn(2, "b", "The second plan costs 20 million."),
    )
    .await;
    let (code, w) = s.get("/api/debates/d/context/summary?budget=500").await;
    assert_eq!(code, 200, "{w}");
    assert_eq!(w["pending_turns"], 1);
    let stale: Vec<&str> = w["stale_levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        stale.contains(&"summary") && stale.contains(&"abstract"),
        "{stale:?}"
    );
    assert!(!w["text"].as_str().unwrap().contains("20 million"));
    s.stop().await;
}

/// A compressor that takes its time, so a build is still running when the server stops.
struct Slow;

impl strata::SubModel for Slow {
    fn identity(&self) -> String {
        "slow-test-model".into()
    }
    fn compress(
        &self,
        req: strata::model::CompressRequest,
    ) -> strata::model::BoxFuture<'_, Result<String, strata::model::ModelError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(strata::model::offline::compress(&req))
        })
    }
}

/// A compressor that says when its first call arrives and never answers: the build that
/// calls it is running until the server stops it.
struct Stuck(Arc<tokio::sync::Notify>);

impl strata::SubModel for Stuck {
    fn identity(&self) -> String {
        "slow-test-model".into()
    }
    fn compress(
        &self,
        _req: strata::model::CompressRequest,
    ) -> strata::model::BoxFuture<'_, Result<String, strata::model::ModelError>> {
        self.0.notify_one();
        Box::pin(std::future::pending())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_parks_a_running_job_and_the_restart_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.shutdown_grace_secs = 0;
    let called = Arc::new(tokio::sync::Notify::new());
    let engine = Engine::open(dir.path(), cfg.clone())
        .unwrap()
        .with_model(Arc::new(Stuck(called.clone())));
    let s = Server::start_engine(engine).await;
    let (code, v) = s
        .post(
            "/api/debates/d/turns",
            turn(1, "a", "The pier costs 9 million."),
        )
        .await;
    assert_eq!(code, 201);
    let id = v["job_id"].as_u64().unwrap();
    // Once the model is called, a worker has taken the job and is building: stop the
    // server mid-build.
    tokio::time::timeout(Duration::from_secs(60), called.notified())
        .await
        .expect("the job's build never called the model");
    assert_eq!(
        s.get(&format!("/api/jobs/{id}")).await.1["state"],
        "running"
    );
    s.stop().await;

    // The job was parked, not lost: the next server (same model) resumes and finishes it.
    let engine = Engine::open(dir.path(), cfg)
        .unwrap()
        .with_model(Arc::new(Slow));
    let s = Server::start_engine(engine).await;
    let job = s.wait_job(id).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["attempts"], 2, "{job}");
    s.stop().await;
}

// Regression: a document with source `x\0a.md` in scope `kb` replaced `a.md` in scope
// `kb\0x` (keys joined with a separator ids could hold); empty and 10 KB scope names were
// accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ids_are_refused_and_cannot_collide() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    let doc = |scope: &str, source: &str, text: &str| json!({"scope": scope, "source": source, "text": text});
    let (code, _) = s
        .post("/api/documents", doc("kb", "a.md", "The ferry is late."))
        .await;
    assert_eq!(code, 201);
    let long = "k".repeat(10_000);
    for body in [
        doc("kb", "x\0a.md", "collide"),
        doc("kb\0x", "a.md", "collide"),
        doc("", "a.md", "empty scope"),
        doc("   ", "a.md", "blank scope"),
        doc(&long, "a.md", "long scope"),
        doc("kb", "a\nb.md", "newline"),
        doc("kb", " a.md", "leading space"),
    ] {
        let (code, v) = s.post("/api/documents", body.clone()).await;
        assert_eq!(code, 400, "{body} {v}");
        let e = v["error"].as_str().unwrap();
        assert!(!e.contains('\n') && !e.contains('\0'), "{e:?}");
    }
    for path in [
        "/api/debates/a%00b/turns",
        "/api/debates/a%0Ab/turns",
        "/api/debates/%20x/turns",
    ] {
        let (code, v) = s.post(path, turn(1, "ana", "hello there")).await;
        assert_eq!(code, 400, "{path} {v}");
    }
    let (code, v) = s.get("/api/debates/a%00b/context/auto?budget=10").await;
    assert_eq!(code, 400, "{v}");
    // Nothing was replaced: kb holds a.md with its own text.
    let (_, st) = s.get("/api/debates/kb/refinement-status").await;
    assert_eq!(st["sources"], 1, "{st}");
    s.stop().await;
}
