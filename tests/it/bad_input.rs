//! Every bad input gets a clear error and changes nothing.

use crate::support::*;
use strata::{Config, Engine, LevelChoice, NoProgress};

/// Ingests `path`; expects an error containing `expect`, and an untouched store.
fn check_rejected(
    e: &Engine,
    path: &std::path::Path,
    kind: Option<strata::ScopeKind>,
    expect: &str,
) {
    let before = e.stats(T0).unwrap();
    let err = e
        .ingest_files("t", kind, &[path.to_path_buf()], T0)
        .unwrap_err()
        .to_string();
    assert!(err.contains(expect), "expected {expect:?} in: {err}");
    let after = e.stats(T0).unwrap();
    assert_eq!(before.nodes, after.nodes);
    assert_eq!(before.scopes.len(), after.scopes.len());
}

#[test]
fn bad_files_are_rejected_with_a_clear_cause() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let e = Engine::in_memory(Config::default()).unwrap();
    check_rejected(&e, &d.join("missing.md"), None, "cannot read");
    check_rejected(&e, &d.join("missing.md"), None, "No such file");
    check_rejected(&e, d, None, "is a directory");
    check_rejected(
        &e,
        &write(d, "bad.txt", b"caf\xe9 au lait\n"),
        None,
        "not valid UTF-8: bad byte at offset 3 (line 1)",
    );
    check_rejected(&e, &write(d, "empty.md", ""), None, "is empty");
    check_rejected(&e, &write(d, "blank.md", "  \n\n\t\n"), None, "is empty");
    check_rejected(
        &e,
        &write(d, "empty.jsonl", "\n\n"),
        None,
        "no debate turns",
    );
    let jsonl = "{\"round\":1,\"speaker\":\"a\",\"text\":\"hello\"}\n{\"round\":\"two\",\"speaker\":\"b\",\"text\":\"x\"}\n";
    check_rejected(
        &e,
        &write(d, "d.jsonl", jsonl),
        None,
        "d.jsonl line 2, column 14: not a debate turn",
    );
    check_rejected(
        &e,
        &write(
            d,
            "e.jsonl",
            "{\"round\":1,\"speaker\":\"a\",\"text\":\"  \"}\n",
        ),
        None,
        "line 1",
    );
    check_rejected(&e, &write(d, "f.jsonl", "not json\n"), None, "line 1");
}

#[test]
fn one_bad_file_among_good_ones_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::in_memory(Config::default()).unwrap();
    let good = write(dir.path(), "a.md", "Good text.\n");
    let bad = write(dir.path(), "b.md", b"\xff\xfe");
    let err = e.ingest_files("s", None, &[good, bad], T0).unwrap_err();
    assert!(err.to_string().contains("b.md"));
    assert!(e.scope_names().unwrap().is_empty());
}

#[test]
fn a_scope_holds_one_kind() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::in_memory(Config::default()).unwrap();
    e.ingest_files("s", None, &[write(dir.path(), "a.md", "Text.\n")], T0)
        .unwrap();
    let err = e
        .ingest_files(
            "s",
            Some(strata::ScopeKind::Debate),
            &[write(
                dir.path(),
                "d.jsonl",
                "{\"round\":1,\"speaker\":\"a\",\"text\":\"x\"}",
            )],
            T0,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("holds documents"), "{err}");
}

#[test]
fn unknown_scope_and_zero_budget() {
    let rt = rt();
    let e = samples(Config::default());
    let err = rt
        .block_on(e.context("nope", LevelChoice::Auto, 100, T0, &NoProgress))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown scope `nope`") && err.contains("debate, docs"),
        "{err}"
    );
    let err = rt
        .block_on(e.query(&strata::Ask::new(&["nope".into()], "q", T0)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown scope"), "{err}");
    let err = rt
        .block_on(e.context("debate", LevelChoice::Auto, 0, T0, &NoProgress))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least 1 token"), "{err}");
    assert!(
        "sideways"
            .parse::<LevelChoice>()
            .unwrap_err()
            .to_string()
            .contains("unknown level")
    );
    let err = rt
        .block_on(e.query(&strata::Ask::new(&["debate".into()], "   ", T0)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("empty"), "{err}");
    // A question of stop words only gets an honest non-answer, not an error.
    let r = query(&rt, &e, "debate", "what is the", T0);
    assert!(r.citations.is_empty() && !r.ready && r.answer.is_empty());
}

#[test]
fn a_huge_document_is_ingested_whole() {
    // 50 MB of text in one file: it is chunked (in parallel), stored and indexed, and its
    // chunks tile it exactly. Building its levels is measured in the e2e benchmark.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::with_capacity(52 << 20);
    let mut i = 0u64;
    while text.len() < 50 << 20 {
        if i.is_multiple_of(400) {
            text.push_str(&format!("\n## Part {}\n\n", i / 400));
        }
        text.push_str(&format!(
            "Entry {i} records that shipment {} reached Port Aldous on day {} of 2031. ",
            i * 7919 % 100_000,
            i % 365
        ));
        if i % 6 == 5 {
            text.push_str("\n\n");
        }
        i += 1;
    }
    let p = write(dir.path(), "huge.md", &text);
    let e = Engine::open(&dir.path().join("db"), Config::default()).unwrap();
    let r = e
        .ingest_files("huge", None, std::slice::from_ref(&p), T0)
        .unwrap();
    assert_eq!(r.added, 1);
    assert_eq!(r.bytes, text.len() as u64);
    let rec = e
        .store()
        .get_source("huge", &p.display().to_string())
        .unwrap()
        .unwrap();
    assert!(rec.chunks.len() > 10_000);
    let mut pos = 0;
    for c in &rec.chunks {
        assert_eq!(c.start, pos);
        assert!(c.tokens <= 400);
        pos = c.end;
    }
    assert_eq!(pos, text.len() as u64);
    let hits =
        futures::executor::block_on(e.grep(&[], "shipment 7919", &[strata::Level::Full], 3, T0))
            .unwrap();
    assert!(!hits.is_empty());
}
