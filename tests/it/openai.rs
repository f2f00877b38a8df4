//! The OpenAI-compatible path against an in-process mock server (axum on 127.0.0.1:0):
//! good output, malformed responses, unknown ids, empty strings, invented numbers, 429s
//! with `Retry-After`, 500s and hangs. Every case must end in a valid tree or answer, with
//! the retries it calls for and counters that say what happened. Timeouts and backoffs are
//! configured in milliseconds, so the whole module sleeps for well under a second.
//!
//! `real_model_end_to_end` runs the same invariants against a real model server when
//! `STRATA_LLM_BASE_URL` is set (see `scripts/local-llm.sh`).

use crate::support::*;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata::config::Price;
use strata::model::{CompressRequest, Passage, offline};
use strata::{BuildReport, Config, Engine, Level, NoProgress, QueryResult};

// ---------------------------------------------------------------- the mock server

/// What a request asks for, recognised from the prompt strata sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Detailed,
    Summary,
    Abstract,
    Intent,
    Action,
    Partition,
    /// A set answer's fan-out: which of the numbered passages answer.
    SetSupport,
    /// Code mode: the reply is a Rhai program.
    Code,
    /// A code-mode program's `llm_query` / `llm_batch`.
    Helper,
}

#[derive(Clone, Debug)]
struct Call {
    kind: Kind,
    user: String,
    /// The passages of a compression prompt.
    passages: Vec<String>,
    /// Earlier requests with the same prompt (0 on the first attempt).
    attempt: usize,
}

impl Call {
    fn has(&self, s: &str) -> bool {
        self.user.contains(s)
    }
}

enum Reply {
    Text(String),
    /// A reply cut off at the token limit (`finish_reason: length`).
    Cut(String),
    /// HTTP status with headers and body.
    Status(u16, Vec<(&'static str, String)>),
    /// A 200 whose body is not a chat completion.
    Raw(&'static str),
    /// Never answers (until the client gives up).
    Hang,
    /// Answers after a delay.
    Slow(Duration, Box<Reply>),
}

type Script = Box<dyn Fn(&Call) -> Reply + Send + Sync>;

struct Logged {
    at: Instant,
    kind: Kind,
    body: Value,
}

struct Mock {
    script: Mutex<Arc<Script>>,
    log: Mutex<Vec<Logged>>,
    seen: Mutex<HashMap<String, usize>>,
    in_flight: AtomicUsize,
    max_in_flight: Mutex<HashMap<&'static str, usize>>,
    hung: AtomicUsize,
    hung_dropped: Arc<AtomicUsize>,
    /// Told whenever `hung` or `hung_dropped` changes ([`wait_until`] waits on it).
    changed: Arc<tokio::sync::Notify>,
}

impl Mock {
    fn set(&self, script: impl Fn(&Call) -> Reply + Send + Sync + 'static) {
        *self.script.lock().unwrap() = Arc::new(Box::new(script));
    }
    fn requests(&self, kind: Kind) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.kind == kind)
            .count()
    }
    fn total(&self) -> usize {
        self.log.lock().unwrap().len()
    }
}

fn kind_of(body: &Value) -> (Kind, String) {
    let msgs = body["messages"].as_array().expect("messages");
    let system = msgs[0]["content"].as_str().unwrap_or("").to_string();
    let user = msgs[1]["content"].as_str().unwrap_or("").to_string();
    let schema = body["response_format"]["json_schema"]["name"].as_str();
    let kind = match schema {
        Some("intent") => Kind::Intent,
        Some("action") => Kind::Action,
        Some("set_support") => Kind::SetSupport,
        _ if system.starts_with("You read one passage") => Kind::Partition,
        _ if system.contains("writing one program") => Kind::Code,
        _ if system.starts_with("You are a helper inside a program") => Kind::Helper,
        _ if user.starts_with("Rewrite the passage") => Kind::Detailed,
        _ if user.starts_with("Summarise the passages") => Kind::Summary,
        _ if user.starts_with("The passages below summarise") => Kind::Abstract,
        _ => panic!("unrecognised request: {system} / {user}"),
    };
    (kind, user)
}

fn passages(user: &str) -> Vec<String> {
    user.split("<passage")
        .skip(1)
        .filter_map(|p| {
            let body = p.split_once(">\n")?.1;
            Some(body.split("\n</passage>").next()?.to_string())
        })
        .collect()
}

struct HangGuard(Arc<AtomicUsize>, Arc<tokio::sync::Notify>);
impl Drop for HangGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1.notify_waiters();
    }
}

fn completion(text: &str) -> Value {
    json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": "mock",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    })
}

async fn respond(mock: &Mock, reply: Reply) -> Response {
    match reply {
        Reply::Text(t) => axum::Json(completion(&t)).into_response(),
        Reply::Cut(t) => {
            let mut c = completion(&t);
            c["choices"][0]["finish_reason"] = json!("length");
            axum::Json(c).into_response()
        }
        Reply::Status(code, headers) => {
            let mut h = HeaderMap::new();
            for (k, v) in headers {
                h.insert(k, v.parse().unwrap());
            }
            let status = StatusCode::from_u16(code).unwrap();
            let body = json!({"error": {"message": "mock says no", "type": "mock"}});
            (status, h, axum::Json(body)).into_response()
        }
        Reply::Raw(body) => {
            (StatusCode::OK, [("content-type", "application/json")], body).into_response()
        }
        Reply::Hang => {
            mock.hung.fetch_add(1, Ordering::SeqCst);
            mock.changed.notify_waiters();
            let _guard = HangGuard(mock.hung_dropped.clone(), mock.changed.clone());
            std::future::pending::<()>().await;
            unreachable!()
        }
        Reply::Slow(d, r) => {
            tokio::time::sleep(d).await;
            Box::pin(respond(mock, *r)).await
        }
    }
}

async fn chat(State(mock): State<Arc<Mock>>, axum::Json(body): axum::Json<Value>) -> Response {
    let (kind, user) = kind_of(&body);
    let attempt = {
        let key = body["messages"].to_string();
        let mut seen = mock.seen.lock().unwrap();
        let n = seen.entry(key).or_insert(0);
        *n += 1;
        *n - 1
    };
    mock.log.lock().unwrap().push(Logged {
        at: Instant::now(),
        kind,
        body: body.clone(),
    });
    let call = Call {
        kind,
        passages: passages(&user),
        user,
        attempt,
    };
    let script = mock.script.lock().unwrap().clone();
    let reply = script(&call);
    let now = mock.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    {
        let mut m = mock.max_in_flight.lock().unwrap();
        let name = match kind {
            Kind::Partition => "partition",
            Kind::SetSupport => "set_support",
            Kind::Helper => "helper",
            _ => "other",
        };
        let e = m.entry(name).or_insert(0);
        *e = (*e).max(now);
    }
    struct Leave<'a>(&'a AtomicUsize);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _leave = Leave(&mock.in_flight);
    respond(&mock, reply).await
}

