//! Snapshots of the offline navigator on the bundled sample data: what it greps, reads and
//! cites, step by step. A change of behaviour shows here as a readable diff; when it is
//! intended, `UPDATE_EXPECT=1 cargo test --test it navigate` rewrites the snapshots.

use crate::support::check;
use expect_test::expect;

#[test]
fn a_debate_question_is_answered_from_the_speakers_turns() {
    check(
        &["debate"],
        "What did chen propose about fares?",
        expect![[r#"
            peek: 1 abstract node(s), 474 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "What did chen propose about fares" at summary/detailed/full: 195 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "What did chen propose about fares" at detailed/full within the working set: 20 hit(s)
            peek: 6 full node(s), 393 tokens
            finish: 2 citation(s), confidence 1.00, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 2: grep within the groups picked chunks: working set 16 → 6
            | read 6 chunk(s), 16 candidate sentence(s); cited 2
            | cited first: score 0.971 (own evidence 0.978, chunk 2 of 6), terms fare, propos, chen
            | cited also: score 0.787 (own evidence 0.774, chunk 4 of 6), terms fare, propos, chen; parallel to the first
            = confidence 1.00, ready true, 2 citation(s)
            [189..314) data/debate.jsonl#43 (round 11, chen): "Any plan that raises fares to cover operating costs will hit my ward hardest, and I want that said before anyone proposes it."
            [21..199) data/debate.jsonl#47 (round 12, chen): "I propose a daily fare cap of $6.50 and a monthly cap of $72, so that once a rider has paid for two trips in a day, or the price of a pass in a month, every further ride is free."
        "#]],
    );
}

// FIXME: this snapshot freezes a wrong answer. The Peace Corps sentence is cited, but
// second and ready behind the Secretary of Defense sentence the first pass chose (the
// question's words "propose", "mobilize", "organization" match Kennedy's defense passage
// as well) and a 1,361-byte passage the second hop added; the right answer is the Peace
// Corps sentence alone, first.
#[test]
fn a_document_question_is_answered_from_the_address_it_names() {
    check(
        &["sotu"],
        "What organization did Kennedy propose in 1961 to mobilize volunteers to help other countries?",
        expect![[r#"
            peek: 1 abstract node(s), 1454 tokens
            descend: 1 node(s) → 13 child node(s)
            grep: "What organization did Kennedy propose in 1961 to mobilize volunteers to help other countries" at summary/detailed/full: 138 hit(s)
            descend: 4 node(s) → 26 child node(s)
            grep: "What organization did Kennedy propose in 1961 to mobilize volunteers to help other countries" at detailed/full within the working set: 49 hit(s)
            peek: 6 full node(s), 2042 tokens
            descend: 1 node(s) → 13 child node(s)
            grep: "Secretary volunteers countries" at summary/detailed/full: 68 hit(s)
            descend: 4 node(s) → 32 child node(s)
            grep: "Secretary volunteers countries" at detailed/full within the working set: 30 hit(s)
            peek: 6 full node(s), 2183 tokens
            finish: 3 citation(s), confidence 0.72, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 13 → 4
            | iteration 2: grep within the groups picked chunks: working set 26 → 6
            | read 6 chunk(s), 22 candidate sentence(s); cited 3
            | cited first: score 0.538 (own evidence 0.341, chunk 1 of 6), terms mobil, organiz, 1961, kennedi
            | cited also: score 0.533 (own evidence 0.380, chunk 2 of 6), terms help, mobil, 1961, kennedi
            | cited also: score 0.445 (own evidence 0.255, chunk 2 of 6), terms help, propos, 1961, kennedi
            | second hop through "Secretary": "Secretary volunteers countries"
            | iteration 3: grep over summary/detailed/full picked groups: working set 13 → 4
            | iteration 4: grep within the groups picked chunks: working set 32 → 6
            | read 6 chunk(s), 12 candidate sentence(s); cited 2
            | cited first: score 0.526 (own evidence 0.322, chunk 1 of 6), terms countri, secretari
            | cited also: score 0.523 (own evidence 0.387, chunk 2 of 6), terms countri, secretari; parallel to the first
            = confidence 0.72, ready true, 3 citation(s)
            [17489..17994) data/docs/1961-kennedy.txt: "I have, therefore, instructed the Secretary of Defense to reappraise our entire defense strategy--our ability to fulfill our commitments-the effectiveness, vulnerability, and dispersal of our strategic bases, forces and warning systems--the efficiency and economy of our operation and organization-the elimination of obsolete bases and installations-and the adequacy, modernization and mobility of our present conventional and nuclear forces and weapons systems in the light of present and future dangers."
            [24019..24229) data/docs/1961-kennedy.txt: "We can mobilize this talent through the formation of a National Peace Corps, enlisting the services of all those with the desire and capacity to help foreign lands meet their urgent needs for trained personnel."
            [19336..20697) data/docs/1961-kennedy.txt: "Until the Secretary of Defense's reappraisal is completed, the emphasis here will be largely on improved organization and decision making--on cutting down the wasteful duplications and the time-lag that have handicapped our whole family of missiles. If we are to keep the peace, we need an invulnerable missile force powerful enough to deter any aggressor from even threatening an attack that he would know could not destroy enough of our force to prevent his own destruction. For as I said upon taking the oath of office: \"Only when our arms are sufficient beyond doubt can we be certain beyond doubt that they will never be employed.\"\n\nSecondly, we must improve our economic tools. Our role is essential and unavoidable in the construction of a sound and expanding economy for the entire non-communist world, helping other nations build the strength to meet their own problems, to satisfy their own aspirations--to surmount their own dangers. The problems in achieving this goal are towering and unprecedented-the response must be towering and unprecedented as well, much as Lend-Lease and the Marshall Plan were in earlier years, which brought such fruitful results.\n\n(a) I intend to ask the Congress for authority to establish a new and more effective program for assisting the economic, educational and social development of other countries and continents."
        "#]],
    );
}

#[test]
fn who_first_cites_only_the_earliest_round() {
    check(
        &["debate"],
        "Who first disagreed with the tunnel option?",
        expect![[r#"
            peek: 1 abstract node(s), 474 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "Who first disagreed with the tunnel option" at summary/detailed/full: 63 hit(s)
            descend: 8 node(s) → 32 child node(s)
            grep: "Who first disagreed with the tunnel option" at detailed/full within the working set: 21 hit(s)
            peek: 12 full node(s), 842 tokens
            finish: 1 citation(s), confidence 0.36, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 8
            | iteration 2: grep within the groups picked chunks: working set 32 → 12
            | read 12 chunk(s), 14 candidate sentence(s); cited 1
            | cited first: score 0.557 (own evidence 0.413, chunk 2 of 12), terms first, tunnel
            = confidence 0.36, ready true, 1 citation(s)
            [0..63) data/debate.jsonl#15 (round 4, chen): "I will be the first to say it plainly: the tunnel is a mistake."
        "#]],
    );
}

#[test]
fn a_second_hop_follows_the_name_the_first_answer_gives() {
    check(
        &["debate"],
        "Which firm reviewed the surface estimate that changed bob's position?",
        expect![[r#"
            peek: 1 abstract node(s), 474 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "Which firm reviewed the surface estimate that changed bob's position" at summary/detailed/full: 230 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "Which firm reviewed the surface estimate that changed bob's position" at detailed/full within the working set: 25 hit(s)
            peek: 6 full node(s), 489 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "Kessling firm reviewed position" at summary/detailed/full: 48 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "Kessling firm reviewed position" at detailed/full within the working set: 12 hit(s)
            peek: 6 full node(s), 398 tokens
            finish: 2 citation(s), confidence 0.77, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 2: grep within the groups picked chunks: working set 16 → 6
            | read 6 chunk(s), 18 candidate sentence(s); cited 1
            | cited first: score 0.530 (own evidence 0.354, chunk 2 of 6), terms chang, estim, s, surfac, bob
            | second hop through "Kessling": "Kessling firm reviewed position"
            | iteration 3: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 4: grep within the groups picked chunks: working set 16 → 6
            | read 6 chunk(s), 11 candidate sentence(s); cited 2
            | cited first: score 0.314 (own evidence 0.468, chunk 1 of 6), terms kessl, posit, review
            | cited also: score 0.269 (own evidence 0.517, chunk 4 of 6), terms firm
            = confidence 0.77, ready true, 2 citation(s)
            [0..312) data/debate.jsonl#90 (round 23, bob): "I have opposed the light rail for twenty-two sessions, and I owe this committee an honest answer: the Kessling estimate changes my mind. At $980 million on the surface, with a 40% federal share, the city's portion falls below $600 million, which a half-cent sales tax can carry without touching the general fund."
            [0..185) data/debate.jsonl#84 (round 21, dana): "The Kessling & Partners review has been delivered to the clerk and will be presented at our next session. I would ask members to hold their positions until everyone has read it in full."
        "#]],
    );
}

/// The two answers `scripts/demo.sh` prints.
#[test]
fn the_demo_answers() {
    check(
        &["debate"],
        "What cost estimate did the 2029 audit give?",
        expect![[r#"
            peek: 1 abstract node(s), 474 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "What cost estimate did the 2029 audit give" at summary/detailed/full: 114 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "What cost estimate did the 2029 audit give" at detailed/full within the working set: 16 hit(s)
            peek: 6 full node(s), 419 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "Harbour Line give" at summary/detailed/full: 76 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "Harbour Line give" at detailed/full within the working set: 17 hit(s)
            peek: 6 full node(s), 450 tokens
            finish: 1 citation(s), confidence 0.80, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 2: grep within the groups picked chunks: working set 16 → 6
            | read 6 chunk(s), 13 candidate sentence(s); cited 1
            | cited first: score 0.936 (own evidence 0.909, chunk 1 of 6), terms 2029, audit, cost, estim
            | second hop through "Harbour Line": "Harbour Line give"
            | iteration 3: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 4: grep within the groups picked chunks: working set 16 → 6
            | read 6 chunk(s), 11 candidate sentence(s); cited 3
            | cited first: score 0.836 (own evidence 0.836, chunk 4 of 6), terms harbour, line
            | cited also: score 0.827 (own evidence 0.753, chunk 1 of 6), terms harbour, line; parallel to the first
            | cited also: score 0.764 (own evidence 0.699, chunk 3 of 6), terms harbour, line; parallel to the first
            | second hop found nothing that links the bridge to the question
            = confidence 0.80, ready true, 1 citation(s)
            [234..332) data/debate.jsonl#26 (round 7, bob): "Applying that record, the 2029 audit estimated the true cost of the Harbour Line at $1.57 billion."
        "#]],
    );
    check(
        &[],
        "What is the first of the four freedoms?",
        expect![[r#"
            grep: "What is the first of the four freedoms" at abstract/metadata: 8 hit(s)
            peek: 2 abstract node(s), 1928 tokens
            descend: 2 node(s) → 57 child node(s)
            grep: "What is the first of the four freedoms" at summary/detailed/full: 130 hit(s)
            descend: 8 node(s) → 43 child node(s)
            grep: "What is the first of the four freedoms" at detailed/full within the working set: 44 hit(s)
            peek: 12 full node(s), 2595 tokens
            finish: 1 citation(s), confidence 1.00, ready true
            | iteration 1: ranked scopes by abstract and metadata: working set 2 → 2
            | iteration 2: grep over summary/detailed/full picked groups: working set 57 → 8
            | iteration 3: grep within the groups picked chunks: working set 43 → 12
            | read 12 chunk(s), 38 candidate sentence(s); cited 1
            | cited first: score 1.078 (own evidence 1.112, chunk 1 of 12), terms first, four, freedom
            = confidence 1.00, ready true, 1 citation(s)
            [17358..17552) data/docs/1941-roosevelt.txt: "In the future days, which we seek to make secure, we look forward to a world founded upon four essential human freedoms.\n\nThe first is freedom of speech and expression—everywhere in the world."
        "#]],
    );
}

/// A chat between two people: a question whose premise is false (it names the one who did
/// not do it) ends not ready; the same question about the one who did is answered; a
/// question asked in the chat is never quoted back as the answer.
#[test]
fn a_false_premise_is_not_ready_and_a_quoted_question_is_no_answer() {
    use crate::support::{T0, rt, write};
    use strata::{Config, Engine};
    let e = Engine::in_memory(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let turns = [
        ("Melanie", "Hey Caroline! How was your weekend?"),
        (
            "Caroline",
            "Great! I ran the charity race for the animal shelter on Saturday.",
        ),
        (
            "Melanie",
            "That is amazing. What motivated you to pursue counseling, by the way?",
        ),
        (
            "Caroline",
            "After the race I realised how much the volunteers there needed support, so I signed up for a counseling course at the community college.",
        ),
        (
            "Melanie",
            "I spent Saturday painting the kitchen a pale green colour.",
        ),
        ("Caroline", "Nice, green kitchens are calming."),
    ];
    let mut lines = String::new();
    for (i, (sp, text)) in turns.iter().enumerate() {
        lines.push_str(&format!(
            "{{\"round\": {}, \"speaker\": \"{sp}\", \"text\": {}}}\n",
            i / 2 + 1,
            serde_json::to_string(text).unwrap()
        ));
    }
    let path = write(dir.path(), "chat.jsonl", lines);
    e.ingest_files("chat", None, &[path], T0).unwrap();
    let ask = |q: &str| {
        rt().block_on(e.query(&strata::Ask::new(&["chat".to_string()], q, T0)))
            .unwrap()
    };
    let r = ask("What did Caroline realise after the charity race?");
    assert!(r.ready, "{:?}", r.refinement_history);
    assert!(
        r.citations.iter().any(|c| c.quote.contains("volunteers")),
        "{:?}",
        r.citations
    );
    let r = ask("What did Melanie realise after the charity race?");
    assert!(!r.ready, "a false premise answered: {:?}", r.citations);
    let r = ask("What motivated Caroline to pursue counseling?");
    assert!(
        r.citations.iter().all(|c| !c.quote.ends_with('?')),
        "a question quoted back: {:?}",
        r.citations
    );
}
