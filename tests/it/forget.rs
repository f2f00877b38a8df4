//! Forget (issue 24): sources leave with every node derived from them — every level, the
//! index, vectors, citations — durably; the rest of the scope stays and is rebuilt. The CLI,
//! the HTTP DELETE routes with their token rules, PostgreSQL, and SIGKILL in the middle of
//! a forget while appends and builds run.

use crate::support::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use strata::{Config, Engine, Level};

/// The word only the forgotten document holds.
const MARKER: &str = "Vorblax";

fn forgotten_text() -> String {
    let mut t = String::from("# Vorblax\n\n");
    for i in 0..12 {
        t.push_str(&format!(
            "The Vorblax reactor {i} produced {} megawatts of Vorblax power for the harbour. \
             Engineers said the Vorblax design was unusual in paragraph {i}.\n\n",
            100 + i
        ));
    }
    t
}

fn kept_text() -> String {
    let mut t = String::from("# Orchards\n\n");
    for i in 0..12 {
        t.push_str(&format!(
            "The orchard cooperative planted {} apple trees along the river in season {i}. \
             Farmers praised the irrigation canals of plot {i}.\n\n",
            200 + i
        ));
    }
    t
}

/// `a.md` (to forget), `b.md`, and `dup.md` (the same text as `b.md`).
fn write_docs(dir: &Path) -> Vec<PathBuf> {
    vec![
        write(dir, "a.md", forgotten_text()),
        write(dir, "b.md", kept_text()),
        write(dir, "dup.md", kept_text()),
    ]
}

fn cli(db: &Path, args: &[&str]) -> String {
    let (code, out, err) = strata_cli(db, args);
    assert_eq!(code, 0, "strata {args:?}: {err}");
    out
}

fn cli_json(db: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&cli(db, &a)).unwrap()
}

/// Nothing stored, indexed or cited names `source` or holds the marker; the index holds
/// exactly the store's nodes.
fn assert_forgotten(e: &Engine, scope: &str, source: &str) {
    let now = strata::unix_now();
    let ids = e.store().node_ids().unwrap();
    for n in e.store().get_nodes(&ids).unwrap().into_iter().flatten() {
        assert!(
            !n.citations.iter().any(|c| c.source == source) || n.scope != scope,
            "{:?} node {} still cites {source}",
            n.level,
            n.id
        );
        assert!(
            !n.text.contains(MARKER),
            "{:?} node {} holds the text",
            n.level,
            n.id
        );
    }
    assert!(e.store().get_source(scope, source).unwrap().is_none());
    assert!(e.store().get_text(scope, source).unwrap().is_none());
    let hits = futures::executor::block_on(e.grep(&[], MARKER, &[], 100, now)).unwrap();
    assert!(hits.is_empty(), "the index still finds it: {hits:?}");
    assert_eq!(e.index().n_docs(), e.store().n_nodes() as u64);
    assert_eq!(e.store().n_pending_index(), 0);
}

/// The index's files hold no deleted document (a forget merges them away).
fn assert_purged(e: &Engine) {
    assert_eq!(
        e.index().deleted_docs(),
        0,
        "deleted documents left in the index files"
    );
}

