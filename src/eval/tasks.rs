//! Task generation: haystacks of real text with planted facts, and debates with planted
//! positions. Everything is a function of the seed (ChaCha8, a stream that does not change
//! between platforms or releases), so a report can be reproduced byte for byte.

use crate::error::{Error, Result};
use crate::source::{InputFile, SourceInput, Turn};
use crate::store::ScopeKind;
use crate::text;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::HashSet;
use std::path::PathBuf;

/// One text of the pool haystacks are cut from.
#[derive(Clone, Debug)]
pub struct Doc {
    /// `corpus/file.txt`: the source id the document is ingested under.
    pub name: String,
    pub text: String,
    pub tokens: usize,
}

/// A span of a source that an answer must cite.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gold {
    pub source: String,
    pub start: u64,
    pub end: u64,
}

/// A question with its gold answer.
#[derive(Clone, Debug, Serialize)]
pub struct Question {
    pub task: &'static str,
    pub question: String,
    /// Every string must occur in the answer (case-insensitive). For debates the answer
    /// includes the speakers of the cited turns.
    pub answers: Vec<String>,
    /// Every span must be cited.
    pub gold: Vec<Gold>,
    /// The first citation (not just any) must be the gold one ("who first …").
    pub first_only: bool,
    /// Where the (first) fact sits, as a fraction of the haystack (needle tasks).
    pub depth: Option<f64>,
}

/// A scope to ingest and the questions to ask of it.
pub struct Instance {
    pub name: String,
    pub kind: ScopeKind,
    pub files: Vec<InputFile>,
    pub tokens: usize,
    pub questions: Vec<Question>,
}

pub fn rng(seed: u64, stream: &str) -> ChaCha8Rng {
    let h = blake3::hash(format!("{seed}/{stream}").as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    ChaCha8Rng::seed_from_u64(u64::from_le_bytes(b))
}

// ------------------------------------------------------------------ invented names

const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ver", "tan", "zu", "rel", "dor", "quin", "sha", "bel", "nox", "tir", "gal",
    "ori", "pex", "vun", "mar", "sol", "eth", "ryn", "cal", "dru", "fen",
];

/// Makes invented proper names that occur nowhere in the pool (checked against its words),
/// so a planted fact is the only place its name appears.
pub struct Names {
    used: HashSet<String>,
}

impl Names {
    pub fn new(pool_words: HashSet<String>) -> Names {
        Names { used: pool_words }
    }

    pub fn fresh(&mut self, rng: &mut ChaCha8Rng) -> String {
        loop {
            let n = rng.random_range(2..=3);
            let mut s = String::new();
            for _ in 0..n {
                s.push_str(SYLLABLES.choose(rng).expect("syllables"));
            }
            if self.used.insert(s.clone()) {
                let mut c = s.chars();
                let first = c.next().expect("non-empty").to_uppercase();
                return first.chain(c).collect();
            }
        }
    }
}

/// Lower-cased words of `docs`: invented names must not be among them.
pub fn words_of(docs: &[Doc]) -> HashSet<String> {
    let mut out = HashSet::new();
    for d in docs {
        for w in d.text.split(|c: char| !c.is_alphanumeric()) {
            if !w.is_empty() && w.len() <= 12 {
                out.insert(w.to_lowercase());
            }
        }
    }
    out
}

// ------------------------------------------------------------------ planted facts

/// A fact to plant: its sentence(s) and the question that asks for it.
pub struct Plant {
    pub task: &'static str,
    pub sentences: Vec<String>,
    pub question: String,
    pub answers: Vec<String>,
}

