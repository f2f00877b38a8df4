//! The write protocol: names validated in one place, ingest steps that are whole or absent,
//! append ids that are never handed out twice, and an index that never lags the store
//! without the store knowing. (Crashes of real processes: `crash.rs`.)

use crate::support::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata::model::{BoxFuture, CompressRequest, ModelError, SubModel};
use strata::source::Turn;
use strata::store::{ForgetStep, SourcePut, SourceStep};
use strata::{Config, Engine, NoProgress};

fn turn(round: u32, speaker: &str, text: &str) -> Turn {
    Turn {
        round,
        speaker: speaker.into(),
        text: text.into(),
        time: None,
    }
}

/// What the old write order could leave after a crash: `source`'s record and text stored
/// but its scope not listing it, and the scope's turn counter at `next_seq`.
fn unlist(e: &Engine, scope: &str, source: &str, next_seq: Option<u64>) {
    let st = e.store();
    let record = st.get_source(scope, source).unwrap().unwrap();
    let text = st.get_text(scope, source).unwrap().unwrap();
    let mut head = st.get_scope_head(scope).unwrap().unwrap();
    if let Some(n) = next_seq {
        head.next_seq = n;
    }
    st.forget(&ForgetStep {
        scope: scope.into(),
        record: Some(head.clone()),
        remove_sources: vec![source.into()],
        remove_nodes: Vec::new(),
    })
    .unwrap();
    st.write_sources(&SourceStep {
        scope: head,
        list: Vec::new(),
        put: vec![SourcePut {
            record,
            text,
            nodes: Vec::new(),
        }],
        remove_sources: Vec::new(),
        remove_nodes: Vec::new(),
    })
    .unwrap();
    assert_eq!(st.get_entry(scope, source).unwrap(), None);
    assert!(st.get_source(scope, source).unwrap().is_some());
}

#[test]
fn names_are_validated_at_every_library_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::in_memory(Config::default()).unwrap();
    let p = write(dir.path(), "a.md", "The ferry costs 40 dollars.\n");
    let long = "x".repeat(10_000);
    for scope in ["", "  ", "kb\0x", "a\nb", " kb", long.as_str()] {
        let err = e
            .ingest_files(scope, None, std::slice::from_ref(&p), T0)
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err:?}");
        let err = e
            .append(scope, turn(1, "ana", "hello there"), T0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("scope name"), "{err:?}");
    }
    let doc = strata::source::document("x\0a.md", "text".into()).unwrap();
    let file = strata::source::InputFile::single(strata::ScopeKind::Doc, "x", doc);
    let err = e.ingest("kb", &[file], T0).unwrap_err().to_string();
    assert!(err.contains("source id") && err.contains("\\0"), "{err}");
    let err = e
        .append("debate", turn(1, "ana\u{1b}[31m", "hello there"), T0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("speaker"), "{err}");
    assert!(e.scope_names().unwrap().is_empty(), "nothing was written");
}

// Regression: after a crash between a source's record and the scope's list of sources,
// re-running the ingest reported the document "unchanged" and never added it back.
#[test]
fn a_source_record_its_scope_does_not_list_is_ingested_again() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(&dir.path().join("db"), Config::default()).unwrap();
    let a = write(dir.path(), "a.md", "Alpha paragraph about ferries.\n");
    let b = write(dir.path(), "b.md", "Beta paragraph about zeppelins.\n");
    e.ingest_files("kb", None, std::slice::from_ref(&a), T0)
        .unwrap();
    e.ingest_files("kb", None, std::slice::from_ref(&b), T0)
        .unwrap();
    // What the old write order could leave: b's record and text, but a scope that lists
    // only a.
    unlist(&e, "kb", &b.display().to_string(), None);
    assert_eq!(e.scope_stats("kb", T0).unwrap().sources, 1);
    let r = e.ingest_files("kb", None, &[a, b], T0).unwrap();
    assert_eq!((r.added, r.unchanged), (1, 1), "{r:?}");
    assert_eq!(e.scope_stats("kb", T0).unwrap().sources, 2);
}

