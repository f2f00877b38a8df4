//! Issue 20 (part 4): what one ingest may cost. A source over `ingest.max_source_mb` is
//! refused before it is read, in one line, writing nothing; a large single-line source
//! under it is ingested in memory a bounded multiple of its size; a debate transcript sent
//! to a document scope is refused with the way to ingest it as a debate.

use crate::support::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn strata(db: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.arg("--db")
        .arg(db)
        .env_remove("STRATA_DB")
        .env_remove("STRATA_CONFIG")
        .env_remove("STRATA_INGEST_MAX_SOURCE_MB")
        .current_dir(repo());
    c
}

fn run(c: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

/// The scopes `strata stats --json` lists.
fn scopes(db: &Path) -> Vec<Value> {
    let (code, out, err) = run(strata(db).args(["stats", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["scopes"].as_array().unwrap().clone()
}

/// Expects exit 1 and one line on stderr that contains every part of `expect`.
fn check_refused((code, out, err): (i32, String, String), expect: &[&str]) {
    assert_eq!(code, 1, "stdout {out:?}, stderr {err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for e in expect {
        assert!(err.contains(e), "expected {e:?} in {err:?}");
    }
}

/// `n` bytes of short words and spaces without a line break or a sentence end: one
/// paragraph and one sentence, the chunker's worst case (one piece per word).
fn one_line_of_words(n: usize) -> String {
    const WORDS: &[&str] = &[
        "the", "of", "and", "tram", "depot", "river", "budget", "a", "vote", "in", "council", "is",
        "for", "bus", "line", "cost", "we", "not",
    ];
    let mut s = String::with_capacity(n + 16);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while s.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        s.push(' ');
    }
    s.truncate(n);
    s
}

#[test]
fn a_source_over_the_limit_is_refused_in_one_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // The default limit (64 MB): a sparse file one byte over it is refused by its size,
    // before a byte of it is read.
    let big = dir.path().join("big.md");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    check_refused(
        run(strata(&db).args(["ingest", "--scope", "s", big.to_str().unwrap()])),
        &[
            "error: ",
            "big.md is 64.0 MB, over the limit of 64 MB for one source (ingest.max_source_mb)",
        ],
    );
    // A limit set in the environment; every file is checked before any is written.
    let ok = write(dir.path(), "ok.md", "A small document about the tram.\n");
    let two = write(dir.path(), "two.md", one_line_of_words(2 << 20));
    check_refused(
        run(strata(&db)
            .env("STRATA_INGEST_MAX_SOURCE_MB", "1")
            .args(["ingest", "--scope", "s"])
            .args([&ok, &two])),
        &["two.md is 2.0 MB, over the limit of 1 MB"],
    );
    assert!(scopes(&db).is_empty(), "{:?}", scopes(&db));
    // 0 lifts the limit.
    let (code, _, err) = run(strata(&db)
        .env("STRATA_INGEST_MAX_SOURCE_MB", "0")
        .args(["ingest", "--scope", "s"])
        .args([&ok, &two]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(scopes(&db).len(), 1);
}

/// The child's peak resident memory (`VmHWM`), read from /proc while it runs: the peak is
/// reached while the store is written, well before the index is committed and the process
/// exits. Returns the peak in bytes and the child's output.
fn run_measured(c: &mut Command) -> (u64, Output) {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "ingest did not finish");
        if let Some(kb) = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        }) {
            peak = peak.max(kb * 1024);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (peak, child.wait_with_output().unwrap())
}

/// Issue 20: a 200 MB single-line file peaked at 3.6 GB and more (8.7 GB measured): the
/// chunker listed every word of a paragraph (several words per byte, ~100 bytes each) before
/// packing them. It now packs a huge paragraph piece by piece.
#[test]
fn a_large_single_line_under_the_limit_is_ingested_in_bounded_memory() {
    // Measured on this file (debug build, docs/BENCHMARKS.md "Memory of one ingest"):
    // 600 MB, 30×; 875 MB, 42× before the fix. Most of what is left is sled keeping every
    // page version the source's one transaction writes until it commits (~4.5 KB for each
    // of the 3 entries per chunk).
    const MAX_MULTIPLE: u64 = 36;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let n = 20 << 20;
    let file = write(dir.path(), "line.txt", one_line_of_words(n));
    let (peak, out) = run_measured(strata(&db).args([
        "ingest",
        "--json",
        "--scope",
        "s",
        file.to_str().unwrap(),
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["added"], 1, "{report}");
    assert!(
        report["chunks_written"].as_u64().unwrap() > 10_000,
        "{report}"
    );
    let multiple = peak as f64 / n as f64;
    eprintln!("peak {} MB for {} MB: {multiple:.1}×", peak >> 20, n >> 20);
    assert!(peak > 0, "no reading of the child's memory");
    assert!(
        peak < MAX_MULTIPLE * n as u64,
        "peak {} MB is {multiple:.1}× the input (at most {MAX_MULTIPLE}×)",
        peak >> 20
    );
}

#[test]
fn a_debate_transcript_sent_to_a_document_scope_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("db");
    let turns = "{\"round\":1,\"speaker\":\"ana\",\"text\":\"The tram costs 420 million.\"}\n\
                 {\"round\":1,\"speaker\":\"ben\",\"text\":\"Buses cost less than that.\"}\n";
    let doc = write(
        d,
        "notes.md",
        "# Notes\n\nThe depot will be by the river.\n",
    );
    let (code, _, err) = run(strata(&db).args(["ingest", "--scope", "kb"]).arg(&doc));
    assert_eq!(code, 0, "{err}");
    let jsonl = write(d, "debate.jsonl", turns);
    let how = "ingest it as a debate instead (`strata ingest --scope NAME --kind debate FILE`";
    // Into the document scope (the scope's kind is taken), or as a document on purpose.
    check_refused(
        run(strata(&db).args(["ingest", "--scope", "kb"]).arg(&jsonl)),
        &[
            "debate.jsonl is named like a debate transcript (.jsonl), not a document",
            how,
        ],
    );
    check_refused(
        run(strata(&db)
            .args(["ingest", "--scope", "new", "--kind", "doc"])
            .arg(&jsonl)),
        &["named like a debate transcript", how],
    );
    // Turns under another name are told by their first line.
    let txt = write(d, "debate.txt", turns);
    check_refused(
        run(strata(&db).args(["ingest", "--scope", "kb"]).arg(&txt)),
        &[
            "debate.txt looks like a debate transcript (its first line is a turn",
            how,
        ],
    );
    let listed = scopes(&db);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["sources"], 1, "{listed:?}");
    // As a debate it is ingested.
    let (code, _, err) = run(strata(&db)
        .args(["ingest", "--scope", "deb", "--kind", "debate"])
        .arg(&jsonl));
    assert_eq!(code, 0, "{err}");

    // Over HTTP, a document whose source id ends in .jsonl is refused the same way.
    let rt = rt();
    rt.block_on(async {
        let s = Server::start(&d.join("served"), strata::Config::default()).await;
        let (code, v) = s
            .post(
                "/api/v1/documents",
                json!({"scope": "kb", "source": "runs/debate.jsonl", "text": turns}),
            )
            .await;
        assert_eq!(code, 400, "{v}");
        let e = v["error"].as_str().unwrap();
        assert!(
            e.contains("runs/debate.jsonl is named like a debate transcript") && e.contains(how),
            "{e}"
        );
        let (code, v) = s
            .post(
                "/api/v1/documents",
                json!({"scope": "kb", "source": "notes.md", "text": turns}),
            )
            .await;
        assert_eq!(code, 400, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("looks like a debate transcript")
        );
        s.stop().await;
    });
    let e = strata::Engine::open(&d.join("served"), strata::Config::default()).unwrap();
    assert!(e.stats(T0).unwrap().scopes.is_empty());
}
