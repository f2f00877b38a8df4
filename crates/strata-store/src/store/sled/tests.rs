use super::*;
use crate::store::tests::{record, scope_record};

// Regression: `kb\0x` + `a.md` and `kb` + `x\0a.md` were one key, so a document
// posted to one scope replaced a document of another. (The store-level check runs in
// the conformance suite for every backend.)
#[test]
fn source_keys_are_length_prefixed() {
    assert_ne!(source_key("kb\0x", "a.md"), source_key("kb", "x\0a.md"));
    assert_ne!(source_key("ab", "c"), source_key("a", "bc"));
    assert!(source_key("kb", "a").starts_with(&[0, 0, 0, 2, b'k', b'b']));
}

#[test]
fn a_layout_1_store_is_migrated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::Config::new()
            .path(dir.path().join("store"))
            .open()
            .unwrap();
        db.insert("format", &[1u8]).unwrap();
        let old_key = b"kb\0docs/a.md".to_vec();
        db.open_tree("sources")
            .unwrap()
            .insert(&old_key, encode(&record("kb", "docs/a.md")).unwrap())
            .unwrap();
        db.open_tree("texts")
            .unwrap()
            .insert(&old_key, encode(&"text of a".to_string()).unwrap())
            .unwrap();
        db.open_tree("scopes")
            .unwrap()
            .insert("kb", encode(&scope_record("kb", &["docs/a.md"])).unwrap())
            .unwrap();
        db.open_tree("unindexed")
            .unwrap()
            .insert([7u8; 32], &[][..])
            .unwrap();
        db.flush().unwrap();
    }
    let s = SledBackend::open(dir.path()).unwrap();
    assert_eq!(
        s.get_text("kb", "docs/a.md").unwrap().as_deref(),
        Some("text of a")
    );
    assert!(s.get_source("kb", "docs/a.md").unwrap().is_some());
    // A layout-1 pending mark (no generation) reads as generation 0 and clears.
    let marks = s.pending_index().unwrap();
    assert_eq!(marks[0].generation, 0);
    s.clear_pending_index(&marks).unwrap();
    assert_eq!(s.n_pending_index(), 0);
    drop(s);
    // Opening again finds the current layout and changes nothing.
    let s = SledBackend::open(dir.path()).unwrap();
    assert!(s.get_source("kb", "docs/a.md").unwrap().is_some());
    assert_eq!(s.db.get("format").unwrap().unwrap().as_ref(), &[LAYOUT]);
}

/// A layout-2 store (before source times): its version 1 node and source records read as
/// records without a time, and the open moves it to the current layout.
#[test]
fn a_layout_2_store_with_version_1_records_opens() {
    use crate::store::record::v1;
    let dir = tempfile::tempdir().unwrap();
    let node = crate::node::full_id("kb", "docs/a.md", 0, 9, "text of a");
    {
        let db = sled::Config::new()
            .path(dir.path().join("store"))
            .open()
            .unwrap();
        db.insert("format", &[2u8]).unwrap();
        let key = source_key("kb", "docs/a.md");
        let old = v1::SourceRecord {
            id: "docs/a.md".into(),
            scope: "kb".into(),
            seq: 0,
            round: None,
            speaker: None,
            hash: *blake3::hash(b"text of a").as_bytes(),
            bytes: 9,
            chunk_tokens: 512,
            chunks: Vec::new(),
        };
        db.open_tree("sources")
            .unwrap()
            .insert(&key, v1::encode(&old))
            .unwrap();
        let n = v1::Node {
            id: node,
            scope: "kb".into(),
            level: crate::level::Level::Full,
            text: "text of a".into(),
            children: Vec::new(),
            citations: vec![crate::node::Span {
                source: "docs/a.md".into(),
                start: 0,
                end: 9,
            }],
            tokens: 3,
            meta: v1::Meta {
                rounds: Vec::new(),
                speakers: Vec::new(),
                headings: Vec::new(),
                tags: None,
            },
            created_at: 1,
            expires_at: None,
        };
        db.open_tree("nodes")
            .unwrap()
            .insert(node.0, v1::encode(&n))
            .unwrap();
        db.flush().unwrap();
    }
    let s = SledBackend::open(dir.path()).unwrap();
    assert_eq!(s.db.get("format").unwrap().unwrap().as_ref(), &[LAYOUT]);
    let r = s.get_source("kb", "docs/a.md").unwrap().unwrap();
    assert_eq!((r.bytes, r.time), (9, None));
    let n = s.get_node(&node).unwrap().unwrap();
    assert_eq!((n.text.as_str(), n.meta.time), ("text of a", None));
}