/// Starts the mock on 127.0.0.1:0 inside `rt`; returns it and its `/v1` base URL.
fn serve(rt: &tokio::runtime::Runtime) -> (Arc<Mock>, String) {
    let mock = Arc::new(Mock {
        script: Mutex::new(Arc::new(Box::new(good))),
        log: Mutex::default(),
        seen: Mutex::default(),
        in_flight: AtomicUsize::new(0),
        max_in_flight: Mutex::default(),
        hung: AtomicUsize::new(0),
        hung_dropped: Arc::default(),
        changed: Arc::default(),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(mock.clone());
    (mock, serve_mock(rt, app))
}

/// A well-behaved model: the first sentence of each passage, within the word budget
/// the prompt asks for.
fn good(c: &Call) -> Reply {
    match c.kind {
        Kind::Detailed | Kind::Summary | Kind::Abstract => Reply::Text(extract(c)),
        Kind::Partition | Kind::Helper => Reply::Text("not mentioned".into()),
        Kind::Intent | Kind::Action | Kind::SetSupport | Kind::Code => {
            panic!("no navigation script")
        }
    }
}

fn extract(c: &Call) -> String {
    let words: usize = c
        .user
        .split("at most ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let firsts: Vec<&str> = c
        .passages
        .iter()
        .map(|p| p.split_inclusive(". ").next().unwrap_or(p).trim())
        .collect();
    let all = firsts.join(" ");
    all.split_whitespace()
        .take(words)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------- fixtures

/// Two rounds of three turns, with numbers, dates and names to keep.
const DEBATE: &str = r#"{"round": 1, "speaker": "alice", "text": "The Eastgate line should be built first. In Eastgate 41% of households do not own a car, and buses there take 52 minutes to reach the centre. A rail line would cut that to 19 minutes."}
{"round": 1, "speaker": "bob", "text": "The 2029 audit put the cost at $1.57 billion, far above the original estimate. I doubt the ridership forecast of 38,000 daily riders holds up. We should upgrade the buses instead."}
{"round": 1, "speaker": "chen", "text": "Both of you have a point. Bus upgrades are cheaper, but they do not fix the river crossing. The bridge has been at capacity since March 2031."}
{"round": 2, "speaker": "alice", "text": "Bob is right that the cost is high. Still, federal grants could cover 40% of it, which brings the local share under $1 billion. POISON_NUM The council should apply this year."}
{"round": 2, "speaker": "bob", "text": "I accept the grant figures from Dana Whitfield at the transit office. POISON_EMPTY My concern is operating cost, which the audit put at $61 million a year."}
{"round": 2, "speaker": "chen", "text": "I now support the Eastgate line, provided the operating plan is published first. POISON_LONG Without it the council cannot judge the $61 million figure."}
"#;

fn debate_file(dir: &std::path::Path) -> PathBuf {
    write(dir, "debate.jsonl", DEBATE)
}

fn cfg(url: &str) -> Config {
    let mut c = Config::default();
    c.model.sub = "openai:mock-sub".into();
    c.model.base_url = url.into();
    c.model.api_key_env = "STRATA_TEST_NO_SUCH_KEY".into();
    c.model.timeout_ms = 5_000;
    c.model.retries = 2;
    c.model.backoff_ms = 1;
    c.model.backoff_max_ms = 20;
    c.build.retries = 1;
    for m in ["mock-sub", "mock-root"] {
        c.prices.0.insert(
            m.into(),
            Price {
                prompt: 1.0,
                completion: 2.0,
            },
        );
    }
    c
}

fn engine(cfg: Config, dir: &std::path::Path) -> Engine {
    let e = Engine::in_memory(cfg).unwrap();
    e.ingest_files("d", None, &[debate_file(dir)], T0).unwrap();
    e
}

fn build(rt: &tokio::runtime::Runtime, e: &Engine) -> BuildReport {
    rt.block_on(e.compress("d", T0, &NoProgress)).unwrap()
}

/// The tree invariants every sub-model must leave behind: every node of the plan is
/// live, derived text is non-empty and within reach of its budget (or is the offline
/// compressor's), and citations resolve to source text.
fn check_tree(e: &Engine, scope: &str) {
    let plan = e.plan(scope).unwrap();
    for id in plan.all_ids() {
        let n = e.node(&id, T0).unwrap();
        assert!(!n.text.trim().is_empty(), "{:?} {id} is empty", n.level);
        assert_eq!(n.tokens as usize, strata::token::count(&n.text));
        for s in &n.citations {
            let t = e.source_text(scope, &s.source).unwrap();
            assert!(s.start < s.end && s.end as usize <= t.len());
        }
    }
    let cfg = e.config();
    for c in &plan.chunks {
        let d = e.node(&c.detailed, T0).unwrap();
        let target = (c.tokens as f64 * cfg.levels.detailed_ratio).ceil() as usize;
        assert!(
            (d.tokens as usize) <= target + target / 2 + 16 || is_offline_output(e, c),
            "DETAILED over budget: {}",
            d.text
        );
    }
}

/// Whether a chunk's DETAILED node is what the offline compressor makes for it (the
/// fallback: its output may keep one sentence over budget rather than cut it).
fn is_offline_output(e: &Engine, c: &strata::plan::PlannedChunk) -> bool {
    e.node(&c.detailed, T0).unwrap().text == offline_detailed(e, c)
}

fn offline_detailed(e: &Engine, c: &strata::plan::PlannedChunk) -> String {
    let plan = e.plan("d").unwrap();
    let ci = plan.chunks.iter().position(|x| x.full == c.full).unwrap();
    let full = e.node(&c.full, T0).unwrap();
    let target = (full.tokens as f64 * e.config().levels.detailed_ratio).ceil() as usize;
    offline::compress(&CompressRequest {
        level: Level::Detailed,
        passages: vec![Passage {
            text: full.text.clone(),
            label: plan.chunk_label(ci),
        }],
        target_tokens: target.max(1),
        inputs: Default::default(),
        feedback: None,
        priority: Level::Detailed.as_u8(),
    })
}

fn chunk_with<'a>(
    plan: &'a strata::plan::Plan,
    e: &Engine,
    s: &str,
) -> &'a strata::plan::PlannedChunk {
    plan.chunks
        .iter()
        .find(|c| e.node(&c.full, T0).unwrap().text.contains(s))
        .unwrap()
}

// ---------------------------------------------------------------- compression

#[test]
fn good_model_builds_a_valid_tree_and_reports_usage() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let dir = tempfile::tempdir().unwrap();
    let e = engine(cfg(&url), dir.path());
    let r = build(&rt, &e);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(
        (r.model_calls, r.fallbacks),
        (9, 0),
        "6 DETAILED, 2 SUMMARY, 1 ABSTRACT"
    );
    assert_eq!(
        (r.empty, r.over_budget, r.unfaithful, r.model_errors),
        (0, 0, 0, 0)
    );
    let u = &r.usage.by_model["mock-sub"];
    assert_eq!((u.calls, u.requests, u.retries, u.failed), (9, 9, 0, 0));
    assert_eq!((u.prompt_tokens, u.completion_tokens), (900, 90));
    assert!((r.usage.cost_usd - (900.0 * 1.0 + 90.0 * 2.0) / 1e6).abs() < 1e-12);
    assert_eq!(r.usage.calls, 9);
    check_tree(&e, "d");

    // The nodes hold the model's text, and prompts carry who spoke in which round.
    let plan = e.plan("d").unwrap();
    let c = chunk_with(&plan, &e, "The 2029 audit");
    assert_eq!(
        e.node(&c.detailed, T0).unwrap().text,
        "The 2029 audit put the cost at $1.57 billion, far above the original estimate."
    );
    let log = mock.log.lock().unwrap();
    let first = &log.iter().find(|l| l.kind == Kind::Detailed).unwrap().body;
    assert_eq!(first["model"], "mock-sub");
    assert_eq!(first["temperature"], 0.0);
    assert_eq!(first["seed"], 42);
    assert!(first["max_tokens"].as_u64().unwrap() > 0);
    let summaries: Vec<&str> = log
        .iter()
        .filter(|l| l.kind == Kind::Summary)
        .map(|l| l.body["messages"][1]["content"].as_str().unwrap())
        .collect();
    assert!(
        summaries
            .iter()
            .any(|s| s.contains("<passage label=\"bob (round 1)\">")),
        "{summaries:?}"
    );
    drop(log);

    // Same model, same prompts: everything is a cache hit.
    let again = build(&rt, &e);
    assert_eq!((again.model_calls, again.nodes_built), (0, 0));
    assert_eq!(mock.total(), 9);

    // The identity names the model and the prompt version: another model is another tree.
    assert!(e.model_identity().contains("mock-sub") && e.model_identity().contains("prompts-v"));
    let mut other = cfg(&url);
    other.model.sub = "openai:mock-other".into();
    let e2 = engine(other, dir.path());
    assert_ne!(e2.plan("d").unwrap().abstract_id, plan.abstract_id);
}

#[test]
fn unfaithful_empty_and_overlong_outputs_are_retried_then_replaced() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| match c.kind {
        Kind::Detailed if c.has("POISON_NUM") => {
            Reply::Text("Alice said grants cover 75% of the $9.9 billion cost.".into())
        }
        Kind::Detailed if c.has("POISON_EMPTY") => Reply::Text("   ".into()),
        Kind::Detailed if c.has("POISON_LONG") => Reply::Text(c.passages[0].repeat(6)),
        _ => good(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(cfg(&url), dir.path());
    let r = build(&rt, &e);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    // Each bad output is tried twice (build.retries = 1), then replaced.
    assert_eq!((r.unfaithful, r.empty, r.over_budget), (2, 2, 2));
    assert_eq!((r.fallbacks, r.model_errors), (3, 0));
    assert_eq!(r.model_calls, 9 + 3);
    assert_eq!((r.usage.invalid_outputs, r.usage.fallbacks), (6, 3));
    check_tree(&e, "d");
    let plan = e.plan("d").unwrap();
    for poison in ["POISON_NUM", "POISON_EMPTY", "POISON_LONG"] {
        let c = chunk_with(&plan, &e, poison);
        let d = e.node(&c.detailed, T0).unwrap();
        assert_eq!(d.text, offline_detailed(&e, c), "{poison}");
        assert!(!d.text.contains("9.9 billion"));
    }
    // The honest chunks kept the model's text.
    let c = chunk_with(&plan, &e, "The 2029 audit");
    assert!(!is_offline_output(&e, c));
}

#[test]
fn server_errors_rate_limits_and_malformed_responses_are_retried() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| {
        if c.kind == Kind::Detailed && c.has("POISON_NUM") {
            return Reply::Status(500, vec![]);
        }
        if c.kind == Kind::Detailed && c.has("POISON_EMPTY") {
            return Reply::Raw("{\"id\": \"x\", \"choices\": [");
        }
        match c.attempt {
            0 => Reply::Status(503, vec![]),
            1 => Reply::Status(429, vec![("retry-after-ms", "5".into())]),
            _ => good(c),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(cfg(&url), dir.path());
    let r = build(&rt, &e);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    check_tree(&e, "d");
    // 500 forever: 3 requests per call (model.retries = 2), 2 calls (build.retries = 1).
    // A body that is no chat completion is not retried by the client, only by the build.
    assert_eq!((r.model_errors, r.fallbacks), (4, 2));
    let u = &r.usage.by_model["mock-sub"];
    // 7 healthy calls: 503, 429, then success.
    assert_eq!(u.calls, 7 + 2 + 2);
    assert_eq!(u.requests, 7 * 3 + 2 * 3 + 2);
    assert_eq!(u.rate_limited, 7);
    assert_eq!(u.server_errors, 7 + 6);
    assert_eq!(u.retries, 7 * 2 + 2 * 2);
    assert_eq!(u.failed, 4);
    assert_eq!(mock.total() as u64, u.requests);
    let plan = e.plan("d").unwrap();
    for poison in ["POISON_NUM", "POISON_EMPTY"] {
        let c = chunk_with(&plan, &e, poison);
        assert_eq!(
            e.node(&c.detailed, T0).unwrap().text,
            offline_detailed(&e, c)
        );
    }
}

#[test]
fn a_429_makes_every_caller_back_off_together() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let first = AtomicUsize::new(0);
    mock.set(move |c| {
        if first.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::Status(
                429,
                vec![
                    ("retry-after", "30".into()),
                    ("retry-after-ms", "150".into()),
                ],
            );
        }
        Reply::Slow(Duration::from_millis(5), Box::new(good(c)))
    });
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(&url);
    c.model.backoff_max_ms = 1_000;
    let e = engine(c, dir.path());
    let t0 = Instant::now();
    let r = build(&rt, &e);
    assert!(r.failures.is_empty() && r.fallbacks == 0, "{r:?}");
    assert_eq!(r.usage.by_model["mock-sub"].rate_limited, 1);
    // `retry-after-ms` wins over `Retry-After` (30 s would stall the test).
    assert!(t0.elapsed() < Duration::from_secs(5));
    let log = mock.log.lock().unwrap();
    let limited_at = log[0].at;
    // Requests already on the wire arrive at once; after that nobody sends until the
    // pause is over — not only the caller that got the 429.
    let late: Vec<Duration> = log[1..]
        .iter()
        .map(|l| l.at.duration_since(limited_at))
        .filter(|d| *d > Duration::from_millis(40))
        .collect();
    assert!(
        late.len() >= 2,
        "the retry and the SUMMARY calls come later: {late:?}"
    );
    for d in &late {
        assert!(
            *d >= Duration::from_millis(145),
            "sent during the pause: {late:?}"
        );
    }
}

#[test]
fn hung_requests_time_out_are_retried_and_dropped() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| {
        if c.kind == Kind::Detailed && c.has("POISON_NUM") {
            return Reply::Hang;
        }
        if c.kind == Kind::Detailed && c.has("POISON_LONG") && c.attempt == 0 {
            return Reply::Hang;
        }
        good(c)
    });
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(&url);
    c.model.timeout_ms = 60;
    c.model.retries = 1;
    let e = engine(c, dir.path());
    let r = build(&rt, &e);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    check_tree(&e, "d");
    let u = &r.usage.by_model["mock-sub"];
    // POISON_LONG: one timeout, then an answer. POISON_NUM: 2 attempts × 2 build tries.
    assert_eq!(u.timeouts, 1 + 4);
    assert_eq!((r.model_errors, r.fallbacks), (2, 1));
    // The client hung up on every hung request: the server saw each one dropped.
    wait_until(&rt, &mock, || mock.hung_dropped.load(Ordering::SeqCst) == 5);
    assert_eq!(mock.hung.load(Ordering::SeqCst), 5);
}

