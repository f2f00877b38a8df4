//! Issue 20: the HTTP server's edges, each against the real binary (`support::Served`) —
//! idle and half-sent connections are closed and cannot lock clients out, cross-site
//! writes and DNS rebinding are refused, CORS is closed unless configured, every answer
//! says `nosniff`, load beyond the caps is answered 503 with `Retry-After`, SIGTERM cuts a
//! slow request after the grace period, and scoped tokens see and touch only their scopes.

use crate::support::{RawResponse, Served, raw_http, rt, serve_mock};
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A request on a new connection: `Host` is the server's address unless `headers` name
/// one; a body gets its `Content-Length`.
fn send(
    s: &Served,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> RawResponse {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {}\r\n", s.addr));
    }
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    let req = format!("{}\r\n{}", head.trim_end_matches("\r\n"), "\r\n");
    raw_http(&s.addr, &format!("{req}{}", body.unwrap_or("")))
        .unwrap_or_else(|| panic!("no answer to {method} {path}"))
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post_json(s: &Server2, path: &str, body: Value) -> RawResponse {
    let mut h = s.auth.clone();
    h.push(JSON);
    send(s.served, "POST", path, &h, Some(&body.to_string()))
}

fn get(s: &Server2, path: &str) -> RawResponse {
    send(s.served, "GET", path, &s.auth, None)
}

/// A server seen through one token.
struct Server2<'a> {
    served: &'a Served,
    auth: Vec<(&'static str, &'static str)>,
}

fn as_token<'a>(served: &'a Served, header: &'static str) -> Server2<'a> {
    Server2 {
        served,
        auth: vec![("Authorization", header)],
    }
}

fn is_problem(r: &RawResponse, status: u16) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(
        r.header("content-type"),
        Some("application/problem+json"),
        "{r:?}"
    );
    assert_eq!(r.json()["status"], status, "{r:?}");
}

fn turn(round: u32, speaker: &str, text: &str) -> Value {
    json!({"round": round, "speaker": speaker, "text": text})
}

/// Raises this process's open-file limit to the hard limit; returns the soft limit.
fn raise_own_open_file_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    );
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Whether the server closed `s` (end of stream or reset) before `within`; the time it took.
fn closed_within(s: &mut TcpStream, within: Duration) -> (bool, Duration) {
    let t0 = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (true, t0.elapsed()),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (false, t0.elapsed());
            }
            Err(_) => return (true, t0.elapsed()),
        }
    }
}

/// 1,100 idle connections (the usual 1,024 open-file limit, over which the server used to
/// stop answering anyone): a normal request on top of them is answered at once (the
/// connection idle longest made room), and the server closes every idle one after the
/// idle time limit.
#[test]
fn idle_connections_do_not_lock_clients_out() {
    let limit = raise_own_open_file_limit();
    let n = 1100.min(limit.saturating_sub(100) as usize);
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "",
        &[
            ("STRATA_SERVER_IDLE_TIMEOUT_MS", "1500"),
            ("STRATA_SERVER_HEADER_TIMEOUT_MS", "1000"),
        ],
    );
    let mut idle: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    let t0 = Instant::now();
    let r = raw_http(
        &s.addr,
        "GET /api/v1/rlm/strategies HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .expect("locked out");
    let answered = t0.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    let t0 = Instant::now();
    let mut closed = 0;
    for c in &mut idle {
        if closed_within(c, Duration::from_secs(30)).0 {
            closed += 1;
        }
    }
    eprintln!(
        "idle: {n} idle connections (open-file limit {limit}); a request on top answered in {answered:?}; the server closed {closed} of them within {:?} (idle limit 1.5 s)",
        t0.elapsed()
    );
    assert_eq!(closed, n, "idle connections left open");
}