const ACTIVITIES: &[&str] = &[
    "eat a sandwich on the old harbour wall",
    "rent a rowing boat at dawn",
    "climb the clock tower after lunch",
    "swim in the cold quarry lake",
    "buy smoked fish at the night market",
    "watch the storks nest on the chimneys",
];
const OBJECTS: &[&str] = &[
    "hollow book",
    "ceramic owl",
    "flower pot",
    "tin of buttons",
    "cracked teapot",
    "brass lantern",
];
const MONTHS: &[&str] = &[
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
const INGREDIENTS: &[&str] = &[
    "saffron",
    "juniper",
    "smoked paprika",
    "fennel pollen",
    "black garlic",
    "sumac",
    "tamarind",
    "star anise",
    "sorrel",
    "cardamom",
];
const CODEWORDS: &[&str] = &[
    "amber", "falcon", "granite", "harbor", "juniper", "lantern", "meadow", "nickel", "orchid",
    "pepper",
];

/// A single fact about an invented subject.
pub fn single_fact(rng: &mut ChaCha8Rng, names: &mut Names) -> Plant {
    let name = names.fresh(rng);
    let (sentence, question, answer) = match rng.random_range(0..6) {
        0 => {
            let code = format!(
                "{}-{}",
                CODEWORDS.choose(rng).expect("codewords"),
                rng.random_range(1000..9999)
            );
            (
                format!("The secret passphrase of the {name} archive is {code}."),
                format!("What is the secret passphrase of the {name} archive?"),
                code,
            )
        }
        1 => {
            let a = ACTIVITIES.choose(rng).expect("activities").to_string();
            (
                format!("The best thing to do in {name} is to {a}."),
                format!("What is the best thing to do in {name}?"),
                a,
            )
        }
        2 => {
            let person = names.fresh(rng);
            let o = OBJECTS.choose(rng).expect("objects").to_string();
            (
                format!(
                    "Captain {person} hid the spare key to the {name} lighthouse inside a {o}."
                ),
                format!("Where did Captain {person} hide the spare key to the {name} lighthouse?"),
                o,
            )
        }
        3 => {
            let date = format!(
                "{} {}, {}",
                MONTHS.choose(rng).expect("months"),
                rng.random_range(1..=28),
                rng.random_range(1850..2020)
            );
            (
                format!("The {name} expedition reached the summit on {date}."),
                format!("When did the {name} expedition reach the summit?"),
                date,
            )
        }
        4 => {
            let mm = format!("{} millimetres", rng.random_range(200..3000));
            (
                format!("The annual rainfall recorded at the {name} observatory was {mm}."),
                format!("How much annual rainfall was recorded at the {name} observatory?"),
                mm,
            )
        }
        _ => {
            let person = names.fresh(rng);
            (
                format!("The {name} guild of weavers was founded by a tailor called {person}."),
                format!("Who founded the {name} guild of weavers?"),
                person,
            )
        }
    };
    Plant {
        task: "single_needle",
        sentences: vec![sentence],
        question,
        answers: vec![answer],
    }
}

const CITIES: &[&str] = &[
    "Reykjavik",
    "Valparaiso",
    "Tbilisi",
    "Windhoek",
    "Ulaanbaatar",
    "Hobart",
    "Tallinn",
    "Cusco",
    "Zanzibar",
    "Bergen",
    "Dubrovnik",
    "Ljubljana",
    "Asmara",
    "Lhasa",
    "Nuuk",
    "Trondheim",
    "Galway",
    "Porto",
    "Kraków",
    "Salzburg",
    "Bruges",
    "Lucerne",
    "Tangier",
    "Malmo",
    "Tartu",
    "Oaxaca",
    "Mendoza",
    "Cuenca",
    "Arequipa",
    "Hue",
    "Kandy",
    "Luang Prabang",
    "Hakodate",
    "Kanazawa",
    "Tromso",
    "Split",
    "Plovdiv",
    "Sibiu",
    "Kotor",
    "Gdansk",
];
const LENDS: &[(&str, &str)] = &[
    ("sewing machines", "sewing machines"),
    ("fishing rods", "fishing rods"),
    ("telescopes", "telescopes"),
    ("bread ovens", "bread ovens"),
    ("snowshoes", "snowshoes"),
    ("violins", "violins"),
];

/// The places paraphrase needles are about (each used once per haystack).
pub fn cities() -> Vec<&'static str> {
    CITIES.to_vec()
}

