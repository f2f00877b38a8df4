//! Load measurement of `strata serve`: many concurrent clients appending turns, asking for
//! context windows and running queries against one in-process server on 127.0.0.1, for a
//! fixed time, with background compression running (every append schedules a build).
//!
//! `cargo bench --bench load` (env: LOAD_CLIENTS, default 16; LOAD_SECS, default 15;
//! LOAD_SEED_TURNS, default 400; LOAD_STORE, default `sled`). Prints a Markdown table;
//! writes target/bench-load.json (target/bench-load-STORE.json for another store).
//!
//! LOAD_STORE: `sled` (one server on a directory store), `postgres` (one replica on a
//! PostgreSQL database) or `postgres2` (two replicas on one database, each with its own
//! server and index; the clients alternate between them). PostgreSQL is a throwaway
//! cluster the bench starts itself with fsync on (`strata::store::postgres::scratch`), so
//! an append is as durable as sled's flush.

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::{Config, Engine};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Samples {
    ms: Vec<f64>,
    errors: u64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let clients = env("LOAD_CLIENTS", 16) as usize;
    let secs = env("LOAD_SECS", 15);
    let seed_turns = env("LOAD_SEED_TURNS", 400) as u32;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = std::env::var("LOAD_STORE").unwrap_or_else(|_| "sled".into());
    let replicas = match store.as_str() {
        "sled" | "postgres" => 1,
        "postgres2" => 2,
        s => panic!("LOAD_STORE={s}: expected sled, postgres or postgres2"),
    };
    // Kept alive for the whole run (dropping it stops the cluster).
    let cluster = (store != "sled").then(|| {
        strata::store::postgres::scratch::Scratch::start(true)
            .unwrap_or_else(|e| panic!("LOAD_STORE={store} needs PostgreSQL: {e}"))
    });
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let engines: Vec<Arc<Engine>> = match &cluster {
            None => vec![Arc::new(Engine::open(dir.path(), Config::default()).unwrap())],
            Some(pg) => {
                let url = pg.database().unwrap();
                let mut cfg = Config::default();
                cfg.store.index_dir = dir.path().display().to_string();
                (0..replicas)
                    .map(|_| Arc::new(Engine::open(std::path::Path::new(&url), cfg.clone()).unwrap()))
                    .collect()
            }
        };
        let engine = engines[0].clone();
        // Seed a debate so context and query have something to chew on.
        let now = strata::unix_now();
        for i in 0..seed_turns {
            let turn = strata::source::Turn {
                round: i / 4 + 1,
                speaker: ["ana", "ben", "cai", "dee"][i as usize % 4].into(),
                text: format!(
                    "In round {} I propose budget line {} of ${} million for the {} district, to finish by {}.",
                    i / 4 + 1, i, 10 + i % 90, ["north", "south", "east", "west"][i as usize % 4], 2030 + i % 10
                ),
                time: None,
            };
            engine.append("load", turn, now).unwrap();
        }
        let t0 = Instant::now();
        engine.compress("load", now, &strata::NoProgress).await.unwrap();
        eprintln!("{store}: seeded {seed_turns} turns, built in {:.2}s", t0.elapsed().as_secs_f64());

        let mut bases = Vec::new();
        let mut servers = Vec::new();
        for e in &engines {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            bases.push(format!("http://{}", listener.local_addr().unwrap()));
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(strata::server::run(e.clone(), listener, async {
                let _ = stop_rx.await;
            }));
            servers.push((stop_tx, server));
        }

        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for c in 0..clients {
            let base = bases[c % bases.len()].clone();
            tasks.push(tokio::spawn(async move {
                let http = http_client();
                let (mut append, mut context, mut query) =
                    (Samples::default(), Samples::default(), Samples::default());
                let mut i = 0u64;
                while Instant::now() < deadline {
                    i += 1;
                    let t = Instant::now();
                    let (ok, bucket) = match (i + c as u64) % 10 {
                        0..=2 => {
                            let r = http
                                .post(format!("{base}/api/debates/load/turns"))
                                .json(&json!({"round": 10_000 + i, "speaker": format!("client{c}"),
                                    "text": format!("Client {c} adds point {i}: the ferry needs {} berths.", i % 40 + 2)}))
                                .send()
                                .await;
                            (r.is_ok_and(|r| r.status().as_u16() == 201), &mut append)
                        }
                        3..=7 => {
                            let r = http
                                .get(format!("{base}/api/debates/load/context/auto?budget=1500"))
                                .send()
                                .await;
                            (r.is_ok_and(|r| r.status().is_success()), &mut context)
                        }
                        _ => {
                            let r = http
                                .post(format!("{base}/api/debates/load/query-rlm"))
                                .json(&json!({"query": format!("what budget line did dee propose for the west district in round {}?", i % 100 + 1)}))
                                .send()
                                .await;
                            let ok = match r {
                                Ok(r) if r.status().is_success() => true,
                                Ok(r) => {
                                    if query.errors == 0 {
                                        eprintln!("query error {}: {}", r.status(), r.text().await.unwrap_or_default());
                                    }
                                    false
                                }
                                Err(e) => {
                                    eprintln!("query error: {e}");
                                    false
                                }
                            };
                            (ok, &mut query)
                        }
                    };
                    bucket.ms.push(t.elapsed().as_secs_f64() * 1000.0);
                    if !ok {
                        bucket.errors += 1;
                    }
                }
                (append, context, query)
            }));
        }
        let mut all = [Samples::default(), Samples::default(), Samples::default()];
        for t in tasks {
            let (a, c, q) = t.await.unwrap();
            for (slot, s) in all.iter_mut().zip([a, c, q]) {
                slot.ms.extend(s.ms);
                slot.errors += s.errors;
            }
        }
        let http = http_client();
        let mut built = Vec::new();
        for (base, (stop_tx, server)) in bases.iter().zip(servers) {
            let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
            built.push(
                metrics
                    .lines()
                    .find(|l| l.starts_with("strata_compression_calls_total"))
                    .unwrap_or("")
                    .to_string(),
            );
            let _ = stop_tx.send(());
            server.await.unwrap().unwrap();
        }

        let total: usize = all.iter().map(|s| s.ms.len()).sum();
        let errors: u64 = all.iter().map(|s| s.errors).sum();
        println!("| op | requests | req/s | p50 ms | p99 ms | max ms | errors |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        let mut json_ops = Vec::new();
        for (name, s) in ["append", "context auto 1500", "query-rlm"].iter().zip(all.iter_mut()) {
            let n = s.ms.len();
            let (p50, p99, max) = (pct(&mut s.ms, 0.5), pct(&mut s.ms, 0.99), pct(&mut s.ms, 1.0));
            println!("| {name} | {n} | {:.1} | {p50:.1} | {p99:.1} | {max:.1} | {} |", n as f64 / secs as f64, s.errors);
            json_ops.push(json!({"op": name, "requests": n, "p50_ms": p50, "p99_ms": p99, "max_ms": max, "errors": s.errors}));
        }
        println!("| **all** | {total} | {:.1} | | | | {errors} |", total as f64 / secs as f64);
        println!("\n{store}, {} server(s), {clients} clients, {secs} s, seed {seed_turns} turns; background builds: {}", bases.len(), built.join("; "));
        let out = json!({"store": store, "servers": bases.len(), "clients": clients, "seconds": secs, "seed_turns": seed_turns, "ops": json_ops, "errors": errors, "total": total});
        let _ = std::fs::create_dir_all("target");
        let file = if store == "sled" { "target/bench-load.json".to_string() } else { format!("target/bench-load-{store}.json") };
        std::fs::write(file, serde_json::to_string_pretty(&out).unwrap()).unwrap();
        assert_eq!(errors, 0, "the load run had errors");
    });
}

/// An HTTP client: reqwest's TLS is rustls without a built-in crypto provider (strata
/// installs ring before it makes a client), so the provider is installed first.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
