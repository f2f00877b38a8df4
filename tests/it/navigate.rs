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
            grep: "What did chen propose about fares" at full: 88 hit(s)
            peek: 10 full node(s), 672 tokens
            finish: 3 citation(s), confidence 0.95, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 2: grep within the groups picked chunks: working set 16 → 6
            | read 10 chunk(s), 18 candidate sentence(s); cited the best 3 of 176 ranked turn(s)
            | cited first: turn ranked 1 (named_speaker 1.000, neighbour 3.859, retrieval 0.948, score 4.807); its best sentence, terms fare, propos, chen
            | cited also: turn ranked 2 (named_speaker 1.000, neighbour 4.606, retrieval 0.908, score 5.515); its best sentence, terms fare, propos, chen
            | cited also: turn ranked 3 (named_speaker 1.000, neighbour 2.084, retrieval 0.600, score 2.684); its best sentence, terms fare, chen
            | confidence: what the best cited turn by chen covers, times its own evidence against the best hit's (0.948)
            = confidence 0.95, ready true, 3 citation(s)
            [189..314) data/debate.jsonl#43 (round 11, chen): "Any plan that raises fares to cover operating costs will hit my ward hardest, and I want that said before anyone proposes it."
            [21..199) data/debate.jsonl#47 (round 12, chen): "I propose a daily fare cap of $6.50 and a monthly cap of $72, so that once a rider has paid for two trips in a day, or the price of a pass in a month, every further ride is free."
            [92..297) data/debate.jsonl#159 (round 40, chen): "For most of this debate I argued for buses instead of rail; tonight I support Port Aldous Connects, because it builds the Blue Corridor first, puts a station at Tanner's Lane and writes fare caps into law."
        "#]],
    );
}

