//! Shared helpers: engines on sample data, a runtime, the citation check every test that
//! queries uses, `check`, the snapshot of the offline navigator's trajectory, a flaky
//! sub-model, the in-process mock of an OpenAI-compatible API (its server half; each test
//! module routes its own endpoints), and `Server`, a `strata serve` on 127.0.0.1 with an
//! HTTP client.

use expect_test::Expect;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use strata::config::Strategy;
use strata::model::{BoxFuture, CompressRequest, ModelError, SubModel};
use strata::{Config, Engine, NoProgress, QueryResult, ScopeKind};
use tokio::sync::oneshot;

pub const T0: u64 = 1_800_000_000;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn debate_path() -> PathBuf {
    repo().join("data/debate.jsonl")
}

pub fn doc_paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("data/docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    v.sort();
    v
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An engine in memory with the debate in scope `debate` and the documents in `docs`.
pub fn samples(cfg: Config) -> Engine {
    let e = Engine::in_memory(cfg).unwrap();
    ingest_samples(&e);
    e
}

pub fn ingest_samples(e: &Engine) {
    e.ingest_files("debate", None, &[debate_path()], T0)
        .unwrap();
    e.ingest_files("docs", None, &doc_paths(), T0).unwrap();
}

pub fn compress(
    rt: &tokio::runtime::Runtime,
    e: &Engine,
    scope: &str,
    now: u64,
) -> strata::BuildReport {
    rt.block_on(e.compress(scope, now, &NoProgress)).unwrap()
}

pub fn query(
    rt: &tokio::runtime::Runtime,
    e: &Engine,
    scope: &str,
    q: &str,
    now: u64,
) -> QueryResult {
    let r = rt
        .block_on(e.query(&strata::Ask::new(&[scope.to_string()], q, now)))
        .unwrap();
    check_citations(e, &r);
    r
}

/// Invariant 3: every citation's quote is exactly the source bytes at `[start, end)`, and
/// the span lies inside one FULL chunk of that source.
pub fn check_citations(e: &Engine, r: &QueryResult) {
    for c in &r.citations {
        let scope = e
            .scope_names()
            .unwrap()
            .into_iter()
            .find(|s| e.store().get_source(s, &c.source).unwrap().is_some())
            .unwrap_or_else(|| panic!("citation of unknown source {}", c.source));
        let text = e.source_text(&scope, &c.source).unwrap();
        assert_eq!(
            &text[c.start as usize..c.end as usize],
            c.quote,
            "quote of {c:?}"
        );
        let rec = e.store().get_source(&scope, &c.source).unwrap().unwrap();
        assert!(
            rec.chunks
                .iter()
                .any(|k| k.start <= c.start && c.end <= k.end),
            "citation {c:?} is not inside one FULL chunk"
        );
    }
    assert!(
        !r.citations.is_empty() || r.answer.is_empty(),
        "uncited answer text"
    );
    assert!((0.0..=1.0).contains(&r.confidence));
}

/// The sample data as `scripts/demo.sh` builds it — the debate in scope `debate`, the four
/// addresses in `sotu`, compressed — with source ids relative to the repository
/// (`data/debate.jsonl#26`), so that nothing depends on where it is checked out. Built once
/// per test binary; queries only read it.
pub fn demo_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let read = |rel: &str, kind: ScopeKind| {
            let mut f = strata::source::read_file(&repo().join(rel), kind, u64::MAX).unwrap();
            let abs = repo().join(rel).display().to_string();
            for s in &mut f.sources {
                s.id = s.id.replacen(&abs, rel, 1);
            }
            f.path = rel.into();
            f
        };
        let e = Engine::in_memory(Config::default()).unwrap();
        e.ingest(
            "debate",
            &[read("data/debate.jsonl", ScopeKind::Debate)],
            T0,
        )
        .unwrap();
        let docs: Vec<_> = doc_paths()
            .iter()
            .map(|p| {
                let rel = p.strip_prefix(repo()).unwrap().display().to_string();
                read(&rel, ScopeKind::Doc)
            })
            .collect();
        e.ingest("sotu", &docs, T0).unwrap();
        let rt = rt();
        for scope in ["debate", "sotu"] {
            let r = compress(&rt, &e, scope, T0);
            assert!(r.failures.is_empty(), "{:?}", r.failures);
        }
        e
    })
}

