//! `strata repair` on a store an engine wrote (the unit tests of `store::sled::repair`, in
//! strata-store, cover the files it sets aside; this one needs the engine to ingest).

use std::path::PathBuf;
use strata::{Config, Engine, Store, repair::repair};

/// A lost blob file (sled keeps large pages in `blobs/`): the page is unreadable, the
/// rest is salvaged, and the sources that lost their text leave their scope.
#[test]
fn repair_salvages_a_store_with_a_lost_blob() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("strata");
    let files: Vec<PathBuf> = (0..6)
        .map(|i| {
            let p = dir.path().join(format!("doc{i}.txt"));
            // Numbers that do not repeat, so that the text stays large once compressed.
            let mut x: u64 = 0x9e37_79b9 + i;
            let text: String = (0..12_000)
                .map(|k| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    format!("Document {i} lantern {k} weighs {} grams. ", x >> 40)
                })
                .collect();
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect();
    let cfg = Config::default();
    let engine = Engine::open(&db, cfg.clone()).unwrap();
    engine.ingest_files("docs", None, &files, 1).unwrap();
    drop(engine);
    // Open once more so that sled's snapshot covers the whole log: the damage below is
    // then met when reading, not while sled replays its log at open.
    // sled's flusher thread lets go of the file lock a moment after the engine is
    // dropped (as `SledBackend::open` waits for, so does this).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match sled::Config::new().path(db.join("store")).open() {
            Ok(d) => break drop(d),
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    }
    let blobs: Vec<PathBuf> = std::fs::read_dir(db.join("store/blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!blobs.is_empty(), "no value was large enough to be a blob");
    // Some blobs are superseded versions sled has not collected yet: lose them all.
    for b in &blobs {
        std::fs::remove_file(b).unwrap();
    }

    let r = repair(&db, &cfg).unwrap();
    assert!(r.salvaged, "{r:?}");
    assert!(!r.unreadable_trees.is_empty(), "{r:?}");
    assert!(db.join("damaged").read_dir().unwrap().next().is_some());
    let store = Store::open(&db).unwrap();
    // Nothing was removed before (an ingest only writes); entries left behind are losses,
    // so no reader trusts what a build left about its tree's liveness.
    assert!(store.losses().unwrap().unwrap() >= 1, "a salvage is a loss");
    let scope = store.get_scope("docs").unwrap().unwrap();
    assert_eq!(
        scope.sources.len() + r.dropped_sources.len(),
        files.len(),
        "{r:?}"
    );
    for s in &scope.sources {
        assert!(store.get_text("docs", &s.id).unwrap().is_some(), "{}", s.id);
    }
    drop(store);
    // Sound now: a second repair finds nothing to do.
    let again = repair(&db, &cfg).unwrap();
    assert!(again.actions.is_empty() && !again.salvaged, "{again:?}");
}