// FIXME: this snapshot freezes an imprecise answer. The Peace Corps sentence is cited
// first, but a Secretary of Defense passage and one on negotiations follow it: a single
// answer cites the best `max_citations` passages with at least 0.3 of the best one's score,
// and the question's words "mobilize", "organization", "help", "propose" match other
// passages of Kennedy's as well. The right answer is the Peace Corps sentence alone.
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
            grep: "What organization did Kennedy propose in 1961 to mobilize volunteers to help other countries" at full: 73 hit(s)
            peek: 6 full node(s), 2163 tokens
            descend: 1 node(s) → 13 child node(s)
            grep: "National Peace Corps propose volunteers help countries" at summary/detailed/full: 166 hit(s)
            descend: 4 node(s) → 29 child node(s)
            grep: "National Peace Corps propose volunteers help countries" at detailed/full within the working set: 50 hit(s)
            grep: "National Peace Corps propose volunteers help countries" at full: 85 hit(s)
            peek: 7 full node(s), 2464 tokens
            finish: 3 citation(s), confidence 0.53, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 13 → 4
            | iteration 2: grep within the groups picked chunks: working set 26 → 6
            | read 6 chunk(s), 21 candidate sentence(s); cited the best 3 of 90 ranked turn(s)
            | cited first: turn ranked 1 (neighbour 5.040, retrieval 1.000, score 6.040); its best sentence, terms help, mobil, 1961, kennedi
            | cited also: turn ranked 2 (neighbour 5.344, retrieval 0.968, score 6.312); its best sentence, terms mobil, organiz, 1961, kennedi
            | cited also: turn ranked 3 (neighbour 4.852, retrieval 0.855, score 5.707); its best sentence, terms help, propos, 1961, kennedi
            | second hop through "National Peace Corps": "National Peace Corps propose volunteers help countries"
            | iteration 3: grep over summary/detailed/full picked groups: working set 13 → 4
            | iteration 4: grep within the groups picked chunks: working set 29 → 6
            | read 7 chunk(s), 60 candidate sentence(s); cited the best 3 of 90 ranked turn(s)
            | cited first: turn ranked 1 (neighbour 2.089, retrieval 1.000, score 3.089); its best sentence, terms corp, help, nation, peac
            | cited also: turn ranked 2 (neighbour 1.608, retrieval 0.865, score 2.473); its best sentence, terms corp, help, peac
            | cited also: turn ranked 3 (neighbour 1.594, retrieval 0.514, score 2.108); its best sentence, terms countri, peac, propos
            | second hop found nothing that links the bridge to the question
            = confidence 0.53, ready true, 3 citation(s)
            [24019..24229) data/docs/1961-kennedy.txt: "We can mobilize this talent through the formation of a National Peace Corps, enlisting the services of all those with the desire and capacity to help foreign lands meet their urgent needs for trained personnel."
            [17489..17994) data/docs/1961-kennedy.txt: "I have, therefore, instructed the Secretary of Defense to reappraise our entire defense strategy--our ability to fulfill our commitments-the effectiveness, vulnerability, and dispersal of our strategic bases, forces and warning systems--the efficiency and economy of our operation and organization-the elimination of obsolete bases and installations-and the adequacy, modernization and mobility of our present conventional and nuclear forces and weapons systems in the light of present and future dangers."
            [25613..26412) data/docs/1961-kennedy.txt: "We must make certain that our negotiators are better informed and better prepared--to formulate workable proposals of our own and to make sound judgments about the proposals of others.\n\nI have asked the other governments concerned to agree to a reasonable delay in the talks on a nuclear test ban--and it is our intention to resume negotiations prepared to reach a final agreement with any nation that is equally willing to agree to an effective and enforceable treaty.\n\nWe must increase our support of the United Nations as an instrument to end the Cold War instead of an arena in which to fight it. In recognition of its increasing importance and the doubling of its membership\n\n--we are enlarging and strengthening our own mission to the U.N.\n\n--we shall help insure that it is properly financed."
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
            grep: "Who first disagreed with the tunnel option" at full: 38 hit(s)
            peek: 17 full node(s), 1208 tokens
            finish: 1 citation(s), confidence 0.36, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 8
            | iteration 2: grep within the groups picked chunks: working set 32 → 12
            | read 17 chunk(s), 20 candidate sentence(s); cited 1
            | cited first: score 0.575 (own evidence 0.409, chunk 2 of 17), terms first, tunnel
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
            grep: "Which firm reviewed the surface estimate that changed bob's position" at full: 110 hit(s)
            peek: 10 full node(s), 774 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "Kessling firm reviewed position" at summary/detailed/full: 48 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "Kessling firm reviewed position" at detailed/full within the working set: 12 hit(s)
            grep: "Kessling firm reviewed position" at full: 30 hit(s)
            peek: 11 full node(s), 803 tokens
            finish: 3 citation(s), confidence 0.57, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 2: grep within the groups picked chunks: working set 16 → 6
            | read 10 chunk(s), 24 candidate sentence(s); cited the best 3 of 176 ranked turn(s)
            | cited first: turn ranked 1 (named_speaker 1.000, neighbour 4.564, retrieval 0.958, score 5.521); its best sentence, terms chang, estim, s, surfac, bob
            | cited also: turn ranked 2 (named_speaker 1.000, neighbour 2.665, retrieval 0.803, score 3.468); its best sentence, terms chang, surfac, bob
            | cited also: turn ranked 3 (named_speaker 1.000, neighbour 1.787, retrieval 0.741, score 2.528); its best sentence, terms chang, estim, s, bob
            | confidence: what the best cited turn by bob covers, times its own evidence against the best hit's (0.958)
            | second hop through "Kessling": "Kessling firm reviewed position"
            | iteration 3: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 4: grep within the groups picked chunks: working set 16 → 6
            | read 11 chunk(s), 19 candidate sentence(s); cited the best 3 of 176 ranked turn(s)
            | cited first: turn ranked 1 (named_speaker 1.000, neighbour 0.321, retrieval 0.594, score 0.914); its best sentence, terms kessl, review
            | cited also: turn ranked 2 (named_speaker 1.000, neighbour 0.340, retrieval 0.590, score 0.929); its best sentence, terms kessl, review
            | cited also: turn ranked 3 (named_speaker 1.000, neighbour 0.563, retrieval 0.582, score 1.145); its best sentence, terms kessl, review
            = confidence 0.57, ready true, 3 citation(s)
            [0..312) data/debate.jsonl#90 (round 23, bob): "I have opposed the light rail for twenty-two sessions, and I owe this committee an honest answer: the Kessling estimate changes my mind. At $980 million on the surface, with a 40% federal share, the city's portion falls below $600 million, which a half-cent sales tax can carry without touching the general fund."
            [48..364) data/debate.jsonl#102 (round 26, bob): "I have not changed my view about debt; I have changed my view about this project, because the project changed. A cheaper surface line that the voters approve and the federal government co-funds is a different proposition from the one I opposed, and I would be a poor finance chair if I could not tell the difference."
            [12..275) data/debate.jsonl#170 (round 43, bob): "I came in as the committee's loudest opponent of light rail and I am leaving as a supporter, because an independent review cut the cost and this package puts hard limits on what can be spent. I would urge every sceptic to read the Kessling report before deciding."
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
            grep: "What cost estimate did the 2029 audit give" at full: 68 hit(s)
            peek: 7 full node(s), 496 tokens
            descend: 1 node(s) → 44 child node(s)
            grep: "Harbour Line give" at summary/detailed/full: 76 hit(s)
            descend: 4 node(s) → 16 child node(s)
            grep: "Harbour Line give" at detailed/full within the working set: 17 hit(s)
            grep: "Harbour Line give" at full: 45 hit(s)
            peek: 8 full node(s), 561 tokens
            finish: 3 citation(s), confidence 0.80, ready true
            | iteration 1: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 2: grep within the groups picked chunks: working set 16 → 6
            | read 7 chunk(s), 15 candidate sentence(s); cited the best 3 of 176 ranked turn(s)
            | cited first: turn ranked 1 (neighbour 1.296, retrieval 1.000, score 2.296); its best sentence, terms 2029, audit, cost, estim
            | cited also: turn ranked 2 (neighbour 0.771, retrieval 0.604, score 1.374); its best sentence, terms cost, estim, give
            | cited also: turn ranked 3 (neighbour 0.953, retrieval 0.582, score 1.535); its best sentence, terms 2029, give
            | second hop through "Harbour Line": "Harbour Line give"
            | iteration 3: grep over summary/detailed/full picked groups: working set 44 → 4
            | iteration 4: grep within the groups picked chunks: working set 16 → 6
            | read 8 chunk(s), 15 candidate sentence(s); cited the best 3 of 176 ranked turn(s)
            | cited first: turn ranked 1 (neighbour 1.293, retrieval 1.000, score 2.293); its best sentence, terms give, line
            | cited also: turn ranked 2 (neighbour 0.505, retrieval 0.986, score 1.491); its best sentence, terms harbour, line
            | cited also: turn ranked 3 (neighbour 2.957, retrieval 0.974, score 3.932); its best sentence, terms give, line
            | second hop found nothing that links the bridge to the question
            = confidence 0.80, ready true, 3 citation(s)
            [234..332) data/debate.jsonl#26 (round 7, bob): "Applying that record, the 2029 audit estimated the true cost of the Harbour Line at $1.57 billion."
            [34..345) data/debate.jsonl#138 (round 35, bob): "If the project's cost estimate ever exceeds the top of Kessling's confidence range by more than 10%, the project automatically returns to the full council for a public vote before any further construction contracts are signed. That gives voters a guarantee that nobody can quietly spend past what they approved."
            [0..333) data/debate.jsonl#11 (round 3, chen): "On reliability, I would remind the committee that Route 9, the main Eastgate line, ran on time only 61% of the time in 2029. That is not a failure of buses as a technology; it is a failure of running buses in mixed traffic behind delivery vans and double-parked cars. Give buses their own lanes and that number changes within months."
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
            grep: "What is the first of the four freedoms" at full: 72 hit(s)
            peek: 14 full node(s), 2714 tokens
            finish: 1 citation(s), confidence 1.00, ready true
            | iteration 1: ranked scopes by abstract and metadata: working set 2 → 2
            | iteration 2: grep over summary/detailed/full picked groups: working set 57 → 8
            | iteration 3: grep within the groups picked chunks: working set 43 → 12
            | read 14 chunk(s), 40 candidate sentence(s); cited 1
            | cited first: score 1.070 (own evidence 1.109, chunk 1 of 14), terms first, four, freedom
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
    let e = conversation(&turns, 2);
    let ask = |q: &str| ask(&e, q);
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

