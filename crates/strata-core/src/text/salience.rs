//! Salience: which sentences of a body of text matter, by general mechanisms only — no
//! phrase lists, nothing fitted to one text.
//!
//! Each sentence of a set (a compression request's passages, an overview) gets named
//! features, computed from the set itself:
//! - `centrality` — LexRank (Erkan & Radev 2004, the continuous variant): the stationary
//!   distribution of a random walk over the sentences weighted by idf-modified cosine
//!   similarity, scaled so that the mean sentence scores 1. What many sentences say.
//! - `thread` — the distinctive weight (terms weighted by their inverse passage
//!   frequency) the sentence shares with other passages, scaled so that the mean
//!   sentence's whole distinctive weight is 1: a topic that recurs across turns or
//!   sections, rather than a one-off aside. 0 with one passage.
//! - `specificity` — numbers, dates and names (`text::facts`), at most three counted.
//! - `information` — the sum of the inverse sentence frequencies of its content words,
//!   scaled so that the mean sentence has 1: what only it says. Greetings, thanks and
//!   back-channel ("Hey John!", "Thanks!", "Um , yeah .") say little, and in a long
//!   conversation their words are everywhere; such *thin* sentences (below half the mean)
//!   also take no part in the centrality walk, where look-alikes would make them central.
//! - `content` — distinct content words.
//! - `question` — whether it asks rather than states: an echoed question is never what a
//!   body of text established.
//!
//! [`Features::score`] combines them with the weights of [`WEIGHTS`], which are part of
//! the offline compressor's identity (`model::offline::VERSION`): changing them changes
//! every node id the compressor makes.

use super::{facts, term_counts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Maps over the words of a text (many per sentence the build reads): foldhash, randomly
/// seeded like std's, faster than SipHash on short keys.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// One sentence to rank, and the passage (turn, section, input) it comes from.
#[derive(Clone, Copy, Debug)]
pub struct Unit<'a> {
    pub text: &'a str,
    pub passage: usize,
}

/// Why a sentence ranks where it does: the features [`Features::score`] combines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Features {
    pub(crate) centrality: f64,
    pub(crate) information: f64,
    pub(crate) thread: f64,
    pub(crate) specificity: f64,
    pub(crate) content: usize,
    /// Whether it holds a number or a date.
    pub(crate) figures: bool,
    pub(crate) question: bool,
    /// Less than [`THIN`] of the mean information mass.
    pub(crate) little: bool,
}

/// The weights of the salience score. Versioned with the compressor (see the module doc).
pub(crate) struct Weights {
    /// Per unit of ln(1 + centrality).
    pub(crate) centrality: f64,
    /// Per unit of ln(1 + thread).
    pub(crate) thread: f64,
    /// Per unit of specificity (0–1).
    pub(crate) specificity: f64,
    /// Subtracted from a question.
    pub(crate) question: f64,
    /// Per unit of ln(1 + information).
    pub(crate) information: f64,
    /// Subtracted from a thin sentence ([`Features::thin`]): more than any sentence scores,
    /// so a thin one is chosen only when nothing else is.
    pub(crate) thin: f64,
}

pub(crate) const WEIGHTS: Weights = Weights {
    centrality: 1.0,
    thread: 1.0,
    specificity: 0.8,
    question: 1.0,
    information: 0.5,
    thin: 4.0,
};

/// A sentence with less than this share of the mean information is thin...
pub(crate) const THIN: f64 = 0.5;
/// ...and so is one with fewer content words than this and no number or date.
pub(crate) const MIN_CONTENT: usize = 4;

/// Salience is spent per token^COST_POWER when a budget is filled (a knapsack's greedy
/// order): between "the most salient sentence" (0) and "the most salience per token" (1).
/// Chosen on QMSum `val` (ROUGE-2 of the `auto` window: 1.93 at 0, 2.09 at 0.25, 1.81 at
/// 0.5; docs/EVAL.md).
pub const COST_POWER: f64 = 0.25;

/// The version of [`WEIGHTS`] and of the features' definitions (a test of the `strata`
/// crate holds `model::offline::VERSION` to it).
pub const VERSION: &str = "salience-v5";

