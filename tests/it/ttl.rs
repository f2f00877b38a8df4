//! TTL: expiry arithmetic with an explicit `now`, rebuilds of expired nodes, and the
//! sweeper task under tokio's paused clock. No test sleeps.

use crate::support::*;
use strata::node::{Meta, Node, NodeId};
use strata::{Config, Level, LevelChoice, NoProgress, Store};

fn ttl_config(ttl: u64) -> Config {
    let mut c = Config::default();
    c.store.ttl_secs = ttl;
    c
}

#[test]
fn an_expired_node_is_rebuilt_never_served() {
    let rt = rt();
    let e = samples(ttl_config(100));
    let first = compress(&rt, &e, "debate", T0);
    let plan = e.plan("debate").unwrap();
    let abs = e.store().get_node(&plan.abstract_id).unwrap().unwrap();
    assert_eq!(abs.expires_at, Some(T0 + 100));
    // FULL nodes never expire.
    let full = e.store().get_node(&plan.chunks[0].full).unwrap().unwrap();
    assert_eq!(full.expires_at, None);

    // Before the deadline: cache hits.
    let r = compress(&rt, &e, "debate", T0 + 99);
    assert_eq!(r.model_calls, 0);
    // At the deadline: expired, not served, rebuilt on demand by a read.
    assert!(
        e.store()
            .get_live(&plan.abstract_id, T0 + 100)
            .unwrap()
            .is_none()
    );
    assert!(
        e.store()
            .get_live(&plan.chunks[0].full, T0 + 10_000)
            .unwrap()
            .is_some()
    );
    let w = rt
        .block_on(e.context(
            "debate",
            LevelChoice::Fixed(Level::Abstract),
            4000,
            T0 + 100,
            &NoProgress,
        ))
        .unwrap();
    assert!(!w.text.is_empty());
    let rebuilt = e.store().get_node(&plan.abstract_id).unwrap().unwrap();
    assert_eq!(rebuilt.expires_at, Some(T0 + 200));
    assert_eq!(
        rebuilt.text, abs.text,
        "the offline compressor is deterministic"
    );
    // Everything was rebuilt by that read, so a compress now is all hits.
    let r = compress(&rt, &e, "debate", T0 + 101);
    assert_eq!((r.model_calls, r.nodes_built), (0, 0));
    assert_eq!(first.nodes_built, first.nodes_total);

    // gc sweeps what expired.
    let g = e.gc(T0 + 500).unwrap();
    assert_eq!(g.expired, first.nodes_total);
    assert_eq!(
        g.remaining,
        plan.chunks.len() + e.plan("docs").unwrap().chunks.len()
    );
}

#[test]
fn ttl_zero_never_expires() {
    let rt = rt();
    let e = samples(ttl_config(0));
    compress(&rt, &e, "docs", T0);
    let plan = e.plan("docs").unwrap();
    assert_eq!(
        e.store()
            .get_node(&plan.abstract_id)
            .unwrap()
            .unwrap()
            .expires_at,
        None
    );
    assert_eq!(e.gc(u64::MAX).unwrap().expired, 0);
    assert_eq!(compress(&rt, &e, "docs", u64::MAX).model_calls, 0);
}

