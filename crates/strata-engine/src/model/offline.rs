//! The offline compressor: deterministic extractive summarisation. Sentences are ranked by
//! salience (`text::salience`: LexRank centrality, recurrence across passages, numbers,
//! dates and names, content; questions and contentless sentences last) and chosen greedily
//! with a redundancy penalty (maximal marginal relevance), kept in their original order up
//! to the level's token budget. A sentence is never cut.

use super::{BoxFuture, CompressRequest, ModelError, SubModel, spawn_cpu};
use crate::node::Tags;
use crate::text::{self, salience};
use crate::token;
use std::collections::HashMap;

/// Bump when the algorithm changes: it is part of every node id the compressor makes. It
/// names the salience weights' version too (`text::salience::VERSION`).
pub const VERSION: &str = "offline-extractive-v4+salience-v5";

/// How much a sentence's similarity to one already kept takes off its salience.
const REDUNDANCY: f64 = 0.7;

#[derive(Clone, Copy, Debug, Default)]
pub struct Offline;

impl SubModel for Offline {
    fn identity(&self) -> String {
        VERSION.to_string()
    }

    fn trusted(&self) -> bool {
        true
    }

    fn prompt(&self, _req: &CompressRequest) -> Option<super::ChatRequest> {
        None
    }

    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>> {
        Box::pin(async move {
            spawn_cpu(move || compress(&req))
                .await
                .map_err(ModelError::Failed)
        })
    }
}

struct Sent {
    passage: usize,
    start: usize,
    end: usize,
    tokens: usize,
    /// Content-word counts by term id: redundancy is a merge of sorted lists.
    bag: salience::Bag,
    score: f64,
}

/// Extractive compression of `req` (synchronous; call from rayon or a blocking context).
pub fn compress(req: &CompressRequest) -> String {
    let budget = req.target_tokens.max(1);
    let mut sents: Vec<Sent> = Vec::new();
    let mut ids = salience::TermIds::default();
    // Each passage's sentences, counts and facts (of the trimmed text: white space is no
    // word), read once for salience and redundancy alike, and shared with the tags.
    let read: Vec<_> = req
        .passages
        .iter()
        .map(|p| text::read_sentences(&p.text))
        .collect();
    let mut analysed: Vec<&text::ReadSentence> = Vec::new();
    for (pi, (p, rs)) in req.passages.iter().zip(&read).enumerate() {
        for r in rs.iter() {
            let s = r.span;
            sents.push(Sent {
                passage: pi,
                start: s.start,
                end: s.end,
                tokens: token::count(p.text[s.start..s.end].trim()),
                bag: ids.bag(&r.counts),
                score: 0.0,
            });
            analysed.push(r);
        }
    }
    if sents.is_empty() {
        return String::new();
    }
    let units: Vec<salience::Unit<'_>> = sents
        .iter()
        .map(|s| salience::Unit {
            text: req.passages[s.passage].text[s.start..s.end].trim(),
            passage: s.passage,
        })
        .collect();
    let features = salience::features_of(
        &units,
        &analysed.iter().map(|r| &r.counts).collect::<Vec<_>>(),
        &analysed.iter().map(|r| &r.facts).collect::<Vec<_>>(),
    );
    for (s, f) in sents.iter_mut().zip(features) {
        s.score = f.score();
    }
    let order = choose(&sents, budget, req);
    let mut keep = vec![false; sents.len()];
    for &i in &order {
        keep[i] = true;
    }
    loop {
        let out = render(req, &sents, &keep);
        let kept: Vec<usize> = (0..sents.len()).filter(|&i| keep[i]).collect();
        if kept.len() <= 1 || token::count(&out) <= budget {
            return out;
        }
        // Labels or joins pushed us over: drop the lowest-ranked kept sentence.
        let worst = order
            .iter()
            .rev()
            .find(|&&i| keep[i])
            .copied()
            .expect("some kept");
        keep[worst] = false;
    }
}

