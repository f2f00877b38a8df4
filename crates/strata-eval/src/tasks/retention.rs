//! Generated debates for the *context retention* task: turns of real filler sentences with
//! key facts (proposals with figures, objections, changes of position, votes, commitments
//! with deadlines) planted across the whole debate, and trivial look-alike decoys (small
//! talk with figures, dates, "votes" and "objections"). What is measured is which of them a
//! context window still holds, not answers to questions.

use super::{Instance, Names};
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::PathBuf;
use strata_core::error::{Error, Result};
use strata_engine::source::{InputFile, SourceInput};
use strata_engine::store::ScopeKind;

pub(super) const SPEAKERS: &[&str] = &[
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Reyes",
    "Kowalski",
    "Haddad",
    "Brennan",
];
pub(super) const ITEMS: &[&str] = &[
    "bridge toll",
    "harbour levy",
    "library fund",
    "tram extension",
    "water tariff",
    "fishing quota",
    "rail subsidy",
    "market tax",
    "ferry service",
    "solar grant",
    "parking scheme",
    "school levy",
    "flood barrier",
    "housing fund",
];
pub(super) const REASONS: &[&str] = &[
    "the numbers do not add up",
    "small shops would pay for it",
    "it ignores the outer districts",
    "nobody has costed the maintenance",
    "it breaks last year's promise",
    "the council cannot enforce it",
];
pub(super) const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// One planted sentence and what shows it survived: every key (case-insensitive) in one
/// sentence of the window.
#[derive(Clone, Debug, Serialize)]
pub struct Planted {
    pub kind: &'static str,
    pub sentence: String,
    pub keys: Vec<String>,
    /// 0-based round.
    pub round: usize,
    pub speaker: String,
}

/// A debate to measure windows on.
pub struct RetentionDebate {
    pub instance: Instance,
    pub facts: Vec<Planted>,
    pub decoys: Vec<Planted>,
    /// The raw transcript, one `Round N, Speaker: text` line a turn (the baselines).
    pub transcript: String,
}

/// The five kinds of key fact, in the order a topic's story runs.
pub const KINDS: [&str; 5] = ["proposal", "objection", "change", "vote", "commitment"];