/// Waits (at most 5 s) until `ok` holds, checking again whenever the mock's counters
/// change (the server notices closed connections on its own schedule).
fn wait_until(rt: &tokio::runtime::Runtime, mock: &Mock, ok: impl Fn() -> bool) {
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                // Registered before the check: a change between the check and the wait
                // still wakes it.
                let changed = mock.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if ok() {
                    return;
                }
                changed.await;
            }
        })
        .await
        .expect("condition never held")
    })
}

#[test]
fn dropping_a_build_cancels_its_outstanding_calls() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|_| Reply::Hang);
    let dir = tempfile::tempdir().unwrap();
    let e = engine(cfg(&url), dir.path());
    let r = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(100), e.compress("d", T0, &NoProgress)).await
    });
    assert!(r.is_err(), "the build cannot finish against a hung server");
    // The dropped build let go of its permits and its connections.
    assert_eq!(e.limiter().in_flight(), 0);
    wait_until(&rt, &mock, || {
        let hung = mock.hung.load(Ordering::SeqCst);
        hung == 6 && mock.hung_dropped.load(Ordering::SeqCst) == hung
    });
    // Nothing half-made was stored; a later build against a healthy server completes.
    let plan = e.plan("d").unwrap();
    assert!(plan.chunks.iter().all(|c| e.node(&c.detailed, T0).is_err()));
    mock.set(good);
    let r = build(&rt, &e);
    assert!(r.failures.is_empty() && r.fallbacks == 0);
    check_tree(&e, "d");
}

/// The DETAILED, SUMMARY and ABSTRACT ids of a plan (the nodes a model makes).
fn model_made(plan: &strata::plan::Plan) -> Vec<strata::NodeId> {
    let mut ids: Vec<_> = plan.chunks.iter().map(|c| c.detailed).collect();
    ids.extend(plan.groups.iter().map(|g| g.summary));
    ids.push(plan.abstract_id);
    ids
}

/// Issue 9: a node the fallback made during an outage was stored under the model's id,
/// so it was never made again once the model was back (until its TTL; never with
/// `ttl_secs = 0`).
#[test]
fn nodes_made_during_an_outage_are_retried_when_the_model_is_back() {
    use strata::node::FallbackMark;
    for ttl in [3600, 0] {
        let rt = rt();
        let (mock, url) = serve(&rt);
        mock.set(|_| Reply::Status(500, vec![]));
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut c = cfg(&url);
        c.store.ttl_secs = ttl;
        let e = Engine::open(&db, c.clone()).unwrap();
        e.ingest_files("d", None, &[debate_file(dir.path())], T0)
            .unwrap();
        let r = build(&rt, &e);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        // 6 DETAILED, 2 SUMMARY, 1 ABSTRACT: every one made by the fallback, and marked.
        assert_eq!((r.fallbacks, r.model_errors), (9, 18), "ttl {ttl}");
        assert_eq!(
            (
                r.fallback_nodes,
                r.fallback_awaiting_model,
                r.fallback_retried
            ),
            (9, 9, 0)
        );
        let plan = e.plan("d").unwrap();
        for id in model_made(&plan) {
            assert_eq!(
                e.store().fallback_mark(&id).unwrap(),
                Some(FallbackMark::ModelUnavailable)
            );
        }
        // METADATA is made from the FULL text, never by a model: not marked.
        for id in plan.metadata().values() {
            assert_eq!(e.store().fallback_mark(id).unwrap(), None);
        }
        let s = e.stats(T0).unwrap();
        assert_eq!((s.fallbacks.nodes, s.fallbacks.awaiting_model), (9, 9));

        // Still down: tried again, made by the fallback again, still marked.
        let r = build(&rt, &e);
        assert_eq!((r.fallback_retried, r.fallbacks, r.nodes_built), (9, 9, 9));
        assert_eq!(r.fallback_awaiting_model, 9);
        drop(e);

        // The model is back (after a restart: the marks are durable). Exactly the marked
        // nodes are made again, one call each, and their marks are cleared.
        mock.set(good);
        let e = Engine::open(&db, c).unwrap();
        let before = mock.total();
        let r = build(&rt, &e);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(mock.total() - before, 9, "ttl {ttl}");
        assert_eq!(
            (
                r.model_calls,
                r.fallback_retried,
                r.nodes_built,
                r.fallbacks
            ),
            (9, 9, 9, 0)
        );
        assert_eq!((r.fallback_nodes, r.fallback_awaiting_model), (0, 0));
        assert!(!e.store().has_fallback_marks());
        assert_eq!(e.stats(T0).unwrap().fallbacks.nodes, 0);
        check_tree(&e, "d");
        let c = chunk_with(&plan, &e, "The 2029 audit");
        assert_eq!(
            e.node(&c.detailed, T0).unwrap().text,
            "The 2029 audit put the cost at $1.57 billion, far above the original estimate."
        );
        // The index serves the model's text, not the fallback's.
        let hits = futures::executor::block_on(e.grep(
            &["d".into()],
            "far above the original estimate",
            &[Level::Detailed],
            3,
            T0,
        ))
        .unwrap();
        assert_eq!(
            hits.first().map(|h| h.id.clone()),
            Some(c.detailed.to_hex())
        );

        // Nothing is marked any more: all cache hits.
        let r = build(&rt, &e);
        assert_eq!(
            (r.model_calls, r.nodes_built, r.fallback_retried),
            (0, 0, 0)
        );
        assert_eq!(mock.total() - before, 9);
    }
}