/// In a conversation, what one says to the other about the other ("It sounds like your
/// first yoga class was quite an experience!") is not what they did: a question asking it
/// of the one who said it has a false premise and ends not ready; asked of the other, it
/// is answered from their own words.
#[test]
fn a_sentence_about_the_one_spoken_to_is_not_the_speakers_own() {
    let turns = [
        (
            "Elise",
            "I finally signed up for yoga. My first yoga class is on Thursday at five!",
        ),
        (
            "Kate",
            "It sounds like your first yoga class will be quite an experience!",
        ),
        ("Elise", "I hope so. I bought a new mat for it."),
        (
            "Kate",
            "I spent the evening baking bread for the neighbours.",
        ),
    ];
    let e = conversation(&turns, 2);
    let r = ask(&e, "When is Elise's first yoga class?");
    assert!(r.ready, "{:?}", r.refinement_history);
    assert!(
        r.citations[0].quote.contains("Thursday"),
        "{:?}",
        r.citations
    );
    let r = ask(&e, "When is Kate's first yoga class?");
    assert!(
        !r.ready,
        "a false premise answered from what Kate said to Elise: {:?} {:?}",
        r.citations, r.refinement_history
    );
}

/// A question asking for things of a kind ("What sports …") is answered by turns naming
/// its members ("volleyball", "skiing"), which rarely say the kind's own word: its search
/// holds the words the lexicon (WordNet's kinds, `text::kinds`) names them by, and says so.
#[test]
fn a_question_for_kinds_of_things_finds_turns_naming_them() {
    use crate::support::{T0, rt};
    let turns = [
        ("Kevin", "Hey Paola, how was your day?"),
        ("Paola", "Long! I studied in the library until six."),
        (
            "Kevin",
            "I played volleyball with my friends this afternoon.",
        ),
        ("Paola", "I bought a new lamp for my desk."),
        ("Kevin", "Rainy days are the best for reading."),
        ("Paola", "My brother is visiting next week."),
        (
            "Kevin",
            "In winter I go skiing in the mountains every weekend.",
        ),
        ("Paola", "I made soup for dinner."),
        ("Kevin", "My cousin moved to a new flat downtown."),
    ];
    let e = conversation(&turns, 2);
    let q = "What sports does Kevin enjoy?";
    let w = rt()
        .block_on(e.context_for(
            "chat",
            q,
            80,
            &strata::TimeRange::default(),
            T0,
            &strata::NoProgress,
        ))
        .unwrap();
    assert!(
        w.text.contains("volleyball") && w.text.contains("skiing"),
        "{}",
        w.text
    );
    let r = ask(&e, q);
    assert!(
        r.refinement_history
            .iter()
            .any(|h| h.contains("asks for kinds of sport")),
        "{:?}",
        r.refinement_history
    );
}

