//! ingest → compress → context → query on the bundled sample data, and the cache, store and
//! incremental behaviour around it.

use crate::support::*;
use std::sync::Arc;
use strata::{Config, Engine, Level, LevelChoice, NoProgress};

#[test]
fn sample_data_end_to_end() {
    let rt = rt();
    let e = samples(Config::default());
    for scope in ["debate", "docs"] {
        let r = compress(&rt, &e, scope, T0);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let plan = e.plan(scope).unwrap();
        assert_eq!(r.built_by_level[Level::Detailed], plan.chunks.len());
        assert_eq!(r.built_by_level[Level::Summary], plan.groups.len());
        assert_eq!(r.built_by_level[Level::Abstract], 1);
        assert_eq!(
            r.built_by_level[Level::Metadata],
            plan.chunks.len() + plan.groups.len() + 1
        );
        assert_eq!(r.nodes_built, plan.n_derived());

        // Each level is smaller than the one below, near its target.
        let tokens = |ids: Vec<strata::NodeId>| -> u64 {
            ids.iter()
                .map(|id| e.node(id, T0).unwrap().tokens as u64)
                .sum()
        };
        let full = plan.full_tokens as f64;
        let det = tokens(plan.chunks.iter().map(|c| c.detailed).collect()) as f64;
        let sum = tokens(plan.groups.iter().map(|g| g.summary).collect()) as f64;
        let abs = tokens(vec![plan.abstract_id]) as f64;
        assert!(
            det / full < 0.62 && det / full > 0.3,
            "detailed {}",
            det / full
        );
        assert!(sum / full < 0.3, "summary {}", sum / full);
        assert!(abs / full < 0.08, "abstract {}", abs / full);

        // Every node's citations resolve to FULL spans that tile what is beneath it.
        let g0 = e.node(&plan.groups[0].summary, T0).unwrap();
        for span in &g0.citations {
            let text = e.source_text(scope, &span.source).unwrap();
            assert!(span.end as usize <= text.len());
        }
    }

    // Context windows: within budget, in order, at each level.
    for level in [
        "full", "detailed", "summary", "abstract", "metadata", "auto",
    ] {
        for budget in [50, 700, 4000] {
            let w = rt
                .block_on(e.context("debate", level.parse().unwrap(), budget, T0, &NoProgress))
                .unwrap();
            assert!(w.tokens <= budget, "{level} {budget}: {}", w.tokens);
            assert_eq!(w.tokens, strata::token::count(&w.text));
        }
    }
    let w = rt
        .block_on(e.context("debate", LevelChoice::Auto, 3000, T0, &NoProgress))
        .unwrap();
    // auto: an overview of the whole (its most salient sentences), summaries of older
    // rounds, the latest round in full.
    assert_eq!(w.nodes[0].part, "overview");
    assert!(w.text.starts_with("## Overview"), "{}", w.text);
    assert!(w.nodes.iter().any(|n| n.level == Level::Summary));
    assert_eq!(w.nodes.last().unwrap().level, Level::Full);
    assert!(w.text.contains("## Round 44 (full)"), "{}", w.text);

    // Questions with a unique answer in one turn or sentence.
    let cases = [
        (
            "debate",
            "What cost estimate did the 2029 audit give?",
            "data/debate.jsonl#26",
            "$1.57 billion",
        ),
        (
            "debate",
            "What share of Eastgate households do not own a car?",
            "data/debate.jsonl#7",
            "41%",
        ),
        (
            "debate",
            "How many daily riders did PARTA's 2027 feasibility study forecast?",
            "data/debate.jsonl#5",
            "38,000",
        ),
        (
            "docs",
            "What is the first of the four freedoms?",
            "1941-roosevelt.txt",
            "freedom of speech",
        ),
        (
            "docs",
            "how soon can we pay down the debt entirely",
            "2000-clinton.txt",
            "13 years",
        ),
        (
            "docs",
            "before what date would a State have to abolish slavery to receive compensation",
            "1862-lincoln.txt",
            "A.D. 1900",
        ),
    ];
    for (scope, q, source, fact) in cases {
        let r = query(&rt, &e, scope, q, T0);
        assert!(
            r.citations
                .iter()
                .any(|c| c.source.ends_with(source) && c.quote.contains(fact)),
            "{q}: {:#?}",
            r.citations
        );
        assert!(r.answer.contains(fact));
        assert!(r.ready, "{q}: confidence {}", r.confidence);
        assert_eq!(r.sub_calls_made, 0);
        assert!(r.tokens_processed > 0 && r.iterations >= 1);
        assert_eq!(r.trajectory.last().unwrap().action, "finish");
        // The navigator reads a fraction of the scope, not all of it.
        let plan = e.plan(scope).unwrap();
        assert!(
            r.tokens_processed < plan.full_tokens / 2,
            "{} of {}",
            r.tokens_processed,
            plan.full_tokens
        );
    }

    // Debate citations carry round and speaker.
    let r = query(
        &rt,
        &e,
        "debate",
        "What cost estimate did the 2029 audit give?",
        T0,
    );
    let c = r
        .citations
        .iter()
        .find(|c| c.source.ends_with("#26"))
        .unwrap();
    assert_eq!((c.round, c.speaker.as_deref()), (Some(7), Some("bob")));

    // --all searches every scope.
    let r = rt
        .block_on(e.query(&strata::Ask::new(
            &[],
            "What is the first of the four freedoms?",
            T0,
        )))
        .unwrap();
    check_citations(&e, &r);
    assert!(
        r.citations
            .iter()
            .any(|c| c.source.ends_with("1941-roosevelt.txt") && c.quote.contains("freedoms")),
        "{:#?}",
        r.citations
    );
}