#[test]
fn forgetting_a_document_removes_it_from_every_level_the_index_and_citations() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let docs = write_docs(dir.path());
    let names: Vec<&str> = docs.iter().map(|p| p.to_str().unwrap()).collect();
    let mut args = vec!["ingest", "--scope", "kb"];
    args.extend(&names);
    cli(&db, &args);
    cli(&db, &["compress", "--scope", "kb"]);
    // Before: the marker is found, at every level.
    let hits = cli_json(&db, &["grep", "--scope", "kb", "--limit", "100", MARKER]);
    let levels: std::collections::BTreeSet<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["level"].as_str().unwrap())
        .collect();
    assert!(levels.len() >= 3, "{levels:?}");

    let a = names[0];
    let r = cli_json(&db, &["forget", "--scope", "kb", a]);
    assert_eq!(r["sources"], json!([a]));
    assert_eq!(r["scope_removed"], false);
    assert_eq!(r["remaining_sources"], 2);
    assert_eq!(r["bytes"], forgotten_text().len());
    let by_level = r["nodes_by_level"].as_array().unwrap();
    assert!(by_level[Level::Full as usize].as_u64().unwrap() >= 1, "{r}");
    assert!(
        by_level[Level::Detailed as usize].as_u64().unwrap() >= 1,
        "{r}"
    );
    assert!(
        by_level[Level::Abstract as usize].as_u64().unwrap() >= 1,
        "{r}"
    );
    // Forgetting it again: it is unknown now; so is a source never ingested.
    for src in [a, "nope.md"] {
        let (code, _, err) = strata_cli(&db, &["forget", "--scope", "kb", src]);
        assert_eq!(code, 1);
        assert!(err.contains("has no source"), "{err}");
    }

    // Every level, rebuilt over what remains, never shows it.
    for level in [
        "full", "detailed", "summary", "abstract", "metadata", "auto",
    ] {
        let w = cli_json(
            &db,
            &[
                "context", "--scope", "kb", "--level", level, "--budget", "20000",
            ],
        );
        let t = w["text"].as_str().unwrap();
        assert!(!t.contains(MARKER), "{level}: {t}");
        assert!(
            t.contains("orchard") || t.contains("Orchard"),
            "{level}: {t}"
        );
    }
    assert!(
        cli_json(&db, &["grep", "--scope", "kb", MARKER])
            .as_array()
            .unwrap()
            .is_empty()
    );
    let q = cli_json(
        &db,
        &[
            "query",
            "--scope",
            "kb",
            "How many megawatts did the Vorblax reactor produce?",
        ],
    );
    assert!(!q["answer"].as_str().unwrap_or("").contains(MARKER), "{q}");
    for c in q["citations"].as_array().unwrap() {
        assert_ne!(c["source"], a, "{q}");
    }
    // The rest answers, cited: b.md and dup.md hold the same words as separate nodes, and
    // both are still there.
    let q = cli_json(
        &db,
        &[
            "query",
            "--scope",
            "kb",
            "How many apple trees did the orchard cooperative plant?",
        ],
    );
    let cited: Vec<&str> = q["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["source"].as_str().unwrap())
        .collect();
    assert!(!cited.is_empty(), "{q}");
    let hits = cli_json(
        &db,
        &[
            "grep", "--scope", "kb", "--level", "full", "--limit", "100", "orchard",
        ],
    );
    let sources: std::collections::BTreeSet<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["first_span"]["source"].as_str().unwrap())
        .collect();
    assert_eq!(
        sources,
        [names[1], names[2]].into_iter().collect(),
        "{hits}"
    );
    {
        let e = Engine::open(&db, Config::default()).unwrap();
        assert_forgotten(&e, "kb", a);
        assert_eq!(e.scope("kb").unwrap().sources.len(), 2);
    }

    // A source with the same text as another: forgetting it leaves the other whole.
    let r = cli_json(&db, &["forget", "--scope", "kb", names[2]]);
    assert_eq!(r["remaining_sources"], 1, "{r}");
    let hits = cli_json(
        &db,
        &[
            "grep", "--scope", "kb", "--level", "full", "--limit", "100", "orchard",
        ],
    );
    let sources: std::collections::BTreeSet<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["first_span"]["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, [names[1]].into_iter().collect(), "{hits}");
    let w = cli_json(
        &db,
        &[
            "context", "--scope", "kb", "--level", "full", "--budget", "20000",
        ],
    );
    assert!(w["text"].as_str().unwrap().contains("apple trees"));

    // No sources: the whole scope goes.
    let out = cli(&db, &["forget", "--scope", "kb"]);
    assert!(out.contains("the scope is gone"), "{out}");
    let (code, _, err) = strata_cli(&db, &["context", "--scope", "kb", "--budget", "100"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown scope"), "{err}");
    let e = Engine::open(&db, Config::default()).unwrap();
    assert_eq!(e.store().n_nodes(), 0);
    assert_eq!(e.index().n_docs(), 0);
}

/// A request to `s` with `token` (none: no header) on a new connection.
fn call(
    s: &Served,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> RawResponse {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", s.addr);
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    if !body.is_empty() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    raw_http(&s.addr, &format!("{head}\r\n{body}"))
        .unwrap_or_else(|| panic!("no answer to {method} {path}"))
}

const TOKENS: &str = r#"
[server]
token = "admin"

[[server.tokens]]
token = "reader"
scopes = ["team-*"]
access = "read"

[[server.tokens]]
token = "writer"
scopes = ["team-*"]
access = "write"
"#;

#[test]
fn the_delete_routes_forget_under_the_write_rules() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), TOKENS, &[]);
    for (src, text) in [("docs/a.md", forgotten_text()), ("docs/b.md", kept_text())] {
        let r = call(
            &s,
            "POST",
            "/api/v1/documents",
            Some("admin"),
            Some(json!({"scope": "team-kb", "source": src, "text": text})),
        );
        assert_eq!(r.status, 201, "{r:?}");
    }
    for (round, speaker, text) in [
        (1, "alice", "The Vorblax tram costs 420 million."),
        (2, "bob", "Buses are cheaper than trams."),
    ] {
        let r = call(
            &s,
            "POST",
            "/api/v1/debates/team-debate/turns",
            Some("admin"),
            Some(json!({"round": round, "speaker": speaker, "text": text})),
        );
        assert_eq!(r.status, 201, "{r:?}");
    }
    let r = call(
        &s,
        "POST",
        "/api/v1/documents",
        Some("admin"),
        Some(json!({"scope": "other", "source": "c.md", "text": kept_text()})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let a = "/api/v1/scopes/team-kb/sources/docs%2Fa.md";

    // No token: 401. A reader: 403. A token whose patterns miss the scope: 403 too (the
    // answer depends on the grant, never on whether the scope exists).
    assert_eq!(call(&s, "DELETE", a, None, None).status, 401);
    let r = call(&s, "DELETE", a, Some("reader"), None);
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        call(&s, "DELETE", "/api/v1/scopes/other", Some("writer"), None).status,
        403
    );
    assert_eq!(
        call(&s, "DELETE", "/api/v1/scopes/nowhere", Some("writer"), None).status,
        403
    );
    // Unknown scope, unknown source: 404.
    let r = call(
        &s,
        "DELETE",
        "/api/v1/scopes/team-none",
        Some("writer"),
        None,
    );
    assert_eq!(r.status, 404, "{r:?}");
    let r = call(
        &s,
        "DELETE",
        "/api/v1/scopes/team-kb/sources/nope.md",
        Some("writer"),
        None,
    );
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));

    // The writer forgets one document (its id URL-encoded).
    let r = call(&s, "DELETE", a, Some("writer"), None);
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["sources"], json!(["docs/a.md"]), "{v}");
    assert!(v["nodes_by_level"]["full"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["remaining_sources"], 1);
    assert_eq!(call(&s, "DELETE", a, Some("writer"), None).status, 404);
    let r = call(
        &s,
        "POST",
        "/api/v1/knowledge/query-rlm",
        Some("writer"),
        Some(
            json!({"query": "How many megawatts did the reactor produce?", "workspace_id": "team-kb"}),
        ),
    );
    assert!(!r.body.contains(MARKER), "{r:?}");

    // A debate: a scope of documents is no debate; the debate goes whole.
    assert_eq!(
        call(
            &s,
            "DELETE",
            "/api/v1/debates/team-kb",
            Some("writer"),
            None
        )
        .status,
        404
    );
    assert_eq!(
        call(
            &s,
            "DELETE",
            "/api/v1/debates/team-debate",
            Some("reader"),
            None
        )
        .status,
        403
    );
    let r = call(
        &s,
        "DELETE",
        "/api/v1/debates/team-debate",
        Some("writer"),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["scope_removed"], true);
    assert_eq!(r.json()["sources"].as_array().unwrap().len(), 2);
    let r = call(
        &s,
        "GET",
        "/api/v1/debates/team-debate/context/abstract",
        Some("writer"),
        None,
    );
    assert_eq!(r.status, 404, "{r:?}");
    // The whole scope route, under /api too.
    let r = call(&s, "DELETE", "/api/scopes/team-kb", Some("admin"), None);
    assert_eq!(r.status, 200, "{r:?}");
    drop(s);
    let e = Engine::open(&dir.path().join("db"), Config::default()).unwrap();
    assert_eq!(e.scope_names().unwrap(), vec!["other".to_string()]);
    assert_forgotten(&e, "team-kb", "docs/a.md");
    assert_forgotten(&e, "team-debate", "team-debate#turn-1");
}

