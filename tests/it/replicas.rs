//! Two `strata serve` replicas on one PostgreSQL database (issue 13): clients append to the
//! same debates through both while both build in the background, one replica is killed
//! with SIGKILL in the middle of a build, and then:
//! - no acknowledged append is lost or duplicated, each is in order and under its own id;
//! - the build the dead replica held is taken back by the other once its lease runs out,
//!   and every job ends exactly once (`done`; the killed one on its second attempt);
//! - the killed replica, restarted, catches up from the change feed, and context windows
//!   and answers are identical on both replicas.
//!
//! The sub-model is a mock OpenAI-compatible server on 127.0.0.1 whose answers can be held
//! back: holding them while a job the replica claimed after the hold began is running
//! makes "in the middle of a build" certain rather than a matter of timing.

use crate::support::*;
use axum::Router;
use axum::extract::State;
use axum::routing::post as route_post;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

const DEBATES: usize = 3;
const CLIENTS: usize = 6;
const LEASE_MS: &str = "1500";

// ------------------------------------------------------------------ the mock model

/// Replica A calls the mock under `/a/v1`, B under `/b/v1` (the base URL is not part of
/// a compressor's identity, so both make the same nodes). A's answers are held while
/// `hold` is true; `held` counts A's requests waiting.
#[derive(Clone)]
struct Mock {
    hold: watch::Receiver<bool>,
    held: Arc<watch::Sender<usize>>,
}

async fn chat_a(State(m): State<Mock>, body: axum::Json<Value>) -> axum::Json<Value> {
    if *m.hold.borrow() {
        m.held.send_modify(|n| *n += 1);
        let mut hold = m.hold.clone();
        let _ = hold.wait_for(|h| !*h).await;
        m.held.send_modify(|n| *n -= 1);
    }
    chat(body).await
}

async fn chat_b(body: axum::Json<Value>) -> axum::Json<Value> {
    chat(body).await
}

/// The first sentence of the first passage: faithful and short, after a short delay.
async fn chat(axum::Json(body): axum::Json<Value>) -> axum::Json<Value> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let user = body["messages"][1]["content"].as_str().unwrap_or_default();
    let passage = user
        .split("<passage")
        .nth(1)
        .and_then(|p| p.split_once(">\n"))
        .map(|(_, b)| b.split("\n</passage>").next().unwrap_or_default())
        .unwrap_or_default();
    let first = match passage.find(". ") {
        Some(i) => &passage[..=i],
        None => passage,
    };
    axum::Json(json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": "mock",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": first.trim()},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

// ------------------------------------------------------------------ the replicas

struct Replica {
    child: Child,
    base: String,
}

/// A replica is never left running, even when the test fails.
impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strata(url: &str, tmp: &Path, model_url: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("STRATA_") {
            c.env_remove(k);
        }
    }
    c.arg("--db")
        .arg(url)
        .current_dir(tmp)
        .env("STRATA_STORE_INDEX_DIR", tmp.join("indexes"))
        .env("STRATA_MODEL_SUB", "openai:mock")
        .env("STRATA_MODEL_BASE_URL", model_url)
        .env("STRATA_SERVER_JOB_LEASE_MS", LEASE_MS)
        .env("STRATA_SERVER_SHUTDOWN_GRACE_SECS", "1")
        .env("STRATA_STORE_TTL_SECS", "0");
    c
}

/// Starts a replica on a port the system picks; waits (bounded) for the line saying where
/// it serves (its stderr, read line by line and copied to `serve.log`).
fn start(_rt: &tokio::runtime::Runtime, url: &str, tmp: &Path, model_url: &str) -> Replica {
    let mut c = strata(url, tmp, model_url);
    c.args(["serve", "--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let (mut child, stderr) = spawn_reading_stderr(&mut c, &tmp.join("serve.log"));
    match stderr.serving_url(Duration::from_secs(120)) {
        Some(base) => Replica { child, base },
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "strata serve would not start: {}",
                std::fs::read_to_string(tmp.join("serve.log")).unwrap_or_default()
            );
        }
    }
}

// ------------------------------------------------------------------ the database

fn sql(rt: &tokio::runtime::Runtime, url: &str, q: &str) -> Vec<tokio_postgres::Row> {
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let rows = c.query(q, &[]).await.unwrap();
        drop(c);
        let _ = driver.await;
        rows
    })
}

/// Running jobs: (id, owner).
fn running(rt: &tokio::runtime::Runtime, url: &str) -> Vec<(i64, String)> {
    sql(
        rt,
        url,
        "SELECT id, owner FROM jobs WHERE state = 'running' ORDER BY id",
    )
    .iter()
    .map(|r| (r.get(0), r.get::<_, Option<String>>(1).unwrap_or_default()))
    .collect()
}

// ------------------------------------------------------------------ the clients

struct Ack {
    debate: usize,
    text: String,
    source: String,
    start: Instant,
    acked: Instant,
}

#[derive(Default)]
struct Log {
    acks: Vec<Ack>,
    sent: Vec<(usize, String)>,
    refused: Vec<String>,
}