/// Asks the offline navigator `question` over `scopes` of [`demo_engine`] (all when empty),
/// checks the citations, and compares the rendered result ([`render`]) with `expect`
/// (`UPDATE_EXPECT=1 cargo test` rewrites the snapshot).
pub fn check(scopes: &[&str], question: &str, expect: Expect) {
    let e = demo_engine();
    let mut qcfg = e.config().query.clone();
    qcfg.strategy = Strategy::Offline;
    let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    let r = rt()
        .block_on(e.query(&strata::Ask::new(&scopes, question, T0).settings(&qcfg)))
        .unwrap();
    check_citations(e, &r);
    expect.assert_eq(&render(&r));
}

/// A query result as a snapshot shows it: each trajectory step (action: detail), the
/// refinement history, the confidence, then each citation — source, byte span, round and
/// speaker, quote.
pub fn render(r: &QueryResult) -> String {
    let mut s = String::new();
    for step in &r.trajectory {
        let _ = writeln!(s, "{}: {}", step.action, step.detail);
    }
    for h in &r.refinement_history {
        let _ = writeln!(s, "| {h}");
    }
    let _ = writeln!(
        s,
        "= confidence {:.2}, ready {}, {} citation(s)",
        r.confidence,
        r.ready,
        r.citations.len()
    );
    for c in &r.citations {
        let who = match (c.round, &c.speaker) {
            (Some(round), Some(sp)) => format!(" (round {round}, {sp})"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "[{}..{}) {}{who}: {:?}",
            c.start, c.end, c.source, c.quote
        );
    }
    s
}

pub fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A sub-model that fails on inputs containing `poison` and otherwise delegates to the
/// offline compressor, counting calls.
pub struct Flaky {
    pub poison: &'static str,
    pub calls: AtomicU64,
    pub identity: &'static str,
}

impl Flaky {
    pub fn new(poison: &'static str, identity: &'static str) -> Arc<Flaky> {
        Arc::new(Flaky {
            poison,
            calls: AtomicU64::new(0),
            identity,
        })
    }
}

impl SubModel for Flaky {
    fn identity(&self) -> String {
        self.identity.to_string()
    }
    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if req.passages.iter().any(|p| p.text.contains(self.poison)) {
                return Err(ModelError::Unavailable("connection refused".into()));
            }
            Ok(strata::model::offline::compress(&req))
        })
    }
}

// ---------------------------------------------------------------- mock model servers

/// Serves `app` (a mock of an OpenAI-compatible API's routes) on 127.0.0.1:0 inside `rt`;
/// returns its `/v1` base URL.
pub fn serve_mock(rt: &tokio::runtime::Runtime, app: axum::Router) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

/// A base URL where nothing listens (a port bound, then released): every call is refused.
pub fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/v1")
}

// ---------------------------------------------------------------- strata serve

/// `strata::server::run` on 127.0.0.1:0 with a client that sends the configured token.
pub struct Server {
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<strata::Result<()>>>,
    http: reqwest::Client,
    token: Option<String>,
}

impl Server {
    pub async fn start(dir: &Path, cfg: Config) -> Server {
        Self::start_engine(Engine::open(dir, cfg).unwrap()).await
    }

