//! Issue 23 (part 1): commands that only read (`stats`, `context`, `query`, `grep`,
//! `trace`) write nothing to a directory store. Every file of the store is hashed before
//! and after each command of the real binary; nothing may change, but for what sled 0.34.7
//! itself writes at an open (it has no read-only mode): in its log, what [`data_kept`]
//! allows (zeros over freed space, free segments cut off the tail, a message of its own in
//! free space — seen about once in ten runs under load), so `store/db` is compared by its
//! bytes, not its mtime; and a new snapshot of its log (`snap.*`) at the first open after a
//! writer, or after an open where sled wrote to its log. The index's files are checked byte
//! for byte and `stats` field by field.
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
    /// `store/db`: its bytes (sled's changes are told apart by them; see [`data_kept`]).
    bytes: Vec<u8>,
}

/// The granularity at which sled may shorten its log (its segments are multiples of it).
const CUT: usize = 64 << 10;

/// Whether `after` keeps every byte of data `before` held: sled 0.34, which has no
/// read-only mode, may at any open zero space a writer freed, cut free segments off the
/// log's tail (both asynchronous, so a writer's exit can leave them to the next open), and
/// write a message of its own into free space at its recovered tip. A byte that held data
/// either keeps it or (freed garbage) becomes zero; nothing of strata's changes — which
/// the index's files (checked byte for byte) and `stats` (checked field by field) show.
fn data_kept(before: &FileState, after: &FileState) -> bool {
    (after.len >= before.len || (after.len as usize).is_multiple_of(CUT))
        && after
            .bytes
            .iter()
            .zip(&before.bytes)
            .all(|(a, b)| a == b || *a == 0 || *b == 0)
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
                    bytes: if sled_log { bytes.clone() } else { Vec::new() },
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
            Some(a) if p == Path::new("store/db") && data_kept(b, a) => {}
            Some(a) if a != b => out.push(format!(
                "{} changed: {} bytes {} -> {} bytes {}{}",
                p.display(),
                b.len,
                b.hash,
                a.len,
                a.hash,
                match b.bytes.iter().zip(&a.bytes).position(|(x, y)| x != y) {
                    Some(i) => format!(
                        " (first change at byte {i}: {} -> {})",
                        b.bytes[i], a.bytes[i]
                    ),
                    None => String::new(),
                }
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
    let facts = logical(&db);
    for args in &commands {
        let out = ok(&db, args);
        assert!(!out.trim().is_empty(), "{args:?} printed nothing");
        let now = snapshot(&db);
        // A snapshot of sled's own (after a message sled wrote at an earlier open) is
        // sled's too; every other file stays as it was.
        let diff: Vec<String> = changes(&settled, &now)
            .into_iter()
            .filter(|c| !is_sled_snapshot(Path::new(c.split(' ').next().unwrap())))
            .collect();
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