/// `rounds` rounds among `speakers` speakers (every speaker once a round, 2–4 filler
/// sentences a turn), `facts` key facts (five per topic: a proposal with a figure, an
/// objection by another speaker, the proposer's change of position to another figure, a
/// vote with its tally, a commitment with a deadline; a topic's rounds are random and in
/// story order, so the facts spread over the whole debate) and as many decoys.
pub fn retention_debate(
    filler: &[String],
    rounds: usize,
    speakers: usize,
    facts: usize,
    rng: &mut ChaCha8Rng,
    names: &mut Names,
    name: &str,
) -> Result<RetentionDebate> {
    if filler.len() < 50 {
        return Err(Error::invalid(format!(
            "the corpus gave only {} usable filler sentences; a debate needs at least 50",
            filler.len()
        )));
    }
    if rounds < 20 {
        return Err(Error::invalid(
            "a retention debate needs at least 20 rounds",
        ));
    }
    let speakers = speakers.clamp(3, SPEAKERS.len());
    let who: Vec<&str> = SPEAKERS[..speakers].to_vec();
    let topics = facts.div_ceil(KINDS.len()).max(1);
    let mut planted: Vec<Vec<Vec<String>>> = vec![vec![Vec::new(); speakers]; rounds];
    let mut key_facts = Vec::new();
    let mut decoys = Vec::new();
    let mut busy = std::collections::HashSet::new();
    // A free (round, speaker) slot: each turn holds at most one planted sentence.
    let mut slot = |rng: &mut ChaCha8Rng, lo: usize, hi: usize, sp: Option<usize>, not: usize| {
        for _ in 0..10_000 {
            let r = rng.random_range(lo..hi.max(lo + 1).min(rounds));
            let s = sp.unwrap_or_else(|| rng.random_range(0..speakers));
            if s != not && busy.insert((r, s)) {
                return Some((r, s));
            }
        }
        None
    };
    for t in 0..topics {
        let item = ITEMS[t % ITEMS.len()];
        let topic = format!("{} {item}", names.fresh(rng));
        // Five rounds in story order, spread over the debate.
        let mut at: Vec<usize> = (0..KINDS.len())
            .map(|_| rng.random_range(0..rounds))
            .collect();
        at.sort();
        let x = rng.random_range(0..speakers);
        let n = rng.random_range(3..60);
        let m = loop {
            let m = rng.random_range(3..60);
            if m != n {
                break m;
            }
        };
        let mut objector = x;
        for (k, &kind) in KINDS.iter().enumerate() {
            if key_facts.len() >= facts {
                break;
            }
            let (sp, not) = match kind {
                "proposal" | "change" => (Some(x), usize::MAX),
                _ => (None, x),
            };
            let Some((r, s)) = slot(rng, at[k], at[k] + rounds / 10 + 1, sp, not) else {
                continue;
            };
            if kind == "objection" {
                objector = s;
            }
            let (sentence, keys) = match kind {
                "proposal" => {
                    let s = [
                        format!(
                            "I propose that the {topic} be funded with {n} million dollars a year."
                        ),
                        format!(
                            "My proposal is a {topic} of {n} million dollars, paid from the general budget."
                        ),
                        format!("I formally propose {n} million dollars for the {topic}."),
                    ];
                    (
                        s.choose(rng).expect("templates").clone(),
                        vec![topic.clone(), format!("{n} million")],
                    )
                }
                "objection" => {
                    let reason = REASONS.choose(rng).expect("reasons");
                    let s = [
                        format!(
                            "I object to {}'s plan for the {topic}, because {reason}.",
                            who[x]
                        ),
                        format!(
                            "I must formally object to the {topic} as {} proposed it: {reason}.",
                            who[x]
                        ),
                        format!("My objection to the {topic} stands, because {reason}."),
                    ];
                    (
                        s.choose(rng).expect("templates").clone(),
                        vec![topic.clone(), "object".to_string()],
                    )
                }
                "change" => {
                    let s = [
                        format!(
                            "I have changed my position on the {topic}: after hearing {}, I now propose {m} million dollars instead.",
                            who[objector]
                        ),
                        format!(
                            "I withdraw my earlier figure for the {topic} and now support {m} million dollars."
                        ),
                        format!("I was wrong about the {topic}; I now back {m} million dollars."),
                    ];
                    (
                        s.choose(rng).expect("templates").clone(),
                        vec![topic.clone(), format!("{m} million")],
                    )
                }
                "vote" => {
                    let total = 9 + 2 * rng.random_range(0..4);
                    let yes = rng.random_range(total / 2 + 1..total);
                    let no = total - yes;
                    let s = [
                        format!("The committee voted {yes} to {no} to adopt the {topic}."),
                        format!("The motion on the {topic} carried by {yes} votes to {no}."),
                        format!("We have decided, {yes} to {no}, that the {topic} goes ahead."),
                    ];
                    let chosen = s.choose(rng).expect("templates").clone();
                    let tally = if chosen.contains("votes to") {
                        format!("{yes} votes to {no}")
                    } else {
                        format!("{yes} to {no}")
                    };
                    (chosen, vec![topic.clone(), tally])
                }
                _ => {
                    let day = rng.random_range(1..29);
                    let month = MONTHS.choose(rng).expect("months");
                    let year = rng.random_range(2026..2032);
                    let s = [
                        format!(
                            "I commit to publishing the tender for the {topic} by {month} {day}, {year}."
                        ),
                        format!(
                            "My department will deliver the costed plan for the {topic} no later than {month} {day}, {year}."
                        ),
                        format!(
                            "I promise this committee a final report on the {topic} by {month} {day}, {year}."
                        ),
                    ];
                    (
                        s.choose(rng).expect("templates").clone(),
                        vec![topic.clone(), format!("{month} {day}")],
                    )
                }
            };
            planted[r][s].push(sentence.clone());
            key_facts.push(Planted {
                kind,
                sentence,
                keys,
                round: r,
                speaker: who[s].to_string(),
            });
        }
    }
    // Decoys: small talk that looks like a fact (a figure, a date, a "vote", an
    // "objection", a "change of mind", a "proposal"), each about a name of its own.
    for d in 0..key_facts.len() {
        let Some((r, s)) = slot(rng, 0, rounds, None, usize::MAX) else {
            continue;
        };
        let place = names.fresh(rng);
        let n = rng.random_range(3..60);
        let (kind, sentence, keys) = match d % 6 {
            0 => (
                "decoy_figure",
                format!("I paid {n} dollars for lunch at the {place} cafe, which was a bargain."),
                vec![place.clone(), format!("{n} dollars")],
            ),
            1 => {
                let (a, b) = (rng.random_range(3..9), rng.random_range(0..3));
                (
                    "decoy_vote",
                    format!("My family voted {a} to {b} to spend the weekend at {place} again."),
                    vec![place.clone(), format!("{a} to {b}")],
                )
            }
            2 => {
                let day = rng.random_range(1..29);
                let month = MONTHS.choose(rng).expect("months");
                (
                    "decoy_date",
                    format!(
                        "I promised my daughter we would be back from {place} by {month} {day}."
                    ),
                    vec![place.clone(), format!("{month} {day}")],
                )
            }
            3 => (
                "decoy_objection",
                format!("I object to how cold it is in the {place} room this morning."),
                vec![place.clone(), "object".to_string()],
            ),
            4 => (
                "decoy_change",
                format!(
                    "I have changed my mind about the {place} bakery: their {n} kinds of bread are excellent."
                ),
                vec![place.clone(), format!("{n} kinds")],
            ),
            _ => (
                "decoy_proposal",
                format!("I propose we order {n} coffees from {place} for the break."),
                vec![place.clone(), format!("{n} coffees")],
            ),
        };
        planted[r][s].push(sentence.clone());
        decoys.push(Planted {
            kind,
            sentence,
            keys,
            round: r,
            speaker: who[s].to_string(),
        });
    }
    // The transcript.
    let path = format!("{name}.jsonl");
    let mut sources = Vec::new();
    let mut transcript = String::new();
    let mut tokens = 0usize;
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
            tokens += strata_engine::token::count(&text);
            transcript.push_str(&format!("Round {}, {}: {text}\n", r + 1, who[s]));
            sources.push(SourceInput {
                id: format!("{path}#{}", sources.len() + 1),
                text,
                round: Some(r as u32 + 1),
                speaker: Some(who[s].to_string()),
                time: None,
            });
        }
    }
    let bytes = sources.iter().map(|s| s.text.len() as u64).sum();
    Ok(RetentionDebate {
        instance: Instance {
            name: name.to_string(),
            kind: ScopeKind::Debate,
            files: vec![InputFile {
                path: PathBuf::from(path),
                kind: ScopeKind::Debate,
                sources,
                bytes,
            }],
            tokens,
            questions: Vec::new(),
        },
        facts: key_facts,
        decoys,
        transcript,
    })
}