/// The sentences to keep, in the order they were chosen: greedily the most salient that
/// still fits, less its similarity to what is already kept (maximal marginal relevance),
/// while that is worth anything; when nothing is chosen, the single most salient
/// sentence, whole.
fn choose(sents: &[Sent], budget: usize, req: &CompressRequest) -> Vec<usize> {
    let label_cost: usize = req
        .passages
        .iter()
        .filter_map(|p| p.label.as_ref())
        .map(|l| token::count(l) + 1)
        .sum();
    let mut used = label_cost.min(budget / 4);
    let mut order: Vec<usize> = Vec::new();
    let mut redundancy = vec![0.0f64; sents.len()];
    let mut open: Vec<usize> = (0..sents.len()).collect();
    loop {
        let value = |i: usize| sents[i].score - REDUNDANCY * redundancy[i];
        // Value per token^COST_POWER, as a budget is filled (a knapsack's greedy order).
        let density =
            |i: usize| value(i) / (sents[i].tokens.max(1) as f64).powf(salience::COST_POWER);
        // A summary is not padded: a sentence worth nothing (thin, a question, a repeat)
        // is left out even when it fits.
        let pick = open
            .iter()
            .copied()
            .filter(|&i| used + sents[i].tokens <= budget && value(i) > 0.0)
            .max_by(|&a, &b| density(a).total_cmp(&density(b)).then(b.cmp(&a)));
        let Some(i) = pick else { break };
        used += sents[i].tokens;
        order.push(i);
        open.retain(|&j| j != i);
        for &j in &open {
            let sim = sents[i].bag.cosine(&sents[j].bag);
            redundancy[j] = redundancy[j].max(sim);
        }
    }
    if order.is_empty() {
        let best = (0..sents.len())
            .max_by(|&a, &b| sents[a].score.total_cmp(&sents[b].score).then(b.cmp(&a)))
            .expect("some sentence");
        order.push(best);
    }
    order
}

fn render(req: &CompressRequest, sents: &[Sent], keep: &[bool]) -> String {
    let mut out = String::new();
    let mut current: Option<usize> = None;
    for (i, s) in sents.iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let p = &req.passages[s.passage];
        let piece = p.text[s.start..s.end].trim();
        if current != Some(s.passage) {
            if !out.is_empty() {
                out.push('\n');
            }
            if let Some(l) = &p.label {
                out.push_str(l);
                out.push_str(": ");
            }
            current = Some(s.passage);
        } else {
            out.push(' ');
        }
        out.push_str(piece);
    }
    out
}

/// Routing tags for a body of text: the most characteristic keywords, and the entities,
/// numbers and dates it mentions (most frequent first, at most `limit` of each).
pub fn tags(texts: &[&str], limit: usize) -> Tags {
    TagCounts::of(texts).tags(limit)
}

/// What [`tags`] counts in a body of text, kept so that the tags of a whole are the sum of
/// its parts' counts (a SUMMARY's from its DETAILEDs') instead of a second reading of the
/// same text. Adding the counts of consecutive texts gives what one pass over them in
/// that order gives (first appearances keep their order).
#[derive(Clone, Debug, Default)]
pub struct TagCounts {
    words: HashMap<String, u32>,
    /// Item → (count, order of first appearance), for entities, numbers and dates.
    ents: HashMap<String, (u32, usize)>,
    nums: HashMap<String, (u32, usize)>,
    dates: HashMap<String, (u32, usize)>,
    seen: usize,
}