#[test]
fn recompress_makes_zero_compressor_calls() {
    let rt = rt();
    let model = Flaky::new("\u{0}never", "counting");
    let e = samples(Config::default()).with_model(model.clone());
    let first = compress(&rt, &e, "debate", T0);
    assert!(first.model_calls > 0);
    let calls = model.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(calls, first.model_calls);
    let again = compress(&rt, &e, "debate", T0 + 5);
    assert_eq!(again.model_calls, 0);
    assert_eq!(again.nodes_built, 0);
    assert_eq!(again.cache_hits, again.nodes_total);
    assert_eq!(model.calls.load(std::sync::atomic::Ordering::SeqCst), calls);
    // Reading does not compress either.
    rt.block_on(e.context("debate", LevelChoice::Auto, 1000, T0 + 6, &NoProgress))
        .unwrap();
    query(&rt, &e, "debate", "who proposed the referendum", T0 + 6);
    assert_eq!(model.calls.load(std::sync::atomic::Ordering::SeqCst), calls);
}

#[test]
fn store_reopens_after_drop_with_everything_intact() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let (window, answer, stats) = {
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        ingest_samples(&e);
        compress(&rt, &e, "debate", T0);
        compress(&rt, &e, "docs", T0);
        let w = rt
            .block_on(e.context("debate", LevelChoice::Auto, 2000, T0, &NoProgress))
            .unwrap();
        let a = query(
            &rt,
            &e,
            "docs",
            "What is the first of the four freedoms?",
            T0,
        );
        (w.text, a.citations, e.stats(T0).unwrap())
    };
    let e = Engine::open(dir.path(), Config::default()).unwrap();
    let again = compress(&rt, &e, "debate", T0 + 1);
    assert_eq!((again.model_calls, again.nodes_built), (0, 0));
    let w = rt
        .block_on(e.context("debate", LevelChoice::Auto, 2000, T0 + 1, &NoProgress))
        .unwrap();
    assert_eq!(w.text, window);
    let a = query(
        &rt,
        &e,
        "docs",
        "What is the first of the four freedoms?",
        T0 + 1,
    );
    assert_eq!(a.citations, answer);
    let s = e.stats(T0 + 1).unwrap();
    assert_eq!(s.nodes, stats.nodes);
    assert_eq!(s.indexed_docs, stats.indexed_docs);
}

#[test]
fn index_is_rebuilt_from_the_store_when_missing() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        ingest_samples(&e);
        compress(&rt, &e, "docs", T0);
    }
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let e = Engine::open(dir.path(), Config::default()).unwrap();
    assert!(e.stats(T0).unwrap().indexed_docs > 0);
    let r = query(
        &rt,
        &e,
        "docs",
        "What is the first of the four freedoms?",
        T0,
    );
    assert!(
        r.citations
            .iter()
            .any(|c| c.quote.contains("freedom of speech"))
    );
    // And on request.
    let n = e.reindex().unwrap();
    assert_eq!(n as u64, e.stats(T0).unwrap().indexed_docs);
}