/// A question that names a speaker ("What did the Industrial Designer say about …") is
/// answered from what their turns say: the words of the name are not searched for (every
/// turn's label holds them, and a meeting's many "Yeah." turns by that speaker matched
/// them best), and the named speaker's turns that hold the question's other words come
/// first. A role written in lower case ("the industrial design of the case") names no one.
#[test]
fn a_question_naming_a_speaker_is_answered_by_what_their_turns_say() {
    let filler = [
        "We should keep the battery compartment on the back so that it is easy to open for anyone.",
        "The budget for the project is twelve euros and fifty cents per unit, which limits the chips we can use.",
        "I will send the minutes of this meeting to everyone by email after lunch today.",
        "The scroll wheel needs a rubber coating, otherwise it slips under the thumb.",
        "Our company colours are yellow and black, and the logo has to be visible on the front of the case.",
        "Speech recognition is too expensive for this price range, according to the engineers.",
    ];
    let short = ["Yeah.", "Huh.", "Okay.", "Right.", "Mm-hmm.", "No."];
    let mut turns: Vec<(&str, &str)> = Vec::new();
    for i in 0..30 {
        let other = if i % 2 == 1 {
            "Project Manager"
        } else {
            "Marketing"
        };
        turns.push((other, filler[i % filler.len()]));
        turns.push(("Industrial Designer", short[i % short.len()]));
    }
    let taste = "From my side, I looked at the trend reports and the shops, and what I found is that \
                 taste these days runs to soft materials and bright primary colours, so our case \
                 should not look like a grey brick.";
    turns.insert(31, ("Industrial Designer", taste));
    let e = conversation(&turns, 4);
    let ask = |q: &str| ask(&e, q);
    let r = ask("What did the Industrial Designer say about the customers' taste?");
    assert_eq!(r.citations.first().map(|c| c.quote.as_str()), Some(taste));
    assert!(
        r.citations
            .iter()
            .all(|c| !short.contains(&c.quote.as_str())),
        "{:?}",
        r.citations
    );
    let cited: Vec<&String> = r
        .refinement_history
        .iter()
        .filter(|h| h.starts_with("cited first"))
        .collect();
    assert!(
        cited.len() == 1 && cited[0].contains("named_speaker 1.000"),
        "{:?}",
        r.refinement_history
    );
    // In lower case a role is a common word: no speaker is named, nothing comes first.
    let r = ask("What was said about the industrial design of the case?");
    assert!(
        r.refinement_history
            .iter()
            .all(|h| !h.contains("named_speaker")),
        "{:?}",
        r.refinement_history
    );
}