impl TagCounts {
    /// The counts of `texts`, read sentence by sentence in order.
    pub fn of(texts: &[&str]) -> TagCounts {
        let mut c = TagCounts::default();
        for t in texts {
            // The same reading as the compressor's (facts and words of a sentence do not
            // change with the white space around it).
            for r in text::read_sentences(t).iter() {
                let f = &r.facts;
                for (map, items) in [
                    (&mut c.ents, &f.entities),
                    (&mut c.nums, &f.numbers),
                    (&mut c.dates, &f.dates),
                ] {
                    for it in items {
                        c.seen += 1;
                        match map.get_mut(it) {
                            Some(e) => e.0 += 1,
                            None => {
                                map.insert(it.clone(), (1, c.seen));
                            }
                        }
                    }
                }
                for (w, &n) in &r.counts {
                    if w.chars()
                        .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
                    {
                        continue;
                    }
                    match c.words.get_mut(w) {
                        Some(e) => *e += n,
                        None => {
                            c.words.insert(w.clone(), n);
                        }
                    }
                }
            }
        }
        c
    }

    /// Adds the counts of the text that follows this one.
    pub fn add(&mut self, next: &TagCounts) {
        for (w, n) in &next.words {
            *self.words.entry(w.clone()).or_insert(0) += n;
        }
        let at = self.seen;
        for (mine, theirs) in [
            (&mut self.ents, &next.ents),
            (&mut self.nums, &next.nums),
            (&mut self.dates, &next.dates),
        ] {
            for (k, &(n, order)) in theirs {
                mine.entry(k.clone()).or_insert((0, at + order)).0 += n;
            }
        }
        self.seen += next.seen;
    }

    /// The tags: at most `limit` of each kind, most frequent first.
    pub fn tags(&self, limit: usize) -> Tags {
        fn top(map: &HashMap<String, (u32, usize)>, limit: usize) -> Vec<String> {
            let mut v: Vec<_> = map.iter().collect();
            v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
            v.into_iter().take(limit).map(|(k, _)| k.clone()).collect()
        }
        // Keywords: frequent content words, longer words breaking ties (a cheap proxy for
        // specificity without a corpus-wide IDF).
        let mut kw: Vec<(&String, &u32)> = self.words.iter().collect();
        kw.sort_by(|a, b| {
            b.1.cmp(a.1)
                .then(b.0.len().cmp(&a.0.len()))
                .then(a.0.cmp(b.0))
        });
        Tags {
            keywords: kw.into_iter().take(limit).map(|(k, _)| k.clone()).collect(),
            entities: top(&self.ents, limit),
            numbers: top(&self.nums, limit),
            dates: top(&self.dates, limit),
        }
    }
}