#[test]
fn a_changed_source_replaces_its_chunks() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(&dir.path().join("db"), Config::default()).unwrap();
    let p = write(
        dir.path(),
        "notes.md",
        "# Plan\n\nThe zeppelin budget is 40 million.\n\nSecond paragraph about ferries.\n",
    );
    let r = e
        .ingest_files("notes", None, std::slice::from_ref(&p), T0)
        .unwrap();
    assert_eq!((r.added, r.chunks_written), (1, 1));
    compress(&rt, &e, "notes", T0);
    let old = e
        .store()
        .get_source("notes", &p.display().to_string())
        .unwrap()
        .unwrap();

    // Unchanged: a no-op.
    let r = e
        .ingest_files("notes", None, std::slice::from_ref(&p), T0)
        .unwrap();
    assert_eq!((r.unchanged, r.chunks_written), (1, 0));

    std::fs::write(
        &p,
        "# Plan\n\nThe monorail budget is 75 million.\n\nSecond paragraph about ferries.\n",
    )
    .unwrap();
    let r = e
        .ingest_files("notes", None, std::slice::from_ref(&p), T0 + 1)
        .unwrap();
    assert_eq!(r.replaced, 1);
    for c in &old.chunks {
        assert!(
            e.store().get_node(&c.id).unwrap().is_none(),
            "old chunk kept"
        );
    }
    let new = e
        .store()
        .get_source("notes", &p.display().to_string())
        .unwrap()
        .unwrap();
    let text = e.source_text("notes", &p.display().to_string()).unwrap();
    let joined: String = new
        .chunks
        .iter()
        .map(|c| e.store().get_node(&c.id).unwrap().unwrap().text)
        .collect();
    assert_eq!(joined, text);
    let r = query(&rt, &e, "notes", "what is the monorail budget", T0 + 1);
    assert!(r.answer.contains("75 million"), "{}", r.answer);
    let hits = rt
        .block_on(e.grep(&[], "zeppelin", &[], 10, T0 + 1))
        .unwrap();
    assert!(hits.is_empty(), "old text still found: {hits:?}");
    // gc removes the derived nodes of the old version.
    let g = e.gc(T0 + 2).unwrap();
    assert!(g.unreachable > 0);
    assert_eq!(e.stats(T0 + 2).unwrap().scopes[0].stale, 0);
}

#[test]
fn appending_a_turn_recompresses_only_its_ancestors() {
    let rt = rt();
    let e = samples(Config::default());
    compress(&rt, &e, "debate", T0);
    let before = e.plan("debate").unwrap();
    e.append_turn(
        "debate",
        "live#1".into(),
        strata::source::Turn {
            round: 44,
            speaker: "erin".into(),
            text: "As the newest member I move that the Harbour Line open by June 2034.".into(),
            time: None,
        },
        T0 + 1,
    )
    .unwrap();
    let r = compress(&rt, &e, "debate", T0 + 1);
    // New DETAILED, round 44's SUMMARY, the ABSTRACT, and their three METADATA nodes.
    assert_eq!(r.nodes_built, 6, "{r:?}");
    assert_eq!(r.model_calls, 3);
    let after = e.plan("debate").unwrap();
    assert_eq!(after.groups.len(), before.groups.len());
    assert_eq!(
        after.groups[..43]
            .iter()
            .map(|g| g.summary)
            .collect::<Vec<_>>(),
        before.groups[..43]
            .iter()
            .map(|g| g.summary)
            .collect::<Vec<_>>()
    );
    let r = query(
        &rt,
        &e,
        "debate",
        "what did erin move about the opening date",
        T0 + 1,
    );
    assert_eq!(r.citations[0].source, "live#1");
    assert_eq!(r.citations[0].speaker.as_deref(), Some("erin"));
}

#[test]
fn a_failed_node_is_reported_not_fatal() {
    let rt = rt();
    // The model fails on one turn's text; the offline fallback rescues it.
    let model = Flaky::new("Kessling & Partners", "flaky-a");
    let e = samples(Config::default()).with_model(model.clone());
    let r = compress(&rt, &e, "debate", T0);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert!(r.fallbacks >= 1);
    // Retries happened: more calls than nodes built by the model path.
    assert!(r.model_calls > r.built_by_level[Level::Detailed] as u64);

    // Model and fallback both fail: the build reports the failure and finishes the rest.
    let model = Flaky::new("Kessling & Partners", "flaky-b");
    let e = samples(Config::default())
        .with_model(model.clone())
        .with_fallback(Flaky::new("Kessling & Partners", "fallback"));
    let r = compress(&rt, &e, "debate", T0);
    assert!(!r.failures.is_empty());
    assert!(r.failures.iter().any(|f| f.level == Level::Detailed));
    assert!(r.failures.iter().any(|f| f.level == Level::Abstract));
    let plan = e.plan("debate").unwrap();
    let built = plan
        .chunks
        .iter()
        .filter(|c| e.store().contains_live(&c.detailed, T0).unwrap())
        .count();
    assert!(built > plan.chunks.len() - 5 && built < plan.chunks.len());
    // A read that needs a failed node says so clearly instead of serving something partial.
    let err = rt
        .block_on(e.context(
            "debate",
            LevelChoice::Fixed(Level::Abstract),
            500,
            T0,
            &NoProgress,
        ))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not available"), "{err}");
    let _ = Arc::clone(&model);
}