/// A request whose head never ends is closed after the header time limit (the idle one is
/// far longer); a body that stops coming is answered 408 after the body time limit.
#[test]
fn half_sent_requests_are_closed_after_their_time_limits() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "",
        &[
            ("STRATA_SERVER_IDLE_TIMEOUT_MS", "120000"),
            ("STRATA_SERVER_HEADER_TIMEOUT_MS", "1000"),
            ("STRATA_SERVER_BODY_TIMEOUT_MS", "1000"),
        ],
    );
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .unwrap();
    let (closed, after) = closed_within(&mut c, Duration::from_secs(60));
    eprintln!("header: a head never finished was closed after {after:?} (header limit 1 s)");
    assert!(closed, "a half-sent head kept its connection for {after:?}");

    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.write_all(
        format!(
            "POST /api/debates/d/turns HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"round\": 1,",
            s.addr
        )
        .as_bytes(),
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("server.body_timeout_ms"), "{answer}");
    // Nothing was written.
    let r = send(&s, "GET", "/api/debates/d/refinement-status", &[], None);
    assert_eq!(r.status, 404, "{r:?}");
}

/// A web page can post a form or `text/plain` to any address without asking; those posts
/// are refused (415) and write nothing, and any write from a foreign `Origin` is refused
/// (403). JSON from a non-browser client (no `Origin`) and a body-less POST still work.
#[test]
fn cross_site_posts_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "", &[]);
    let body = turn(1, "mallory", "Planted by a web page.").to_string();
    for ct in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let h: Vec<(&str, &str)> = ct.map(|c| ("Content-Type", c)).into_iter().collect();
        let r = send(&s, "POST", "/api/v1/debates/d/turns", &h, Some(&body));
        is_problem(&r, 415);
    }
    let evil = ("Origin", "http://evil.example");
    let r = send(
        &s,
        "POST",
        "/api/v1/debates/d/turns",
        &[JSON, evil],
        Some(&body),
    );
    is_problem(&r, 403);
    let r = send(&s, "POST", "/api/v1/debates/d/compress", &[evil], None);
    is_problem(&r, 403);
    let r = send(&s, "GET", "/api/v1/debates/d/refinement-status", &[], None);
    is_problem(&r, 404);
    assert_eq!(
        send(&s, "GET", "/api/v1/rlm/contexts", &[], None).json()["total"],
        0
    );

    let r = send(&s, "POST", "/api/v1/debates/d/turns", &[JSON], Some(&body));
    assert_eq!(r.status, 201, "{r:?}");
    let own = format!("http://{}", s.addr);
    let r = send(
        &s,
        "POST",
        "/api/v1/debates/d/turns",
        &[JSON, ("Origin", &own)],
        Some(&body),
    );
    assert_eq!(r.status, 201, "{r:?}");
    // `curl -XPOST .../compress`: no body, no content type.
    let r = send(&s, "POST", "/api/v1/debates/d/compress", &[], None);
    assert_eq!(r.status, 200, "{r:?}");
}

/// Without a token a `Host` that could be rebound to 127.0.0.1 (a name) is refused 421;
/// IP addresses, localhost and the configured names are answered; with a token the
/// `Host` is not checked (unless names are configured).
#[test]
fn a_wrong_host_is_refused_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "[server]\nallowed_hosts = [\"strata.internal\"]\n",
        &[],
    );
    let path = "/api/v1/rlm/strategies";
    let r = send(&s, "GET", path, &[("Host", "evil.example:7878")], None);
    is_problem(&r, 421);
    assert!(r.json()["error"].as_str().unwrap().contains("evil.example"));
    for host in [
        s.addr.clone(),
        s.addr.replace("127.0.0.1", "localhost"),
        s.addr.replace("127.0.0.1", "[::1]"),
        "strata.internal:7878".to_string(),
    ] {
        let r = send(&s, "GET", path, &[("Host", &host)], None);
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
    let r = send(&s, "GET", "/healthz", &[("Host", "evil.example")], None);
    assert_eq!(r.status, 200, "{r:?}");
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "[server]\ntoken = \"t0k3n\"\n", &[]);
    let evil = ("Host", "evil.example:7878");
    let r = send(
        &s,
        "GET",
        path,
        &[evil, ("Authorization", "Bearer t0k3n")],
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    is_problem(&send(&s, "GET", path, &[evil], None), 401);
}

