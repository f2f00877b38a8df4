//! The salience features of every sentence of some texts, as the `auto` overview computes
//! them (`text::salience::features_of` over a whole scope, each turn a passage, a sentence
//! repeated word for word one unit). For fitting the salience weights on public labelled
//! data (`scripts/qmsum/fit_salience.py`); not part of strata.
//!
//! stdin: JSON lines `{"id": "...", "turns": ["text", ...]}` (an empty turn is skipped).
//! stdout: per input line, `{"id": "...", "sentences": [{"turn", "start", "end", "tokens",
//! "features", "phrases", "terms"}]}` (byte offsets in the turn's text).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use strata_core::text::{self, salience};

#[derive(serde::Deserialize)]
struct Input {
    id: String,
    turns: Vec<String>,
}

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout());
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let input: Input = serde_json::from_str(&line).expect("a JSON line {id, turns}");
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for (t, x) in input.turns.iter().enumerate() {
            for sp in text::sentences(x) {
                let raw = &x[sp.start..sp.end];
                let lead = raw.len() - raw.trim_start().len();
                let trimmed = raw.trim();
                if !trimmed.is_empty() {
                    spans.push((t, sp.start + lead, sp.start + lead + trimmed.len()));
                }
            }
        }
        let texts: Vec<&str> = spans
            .iter()
            .map(|&(t, a, b)| &input.turns[t][a..b])
            .collect();
        let counts: Vec<BTreeMap<String, u32>> =
            texts.iter().map(|s| text::term_counts(s)).collect();
        let facts: Vec<text::Facts> = texts.iter().map(|s| text::facts(s)).collect();
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut units = Vec::new();
        let (mut uc, mut uf) = (Vec::new(), Vec::new());
        let mut unit_of = Vec::new();
        for (k, s) in texts.iter().enumerate() {
            let u = *first.entry(s).or_insert_with(|| {
                units.push(salience::Unit {
                    text: s,
                    passage: spans[k].0,
                });
                uc.push(&counts[k]);
                uf.push(&facts[k]);
                units.len() - 1
            });
            unit_of.push(u);
        }
        let features = salience::features_of(&units, &uc, &uf);
        let phrases = salience::phrases(&units);
        let sentences: Vec<serde_json::Value> = spans
            .iter()
            .enumerate()
            .map(|(k, &(t, a, b))| {
                serde_json::json!({
                    "turn": t,
                    "start": a,
                    "end": b,
                    "unit": unit_of[k],
                    "tokens": strata_core::token::count(texts[k]),
                    "features": features[unit_of[k]],
                    "phrases": phrases[unit_of[k]],
                    "terms": counts[k],
                })
            })
            .collect();
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({"id": input.id, "sentences": sentences}),
        )
        .expect("stdout");
        out.write_all(b"\n").expect("stdout");
    }
}
