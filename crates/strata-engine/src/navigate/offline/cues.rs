//! What a question asks beyond its words.

use crate::corpus::Question;
use crate::navigate::Explorer;
use std::collections::HashSet;

/// What a question asks beyond its words: order in time, a round named by what happened in
/// it, and which named speakers are the ones speaking (subjects) rather than spoken about
/// ("who disagreed *with* Okafor").
#[derive(Debug, Default)]
pub(super) struct Cues {
    pub(super) earliest: bool,
    pub(super) latest: bool,
    /// "What did X propose in the round where Y moved …".
    pub(super) same_round: Option<SameRound>,
    /// Analysed terms of speakers the question names as the speaker.
    pub(super) subjects: HashSet<String>,
    /// Analysed terms of speakers the question names as someone spoken about.
    pub(super) objects: HashSet<String>,
    /// The speakers it names, and the words that name them.
    pub(super) named: crate::corpus::speakers::Named,
}

/// A question that names a round by what happened in it, split in two.
#[derive(Debug)]
pub(super) struct SameRound {
    /// The main question: "What did X propose".
    pub(super) main: String,
    /// The clause that names the round: "Y moved …".
    pub(super) anchor: String,
}

const EARLIEST: &[&str] = &["first", "earliest", "initially", "originally", "initial"];
const LATEST: &[&str] = &["last", "latest", "final", "finally", "lastly", "recent"];
const SAME_ROUND: &[&str] = &[
    " in the round where ",
    " in the round when ",
    " in the round in which ",
    " in the same round as ",
    " in the same round where ",
    " in the same round that ",
];

/// Query-time normalisation: one line, single spaces, no trailing question mark or
/// quotes, so that the surface of a question does not change what it retrieves.
pub(super) fn normalise_question(q: &str) -> String {
    q.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_matches(|c: char| c == '?' || c == '"' || c == '\'' || c == '“' || c == '”')
        .trim()
        .to_string()
}

impl Cues {
    pub(super) fn of(ex: &Explorer<'_>, question: &Question) -> Cues {
        let q = question.text();
        let words: Vec<String> = q
            .split(|c: char| !c.is_alphanumeric() && c != '\'')
            .filter(|w| !w.is_empty())
            .map(|w| w.trim_end_matches("'s").to_lowercase())
            .collect();
        let mut c = Cues {
            earliest: words.iter().any(|w| EARLIEST.contains(&w.as_str())),
            latest: words.iter().any(|w| LATEST.contains(&w.as_str())),
            ..Default::default()
        };
        let lower = format!(" {} ", q.to_lowercase());
        for m in SAME_ROUND {
            if let Some(i) = lower.find(m) {
                let main = lower[..i].trim().to_string();
                let anchor = lower[i + m.len()..].trim().to_string();
                if !main.is_empty() && !anchor.is_empty() {
                    // Keep the original casing (names) of both halves.
                    let off = i.saturating_sub(1);
                    let orig_main = q.get(..off).unwrap_or(&main).trim().to_string();
                    let orig_anchor = q
                        .get(off + m.len() - 1..)
                        .unwrap_or(&anchor)
                        .trim()
                        .to_string();
                    c.same_round = Some(SameRound {
                        main: orig_main,
                        anchor: orig_anchor,
                    });
                }
                break;
            }
        }
        c.named = crate::corpus::speakers::named(&ex.corpus, question, &ex.trees);
        c.subjects = c.named.subject_terms.clone();
        c.objects = c.named.object_terms.clone();
        c
    }
}