/// A speaker's whole name as the transcript writes it names that speaker and no other, even
/// when the word that tells two names apart is one the index drops ("PhD G" and "PhD A":
/// "g" is no term, and "phd" is in both). Asked about PhD A, the answer cites PhD A's turn,
/// not PhD G's, and the history marks it as the named speaker's.
#[test]
fn a_whole_speaker_name_names_that_speaker_and_no_other() {
    let g = "I measured the signal to noise ratio on the far microphones and it drops by \
             nine decibels once the fan is on.";
    let a = "My worry with the signal to noise ratio numbers is that the close microphones \
             were recorded on another day.";
    let mut turns: Vec<(&str, &str)> = Vec::new();
    let filler = [
        "Let us move to the next item on the agenda, the disk space for the new recordings.",
        "The new server arrives next week and should hold all of the transcripts.",
        "We still need volunteers for the reading task in the second session.",
    ];
    for i in 0..12 {
        turns.push(("Professor B", filler[i % filler.len()]));
    }
    turns.insert(4, ("PhD G", g));
    turns.insert(9, ("PhD A", a));
    let e = conversation(&turns, 3);
    let r = ask(&e, "What did PhD A think about the signal to noise ratio?");
    assert_eq!(
        r.citations.first().map(|c| c.quote.as_str()),
        Some(a),
        "{r:?}"
    );
    let first = r
        .refinement_history
        .iter()
        .find(|h| h.starts_with("cited first"))
        .unwrap();
    assert!(first.contains("named_speaker 1.000"), "{first}");
    let r = ask(&e, "What did PhD G think about the signal to noise ratio?");
    assert_eq!(
        r.citations.first().map(|c| c.quote.as_str()),
        Some(g),
        "{r:?}"
    );
}

