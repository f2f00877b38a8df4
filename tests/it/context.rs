//! Snapshots of context windows over the bundled sample data: which levels a window holds
//! at a budget, in which order, and the headers of its blocks. A change of behaviour shows
//! here as a readable diff; when it is intended, `UPDATE_EXPECT=1 cargo test --test it
//! context` rewrites the snapshots.

use crate::support::check_window;
use expect_test::expect;
use strata::{Level, LevelChoice};

#[test]
fn auto_debate_window_at_1000_tokens() {
    check_window(
        "debate",
        LevelChoice::Auto,
        1000,
        expect![[r#"
            auto level, 982 of 1000 tokens, 10 node(s), 38 omitted
            nodes: abstract × 1, summary × 5, full × 4
            ## Overview (abstract)
            ## Round 39-43 (summary)
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
            auto level, 3895 of 4000 tokens, 63 node(s), 0 omitted
            nodes: abstract × 1, summary × 38, detailed × 4, full × 20
            ## Overview (abstract)
            ## Round 1-38 (summary)
            ## Round 39 (detailed)
            ## Round 40-44 (full)
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
            summary level, 557 of 600 tokens, 12 node(s), 32 omitted
            nodes: summary × 12
            ## Round 33-44 (summary)
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
            detailed level, 3870 of 4000 tokens, 24 node(s), 10 omitted
            nodes: detailed × 24
            ## data/docs/1862-lincoln.txt (detailed)
            ## data/docs/1862-lincoln.txt (detailed)
            ## data/docs/1862-lincoln.txt (detailed)
        "#]],
    );
}
