//! Task generation: haystacks of real text with planted facts, and debates with planted
//! positions. Everything is a function of the seed (ChaCha8, a stream that does not change
//! between platforms or releases), so a report can be reproduced byte for byte.

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::HashSet;
use strata_core::error::{Error, Result};
use strata_core::text;
use strata_engine::source::{InputFile, SourceInput};
use strata_engine::store::ScopeKind;

mod aggregate;
mod debate;
mod plant;
mod retention;

pub use aggregate::aggregate_debate;
pub use debate::{debate, filler_sentences};
pub use plant::{Plant, cities, hop_fact, multi_fact, paraphrase_fact, single_fact};
pub use retention::{KINDS, Planted, RetentionDebate, retention_debate};

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
        let n = strata_engine::token::count(&t);
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
                time: None,
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