/// CORS is closed (no `Access-Control-Allow-Origin`) unless the origin is configured, then
/// open for it alone; every answer — success, refusal, error — says `nosniff`.
#[test]
fn cors_is_closed_unless_configured_and_every_answer_says_nosniff() {
    let app = ("Origin", "http://app.example");
    let preflight = [
        app,
        ("Access-Control-Request-Method", "POST"),
        (
            "Access-Control-Request-Headers",
            "content-type, authorization",
        ),
    ];
    let body = turn(1, "alice", "Hello.").to_string();

    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "", &[]);
    let mut answers = vec![
        send(&s, "GET", "/api/v1/rlm/strategies", &[app], None),
        send(&s, "OPTIONS", "/api/v1/debates/d/turns", &preflight, None),
        send(&s, "GET", "/healthz", &[], None),
        send(&s, "GET", "/metrics", &[], None),
        send(&s, "GET", "/no/such/route", &[], None),
        send(&s, "PUT", "/api/v1/debates/d/turns", &[], None),
        send(&s, "POST", "/api/v1/debates/d/turns", &[], Some(&body)),
        send(&s, "GET", "/healthz", &[("Host", "a.example")], None),
        send(
            &s,
            "GET",
            "/api/v1/rlm/strategies",
            &[("Host", "a.example")],
            None,
        ),
    ];
    assert_eq!(answers[0].status, 200);
    assert_eq!(answers[1].status, 403);
    assert!(
        answers
            .iter()
            .take(2)
            .all(|r| { r.header("access-control-allow-origin").is_none() })
    );
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "[server]\ntoken = \"t0k3n\"\ncors_origins = [\"http://app.example\"]\n",
        &[],
    );
    let auth = ("Authorization", "Bearer t0k3n");
    let r = send(&s, "OPTIONS", "/api/v1/debates/d/turns", &preflight, None);
    assert_eq!(r.status, 204, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    assert!(
        r.header("access-control-allow-headers")
            .unwrap()
            .contains("authorization")
    );
    answers.push(r);
    let r = send(
        &s,
        "POST",
        "/api/v1/debates/d/turns",
        &[app, auth, JSON],
        Some(&body),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    answers.push(r);
    let other = ("Origin", "http://other.example");
    let r = send(
        &s,
        "POST",
        "/api/v1/debates/d/turns",
        &[other, auth, JSON],
        Some(&body),
    );
    is_problem(&r, 403);
    assert!(r.header("access-control-allow-origin").is_none());
    answers.push(r);
    answers.push(send(&s, "GET", "/api/v1/rlm/strategies", &[], None));
    assert_eq!(answers.last().unwrap().status, 401);
    for r in &answers {
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{r:?}");
    }
}

/// A mock model whose chat completions never answer; the receiver counts the calls made.
fn hanging_model(rt: &tokio::runtime::Runtime) -> (String, watch::Receiver<usize>) {
    let (tx, rx) = watch::channel(0usize);
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(calls): State<Arc<watch::Sender<usize>>>| async move {
                    calls.send_modify(|n| *n += 1);
                    std::future::pending::<&'static str>().await
                },
            ),
        )
        .with_state(Arc::new(tx));
    (serve_mock(rt, app), rx)
}

/// A navigating model at `url` (it never answers): each query waits on it.
fn slow_queries(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("STRATA_MODEL_ROOT", "openai:mock".to_string()),
        ("STRATA_MODEL_BASE_URL", url.to_string()),
        ("STRATA_MODEL_TIMEOUT_MS", "600000".to_string()),
        ("STRATA_MODEL_RETRIES", "0".to_string()),
    ]
}