/// Only what the outage touched is made again: the node the model did not answer for,
/// and the SUMMARY and ABSTRACT built over it. An output the model did return but that
/// was rejected stays marked with its reason and is not retried (at temperature 0 the
/// model would say the same).
#[test]
fn only_the_path_over_an_outage_is_retried() {
    use strata::node::FallbackMark;
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| match c.kind {
        Kind::Detailed if c.has("POISON_NUM") => Reply::Status(503, vec![]),
        Kind::Detailed if c.has("POISON_EMPTY") => Reply::Text("   ".into()),
        _ => good(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(cfg(&url), dir.path());
    let r = build(&rt, &e);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!((r.fallbacks, r.empty, r.model_errors), (2, 2, 2));
    let plan = e.plan("d").unwrap();
    let mark = |id: &strata::NodeId| e.store().fallback_mark(id).unwrap();
    let num = chunk_with(&plan, &e, "POISON_NUM").detailed;
    let empty = chunk_with(&plan, &e, "POISON_EMPTY").detailed;
    let round2 = plan
        .groups
        .iter()
        .find(|g| g.chunks.iter().any(|&ci| plan.chunks[ci].detailed == num))
        .unwrap()
        .summary;
    assert_eq!(mark(&num), Some(FallbackMark::ModelUnavailable));
    assert_eq!(mark(&empty), Some(FallbackMark::Empty));
    assert_eq!(mark(&round2), Some(FallbackMark::BuiltOverFallback));
    assert_eq!(
        mark(&plan.abstract_id),
        Some(FallbackMark::BuiltOverFallback)
    );
    let unmarked = model_made(&plan)
        .into_iter()
        .filter(|id| mark(id).is_none())
        .count();
    assert_eq!(unmarked, 9 - 4);
    assert_eq!((r.fallback_nodes, r.fallback_awaiting_model), (4, 3));

    // The server recovers (the empty answer is what the model says, every time).
    mock.set(|c| match c.kind {
        Kind::Detailed if c.has("POISON_EMPTY") => Reply::Text("   ".into()),
        _ => good(c),
    });
    let calls = |k| mock.requests(k);
    let before = [
        calls(Kind::Detailed),
        calls(Kind::Summary),
        calls(Kind::Abstract),
    ];
    let r = build(&rt, &e);
    let after = [
        calls(Kind::Detailed),
        calls(Kind::Summary),
        calls(Kind::Abstract),
    ];
    assert_eq!(
        [
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ],
        [1, 1, 1],
        "the POISON_NUM DETAILED, its round's SUMMARY and the ABSTRACT"
    );
    assert_eq!(
        (r.model_calls, r.fallback_retried, r.nodes_built),
        (3, 3, 3)
    );
    assert_eq!((r.fallback_nodes, r.fallback_awaiting_model), (1, 0));
    assert_eq!(mark(&num), None);
    assert_eq!(
        mark(&round2),
        None,
        "built over a rejected output: not retried"
    );
    assert_eq!(mark(&plan.abstract_id), None);
    assert_eq!(mark(&empty), Some(FallbackMark::Empty));
    check_tree(&e, "d");

    let r = build(&rt, &e);
    assert_eq!((r.model_calls, r.nodes_built), (0, 0));
    assert_eq!((r.fallback_nodes, r.fallback_awaiting_model), (1, 0));
}

// ---------------------------------------------------------------- navigation

fn nav_cfg(url: &str) -> Config {
    let mut c = cfg(url);
    c.model.sub = "offline".into();
    c.model.root = "openai:mock-root".into();
    c
}

fn query(rt: &tokio::runtime::Runtime, e: &Engine, q: &str) -> QueryResult {
    let r = rt
        .block_on(e.query(&strata::Ask::new(&["d".to_string()], q, T0)))
        .unwrap();
    check_citations(e, &r);
    r
}

fn action(v: Value) -> Reply {
    let mut base = json!({
        "hypothesis": "", "learned": "", "ids": [], "pattern": "", "level": "full",
        "instruction": "", "quotes": [], "confidence": 0.0, "ready": false
    });
    for (k, x) in v.as_object().unwrap() {
        base[k] = x.clone();
    }
    Reply::Text(base.to_string())
}

/// The working-set lines of a navigation prompt: (handle, level, rest of the line).
fn listed(user: &str) -> Vec<(String, String, String)> {
    let ws = user.split("Working set (").nth(1).unwrap_or("");
    ws.lines()
        .skip(1)
        .filter_map(|l| {
            let (h, rest) = l.split_once(" [")?;
            let (lvl, rest) = rest.split_once("] ")?;
            h.starts_with('n')
                .then(|| (h.to_string(), lvl.to_string(), rest.to_string()))
        })
        .collect()
}

/// The text after "Last result:" and before the working set.
fn last_result(user: &str) -> &str {
    let r = user.split("Last result:\n").nth(1).unwrap_or("");
    r.split("\nWorking set (").next().unwrap_or(r)
}

/// A root model that explores like a sensible one: abstract → groups → grep → peek →
/// finish, quoting the sentence that holds `needle`.
fn explorer(needle: &'static str, grep: &'static str) -> impl Fn(&Call) -> Reply {
    move |c: &Call| match c.kind {
        Kind::Intent => Reply::Text(
            json!({"entity": "Eastgate", "attribute": "households without a car",
                   "output_type": "number", "keywords": ["Eastgate", "car", "households"]})
            .to_string(),
        ),
        Kind::Action => {
            let ws = listed(&c.user);
            let last = last_result(&c.user);
            if let Some(q) = quote_of(last, needle) {
                return action(json!({"action": "finish", "quotes": [q],
                    "hypothesis": "41% of Eastgate households have no car",
                    "confidence": 0.9, "ready": true}));
            }
            match ws[0].1.as_str() {
                "abstract" => action(json!({"action": "descend", "ids": [ws[0].0]})),
                "summary" => action(json!({"action": "grep", "pattern": grep, "level": "full"})),
                _ => action(json!({"action": "peek",
                    "ids": ws.iter().take(2).map(|w| w.0.clone()).collect::<Vec<_>>()})),
            }
        }
        _ => good(c),
    }
}

/// From a peek observation ("n4 [full] alice round 1:\n<text>"), the FULL node's handle
/// and the sentence holding `needle`.
fn quote_of(obs: &str, needle: &str) -> Option<Value> {
    let mut handle = None;
    for line in obs.lines() {
        if let Some((h, rest)) = line.split_once(" [")
            && h.starts_with('n')
            && h[1..].chars().all(|c| c.is_ascii_digit())
        {
            handle = rest.starts_with("full]").then(|| h.to_string());
            continue;
        }
        if line.contains(needle) {
            let s = line
                .split_inclusive(". ")
                .find(|s| s.contains(needle))?
                .trim();
            return Some(json!({"id": handle?, "quote": s}));
        }
    }
    None
}

#[test]
fn llm_navigator_descends_greps_peeks_and_cites_exact_spans() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(explorer("41%", "Eastgate households car"));
    let dir = tempfile::tempdir().unwrap();
    let e = engine(nav_cfg(&url), dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert!(r.ready, "{r:#?}");
    assert_eq!(r.citations.len(), 1);
    assert_eq!(
        r.citations[0].quote,
        "In Eastgate 41% of households do not own a car, and buses there take 52 minutes to reach the centre."
    );
    assert_eq!(r.citations[0].speaker.as_deref(), Some("alice"));
    assert_eq!(r.answer, r.citations[0].quote);
    let actions: Vec<&str> = r.trajectory.iter().map(|s| s.action.as_str()).collect();
    for a in ["intent", "descend", "grep", "peek", "finish"] {
        assert!(actions.contains(&a), "{a} missing from {actions:?}");
    }
    assert!(!actions.contains(&"invalid") && !actions.contains(&"fallback"));
    let u = &r.usage.by_model["mock-root"];
    // intent + descend + grep + peek + finish
    assert_eq!((u.calls, u.requests), (5, 5));
    assert_eq!(r.usage.prompt_tokens, 500);
    assert_eq!((r.usage.invalid_outputs, r.usage.fallbacks), (0, 0));
    assert!(r.usage.cost_usd > 0.0);
    assert_eq!(mock.requests(Kind::Action), 4);
    // The working set narrowed: the abstract, 2 groups, then grep hits.
    assert!(r.iterations >= 3 && r.tokens_processed > 0);
    // The LLM policy's whole trajectory against this scripted root.
    let render = |r: &QueryResult| stable(&render(r), dir.path());
    expect_test::expect![[r#"
        policy: root model openai:mock-root, prompts nav-v3
        intent: entity "Eastgate", attribute "households without a car", output number, keywords Eastgate, car, households
        peek: 1 abstract node(s), 22 tokens
        descend: 1 node(s) → 2 child node(s)
        rank: 2 node(s) by "What share of Eastgate households do not own a car? Eastgate car households": 1 hit(s)
        grep: "Eastgate households car" at full within the working set: 2 hit(s)
        peek: 2 full node(s), 77 tokens
        check: offline evidence: 3 citation(s), confidence 0.77, 100 % of the question's term weight, gives a number
        check: answer: 72 % of the question's term weight, gives a number; cites what the offline policy cites: accepted
        finish-llm: 1 verified citation(s)
        finish: 1 citation(s), confidence 0.90, ready true
        | iteration 1: descend into 1 node(s): working set 2
        | iteration 2: grep "Eastgate households car" at full: working set 2
        | iteration 3: peek 2 node(s): working set 2
        | answer (confidence 0.90): 41% of Eastgate households have no car
        = confidence 0.90, ready true, 1 citation(s)
        [41..141) <dir>/debate.jsonl#1 (round 1, alice): "In Eastgate 41% of households do not own a car, and buses there take 52 minutes to reach the centre."
    "#]].assert_eq(&render(&r));
}

/// A query's strategy is the LLM navigator's first step: `grep` searches the FULL nodes,
/// `peek` reads the first groups' SUMMARY, `partition_map` asks the helper about each
/// group, `hierarchical` reads the ABSTRACT.
#[test]
fn llm_navigator_starts_with_the_strategy_primitive() {
    use strata::config::Strategy;
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(explorer("41%", "Eastgate households car"));
    let dir = tempfile::tempdir().unwrap();
    let e = engine(nav_cfg(&url), dir.path());
    let q = "What share of Eastgate households do not own a car?";
    for (strategy, first, detail) in [
        (Strategy::Grep, "grep", "at full"),
        (Strategy::Peek, "peek", "abstract"),
        (Strategy::PartitionMap, "partition_map", "sub-call(s)"),
        (Strategy::Hierarchical, "peek", "abstract"),
    ] {
        let mut qcfg = e.config().query.clone();
        qcfg.strategy = strategy;
        let r = rt
            .block_on(e.query(&strata::Ask::new(&["d".to_string()], q, T0).settings(&qcfg)))
            .unwrap();
        check_citations(&e, &r);
        let steps: Vec<&strata::Step> = r
            .trajectory
            .iter()
            .filter(|s| !["policy", "intent", "descend", "rank"].contains(&s.action.as_str()))
            .collect();
        assert_eq!(steps[0].action, first, "{strategy}: {steps:?}");
        assert!(steps[0].detail.contains(detail), "{strategy}: {steps:?}");
        let actions: Vec<&str> = r.trajectory.iter().map(|s| s.action.as_str()).collect();
        assert!(!actions.contains(&"fallback"), "{strategy}: {actions:?}");
    }
}

/// The turn number of a navigation prompt ("Turn 3 of 10").
fn turn(user: &str) -> u32 {
    let t = user.rsplit("Turn ").next().unwrap_or("");
    t.split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn llm_navigator_rejects_malformed_replies_and_unknown_ids() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let sane = explorer("41%", "Eastgate households car");
    let good_quote: Mutex<Option<Value>> = Mutex::new(None);
    mock.set(move |c| {
        if c.kind != Kind::Action {
            return sane(c);
        }
        match turn(&c.user) {
            1 => return Reply::Text("{\"action\": \"descend\", \"ids\": [}".into()),
            3 => return action(json!({"action": "descend", "ids": ["n999", "deadbeefdeadbeef"]})),
            _ => {}
        }
        if let Some(q) = quote_of(last_result(&c.user), "41%") {
            // Remember the right quote, but first cite a node that does not exist and
            // misquote a real one.
            *good_quote.lock().unwrap() = Some(q);
            return action(json!({"action": "finish", "confidence": 0.9, "ready": true,
                "quotes": [{"id": "n77", "quote": "41% of households"},
                           {"id": "n1", "quote": "Nobody said this at all, ever."}]}));
        }
        if c.user.contains("Your answer was rejected") {
            let q = good_quote.lock().unwrap().clone().unwrap();
            return action(json!({"action": "finish", "quotes": [q], "confidence": 0.9,
                "ready": true}));
        }
        sane(c)
    });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = nav_cfg(&url);
    cfg.query.max_iterations = 10;
    let e = engine(cfg, dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert!(
        r.citations.iter().any(|c| c.quote.contains("41%")),
        "{r:#?}"
    );
    assert_eq!(r.usage.fallbacks, 0, "{:#?}", r.trajectory);
    assert_eq!(r.usage.invalid_outputs, 3);
    let invalid: Vec<&str> = r
        .trajectory
        .iter()
        .filter(|s| s.action == "invalid")
        .map(|s| s.detail.as_str())
        .collect();
    assert_eq!(invalid.len(), 3, "{invalid:?}");
    assert!(invalid[0].contains("malformed JSON"), "{invalid:?}");
    assert!(
        invalid[1].contains("n999") && invalid[1].contains("working set"),
        "{invalid:?}"
    );
    assert!(invalid[2].contains("unknown id \"n77\""), "{invalid:?}");
    assert!(invalid[2].contains("not found in n1"), "{invalid:?}");
}

#[test]
fn llm_navigator_accepts_a_verbatim_quote_under_the_wrong_id() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let sane = explorer("41%", "Eastgate households car");
    mock.set(move |c| {
        if c.kind == Kind::Action {
            let last = last_result(&c.user);
            if let Some(mut q) = quote_of(last, "41%") {
                // Name the other FULL node that was read.
                let right = q["id"].as_str().unwrap().to_string();
                let wrong = last
                    .lines()
                    .filter_map(|l| l.split_once(" [full]").map(|(h, _)| h.to_string()))
                    .find(|h| *h != right)
                    .unwrap();
                q["id"] = json!(wrong);
                return action(json!({"action": "finish", "quotes": [q], "confidence": 0.9,
                    "ready": true}));
            }
        }
        sane(c)
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(nav_cfg(&url), dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert_eq!(r.citations.len(), 1, "{r:#?}");
    assert!(r.citations[0].quote.contains("41%"));
    assert_eq!(r.citations[0].speaker.as_deref(), Some("alice"));
    assert_eq!((r.usage.fallbacks, r.usage.invalid_outputs), (0, 1));
    assert!(
        r.trajectory
            .iter()
            .any(|s| s.action == "invalid" && s.detail.contains("quote cited as")),
        "{:#?}",
        r.trajectory
    );
}

#[test]
fn llm_navigator_falls_back_to_the_offline_policy() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let dir = tempfile::tempdir().unwrap();
    let q = "What share of Eastgate households do not own a car?";
    let offline_answer = {
        let mut c = cfg(&url);
        c.model = Default::default();
        query(&rt, &engine(c, dir.path()), q)
    };
    assert!(offline_answer.answer.contains("41%"));

    // `query.strategy = "offline"` keeps a configured root model out of it.
    let e = engine(nav_cfg(&url), dir.path());
    let mut qcfg = e.config().query.clone();
    qcfg.strategy = strata::config::Strategy::Offline;
    let before = mock.total();
    let r = rt
        .block_on(e.query(&strata::Ask::new(&["d".to_string()], q, T0).settings(&qcfg)))
        .unwrap();
    assert_eq!(r.citations, offline_answer.citations);
    assert_eq!((r.usage.calls, mock.total()), (0, before));

    // The root model is down: after its retries the offline policy answers.
    mock.set(|c| match c.kind {
        Kind::Intent | Kind::Action => Reply::Status(500, vec![]),
        _ => good(c),
    });
    let e = engine(nav_cfg(&url), dir.path());
    let r = query(&rt, &e, q);
    assert_eq!(r.citations, offline_answer.citations);
    assert_eq!(r.usage.fallbacks, 1);
    let u = &r.usage.by_model["mock-root"];
    assert_eq!(
        (u.calls, u.requests, u.server_errors, u.failed),
        (1, 3, 3, 1)
    );
    assert_eq!(
        r.trajectory
            .iter()
            .filter(|s| s.action == "fallback")
            .count(),
        1
    );

    // The root model never says anything usable: turns run out, the offline policy answers.
    mock.set(|c| match c.kind {
        Kind::Intent => Reply::Text("I think the answer is about cars.".into()),
        Kind::Action => action(json!({"action": "finish", "ready": true, "confidence": 1.0,
            "quotes": [{"id": "n404", "quote": "made up"}]})),
        _ => good(c),
    });
    let r = query(&rt, &e, q);
    assert_eq!(r.citations, offline_answer.citations);
    assert_eq!(r.usage.fallbacks, 1);
    assert!(r.usage.invalid_outputs >= 3, "{}", r.usage.invalid_outputs);
    assert!(r.confidence <= 1.0 && r.iterations <= e.config().query.max_iterations * 2);
}

#[test]
fn partition_map_fans_out_and_answers_are_refined() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let sane = explorer("$61 million", "operating cost audit");
    let found: Mutex<Option<Value>> = Mutex::new(None);
    mock.set(move |c| match c.kind {
        Kind::Partition => Reply::Slow(
            Duration::from_millis(30),
            Box::new(Reply::Text(if c.has("$61 million") {
                "Bob put the operating cost at $61 million a year.".into()
            } else {
                "not mentioned".into()
            })),
        ),
        Kind::Action => {
            let ws = listed(&c.user);
            let last = last_result(&c.user);
            if ws[0].1 == "summary" && !last.starts_with("partition_map") {
                let ids: Vec<String> = ws.iter().map(|w| w.0.clone()).collect();
                return action(json!({"action": "partition_map", "ids": ids,
                    "instruction": "What operating cost is mentioned?"}));
            }
            if let Some(q) = quote_of(last, "$61 million") {
                // A first answer that is not ready...
                *found.lock().unwrap() = Some(q.clone());
                return action(json!({"action": "finish", "quotes": [q],
                    "hypothesis": "$61 million a year", "confidence": 0.4, "ready": false}));
            }
            if last.contains("not ready yet") {
                // ...confirmed after the feedback.
                let q = found.lock().unwrap().clone().unwrap();
                return action(json!({"action": "finish", "quotes": [q],
                    "hypothesis": "$61 million a year", "confidence": 0.9, "ready": true}));
            }
            sane(c)
        }
        _ => sane(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let mut c = nav_cfg(&url);
    c.model.sub = "openai:mock-sub".into();
    c.query.max_iterations = 10;
    let e = engine(c, dir.path());
    let r = query(&rt, &e, "What operating cost did the audit give?");
    assert!(
        r.citations.iter().any(|c| c.quote.contains("$61 million")),
        "{r:#?}"
    );
    assert!(r.ready, "{r:#?}");
    // Both groups went to the helper (the sub model) at once.
    assert_eq!(r.sub_calls_made, 2);
    assert_eq!(mock.requests(Kind::Partition), 2);
    assert_eq!(mock.max_in_flight.lock().unwrap()["partition"], 2);
    assert!(r.usage.by_model["mock-sub"].calls >= 2);
    assert!(
        r.refinement_history
            .iter()
            .any(|h| h.starts_with("refinement 1: not ready")),
        "{:#?}",
        r.refinement_history
    );
    let actions: Vec<&str> = r.trajectory.iter().map(|s| s.action.as_str()).collect();
    assert!(
        actions.contains(&"refine") && actions.contains(&"partition_map"),
        "{actions:?}"
    );
    assert_eq!(r.usage.fallbacks, 0);
}

/// A set question with a root model: the candidates go to the helper in one bounded
/// batch (`set_support`, a `partition_map` step), the root model is not asked, and every
/// passage the helper says answers is cited — verified source sentences. An invalid reply
/// keeps the offline decision; a helper that is down hands the question to the offline
/// policy (a counted fallback).
#[test]
fn a_set_question_fans_its_candidates_out_to_the_helper() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let dir = tempfile::tempdir().unwrap();
    let q = "Which speakers mentioned the $61 million operating cost?";
    // The offline navigator over the same (mock-compressed) tree.
    let offline_answer = query(&rt, &engine(cfg(&url), dir.path()), q);
    assert!(!offline_answer.citations.is_empty());
    // The helper answers: the passages that name the operating cost.
    mock.set(|c| match c.kind {
        Kind::SetSupport => {
            let n: Vec<usize> = c
                .user
                .split("<passage n=\"")
                .skip(1)
                .filter(|p| p.contains("operating cost"))
                .filter_map(|p| p.split('"').next()?.parse().ok())
                .collect();
            Reply::Text(json!({ "support": n }).to_string())
        }
        Kind::Intent | Kind::Action => panic!("the root model is not asked"),
        _ => good(c),
    });
    let mut c = nav_cfg(&url);
    c.model.sub = "openai:mock-sub".into();
    let e = engine(c, dir.path());
    let r = query(&rt, &e, q);
    assert!(
        !r.citations.is_empty()
            && r.citations
                .iter()
                .all(|c| c.quote.contains("operating cost")),
        "{r:#?}"
    );
    assert_eq!(r.citations[0].speaker.as_deref(), Some("bob"));
    assert_eq!((r.sub_calls_made, mock.requests(Kind::SetSupport)), (1, 1));
    assert_eq!(r.usage.fallbacks, 0);
    let step = r
        .trajectory
        .iter()
        .find(|s| s.action == "partition_map")
        .expect("a partition_map step");
    assert!(step.detail.contains("1 answer(s)"), "{}", step.detail);

    // Invalid replies: the batch keeps the offline decision.
    mock.set(|c| match c.kind {
        Kind::SetSupport => Reply::Text(r#"{"support": [99]}"#.into()),
        Kind::Intent | Kind::Action => panic!("the root model is not asked"),
        _ => good(c),
    });
    let r = query(&rt, &e, q);
    assert_eq!(r.citations, offline_answer.citations);
    assert!(r.usage.invalid_outputs >= 1);
    assert_eq!(r.usage.fallbacks, 0);

    // The helper is down: the offline policy answers.
    mock.set(|c| match c.kind {
        Kind::SetSupport => Reply::Status(500, vec![]),
        Kind::Intent | Kind::Action => panic!("the root model is not asked"),
        _ => good(c),
    });
    let r = query(&rt, &e, q);
    assert_eq!(r.citations, offline_answer.citations);
    assert_eq!(r.usage.fallbacks, 1);
}

// ---------------------------------------------------------------- the evidence check

/// Two addresses that open with the same salutation; one sentence of one of them holds a
/// catalogue identifier (the failure of issue 14, replayed in small).
const ADDRESSES: [(&str, &str); 2] = [
    (
        "1862-address.txt",
        "Fellow-Citizens of the Senate and House of Representatives:\n\n\
         Since your last annual assembling another year of health and bountiful harvests has \
         passed. The revenue from all sources exceeded the estimates of the Treasury.\n\n\
         The national observatory completed its survey of the southern sky this year. The \
         Harwell star chart is kept in the national archive under catalogue identifier \
         HX-4471-B. Copies have been sent to the observatories of friendly nations.\n\n\
         The Post-Office Department has been self-sustaining for the first time, and the \
         mails now reach every territory of the Union.\n",
    ),
    (
        "1870-address.txt",
        "Fellow-Citizens of the Senate and House of Representatives:\n\n\
         A year of peace and general prosperity has passed. The army has been reduced to \
         the number fixed by law, and the navy is employed in the protection of commerce.\n\n\
         The public debt has been reduced by the sale of gold, and the credit of the \
         nation stands higher than ever. Immigration continues at a rate that adds to our \
         strength.\n",
    ),
];
const SALUTATION: &str = "Fellow-Citizens of the Senate and House of Representatives:";
const CATALOGUE_Q: &str = "What is the catalogue identifier of the Harwell star chart?";

fn addresses(url: &str, dir: &std::path::Path) -> Engine {
    let mut c = nav_cfg(url);
    c.chunk.tokens = 40;
    c.query.max_iterations = 6;
    let e = Engine::in_memory(c).unwrap();
    let paths: Vec<PathBuf> = ADDRESSES
        .iter()
        .map(|(name, text)| write(dir, name, text))
        .collect();
    e.ingest_files("d", None, &paths, T0).unwrap();
    e
}

/// A root model that, like the 1.5B model of issue 14, descends once and then answers
/// with the salutation, ready; `cooperative`: after being sent back with the offline
/// evidence, it quotes the shown sentence that holds the identifier.
fn salutation_model(cooperative: bool) -> impl Fn(&Call) -> Reply {
    move |c: &Call| match c.kind {
        Kind::Intent => Reply::Text(
            json!({"entity": "Harwell star chart", "attribute": "catalogue identifier",
                   "output_type": "text", "keywords": ["Harwell", "star", "chart", "catalogue"]})
            .to_string(),
        ),
        Kind::Action => {
            let ws = listed(&c.user);
            let last = last_result(&c.user);
            if cooperative && last.contains("not accepted") {
                let line = last.lines().find(|l| l.contains("HX-4471-B")).unwrap();
                let handle = line.split(' ').next().unwrap();
                let quote = line.split_once(": \"").unwrap().1.trim_end_matches('"');
                return action(json!({"action": "finish",
                    "quotes": [{"id": handle, "quote": quote}],
                    "hypothesis": "HX-4471-B", "confidence": 0.9, "ready": true}));
            }
            if ws[0].1 == "abstract" {
                return action(json!({"action": "descend", "ids": [ws[0].0]}));
            }
            // n1 is the ABSTRACT: the quote is looked for in every chunk beneath it.
            action(json!({"action": "finish",
                "quotes": [{"id": "n1", "quote": SALUTATION}],
                "hypothesis": "the address opens with the salutation",
                "confidence": 0.9, "ready": true}))
        }
        _ => good(c),
    }
}

#[test]
fn an_answer_the_evidence_does_not_support_is_never_ready() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let dir = tempfile::tempdir().unwrap();
    let offline_answer = {
        let mut c = cfg(&url);
        c.model = Default::default();
        c.chunk.tokens = 40;
        let e = Engine::in_memory(c).unwrap();
        let paths: Vec<PathBuf> = ADDRESSES
            .iter()
            .map(|(name, text)| write(dir.path(), name, text))
            .collect();
        e.ingest_files("d", None, &paths, T0).unwrap();
        query(&rt, &e, CATALOGUE_Q)
    };
    assert!(
        offline_answer.answer.contains("HX-4471-B"),
        "{offline_answer:#?}"
    );

    // The model insists on the salutation: sent back once with the offline evidence, then
    // the offline answer is given, and the history says why.
    mock.set(salutation_model(false));
    let e = addresses(&url, dir.path());
    let r = query(&rt, &e, CATALOGUE_Q);
    assert!(
        r.citations
            .iter()
            .all(|c| !c.quote.contains("Fellow-Citizens")),
        "{r:#?}"
    );
    assert_eq!(r.citations, offline_answer.citations);
    assert!(r.answer.contains("HX-4471-B"));
    assert_eq!(r.usage.fallbacks, 1);
    let history = r.refinement_history.join("\n");
    assert!(
        history.contains(
            "refinement 1: not ready, the evidence check failed (the answer is not supported \
             by the evidence: it shares no name or key term with the question; the question \
             asks for an identifier and it gives none)"
        ),
        "{history}"
    );
    assert!(
        history.contains("not supported by the evidence")
            && history.contains("answered by the offline policy"),
        "{history}"
    );
    // intent, descend, finish (sent back), finish again (replaced).
    assert_eq!(mock.requests(Kind::Action), 3, "{}", render(&r));
    let checks = r.trajectory.iter().filter(|s| s.action == "check").count();
    assert_eq!(checks, 3, "{}", render(&r)); // the offline evidence + two answers
    // The second answer was shown the evidence: the prompt named the identifier's sentence.
    let log = mock.log.lock().unwrap();
    let prompts: Vec<String> = log
        .iter()
        .filter(|l| l.kind == Kind::Action)
        .map(|l| {
            l.body["messages"][1]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(prompts[2].contains("not accepted") && prompts[2].contains("HX-4471-B"));
    drop(log);

    // A model that takes the evidence it is shown: its own verified quote, ready.
    mock.set(salutation_model(true));
    let e = addresses(&url, dir.path());
    let r = query(&rt, &e, CATALOGUE_Q);
    assert!(r.ready, "{r:#?}");
    assert_eq!(r.usage.fallbacks, 0);
    assert_eq!(r.citations.len(), 1);
    assert!(r.citations[0].quote.contains("HX-4471-B"), "{r:#?}");
    assert!(
        r.refinement_history
            .iter()
            .any(|h| h.starts_with("refinement 1: not ready, the evidence check failed")),
        "{:#?}",
        r.refinement_history
    );
}

#[test]
fn a_quote_cited_against_the_abstract_is_found_in_any_of_its_chunks() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    // 90 one-paragraph chunks; the answer is in one of the last.
    let mut paragraphs: Vec<String> = (1..=90)
        .map(|i| format!("Report {i} of the harbour board covers routine dredging and moorings."))
        .collect();
    paragraphs[84] = "The Quillon bridge opened to traffic in 1931 after six years of work.".into();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "reports.txt", paragraphs.join("\n\n"));
    let mut c = nav_cfg(&url);
    c.chunk.tokens = 20;
    let e = Engine::in_memory(c).unwrap();
    e.ingest_files("d", None, &[path], T0).unwrap();
    assert!(e.plan("d").unwrap().chunks.len() > 64);
    mock.set(|c| match c.kind {
        Kind::Intent => Reply::Text(
            json!({"entity": "Quillon bridge", "attribute": "opening date",
                   "output_type": "date", "keywords": ["Quillon", "bridge", "opened"]})
            .to_string(),
        ),
        Kind::Action => action(json!({"action": "finish",
            "quotes": [{"id": "n1", "quote": "The Quillon bridge opened to traffic in 1931"}],
            "hypothesis": "1931", "confidence": 0.9, "ready": true})),
        _ => good(c),
    });
    let r = query(&rt, &e, "When did the Quillon bridge open?");
    assert_eq!(r.citations.len(), 1, "{}", render(&r));
    assert!(r.citations[0].quote.contains("1931"), "{}", render(&r));
    assert!(r.ready);
    assert_eq!((r.usage.fallbacks, r.usage.invalid_outputs), (0, 0));
}

#[test]
fn peeking_again_what_was_read_descends_instead() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let sane = explorer("41%", "Eastgate households car");
    mock.set(move |c| {
        if c.kind == Kind::Action && turn(&c.user) == 1 {
            // The ABSTRACT was shown before the first turn: n1 is read already.
            return action(json!({"action": "peek", "ids": ["n1"]}));
        }
        sane(c)
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(nav_cfg(&url), dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert!(
        r.ready && r.citations[0].quote.contains("41%"),
        "{}",
        render(&r)
    );
    let steps = render(&r);
    assert!(
        steps.contains("peek: n1 already read: descending instead"),
        "{steps}"
    );
    // The second prompt lists the groups: the descent happened.
    let log = mock.log.lock().unwrap();
    let second = log
        .iter()
        .filter(|l| l.kind == Kind::Action)
        .nth(1)
        .map(|l| {
            l.body["messages"][1]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .unwrap();
    assert!(second.contains("had already been read"), "{second}");
    assert_eq!(listed(&second)[0].1, "summary", "{second}");
}

#[test]
fn a_reply_cut_off_at_its_token_limit_keeps_its_complete_fields() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let sane = explorer("41%", "Eastgate households car");
    mock.set(move |c| {
        if c.kind == Kind::Action && turn(&c.user) == 1 {
            // What a small model does: the action, then a long quote it was not asked for,
            // cut off mid-string.
            let ws = listed(&c.user);
            return Reply::Cut(format!(
                "{{\"action\": \"descend\", \"confidence\": 0.2, \"hypothesis\": \"\", \
                 \"ids\": [\"{}\"], \"quotes\": [{{\"id\": \"n1\", \"quote\": \"The council \
                 met and discussed, at length, the",
                ws[0].0
            ));
        }
        sane(c)
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(nav_cfg(&url), dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    let steps = render(&r);
    assert!(r.ready && r.citations[0].quote.contains("41%"), "{steps}");
    assert!(
        steps.contains(
            "salvage: the reply was cut off at its token limit; its 4 complete field(s) are used"
        ),
        "{steps}"
    );
    assert_eq!(
        (r.usage.invalid_outputs, r.usage.fallbacks),
        (0, 0),
        "{steps}"
    );
    // The salvaged descend was carried out: the second prompt lists the groups.
    assert!(steps.contains("descend: 1 node(s)"), "{steps}");
}

#[test]
fn a_quote_of_sentences_glued_together_cites_each_one() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| match c.kind {
        Kind::Intent => Reply::Text(
            json!({"entity": "Eastgate", "attribute": "car ownership and cost",
                   "output_type": "number", "keywords": ["Eastgate", "car", "cost"]})
            .to_string(),
        ),
        // Two sentences of two turns, as one quote (what a model copying a DETAILED or
        // ABSTRACT node writes), cited against the ABSTRACT.
        Kind::Action => action(json!({"action": "finish", "confidence": 0.9, "ready": true,
            "hypothesis": "41% have no car; the audit put the cost at $1.57 billion",
            "quotes": [{"id": "n1", "quote": "In Eastgate 41% of households do not own a car, \
                and buses there take 52 minutes to reach the centre. The 2029 audit put the \
                cost at $1.57 billion, far above the original estimate."}]})),
        _ => good(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(nav_cfg(&url), dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households own no car, and what did the 2029 audit say the line would cost?",
    );
    let steps = render(&r);
    let quotes: Vec<&str> = r.citations.iter().map(|c| c.quote.as_str()).collect();
    assert_eq!(
        quotes,
        [
            "In Eastgate 41% of households do not own a car, and buses there take 52 minutes to reach the centre.",
            "The 2029 audit put the cost at $1.57 billion, far above the original estimate."
        ],
        "{steps}"
    );
    assert!(
        steps.contains("is not one passage: 2 of its 2 sentences were found in n1"),
        "{steps}"
    );
    assert_eq!(r.usage.fallbacks, 0, "{steps}");
}

// ---------------------------------------------------------------- code mode

fn code_cfg(url: &str) -> Config {
    let mut c = nav_cfg(url);
    c.query.strategy = strata::config::Strategy::Code;
    c
}

/// The first program: grep the FULL chunks beneath the working set, keep the hits (and an
/// id that does not exist), answer nothing yet.
const FIRST_PROGRAM: &str = r#"Here is my program:
```rhai
let hits = grep("Eastgate households car", "full", 4);
#{ selected_ids: hits.map(|h| h.id) + ["n999"], extracted: [], confidence: 0.2, stop: false,
   hypothesis: "the answer is in a FULL chunk about Eastgate" }
```"#;

/// The second program: read every node of the working set, ask the helper about each at
/// once, and quote the sentence holding "41%".
const SECOND_PROGRAM: &str = r#"
let notes = llm_batch(working.map(|w| "Does this say how many households own no car? " + w.text));
let found = [];
for w in working {
    let n = peek(w.id);
    if n.text.contains("41%") { found.push(n); }
}
if found.is_empty() {
    #{ selected_ids: [], extracted: [], confidence: 0.0, stop: false }
} else {
    let t = found[0].text;
    let from = t.index_of("In Eastgate");
    let s = t.sub_string(from);
    let q = s.sub_string(0, s.index_of(".") + 1);
    #{ selected_ids: [found[0].id], extracted: [#{ id: found[0].id, quote: q }],
       confidence: 0.9, stop: true, hypothesis: "41% of Eastgate households have no car" }
}
"#;

#[test]
fn code_mode_runs_one_program_per_iteration_and_cites_exact_spans() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| match c.kind {
        Kind::Code if turn(&c.user) == 1 => Reply::Text(FIRST_PROGRAM.into()),
        Kind::Code => Reply::Text(SECOND_PROGRAM.into()),
        _ => good(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(code_cfg(&url), dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert!(r.ready, "{r:#?}");
    assert_eq!(r.citations.len(), 1);
    assert_eq!(
        r.citations[0].quote,
        "In Eastgate 41% of households do not own a car, and buses there take 52 minutes to reach the centre."
    );
    assert_eq!(r.citations[0].speaker.as_deref(), Some("alice"));
    assert_eq!(r.answer, r.citations[0].quote);
    // Two programs, no intent call, one helper call per working-set node, concurrently.
    assert_eq!(mock.requests(Kind::Code), 2);
    assert_eq!(mock.requests(Kind::Intent) + mock.requests(Kind::Action), 0);
    let helpers = mock.requests(Kind::Helper);
    assert!(helpers >= 2, "{helpers}");
    assert_eq!(r.sub_calls_made as usize, helpers);
    let programs: Vec<&str> = r
        .trajectory
        .iter()
        .filter(|s| s.action == "program")
        .map(|s| s.detail.as_str())
        .collect();
    assert_eq!(programs.len(), 2, "{programs:?}");
    assert!(programs[1].contains("stop true"), "{programs:?}");
    // The id that does not exist was dropped and reported.
    assert!(
        r.trajectory
            .iter()
            .any(|s| s.action == "invalid" && s.detail.contains("n999")),
        "{:#?}",
        r.trajectory
    );
    assert!(r.trajectory.iter().any(|s| s.action == "llm_batch"));
    assert!(
        r.trajectory
            .iter()
            .any(|s| s.action == "peek" && s.detail.starts_with("program:"))
    );
    assert_eq!(r.usage.fallbacks, 0);
    assert_eq!(r.usage.invalid_outputs, 1);
    assert!(!r.max_iterations_reached && r.limit_hit.is_none(), "{r:#?}");
    assert_eq!(r.outcome, "answered within its budgets");
    // Code mode's whole trajectory against these two programs.
    let render = |r: &QueryResult| stable(&render(r), dir.path());
    expect_test::expect![[r#"
        policy: code mode: root model openai:mock-root, prompts nav-v3
        peek: 1 abstract node(s), 22 tokens
        grep: "Eastgate households car" at full within the working set: 2 hit(s)
        program: 20 operation(s), 1 primitive call(s), <ms, KiB>: 3 selected, 0 extracted, confidence 0.20, stop false
        invalid: selected ids outside the working set ignored: n999
        llm_batch: program: 2 sub-call(s), 0 failed
        peek: program: n2 [full], 46 tokens
        peek: program: n3 [full], 31 tokens
        program: 107 operation(s), 4 primitive call(s), <ms, KiB>: 1 selected, 1 extracted, confidence 0.90, stop true
        check: offline evidence: 3 citation(s), confidence 0.77, 100 % of the question's term weight, gives a number
        check: answer: 72 % of the question's term weight, gives a number; cites what the offline policy cites: accepted
        finish-llm: 1 verified citation(s)
        finish: 1 citation(s), confidence 0.90, ready true
        | iteration 1: program: 3 node(s) selected, 0 quote(s) extracted: working set 2
        | answer (confidence 0.90): 41% of Eastgate households have no car
        = confidence 0.90, ready true, 1 citation(s)
        [41..141) <dir>/debate.jsonl#1 (round 1, alice): "In Eastgate 41% of households do not own a car, and buses there take 52 minutes to reach the centre."
    "#]].assert_eq(&render(&r));
}

#[test]
fn code_mode_falls_back_when_programs_fail() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let dir = tempfile::tempdir().unwrap();
    let q = "What share of Eastgate households do not own a car?";
    let offline_answer = {
        let mut c = cfg(&url);
        c.model = Default::default();
        query(&rt, &engine(c, dir.path()), q)
    };
    // A program that never ends, then one that reaches for a file.
    mock.set(|c| match c.kind {
        Kind::Code if turn(&c.user) == 1 => Reply::Text("let i = 0; loop { i += 1; }".into()),
        Kind::Code => Reply::Text("open(\"/etc/passwd\")".into()),
        _ => good(c),
    });
    let e = engine(code_cfg(&url), dir.path());
    let r = query(&rt, &e, q);
    assert_eq!(r.citations, offline_answer.citations);
    assert_eq!(r.usage.fallbacks, 1);
    assert_eq!(r.usage.invalid_outputs, 2);
    let failed: Vec<&str> = r
        .trajectory
        .iter()
        .filter(|s| s.action == "program")
        .map(|s| s.detail.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "failed: the script exceeded its limit of 1000000 operations",
            "failed: the script called `open (&str | ImmutableString | String)`, which does not exist in the sandbox"
        ]
    );
    assert!(
        r.refinement_history
            .iter()
            .any(|h| h.contains("programs failed") && h.contains("answered by the offline policy")),
        "{:#?}",
        r.refinement_history
    );
    // The model was told what went wrong.
    let log = mock.log.lock().unwrap();
    let second = log.iter().filter(|l| l.kind == Kind::Code).nth(1).unwrap();
    assert!(
        second
            .body
            .to_string()
            .contains("Your program failed: the script exceeded its limit"),
        "{}",
        second.body
    );
}

/// Ending honestly: a model that keeps exploring and never says stop is stopped by the
/// iteration limit; the answer comes from what it gathered (its draft), not ready, and the
/// result says which limit ended it.
#[test]
fn a_run_that_runs_out_of_iterations_says_so_and_answers_from_what_it_gathered() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let keep_looking = r#"
let found = [];
for w in working { if w.level == "full" && w.text.contains("41%") { found.push(w); } }
let ids = if found.is_empty() { grep("Eastgate car", "full", 3).map(|h| h.id) } else { [found[0].id] };
let ex = if found.is_empty() { [] } else { ["In Eastgate 41% of households do not own a car"] };
#{ selected_ids: ids, extracted: ex, confidence: 0.4, stop: false }
"#;
    mock.set(move |c| match c.kind {
        Kind::Code => Reply::Text(keep_looking.into()),
        _ => good(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = code_cfg(&url);
    cfg.query.max_iterations = 3;
    let e = engine(cfg, dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert!(r.citations[0].quote.contains("41%"), "{r:#?}");
    assert!(!r.ready);
    assert!(r.max_iterations_reached, "{r:#?}");
    assert_eq!(r.limit_hit.as_deref(), Some("max_iterations"));
    assert_eq!(
        (r.budgets.iterations.used, r.budgets.iterations.limit),
        (3, 3)
    );
    assert_eq!(
        r.outcome,
        "stopped at the iteration limit (3 of 3): answered from what was gathered"
    );
    assert_eq!(r.usage.fallbacks, 0);
    assert_eq!(mock.requests(Kind::Code), 3);
}

/// Nothing to find: the run says so plainly, with an empty answer.
#[test]
fn a_run_that_finds_nothing_says_so() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(|c| match c.kind {
        Kind::Code => {
            Reply::Text("#{ selected_ids: [], extracted: [], confidence: 0.0, stop: true }".into())
        }
        _ => good(c),
    });
    let dir = tempfile::tempdir().unwrap();
    let e = engine(code_cfg(&url), dir.path());
    let r = query(&rt, &e, "Which zeppelin did the quartermaster requisition?");
    assert!(r.citations.is_empty() && r.answer.is_empty(), "{r:#?}");
    assert!(r.outcome.contains("nothing was found"), "{}", r.outcome);
}

/// A root model that gives a first answer that is not ready (the best so far), then never
/// answers again: only a stop ends the query before the model's timeout.
fn drafts_then_hangs() -> impl Fn(&Call) -> Reply {
    let sane = explorer("41%", "Eastgate car households");
    let drafted = Mutex::new(false);
    move |c: &Call| match c.kind {
        Kind::Action => {
            if *drafted.lock().unwrap() {
                return Reply::Hang;
            }
            if let Some(q) = quote_of(last_result(&c.user), "41%") {
                *drafted.lock().unwrap() = true;
                return action(json!({"action": "finish", "quotes": [q],
                    "hypothesis": "41% have no car", "confidence": 0.4, "ready": false}));
            }
            sane(c)
        }
        _ => sane(c),
    }
}

/// `query.time_limit_ms`: the hung call is dropped when the time runs out and the best
/// answer so far is the answer, marked as stopped by the time limit.
#[test]
fn a_query_out_of_time_answers_with_its_best_partial_answer() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    mock.set(drafts_then_hangs());
    let dir = tempfile::tempdir().unwrap();
    let mut c = nav_cfg(&url);
    // The model's own timeout is far away: only the time limit can end the hang.
    c.model.timeout_ms = 600_000;
    c.query.max_iterations = 10;
    c.query.time_limit_ms = 1_500;
    let e = engine(c, dir.path());
    let r = query(
        &rt,
        &e,
        "What share of Eastgate households do not own a car?",
    );
    assert!(r.citations[0].quote.contains("41%"), "{r:#?}");
    assert!(!r.ready, "{r:#?}");
    assert_eq!(r.limit_hit.as_deref(), Some("time_limit"), "{r:#?}");
    assert!(
        r.outcome.starts_with("stopped at the time limit (")
            && r.outcome
                .ends_with("of 1500 ms): answered from what was gathered"),
        "{}",
        r.outcome
    );
    assert!(
        r.refinement_history
            .iter()
            .any(|h| h.contains("time limit (1500 ms) ran out: the best answer so far stands")),
        "{:#?}",
        r.refinement_history
    );
    assert_eq!(r.usage.fallbacks, 0);
    // The hung request was dropped by the stop, not answered.
    wait_until(&rt, &mock, || mock.hung_dropped.load(Ordering::SeqCst) >= 1);
    assert_eq!(mock.hung.load(Ordering::SeqCst), 1);
}

/// Ctrl-C on `strata query`: the first SIGINT stops the query, which prints the best
/// answer it had (JSON, `limit_hit: cancelled`) and exits 0; the hung call is dropped.
/// With nothing gathered yet, the offline policy answers instead.
#[cfg(unix)]
#[test]
fn sigint_on_strata_query_prints_the_best_partial_answer() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_strata"));
        c.arg("--db")
            .arg(&db)
            .args(args)
            .env("STRATA_MODEL_BASE_URL", &url)
            .env("STRATA_MODEL_API_KEY_ENV", "STRATA_TEST_NO_SUCH_KEY")
            .env("STRATA_MODEL_TIMEOUT_MS", "600000")
            .env("STRATA_QUERY_MAX_ITERATIONS", "10")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let file = debate_file(dir.path());
    let out = run(&["ingest", "--scope", "d", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let question = "What share of Eastgate households do not own a car?";
    for (script, hung_before, expect) in [
        (true, 1, "41%"),
        // The intent call hangs: nothing gathered, the offline policy answers.
        (false, 2, "41%"),
    ] {
        if script {
            mock.set(drafts_then_hangs());
        } else {
            mock.set(|c| match c.kind {
                Kind::Intent => Reply::Hang,
                _ => good(c),
            });
        }
        let child = run(&[
            "--root-model",
            "openai:mock-root",
            "--json",
            "query",
            "--scope",
            "d",
            question,
        ])
        .spawn()
        .unwrap();
        wait_until(&rt, &mock, || {
            mock.hung.load(Ordering::SeqCst) >= hung_before
        });
        let sent = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{out:?}");
        assert!(
            stderr.contains("stopping: answering from what was gathered"),
            "{stderr}"
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["limit_hit"], "cancelled", "{r:#}");
        assert!(
            r["outcome"]
                .as_str()
                .unwrap()
                .ends_with(": answered from what was gathered"),
            "{r:#}"
        );
        assert!(
            r["citations"][0]["quote"]
                .as_str()
                .unwrap()
                .contains(expect),
            "{r:#}"
        );
        let fell_back = r["usage"]["fallbacks"].as_u64().unwrap() > 0;
        assert_eq!(fell_back, !script, "{r:#}");
        wait_until(&rt, &mock, || {
            mock.hung_dropped.load(Ordering::SeqCst) >= hung_before
        });
    }
}

/// The engine's futures cross threads (the server spawns them).
#[allow(dead_code)]
fn engine_futures_are_send(e: &Engine) {
    fn send<T: Send>(_: T) {}
    send(e.compress("d", T0, &NoProgress));
    send(e.query(&strata::Ask::new(&[], "q", T0)));
}

// ---------------------------------------------------------------- a real model

/// Compresses a few debate turns with a real model server and answers a question with
/// it as the root model. Runs when `STRATA_LLM_BASE_URL` is set (`.ci/run` starts
/// `scripts/local-llm.sh` and sets it); otherwise it says so and passes.
#[test]
fn real_model_end_to_end() {
    let Ok(url) = std::env::var("STRATA_LLM_BASE_URL") else {
        eprintln!("real_model_end_to_end: skipped (STRATA_LLM_BASE_URL is not set)");
        return;
    };
    let model = std::env::var("STRATA_LLM_MODEL").unwrap_or_else(|_| "local".into());
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::default();
    c.model.sub = format!("openai:{model}");
    c.model.root = format!("openai:{model}");
    c.model.base_url = url;
    c.model.api_key_env = "STRATA_LLM_API_KEY".into();
    c.model.timeout_ms = 180_000;
    c.model.retries = 1;
    c.build.concurrency = 1;
    // The context scripts/local-llm.sh starts the server with.
    c.model.context_tokens = std::env::var("STRATA_LLM_CTX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8192);
    // A 0.5B model wanders: give it room to reach the FULL text before it must finish.
    c.query.max_iterations = 8;
    let e = engine(c, dir.path());
    let t0 = Instant::now();
    let r = build(&rt, &e);
    let build_s = t0.elapsed().as_secs_f64();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    // Every request fit the server's context, and no rejected output was asked for again
    // with the same request.
    assert!(
        r.max_request_tokens as usize <= e.config().model.context_tokens,
        "{r:?}"
    );
    assert_eq!((r.over_context, r.identical_retries), (0, 0), "{r:?}");
    check_tree(&e, "d");
    let plan = e.plan("d").unwrap();
    assert_eq!(r.nodes_built, plan.n_derived());
    // Every model output was either used (within budget and faithful) or replaced and
    // counted.
    let rejected = r.empty + r.over_budget + r.unfaithful + r.model_errors;
    assert!(rejected >= r.fallbacks && r.fallbacks <= 9, "{r:?}");
    let mut kept = 0;
    for ch in &plan.chunks {
        if !is_offline_output(&e, ch) {
            kept += 1;
        }
    }
    // The query's wall-time limit follows the pace this server kept during the build (its
    // speed on two shared cores varies tenfold with the machine's load): a root call, with
    // the navigation state in its prompt, took about three build calls here (5.9 s a
    // build call, 18 s a root call), so six build calls leave room for the intent and at
    // least one turn; at least 90 s, at most 400 s. A fixed 90 s once ran out on a loaded
    // CI machine before the first root call came back, and then no root model was tested
    // at all. When the limit runs out the query answers from what it gathered
    // (`limit_hit` = `time_limit`), as a user's would.
    let per_call = build_s / r.model_calls.max(1) as f64;
    let mut settings = e.config().query.clone();
    settings.time_limit_ms = ((per_call * 6.0 * 1000.0) as u64).clamp(90_000, 400_000);
    let t1 = Instant::now();
    let question = "What share of Eastgate households do not own a car?";
    let q = rt
        .block_on(e.query(&strata::Ask::new(&["d".to_string()], question, T0).settings(&settings)))
        .unwrap();
    check_citations(&e, &q);
    let query_s = t1.elapsed().as_secs_f64();
    let u = &r.usage;
    eprintln!(
        "real model {model}: build {build_s:.1} s, {} calls, {} prompt + {} completion tokens, \
         {} fallbacks (empty {}, over budget {}, unfaithful {}, errors {}), {kept}/{} DETAILED \
         kept from the model",
        r.model_calls,
        u.prompt_tokens,
        u.completion_tokens,
        r.fallbacks,
        r.empty,
        r.over_budget,
        r.unfaithful,
        r.model_errors,
        plan.chunks.len()
    );
    eprintln!(
        "real model query: {query_s:.1} s ({}, limit {:?} of {} ms), {} root calls, {} invalid \
         outputs, fallback {}, ready {}, citations: {:?}",
        q.outcome,
        q.limit_hit,
        settings.time_limit_ms,
        q.usage.calls,
        q.usage.invalid_outputs,
        q.usage.fallbacks,
        q.ready,
        q.citations.iter().map(|c| &c.quote).collect::<Vec<_>>()
    );
    for s in &q.trajectory {
        eprintln!("  {}: {}", s.action, s.detail);
    }
    // The root model was asked, and its first reply (what the question asks) was read
    // before anything ended the query.
    assert!(
        q.trajectory.iter().any(|s| s.action == "intent"),
        "no intent step (time limit {} ms, {per_call:.1} s a call in the build)",
        settings.time_limit_ms
    );
    assert!(!q.citations.is_empty(), "{q:#?}");
}

/// A rendered trajectory without what differs between runs: the temp directory, a
/// program's wall time and memory.
fn stable(s: &str, dir: &std::path::Path) -> String {
    let s = s.replace(&dir.display().to_string(), "<dir>");
    let mut out = String::with_capacity(s.len());
    for line in s.lines() {
        match (line.find(" primitive call(s), "), line.find(" KiB at most")) {
            (Some(a), Some(b)) if a < b => {
                out.push_str(&line[..a]);
                out.push_str(" primitive call(s), <ms, KiB>");
                out.push_str(&line[b + " KiB at most".len()..]);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------- SubModel conformance

/// Requests every implementation of `SubModel` must serve: turns with speaker labels and
/// a document's paragraphs, at each compressed level.
fn conformance_requests() -> Vec<CompressRequest> {
    let turns = vec![
        Passage {
            text: "The tram line would cost 240 million euros and open in 2031. I propose we fund the first section now.".into(),
            label: Some("alice (round 1)".into()),
        },
        Passage {
            text: "Buses cost less: 35 million for twelve routes. The audit of 2029 found the tram estimate low by a fifth.".into(),
            label: Some("bob (round 1)".into()),
        },
    ];
    let doc = vec![Passage {
        text: "The harbour was dredged in 1998. Since then cargo volumes doubled, and the port authority asked for a second quay. Its cost was put at 80 million.".into(),
        label: None,
    }];
    let mut out = Vec::new();
    for (level, target) in [
        (Level::Detailed, 30),
        (Level::Summary, 16),
        (Level::Abstract, 10),
    ] {
        out.push(CompressRequest::new(level, turns.clone(), target));
        out.push(CompressRequest::new(level, doc.clone(), target));
    }
    out
}

/// Numbers in `s` (digit runs, with inner `,` or `.`).
fn numbers(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
        .map(|w| w.trim_matches(|c| c == ',' || c == '.'))
        .filter(|w| w.chars().any(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// The contract of `strata::model::SubModel`, checked on one implementation: a stable,
/// printable identity; a prompt (when it takes one) that shows the model every passage
/// and leaves room for the reply, and carries a retry's feedback; a non-empty reply for
/// every level that states no number its passages do not; a trusted model (whose output
/// is used unchecked) takes no prompt, is deterministic and keeps within the accepted
/// budget; and the engine builds a whole tree with it, with no fallback.
fn check_submodel_conformance(
    rt: &tokio::runtime::Runtime,
    model: Arc<dyn strata::SubModel>,
    cfg: Config,
) {
    let id = model.identity();
    assert!(!id.trim().is_empty(), "an empty identity");
    assert!(!id.chars().any(char::is_control), "identity {id:?}");
    assert_eq!(model.identity(), id, "the identity changed between calls");
    for req in conformance_requests() {
        let what = format!("{id}, {:?}, {} passages", req.level, req.passages.len());
        match model.prompt(&req) {
            Some(p) => {
                for passage in &req.passages {
                    assert!(
                        p.user.contains(&passage.text),
                        "{what}: a passage is missing from the prompt"
                    );
                }
                assert!(
                    p.max_tokens as usize >= req.target_tokens,
                    "{what}: reply budget {} under the target {}",
                    p.max_tokens,
                    req.target_tokens
                );
                let mut retry = req.clone();
                retry.feedback = Some("it was too long: 80 tokens over".into());
                let p2 = model.prompt(&retry).unwrap();
                assert!(
                    p2.user.contains("80 tokens over") || p2.system.contains("80 tokens over"),
                    "{what}: the retry's feedback is not in its prompt"
                );
            }
            None => assert!(
                model.trusted(),
                "{what}: a model sent no prompt must be trusted"
            ),
        }
        let out = rt
            .block_on(model.compress(req.clone()))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!out.trim().is_empty(), "{what}: empty output");
        // What a reply may state: the passages and their labels (who said it, when).
        let input: String = req
            .passages
            .iter()
            .map(|p| format!("{} {} ", p.label.as_deref().unwrap_or(""), p.text))
            .collect();
        let stated = numbers(&input);
        for n in numbers(&out) {
            assert!(stated.contains(&n), "{what}: {n} is in no passage: {out:?}");
        }
        if model.trusted() {
            let again = rt.block_on(model.compress(req.clone())).unwrap();
            assert_eq!(again, out, "{what}: a trusted model is deterministic");
            assert!(
                strata::token::count(&out)
                    <= strata::model::prompts::accepted_tokens(req.target_tokens)
                        + strata::token::count(&input) / 2,
                "{what}: {out:?}"
            );
        }
    }
    // The engine builds every level with it.
    let dir = tempfile::tempdir().unwrap();
    let e = engine(cfg, dir.path()).with_model(model);
    let r = build(rt, &e);
    assert!(r.failures.is_empty(), "{id}: {:?}", r.failures);
    assert_eq!(
        r.fallbacks, 0,
        "{id}: the build fell back to the offline compressor"
    );
}

#[test]
fn the_offline_model_conforms_to_submodel() {
    let rt = rt();
    check_submodel_conformance(&rt, Arc::new(offline::Offline), Config::default());
}

#[test]
fn the_openai_client_on_a_scripted_server_conforms_to_submodel() {
    let rt = rt();
    let (mock, url) = serve(&rt);
    let cfg = cfg(&url);
    let models = strata::model::Models::from_config(&cfg, &|_| None).unwrap();
    assert!(!models.sub.trusted(), "a remote model's output is checked");
    check_submodel_conformance(&rt, models.sub.clone(), cfg);
    // A server that fails is an error, never an output.
    mock.set(|_| Reply::Status(500, vec![]));
    let req = conformance_requests().remove(0);
    let r = rt.block_on(models.sub.compress(req));
    assert!(r.is_err(), "{r:?}");
}
