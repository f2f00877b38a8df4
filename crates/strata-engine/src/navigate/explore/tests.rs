use super::*;
use crate::config::Config;
// A fixture only: the engine is how a corpus gets written (non-test code in navigate
// never imports it).
use crate::engine::Engine;
use crate::source::{InputFile, SourceInput};
use crate::store::ScopeKind;

const T0: u64 = 1_800_000_000;
const PARAGRAPHS: [&str; 4] = [
    "The ferry to Lindholm leaves every hour from the north pier and costs four euros.",
    "The harbour authority pays for the ferry out of the port dues it collects.",
    "Boat tours of the old harbour run in summer and last about ninety minutes.",
    "The lighthouse museum opens at ten and is closed on Mondays all year round.",
];

/// One document of four one-paragraph chunks; FULL nodes only (no build needed).
fn engine(min_keep: usize) -> Engine {
    let mut cfg = Config::default();
    cfg.chunk.tokens = 24;
    cfg.query.min_keep = min_keep;
    let e = Engine::in_memory(cfg).unwrap();
    let text = PARAGRAPHS.join("\n\n");
    let input = SourceInput {
        id: "notes.md".into(),
        text,
        round: None,
        speaker: None,
        time: None,
    };
    let file = InputFile::single(ScopeKind::Doc, "notes.md", input);
    e.ingest("notes", &[file], T0).unwrap();
    e
}

fn explorer(e: &Engine) -> Explorer<'_> {
    let plan = e.plan("notes").unwrap();
    assert_eq!(plan.chunks.len(), PARAGRAPHS.len());
    Explorer::new(e.corpus(), vec![plan], e.config().query.clone(), T0)
}

fn fulls(ex: &Explorer<'_>) -> Vec<NodeId> {
    ex.trees.plans[0].chunks.iter().map(|c| c.full).collect()
}

#[test]
fn ids_outside_the_working_set_are_ignored() {
    let e = engine(2);
    let mut ex = explorer(&e);
    let f = fulls(&ex);
    ex.working = vec![(f[0], 1.0), (f[1], 0.5)];
    // Unknown, outside the working set, repeated: only the working set's ids, once.
    let stranger = NodeId([7; 32]);
    let read = ex.peek(&[stranger, f[2], f[1], f[1], f[0]]).unwrap();
    let ids: Vec<NodeId> = read.iter().map(|n| n.id).collect();
    assert_eq!(ids, [f[1], f[0]]);
    assert_eq!(ex.examined, [f[1], f[0]]);
    // The abstract is no longer in the working set: descending into it yields nothing.
    let abstract_id = ex.trees.plans[0].abstract_id;
    assert!(ex.descend(&[abstract_id, stranger]).is_empty());
    let steps: Vec<&str> = ex.trajectory.iter().map(|s| s.detail.as_str()).collect();
    assert_eq!(steps[1], "0 node(s) → 0 child node(s)");
}

#[test]
fn narrowing_keeps_min_keep_nodes_and_stops_when_it_does_not_narrow() {
    let e = engine(3);
    let mut ex = explorer(&e);
    let f = fulls(&ex);
    ex.working = f.iter().map(|id| (*id, 0.0)).collect();
    let ranked: Vec<(NodeId, f32)> = f
        .iter()
        .zip([0.1, 0.9, 0.5, 0.7])
        .map(|(id, s)| (*id, s))
        .collect();
    // Asked to keep 1, it keeps min_keep = 3, best first.
    ex.narrow_to(ranked.clone(), 1, "test");
    assert_eq!(ex.working, [(f[1], 0.9), (f[3], 0.7), (f[2], 0.5)]);
    assert_eq!(ex.history, ["iteration 1: test: working set 4 → 3"]);
    assert!(!ex.exhausted());
    // Fewer candidates than min_keep: all of them. Then twice without narrowing: done.
    ex.narrow_to(ranked[..2].to_vec(), 1, "test");
    assert_eq!(ex.working.len(), 2);
    ex.narrow_to(ranked[..2].to_vec(), 1, "test");
    assert!(!ex.exhausted());
    ex.narrow_to(ranked[..3].to_vec(), 1, "test");
    assert!(ex.exhausted(), "{:?}", ex.history);
}

