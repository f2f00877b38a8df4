//! Snapshots of context windows over the bundled sample data: which levels a window holds
//! at a budget, in which order, and the headers of its blocks. A change of behaviour shows
//! here as a readable diff; when it is intended, `UPDATE_EXPECT=1 cargo test --test it
//! context` rewrites the snapshots.

use crate::support::{T0, check_window, demo_engine, rt};
use expect_test::expect;
use strata::{Level, LevelChoice, NoProgress, TimeRange};

#[test]
fn auto_debate_window_at_1000_tokens() {
    check_window(
        "debate",
        LevelChoice::Auto,
        1000,
        expect![[r#"
            auto level, 950 of 1000 tokens, 21 node(s), 43 omitted
            nodes: full × 21
            ## Overview (salient sentences)
            ## Round 44 (full)
        "#]],
    );
}

#[test]
fn auto_debate_window_at_4000_tokens() {
    check_window(
        "debate",
        LevelChoice::Auto,
        4000,
        expect![[r#"
            auto level, 3971 of 4000 tokens, 97 node(s), 27 omitted
            nodes: full × 77, summary × 16, full × 4
            ## Overview (salient sentences)
            ## Round 28-43 (summary)
            ## Round 44 (full)
        "#]],
    );
}

#[test]
fn a_fixed_level_keeps_the_most_recent_rounds_of_a_debate() {
    check_window(
        "debate",
        LevelChoice::Fixed(Level::Summary),
        600,
        expect![[r#"
            summary level, 539 of 600 tokens, 13 node(s), 31 omitted
            nodes: summary × 13
            ## Round 32-44 (summary)
        "#]],
    );
}

#[test]
fn a_fixed_level_keeps_the_first_sections_of_documents() {
    check_window(
        "sotu",
        LevelChoice::Fixed(Level::Detailed),
        4000,
        expect![[r#"
            detailed level, 3878 of 4000 tokens, 26 node(s), 10 omitted
            nodes: detailed × 26
            ## data/docs/1862-lincoln.txt (detailed)
            ## data/docs/1862-lincoln.txt (detailed)
            ## data/docs/1862-lincoln.txt (detailed)
            ## data/docs/1862-lincoln.txt (detailed)
        "#]],
    );
}

fn window_for(scope: &str, question: &str, budget: usize) -> strata::ContextWindow {
    let e = demo_engine();
    rt().block_on(e.context_for(
        scope,
        question,
        budget,
        &TimeRange::default(),
        T0,
        &NoProgress,
    ))
    .unwrap()
}

/// A window for a question: never over its budget (in real tokens), the same every time,
/// every evidence part quoting its exact span of the source (which the text holds), saying
/// why it was chosen, and the turn that answers is among them.
#[test]
fn a_window_for_a_question_holds_the_turns_that_bear_on_it() {
    let e = demo_engine();
    let q = "What cost estimate did the 2029 audit give?";
    for budget in [1, 40, 300, 1000, 3000] {
        let w = window_for("debate", q, budget);
        assert!(w.tokens <= budget, "{} over {budget}", w.tokens);
        assert_eq!(w.tokens, strata::token::count(&w.text));
        assert_eq!(w.level, "for");
        assert_eq!(w.focus.as_deref(), Some(q));
        for n in w.nodes.iter().filter(|n| n.part == "evidence") {
            assert_eq!(n.level, Level::Full);
            assert!(n.why.contains_key("retrieval") && n.why.contains_key("rank"));
            assert_eq!(n.spans.len(), 1);
            let sp = &n.spans[0];
            let src = e.source_text("debate", &sp.source).unwrap();
            let quote = &src[sp.start as usize..sp.end as usize];
            assert!(!quote.is_empty() && w.text.contains(quote), "{quote:?}");
        }
        assert_eq!(
            window_for("debate", q, budget).text,
            w.text,
            "deterministic"
        );
    }
    let w = window_for("debate", q, 1000);
    assert!(w.text.contains("2029"), "{}", w.text);
    assert!(w.nodes.iter().any(|n| n.part == "overview"));
    assert!(
        w.nodes.iter().filter(|n| n.part == "evidence").count() >= 5,
        "{:?}",
        w.nodes
    );
    // A question with no searchable word gets the unfocused window.
    let w = window_for("debate", "what is it?", 500);
    assert_eq!(w.level, "auto");
}

/// A window for a question shows a long turn as an excerpt of at most 80 tokens (chosen on
/// QMSum `val`, docs/EVAL.md; `query` cites at most 60): no evidence part quotes more, and a
/// turn longer than the 60 tokens `query` would cut it to is shown whole.
#[test]
fn a_window_for_a_question_quotes_excerpts_of_at_most_80_tokens() {
    let e = demo_engine();
    let w = window_for("debate", "How would the light rail be paid for?", 3000);
    let mut longest = 0;
    for n in w.nodes.iter().filter(|n| n.part == "evidence") {
        let sp = &n.spans[0];
        let src = e.source_text("debate", &sp.source).unwrap();
        let quoted = strata::token::count(src[sp.start as usize..sp.end as usize].trim());
        assert!(quoted <= 80, "{quoted} tokens quoted: {n:?}");
        longest = longest.max(quoted);
    }
    assert!(longest > 60, "the longest part quotes {longest} tokens");
}

/// Regression: `context --level full --budget 1000` returned an empty window ("0 of 1000
/// tokens … 30 omitted") when the newest round alone was over the budget, though most of
/// its turns fit; now the newest turns that fit are kept.
/// A window for a question places each excerpt once per block: where and when it was said
/// heads the excerpts said there (`## Round 2, 2024-01-10`), and each line names its
/// speaker — every excerpt's speaker, round and date are in the window, not repeated on
/// every line of a chat.
#[test]
fn a_window_for_a_question_heads_each_round_and_date_once() {
    let e = strata::Engine::in_memory(strata::Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let turns = [
        (
            1,
            "2024-01-09",
            "Ana",
            "Morning! The weather is grey again.",
        ),
        (1, "2024-01-09", "Ben", "I read a book about lighthouses."),
        (
            2,
            "2024-01-10",
            "Ana",
            "We baked a lemon tart for the lighthouse keepers.",
        ),
        (
            2,
            "2024-01-10",
            "Ben",
            "A lemon tart sounds lovely, how did the tart turn out?",
        ),
        (
            2,
            "2024-01-10",
            "Ana",
            "The tart was a little sour, but the keepers ate all of it.",
        ),
        (
            3,
            "2024-01-12",
            "Ben",
            "My sister baked a lemon tart too, on Friday.",
        ),
    ];
    let mut lines = String::new();
    for (round, day, who, text) in turns {
        lines.push_str(&format!(
            "{{\"round\": {round}, \"time\": \"{day}\", \"speaker\": \"{who}\", \"text\": \"{text}\"}}\n"
        ));
    }
    let path = crate::support::write(dir.path(), "chat.jsonl", lines);
    e.ingest_files("chat", None, &[path], T0).unwrap();
    let w = rt()
        .block_on(e.context_for(
            "chat",
            "Who baked a lemon tart?",
            300,
            &TimeRange::default(),
            T0,
            &NoProgress,
        ))
        .unwrap();
    let t = &w.text;
    assert_eq!(t.matches("## Round 2, 2024-01-10\n").count(), 1, "{t}");
    assert!(
        t.contains("## Round 2, 2024-01-10\nAna: We baked a lemon tart"),
        "{t}"
    );
    assert!(
        t.contains("## Round 3, 2024-01-12\nBen: My sister baked a lemon tart too"),
        "{t}"
    );
    assert!(!t.contains("(round 2"), "{t}");
    assert!(w.tokens <= 300 && w.tokens == strata::token::count(t));
}

#[test]
fn full_level_window_keeps_the_newest_turns_when_the_last_round_is_over_budget() {
    let e = strata::Engine::in_memory(strata::Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    for round in 1..=3 {
        for k in 0..24 {
            lines.push_str(&format!(
                "{{\"round\": {round}, \"speaker\": \"s{k}\", \"text\": \"In round {round} speaker {k} says the ferry levy should pay for {} new berths at the harbour, and the council should vote on it before the summer.\"}}\n",
                k + round
            ));
        }
    }
    let path = crate::support::write(dir.path(), "d.jsonl", lines);
    e.ingest_files("d", None, &[path], T0).unwrap();
    let round = rt()
        .block_on(e.context(
            "d",
            LevelChoice::Fixed(Level::Full),
            100_000,
            T0,
            &NoProgress,
        ))
        .unwrap();
    assert!(round.tokens > 1000);
    let w = rt()
        .block_on(e.context("d", LevelChoice::Fixed(Level::Full), 400, T0, &NoProgress))
        .unwrap();
    assert!(
        w.tokens <= 400 && w.tokens > 200,
        "{} tokens: {}",
        w.tokens,
        w.text
    );
    assert!(w.text.contains("In round 3 speaker 23"), "{}", w.text);
    assert!(!w.text.contains("In round 2 "), "{}", w.text);
    assert!(w.nodes.iter().all(|n| n.partial));
}

/// Greetings, thanks and back-channel are never what a conversation's overview keeps.
#[test]
fn the_auto_overview_keeps_no_greetings_or_thanks() {
    let e = strata::Engine::in_memory(strata::Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let facts = [
        "I finally signed the lease on the studio above the bakery on Elm Street for 1,450 dollars a month.",
        "My sister Dana starts her nursing degree at Ohio State in September.",
        "We adopted a retired greyhound called Pepper from the shelter in Dayton.",
        "The marathon in Columbus is on October 12 and I am running it for the children's hospital.",
        "I switched teams at work and now lead the billing migration to the new vendor.",
    ];
    let fillers = [
        "Hey John!",
        "Thanks!",
        "Haha, yes.",
        "Oh wow.",
        "Good morning!",
        "Sure, sounds good.",
    ];
    let mut lines = String::new();
    for round in 1..=30usize {
        for (k, sp) in ["John", "Maria"].iter().enumerate() {
            let mut text = fillers[(round + k) % fillers.len()].to_string();
            if (round + k) % 6 == 0 {
                text.push(' ');
                text.push_str(facts[(round / 6 + k) % facts.len()]);
            }
            lines.push_str(&format!(
                "{{\"round\": {round}, \"speaker\": \"{sp}\", \"text\": {}}}\n",
                serde_json::to_string(&text).unwrap()
            ));
        }
    }
    let path = crate::support::write(dir.path(), "chat.jsonl", lines);
    e.ingest_files("chat", None, &[path], T0).unwrap();
    let w = rt()
        .block_on(e.context("chat", LevelChoice::Auto, 200, T0, &NoProgress))
        .unwrap();
    let overview = w.text.split("\n\n").next().unwrap();
    for f in fillers {
        assert!(!overview.contains(f), "{f:?} in the overview:\n{}", w.text);
    }
    assert!(facts.iter().any(|f| overview.contains(*f)), "{}", w.text);
    // Each overview part says why it was chosen: its best sentence's features, its rank.
    let parts: Vec<_> = w.nodes.iter().filter(|n| n.part == "overview").collect();
    assert!(!parts.is_empty(), "{w:?}");
    for n in &parts {
        for k in [
            "salience",
            "centrality",
            "information",
            "thread",
            "specificity",
            "rank",
        ] {
            assert!(n.why.contains_key(k), "{k} missing from {:?}", n.why);
        }
        assert_eq!(n.why["thin"], 0.0, "a thin sentence chosen: {:?}", n.why);
    }
    let mut ranks: Vec<f64> = parts.iter().map(|n| n.why["rank"]).collect();
    ranks.sort_by(f64::total_cmp);
    ranks.dedup();
    assert_eq!(ranks.len(), parts.len(), "one rank per part: {ranks:?}");
    // The whole scope's ABSTRACT, by the same rule.
    let w = rt()
        .block_on(e.context(
            "chat",
            LevelChoice::Fixed(Level::Abstract),
            2000,
            T0,
            &NoProgress,
        ))
        .unwrap();
    for f in fillers {
        assert!(!w.text.contains(f), "{f:?} in the abstract:\n{}", w.text);
    }
}

/// A `context` process that only reads takes the overview's ranking stored with the
/// scope's view — by `compress`, or by the `auto` window that built the tree on demand —
/// instead of ranking the whole scope again (issue 23), and its window is byte for byte the
/// one a ranking computed afresh gives. Other builds (a query's, a fixed level's) leave the
/// ranking to the next `auto` window.
#[test]
fn a_reading_process_takes_the_overview_ranking_the_build_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let debate = crate::support::debate_path();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("--db")
            .arg(&db)
            .args(args)
            .env_remove("STRATA_DB")
            .env_remove("STRATA_CONFIG")
            .env("STRATA_LOG", "strata=debug")
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "strata {args:?}: {err}");
        (String::from_utf8(out.stdout).unwrap(), err)
    };
    const COMPUTED: &str = "overview ranking computed";
    const READ: &str = "overview ranking read from the store";
    run(&["ingest", "--scope", "d", debate.to_str().unwrap()]);
    let window = [
        "--json", "context", "--scope", "d", "--level", "auto", "--budget", "1000",
    ];
    // Built on demand for an `auto` window: ranked once, for the window and the view.
    let (fresh, err) = run(&window);
    assert_eq!(err.matches(COMPUTED).count(), 1, "{err}");
    assert!(!err.contains(READ), "{err}");
    assert!(fresh.contains("Overview (salient sentences)"), "{fresh}");
    let (read, err) = run(&window);
    assert!(err.contains(READ) && !err.contains(COMPUTED), "{err}");
    assert_eq!(read, fresh);
    // Another turn, built on demand by a query: not ranked; the stored ranking is of other
    // chunks and is not taken by the next window, which ranks again.
    let turn = dir.path().join("more.jsonl");
    std::fs::write(
        &turn,
        "{\"round\": 99, \"speaker\": \"mod\", \"text\": \"The tram vote is moved to March.\"}\n",
    )
    .unwrap();
    run(&["ingest", "--scope", "d", turn.to_str().unwrap()]);
    let (_, err) = run(&["query", "--scope", "d", "When is the tram vote?"]);
    assert!(!err.contains(COMPUTED) && !err.contains(READ), "{err}");
    let (after, err) = run(&window);
    assert!(err.contains(COMPUTED) && !err.contains(READ), "{err}");
    // `compress` ranks and stores; a reading process takes it.
    let (_, err) = run(&["compress", "--scope", "d"]);
    assert!(err.contains(COMPUTED), "{err}");
    let (again, err) = run(&window);
    assert!(err.contains(READ) && !err.contains(COMPUTED), "{err}");
    assert_eq!(again, after);
}