// Regression: after one unlucky kill the scope's turn counter lagged a stored turn, and
// every later append got that turn's id and replaced it.
#[test]
fn append_never_reuses_a_stored_turn_id() {
    let e = Engine::in_memory(Config::default()).unwrap();
    for i in 1..=3 {
        let (_, id) = e
            .append(
                "x",
                turn(i, "ana", &format!("Turn number {i} is here.")),
                T0,
            )
            .unwrap();
        assert_eq!(id, format!("x#turn-{i}"));
    }
    // Rewind the counter and forget turn 3 in the list, as the old write order could.
    unlist(&e, "x", "x#turn-3", Some(2));
    let (r, id) = e
        .append("x", turn(4, "bo", "A new turn after the crash."), T0)
        .unwrap();
    assert_eq!((id.as_str(), r.added, r.replaced), ("x#turn-4", 1, 0));
    let (_, id) = e
        .append("x", turn(5, "bo", "And another one after it."), T0)
        .unwrap();
    assert_eq!(id, "x#turn-5");
    assert_eq!(
        e.source_text("x", "x#turn-3").unwrap(),
        "Turn number 3 is here."
    );
}

#[test]
fn a_replaced_source_swaps_its_chunks_in_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(&dir.path().join("db"), Config::default()).unwrap();
    let p = write(dir.path(), "a.md", "# One\n\nFirst version of the text.\n");
    e.ingest_files("kb", None, std::slice::from_ref(&p), T0)
        .unwrap();
    let before = e
        .store()
        .get_source("kb", &p.display().to_string())
        .unwrap()
        .unwrap();
    std::fs::write(&p, "# One\n\nSecond version, longer than the first one.\n").unwrap();
    let r = e
        .ingest_files("kb", None, std::slice::from_ref(&p), T0)
        .unwrap();
    assert_eq!(r.replaced, 1);
    for c in &before.chunks {
        assert!(
            e.store().get_node(&c.id).unwrap().is_none(),
            "old chunk kept"
        );
    }
    let after = e
        .store()
        .get_source("kb", &p.display().to_string())
        .unwrap()
        .unwrap();
    assert_eq!(after.seq, before.seq, "a replaced source keeps its place");
    for c in &after.chunks {
        assert!(e.store().get_node(&c.id).unwrap().is_some());
    }
    let s = e.stats(T0).unwrap();
    assert_eq!((s.indexed_docs, s.unindexed), (s.nodes as u64, 0));
}

/// A model that answers `n` calls and then never again (a build killed mid-way).
struct Stalls {
    left: AtomicU64,
}

impl SubModel for Stalls {
    fn identity(&self) -> String {
        "stalls".into()
    }
    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>> {
        let go = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Box::pin(async move {
            if !go {
                std::future::pending::<()>().await;
            }
            Ok(strata::model::offline::compress(&req))
        })
    }
}

/// Counts the nodes a build reports stored; `reached.wait_for(n)` wakes when `n` are.
#[derive(Default)]
struct StoredNodes {
    reached: Count,
}

#[derive(Default)]
struct Count(tokio::sync::watch::Sender<u64>);

impl Count {
    async fn wait_for(&self, n: u64) {
        let _ = self.0.subscribe().wait_for(|k| *k >= n).await;
    }
}

impl strata::Progress for StoredNodes {
    fn inc(&self, n: u64) {
        self.reached.0.send_modify(|k| *k += n);
    }
}