/// Appends turns to debate `ci % DEBATES` through the live replica `ci % n`, moving to
/// another when its replica dies.
async fn client(
    ci: usize,
    live: watch::Receiver<Vec<String>>,
    rounds: Arc<Vec<AtomicU32>>,
    stop: Arc<AtomicBool>,
    acked_so_far: Arc<watch::Sender<usize>>,
) -> Log {
    let http = crate::support::http_client_builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let debate = ci % DEBATES;
    let mut log = Log::default();
    let mut k = 0;
    while !stop.load(Ordering::SeqCst) {
        let bases = live.borrow().clone();
        let base = &bases[ci % bases.len()];
        k += 1;
        let start = Instant::now();
        let round = if k % 7 == 0 {
            rounds[debate].fetch_add(1, Ordering::SeqCst) + 1
        } else {
            rounds[debate].load(Ordering::SeqCst)
        };
        let text = format!(
            "Turn c{ci}-{k:04} says the levy on depot {k} should be {} crowns. It adds more.",
            ci * 1000 + k
        );
        log.sent.push((debate, text.clone()));
        let body = json!({"round": round, "speaker": format!("speaker-{ci}"), "text": text});
        match http
            .post(format!("{base}/api/debates/debate-{debate}/turns"))
            .json(&body)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => {
                let acked = Instant::now();
                acked_so_far.send_modify(|n| *n += 1);
                let v: Value = r.json().await.unwrap_or(Value::Null);
                log.acks.push(Ack {
                    debate,
                    text,
                    source: v["source"].as_str().unwrap_or_default().to_string(),
                    start,
                    acked,
                });
            }
            Ok(r) => {
                let s = r.status();
                log.refused
                    .push(format!("{s}: {}", r.text().await.unwrap_or_default()));
            }
            // The replica died under the request: not acknowledged; the next one goes
            // to a live replica.
            Err(_) => tokio::task::yield_now().await,
        }
    }
    log
}

async fn get(base: &str, path: &str) -> Value {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

async fn post(base: &str, path: &str, body: Value) -> Value {
    let r = crate::support::http_client()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

fn sigkill(child: &mut Child) {
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9));
}

