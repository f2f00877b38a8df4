//! Generated debates: turns of real filler sentences with planted proposals,
//! disagreements, changes of position and same-round questions.

use super::{Doc, Gold, Instance, Names, Question};
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;
use std::path::PathBuf;
use strata_core::error::{Error, Result};
use strata_core::text;
use strata_engine::source::{InputFile, SourceInput, Turn};
use strata_engine::store::ScopeKind;

const SPEAKERS: &[&str] = &[
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Reyes",
    "Kowalski",
    "Haddad",
    "Brennan",
];
const CATEGORIES: &[&str] = &[
    "bridge toll",
    "harbour levy",
    "library fund",
    "tram extension",
    "water tariff",
    "fishing quota",
    "rail subsidy",
    "market tax",
    "ferry timetable",
    "solar grant",
    "parking fee",
    "school levy",
];
const REASONS: &[&str] = &[
    "the numbers do not add up",
    "small shops would pay for it",
    "it ignores the outer districts",
    "nobody has costed the maintenance",
    "it breaks last year's promise",
    "the council cannot enforce it",
];

/// Sentences of real text fit to pad debate turns (plain, 8–40 words, one line).
pub fn filler_sentences(pool: &[Doc], max: usize) -> Vec<String> {
    let mut out = Vec::new();
    for d in pool {
        for s in text::sentences(&d.text) {
            let t = d.text[s.start..s.end].trim();
            let words = t.split_whitespace().count();
            if (8..=40).contains(&words)
                && !t.contains('\n')
                && t.ends_with(['.', '!', '?'])
                && t.chars().next().is_some_and(char::is_uppercase)
                && t.chars().all(|c| c.is_ascii() && c != '"')
            {
                out.push(t.to_string());
                if out.len() >= max {
                    return out;
                }
            }
        }
    }
    out
}