#[test]
fn forgetting_on_postgres_leaves_nothing_of_the_source() {
    let Some(url) = crate::postgres::database("forget_pg") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let docs = write_docs(tmp.path());
    let e = Engine::open(
        Path::new(&url),
        crate::postgres::config_in(&tmp.path().join("idx")),
    )
    .unwrap();
    let now = strata::unix_now();
    let rt = rt();
    e.ingest_files("kb", None, &docs, now).unwrap();
    compress(&rt, &e, "kb", now);
    let a = docs[0].display().to_string();
    let r = e.forget("kb", std::slice::from_ref(&a), now).unwrap();
    assert_eq!(r.sources, vec![a.clone()]);
    assert!(r.nodes_by_level[Level::Abstract] >= 1);
    assert_forgotten(&e, "kb", &a);
    assert_purged(&e);
    compress(&rt, &e, "kb", now);
    let q = query(
        &rt,
        &e,
        "kb",
        "How many apple trees did the orchard cooperative plant?",
        now,
    );
    assert!(!q.citations.is_empty());
    assert_forgotten(&e, "kb", &a);
    e.forget("kb", &[], now).unwrap();
    assert_eq!(e.store().n_nodes(), 0);
    assert!(e.scope_names().unwrap().is_empty());
}

// ------------------------------------------------------------------ SIGKILL mid-forget

