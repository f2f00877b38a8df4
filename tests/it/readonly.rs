//! Issue 23 (part 1): commands that only read (`stats`, `context`, `query`, `grep`,
//! `trace`) write nothing to a directory store. Every file of the store — sled's log and
//! snapshot, the index's files — is compared before and after each command of the real
//! binary, by its bytes and its mtime; nothing may change, not even at the first open
//! after a writer or after a writer killed mid-write (sled 0.34.7 is patched with a
//! read-only open: `crates/sled/PATCH.md`). `stats` is checked field by field.
//! Index work a writer left pending is reported by `stats`, applied in memory by a reader
//! (its searches see it; the disk is not written), and done on disk by the next writer.
//! A read-only command that must build after all (expired levels) opens the store
//! writable and runs again.

use crate::support::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

fn strata(db: &Path, args: &[&str]) -> (i32, String, String) {
    strata_with(db, args, &[])
}

/// [`strata`] with these variables set.
fn strata_with(db: &Path, args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(db)
        .args(args)
        .envs(vars.iter().copied())
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

fn ok(db: &Path, args: &[&str]) -> String {
    let (code, out, err) = strata(db, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// One file of the store: its size, a hash of its bytes, and its mtime.
#[derive(Debug, PartialEq, Eq)]
struct FileState {
    len: u64,
    hash: String,
    mtime: SystemTime,
}

/// What `stats` says of the store, without the file size (sled's own writes move it).
fn logical(db: &Path) -> Value {
    let mut v: Value = serde_json::from_str(&ok(db, &["--json", "stats"])).unwrap();
    v.as_object_mut().unwrap().remove("disk_bytes");
    v
}

fn snapshot(db: &Path) -> BTreeMap<PathBuf, FileState> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, FileState>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
                continue;
            }
            let md = e.metadata().unwrap();
            out.insert(
                p.strip_prefix(root).unwrap().to_path_buf(),
                FileState {
                    len: md.len(),
                    hash: blake3::hash(&std::fs::read(&p).unwrap())
                        .to_hex()
                        .to_string(),
                    mtime: md.modified().unwrap(),
                },
            );
        }
    }
    let mut out = BTreeMap::new();
    walk(db, db, &mut out);
    out
}

/// The differences between two snapshots, one line each.
fn changes(
    before: &BTreeMap<PathBuf, FileState>,
    after: &BTreeMap<PathBuf, FileState>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (p, b) in before {
        match after.get(p) {
            None => out.push(format!("{} removed", p.display())),
            Some(a) if a != b => out.push(format!("{} changed: {b:?} -> {a:?}", p.display())),
            _ => {}
        }
    }
    for p in after.keys().filter(|p| !before.contains_key(*p)) {
        out.push(format!("{} added", p.display()));
    }
    out
}

#[test]
fn read_only_commands_write_nothing_and_leave_index_work_to_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let docs: Vec<String> = doc_paths()
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    let mut args = vec!["ingest", "--scope", "docs"];
    args.extend(docs.iter().map(String::as_str));
    ok(&db, &args);
    ok(&db, &["ingest", "--scope", "deb", "data/debate.jsonl"]);
    ok(&db, &["compress", "--scope", "docs"]);
    ok(&db, &["compress", "--scope", "deb"]);
    let trace = dir.path().join("q.jsonl");
    let trace_s = trace.to_str().unwrap().to_string();
    let html = dir.path().join("q.html");

    // A writer that leaves index work pending: a node stored again (as after an append,
    // whose chunks the index takes in at the next writer's build or query).
    let pending = {
        let e = strata::Engine::open(&db, strata::Config::default()).unwrap();
        let id = e.plan("docs").unwrap().all_ids().next().unwrap();
        let node = e.store().get_node(&id).unwrap().unwrap();
        e.store().put_node(&node).unwrap();
        // And a scope's chunks the index lost (as after an ingest whose index commit met a
        // full disk: the ingest is acknowledged, its marks wait for the next writer).
        let lost: Vec<strata::NodeId> = e
            .plan("deb")
            .unwrap()
            .chunks
            .iter()
            .map(|c| c.full)
            .collect();
        for id in &lost {
            let node = e.store().get_node(id).unwrap().unwrap();
            e.store().put_node(&node).unwrap();
        }
        e.index().delete(&lost).unwrap();
        e.index().commit().unwrap();
        e.store().flush().unwrap();
        1 + lost.len()
    };

    // The first open after a writer changes nothing either, and neither does any
    // read-only command after it.
    let settled = snapshot(&db);
    let out = ok(&db, &["stats"]);
    assert!(out.contains(&format!("{pending} changes pending")), "{out}");
    let diff = changes(&settled, &snapshot(&db));
    assert!(
        diff.is_empty(),
        "the first open after a writer wrote: {diff:#?}"
    );
    let html_s = html.to_str().unwrap().to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["stats"],
        vec!["--json", "stats"],
        vec!["stats", "--bytes"],
        vec!["context", "--scope", "deb", "--budget", "1500"],
        vec![
            "context", "--scope", "docs", "--level", "summary", "--budget", "800",
        ],
        vec![
            "context",
            "--scope",
            "deb",
            "--for",
            "Eastgate car ownership",
            "--budget",
            "900",
        ],
        vec![
            "query",
            "--scope",
            "docs",
            "--trace",
            &trace_s,
            "What is the first of the four freedoms?",
        ],
        vec![
            "--json",
            "query",
            "--scope",
            "deb",
            "What share of Eastgate households do not own a car?",
        ],
        vec!["query", "--all", "Who proposed the tram depot?"],
        vec!["grep", "freedom"],
        vec!["grep", "--scope", "deb", "--level", "full", "Kessling"],
        vec!["trace", &trace_s, "--out", &html_s],
    ];
    let facts = logical(&db);
    for args in &commands {
        let out = ok(&db, args);
        assert!(!out.trim().is_empty(), "{args:?} printed nothing");
        let diff = changes(&settled, &snapshot(&db));
        assert!(diff.is_empty(), "{args:?} changed the store: {diff:#?}");
        assert_eq!(logical(&db), facts, "{args:?} changed what the store holds");
    }
    assert!(html.exists());
    // Searches see what is pending (applied in memory, the disk untouched).
    let out = ok(
        &db,
        &["grep", "--scope", "deb", "--level", "full", "Kessling"],
    );
    assert!(
        out.contains("Kessling"),
        "pending chunks are not searchable: {out}"
    );

    // A reader applies each pending mark once, at open; a later catch-up (every query
    // asks for one) finds nothing new.
    {
        let e = strata::Engine::open_read_only(&db, strata::Config::default()).unwrap();
        assert_eq!(e.sync_index().unwrap(), 0, "pending marks applied again");
    }

    // The pending work is reported, not done, by a reader...
    let v: Value = serde_json::from_str(&ok(&db, &["--json", "stats"])).unwrap();
    assert_eq!(v["unindexed"], pending, "{v}");
    assert_eq!(v["indexed_docs"], v["nodes"], "{v}");
    // ...and done by the next writer.
    ok(&db, &["compress", "--scope", "docs"]);
    let v: Value = serde_json::from_str(&ok(&db, &["--json", "stats"])).unwrap();
    assert_eq!(v["unindexed"], 0, "{v}");
}

