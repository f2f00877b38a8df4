//! The binary: exit codes, one-line errors, and the JSON shapes DESIGN.md promises.

use crate::support::*;
use std::process::Command;

fn strata(db: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
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

#[test]
fn cli_end_to_end_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path();
    let (code, out, _) = strata(db, &["ingest", "--scope", "debate", "data/debate.jsonl"]);
    assert_eq!(code, 0);
    assert!(out.contains("176 added"), "{out}");
    let (code, out, _) = strata(db, &["--json", "compress", "--scope", "debate"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["failures"].as_array().unwrap().len(), 0);
    let (_, out, _) = strata(db, &["compress", "--scope", "debate"]);
    assert!(
        out.contains("built 0 nodes") && out.contains("0 model calls"),
        "{out}"
    );

    let (code, out, _) = strata(
        db,
        &[
            "context", "--scope", "debate", "--level", "summary", "--budget", "500", "--json",
        ],
    );
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for k in ["scope", "level", "budget", "tokens", "text", "nodes"] {
        assert!(keys.contains(&k), "{k} missing in {keys:?}");
    }
    assert!(v["tokens"].as_u64().unwrap() <= 500);
    for n in v["nodes"].as_array().unwrap() {
        assert!(n["id"].is_string() && n["level"] == "summary" && n["tokens"].is_u64());
    }

    let (code, out, _) = strata(
        db,
        &[
            "query",
            "--scope",
            "debate",
            "--json",
            "What share of Eastgate households do not own a car?",
        ],
    );
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "answer",
            "citations",
            "confidence",
            "iterations",
            "nodes_examined",
            "ready",
            "refinement_history",
            "sub_calls_made",
            "tokens_processed",
            "trajectory",
            "usage"
        ]
    );
    // The offline navigator calls no model.
    assert_eq!(v["usage"]["calls"], 0);
    assert!(v["usage"]["by_model"].as_object().unwrap().is_empty());
    let c = &v["citations"][0];
    let mut ck: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
    ck.sort();
    assert_eq!(ck, ["end", "quote", "round", "source", "speaker", "start"]);
    let text = std::fs::read_to_string(repo().join("data/debate.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.lines().nth(6).unwrap()).unwrap();
    let turn = line["text"].as_str().unwrap();
    let (s, e) = (
        c["start"].as_u64().unwrap() as usize,
        c["end"].as_u64().unwrap() as usize,
    );
    assert_eq!(&turn[s..e], c["quote"].as_str().unwrap());
    assert!(v["trajectory"][0]["action"].is_string());

    let (code, out, _) = strata(db, &["stats"]);
    assert_eq!(code, 0);
    assert!(out.contains("debate (Debate): 176 sources"), "{out}");
    let (code, out, _) = strata(
        db,
        &["grep", "--scope", "debate", "--level", "full", "Kessling"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("full"), "{out}");
}

#[test]
fn cli_errors_are_one_line_with_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for (args, expect) in [
        (
            vec!["context", "--scope", "nope", "--budget", "10"],
            "unknown scope `nope`",
        ),
        (
            vec!["ingest", "--scope", "x", "no/such/file.md"],
            "cannot read no/such/file.md",
        ),
        (
            vec!["ingest", "--scope", "x", "--kind", "poem", "README.md"],
            "unknown kind `poem`",
        ),
        (
            vec!["query", "--scope", "nope", "anything"],
            "unknown scope",
        ),
        (
            vec!["--model", "gpt-4o", "stats"],
            "model.sub: unknown model `gpt-4o`",
        ),
    ] {
        let (code, out, err) = strata(&db, &args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            err.starts_with("error: ") && err.contains(expect),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let (code, _, _) = strata(&db, &["context", "--scope", "x"]);
    assert_eq!(code, 2, "a usage error is clap's exit code 2");
}