impl Features {
    /// The salience score: higher matters more.
    pub fn score(&self) -> f64 {
        let w = &WEIGHTS;
        let thin = if self.thin() { 1.0 } else { 0.0 };
        w.centrality * self.centrality.ln_1p()
            + w.information * self.information.ln_1p()
            + w.thread * self.thread.ln_1p()
            + w.specificity * self.specificity
            - if self.question { w.question } else { 0.0 }
            - w.thin * thin
    }
}

impl Features {
    /// The features by name, with the score they make (`why` in a window's JSON).
    pub fn named(&self) -> BTreeMap<String, f64> {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        [
            ("salience", r(self.score())),
            ("centrality", r(self.centrality)),
            ("information", r(self.information)),
            ("thread", r(self.thread)),
            ("specificity", r(self.specificity)),
            ("content_words", self.content as f64),
            ("question", flag(self.question)),
            ("thin", flag(self.thin())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A sentence that says little: less than [`THIN`] of the mean information, or fewer
    /// than [`MIN_CONTENT`] content words and no number or date ("Hey John!", "Sure,
    /// sounds good.").
    pub fn thin(&self) -> bool {
        self.little || (self.content < MIN_CONTENT && !self.figures)
    }
}

/// The weight of [`phrases`] in the overview of a whole scope, per unit of ln(1 + phrases).
/// Chosen on QMSum `val` (ROUGE-2 of the `auto` window at the summary's length: 2.06 at 0,
/// 2.13 at 0.5, 2.26 at 1, **2.36 at 2**, 2.25 at 4; docs/EVAL.md). Used by the scope
/// overview only: not part of the offline compressor's identity.
pub const PHRASE_WEIGHT: f64 = 2.0;

/// A sentence's salience in the overview of a whole scope: [`Features::score`] and, for a
/// sentence that is not thin, the recurring phrases it holds ([`phrases`]).
pub fn overview_score(f: &Features, phrases: f64) -> f64 {
    if f.thin() {
        f.score()
    } else {
        f.score() + PHRASE_WEIGHT * phrases.ln_1p()
    }
}

/// A pair of adjacent content words is a phrase when its words stand side by side at
/// least e^this times as often as their frequencies predict (pointwise mutual
/// information, in nats): "remote control" is a phrase, "uh um" or "yeah yeah" — two
/// frequent words that meet by chance — is not. Chosen on QMSum `val` (ROUGE-2 of the
/// `auto` window at the summary's length: 2.36 with no threshold, 2.35 at 1, 2.60 at 2,
/// 2.57 at 2.5, 2.92 at 2.75, **2.92 at 3**, 2.95 at 3.25, 2.42 at 3.5 and 4, 1.75 at 5;
/// normalised PMI, scale-free, did less well: 2.71 as a weight, 2.80 / 2.90 / 2.43 as a
/// threshold at 0.4 / 0.5 / 0.6; docs/EVAL.md). A text of a few dozen words has no pair
/// that rare, so no phrases: the overview of so small a scope rests on the other features.
pub const PHRASE_MIN_PMI: f64 = 3.0;

/// Recurring phrases: for each unit, the distinctive weight — ln(passages / passages that
/// hold it) — of every adjacent pair of content words ([`super::content_words`]) that is a
/// phrase ([`PHRASE_MIN_PMI`]) and that two or more passages hold, summed and scaled so
/// that the mean unit has 1. A phrase that
/// turns by different people keep repeating ("the harbour levy", "remote control") is what
/// a discussion is about; single words recur by chance far more often than pairs do. No
/// list: the pairs come from the text itself.
pub fn phrases(units: &[Unit<'_>]) -> Vec<f64> {
    let words: Vec<Vec<String>> = units
        .iter()
        .map(|u| super::content_words(u.text).collect())
        .collect();
    let mut wc: HashMap<&str, f64> = HashMap::default();
    let mut pc: HashMap<(&str, &str), f64> = HashMap::default();
    let mut total = 0.0;
    for w in &words {
        for x in w {
            *wc.entry(x.as_str()).or_insert(0.0) += 1.0;
            total += 1.0;
        }
        for p in w.windows(2) {
            *pc.entry((p[0].as_str(), p[1].as_str())).or_insert(0.0) += 1.0;
        }
    }
    let pairs: Vec<Vec<String>> = words
        .iter()
        .map(|w| {
            let mut v: Vec<String> = w
                .windows(2)
                .filter(|p| {
                    let (a, b) = (p[0].as_str(), p[1].as_str());
                    let pmi = (pc[&(a, b)] * total / (wc[a] * wc[b])).ln();
                    pmi >= PHRASE_MIN_PMI
                })
                .map(|p| format!("{} {}", p[0], p[1]))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        })
        .collect();
    let pf = passages_holding(units, |i| pairs[i].iter().map(String::as_str));
    let np = n_passages(units);
    let raw: Vec<f64> = pairs
        .iter()
        .map(|v| {
            v.iter()
                .map(|p| pf[p.as_str()].len())
                .filter(|&n| n >= 2)
                .map(|n| (np / n as f64).ln())
                .sum()
        })
        .collect();
    scale_to_mean_one(raw)
}

/// For each key the units yield (`keys(i)` for unit `i`), the passages holding it, each
/// once, in the order first met.
fn passages_holding<'a, I: Iterator<Item = &'a str>>(
    units: &[Unit<'_>],
    keys: impl Fn(usize) -> I,
) -> HashMap<&'a str, Vec<usize>> {
    let mut pf: HashMap<&str, Vec<usize>> = HashMap::default();
    for (i, u) in units.iter().enumerate() {
        for k in keys(i) {
            let ps = pf.entry(k).or_default();
            if ps.last() != Some(&u.passage) && !ps.contains(&u.passage) {
                ps.push(u.passage);
            }
        }
    }
    pf
}

/// For each term id (of `terms`), how many distinct passages hold it: what
/// [`passages_holding`] gives, counted.
fn passages_holding_ids(
    units: &[Unit<'_>],
    terms: usize,
    bags: &[Vec<(usize, u32)>],
) -> Vec<usize> {
    let mut count = vec![0usize; terms];
    // The passage each term was last met in answers most checks; the units of one passage
    // need not be consecutive, so every (term, passage) counted is remembered too.
    let mut last = vec![usize::MAX; terms];
    let mut seen: std::collections::HashSet<(usize, usize), foldhash::fast::RandomState> =
        Default::default();
    for (u, b) in units.iter().zip(bags) {
        for &(t, _) in b {
            if last[t] != u.passage {
                last[t] = u.passage;
                if seen.insert((t, u.passage)) {
                    count[t] += 1;
                }
            }
        }
    }
    count
}

/// How many distinct passages the units come from.
fn n_passages(units: &[Unit<'_>]) -> f64 {
    let mut passages: Vec<usize> = units.iter().map(|u| u.passage).collect();
    passages.sort_unstable();
    passages.dedup();
    passages.len() as f64
}

/// Whether a sentence asks: it ends with a question mark (closing quotes and brackets
/// aside).
pub fn is_question(sentence: &str) -> bool {
    sentence
        .trim_end()
        .trim_end_matches(['"', '\'', ')', ']', '\u{201d}', '\u{2019}'])
        .ends_with('?')
}

/// Above this many sentences, centrality is the cosine to the centroid (linear) instead
/// of LexRank (quadratic in the worst case).
const LEXRANK_MAX: usize = 2000;
const DAMPING: f64 = 0.15;
const ITERATIONS: usize = 40;

/// The features of every unit, in order.
pub fn features(units: &[Unit<'_>]) -> Vec<Features> {
    let bags: Vec<BTreeMap<String, u32>> = units.iter().map(|u| term_counts(u.text)).collect();
    let found: Vec<super::Facts> = units.iter().map(|u| facts(u.text)).collect();
    features_of(
        units,
        &bags.iter().collect::<Vec<_>>(),
        &found.iter().collect::<Vec<_>>(),
    )
}

/// [`features`] of units whose content-word counts ([`term_counts`]) and facts
/// ([`facts`]) are known already (a caller that keeps them per chunk).
pub fn features_of(
    units: &[Unit<'_>],
    bags: &[&BTreeMap<String, u32>],
    found: &[&super::Facts],
) -> Vec<Features> {
    let n = units.len();
    if n == 0 {
        return Vec::new();
    }
    // Every distinct term gets an id in the terms' sorted order, so a bag's ids come in
    // the order of its keys and every sum below adds the same numbers in the same order
    // as one keyed by the terms themselves would (no string hashed or compared past here).
    let mut ids: HashMap<&str, u32> = HashMap::default();
    for b in bags {
        for t in b.keys() {
            ids.entry(t.as_str()).or_insert(0);
        }
    }
    let mut sorted: Vec<&str> = ids.keys().copied().collect();
    sorted.sort_unstable();
    for (i, t) in sorted.iter().enumerate() {
        ids.insert(t, i as u32);
    }
    let bag_ids: Vec<Vec<(usize, u32)>> = bags
        .iter()
        .map(|b| {
            b.iter()
                .map(|(t, &c)| (ids[t.as_str()] as usize, c))
                .collect()
        })
        .collect();
    // Sentence and passage frequencies.
    let mut df = vec![0u32; sorted.len()];
    for b in &bag_ids {
        for &(t, _) in b {
            df[t] += 1;
        }
    }
    let pf = passages_holding_ids(units, sorted.len(), &bag_ids);
    let np = n_passages(units);
    let idf = |t: usize| (n as f64 / df[t] as f64).ln() + 1.0;
    let vectors: Vec<Vec<(usize, f64)>> = bag_ids
        .iter()
        .map(|b| b.iter().map(|&(t, c)| (t, c as f64 * idf(t))).collect())
        .collect();
    // Information: idf mass, ln(n / df) (a word in every sentence says nothing), scaled to
    // mean 1.
    let mass: Vec<f64> = bag_ids
        .iter()
        .map(|b| b.iter().map(|&(t, _)| (n as f64 / df[t] as f64).ln()).sum())
        .collect();
    let info = scale_to_mean_one(mass);
    let thin_rel: Vec<bool> = info.iter().map(|&m| m < THIN).collect();
    let figures: Vec<bool> = found
        .iter()
        .map(|f| !f.numbers.is_empty() || !f.dates.is_empty())
        .collect();
    // Thin sentences take no part in the walk.
    let walked: Vec<Vec<(usize, f64)>> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let thin = thin_rel[i] || (bags[i].len() < MIN_CONTENT && !figures[i]);
            if thin { Vec::new() } else { v }
        })
        .collect();
    let centrality = if n > LEXRANK_MAX {
        centroid(&walked, sorted.len())
    } else {
        lexrank(&walked, sorted.len())
    };
    // Thread: recurring distinctive weight over the mean sentence's distinctive weight.
    let (mut shared, mut all) = (vec![0.0; n], vec![0.0; n]);
    if np > 1.0 {
        for (i, b) in bag_ids.iter().enumerate() {
            for &(t, _) in b {
                let ps = pf[t];
                let w = (np / ps as f64).ln();
                all[i] += w;
                if ps >= 2 {
                    shared[i] += w;
                }
            }
        }
    }
    let mean_all = all.iter().sum::<f64>() / n as f64;
    units
        .iter()
        .zip(bags)
        .zip(centrality)
        .zip(info)
        .zip(shared)
        .zip(found)
        .zip(figures)
        .zip(thin_rel)
        .map(
            |(((((((u, b), centrality), information), shared), f), figures), little)| Features {
                little,
                centrality,
                information,
                thread: if mean_all > 0.0 {
                    shared / mean_all
                } else {
                    0.0
                },
                specificity: f.count().min(3) as f64 / 3.0,
                content: b.len(),
                figures,
                question: is_question(u.text),
            },
        )
        .collect()
}

fn norm(v: &[(usize, f64)]) -> f64 {
    v.iter().map(|(_, x)| x * x).sum::<f64>().sqrt()
}

/// Cosine to the centroid, scaled so that the mean is 1.
fn centroid(vectors: &[Vec<(usize, f64)>], terms: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; terms];
    for v in vectors {
        let nv = norm(v).max(1e-12);
        for &(t, x) in v {
            c[t] += x / nv;
        }
    }
    let nc = c.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    let cos: Vec<f64> = vectors
        .iter()
        .map(|v| {
            let nv = norm(v);
            if nv == 0.0 {
                return 0.0;
            }
            v.iter().map(|&(t, x)| x * c[t]).sum::<f64>() / (nv * nc)
        })
        .collect();
    scale_to_mean_one(cos)
}

/// Continuous LexRank: power iteration over the row-normalised cosine matrix, with
/// damping. Pairs are found through an inverted index, so sentences sharing no term cost
/// nothing.
fn lexrank(vectors: &[Vec<(usize, f64)>], terms: usize) -> Vec<f64> {
    let n = vectors.len();
    let norms: Vec<f64> = vectors.iter().map(|v| norm(v)).collect();
    let mut postings: Vec<Vec<(usize, f64)>> = vec![Vec::new(); terms];
    for (i, v) in vectors.iter().enumerate() {
        if norms[i] == 0.0 {
            continue;
        }
        for &(t, x) in v {
            postings[t].push((i, x / norms[i]));
        }
    }
    // Sparse rows of similarities (i ≠ j).
    let mut rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    let mut acc: Vec<f64> = vec![0.0; n];
    let mut touched: Vec<usize> = Vec::new();
    for i in 0..n {
        if norms[i] == 0.0 {
            continue;
        }
        for &(t, x) in &vectors[i] {
            let xi = x / norms[i];
            for &(j, xj) in &postings[t] {
                if j == i {
                    continue;
                }
                if acc[j] == 0.0 {
                    touched.push(j);
                }
                acc[j] += xi * xj;
            }
        }
        touched.sort_unstable();
        for &j in &touched {
            rows[i].push((j, acc[j]));
            acc[j] = 0.0;
        }
        touched.clear();
    }
    let sums: Vec<f64> = rows
        .iter()
        .map(|r| r.iter().map(|(_, w)| w).sum())
        .collect();
    let mut p = vec![1.0 / n as f64; n];
    for _ in 0..ITERATIONS {
        let dangling: f64 = (0..n).filter(|&i| sums[i] == 0.0).map(|i| p[i]).sum();
        let mut next = vec![DAMPING / n as f64 + (1.0 - DAMPING) * dangling / n as f64; n];
        for i in 0..n {
            if sums[i] == 0.0 {
                continue;
            }
            let share = (1.0 - DAMPING) * p[i] / sums[i];
            for &(j, w) in &rows[i] {
                next[j] += share * w;
            }
        }
        let delta: f64 = next.iter().zip(&p).map(|(a, b)| (a - b).abs()).sum();
        p = next;
        if delta < 1e-9 {
            break;
        }
    }
    scale_to_mean_one(p)
}

fn scale_to_mean_one(v: Vec<f64>) -> Vec<f64> {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    if mean <= 0.0 {
        return vec![0.0; v.len()];
    }
    v.into_iter().map(|x| x / mean).collect()
}

/// Cosine similarity of two texts' content-word counts (for redundancy checks).
pub fn similarity(a: &BTreeMap<String, u32>, b: &BTreeMap<String, u32>) -> f64 {
    let dot: f64 = a
        .iter()
        .filter_map(|(t, &x)| b.get(t).map(|&y| x as f64 * y as f64))
        .sum();
    if dot == 0.0 {
        return 0.0;
    }
    let na = a.values().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.values().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Term ids for [`Bag`]s: each distinct content word gets the next number.
#[derive(Default)]
pub struct TermIds(HashMap<String, u32>);

impl TermIds {
    /// `counts` (a text's content-word counts, [`super::term_counts`]) as a [`Bag`].
    pub fn bag(&mut self, counts: &BTreeMap<String, u32>) -> Bag {
        let mut terms: Vec<(u32, u32)> = counts
            .iter()
            .map(|(t, &n)| {
                let next = self.0.len() as u32;
                (*self.0.entry(t.clone()).or_insert(next), n)
            })
            .collect();
        terms.sort_unstable_by_key(|&(id, _)| id);
        let norm = terms
            .iter()
            .map(|&(_, n)| (n as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        Bag { terms, norm }
    }
}

/// A text's content-word counts by term id ([`TermIds`]), sorted, with their norm: the
/// cosine [`similarity`] of two texts as a merge of two sorted lists, no string compared.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bag {
    terms: Vec<(u32, u32)>,
    norm: f64,
}

impl Bag {
    /// The cosine similarity of the two texts' counts (what [`similarity`] gives for the
    /// same counts, up to rounding).
    pub fn cosine(&self, o: &Bag) -> f64 {
        let (a, b) = (&self.terms, &o.terms);
        let (mut i, mut j, mut dot) = (0, 0, 0.0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    dot += a[i].1 as f64 * b[j].1 as f64;
                    i += 1;
                    j += 1;
                }
            }
        }
        if dot == 0.0 {
            return 0.0;
        }
        dot / (self.norm * o.norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sentences of other topics around the ones a test looks at: a phrase is judged
    /// against the words of the whole text.
    const AROUND: [&str; 12] = [
        "Pilots flew the cargo plane through heavy fog.",
        "A chess prodigy won the regional final.",
        "Teachers asked for smaller classes and newer books.",
        "A storm closed the northern railway for two days.",
        "The museum opened a wing for modern sculpture.",
        "Rents in the old town rose again this spring.",
        "The football club signed a young goalkeeper.",
        "Farmers expect a late harvest after the cold summer.",
        "The library extends its opening hours on Sundays.",
        "A new bakery sells bread made with local flour.",
        "The mayor visited the hospital's children's ward.",
        "Engineers inspected the bridge over the river.",
    ];

    fn with_around<'a>(v: &[(&'a str, usize)]) -> Vec<Unit<'a>> {
        let mut u = units(v);
        let first = v.len();
        u.extend(AROUND.iter().enumerate().map(|(i, &text)| Unit {
            text,
            passage: first + i,
        }));
        u
    }

    #[test]
    fn a_phrase_several_passages_repeat_outweighs_one_said_once() {
        let u = with_around(&[
            ("We should cap the harbour levy at forty million.", 0),
            ("Congress passed the farm bill after a long night.", 1),
            ("I object to the harbour levy as drafted.", 2),
            ("The weather report promised rain for the coast.", 3),
            ("The committee adopts the harbour levy.", 4),
        ]);
        let p = phrases(&u);
        assert!(p[0] > 0.0 && p[2] > 0.0 && p[4] > 0.0, "{p:?}");
        assert_eq!((p[1], p[3]), (0.0, 0.0), "{p:?}");
        let mean = p.iter().sum::<f64>() / p.len() as f64;
        assert!((mean - 1.0).abs() < 1e-9, "scaled to mean one: {p:?}");
        // One passage repeating itself is no recurring phrase.
        let same = with_around(&[("the harbour levy", 0), ("the harbour levy again", 0)]);
        assert!(phrases(&same).iter().all(|&x| x == 0.0));
    }

    /// Two frequent words that often stand side by side only because both are everywhere
    /// ("yeah okay", "uh um") are no phrase; two that stand together far more often than
    /// their frequencies predict are.
    #[test]
    fn frequent_words_side_by_side_by_chance_are_no_phrase() {
        let mut v: Vec<(String, usize)> = Vec::new();
        for i in 0..40 {
            let t = format!("yeah okay z{i}a yeah z{i}b okay z{i}c yeah z{i}d okay");
            v.push((t, i));
        }
        v.push((
            "yeah okay the remote control needs a scroll wheel".to_string(),
            40,
        ));
        v.push(("the remote control should be yellow".to_string(), 41));
        let refs: Vec<(&str, usize)> = v.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let u = with_around(&refs);
        let p = phrases(&u);
        // "yeah okay" recurs in forty passages but is no phrase: those sentences hold
        // nothing else that recurs, so they score nothing.
        assert_eq!(p[0], 0.0, "{:?}", &p[..4]);
        assert!(p[40] > 0.0 && p[41] > 0.0, "{:?}", &p[40..42]);
    }

    fn units<'a>(v: &[(&'a str, usize)]) -> Vec<Unit<'a>> {
        v.iter()
            .map(|&(text, passage)| Unit { text, passage })
            .collect()
    }

    #[test]
    fn greetings_thanks_and_questions_rank_below_statements() {
        let u = units(&[
            ("Hey John!", 0),
            (
                "The harbour levy was capped at 48,200 euros after the audit.",
                0,
            ),
            ("Thanks!", 1),
            ("What motivated you to pursue counseling?", 1),
            (
                "The audit of the harbour levy found 3 errors in the accounts.",
                2,
            ),
            ("Good morning everyone.", 2),
        ]);
        let f = features(&u);
        let s: Vec<f64> = f.iter().map(Features::score).collect();
        for weak in [0, 2, 3, 5] {
            for strong in [1, 4] {
                assert!(s[strong] > s[weak], "{:?} vs {:?}", f[strong], f[weak]);
            }
        }
        assert!(f[3].question && !f[1].question);
        // "harbour levy" recurs in another passage: a thread.
        assert!(f[1].thread > 0.0 && f[4].thread > 0.0);
    }

    #[test]
    fn lexrank_favours_what_many_sentences_share() {
        let u = units(&[
            ("The tram extension costs too much.", 0),
            ("The tram extension serves the outer districts.", 1),
            ("Funding for the tram extension comes from the levy.", 2),
            ("My cat likes sardines.", 3),
        ]);
        let f = features(&u);
        assert!(f[0].centrality > f[3].centrality, "{f:?}");
        let mean = f.iter().map(|x| x.centrality).sum::<f64>() / 4.0;
        assert!((mean - 1.0).abs() < 1e-9);
        // Linear fallback agrees on the order.
        let b: Vec<_> = u.iter().map(|u| term_counts(u.text)).collect();
        let n = b.len() as f64;
        let mut terms: Vec<&str> = b
            .iter()
            .flat_map(|x| x.keys().map(String::as_str))
            .collect();
        terms.sort_unstable();
        terms.dedup();
        let id = |t: &str| terms.binary_search(&t).unwrap();
        let mut df = vec![0.0; terms.len()];
        for x in &b {
            for t in x.keys() {
                df[id(t)] += 1.0;
            }
        }
        let v: Vec<Vec<(usize, f64)>> = b
            .iter()
            .map(|x| {
                x.iter()
                    .map(|(t, &c)| (id(t), c as f64 * ((n / df[id(t)]).ln() + 1.0)))
                    .collect()
            })
            .collect();
        let c = centroid(&v, terms.len());
        assert!(c[0] > c[3]);
    }

    #[test]
    fn deterministic() {
        let u = units(&[("A b c d e.", 0), ("C d e f g.", 1), ("X y z.", 1)]);
        assert_eq!(features(&u), features(&u));
        assert!(features(&[]).is_empty());
    }

    #[test]
    fn a_bag_gives_the_cosine_similarity_of_the_counts() {
        let texts = [
            "The tram line costs 240 million and the tram opens in 2031.",
            "Buses cost less than the tram line: 35 million.",
            "The harbour was dredged in 1998.",
            "",
        ];
        let mut ids = TermIds::default();
        let counts: Vec<_> = texts.iter().map(|t| term_counts(t)).collect();
        let bags: Vec<Bag> = counts.iter().map(|c| ids.bag(c)).collect();
        for i in 0..texts.len() {
            for j in 0..texts.len() {
                let want = similarity(&counts[i], &counts[j]);
                let got = bags[i].cosine(&bags[j]);
                assert!((want - got).abs() < 1e-12, "{i} {j}: {want} vs {got}");
            }
        }
        assert!(bags[0].cosine(&bags[1]) > 0.0);
        assert_eq!(bags[0].cosine(&bags[2]), 0.0);
    }
}