/// A layout-3 store keeps each scope's list inline (scope record format 1): it reads as it
/// was, and the scope's next write moves the list to `members` and writes the head alone.
#[test]
fn a_layout_3_scope_moves_its_list_out_at_its_next_write() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::Config::new()
            .path(dir.path().join("store"))
            .open()
            .unwrap();
        db.insert("format", &[3u8]).unwrap();
        db.open_tree("scopes")
            .unwrap()
            .insert("d", encode(&scope_record("d", &["a", "b", "c"])).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let s = SledBackend::open(dir.path()).unwrap();
    assert_eq!(s.db.get("format").unwrap().unwrap().as_ref(), &[LAYOUT]);
    let version = |s: &SledBackend| s.scopes.get("d").unwrap().unwrap()[0] & 0x7f;
    assert_eq!(version(&s), 1);
    let store = crate::store::Store::new(std::sync::Arc::new(s));
    crate::store::tests::an_inline_scope_reads_and_moves_its_list_out(&store);
    drop(store);
    let s = SledBackend::open(dir.path()).unwrap();
    assert_eq!(version(&s), 2, "the head alone, format 2");
    assert_eq!(s.members.len(), 3);
}

#[test]
fn a_newer_layout_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::Config::new()
            .path(dir.path().join("store"))
            .open()
            .unwrap();
        db.insert("format", &[LAYOUT + 1]).unwrap();
        db.flush().unwrap();
    }
    let e = SledBackend::open(dir.path()).err().unwrap().to_string();
    assert!(e.contains("newer") && !e.contains('\n'), "{e}");
}

// Regression: a second process got sled's raw 400-character lock message, twice.
#[test]
fn a_store_in_use_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let _first = SledBackend::open(dir.path()).unwrap();
    // sled's lock is a file lock per open file: a second open in this process
    // contends like another process would.
    let e = SledBackend::open(dir.path()).err().unwrap().to_string();
    assert!(e.contains("in use by another strata process"), "{e}");
    assert!(!e.contains('\n') && e.len() < 300, "{e}");
    // A read-only open of it too.
    let e = SledBackend::open_read_only(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("in use by another strata process"), "{e}");
}

/// A store opened read-only refuses to write (sled's read-only open), and its files are
/// as they were; a writable open after it works as before.
#[test]
fn a_read_only_store_writes_nothing_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledBackend::open(dir.path()).unwrap();
        s.put_nodes(&[crate::store::tests::node(1, None)], None)
            .unwrap();
        s.db.flush().unwrap();
    }
    let before = store_files(&dir.path().join("store"));
    {
        let s = SledBackend::open_read_only(dir.path()).unwrap().unwrap();
        assert_eq!(s.node_ids().unwrap(), vec![NodeId([1; 32])]);
        s.db.insert("x", "y").unwrap();
        // What a caller sees: the refusal it answers by opening the store writable.
        assert!(
            matches!(s.db.flush().db(), Err(Error::ReadOnly)),
            "a write reached the log"
        );
    }
    assert!(
        before == store_files(&dir.path().join("store")),
        "a read-only open changed the store"
    );
    let s = SledBackend::open(dir.path()).unwrap();
    assert_eq!(s.node_ids().unwrap(), vec![NodeId([1; 32])]);
    assert_eq!(s.db.get("x").unwrap(), None);
}

