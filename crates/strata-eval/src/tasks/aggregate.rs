//! Generated debates for the *aggregate* task: questions whose gold answer is a set of
//! turns ("which speakers objected to …", "list every deadline …", "who changed position
//! during the debate?"). Per topic several speakers object, several votes are held and one
//! or two deadlines are committed to, and some proposers change position; trivial
//! look-alike decoys (small talk that "objects", "votes" or "promises") are planted too, as
//! in the retention debate whose vocabulary this reuses.

use super::retention::{ITEMS, MONTHS, REASONS, SPEAKERS};
use super::{Gold, Instance, Names, Question};
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use strata_core::error::{Error, Result};
use strata_engine::source::{InputFile, SourceInput};
use strata_engine::store::ScopeKind;

/// What a planted turn does.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Objection,
    Vote,
    Commitment,
    Change,
}

/// `rounds` rounds among `speakers` speakers, `topics` topics; one question per topic
/// and kind (objections, votes, deadlines) and two about the whole debate (changes of
/// position, deadlines), each phrased in one of several ways.
pub fn aggregate_debate(
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
    if rounds < 20 {
        return Err(Error::invalid(
            "an aggregate debate needs at least 20 rounds",
        ));
    }
    let speakers = speakers.clamp(4, SPEAKERS.len());
    let who: Vec<&str> = SPEAKERS[..speakers].to_vec();
    let mut planted: Vec<Vec<Vec<String>>> = vec![vec![Vec::new(); speakers]; rounds];
    let mut busy: HashSet<(usize, usize)> = HashSet::new();
    // A free (round, speaker) slot: each turn holds at most one planted sentence.
    let mut slot = |rng: &mut ChaCha8Rng, sp: Option<usize>, not: &[usize]| {
        for _ in 0..10_000 {
            let r = rng.random_range(0..rounds);
            let s = sp.unwrap_or_else(|| rng.random_range(0..speakers));
            if !not.contains(&s) && busy.insert((r, s)) {
                return Some((r, s));
            }
        }
        None
    };
    // (topic index or none, kind) → planted turns.
    let mut sets: BTreeMap<(usize, Kind), Vec<(usize, usize)>> = BTreeMap::new();
    let mut topic_names = Vec::new();
    for t in 0..topics {
        let item = ITEMS[t % ITEMS.len()];
        let topic = format!("{} {item}", names.fresh(rng));
        topic_names.push(topic.clone());
        let x = rng.random_range(0..speakers);
        let n = rng.random_range(3..60);
        if let Some((r, s)) = slot(rng, Some(x), &[]) {
            planted[r][s].push(format!(
                "I propose that the {topic} be funded with {n} million dollars a year."
            ));
        }
        // Two or three objections by distinct speakers other than the proposer.
        let mut objectors = vec![x];
        for _ in 0..rng.random_range(2..=3) {
            let Some((r, s)) = slot(rng, None, &objectors) else {
                continue;
            };
            objectors.push(s);
            let reason = REASONS.choose(rng).expect("reasons");
            let sentences = [
                format!(
                    "I object to {}'s plan for the {topic}, because {reason}.",
                    who[x]
                ),
                format!(
                    "I must formally object to the {topic} as {} proposed it: {reason}.",
                    who[x]
                ),
                format!("My objection to the {topic} stands, because {reason}."),
                format!("I oppose the {topic}, because {reason}."),
                format!("I disagree with {} about the {topic}: {reason}.", who[x]),
            ];
            planted[r][s].push(sentences.choose(rng).expect("templates").clone());
            sets.entry((t, Kind::Objection)).or_default().push((r, s));
        }
        // Two or three votes.
        for _ in 0..rng.random_range(2..=3) {
            let Some((r, s)) = slot(rng, None, &[]) else {
                continue;
            };
            let total = 9 + 2 * rng.random_range(0..4);
            let yes = rng.random_range(total / 2 + 1..total);
            let no = total - yes;
            let sentences = [
                format!("The committee voted {yes} to {no} to adopt the {topic}."),
                format!("The motion on the {topic} carried by {yes} votes to {no}."),
                format!("We have decided, {yes} to {no}, that the {topic} goes ahead."),
                format!(
                    "On the amendment to the {topic}, the committee voted {yes} to {no} in favour."
                ),
                format!("The {topic} was approved {yes} to {no} at its second reading."),
            ];
            planted[r][s].push(sentences.choose(rng).expect("templates").clone());
            sets.entry((t, Kind::Vote)).or_default().push((r, s));
        }
        // One or two commitments with deadlines.
        for _ in 0..rng.random_range(1..=2) {
            let Some((r, s)) = slot(rng, None, &[]) else {
                continue;
            };
            let day = rng.random_range(1..29);
            let month = MONTHS.choose(rng).expect("months");
            let year = rng.random_range(2026..2032);
            let sentences = [
                format!(
                    "I commit to publishing the tender for the {topic} by {month} {day}, {year}."
                ),
                format!(
                    "My department will deliver the costed plan for the {topic} no later than {month} {day}, {year}."
                ),
                format!(
                    "I promise this committee a final report on the {topic} by {month} {day}, {year}."
                ),
                format!(
                    "I pledge that the contract for the {topic} will be signed by {month} {day}, {year}."
                ),
            ];
            planted[r][s].push(sentences.choose(rng).expect("templates").clone());
            sets.entry((t, Kind::Commitment)).or_default().push((r, s));
        }
        // Every other proposer changes position.
        if t % 2 == 0
            && let Some((r, s)) = slot(rng, Some(x), &[])
        {
            let m = rng.random_range(3..60);
            let o = who[objectors.get(1).copied().unwrap_or(x)];
            let sentences = [
                format!(
                    "I have changed my position on the {topic}: after hearing {o}, I now propose {m} million dollars instead."
                ),
                format!(
                    "I withdraw my earlier figure for the {topic} and now support {m} million dollars."
                ),
                format!("I was wrong about the {topic}; I now back {m} million dollars."),
                format!(
                    "I have reconsidered the {topic} and no longer support {n} million dollars; {m} million is enough."
                ),
            ];
            planted[r][s].push(sentences.choose(rng).expect("templates").clone());
            sets.entry((t, Kind::Change)).or_default().push((r, s));
        }
    }
    // Decoys: small talk that objects, votes, promises or changes its mind.
    for d in 0..3 * topics {
        let Some((r, s)) = slot(rng, None, &[]) else {
            continue;
        };
        let place = names.fresh(rng);
        let sentence = match d % 4 {
            0 => format!("I object to how cold it is in the {place} room this morning."),
            1 => {
                let (a, b) = (rng.random_range(3..9), rng.random_range(0..3));
                format!("My family voted {a} to {b} to spend the weekend at {place} again.")
            }
            2 => {
                let day = rng.random_range(1..29);
                let month = MONTHS.choose(rng).expect("months");
                format!("I promised my daughter we would be back from {place} by {month} {day}.")
            }
            _ => format!(
                "I have changed my mind about the {place} bakery: their bread is excellent."
            ),
        };
        planted[r][s].push(sentence);
    }
    // The transcript.
    let path = format!("{name}.jsonl");
    let mut sources = Vec::new();
    let mut at_of: BTreeMap<(usize, usize), (String, u64)> = BTreeMap::new();
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
            let id = format!("{path}#{}", sources.len() + 1);
            at_of.insert((r, s), (id.clone(), text.len() as u64));
            sources.push(SourceInput {
                id,
                text,
                round: Some(r as u32 + 1),
                speaker: Some(who[s].to_string()),
                time: None,
            });
        }
    }
    // The questions, each in one of several phrasings.
    let gold = |turns: &[(usize, usize)]| -> Vec<Gold> {
        let mut g: Vec<Gold> = turns
            .iter()
            .map(|at| {
                let (source, len) = at_of[at].clone();
                Gold {
                    source,
                    start: 0,
                    end: len,
                }
            })
            .collect();
        g.sort_by(|a, b| a.source.cmp(&b.source));
        g
    };
    let ask = |question: String, turns: &[(usize, usize)]| Question {
        task: "aggregate",
        question,
        answers: Vec::new(),
        gold: gold(turns),
        first_only: false,
        depth: None,
    };
    let mut questions = Vec::new();
    let pick = |rng: &mut ChaCha8Rng, options: Vec<String>| {
        options.choose(rng).expect("phrasings").clone()
    };
    for (t, topic) in topic_names.iter().enumerate() {
        for kind in [Kind::Objection, Kind::Vote, Kind::Commitment] {
            let Some(turns) = sets.get(&(t, kind)) else {
                continue;
            };
            let q = match kind {
                Kind::Objection => pick(
                    rng,
                    vec![
                        format!("Which speakers objected to the {topic}?"),
                        format!("List everyone who objected to the {topic} proposal."),
                        format!("Which members raised objections to the {topic}?"),
                    ],
                ),
                Kind::Vote => pick(
                    rng,
                    vec![
                        format!("How many votes were held on the {topic}?"),
                        format!("List every vote taken on the {topic}."),
                        format!("What votes did the committee hold on the {topic}?"),
                    ],
                ),
                _ => pick(
                    rng,
                    vec![
                        format!("Which deadlines were set for the {topic}?"),
                        format!("List every commitment made about the {topic}."),
                        format!("What deadlines did members commit to for the {topic}?"),
                    ],
                ),
            };
            questions.push(ask(q, turns));
        }
    }
    let all = |kind: Kind| -> Vec<(usize, usize)> {
        sets.iter()
            .filter(|((_, k), _)| *k == kind)
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    };
    let changes = all(Kind::Change);
    if !changes.is_empty() {
        let q = pick(
            rng,
            vec![
                "Who changed position during the debate?".to_string(),
                "Which speakers changed their minds in the course of the debate?".to_string(),
                "List every change of position in the debate.".to_string(),
            ],
        );
        questions.push(ask(q, &changes));
    }
    let deadlines = all(Kind::Commitment);
    if !deadlines.is_empty() {
        let q = pick(
            rng,
            vec![
                "List every deadline the committee agreed to.".to_string(),
                "Which deadlines did members commit to during the debate?".to_string(),
                "What are all the deadlines promised in this debate?".to_string(),
            ],
        );
        questions.push(ask(q, &deadlines));
    }
    let bytes = sources.iter().map(|s| s.text.len() as u64).sum();
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