/// Waits (bounded) until the model has been called `n` times: that many queries run.
fn wait_calls(rt: &tokio::runtime::Runtime, calls: &mut watch::Receiver<usize>, n: usize) {
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), calls.wait_for(|c| *c >= n))
            .await
            .expect("the queries never reached the model")
            .unwrap();
    });
}

/// Starts a query in the background; it waits on the model until the server cuts it.
fn start_query(s: &Served) -> std::thread::JoinHandle<Option<RawResponse>> {
    let addr = s.addr.clone();
    std::thread::spawn(move || {
        let body = json!({"query": "What does the line cost?"}).to_string();
        raw_http(
            &addr,
            &format!(
                "POST /api/v1/debates/d/query-rlm HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    })
}

fn with_env<'a>(
    base: &'a [(&'static str, String)],
    more: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    base.iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(more.iter().copied())
        .collect()
}

/// Beyond `server.max_requests` requests in progress a request is answered 503 with
/// `Retry-After` (`/healthz` still answers); beyond `server.max_connections` connections,
/// all busy, a new connection is answered 503 with `Retry-After` and closed.
#[test]
fn requests_and_connections_beyond_the_caps_get_503() {
    let rt = rt();
    let (url, mut calls) = hanging_model(&rt);
    let base = slow_queries(&url);
    let body = turn(1, "alice", "The line costs 1.2 billion.").to_string();

    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "",
        &with_env(&base, &[("STRATA_SERVER_MAX_REQUESTS", "2")]),
    );
    assert_eq!(
        send(&s, "POST", "/api/debates/d/turns", &[JSON], Some(&body)).status,
        201
    );
    let running = [start_query(&s), start_query(&s)];
    wait_calls(&rt, &mut calls, 2);
    let r = send(&s, "GET", "/api/v1/rlm/strategies", &[], None);
    is_problem(&r, 503);
    assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
    assert_eq!(send(&s, "GET", "/healthz", &[], None).status, 200);
    drop(s);
    for q in running {
        // Killed: the queries end without an answer.
        assert!(q.join().unwrap().is_none());
    }

    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "",
        &with_env(&base, &[("STRATA_SERVER_MAX_CONNECTIONS", "2")]),
    );
    assert_eq!(
        send(&s, "POST", "/api/debates/d/turns", &[JSON], Some(&body)).status,
        201
    );
    let running = [start_query(&s), start_query(&s)];
    wait_calls(&rt, &mut calls, 4);
    let r = send(&s, "GET", "/healthz", &[], None);
    is_problem(&r, 503);
    assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("too many connections")
    );
    drop(s);
    for q in running {
        assert!(q.join().unwrap().is_none());
    }
}

/// SIGTERM while a query waits on a model that never answers: the server stops within the
/// grace period (2 s) plus a margin, the cut request gets a 503 saying it was not
/// acknowledged, and a turn acknowledged before is in the store.
#[test]
fn sigterm_cuts_a_slow_request_after_the_grace_period() {
    let rt = rt();
    let (url, mut calls) = hanging_model(&rt);
    let base = slow_queries(&url);
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "",
        &with_env(&base, &[("STRATA_SERVER_SHUTDOWN_GRACE_SECS", "2")]),
    );
    let body = turn(1, "alice", "The line costs 1.2 billion.").to_string();
    assert_eq!(
        send(&s, "POST", "/api/debates/d/turns", &[JSON], Some(&body)).status,
        201
    );
    let query = start_query(&s);
    wait_calls(&rt, &mut calls, 1);
    let t0 = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&s.child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = crate::support::wait_exit(&s.child, Duration::from_secs(7))
        .expect("still running 7 s after SIGTERM");
    let took = t0.elapsed();
    eprintln!("sigterm: stopped {took:?} after SIGTERM with a query in progress (grace 2 s)");
    assert!(status.success(), "{status:?}");
    let r = query
        .join()
        .unwrap()
        .expect("the cut request got no answer");
    is_problem(&r, 503);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("not acknowledged"),
        "{r:?}"
    );
    drop(s);
    let e = strata::Engine::open(&dir.path().join("db"), strata::Config::default()).unwrap();
    assert_eq!(e.scope("d").unwrap().sources.len(), 1);
}