/// A write too large for sled's log goes to a blob file of its own; in a read-only open it
/// is refused before the file exists, and the open still closes: sled 0.34.7 left the log
/// buffer's space claimed on that failure, and the close waited for it forever (a
/// read-only `context` process that had printed its window hung at exit; a tree's upkeep
/// during a read can consolidate a page into a blob the same way).
#[test]
fn a_refused_blob_write_in_a_read_only_open_neither_writes_nor_hangs() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledBackend::open(dir.path()).unwrap();
        s.put_nodes(&[crate::store::tests::node(1, None)], None)
            .unwrap();
        s.db.flush().unwrap();
    }
    let before = store_files(&dir.path().join("store"));
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let s = SledBackend::open_read_only(&path).unwrap().unwrap();
        let big = vec![7u8; 4 << 20];
        let refused = matches!(s.db.insert("big", big).db(), Err(Error::ReadOnly));
        drop(s);
        tx.send(refused).unwrap();
    });
    let refused = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("a read-only open whose blob write was refused never closed");
    assert!(refused, "the blob write was not refused as read-only");
    assert!(
        before == store_files(&dir.path().join("store")),
        "a read-only open left or changed a file"
    );
    let s = SledBackend::open(dir.path()).unwrap();
    assert_eq!(s.node_ids().unwrap(), vec![NodeId([1; 32])]);
    assert_eq!(s.db.get("big").unwrap(), None);
}

/// A read-only open reads a tree a writer left wanting upkeep (nodes past their split size,
/// a split not yet known to its parent) as it is, and a page it evicts reads back the same:
/// sled 0.34.7 would do the upkeep in memory, pointing pages at log space that is never
/// written, so a page read again after eviction failed — and an iteration retried the same
/// error forever (a read-only `stats` counted embeddings until it held 19 GB).
#[test]
fn a_read_only_open_reads_a_tree_that_wants_upkeep_with_a_small_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    // Keys in hash order (as node ids are) land on leaves all over the tree, and a leaf
    // grown past its split size is split only by the next traversal that meets it: a
    // writer leaves many such leaves behind.
    let key = |i: u32| i.wrapping_mul(2_654_435_761).to_be_bytes();
    let value = |i: u32| vec![(i % 251) as u8; 1_000 + (i % 1_000) as usize];
    let n = 20_000u32;
    {
        let db = sled::Config::new().path(&path).open().unwrap();
        let t = db.open_tree("t").unwrap();
        for i in 0..n {
            t.insert(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    let before = store_files(&path);
    let p = path.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let db = sled::Config::new()
            .path(&p)
            .read_only(true)
            .cache_capacity(256 * 1024)
            .open()
            .unwrap();
        let t = db.open_tree("t").unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            let mut count = 0u32;
            for kv in t.iter() {
                let (_, v) = kv.unwrap();
                assert!(v.len() >= 1_000 && v.iter().all(|&b| b == v[0]));
                count += 1;
            }
            seen.push(count);
        }
        for i in (0..n).step_by(97) {
            assert_eq!(t.get(key(i)).unwrap().unwrap(), value(i), "key {i}");
        }
        tx.send((seen, t.len())).unwrap();
    });
    let (seen, len) = rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("the read-only reads never ended");
    assert_eq!(seen, vec![n; 2]);
    assert_eq!(len, n as usize);
    assert!(
        before == store_files(&path),
        "a read-only open changed the store"
    );
}

/// Every file and directory under `d` with its bytes (none for a directory), sorted: what
/// a read-only open must leave as it found it.
fn store_files(d: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    fn walk(d: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
                out.push((p, Vec::new()));
            } else {
                let bytes = std::fs::read(&p).unwrap();
                out.push((p, bytes));
            }
        }
    }
    let mut out = Vec::new();
    walk(d, &mut out);
    out.sort();
    out
}