/// Tags of a whole from the tags of its parts: what recurs across parts first, then what
/// appears earliest.
pub fn merge_tags(parts: &[Tags], limit: usize) -> Tags {
    fn merge<'a>(lists: impl Iterator<Item = &'a Vec<String>>, limit: usize) -> Vec<String> {
        let mut seen: HashMap<&str, (u32, usize)> = HashMap::new();
        let mut order = 0;
        for list in lists {
            for item in list {
                order += 1;
                seen.entry(item).or_insert((0, order)).0 += 1;
            }
        }
        let mut v: Vec<_> = seen.into_iter().collect();
        v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
        v.into_iter()
            .take(limit)
            .map(|(k, _)| k.to_string())
            .collect()
    }
    Tags {
        keywords: merge(parts.iter().map(|t| &t.keywords), limit),
        entities: merge(parts.iter().map(|t| &t.entities), limit),
        numbers: merge(parts.iter().map(|t| &t.numbers), limit),
        dates: merge(parts.iter().map(|t| &t.dates), limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::Level;
    use crate::model::Passage;

    /// What `TagCounts::of` counted when it read each sentence itself (untrimmed), before
    /// it shared the compressor's reading.
    fn counts_read_apart(texts: &[&str]) -> TagCounts {
        let mut c = TagCounts::default();
        for t in texts {
            for s in text::sentences(t) {
                let raw = &t[s.start..s.end];
                let f = text::facts(raw);
                for (map, items) in [
                    (&mut c.ents, f.entities),
                    (&mut c.nums, f.numbers),
                    (&mut c.dates, f.dates),
                ] {
                    for it in items {
                        c.seen += 1;
                        map.entry(it).or_insert((0, c.seen)).0 += 1;
                    }
                }
                for (w, n) in text::term_counts(raw) {
                    if !w
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
                    {
                        *c.words.entry(w).or_insert(0) += n;
                    }
                }
            }
        }
        c
    }

    #[test]
    fn tag_counts_from_the_shared_reading_are_those_of_a_reading_apart() {
        let mut texts = crate::sample_documents();
        texts.push(
            "  Mr. J.K. Rowling met the Port Aldous Transit Authority on March 3, 1998.\n\n  "
                .into(),
        );
        texts.push(" \n \t ".into());
        texts.push(String::new());
        for t in &texts {
            // Twice: the second reading comes from the memo.
            for _ in 0..2 {
                let (a, b) = (TagCounts::of(&[t]), counts_read_apart(&[t]));
                assert_eq!(a.words, b.words);
                assert_eq!((&a.ents, &a.nums, &a.dates), (&b.ents, &b.nums, &b.dates));
                assert_eq!(a.seen, b.seen);
                assert_eq!(a.tags(12), b.tags(12));
            }
        }
        let all: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(
            TagCounts::of(&all).tags(16),
            counts_read_apart(&all).tags(16)
        );
    }

    fn req(text: &str, target: usize) -> CompressRequest {
        CompressRequest {
            level: Level::Detailed,
            passages: vec![Passage {
                text: text.to_string(),
                label: None,
            }],
            target_tokens: target,
            inputs: Default::default(),
            feedback: None,
            priority: Level::Detailed.as_u8(),
        }
    }

    /// The counts of consecutive texts added up are the counts of one pass over them.
    #[test]
    fn tag_counts_add_up_like_one_reading() {
        let a = "Alice Moreno proposed 48,200 euros in March 2031. Bob agreed with Alice Moreno.";
        let b = "The committee voted 4 to 1. Carol Diaz asked about March 2031 and 48,200 euros.";
        let mut sum = TagCounts::of(&[a]);
        sum.add(&TagCounts::of(&[b]));
        assert_eq!(sum.tags(12), tags(&[a, b], 12));
        assert_eq!(sum.tags(2), tags(&[a, b], 2));
    }

    #[test]
    fn keeps_facts_in_order_within_budget() {
        let t = "The weather was mild and pleasant today. The council approved $1.2 billion \
                 for the line in March 2031. Everyone went home after the meeting was over. \
                 Alice Moreno said the route serves 38,000 riders. It was a long evening.";
        let out = compress(&req(t, 40));
        assert!(token::count(&out) <= 40, "{out}");
        assert!(out.contains("$1.2 billion"), "{out}");
        assert!(out.contains("38,000"), "{out}");
        assert!(out.find("1.2 billion").unwrap() < out.find("38,000").unwrap());
        // Every kept sentence is verbatim from the input.
        for s in out.split_inclusive(". ") {
            assert!(t.contains(s.trim()), "{s}");
        }
    }

    /// Regression: scores were summed in HashMap order, which differs between maps, so tied
    /// sentences were kept or dropped at random and one node id could have two texts.
    #[test]
    fn ties_are_broken_the_same_way_every_time() {
        let mut t = String::new();
        for i in 0..40 {
            t.push_str(&format!(
                "The council met again. The budget was discussed at length. Item {} was tabled. \
                 The council met again. Members asked about the harbour and the ferry. ",
                i % 3
            ));
        }
        let first = compress(&req(&t, 120));
        for _ in 0..30 {
            assert_eq!(compress(&req(&t, 120)), first);
        }
    }

    #[test]
    fn the_identity_names_the_salience_version() {
        assert!(VERSION.ends_with(salience::VERSION), "{VERSION}");
    }

    #[test]
    fn deterministic_and_never_empty() {
        let t = "One sentence that is quite long and cannot fit in a tiny budget at all.";
        let a = compress(&req(t, 2));
        assert_eq!(a, compress(&req(t, 2)));
        assert_eq!(a, t);
    }
}
