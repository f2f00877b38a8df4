//! Issue 23 (part 1): commands that only read (`stats`, `context`, `query`, `grep`,
//! `trace`) write nothing to a directory store. Every file of the store is hashed before
//! and after each command of the real binary; nothing may change, but for what sled 0.34.7
//! itself writes at every open (it has no read-only mode): zeros over the already-zero
//! unused tail of its log and its free segments (so `store/db` keeps its bytes but not its
//! mtime); at the first open after a writer, a new snapshot of its log (`snap.*`); and, at
//! any open, the cut of whole free segments off the log's tail that a writer's exit left
//! undone (sled truncates asynchronously; the bytes it keeps are unchanged).
//! Index work a writer left pending is reported by `stats`, applied in memory by a reader
//! (its searches see it; the disk is not written), and done on disk by the next writer.

use crate::support::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

fn strata(db: &Path, args: &[&str]) -> (i32, String, String) {
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

fn ok(db: &Path, args: &[&str]) -> String {
    let (code, out, err) = strata(db, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// One file of the store: its size, a hash of its bytes, and its mtime (`None` for
/// `store/db`, whose bytes sled rewrites unchanged at every open).
#[derive(Debug, PartialEq, Eq)]
struct FileState {
    len: u64,
    hash: String,
    mtime: Option<SystemTime>,
    /// `store/db`: the hash of each prefix of a whole number of [`CUT`]s.
    prefixes: Vec<String>,
}

/// The granularity at which sled may shorten its log (its segments are multiples of it).
const CUT: usize = 64 << 10;

/// Whether `after` is `before` with whole segments cut off its tail, its other bytes
/// unchanged (sled's deferred truncation of free segments).
fn tail_cut(before: &FileState, after: &FileState) -> bool {
    let len = after.len as usize;
    after.len < before.len
        && len > 0
        && len.is_multiple_of(CUT)
        && before.prefixes.get(len / CUT - 1) == Some(&after.hash)
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
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let md = e.metadata().unwrap();
            let bytes = std::fs::read(&p).unwrap();
            let sled_log = rel == Path::new("store/db");
            out.insert(
                rel,
                FileState {
                    len: md.len(),
                    hash: blake3::hash(&bytes).to_hex().to_string(),
                    mtime: (!sled_log).then(|| md.modified().unwrap()),
                    prefixes: if sled_log {
                        (1..=bytes.len() / CUT)
                            .map(|k| blake3::hash(&bytes[..k * CUT]).to_hex().to_string())
                            .collect()
                    } else {
                        Vec::new()
                    },
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
            Some(a) if p == Path::new("store/db") && tail_cut(b, a) => {}
            Some(a) if a != b => out.push(format!(
                "{} changed: {} bytes {} -> {} bytes {}",
                p.display(),
                b.len,
                b.hash,
                a.len,
                a.hash
            )),
            _ => {}
        }
    }
    for p in after.keys().filter(|p| !before.contains_key(*p)) {
        out.push(format!("{} added", p.display()));
    }
    out
}

fn is_sled_snapshot(p: &Path) -> bool {
    p.parent() == Some(Path::new("store"))
        && p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("snap."))
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

    // The first open after a writer: sled writes a snapshot of its log, nothing else
    // changes (and nothing at all of the index).
    let before = snapshot(&db);
    let out = ok(&db, &["stats"]);
    assert!(out.contains(&format!("{pending} changes pending")), "{out}");
    let after = snapshot(&db);
    let unexpected: Vec<String> = changes(&before, &after)
        .into_iter()
        .filter(|c| !is_sled_snapshot(Path::new(c.split(' ').next().unwrap())))
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:#?}");

    // From then on, every read-only command leaves every file as it was.
    let settled = snapshot(&db);
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
    for args in &commands {
        let out = ok(&db, args);
        assert!(!out.trim().is_empty(), "{args:?} printed nothing");
        let now = snapshot(&db);
        let diff = changes(&settled, &now);
        assert!(diff.is_empty(), "{args:?} changed the store: {diff:#?}");
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