fn node(seed: u8, expires_at: Option<u64>) -> Node {
    Node {
        id: NodeId([seed; 32]),
        scope: "s".into(),
        level: Level::Summary,
        text: format!("node {seed}"),
        children: vec![],
        citations: vec![],
        tokens: 2,
        meta: Meta::default(),
        created_at: 0,
        expires_at,
    }
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_wakes_at_the_earliest_deadline() {
    let store = Store::temporary().unwrap();
    let base = 1_000;
    let clock = strata::expire::tokio_clock(base);
    let start = tokio::time::Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let guard = strata::expire::spawn_sweeper(store.clone(), clock, move |ids| {
        tx.send(ids).unwrap();
    });
    store.put_node(&node(1, Some(base + 300))).unwrap();
    store.put_node(&node(2, Some(base + 60))).unwrap();
    store.put_node(&node(3, None)).unwrap();

    // Paused time auto-advances while everything waits: the sweeper's sleep decides.
    let first = rx.recv().await.unwrap();
    assert_eq!(first, vec![NodeId([2; 32])]);
    assert_eq!(start.elapsed().as_secs(), 60);
    // An earlier deadline arriving wakes the sweeper early.
    store.put_node(&node(4, Some(base + 120))).unwrap();
    assert_eq!(rx.recv().await.unwrap(), vec![NodeId([4; 32])]);
    assert_eq!(start.elapsed().as_secs(), 120);
    assert_eq!(rx.recv().await.unwrap(), vec![NodeId([1; 32])]);
    assert_eq!(start.elapsed().as_secs(), 300);
    assert!(store.get_node(&NodeId([3; 32])).unwrap().is_some());
    assert_eq!(store.next_deadline().unwrap(), None);
    guard.stop().await;
}

#[test]
fn warming_rebuilds_what_would_expire_soon() {
    let rt = rt();
    let e = samples(ttl_config(100));
    compress(&rt, &e, "debate", T0);
    let plan = e.plan("debate").unwrap();
    // Nothing expires before T0 + 60: a warming build with that horizon is all hits.
    let r = rt
        .block_on(e.compress_with("debate", T0 + 50, Some(T0 + 60), &NoProgress))
        .unwrap();
    assert_eq!((r.model_calls, r.nodes_built), (0, 0));
    // Everything expires (at T0 + 100) within a horizon of T0 + 120: rebuilt ahead of time,
    // with deadlines counted from the warming build.
    let r = rt
        .block_on(e.compress_with("debate", T0 + 50, Some(T0 + 120), &NoProgress))
        .unwrap();
    assert_eq!(r.nodes_built, r.nodes_total);
    let abs = e.store().get_node(&plan.abstract_id).unwrap().unwrap();
    assert_eq!(abs.expires_at, Some(T0 + 150));
    assert!(
        e.store()
            .contains_live(&plan.abstract_id, T0 + 120)
            .unwrap()
    );
}

/// Fallback marks are written, replaced and removed with their node, never on their own.
#[test]
fn fallback_marks_live_and_die_with_their_node() {
    use strata::node::FallbackMark;
    use strata::store::{EmbedKey, FallbackCounts};
    let store = Store::temporary().unwrap();
    let counts = |nodes, awaiting_model| FallbackCounts {
        nodes,
        awaiting_model,
    };
    assert!(!store.has_fallback_marks());
    store
        .put_node_marked(&node(1, Some(100)), Some(FallbackMark::ModelUnavailable))
        .unwrap();
    store
        .put_node_marked(&node(2, None), Some(FallbackMark::Unfaithful))
        .unwrap();
    store.put_node(&node(3, None)).unwrap();
    let mark = |k: u8| store.fallback_mark(&NodeId([k; 32])).unwrap();
    assert_eq!(mark(1), Some(FallbackMark::ModelUnavailable));
    assert_eq!(mark(2), Some(FallbackMark::Unfaithful));
    assert_eq!(mark(3), None);
    assert_eq!(store.fallback_counts().unwrap(), counts(2, 1));

    // Made again while the model is still down: still marked. Made by the model: cleared.
    store
        .put_node_marked(&node(1, Some(200)), Some(FallbackMark::BuiltOverFallback))
        .unwrap();
    assert_eq!(mark(1), Some(FallbackMark::BuiltOverFallback));
    store.put_node(&node(2, None)).unwrap();
    assert_eq!(mark(2), None);
    assert_eq!(store.fallback_counts().unwrap(), counts(1, 1));

    // Expired and swept, or removed: the mark goes with the node.
    assert_eq!(store.sweep(200).unwrap(), vec![NodeId([1; 32])]);
    assert_eq!(mark(1), None);
    store
        .put_node_marked(&node(4, None), Some(FallbackMark::Empty))
        .unwrap();
    assert!(store.remove_node(&NodeId([4; 32])).unwrap());
    assert_eq!(mark(4), None);
    assert!(!store.has_fallback_marks());

    // A node remade under its id loses the vectors of its old text, for every embedder.
    let (a, b) = (EmbedKey::of("embedder a"), EmbedKey::of("embedder b"));
    for k in [a, b] {
        store
            .put_embeddings(
                k,
                &[(NodeId([3; 32]), vec![1.0]), (NodeId([5; 32]), vec![1.0])],
            )
            .unwrap();
    }
    store.remove_node_embeddings(&NodeId([3; 32])).unwrap();
    for k in [a, b] {
        assert!(!store.has_embedding(k, &NodeId([3; 32])).unwrap());
        assert!(store.has_embedding(k, &NodeId([5; 32])).unwrap());
    }
}

/// The offline compressor is its own fallback: nothing it makes is marked.
#[test]
fn the_offline_compressor_marks_nothing() {
    let rt = rt();
    let e = samples(Config::default());
    for scope in ["debate", "docs"] {
        let r = compress(&rt, &e, scope, T0);
        assert_eq!(
            (r.fallbacks, r.fallback_nodes, r.fallback_retried),
            (0, 0, 0)
        );
    }
    assert!(!e.store().has_fallback_marks());
    assert_eq!(e.stats(T0).unwrap().fallbacks.nodes, 0);
}