#[test]
fn confidence_is_clamped_and_only_verified_spans_are_cited() {
    let e = engine(2);
    let f = fulls(&explorer(&e));
    let plan = e.plan("notes").unwrap();
    let c = &plan.chunks[1];
    let len = PARAGRAPHS[1].len() as u64;
    let good = Cited {
        node: f[1],
        start: c.start,
        end: c.start + len,
    };
    for (given, confidence, ready) in [
        (7.0, 1.0, true),
        (0.6, 0.6, true),
        (-3.0, 0.0, false),
        (f64::NAN, 0.0, false),
        (f64::INFINITY, 0.0, false),
    ] {
        let r = explorer(&e).finish(vec![good], given).unwrap();
        assert_eq!((r.confidence, r.ready), (confidence, ready), "{given}");
        assert_eq!(r.answer, PARAGRAPHS[1]);
        assert_eq!(r.citations[0].quote, PARAGRAPHS[1]);
        assert_eq!(
            (r.citations[0].start, r.citations[0].end),
            (good.start, good.end)
        );
    }
    // Spans that are not inside their FULL chunk, empty, or of a non-FULL node are
    // dropped: no citation, so no answer and no confidence.
    let bad = [
        Cited {
            end: c.end + 1,
            ..good
        },
        Cited {
            start: c.start + 5,
            end: c.start + 5,
            ..good
        },
        Cited {
            node: plan.chunks[1].detailed,
            ..good
        },
        Cited {
            node: NodeId([9; 32]),
            ..good
        },
    ];
    let r = explorer(&e).finish(bad.to_vec(), 0.9).unwrap();
    assert!(r.citations.is_empty() && r.answer.is_empty());
    assert_eq!((r.confidence, r.ready), (0.0, false));
}

#[test]
fn a_result_says_how_the_run_ended() {
    let e = engine(2);
    let f = fulls(&explorer(&e));
    let plan = e.plan("notes").unwrap();
    let c = &plan.chunks[1];
    let good = Cited {
        node: f[1],
        start: c.start,
        end: c.start + PARAGRAPHS[1].len() as u64,
    };
    let r = explorer(&e).finish(vec![good], 0.9).unwrap();
    assert_eq!(
        (r.max_iterations_reached, r.limit_hit.as_deref()),
        (false, None)
    );
    assert_eq!(r.outcome, "answered within its budgets");
    assert_eq!(r.budgets.iterations, Budget { used: 0, limit: 6 });
    // The iteration budget spent: said so, with what was gathered or without.
    let mut ex = explorer(&e);
    ex.cfg.max_iterations = 1;
    ex.narrow_to(f.iter().map(|id| (*id, 1.0)).collect(), 2, "test");
    assert!(ex.exhausted());
    let r = ex.finish(vec![good], 0.9).unwrap();
    assert!(r.max_iterations_reached);
    assert_eq!(r.limit_hit.as_deref(), Some("max_iterations"));
    assert_eq!(
        r.outcome,
        "stopped at the iteration limit (1 of 1): answered from what was gathered"
    );
    let mut ex = explorer(&e);
    ex.cfg.max_tokens = 10;
    ex.working = f.iter().map(|id| (*id, 0.0)).collect();
    ex.peek(&f).unwrap();
    let r = ex.finish(Vec::new(), 0.9).unwrap();
    assert_eq!(r.limit_hit.as_deref(), Some("max_tokens"));
    assert!(
        r.outcome.starts_with("stopped at the token budget (")
            && r.outcome
                .ends_with("): nothing was found that answers the question"),
        "{}",
        r.outcome
    );
    assert!(r.answer.is_empty());
    // A fallback policy has budgets of its own, but the result still says the first
    // one ran out.
    let mut ex = explorer(&e);
    ex.cfg.max_iterations = 1;
    ex.narrow_to(f.iter().map(|id| (*id, 1.0)).collect(), 2, "test");
    let r = ex.restart().finish(vec![good], 0.9).unwrap();
    assert!(r.max_iterations_reached);
}

#[test]
fn rank_keeps_every_id_hits_first_and_records_a_step() {
    let e = engine(2);
    let mut ex = explorer(&e);
    let f = fulls(&ex);
    let q = ex.question("ferry");
    let ranked = ex.rank(&q, vec![f[3], f[2], f[0], f[1]]).unwrap();
    let ids: Vec<NodeId> = ranked.iter().map(|(id, _)| *id).collect();
    // The two ferry paragraphs first (by score), then the rest in the given order.
    assert!(
        ids[..2].contains(&f[0]) && ids[..2].contains(&f[1]),
        "{ranked:?}"
    );
    assert_eq!(ids[2..], [f[3], f[2]]);
    assert!(ranked[1].1 > 0.0 && ranked[2].1 == 0.0);
    let last = ex.trajectory.last().unwrap();
    assert_eq!(
        (last.action.as_str(), last.detail.as_str()),
        ("rank", "4 node(s) by \"ferry\": 2 hit(s)")
    );
}