// Regression: nodes an interrupted build had stored were never indexed, and the resumed
// build counted them as done (23,520 nodes, 7,174 indexed).
#[test]
fn nodes_of_an_interrupted_build_are_indexed_at_the_next_open() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        let e = Engine::open(&db, Config::default())
            .unwrap()
            .with_model(Arc::new(Stalls {
                left: AtomicU64::new(20),
            }));
        e.ingest_files("docs", None, &doc_paths(), T0).unwrap();
        // The build stalls after 20 nodes; dropping it once they are stored is what a kill
        // does to a build. The build's progress (one tick per node stored) says when.
        let stored = StoredNodes::default();
        let stalled = async {
            tokio::select! {
                _ = e.compress("docs", T0, &stored) => panic!("the build should have stalled"),
                _ = stored.reached.wait_for(20) => {}
            }
        };
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(120), stalled).await
        })
        .expect("20 nodes stored within two minutes");
        let s = e.stats(T0).unwrap();
        assert!(s.unindexed >= 20, "{s:?}");
    }
    let e = Engine::open(&db, Config::default())
        .unwrap()
        .with_model(Arc::new(Stalls {
            left: AtomicU64::new(u64::MAX),
        }));
    let s = e.stats(T0).unwrap();
    assert_eq!((s.indexed_docs, s.unindexed), (s.nodes as u64, 0), "{s:?}");
    let r = rt.block_on(e.compress("docs", T0, &NoProgress)).unwrap();
    assert!(r.failures.is_empty());
    let s = e.stats(T0).unwrap();
    assert_eq!((s.indexed_docs, s.unindexed), (s.nodes as u64, 0), "{s:?}");
}

#[test]
fn appends_are_searchable_at_the_next_query() {
    let rt = rt();
    let e = Engine::in_memory(Config::default()).unwrap();
    e.append(
        "x",
        turn(1, "ana", "We propose a ferry fare of 3 dollars."),
        T0,
    )
    .unwrap();
    assert_eq!(
        e.stats(T0).unwrap().unindexed,
        1,
        "appends do not commit the index"
    );
    let r = query(&rt, &e, "x", "What fare did ana propose?", T0);
    assert!(r.answer.contains("3 dollars"), "{}", r.answer);
    let s = e.stats(T0).unwrap();
    assert_eq!((s.indexed_docs, s.unindexed), (s.nodes as u64, 0), "{s:?}");
}

// Every write path checks for room before it begins (not only the CLI): a reserve larger
// than any disk refuses ingest, append and build in one line and writes nothing.
#[test]
fn writes_are_refused_up_front_when_the_disk_lacks_room() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        let e = Engine::open(&db, Config::default()).unwrap();
        e.append(
            "x",
            turn(1, "ana", "A turn written while there was room."),
            T0,
        )
        .unwrap();
    }
    let mut cfg = Config::default();
    cfg.store.min_free_mb = u64::MAX >> 21;
    let e = Engine::open(&db, cfg).unwrap();
    let full = |r: strata::Result<()>| {
        let m = r.unwrap_err().to_string();
        assert!(m.starts_with("disk full:") && !m.contains('\n'), "{m}");
    };
    full(
        e.append("x", turn(2, "bo", "No room for this one."), T0)
            .map(drop),
    );
    let p = write(dir.path(), "a.md", "A document with no room to go.\n");
    full(e.ingest_files("kb", None, &[p], T0).map(drop));
    full(rt.block_on(e.compress("x", T0, &NoProgress)).map(drop));
    assert_eq!(e.scope_names().unwrap(), ["x"]);
    assert_eq!(e.scope_stats("x", T0).unwrap().sources, 1);
}

#[test]
fn two_scopes_holding_the_same_file_keep_their_own_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.md");
    std::fs::write(
        &path,
        "# Notes\n\nThe harbour levy was raised to 4 percent in March after a long debate.\n",
    )
    .unwrap();
    let e = Engine::in_memory(Config::default()).unwrap();
    for scope in ["one", "two"] {
        e.ingest_files(scope, None, std::slice::from_ref(&path), T0)
            .unwrap();
        rt().block_on(e.compress(scope, T0, &NoProgress)).unwrap();
    }
    for scope in ["one", "two"] {
        let hits =
            futures::executor::block_on(e.grep(&[scope.to_string()], "harbour levy", &[], 10, T0))
                .unwrap();
        assert!(
            !hits.is_empty(),
            "{scope}: its chunk is found in its own scope"
        );
        assert!(hits.iter().all(|h| h.scope == scope), "{hits:?}");
        let r = rt()
            .block_on(e.query(&strata::Ask::new(
                &[scope.to_string()],
                "What was the harbour levy raised to?",
                T0,
            )))
            .unwrap();
        check_citations(&e, &r);
        assert!(r.answer.contains("4 percent"), "{scope}: {}", r.answer);
    }
}
