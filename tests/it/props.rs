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

/// Invariant 2: chunk spans tile their source exactly, at char boundaries, within budget.
fn check_chunks(text: &str, structure: Structure, budget: usize) -> Result<(), TestCaseError> {
    let chunks = chunk(text, structure, budget);
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
    if !text.is_empty() {
        prop_assert!(!chunks.is_empty());
    }
    Ok(())
}

/// Text a tokenizer and a sentence splitter find hard: long runs without whitespace or
/// sentence ends (one character repeated, random letters, base64, CJK, combining marks,
/// emoji), long runs of whitespace, mixed with a little ordinary prose.
fn flat_text() -> impl Strategy<Value = String> {
    let run = (
        prop::sample::select(vec![
            'a', 'Z', '7', '-', ' ', '\n', '.', ')', '日', 'é', '😀', '\u{301}',
        ]),
        1usize..3000,
    )
        .prop_map(|(c, n)| c.to_string().repeat(n));
    let piece = prop_oneof![
        run,
        "[a-z]{100,3000}",
        "[A-Za-z0-9+/]{100,3000}",
        "[日本語中文字的一是不了人我在有他这のテキスト]{50,1200}",
        "[a-z]{1,8}( [a-z]{1,8}){20,400}",
        "[a-zA-Z0-9 ,]{0,40}\\. ",
        Just("\n\n".to_string()),
        "# [A-Za-z ]{0,12}\n",
    ];
    prop::collection::vec(piece, 1..6).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn chunks_tile_the_source(text in doc_text(), budget in 16usize..200, turn in any::<bool>()) {
        let structure = if turn { Structure::Turn } else { Structure::Document };
        check_chunks(&text, structure, budget)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The same invariant on text without whitespace or sentence ends (issue 9: it used to
    /// take super-linear time, and is cut by a different path).
    #[test]
    fn chunks_of_flat_text_tile_and_fit(text in flat_text(), budget in 16usize..600, turn in any::<bool>()) {
        let structure = if turn { Structure::Turn } else { Structure::Document };
        check_chunks(&text, structure, budget)?;
    }
}

/// Larger inputs of each hard kind: the chunks tile and fit, and a long run without
/// whitespace is not cut into needlessly small pieces. (Text whose words are packed one by
/// one — CJK, a sentence longer than the budget — fills chunks less: per-word counts add
/// up to more than the joined text has. That is the packing ordinary text gets too.)
#[test]
fn long_runs_are_cut_into_nearly_full_chunks() {
    let letters: String = (0..100_000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    let cjk: String = "日本語の文章には空白がない中文也没有空格".repeat(2_000);
    let prose = "The harbour line opens in March. ".repeat(300);
    let inputs = [
        ("abc", "abcdefghij".repeat(10_000), true),
        ("letters", letters.clone(), true),
        ("one char", "a".repeat(100_000), true),
        ("dashes", "-".repeat(100_000), true),
        ("spaces", format!("{}x", " ".repeat(120_000)), true),
        ("blank lines", format!("{}x", "\n".repeat(120_000)), true),
        (
            "blank lines inside",
            format!("{prose}\n{}# Heading\n\n{prose}", "\n".repeat(60_000)),
            true,
        ),
        ("giant word", format!("{prose}{letters}{prose}"), true),
        ("cjk", cjk, false),
        (
            "no sentence ends",
            "harbour line budget ".repeat(5_000),
            false,
        ),
    ];
    for (name, text, full) in &inputs {
        for budget in [64, 400] {
            check_chunks(text, Structure::Document, budget)
                .unwrap_or_else(|e| panic!("{name}, budget {budget}: {e}"));
            if !full {
                continue;
            }
            let chunks = chunk(text, Structure::Document, budget);
            let total: usize = chunks.iter().map(|c| c.tokens).sum();
            // All but a few chunks (the ends of runs, the prose around a giant word) are
            // at least 80 % full.
            let thin = chunks.iter().filter(|c| c.tokens * 5 < budget * 4).count();
            assert!(
                thin <= 4,
                "{name}, budget {budget}: {thin} of {} chunks under 80 % ({total} tokens)",
                chunks.len()
            );
        }
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

    /// And the PostgreSQL store (each case on a fresh database; skipped without
    /// PostgreSQL).
    #[test]
    fn postgres_store_behaves_like_a_model(ops in prop::collection::vec(op(), 1..60)) {
        if let Some(url) = crate::postgres::database("postgres_store_behaves_like_a_model") {
            let store = Store::open_postgres(&url, "props", 2, None).unwrap();
            store_agrees_with_model(store, ops)?;
        }
    }
}