/// Appends a turn; its source id when the server acknowledged it (201).
fn append(addr: &str, round: u32, speaker: &str, text: &str) -> Option<String> {
    let body = json!({"round": round, "speaker": speaker, "text": text}).to_string();
    let r = raw_http(
        addr,
        &format!(
            "POST /api/v1/debates/talk/turns HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )?;
    (r.status == 201).then(|| r.json()["source"].as_str().unwrap().to_string())
}

/// How a forget's server dies: when it reaches a pause point, or after a delay.
enum Kill {
    At(&'static str),
    After(Duration),
}

/// `strata serve` with two clients appending turns (each append queues a build), a forget
/// of the first turn sent in the middle, and SIGKILL; then the store is opened again and
/// checked: the turn is either whole (the forget rolled back: it is run again) or gone
/// without a trace, every acknowledged append is there, and the scope still answers.
/// Returns (whether the forget was acknowledged, whether it was found rolled back).
fn forget_killed(kill: Kill) -> (bool, bool) {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(&str, &str)> = match &kill {
        Kill::At(p) => vec![("STRATA_TEST_PAUSE_AT", p)],
        Kill::After(_) => Vec::new(),
    };
    let mut s = Served::start(dir.path(), "[server]\nworkers = 2\n", &env);
    let addr = s.addr.clone();
    let marked = append(
        &addr,
        1,
        "alice",
        "The Vorblax plan costs 420 million and opens in 2031.",
    )
    .expect("the first append");
    let mut acked = Vec::new();
    for k in 0..4 {
        acked.push(
            append(
                &addr,
                1 + k / 2,
                "bob",
                &format!("Buses would cost {} million in district {k}.", 10 + k),
            )
            .unwrap(),
        );
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Each acknowledged append says so: the forget starts once appends are running.
    let (acks_tx, acks) = std::sync::mpsc::channel::<()>();
    let appenders: Vec<_> = (0..2u32)
        .map(|w| {
            let (addr, stop, acks_tx) = (addr.clone(), stop.clone(), acks_tx.clone());
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut k = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    k += 1;
                    let text = format!("Trams would carry {} riders on line {w}-{k}.", 100 * k);
                    match append(&addr, 3 + k / 4, "carol", &text) {
                        Some(id) => {
                            got.push(id);
                            let _ = acks_tx.send(());
                        }
                        None => break,
                    }
                }
                got
            })
        })
        .collect();
    drop(acks_tx);
    for _ in 0..2 {
        acks.recv_timeout(Duration::from_secs(120))
            .expect("the appenders acknowledged nothing");
    }
    let forget = {
        let addr = addr.clone();
        let path = format!("/api/v1/scopes/talk/sources/{}", marked.replace('#', "%23"));
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let status = raw_http(
                &addr,
                &format!("DELETE {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n"),
            )
            .map(|r| r.status);
            (status, t0.elapsed())
        })
    };
    match kill {
        Kill::At(point) => {
            let want = format!("paused at {point}");
            assert!(
                s.wait_for(&want, Duration::from_secs(120)).is_some(),
                "never {want}"
            );
        }
        Kill::After(d) => std::thread::sleep(d),
    }
    s.child.kill().unwrap(); // SIGKILL
    s.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (status, took) = forget.join().unwrap();
    let forget_acked = status == Some(200);
    if forget_acked {
        println!(
            "  the forget was acknowledged after {} ms",
            took.as_millis()
        );
    }
    for a in appenders {
        acked.extend(a.join().unwrap());
    }
    drop(s);

    let e = Engine::open(&dir.path().join("db"), Config::default()).unwrap();
    let rec = e.scope("talk").unwrap();
    let listed = rec.sources.iter().any(|x| x.id == marked);
    assert!(!(forget_acked && listed), "an acknowledged forget was lost");
    if listed {
        // Rolled back: the turn is whole, as before the forget; the caller retries.
        let r = e
            .store()
            .get_source("talk", &marked)
            .unwrap()
            .expect("its record");
        assert!(e.store().get_text("talk", &marked).unwrap().is_some());
        for c in &r.chunks {
            assert!(
                e.store().get_node(&c.id).unwrap().is_some(),
                "a chunk of it went"
            );
        }
        e.forget("talk", std::slice::from_ref(&marked), strata::unix_now())
            .unwrap();
    } else {
        assert!(e.store().get_source("talk", &marked).unwrap().is_none());
    }
    assert_forgotten(&e, "talk", &marked);
    let rec = e.scope("talk").unwrap();
    for id in &acked {
        assert!(
            rec.sources.iter().any(|x| &x.id == id),
            "acknowledged {id} lost"
        );
        assert!(
            e.store().get_text("talk", id).unwrap().is_some(),
            "{id}'s text lost"
        );
    }
    // The rest is intact and answers, with its levels rebuilt.
    let rt = rt();
    let now = strata::unix_now();
    let b = compress(&rt, &e, "talk", now);
    assert!(b.failures.is_empty(), "{:?}", b.failures);
    assert_forgotten(&e, "talk", &marked);
    let q = query(&rt, &e, "talk", "How much would buses cost?", now);
    assert!(!q.citations.is_empty(), "{}", q.answer);
    let w = rt
        .block_on(e.context(
            "talk",
            strata::LevelChoice::Auto,
            4000,
            now,
            &strata::NoProgress,
        ))
        .unwrap();
    assert!(!w.text.contains(MARKER));
    (forget_acked, listed)
}