/// A question whose premise names the wrong person — what someone did not say, though
/// another did — is not answered as if they had: the named speaker's own turns hold little
/// of it, so the answer ends not ready; asked about the one who said it, it is ready.
#[test]
fn a_question_naming_someone_who_did_not_say_it_ends_not_ready() {
    let race = "After the charity race along the river I realised that I had to look after my \
                knees, so I signed up for swimming lessons at the community pool.";
    let mut turns: Vec<(&str, &str)> = Vec::new();
    let melanie = [
        "The kids painted the fence green over the weekend and made a mess of the garden.",
        "We are driving to the coast in July, if the car survives the trip.",
        "My sister finally visited and we baked far too many lemon cakes.",
    ];
    let caroline = [
        "That sounds lovely, I hope the weather holds for you.",
        "I started volunteering at the animal shelter on Tuesday evenings.",
        "The counselling course is hard but I am learning a lot about listening.",
        "My grandmother sent me her old recipe book from Sweden.",
    ];
    for i in 0..12 {
        turns.push(("Melanie", melanie[i % melanie.len()]));
        turns.push(("Caroline", caroline[i % caroline.len()]));
    }
    turns.insert(9, ("Melanie", race));
    let e = conversation(&turns, 2);
    let r = ask(&e, "What did Melanie realise after the charity race?");
    assert!(r.ready, "{r:?}");
    assert_eq!(r.citations.first().map(|c| c.quote.as_str()), Some(race));
    let r = ask(&e, "What did Caroline realise after the charity race?");
    assert!(
        !r.ready,
        "confidence {} for a premise the text does not hold: {:?}",
        r.confidence, r.citations
    );
    // The history says why.
    assert!(
        r.refinement_history
            .iter()
            .any(|h| h.starts_with("confidence: no cited turn is by Caroline")),
        "{:?}",
        r.refinement_history
    );
}

/// Minutes report what people did in the third person, in someone else's turns ("Okafor
/// proposes capping the pilot budget …", written by the clerk): a question naming Okafor is
/// answered by the sentence that opens with Okafor as who acts — before Okafor's own turns
/// that only share a word with it — and is ready; one naming someone the minutes only
/// address ("Moreau, the pilot budget proposal is on the table.") and never report doing
/// it is not.
#[test]
fn minutes_in_the_third_person_answer_for_the_one_they_name() {
    let cap = "Okafor proposes capping the pilot budget at 48,200 euros for the first year.";
    let object = "Lindqvist objects to the cap, arguing that the pilot needs 60,000 euros for \
                  its staff.";
    let mut turns: Vec<(&str, &str)> = Vec::new();
    let filler = [
        (
            "Okafor",
            "We should move carefully on the harbour budget this spring.",
        ),
        (
            "Lindqvist",
            "The ferry timetable still worries the island schools.",
        ),
        (
            "Moreau",
            "Thank you, I would like the tender documents circulated early.",
        ),
    ];
    for i in 0..9 {
        turns.push(filler[i % filler.len()]);
        turns.push(("Clerk", "The meeting moves to the next item on the agenda."));
    }
    turns.insert(3, ("Clerk", cap));
    turns.insert(8, ("Clerk", object));
    turns.insert(
        12,
        ("Clerk", "Thank you, Moreau. The tram depot is deferred."),
    );
    turns.push((
        "Clerk",
        "Moreau, the pilot budget proposal is on the table.",
    ));
    let e = conversation(&turns, 3);
    for (question, answer) in [
        ("What did Okafor propose for the pilot budget?", cap),
        ("Why did Lindqvist object to the cap?", object),
    ] {
        let r = ask(&e, question);
        assert_eq!(
            r.citations.first().map(|c| c.quote.as_str()),
            Some(answer),
            "{r:?}"
        );
        assert!(r.ready, "confidence {}: {r:?}", r.confidence);
    }
    let r = ask(&e, "What did Moreau propose for the pilot budget?");
    assert!(!r.ready, "confidence {}: {r:?}", r.confidence);
}

