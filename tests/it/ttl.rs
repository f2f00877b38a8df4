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