/// Issue 23: a long-lived engine plans a scope once per change of the store. A window
/// served from that cache changes with an append, and is byte for byte the window a fresh
/// process (a read-only open of the same store) serves.
#[test]
fn a_cached_window_follows_writes_and_matches_a_fresh_open() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let window = |e: &Engine, choice: LevelChoice, now: u64| {
        let w = rt
            .block_on(e.context("debate", choice, 4000, now, &NoProgress))
            .unwrap();
        serde_json::to_string(&w).unwrap()
    };
    let e = Engine::open(dir.path(), Config::default()).unwrap();
    e.ingest_files("debate", None, &[debate_path()], T0)
        .unwrap();
    let auto = window(&e, LevelChoice::Auto, T0);
    let full = window(&e, LevelChoice::Fixed(Level::Full), T0);
    // Served again from the cached tree: the same windows.
    assert_eq!(window(&e, LevelChoice::Auto, T0), auto);
    assert_eq!(window(&e, LevelChoice::Fixed(Level::Full), T0), full);
    e.append_turn(
        "debate",
        "live#1".into(),
        strata::source::Turn {
            round: 44,
            speaker: "erin".into(),
            text: "As the newest member I move that the Harbour Line open by June 2034.".into(),
            time: None,
        },
        T0 + 1,
    )
    .unwrap();
    let auto2 = window(&e, LevelChoice::Auto, T0 + 1);
    let full2 = window(&e, LevelChoice::Fixed(Level::Full), T0 + 1);
    assert_ne!(auto2, auto, "the cached tree outlived an append");
    assert_ne!(full2, full, "the cached tree outlived an append");
    let plan = e.plan("debate").unwrap();
    assert_eq!(plan.sources.last().unwrap().id, "live#1");
    drop(e);
    let fresh = Engine::open_read_only(dir.path(), Config::default()).unwrap();
    assert_eq!(window(&fresh, LevelChoice::Auto, T0 + 1), auto2);
    assert_eq!(
        window(&fresh, LevelChoice::Fixed(Level::Full), T0 + 1),
        full2
    );
}

/// A forget in a long-lived process (a server's engine) is seen by the next window: the
/// cached tree and windows of the scope go with the write that forgot.
#[test]
fn a_cached_window_forgets_what_was_forgotten() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(dir.path(), Config::default()).unwrap();
    e.ingest_files("debate", None, &[debate_path()], T0)
        .unwrap();
    let full = |e: &Engine| {
        rt.block_on(e.context(
            "debate",
            LevelChoice::Fixed(Level::Full),
            100_000,
            T0,
            &NoProgress,
        ))
        .unwrap()
        .text
    };
    let before = full(&e);
    let plan = e.plan("debate").unwrap();
    let gone = plan.sources[3].id.clone();
    let n: usize = gone.rsplit('#').next().unwrap().parse().unwrap();
    let raw = std::fs::read_to_string(debate_path()).unwrap();
    let turn: serde_json::Value = serde_json::from_str(raw.lines().nth(n - 1).unwrap()).unwrap();
    let text = turn["text"].as_str().unwrap();
    // Its first sentence (a window may cut a turn, never inside a sentence).
    let line = text.split(". ").next().unwrap().to_string();
    assert!(before.contains(&line), "the turn is in the window first");
    assert_eq!(full(&e), before, "served again from the cache");
    e.forget("debate", std::slice::from_ref(&gone), T0).unwrap();
    assert!(
        !full(&e).contains(&line),
        "a cached window still shows a forgotten turn"
    );
}