/// A debate of `rounds` rounds between `speakers` speakers, every speaker once a round,
/// with turns of real filler text. Per topic: a proposal, two disagreements (the first is
/// the gold of "who first disagreed"), a change of position, and a motion in some round in
/// which another speaker proposes something else ("what did X propose in the round where …").
pub fn debate(
    filler: &[String],
    rounds: usize,
    speakers: usize,
    topics: usize,
    rng: &mut ChaCha8Rng,
    names: &mut Names,
    name: &str,
) -> Result<Instance> {
    if filler.len() < 50 {
        return Err(Error::invalid(format!(
            "the corpus gave only {} usable filler sentences; a debate needs at least 50",
            filler.len()
        )));
    }
    let speakers = speakers.clamp(3, SPEAKERS.len());
    let topics = topics.clamp(1, CATEGORIES.len());
    if rounds < 10 {
        return Err(Error::invalid(
            "a generated debate needs at least 10 rounds",
        ));
    }
    let who: Vec<&str> = SPEAKERS[..speakers].to_vec();
    // turns[round][speaker] = planted sentences.
    let mut planted: Vec<Vec<Vec<String>>> = vec![vec![Vec::new(); speakers]; rounds];
    struct Ask {
        question: String,
        answers: Vec<String>,
        at: (usize, usize),
        first_only: bool,
        task: &'static str,
    }
    let mut asks: Vec<Ask> = Vec::new();
    let mut busy: HashSet<(usize, usize)> = HashSet::new();
    let mut cats: Vec<&str> = CATEGORIES.to_vec();
    cats.shuffle(rng);
    // A free (round, speaker) slot in [lo, hi) rounds, for `sp` (or any speaker but `not`).
    let mut free =
        |rng: &mut ChaCha8Rng, lo: usize, hi: usize, sp: Option<usize>, not: &[usize]| {
            if lo >= rounds {
                return None;
            }
            let hi = hi.clamp(lo + 1, rounds);
            for _ in 0..10_000 {
                let r = rng.random_range(lo..hi);
                let s = sp.unwrap_or_else(|| rng.random_range(0..speakers));
                if !not.contains(&s) && busy.insert((r, s)) {
                    return Some((r, s));
                }
            }
            None
        };
    let span = rounds / topics.max(1);
    for (t, cat) in cats.iter().take(topics).enumerate() {
        let topic = format!("the {} {cat}", names.fresh(rng));
        let x = rng.random_range(0..speakers);
        let lo = t * span / 2 + 1;
        let Some(p) = free(rng, lo, lo + span, Some(x), &[]) else {
            continue;
        };
        let (n, m) = (rng.random_range(3..40), rng.random_range(41..90));
        let verb = if rng.random_bool(0.5) {
            "raise"
        } else {
            "lower"
        };
        let verb2 = if verb == "raise" { "lower" } else { "raise" };
        planted[p.0][p.1].push(format!(
            "On {topic}, I propose that we {verb} it by {n} percent."
        ));
        asks.push(Ask {
            question: format!("What did {} first propose about {topic}?", who[x]),
            answers: vec![format!("{n} percent")],
            at: p,
            first_only: false,
            task: "debate_proposal",
        });
        let Some(d1) = free(rng, p.0 + 1, p.0 + 12, None, &[x]) else {
            continue;
        };
        let Some(d2) = free(rng, d1.0 + 1, d1.0 + 20, None, &[x, d1.1]) else {
            continue;
        };
        for d in [d1, d2] {
            planted[d.0][d.1].push(format!(
                "I disagree with {} about {topic}, because {}.",
                who[x],
                REASONS.choose(rng).expect("reasons")
            ));
        }
        asks.push(Ask {
            question: format!("Who first disagreed with {} about {topic}?", who[x]),
            answers: vec![who[d1.1].to_string()],
            at: d1,
            first_only: true,
            task: "debate_first_disagreement",
        });
        let Some(c) = free(rng, d2.0 + 1, d2.0 + 40, Some(x), &[]) else {
            continue;
        };
        planted[c.0][c.1].push(format!(
            "I have changed my position on {topic}: I now propose that we {verb2} it by {m} percent instead."
        ));
        asks.push(Ask {
            question: format!(
                "What did {} propose about {topic} after changing position?",
                who[x]
            ),
            answers: vec![format!("{m} percent")],
            at: c,
            first_only: false,
            task: "debate_change_of_position",
        });
        // A motion, and in the same round another speaker's unrelated proposal.
        let Some(w) = free(rng, 1, rounds, None, &[]) else {
            continue;
        };
        let Some(v) = free(rng, w.0, w.0 + 1, None, &[w.1]) else {
            continue;
        };
        let amount = format!("{} million dollars", rng.random_range(2..60));
        let other = names.fresh(rng);
        planted[w.0][w.1].push(format!("I move that we postpone the vote on {topic}."));
        planted[v.0][v.1].push(format!(
            "My proposal is to give the {other} museum {amount}."
        ));
        asks.push(Ask {
            question: format!(
                "What did {} propose in the round where {} moved to postpone the vote on {topic}?",
                who[v.1], who[w.1]
            ),
            answers: vec![amount],
            at: v,
            first_only: false,
            task: "debate_same_round",
        });
    }
    // The transcript: every round, every speaker, 2–4 filler sentences, planted ones at a
    // random position among them.
    let path = format!("{name}.jsonl");
    let mut sources = Vec::new();
    let mut at_of: std::collections::HashMap<(usize, usize), (String, u64)> =
        std::collections::HashMap::new();
    let mut tokens = 0usize;
    let mut line = 0usize;
    for (r, row) in planted.iter().enumerate() {
        let mut order: Vec<usize> = (0..speakers).collect();
        order.shuffle(rng);
        for s in order {
            let k = rng.random_range(2..=4);
            let mut parts: Vec<String> = (0..k)
                .map(|_| filler.choose(rng).expect("filler").clone())
                .collect();
            for p in &row[s] {
                let i = rng.random_range(0..=parts.len());
                parts.insert(i, p.clone());
            }
            let text = parts.join(" ");
            line += 1;
            let turn = Turn {
                round: r as u32 + 1,
                speaker: who[s].to_string(),
                text,
                time: None,
            };
            let id = format!("{path}#{line}");
            tokens += strata_engine::token::count(&turn.text);
            at_of.insert((r, s), (id.clone(), turn.text.len() as u64));
            sources.push(SourceInput {
                id,
                text: turn.text,
                round: Some(turn.round),
                speaker: Some(turn.speaker),
                time: None,
            });
        }
    }
    let bytes = sources.iter().map(|s| s.text.len() as u64).sum();
    let questions = asks
        .into_iter()
        .map(|a| {
            let (id, len) = at_of[&a.at].clone();
            Question {
                task: a.task,
                question: a.question,
                answers: a.answers,
                gold: vec![Gold {
                    source: id,
                    start: 0,
                    end: len,
                }],
                first_only: a.first_only,
                depth: Some(a.at.0 as f64 / rounds as f64),
            }
        })
        .collect();
    Ok(Instance {
        name: name.to_string(),
        kind: ScopeKind::Debate,
        files: vec![InputFile {
            path: PathBuf::from(path),
            kind: ScopeKind::Debate,
            sources,
            bytes,
        }],
        tokens,
        questions,
    })
}