/// A directory that holds no store yet: a read-only command answers as for an empty
/// store and creates nothing.
#[test]
fn a_read_only_command_on_no_store_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nothing-here");
    let v: Value = serde_json::from_str(&ok(&db, &["--json", "stats"])).unwrap();
    assert_eq!(v["nodes"], 0, "{v}");
    let (code, _, err) = strata(&db, &["query", "--scope", "nope", "anything"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown scope"), "{err}");
    assert!(!db.exists(), "{} was created", db.display());
}

/// A writer killed in the middle of a build leaves sled a log to recover: a read-only
/// command recovers it in memory and writes nothing (sled's recovery writes — zeroing the
/// torn tail, a new snapshot — are left to the next writer), and that writer then opens,
/// recovers and finishes the build.
#[test]
fn read_only_commands_write_nothing_after_a_writer_is_killed() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut args = vec!["ingest".to_string(), "--scope".into(), "docs".into()];
    args.extend(doc_paths().iter().map(|p| p.to_str().unwrap().to_string()));
    ok(&db, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(&db)
        .args(["compress", "--scope", "docs"])
        .env("STRATA_TEST_PAUSE_AT", "build:node-written#40")
        .env_remove("STRATA_DB")
        .env_remove("STRATA_CONFIG")
        .current_dir(repo())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let paused = stderr
        .lines()
        .map_while(Result::ok)
        .any(|l| l.contains("strata: paused at "));
    assert!(paused, "the build ended before its 40th node");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    // sled's tree upkeep a killed writer left (a node split, depending on where the kill
    // landed) is refused to a read-only open; the command then says so and runs as a
    // writer. Otherwise nothing may change.
    let mut killed = snapshot(&db);
    for args in [
        vec!["stats"],
        vec!["--json", "stats"],
        vec!["grep", "freedom"],
        vec!["grep", "--level", "full", "Union"],
    ] {
        let (code, out, err) = strata_with(&db, &args, &[("STRATA_LOG", "info")]);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!out.is_empty(), "{args:?} printed nothing");
        let now = snapshot(&db);
        if !err.contains("opening the store writable") {
            let diff = changes(&killed, &now);
            assert!(diff.is_empty(), "{args:?} changed the store: {diff:#?}");
        }
        killed = now;
    }
    // The next writer recovers the log and finishes the build.
    ok(&db, &["compress", "--scope", "docs"]);
    let v: Value = serde_json::from_str(&ok(&db, &["--json", "stats"])).unwrap();
    assert_eq!(v["unindexed"], 0, "{v}");
    assert_eq!(v["indexed_docs"], v["nodes"], "{v}");
    let out = ok(
        &db,
        &["query", "--scope", "docs", "What are the four freedoms?"],
    );
    assert!(out.contains("freedom"), "{out}");
}

/// A read-only command that must write after all — `context` of a scope whose levels
/// expired builds them first — opens the store writable and runs again: it succeeds, and
/// the levels are live afterwards.
#[test]
fn a_read_only_command_that_must_build_opens_the_store_writable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let ttl = |args: &[&str]| {
        let (code, out, err) = strata_with(
            &db,
            args,
            &[("STRATA_STORE_TTL_SECS", "1"), ("STRATA_LOG", "info")],
        );
        assert_eq!(code, 0, "{args:?}: {err}");
        (out, err)
    };
    ttl(&["ingest", "--scope", "deb", "data/debate.jsonl"]);
    ttl(&["compress", "--scope", "deb"]);
    std::thread::sleep(std::time::Duration::from_millis(2_100));
    let (out, err) = ttl(&[
        "context", "--scope", "deb", "--level", "summary", "--budget", "600",
    ]);
    assert!(!out.trim().is_empty(), "no window: {err}");
    assert!(
        err.contains("opening the store writable"),
        "the expired levels were not rebuilt through a writable open: {err}"
    );
    let (stats, _) = ttl(&["--json", "stats"]);
    let v: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(v["unindexed"], 0, "{v}");
}