/// A fact about a real place in everyday words, asked with other words than the planted
/// sentence uses (synonyms, another construction): only the place name is shared, and
/// real text may mention the place too.
pub fn paraphrase_fact(rng: &mut ChaCha8Rng, cities: &mut Vec<&'static str>) -> Option<Plant> {
    if cities.is_empty() {
        return None;
    }
    let city = cities.swap_remove(rng.random_range(0..cities.len()));
    let (sentence, question, answer) = match rng.random_range(0..4) {
        0 => {
            let a = ACTIVITIES.choose(rng).expect("activities").to_string();
            (
                format!("The best thing to do in {city} is to {a}."),
                format!("What should a visitor to {city} make sure not to miss?"),
                a,
            )
        }
        1 => {
            let (thing, _) = LENDS.choose(rng).expect("lends");
            (
                format!("The public library in {city} lends {thing} to anyone with a card."),
                format!("What can people borrow from the {city} library?"),
                thing.to_string(),
            )
        }
        2 => {
            let m = MONTHS.choose(rng).expect("months").to_string();
            (
                format!(
                    "Every year the harvest festival of {city} begins on the first Sunday of {m}."
                ),
                format!("When does the annual {city} harvest celebration start?"),
                m,
            )
        }
        _ => {
            let o = OBJECTS.choose(rng).expect("objects").to_string();
            (
                format!("The mayor of {city} keeps the town seal inside a {o}."),
                format!("Where is the {city} town seal stored by its mayor?"),
                o,
            )
        }
    };
    Some(Plant {
        task: "needle_paraphrase",
        sentences: vec![sentence],
        question,
        answers: vec![answer],
    })
}

/// Three facts about one subject, all of which the answer needs.
pub fn multi_fact(rng: &mut ChaCha8Rng, names: &mut Names) -> Plant {
    let name = names.fresh(rng);
    let mut pool: Vec<&str> = INGREDIENTS.to_vec();
    pool.shuffle(rng);
    let picked: Vec<String> = pool[..3].iter().map(|s| s.to_string()).collect();
    Plant {
        task: "multi_needle",
        sentences: picked
            .iter()
            .map(|i| format!("One of the three secret ingredients of the {name} stew is {i}."))
            .collect(),
        question: format!("What are the three secret ingredients of the {name} stew?"),
        answers: picked,
    }
}

/// Two facts linked by a name the question does not contain: the second is only found
/// through the first.
pub fn hop_fact(rng: &mut ChaCha8Rng, names: &mut Names) -> Plant {
    let dish = names.fresh(rng);
    let chef = names.fresh(rng);
    let village = names.fresh(rng);
    Plant {
        task: "multi_hop",
        sentences: vec![
            format!("The {dish} pie was first baked by a chef called {chef}."),
            format!("{chef} grew up in the mountain village of {village}."),
        ],
        question: format!("In which village did the chef who first baked the {dish} pie grow up?"),
        answers: vec![village],
    }
}

// ------------------------------------------------------------------ haystacks

