//! The PostgreSQL store (issue 13) on a throwaway cluster this test binary starts itself
//! (`strata::store::postgres::scratch`: initdb into a temporary directory, the server on a
//! free port of 127.0.0.1). Skipped, with a line saying so, where PostgreSQL is not
//! installed — except under `STRATA_REQUIRE_POSTGRES=1` (CI), where that fails.
//!
//! Here: the engine on PostgreSQL answers exactly as on a directory; CLI commands work
//! next to a running `strata serve` on the same database (on a directory they cannot).
//! The multi-replica SIGKILL test is in `replicas.rs`; the store-vs-model property test in
//! `props.rs`.

use crate::support::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use strata::store::postgres::scratch::Scratch;
use strata::{Config, Engine, LevelChoice, NoProgress};

/// A fresh database of this binary's cluster, or `None` (skipped).
pub fn database(test: &str) -> Option<String> {
    Some(Scratch::for_test(test)?.database().unwrap())
}

/// A configuration whose replica indexes live under `dir`.
pub fn config_in(dir: &Path) -> Config {
    let mut cfg = Config::default();
    cfg.store.index_dir = dir.display().to_string();
    cfg
}

#[test]
fn the_engine_answers_on_postgres_exactly_as_on_a_directory() {
    let Some(url) = database("postgres_engine") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rt = rt();
    let sled = Engine::open(&tmp.path().join("db"), Config::default()).unwrap();
    let pg = Engine::open(Path::new(&url), config_in(&tmp.path().join("idx"))).unwrap();
    let q = "What share of Eastgate households do not own a car?";
    let mut outputs = Vec::new();
    for e in [&sled, &pg] {
        ingest_samples(e);
        for scope in ["debate", "docs"] {
            let r = compress(&rt, e, scope, T0);
            assert!(r.failures.is_empty(), "{:?}", r.failures);
        }
        let w = rt
            .block_on(e.context("debate", LevelChoice::Auto, 1500, T0, &NoProgress))
            .unwrap();
        let a = query(&rt, e, "debate", q, T0);
        let g = rt
            .block_on(e.grep(&[], "abolish slavery", &[], 5, T0))
            .unwrap();
        let s = e.stats(T0).unwrap();
        outputs.push((
            w.text,
            render(&a),
            g.iter().map(|h| h.id.clone()).collect::<Vec<_>>(),
            s.nodes,
            s.indexed_docs,
            s.unindexed,
        ));
    }
    assert!(!outputs[0].1.is_empty());
    assert_eq!(outputs[0], outputs[1]);
    // The engine on PostgreSQL is a replica: stats name it, current.
    let s = pg.stats(T0).unwrap();
    assert_eq!(s.replicas.len(), 1);
    assert!(s.replicas[0].this && s.replicas[0].behind == 0, "{s:?}");

    // Reopened (a new process would do the same), its index is still there and current;
    // a second engine at once gets an index of its own, built from the database.
    drop(pg);
    let pg = Engine::open(Path::new(&url), config_in(&tmp.path().join("idx"))).unwrap();
    let other = Engine::open(Path::new(&url), config_in(&tmp.path().join("idx"))).unwrap();
    for e in [&pg, &other] {
        assert_eq!(e.index().n_docs(), e.store().n_nodes() as u64);
        assert_eq!(render(&query(&rt, e, "debate", q, T0)), outputs[0].1);
    }
    assert!(tmp.path().join("idx/replica-2/index").is_dir());
    // An append through one is found by a query through the other.
    let turn = strata::source::Turn {
        round: 9,
        speaker: "Okafor".into(),
        text: "The depot on Quarry Lane stores exactly 417 snowploughs.".into(),
        time: None,
    };
    pg.append("debate", turn, T0).unwrap();
    let a = query(
        &rt,
        &other,
        "debate",
        "How many snowploughs does the depot store?",
        T0,
    );
    assert!(a.answer.contains("417"), "{}", render(&a));
}

fn strata(url: &str, index: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.arg("--db")
        .arg(url)
        .current_dir(repo())
        .env_remove("STRATA_CONFIG")
        .env("STRATA_STORE_INDEX_DIR", index);
    c
}

fn run(mut c: Command) -> (bool, String, String) {
    let out = c.stdin(Stdio::null()).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_commands_work_next_to_a_running_server() {
    let Some(url) = database("postgres_cli") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path();
    let rt = rt();
    let server = rt.block_on(Server::start(Path::new(&url), config_in(idx)));
    let (ok, out, err) = run({
        let mut c = strata(&url, idx);
        c.args(["ingest", "--scope", "debate", "data/debate.jsonl"]);
        c
    });
    assert!(ok && out.contains("176 added"), "{out}{err}");
    // The server sees the CLI's ingest: compress through it, wait for the job.
    let (code, v) = rt.block_on(server.post("/api/debates/debate/compress?wait=0", Value::Null));
    assert_eq!(code, 202, "{v}");
    let job = rt.block_on(server.wait_job(v["job_id"].as_u64().unwrap()));
    assert_eq!(job["state"], "done", "{job}");
    // ...and the CLI sees the server's build: nothing left to build.
    let (ok, out, err) = run({
        let mut c = strata(&url, idx);
        c.args(["compress", "--scope", "debate"]);
        c
    });
    assert!(ok && out.contains("built 0 nodes"), "{out}{err}");
    let (ok, out, err) = run({
        let mut c = strata(&url, idx);
        c.args([
            "--json",
            "query",
            "--scope",
            "debate",
            "What share of Eastgate households do not own a car?",
        ]);
        c
    });
    assert!(ok, "{err}");
    let cli: Value = serde_json::from_str(&out).unwrap();
    let (code, http) = rt.block_on(server.post(
        "/api/debates/debate/query-rlm",
        serde_json::json!({"query": "What share of Eastgate households do not own a car?"}),
    ));
    assert_eq!(code, 200, "{http}");
    assert_eq!(cli["answer"], http["answer"]);
    assert!(!cli["answer"].as_str().unwrap().is_empty());
    // stats shows both replicas: the server's and the CLI's own.
    let (ok, out, err) = run({
        let mut c = strata(&url, idx);
        c.args(["stats"]);
        c
    });
    assert!(ok, "{err}");
    assert_eq!(out.matches("  replica ").count(), 2, "{out}");
    assert!(out.contains("(this process): index current"), "{out}");
    rt.block_on(server.stop());

    // The password never reaches a message; an unreachable database is one line.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (ok, _, err) = run({
        let mut c = strata(
            &format!("postgres://strata:hunter2@127.0.0.1:{port}/x"),
            idx,
        );
        c.args(["stats"]);
        c
    });
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot reach PostgreSQL") && !err.contains("hunter2"),
        "{err}"
    );
}
