//! Property tests for the invariants in DESIGN.md.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::HashMap;
use strata::chunk::{Structure, chunk};
use strata::node::{Meta, Node, NodeId};
use strata::{Level, Store};

fn doc_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z0-9 ,]{0,40}\\. ",
        Just("\n\n".to_string()),
        Just("\n".to_string()),
        "# [A-Za-z ]{0,12}\n",
        "## [A-Za-z ]{0,12}\n",
        Just("```\n# code\n\n```\n".to_string()),
        "[é€—日本語 ]{1,6}",
        "[a-z]{30,90}",
        "\\PC{0,20}",
    ];
    prop::collection::vec(piece, 0..60).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Invariant 2: chunk spans tile their source exactly, at char boundaries, within budget.
    #[test]
    fn chunks_tile_the_source(text in doc_text(), budget in 16usize..200, turn in any::<bool>()) {
        let structure = if turn { Structure::Turn } else { Structure::Document };
        let chunks = chunk(&text, structure, budget);
        let mut pos = 0;
        for c in &chunks {
            prop_assert_eq!(c.start, pos);
            prop_assert!(c.end > c.start);
            prop_assert!(text.is_char_boundary(c.start) && text.is_char_boundary(c.end));
            prop_assert_eq!(c.tokens, strata::token::count(&text[c.start..c.end]));
            // Over budget only when a single character is.
            prop_assert!(c.tokens <= budget || text[c.start..c.end].chars().count() == 1);
            pos = c.end;
        }
        prop_assert_eq!(pos, text.len());
        if !text.is_empty() { prop_assert!(!chunks.is_empty()); }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put(u8, Option<u64>),
    Remove(u8),
    Get(u8, u64),
    Sweep(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, prop::option::of(0u64..100)).prop_map(|(k, t)| Op::Put(k, t)),
        (0u8..12).prop_map(Op::Remove),
        (0u8..12, 0u64..120).prop_map(|(k, t)| Op::Get(k, t)),
        (0u64..120).prop_map(Op::Sweep),
    ]
}

fn node(k: u8, expires_at: Option<u64>, version: usize) -> Node {
    Node {
        id: NodeId([k; 32]),
        scope: "s".into(),
        level: Level::Detailed,
        text: format!("text {k} v{version}"),
        children: vec![NodeId([k.wrapping_add(1); 32])],
        citations: vec![],
        tokens: 3,
        meta: Meta::default(),
        created_at: 0,
        expires_at,
    }
}

/// Runs `ops` against `store` and a map with deadlines, which must agree throughout; every
/// node a write or removal touched must be marked pending for the index.
fn store_agrees_with_model(store: Store, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut model: HashMap<u8, Node> = HashMap::new();
    for (i, op) in ops.into_iter().enumerate() {
        let before = store.pending_index().unwrap();
        let mut touched = None;
        match op {
            Op::Put(k, t) => {
                let n = node(k, t, i);
                store.put_node(&n).unwrap();
                model.insert(k, n);
                touched = Some(k);
            }
            Op::Remove(k) => {
                let existed = store.remove_node(&NodeId([k; 32])).unwrap();
                prop_assert_eq!(existed, model.remove(&k).is_some());
                touched = existed.then_some(k);
            }
            Op::Get(k, now) => {
                let got = store.get_live(&NodeId([k; 32]), now).unwrap();
                let want = model.get(&k).filter(|n| n.is_live(now)).cloned();
                prop_assert_eq!(
                    store.contains_live(&NodeId([k; 32]), now).unwrap(),
                    want.is_some()
                );
                prop_assert_eq!(got, want);
            }
            Op::Sweep(now) => {
                let mut swept = store.sweep(now).unwrap();
                let mut want: Vec<NodeId> = model
                    .values()
                    .filter(|n| !n.is_live(now))
                    .map(|n| n.id)
                    .collect();
                model.retain(|_, n| n.is_live(now));
                swept.sort();
                want.sort();
                let pending: Vec<NodeId> = store
                    .pending_index()
                    .unwrap()
                    .iter()
                    .map(|m| m.id)
                    .collect();
                for id in &swept {
                    prop_assert!(pending.contains(id), "swept node not pending");
                }
                prop_assert_eq!(swept, want);
            }
        }
        if let Some(k) = touched {
            let after = store.pending_index().unwrap();
            let mark = after.iter().find(|m| m.id == NodeId([k; 32]));
            prop_assert!(mark.is_some(), "changed node not pending");
            prop_assert!(!before.contains(mark.unwrap()), "the mark did not move");
        }
        prop_assert_eq!(store.n_nodes(), model.len());
        let deadline = model.values().filter_map(|n| n.expires_at).min();
        prop_assert_eq!(store.next_deadline().unwrap(), deadline);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The sled store behaves like a map with deadlines under random put/get/remove/sweep.
    #[test]
    fn store_behaves_like_a_model(ops in prop::collection::vec(op(), 1..60)) {
        store_agrees_with_model(Store::temporary().unwrap(), ops)?;
    }

    /// So does the in-memory store.
    #[test]
    fn memory_store_behaves_like_a_model(ops in prop::collection::vec(op(), 1..60)) {
        store_agrees_with_model(Store::in_memory(), ops)?;
    }
}