    pub async fn start_engine(engine: Engine) -> Server {
        let cfg = engine.config().clone();
        let token = (!cfg.server.token.is_empty()).then(|| cfg.server.token.clone());
        let engine = Arc::new(engine);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(strata::server::run(engine, listener, async {
            let _ = rx.await;
        }));
        Server {
            base,
            stop: Some(tx),
            handle: Some(handle),
            http: http_client(),
            token,
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.handle.take().unwrap().await.unwrap().unwrap();
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.req(reqwest::Method::GET, path).send().await.unwrap();
        let code = r.status().as_u16();
        (code, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        (code, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_raw(&self, path: &str, body: &'static str) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::POST, path)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        (code, r.json().await.unwrap_or(Value::Null))
    }

    /// Waits (bounded) for a background job to finish: the server answers `?wait=` when
    /// the job's end is signalled, no polling.
    pub async fn wait_job(&self, id: u64) -> Value {
        let (code, j) = self.get(&format!("/api/jobs/{id}?wait=60")).await;
        assert_eq!(code, 200, "{j}");
        assert!(
            j["state"] == "done" || j["state"] == "failed",
            "job {id} did not finish: {j}"
        );
        j
    }

    pub async fn metrics(&self) -> String {
        self.req(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Snapshot check of a context window of the sample data: the level, the tokens used of
/// the budget, each node (level, tokens) in order, and the first line of every block of
/// text. Rewritten with `UPDATE_EXPECT=1` when a change is intended.
pub fn check_window(scope: &str, choice: strata::LevelChoice, budget: usize, expect: Expect) {
    let e = demo_engine();
    let w = rt()
        .block_on(e.context(scope, choice, budget, T0, &NoProgress))
        .unwrap();
    assert!(
        w.tokens <= budget,
        "{} tokens over a budget of {budget}",
        w.tokens
    );
    assert_eq!(w.tokens, strata::token::count(&w.text));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} level, {} of {} tokens, {} node(s), {} omitted",
        w.level,
        w.tokens,
        w.budget,
        w.nodes.len(),
        w.omitted
    );
    let mut levels: Vec<String> = Vec::new();
    for n in &w.nodes {
        let l = format!("{:?}", n.level).to_lowercase();
        match levels.last_mut() {
            Some(last) if last.starts_with(&format!("{l} ×")) => {
                let k: usize = last.rsplit('×').next().unwrap().trim().parse().unwrap();
                *last = format!("{l} × {}", k + 1);
            }
            _ => levels.push(format!("{l} × 1")),
        }
    }
    let _ = writeln!(s, "nodes: {}", levels.join(", "));
    // Block headers; consecutive `## Round N (level)` of one level as one range.
    let mut run: Option<(u32, u32, String)> = None;
    let flush = |s: &mut String, run: &mut Option<(u32, u32, String)>| {
        if let Some((a, b, l)) = run.take() {
            let r = if a == b {
                format!("{a}")
            } else {
                format!("{a}-{b}")
            };
            let _ = writeln!(s, "## Round {r} ({l})");
        }
    };
    for line in w.text.lines().filter(|l| l.starts_with("## ")) {
        let round = line
            .strip_prefix("## Round ")
            .and_then(|r| r.split_once(" ("))
            .and_then(|(n, l)| Some((n.parse::<u32>().ok()?, l.trim_end_matches(')'))));
        match (round, run.as_mut()) {
            (Some((n, l)), Some((_, b, rl))) if *rl == l && n == *b + 1 => *b = n,
            (Some((n, l)), _) => {
                flush(&mut s, &mut run);
                run = Some((n, n, l.to_string()));
            }
            (None, _) => {
                flush(&mut s, &mut run);
                let clipped: String = line.chars().take(90).collect();
                let _ = writeln!(s, "{clipped}");
            }
        }
    }
    flush(&mut s, &mut run);
    expect.assert_eq(&s);
}

/// Runs the `strata` binary on the store `db` (from the repository, no STRATA_* settings
/// from this environment): exit code, stdout, stderr.
pub fn strata_cli(db: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("STRATA_DB")
        .env_remove("STRATA_CONFIG")
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

// ---------------------------------------------------------------- strata serve, the binary

/// The lines a child wrote to stderr so far, whether it closed it, and a wake-up per line.
type Lines = std::sync::Arc<(std::sync::Mutex<(Vec<String>, bool)>, std::sync::Condvar)>;

/// A child's stderr as it writes it (see [`spawn_reading_stderr`]).
#[derive(Clone, Default)]
pub struct Stderr(Lines);

impl Stderr {
    /// Waits until a line contains `needle` (or `within` passes, or the child closes its
    /// stderr); that line. Woken by each new line — no polling.
    pub fn wait_for(&self, needle: &str, within: Duration) -> Option<String> {
        let (lock, cv) = &*self.0;
        let deadline = std::time::Instant::now() + within;
        let mut g = lock.lock().unwrap();
        loop {
            if let Some(l) = g.0.iter().find(|l| l.contains(needle)) {
                return Some(l.clone());
            }
            let now = std::time::Instant::now();
            if g.1 || now >= deadline {
                return None;
            }
            g = cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// The `http://127.0.0.1:PORT` a `strata serve` says it serves on.
    pub fn serving_url(&self, within: Duration) -> Option<String> {
        let line = self.wait_for("serving on http://", within)?;
        let rest = &line[line.find("http://")?..];
        rest.split_whitespace().next().map(str::to_string)
    }
}

/// Starts `c` with its stderr read line by line on a thread, each line appended to `log`.
pub fn spawn_reading_stderr(
    c: &mut std::process::Command,
    log: &Path,
) -> (std::process::Child, Stderr) {
    use std::io::{BufRead, Write};
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = c.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let lines = Stderr::default();
    let shared = lines.0.clone();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(out, "{line}");
            shared.0.lock().unwrap().0.push(line);
            shared.1.notify_all();
        }
        shared.0.lock().unwrap().1 = true;
        shared.1.notify_all();
    });
    (child, lines)
}

/// `strata serve` run as the real binary on 127.0.0.1 (a port the system picks), its store
/// in `dir`, with a TOML `config` and `STRATA_*` variables; killed when dropped. Its stderr
/// is read line by line (and copied to `dir/serve.log`): [`Served::wait_for`] waits for a
/// line, woken by each new one — no polling.
pub struct Served {
    pub child: std::process::Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    lines: Stderr,
}

impl Served {
    /// Starts it and waits (bounded) until it says where it serves.
    pub fn start(dir: &Path, config: &str, env: &[(&str, &str)]) -> Served {
        let cfg = dir.join("serve.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_strata"));
        c.arg("--db")
            .arg(dir.join("db"))
            .arg("--config")
            .arg(&cfg)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("STRATA_")) {
            c.env_remove(k);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let (child, lines) = spawn_reading_stderr(&mut c, &dir.join("serve.log"));
        let Some(url) = lines.serving_url(Duration::from_secs(60)) else {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            panic!("strata serve would not start: {}", log.trim());
        };
        Served {
            child,
            addr: url.trim_start_matches("http://").to_string(),
            lines,
        }
    }

    /// Waits until a line of its stderr contains `needle` (or `within` passes, or it
    /// exits); that line.
    pub fn wait_for(&self, needle: &str, within: Duration) -> Option<String> {
        self.lines.wait_for(needle, within)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response read off the socket.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Sends `request` (head and body exactly as written; `Connection: close` is added to the
/// head) on a new connection and reads the response until the server closes it; `None`
/// when the connection fails or no response comes within 60 s.
pub fn raw_http(addr: &str, request: &str) -> Option<RawResponse> {
    use std::io::{Read, Write};
    let (head, body) = request.split_once("\r\n\r\n").unwrap_or((request, ""));
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .ok()?;
    s.write_all(format!("{head}\r\nConnection: close\r\n\r\n{body}").as_bytes())
        .ok()?;
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(RawResponse {
        status,
        headers,
        body: body.to_string(),
    })
}

/// Waits for `child` to exit, at most `within` (`None`: still running; the caller kills
/// it). A thread blocks in `waitpid` and reports the exit: no polling. The child is reaped
/// here, so a later `Child::wait` on it errs.
pub fn wait_exit(
    child: &std::process::Child,
    within: Duration,
) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let pid = rustix::process::Pid::from_child(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(rustix::process::waitpid(
            Some(pid),
            rustix::process::WaitOptions::empty(),
        ));
    });
    match rx.recv_timeout(within) {
        Ok(Ok(Some((_, st)))) => Some(std::process::ExitStatus::from_raw(st.as_raw())),
        _ => None,
    }
}

/// An HTTP client for the tests' servers. reqwest's TLS is rustls without a built-in
/// crypto provider (strata's choice: ring, installed before a client is made), so the
/// provider is installed here first, as strata does.
pub fn http_client() -> reqwest::Client {
    http_client_builder().build().expect("an HTTP client")
}

pub fn http_client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}