/// Cuts a haystack of about `tokens` tokens from the pool (documents in a seeded order,
/// the last one cut at a sentence end) and plants `plants` at seeded depths: sentences of a
/// multi-sentence plant go to different documents where there is more than one.
pub fn haystack(
    pool: &[Doc],
    tokens: usize,
    plants: Vec<Plant>,
    rng: &mut ChaCha8Rng,
    name: &str,
) -> Result<Instance> {
    let total: usize = pool.iter().map(|d| d.tokens).sum();
    if tokens > total {
        return Err(Error::invalid(format!(
            "a haystack of {tokens} tokens needs more text than the corpus has ({total} tokens in {} documents): add a corpus or pick a smaller size",
            pool.len()
        )));
    }
    // 1. The documents.
    let mut docs: Vec<(String, String, usize)> = Vec::new();
    let mut have = 0usize;
    for d in pool {
        if have >= tokens {
            break;
        }
        if have + d.tokens <= tokens {
            docs.push((d.name.clone(), d.text.clone(), d.tokens));
            have += d.tokens;
            continue;
        }
        // Cut the last one at the sentence end nearest to the missing token count.
        let want = tokens - have;
        let frac = want as f64 / d.tokens.max(1) as f64;
        let target = (d.text.len() as f64 * frac) as usize;
        let cut = text::sentences(&d.text)
            .iter()
            .map(|s| s.end)
            .find(|&e| e >= target)
            .unwrap_or(d.text.len());
        let t = d.text[..cut].to_string();
        let n = crate::token::count(&t);
        docs.push((d.name.clone(), t, n));
        have += n;
    }
    // 2. Where each planted sentence goes: (doc index, byte offset at a sentence end).
    let cum: Vec<usize> = docs
        .iter()
        .scan(0usize, |acc, d| {
            *acc += d.2;
            Some(*acc - d.2)
        })
        .collect();
    let ends: Vec<Vec<usize>> = docs
        .iter()
        .map(|d| {
            // Sentence ends followed by the start of a new sentence (a capital, a digit,
            // a quote or a line break), so a planted sentence stands alone.
            let t = &d.1;
            let mut e: Vec<usize> = text::sentences(t)
                .iter()
                .map(|s| s.end)
                .filter(|&end| {
                    let before = t[..end].trim_end();
                    let after = &t[end..];
                    before.ends_with(['.', '!', '?'])
                        && (after.is_empty()
                            || after.starts_with(['\n'])
                            || after.trim_start().starts_with(|c: char| {
                                c.is_uppercase() || c.is_ascii_digit() || c == '"'
                            }))
                })
                .collect();
            e.insert(0, 0);
            e
        })
        .collect();
    let n_plants = plants.len().max(1);
    let mut order: Vec<usize> = (0..plants.len()).collect();
    order.shuffle(rng);
    struct Slot {
        doc: usize,
        at: usize,
        plant: usize,
        sentence: usize,
        depth: f64,
    }
    let mut slots: Vec<Slot> = Vec::new();
    for (k, &pi) in order.iter().enumerate() {
        // Depths spread evenly over (0, 1) with jitter; later sentences of one plant
        // go into other documents, away from the first.
        let base = (k as f64 + rng.random_range(0.1..0.9)) / n_plants as f64;
        for si in 0..plants[pi].sentences.len() {
            let depth = if si == 0 {
                base
            } else {
                (base + si as f64 * rng.random_range(0.2..0.45)).fract()
            };
            let pos = (depth * have as f64) as usize;
            let doc = cum.iter().rposition(|&c| c <= pos).unwrap_or(0);
            let within = (pos - cum[doc]) as f64 / docs[doc].2.max(1) as f64;
            let target = (docs[doc].1.len() as f64 * within) as usize;
            let e = &ends[doc];
            let at = e[e.partition_point(|&x| x < target).min(e.len() - 1)];
            slots.push(Slot {
                doc,
                at,
                plant: pi,
                sentence: si,
                depth,
            });
        }
    }
    // 3. Insert, document by document, back to front so offsets stay valid; then record
    //    the spans in the final text.
    let mut gold: Vec<Vec<Option<Gold>>> = plants
        .iter()
        .map(|p| vec![None; p.sentences.len()])
        .collect();
    let mut depth_of: Vec<f64> = vec![0.0; plants.len()];
    let mut files = Vec::new();
    for (di, (dname, dtext, _)) in docs.iter().enumerate() {
        let mut mine: Vec<&Slot> = slots.iter().filter(|s| s.doc == di).collect();
        mine.sort_by_key(|s| (s.at, s.plant, s.sentence));
        let mut out = String::with_capacity(dtext.len() + 200);
        let mut prev = 0;
        for s in mine {
            out.push_str(&dtext[prev..s.at]);
            prev = s.at;
            if !out.is_empty() && !out.ends_with(char::is_whitespace) {
                out.push(' ');
            }
            let sent = &plants[s.plant].sentences[s.sentence];
            let start = out.len();
            out.push_str(sent);
            gold[s.plant][s.sentence] = Some(Gold {
                source: dname.clone(),
                start: start as u64,
                end: out.len() as u64,
            });
            if s.sentence == 0 {
                depth_of[s.plant] = s.depth;
            }
            out.push(' ');
        }
        out.push_str(&dtext[prev..]);
        files.push(InputFile::single(
            ScopeKind::Doc,
            dname,
            SourceInput {
                id: dname.clone(),
                text: out,
                round: None,
                speaker: None,
            },
        ));
    }
    let questions = plants
        .into_iter()
        .zip(gold)
        .zip(depth_of)
        .map(|((p, g), depth)| Question {
            task: p.task,
            question: p.question,
            answers: p.answers,
            gold: g
                .into_iter()
                .map(|g| g.expect("every slot placed"))
                .collect(),
            first_only: false,
            depth: Some(depth),
        })
        .collect();
    Ok(Instance {
        name: name.to_string(),
        kind: ScopeKind::Doc,
        files,
        tokens: have,
        questions,
    })
}

// ------------------------------------------------------------------ debates

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
            };
            let id = format!("{path}#{line}");
            tokens += crate::token::count(&turn.text);
            at_of.insert((r, s), (id.clone(), turn.text.len() as u64));
            sources.push(SourceInput {
                id,
                text: turn.text,
                round: Some(turn.round),
                speaker: Some(turn.speaker),
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