/// A greeting that names whom the question asks about ("Hey Caroline!" opening the turn
/// that asks her) holds no word of what the question asks: it is never cited. The reply
/// in other words is, even when no sentence read holds a question word but her name.
#[test]
fn a_greeting_naming_who_is_asked_about_is_no_citation() {
    let reply = "My own journey and the support I got made a huge difference, so I want to \
                 help others the same way.";
    let turns: Vec<(&str, &str)> = vec![
        (
            "Melanie",
            "Hey Caroline! What motivated you to pursue counseling?",
        ),
        ("Caroline", reply),
        (
            "Melanie",
            "The kids painted the fence green over the weekend.",
        ),
        (
            "Caroline",
            "The adoption agency called about the interview.",
        ),
    ];
    let e = conversation(&turns, 2);
    let r = ask(&e, "What motivated Caroline to pursue counseling?");
    let quotes: Vec<&str> = r.citations.iter().map(|c| c.quote.as_str()).collect();
    assert!(!quotes.contains(&"Hey Caroline!"), "{r:?}");
    assert_eq!(quotes.first(), Some(&reply), "{r:?}");
    assert!(r.ready, "confidence {}: {r:?}", r.confidence);
}

/// A reply answers the question before it in other words ("Did you go to the adoption
/// agency meeting?" — "Yes! I met a counselor there …"): cited for what it replies to, it
/// covers what that question holds, so the answer is ready; asked of the one who only asked,
/// there is no answer.
#[test]
fn a_reply_answering_in_other_words_covers_the_question_it_answers() {
    let reply = "Yes! I met a counselor there and she walked me through the whole \
                 application process, step by step.";
    let turns: Vec<(&str, &str)> = vec![
        ("Melanie", "Hey Caroline! How was your week?"),
        (
            "Caroline",
            "Pretty busy, I started a pottery class on Monday.",
        ),
        (
            "Melanie",
            "The kids painted the fence green over the weekend and made a mess of the garden.",
        ),
        ("Caroline", "That sounds like fun, I hope they enjoyed it."),
        (
            "Melanie",
            "Did you go to the adoption agency meeting last Thursday?",
        ),
        ("Caroline", reply),
        (
            "Melanie",
            "We are driving to the coast in July, if the car survives the trip.",
        ),
        (
            "Caroline",
            "My grandmother sent me her old recipe book from Sweden.",
        ),
    ];
    let e = conversation(&turns, 2);
    let r = ask(
        &e,
        "What did Caroline learn at the adoption agency meeting?",
    );
    assert_eq!(r.citations.first().map(|c| c.quote.as_str()), Some(reply));
    assert!(
        r.ready,
        "confidence {}: {:?}",
        r.confidence, r.refinement_history
    );
    let r = ask(&e, "What did Melanie learn at the adoption agency meeting?");
    assert!(!r.ready, "{r:?}");
}

/// An engine holding `turns` (speaker, text) as the debate "chat", `per_round` turns a round.
/// A set question's subject written as a phrase ("the stadium roof") keeps its members to
/// the turns about it: turns that share only its verb ("oppose", said of other things) are
/// no members, though the turns about the roof object in other words ("argues against").
/// Before, the contrast between the chunks read (the roof in most of them, "oppose" in a
/// few) cited only the turns about something else.
#[test]
fn a_set_questions_phrase_keeps_its_members_to_the_turns_about_it() {
    let against = [
        "Dubois argues against the stadium roof, which has no maintenance line.",
        "Okonkwo argues against the stadium roof, which was never put to consultation.",
    ];
    let about = [
        "Members approve the stadium roof by 5 votes to 1.",
        "Sato will report back on the stadium roof before 8 May.",
        "Ferreira puts forward a stadium roof of 78,000 euros.",
        "On a show of hands the stadium roof carries, 4 for and 2 against.",
    ];
    let elsewhere = [
        "Many a good citizen votes the opposite of what his party asks.",
        "I will strongly oppose any plan that undermines the harbour schools.",
        "The ferry owners opposed the new timetable from the start.",
    ];
    let filler = [
        "The agenda for the spring session was circulated last week.",
        "Thank you, the minutes of the last meeting are approved.",
        "We move to the next item on the agenda.",
    ];
    let speakers = ["Dubois", "Okonkwo", "Sato", "Ferreira", "Halvorsen"];
    let mut turns: Vec<(&str, &str)> = Vec::new();
    for (i, t) in against
        .iter()
        .chain(&about)
        .chain(&elsewhere)
        .chain(&filler)
        .chain(&filler)
        .enumerate()
    {
        turns.push((speakers[i % speakers.len()], t));
    }
    // Interleaved, so that no round is about one thing only.
    turns.sort_by_key(|(_, t)| t.len() % 7);
    let e = conversation(&turns, 3);
    let r = ask(&e, "Who opposed the stadium roof?");
    let cited: Vec<&str> = r.citations.iter().map(|c| c.quote.as_str()).collect();
    assert!(
        cited.iter().all(|q| q.contains("stadium roof")),
        "cited a turn about something else: {cited:?}"
    );
    for a in against {
        assert!(cited.contains(&a), "{a:?} not cited: {cited:?}");
    }
}