#[test]
fn two_replicas_one_killed_mid_build_lose_nothing_and_agree() {
    let Some(url) = crate::postgres::database("two_replicas") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rt = rt();
    let (hold_tx, hold) = watch::channel(false);
    let held = Arc::new(watch::channel(0usize).0);
    let app = Router::new()
        .route("/a/v1/chat/completions", route_post(chat_a))
        .route("/b/v1/chat/completions", route_post(chat_b))
        .with_state(Mock {
            hold,
            held: held.clone(),
        });
    let mock = serve_mock(&rt, app);
    let mock = mock.trim_end_matches("/v1");
    let (model_a, model_b) = (format!("{mock}/a/v1"), format!("{mock}/b/v1"));

    let mut a = start(&rt, &url, tmp.path(), &model_a);
    let b = start(&rt, &url, tmp.path(), &model_b);
    let (live_tx, live) = watch::channel(vec![a.base.clone(), b.base.clone()]);
    let rounds: Arc<Vec<AtomicU32>> = Arc::new((0..DEBATES).map(|_| AtomicU32::new(1)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(watch::channel(0usize).0);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|ci| {
            rt.spawn(client(
                ci,
                live.clone(),
                rounds.clone(),
                stop.clone(),
                acked.clone(),
            ))
        })
        .collect();

    // Hold A's model answers: once one of A's calls is waiting, A holds a job in the
    // middle of its build (builds are A's only model calls here). Woken by the mock, not
    // polled.
    hold_tx.send_replace(true);
    let mut waiting = held.subscribe();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), waiting.wait_for(|n| *n > 0)).await
    })
    .expect("replica A made no model call while holding a job")
    .unwrap();
    let a_name = |owner: &str| owner.ends_with("replica-1");
    sigkill(&mut a.child);
    live_tx.send_replace(vec![b.base.clone()]);
    // The jobs the dead replica held: it died in the middle of their builds.
    let killed: Vec<i64> = running(&rt, &url)
        .into_iter()
        .filter(|(_, o)| a_name(o))
        .map(|(id, _)| id)
        .collect();
    assert!(!killed.is_empty());
    hold_tx.send_replace(false);

    // B takes the dead replica's builds back once their lease runs out, and ends them.
    for id in &killed {
        let j = rt.block_on(get(&b.base, &format!("/api/jobs/{id}?wait=60")));
        assert_eq!(j["state"], "done", "job {id}: {j}");
        assert_eq!(j["attempts"], 2, "job {id}: {j}");
    }

    // A comes back (same index directory, same replica name) and serves again.
    let a = start(&rt, &url, tmp.path(), &model_a);
    live_tx.send_replace(vec![a.base.clone(), b.base.clone()]);
    // Appends go through both again: wait for a few dozen more acknowledgements.
    let mut acks = acked.subscribe();
    let target = *acks.borrow() + 40;
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), acks.wait_for(|n| *n >= target)).await
    })
    .expect("appends stalled after the restart")
    .unwrap();
    stop.store(true, Ordering::SeqCst);
    let logs: Vec<Log> = clients
        .into_iter()
        .map(|h| rt.block_on(h).unwrap())
        .collect();

    // Build everything that is left (through A), and wait for it.
    for d in 0..DEBATES {
        let v = rt.block_on(post(
            &a.base,
            &format!("/api/debates/debate-{d}/compress"),
            Value::Null,
        ));
        let id = v["job_id"].as_u64().unwrap();
        let j = rt.block_on(get(&a.base, &format!("/api/jobs/{id}?wait=60")));
        assert_eq!(j["state"], "done", "{j}");
    }
    // Every job ended exactly once: none queued, running or failed; each done once (the
    // end of a job is recorded only by the replica holding its claim).
    let states: HashMap<String, i64> =
        sql(&rt, &url, "SELECT state, count(*) FROM jobs GROUP BY state")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    assert_eq!(
        states.keys().collect::<Vec<_>>(),
        vec!["done"],
        "{states:?}"
    );

    let acks: Vec<&Ack> = logs.iter().flat_map(|l| &l.acks).collect();
    eprintln!(
        "replicas: {} appends acknowledged, {} sent; jobs {killed:?} killed mid-build on A and finished by B; {} jobs, all done",
        acks.len(),
        logs.iter().map(|l| l.sent.len()).sum::<usize>(),
        states.values().sum::<i64>()
    );
    let refused: Vec<&String> = logs.iter().flat_map(|l| &l.refused).collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
    assert!(acks.len() > 20, "only {} appends acknowledged", acks.len());
    let ids: HashSet<&str> = acks.iter().map(|a| a.source.as_str()).collect();
    assert_eq!(ids.len(), acks.len(), "a source id was given twice");

    for d in 0..DEBATES {
        let scope = format!("debate-{d}");
        let full: Vec<String> = [&a.base, &b.base]
            .iter()
            .map(|base| {
                rt.block_on(get(
                    base,
                    &format!("/api/debates/{scope}/context/full?budget=100000000"),
                ))["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(full[0], full[1], "{scope}: the replicas disagree");
        let full = &full[0];
        let sent: Vec<&String> = logs
            .iter()
            .flat_map(|l| &l.sent)
            .filter(|(dd, _)| *dd == d)
            .map(|(_, t)| t)
            .collect();
        for t in &sent {
            assert!(
                full.matches(t.as_str()).count() <= 1,
                "{scope}: `{t}` twice"
            );
        }
        let mine: Vec<&&Ack> = acks.iter().filter(|a| a.debate == d).collect();
        let mut placed = Vec::new();
        for a in &mine {
            let pos = full
                .find(a.text.as_str())
                .unwrap_or_else(|| panic!("{scope}: acknowledged `{}` lost", a.text));
            placed.push((a, pos));
        }
        // Order: an append acknowledged before another was sent comes first.
        for (x, px) in &placed {
            for (y, py) in &placed {
                if x.acked < y.start {
                    assert!(px < py, "{scope}: `{}` placed after `{}`", x.text, y.text);
                }
            }
        }
        // Context and answers are identical on both replicas.
        let ctx: Vec<Value> = [&a.base, &b.base]
            .iter()
            .map(|base| {
                rt.block_on(get(
                    base,
                    &format!("/api/debates/{scope}/context/auto?budget=1500"),
                ))
            })
            .collect();
        assert_eq!(ctx[0]["text"], ctx[1]["text"], "{scope}");
        assert!(ctx[0]["stale_levels"].as_array().unwrap().is_empty());
        let q = json!({"query": "Which levy on a depot was proposed?", "strategy": "offline"});
        let ans: Vec<Value> = [&a.base, &b.base]
            .iter()
            .map(|base| {
                rt.block_on(post(
                    base,
                    &format!("/api/debates/{scope}/query-rlm"),
                    q.clone(),
                ))
            })
            .collect();
        assert_eq!(ans[0]["answer"], ans[1]["answer"], "{scope}");
        assert_eq!(ans[0]["citations"], ans[1]["citations"], "{scope}");
        assert!(
            !ans[0]["citations"].as_array().unwrap().is_empty(),
            "{scope}"
        );
    }

    // Both serving replicas' indexes are current (they synced for the queries).
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["--json", "--db", &url, "stats"])
        .env("STRATA_STORE_INDEX_DIR", tmp.path().join("indexes"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let replicas = stats["replicas"].as_array().unwrap();
    for r in replicas {
        let name = r["name"].as_str().unwrap();
        if name.ends_with("replica-1") || name.ends_with("replica-2") {
            assert_eq!(r["behind"], 0, "{r}");
        }
    }
    assert!(replicas.len() >= 3, "{replicas:?}");
    let log = std::fs::read_to_string(tmp.path().join("serve.log")).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}