#[test]
fn a_forget_killed_before_its_transaction_is_rolled_back() {
    assert_eq!(
        forget_killed(Kill::At("forget:before-commit")),
        (false, true)
    );
}

#[test]
fn a_forget_killed_after_its_transaction_is_whole_or_not_at_all() {
    let (acked, _) = forget_killed(Kill::At("forget:after-commit"));
    assert!(!acked);
}

#[test]
fn a_forget_killed_before_its_index_commit_is_completed_at_open() {
    assert_eq!(
        forget_killed(Kill::At("forget:after-flush")),
        (false, false)
    );
}

#[test]
#[ignore = "kills at random instants: scripts/crash-suite.sh runs it, with a printed seed"]
fn a_forget_killed_after_a_random_delay_leaves_no_trace() {
    let seed: u64 = match std::env::var("STRATA_CRASH_SEED") {
        Ok(v) => v.trim().parse().expect("STRATA_CRASH_SEED: a whole number"),
        Err(_) => 0,
    };
    let runs = std::env::var("STRATA_CRASH_FORGET_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64);
    // Uniform over 0-200 ms: before, during and after the forget (acknowledged 60-94 ms
    // after it was sent in a debug build on two cores). The delays used to come from one
    // multiplicative hash of seed + run, whose consecutive values differed by a few ms:
    // ten runs fell within 30-38 ms, and where a forget took longer none was acknowledged.
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut acked, mut rolled_back) = (0, 0);
    for run in 0..runs {
        let ms: u64 = rng.random_range(0..200);
        println!(
            "forget crash run {run}: seed {seed}, killed after {ms} ms (STRATA_CRASH_SEED={seed} repeats it)"
        );
        let (a, r) = forget_killed(Kill::After(Duration::from_millis(ms)));
        acked += a as u64;
        rolled_back += r as u64;
    }
    // Every figure that would be a loss is an assertion above: reaching here means 0.
    println!(
        "forget crash runs: {acked} forgets acknowledged before the kill, {rolled_back} found rolled back and forgotten again"
    );
    println!("crash-summary\tforget\t{runs}\t{runs}\t{acked} forgets\t0\t0\t0\t0\t0\t0\t{seed}");
}