fn conversation(turns: &[(&str, &str)], per_round: usize) -> strata::Engine {
    use crate::support::{T0, write};
    let e = strata::Engine::in_memory(strata::Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    for (i, (sp, text)) in turns.iter().enumerate() {
        lines.push_str(&format!(
            "{{\"round\": {}, \"speaker\": \"{sp}\", \"text\": {}}}\n",
            i / per_round + 1,
            serde_json::to_string(text).unwrap()
        ));
    }
    let path = write(dir.path(), "chat.jsonl", lines);
    e.ingest_files("chat", None, &[path], T0).unwrap();
    e
}

/// `question` asked of [`conversation`]'s "chat" with the default settings.
fn ask(e: &strata::Engine, question: &str) -> strata::QueryResult {
    use crate::support::{T0, rt};
    rt().block_on(e.query(&strata::Ask::new(&["chat".to_string()], question, T0)))
        .unwrap()
}

/// A scope's word statistics are its own: loading another debate (or another tenant's
/// documents) into the same store changes neither a question's answer nor its
/// question-focused window. The other scope here repeats the question's words, so shared
/// statistics would weigh them differently.
#[test]
fn a_scopes_answers_do_not_depend_on_the_other_scopes_of_its_store() {
    use crate::support::{T0, debate_path, doc_paths, render, rt, write};
    let alone = strata::Engine::in_memory(strata::Config::default()).unwrap();
    alone
        .ingest_files("debate", None, &[debate_path()], T0)
        .unwrap();
    let shared = strata::Engine::in_memory(strata::Config::default()).unwrap();
    shared
        .ingest_files("debate", None, &[debate_path()], T0)
        .unwrap();
    shared.ingest_files("docs", None, &doc_paths(), T0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    for i in 0..200 {
        lines.push_str(&format!(
            "{{\"round\": {}, \"speaker\": \"Ng\", \"text\": \"The fare cap and the bus fares again, item {i}; Chen proposes nothing new.\"}}\n",
            i + 1
        ));
    }
    let other = write(dir.path(), "other.jsonl", lines);
    shared.ingest_files("other", None, &[other], T0).unwrap();
    let rt = rt();
    let scopes = ["debate".to_string()];
    for question in [
        "What did chen propose about fares?",
        "Who objected to the fare cap?",
        "What was said about the bus depot?",
    ] {
        let a = rt
            .block_on(alone.query(&strata::Ask::new(&scopes, question, T0)))
            .unwrap();
        let b = rt
            .block_on(shared.query(&strata::Ask::new(&scopes, question, T0)))
            .unwrap();
        assert!(!a.citations.is_empty(), "{question}");
        assert_eq!(render(&a), render(&b), "{question}");
        let window = |e: &strata::Engine| {
            let w = rt
                .block_on(e.context_for(
                    "debate",
                    question,
                    800,
                    &strata::TimeRange::ALL,
                    T0,
                    &strata::NoProgress,
                ))
                .unwrap();
            serde_json::to_string(&w).unwrap()
        };
        assert_eq!(window(&alone), window(&shared), "{question}");
    }
}