/// Scoped tokens: a token opens the scopes its patterns match, read-only or read-write,
/// on every route (debates, documents, knowledge queries, contexts, jobs, stats); a scope
/// it may not see answers 404 like one that does not exist, and no 404 names a scope the
/// caller did not name. The single `server.token` keeps full access.
#[test]
fn scoped_tokens_see_and_touch_only_their_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        r#"
[server]
token = "admin-token"

[[server.tokens]]
token = "a-reader"
scopes = ["team-a-*"]
access = "read"

[[server.tokens]]
token = "b-writer"
scopes = ["team-b-*", "ctx_*"]
access = "write"
"#,
        &[],
    );
    let admin = as_token(&s, "Bearer admin-token");
    let reader = as_token(&s, "Bearer a-reader");
    let writer = as_token(&s, "Bearer b-writer");

    let mut jobs = std::collections::HashMap::new();
    for (scope, cost) in [("team-a-1", "420"), ("team-b-1", "900")] {
        for (round, speaker, text) in [
            (
                1,
                "alice",
                format!("The tram would cost {cost} million and open in 2031."),
            ),
            (
                2,
                "bob",
                "I oppose the tram; buses are cheaper.".to_string(),
            ),
        ] {
            let r = post_json(
                &admin,
                &format!("/api/v1/debates/{scope}/turns"),
                turn(round, speaker, &text),
            );
            assert_eq!(r.status, 201, "{r:?}");
            jobs.insert(scope, r.json()["job_id"].as_u64().unwrap());
        }
    }
    let r = post_json(
        &admin,
        "/api/v1/documents",
        json!({"scope": "team-b-docs", "source": "ferry.md", "text": "The ferry needs 12 berths."}),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let r = post_json(
        &admin,
        "/api/v1/rlm/compress",
        json!({"content": "The bridge has 7 spans."}),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let ctx = r.json()["context_id"].as_str().unwrap().to_string();
    let all = ["team-a-1", "team-b-1", "team-b-docs", ctx.as_str()];

    // A 404 names at most the scope the caller named.
    let names_only = |r: &RawResponse, asked: &str| {
        is_problem(r, 404);
        for name in all {
            assert!(name == asked || !r.body.contains(name), "{asked}: {r:?}");
        }
    };

    // The reader: team-a-* only, and only to read.
    let q = json!({"query": "How much would the tram cost?"});
    assert_eq!(
        get(&reader, "/api/v1/debates/team-a-1/context/summary").status,
        200
    );
    names_only(
        &get(&reader, "/api/v1/debates/team-b-1/context/summary"),
        "team-b-1",
    );
    names_only(
        &get(&reader, "/api/v1/debates/nope/context/summary"),
        "nope",
    );
    names_only(
        &post_json(&reader, "/api/v1/debates/team-b-1/query-rlm", q.clone()),
        "team-b-1",
    );
    assert_eq!(
        post_json(&reader, "/api/v1/debates/team-a-1/query-rlm", q.clone()).status,
        200
    );
    names_only(
        &get(&reader, "/api/v1/debates/team-b-1/refinement-status"),
        "team-b-1",
    );
    let t = turn(3, "eve", "Injected.");
    is_problem(
        &post_json(&reader, "/api/v1/debates/team-a-1/turns", t.clone()),
        403,
    );
    is_problem(
        &post_json(&reader, "/api/v1/debates/team-b-1/turns", t.clone()),
        403,
    );
    is_problem(
        &post_json(&reader, "/api/v1/debates/team-a-1/compress", json!({})),
        403,
    );
    let doc = json!({"scope": "team-a-docs", "source": "x.md", "text": "x"});
    is_problem(&post_json(&reader, "/api/v1/documents", doc), 403);
    is_problem(
        &post_json(&reader, "/api/v1/rlm/compress", json!({"content": "new"})),
        403,
    );
    let k = |prefix: &str, extra: Value| {
        let mut body = q.clone();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post_json(&reader, &format!("{prefix}/knowledge/query-rlm"), body)
    };
    names_only(&k("/api/v1", json!({"scopes": ["team-b-1"]})), "team-b-1");
    names_only(
        &k("/api/v1", json!({"workspace_id": "team-b-docs"})),
        "team-b-docs",
    );
    // No scope named: under /api/v1 aragora's rule (workspace_id required), under /api
    // every scope the token may read.
    is_problem(&k("/api/v1", json!({})), 400);
    let r = k("/api", json!({}));
    assert_eq!(r.status, 200, "{r:?}");
    let cited: Vec<String> = r.json()["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["source"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !cited.is_empty() && cited.iter().all(|c| c.starts_with("team-a-1")),
        "{cited:?}"
    );
    let r = get(&reader, "/api/v1/rlm/contexts");
    let listed: Vec<String> = r.json()["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["team-a-1"], "{r:?}");
    assert_eq!(r.json()["total"], 1);
    names_only(&get(&reader, &format!("/api/v1/rlm/context/{ctx}")), &ctx);
    let cq = json!({"context_id": ctx, "query": "How many spans?"});
    names_only(&post_json(&reader, "/api/v1/rlm/query", cq.clone()), &ctx);
    names_only(
        &post_json(&reader, "/api/v1/rlm/stream", json!({"context_id": ctx})),
        &ctx,
    );
    let stats = get(&reader, "/api/v1/rlm/stats").json();
    assert_eq!(stats["contexts"]["ids"], json!(["team-a-1"]), "{stats}");
    assert_eq!(stats["contexts"]["stored"], 1);
    assert_eq!(
        get(&reader, "/api/v1/rlm/codebase/health").json()["scopes"],
        1
    );
    let b_job = jobs["team-b-1"];
    let r = get(&reader, &format!("/api/v1/jobs/{b_job}?wait=5"));
    is_problem(&r, 404);
    assert_eq!(r.json()["error"], format!("no job {b_job}"));
    assert_eq!(
        get(&reader, &format!("/api/v1/jobs/{}", jobs["team-a-1"])).status,
        200
    );

    // The writer: team-b-* and the contexts, read and write.
    let r = post_json(
        &writer,
        "/api/v1/debates/team-b-2/turns",
        turn(1, "carol", "A new debate."),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        get(&writer, "/api/v1/debates/team-b-1/context/summary").status,
        200
    );
    names_only(
        &get(&writer, "/api/v1/debates/team-a-1/context/summary"),
        "team-a-1",
    );
    is_problem(
        &post_json(&writer, "/api/v1/debates/team-a-1/turns", t),
        403,
    );
    assert_eq!(
        get(&writer, &format!("/api/v1/rlm/context/{ctx}")).status,
        200
    );
    assert_eq!(post_json(&writer, "/api/v1/rlm/query", cq).status, 200);

    // The single token: everything; its 404s list nothing either.
    let r = get(&admin, "/api/v1/rlm/contexts?limit=100");
    assert_eq!(r.json()["total"], 5, "{r:?}");
    names_only(&get(&admin, "/api/v1/debates/nope/context/summary"), "nope");
    assert_eq!(get(&admin, &format!("/api/v1/jobs/{b_job}")).status, 200);

    // No token or a wrong one: 401; /healthz and /metrics as ever.
    let none = Server2 {
        served: &s,
        auth: vec![],
    };
    is_problem(&get(&none, "/api/v1/rlm/contexts"), 401);
    is_problem(
        &get(&as_token(&s, "Bearer a-readerX"), "/api/v1/rlm/contexts"),
        401,
    );
    assert_eq!(get(&none, "/healthz").status, 200);
    assert_eq!(get(&none, "/metrics").status, 200);
}