// ------------------------------------------------------------------ a build across a forget

/// A sub-model whose calls wait until released, saying when the first one arrived.
struct Held {
    identity: String,
    entered: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: tokio::sync::Semaphore,
}

impl strata::model::SubModel for Held {
    fn identity(&self) -> String {
        self.identity.clone()
    }
    fn compress(
        &self,
        req: strata::model::CompressRequest,
    ) -> futures::future::BoxFuture<'_, Result<String, strata::ModelError>> {
        Box::pin(async move {
            if let Some(tx) = self.entered.lock().unwrap().take() {
                let _ = tx.send(());
            }
            let _permit = self.release.acquire().await.unwrap();
            Ok(strata::model::offline::compress(&req))
        })
    }
}

/// A build whose model calls are in flight when a forget removes their inputs writes
/// nothing over the forgotten source afterwards: no node, no view.
#[test]
fn a_build_running_across_a_forget_writes_nothing_over_it() {
    build_across_a_forget("held");
}

/// The same with the offline compressor's identity: its nodes are written in batches,
/// and a batch written after the forget holds nothing over what it forgot.
#[test]
fn an_offline_build_running_across_a_forget_writes_nothing_over_it() {
    use strata::model::SubModel;
    build_across_a_forget(&strata::model::offline::Offline.identity());
}

fn build_across_a_forget(identity: &str) {
    let dir = tempfile::tempdir().unwrap();
    let docs = write_docs(dir.path());
    let (tx, entered) = std::sync::mpsc::channel();
    let held = std::sync::Arc::new(Held {
        identity: identity.to_string(),
        entered: std::sync::Mutex::new(Some(tx)),
        release: tokio::sync::Semaphore::new(0),
    });
    let e = std::sync::Arc::new(
        Engine::open(&dir.path().join("db"), Config::default())
            .unwrap()
            .with_model(held.clone()),
    );
    let now = strata::unix_now();
    e.ingest_files("kb", None, &docs, now).unwrap();
    let rt = rt();
    let build = rt.spawn({
        let e = e.clone();
        async move { e.compress("kb", now, &strata::NoProgress).await }
    });
    entered
        .recv_timeout(Duration::from_secs(60))
        .expect("the build calls the model");
    let a = docs[0].display().to_string();
    let r = e.forget("kb", std::slice::from_ref(&a), now).unwrap();
    assert_eq!(r.sources, vec![a.clone()]);
    assert_purged(&e);
    held.release.add_permits(1 << 20);
    let _ = rt.block_on(build).unwrap(); // it may fail: its tree cites what is gone
    e.sync_index().unwrap();
    assert_forgotten(&e, "kb", &a);
    // No view of any shape (a stored view would not decode as a string: an error).
    let view = e.store().get_view::<String>("kb");
    assert!(matches!(view, Ok(None)), "a view of the old tree");
    // The next build makes the tree of what remains.
    let b = compress(&rt, &e, "kb", now);
    assert!(b.failures.is_empty(), "{:?}", b.failures);
    assert_forgotten(&e, "kb", &a);
}