/// A checkpoint leaves a snapshot at the log's tip: the next opens start there, and find
/// everything written before it (and after it: a write after a checkpoint is recovered
/// from the log).
#[test]
fn a_checkpoint_snapshots_the_log_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let snaps = |d: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d.join("store"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("snap."))
            .collect();
        v.sort();
        v
    };
    {
        let s = SledBackend::open(dir.path()).unwrap();
        let before = snaps(dir.path());
        let nodes: Vec<Node> = (1..=200u8)
            .map(|i| crate::store::tests::node(i, None))
            .collect();
        s.put_nodes(&nodes, None).unwrap();
        s.checkpoint().unwrap();
        let after = snaps(dir.path());
        assert_eq!(after.len(), 1, "{after:?}");
        assert!(after > before, "no newer snapshot: {before:?} -> {after:?}");
        s.put_nodes(&[crate::store::tests::node(201, None)], None)
            .unwrap();
        s.flush().unwrap();
    }
    let r = SledBackend::open_read_only(dir.path()).unwrap().unwrap();
    assert_eq!(r.node_ids().unwrap().len(), 201);
    drop(r);
    let w = SledBackend::open(dir.path()).unwrap();
    assert_eq!(w.node_ids().unwrap().len(), 201);
}

/// The count of losses is on disk with the nodes: a reader opened after a removal sees it
/// moved (a count kept in memory would let it trust a tree a removal broke).
#[test]
fn the_count_of_losses_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledBackend::open(dir.path()).unwrap();
        assert_eq!(s.losses().unwrap(), Some(0));
        s.put_nodes(&[crate::store::tests::node(1, None)], None)
            .unwrap();
        assert!(s.remove_node(&NodeId([1; 32])).unwrap());
        s.db.flush().unwrap();
    }
    let s = SledBackend::open_read_only(dir.path())
        .unwrap()
        .expect("a store of this layout opens read-only");
    assert_eq!(s.losses().unwrap(), Some(1));
    assert_eq!(s.node_ids().unwrap(), Vec::<NodeId>::new(), "not a node");
}

/// What a build leaves for readers is kept in the default tree, not beside the views (a
/// view of a large scope is a megabyte that sled writes, with its leaf, as one blob, so
/// a read of the small record beside it read the megabyte). A store that kept it among
/// the views is read there until the next build moves it.
#[test]
fn liveness_lives_apart_from_the_views_and_older_stores_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledBackend::open(dir.path()).unwrap();
    let store = crate::store::Store::new(std::sync::Arc::new(s));
    // As an older strata wrote it: in `views`, under the scope's liveness key.
    store
        .put_view(&crate::store::liveness_key("kb"), &vec![1f32])
        .unwrap();
    store.put_view("kb", &vec![0f32; 300_000]).unwrap();
    assert_eq!(
        store.get_liveness::<Vec<f32>>("kb").unwrap(),
        Some(vec![1.0])
    );
    store.put_liveness("kb", &vec![2f32]).unwrap();
    assert_eq!(
        store.get_liveness::<Vec<f32>>("kb").unwrap(),
        Some(vec![2.0])
    );
    drop(store);
    let s = SledBackend::open(dir.path()).unwrap();
    assert!(s.db.get(live_key("kb")).unwrap().is_some());
    assert!(
        s.views
            .get(crate::store::liveness_key("kb").as_bytes())
            .unwrap()
            .is_none(),
        "the old key is removed when the new one is written"
    );
    assert_eq!(s.views.len(), 1, "the view itself stays");
}