/// The cached tree's liveness follows time and removals: a node removed, or the levels
/// expired, and the next window rebuilds instead of serving from the cache.
#[test]
fn a_cached_tree_is_rebuilt_after_a_removal_or_expiry() {
    let rt = rt();
    let e = samples(Config::default());
    compress(&rt, &e, "debate", T0);
    let w = |now| {
        rt.block_on(e.context("debate", LevelChoice::Auto, 4000, now, &NoProgress))
            .unwrap()
            .text
    };
    let first = w(T0);
    let plan = e.plan("debate").unwrap();
    assert!(e.store().remove_node(&plan.abstract_id).unwrap());
    assert_eq!(w(T0), first, "the removed ABSTRACT is rebuilt");
    assert!(e.store().get_node(&plan.abstract_id).unwrap().is_some());
    let ttl = e
        .store()
        .get_node(&plan.abstract_id)
        .unwrap()
        .unwrap()
        .expires_at;
    if let Some(at) = ttl {
        assert_eq!(w(at + 1), first, "expired levels are rebuilt");
        let again = e.store().get_node(&plan.abstract_id).unwrap().unwrap();
        assert!(again.expires_at.is_none_or(|t| t > at + 1));
    }
}

/// A process that opens a store only to read trusts what the last build left about its
/// tree's liveness (the earliest deadline, instead of reading every node's) only while
/// nothing was lost since: a node removed, or given an earlier deadline, by another process
/// makes the next reader see the tree incomplete.
#[test]
fn a_reader_distrusts_a_built_tree_after_a_loss_in_another_process() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let (plan, deadline) = {
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        e.ingest_files("debate", None, &[debate_path()], T0)
            .unwrap();
        compress(&rt, &e, "debate", T0);
        let plan = e.plan("debate").unwrap();
        let summary = plan.groups[0].summary;
        let node = e.store().get_node(&summary).unwrap().unwrap();
        (plan, node.expires_at.expect("derived levels expire"))
    };
    let complete = |now: u64| {
        let e = Engine::open_read_only(dir.path(), Config::default()).unwrap();
        let v = e.view("debate", now).unwrap();
        v.is_some_and(|v| v.stale.is_empty() && v.pending_sources == 0)
    };
    assert!(complete(T0), "as built");
    assert!(!complete(deadline), "expired");

    // Another process brings one node's deadline earlier.
    let early = T0 + 10;
    {
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        let mut n = e.store().get_node(&plan.abstract_id).unwrap().unwrap();
        n.expires_at = Some(early);
        e.store().put_node(&n).unwrap();
    }
    assert!(complete(T0));
    assert!(!complete(early), "the earlier deadline counts");

    // A build makes it whole again; then another process removes a node.
    {
        let e = Engine::open(dir.path(), Config::default()).unwrap();
        compress(&rt, &e, "debate", early);
        assert!(e.store().remove_node(&plan.groups[0].summary).unwrap());
    }
    assert!(!complete(early), "a removed node counts");
}

/// `stats` counts each level's live nodes from deadlines alone: every node of a built tree
/// is live at its level; a node removed, or the levels expired, is stale.
#[test]
fn stats_count_live_and_stale_nodes_by_level() {
    let rt = rt();
    let e = samples(Config::default());
    let s = |now| e.scope_stats("debate", now).unwrap();
    let before = s(T0);
    assert_eq!(
        before.live_by_level[Level::Full],
        before.chunks,
        "FULL never expires"
    );
    assert_eq!(before.live_by_level[Level::Summary], 0, "nothing built yet");
    compress(&rt, &e, "debate", T0);
    let plan = e.plan("debate").unwrap();
    let built = s(T0);
    assert_eq!(built.stale, 0);
    for level in [Level::Full, Level::Detailed, Level::Abstract] {
        assert_eq!(
            built.live_by_level[level],
            plan.ids_at(level).len(),
            "{level}"
        );
    }
    assert_eq!(
        built.live_by_level[Level::Summary],
        plan.groups.len() + plan.reductions.len()
    );
    assert_eq!(built.live_by_level[Level::Metadata], plan.metadata().len());
    assert!(e.store().remove_node(&plan.groups[0].summary).unwrap());
    let removed = s(T0);
    assert_eq!(removed.stale, 1);
    assert_eq!(
        removed.live_by_level[Level::Summary],
        built.live_by_level[Level::Summary] - 1
    );
    let far = T0 + 10 * 365 * 24 * 3600;
    let expired = s(far);
    assert_eq!(expired.live_by_level[Level::Full], plan.chunks.len());
    assert_eq!(
        expired.live_by_level[Level::Detailed],
        0,
        "derived levels expired"
    );
    assert!(expired.stale > 0);
}
