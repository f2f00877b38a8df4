//! The binary: exit codes, one-line errors, and the JSON shapes DESIGN.md promises.

use crate::support::*;
use std::process::Command;

fn strata(db: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    strata_env(db, args, &[])
}

/// Runs the binary with `env` set on top of this process's environment.
fn strata_env(db: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("STRATA_DB")
        .env_remove("STRATA_CONFIG")
        .envs(env.iter().copied())
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
            "budgets",
            "citations",
            "confidence",
            "iterations",
            "limit_hit",
            "max_iterations_reached",
            "nodes_examined",
            "outcome",
            "ready",
            "refinement_history",
            "sub_calls_made",
            "tokens_processed",
            "trajectory",
            "usage"
        ]
    );
    // How the run ended: the offline navigator answers within its budgets.
    assert_eq!(v["outcome"], "answered within its budgets");
    assert_eq!(v["max_iterations_reached"], false);
    assert!(v["limit_hit"].is_null());
    assert_eq!(v["budgets"]["iterations"]["limit"], 6);
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
    // Where the bytes go: every turn's text once, each level's nodes, the index.
    let (code, out, err) = strata(db, &["--json", "stats", "--bytes"]);
    assert_eq!(code, 0, "{err}");
    let b = &serde_json::from_str::<serde_json::Value>(&out).unwrap()["bytes"];
    assert_eq!(b["sources"], 176, "{b}");
    let turns: u64 = std::fs::read_to_string(repo().join("data/debate.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["text"].as_str().unwrap().len() as u64
        })
        .sum();
    assert_eq!(b["source_text"].as_u64().unwrap(), turns, "{b}");
    let full = &b["levels"][0];
    assert_eq!(full["nodes"], 176, "one FULL chunk per turn: {b}");
    assert!(full["text"].as_u64().unwrap() >= turns, "{b}");
    // A FULL node keeps the range of its source's text it is, not the text again (sled
    // layout 5): its record is a fraction of its text.
    assert!(
        full["encoded"].as_u64().unwrap() * 2 < full["text"].as_u64().unwrap(),
        "{b}"
    );
    assert!(
        b["levels"][4]["nodes"].as_u64().unwrap() > 0,
        "METADATA nodes: {b}"
    );
    let i = &b["index"];
    assert!(
        i["total"].as_u64().unwrap()
            >= i["postings"].as_u64().unwrap() + i["stored"].as_u64().unwrap()
    );
    assert!(b["disk"].as_u64().unwrap() > 0);
    let (code, out, _) = strata(db, &["stats", "--bytes"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("source texts") && out.contains("index: terms"),
        "{out}"
    );
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

/// Issue 9: a bad TOML file or a negative variable printed a multi-line error.
#[test]
fn config_and_input_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let toml = write(
        dir.path(),
        "strata.toml",
        "[store]\nttl_secs = 60\n\n[chunk]\ntokns = 5\n",
    );
    let toml = toml.to_str().unwrap();
    let nul = write(dir.path(), "nul.md", "A title\n\nSome text\0 and more.\n");
    let nul = nul.to_str().unwrap();
    for (args, env, expect) in [
        (
            vec!["--config", toml, "stats"],
            vec![],
            format!(
                "error: config: {toml} line 5 in [chunk]: unknown field `tokns`, expected `tokens` or `group_size`"
            ),
        ),
        (
            vec!["stats"],
            vec![("STRATA_CHUNK_TOKENS", "-5")],
            "error: config: STRATA_CHUNK_TOKENS=\"-5\" (chunk.tokens): expected a whole number ≥ 0"
                .into(),
        ),
        (
            vec!["stats"],
            vec![("STRATA_SERVER_WORKERS", "0")],
            "error: config: server.workers must be at least 1".into(),
        ),
        (
            vec!["stats"],
            vec![("STRATA_SERVER_TOKEN", "   ")],
            "error: config: server.token is blank".into(),
        ),
        (
            vec!["ingest", "--scope", "x", nul],
            vec![],
            format!(
                "error: {nul} contains the control character U+0000 at byte offset 18 (line 3)"
            ),
        ),
    ] {
        let (code, out, err) = strata_env(&db, &args, &env);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.starts_with(&expect), "expected {expect:?}, got {err:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// Issue 9: with the model server down, `compress --json` said nothing on stderr.
#[test]
fn a_json_build_against_a_dead_model_warns_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let turns = write(
        dir.path(),
        "d.jsonl",
        "{\"round\":1,\"speaker\":\"a\",\"text\":\"The tram costs 420 million.\"}\n\
         {\"round\":1,\"speaker\":\"b\",\"text\":\"Buses cost less than that.\"}\n",
    );
    let (code, _, err) = strata(&db, &["ingest", "--scope", "d", turns.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // A port nobody listens on: every call is refused at once.
    let url = dead_url();
    let env = [
        ("STRATA_MODEL_RETRIES", "0"),
        ("STRATA_MODEL_API_KEY_ENV", "STRATA_TEST_NO_SUCH_KEY"),
        ("STRATA_LOG", "warn"),
    ];
    let args = [
        "--model",
        "openai:m",
        "--base-url",
        &url,
        "--json",
        "compress",
        "--scope",
        "d",
    ];
    let (code, out, err) = strata_env(&db, &args, &env);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    let fallbacks = v["fallbacks"].as_u64().unwrap();
    assert!(
        fallbacks > 0 && v["model_errors"].as_u64().unwrap() > 0,
        "{v}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(&format!(
            "warning: d: {fallbacks} node(s) made by the offline fallback"
        )) && lines[0].ends_with(&format!(
            "the next compress makes {fallbacks} node(s) again with the model"
        )),
        "{err}"
    );
    // `stats` counts the marked nodes (the next compress with the model remakes them).
    let marked = v["fallback_nodes"].as_u64().unwrap();
    assert_eq!(marked, fallbacks);
    let (code, out, _) = strata(&db, &["stats"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!(
            "{marked} node(s) made by the offline fallback or over it; {marked} to be made again"
        )),
        "{out}"
    );
    let (_, out, _) = strata(&db, &["--json", "stats"]);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["fallbacks"]["nodes"], marked);
}

/// The allocator's options are strata's, by name (mimalloc prints them at start when
/// `MIMALLOC_VERBOSE=1`; `script::meter` sets them by their place in mimalloc's list):
/// arenas committed as used, reserved 64 MiB at a time, no transparent huge pages.
#[cfg(target_os = "linux")]
#[test]
fn the_allocator_commits_lazily_reserves_small_arenas_and_takes_no_huge_pages() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = strata_env(
        &dir.path().join("db"),
        &["--version"],
        &[("MIMALLOC_VERBOSE", "1")],
    );
    assert_eq!(code, 0, "{err}");
    for option in [
        "option 'arena_eager_commit': 0",
        "option 'arena_reserve': 65536 KiB",
        "option 'allow_thp': 0",
    ] {
        assert!(err.contains(option), "{option} not in:\n{err}");
    }
}