/// A source of ~1 KB (sentences a DETAILED quotes) and its one FULL node.
fn cited_source(text: &str) -> (crate::store::SourceStep, Node) {
    let full = Node {
        id: NodeId([1; 32]),
        level: crate::level::Level::Full,
        text: text.into(),
        citations: vec![crate::node::Span {
            source: "a".into(),
            start: 0,
            end: text.len() as u64,
        }],
        ..crate::store::tests::node(1, None)
    };
    let rec = scope_record("s", &["a"]);
    let step = crate::store::SourceStep {
        scope: rec.head(),
        list: rec.sources,
        put: vec![crate::store::SourcePut {
            record: record("s", "a"),
            text: text.into(),
            nodes: vec![full.clone()],
        }],
        remove_sources: Vec::new(),
        remove_nodes: Vec::new(),
    };
    (step, full)
}

const CITED: &str = "The council met on Monday to weigh the Eastgate line. It voted four to one \
                     to fund the line at 48 million euros. Nobody objected to the river crossing \
                     plan, which the transit office costed at 12 million. The vote on fares was \
                     put off to the next meeting, at the chair's request.";

/// A DETAILED node of `text` over `full`, written.
fn detailed_over(s: &SledBackend, full: &Node, text: &str) -> Node {
    let detailed = Node {
        id: NodeId([2; 32]),
        level: crate::level::Level::Detailed,
        text: text.into(),
        children: vec![full.id],
        ..full.clone()
    };
    s.put_nodes(std::slice::from_ref(&detailed), None).unwrap();
    detailed
}

/// Nodes whose text is their sources' (FULL) or sentences of them (the offline DETAILED,
/// SUMMARY) are kept as the ranges they quote (node format 3): read back whole, and the
/// store holds the source's text once.
#[test]
fn a_node_that_quotes_its_source_is_kept_as_ranges_and_read_back_whole() {
    let s = SledBackend::temporary().unwrap();
    let (step, full) = cited_source(CITED);
    s.write_sources(&step).unwrap();
    let detailed = detailed_over(
        &s,
        &full,
        "It voted four to one to fund the line at 48 million euros. The vote on fares \
         was put off to the next meeting, at the chair's request.",
    );
    for n in [&full, &detailed] {
        let v = s.nodes.get(n.id.0).unwrap().unwrap();
        assert_eq!(cited::format_of(&v), Some(cited::FORMAT), "{:?}", n.level);
        assert!(
            v.len() < n.text.len(),
            "{} bytes for {}",
            v.len(),
            n.text.len()
        );
        assert_eq!(s.get_node(&n.id).unwrap().as_ref(), Some(n));
    }
    // Read again in a fresh handle's cold cache, too.
    let s2 = SledBackend::from_db(s.db.clone()).unwrap();
    assert_eq!(s2.get_node(&detailed.id).unwrap(), Some(detailed));
}

/// A node built over a source whose text has since changed no longer has its chunks
/// (their ids are their text's): it reads as absent, never as other text; a build makes it
/// again.
#[test]
fn a_node_over_a_replaced_source_reads_as_absent_never_as_other_text() {
    let s = SledBackend::temporary().unwrap();
    let (step, full) = cited_source(CITED);
    s.write_sources(&step).unwrap();
    let detailed = detailed_over(
        &s,
        &full,
        "It voted four to one to fund the line at 48 million euros.",
    );
    assert_eq!(s.get_node(&detailed.id).unwrap().as_ref(), Some(&detailed));
    // The source replaced: its old FULL node removed, a new one in its place.
    let edited = CITED.replace("four to one", "three to two");
    let (mut step, mut new_full) = cited_source(&edited);
    new_full.id = NodeId([3; 32]);
    step.put[0].nodes = vec![new_full.clone()];
    step.remove_nodes = vec![full.id];
    s.write_sources(&step).unwrap();
    assert_eq!(s.get_node(&detailed.id).unwrap(), None);
    assert_eq!(s.get_node(&new_full.id).unwrap(), Some(new_full));
    assert!(
        s.nodes.get(detailed.id.0).unwrap().is_some(),
        "kept until swept"
    );
}
