//! Model output is untrusted: what makes it usable, and why it was not.

use crate::model::prompts::accepted_tokens;
use crate::model::{CompressRequest, Passage};
use crate::text;
use crate::token;

/// Why a model output was not used.
#[derive(Debug, PartialEq)]
pub(super) enum Rejection {
    Empty,
    OverBudget(String),
    Unfaithful(String),
    /// The model did not answer: connection refused, timeouts, 5xx or 429 after retries.
    Unavailable(String),
    /// The server refused the request or sent something that is no completion.
    Failed(String),
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Empty => f.write_str("empty output"),
            Rejection::OverBudget(m)
            | Rejection::Unfaithful(m)
            | Rejection::Unavailable(m)
            | Rejection::Failed(m) => f.write_str(m),
        }
    }
}

impl Rejection {
    /// What a retry after this rejection tells the model (its attempt `n`, from 2), so the
    /// retry is a different request from the one that got the rejected output; `None`
    /// when the model gave no output to reject (it did not answer: the request is sent
    /// again as it was).
    pub(super) fn feedback(&self, n: u32) -> Option<String> {
        let (what, advice) = match self {
            Rejection::Empty => (
                "it was empty".to_string(),
                "Reply with the compressed text itself.",
            ),
            Rejection::OverBudget(m) => (
                format!("it was too long: {m}"),
                "Write a much shorter reply, well within the word limit, keeping the key facts.",
            ),
            Rejection::Unfaithful(m) => (
                format!("it stated facts {m}"),
                "Use only numbers, dates and names the passages state, copied exactly.",
            ),
            Rejection::Unavailable(_) | Rejection::Failed(_) => return None,
        };
        Some(format!("(this is attempt {n}) {what}. {advice}"))
    }
}

/// Model output is untrusted: it must be non-empty text within reach of its budget, and
/// every number, date and name in it must occur in its inputs. A `trusted` compressor
/// (the offline one, which may keep one whole sentence over budget rather than cut it,
/// and only ever copies sentences) is only checked for emptiness.
pub(super) fn validate(text: &str, req: &CompressRequest, trusted: bool) -> Result<(), Rejection> {
    let input_blank = req.passages.iter().all(|p| p.text.trim().is_empty());
    if text.trim().is_empty() && !input_blank {
        return Err(Rejection::Empty);
    }
    if trusted {
        return Ok(());
    }
    let t = token::count(text);
    let limit = accepted_tokens(req.target_tokens);
    if t > limit {
        return Err(Rejection::OverBudget(format!(
            "output of {t} tokens is over the budget of {} by {} tokens (at most {limit} accepted)",
            req.target_tokens,
            t - req.target_tokens
        )));
    }
    let unsupported = unsupported_facts(text, &req.passages);
    if !unsupported.is_empty() {
        return Err(Rejection::Unfaithful(format!(
            "not in the input: {}",
            unsupported.join(", ")
        )));
    }
    Ok(())
}

/// The numbers, dates and names of `text` that its inputs (texts and labels) do not
/// contain. Numbers compare by their digits (`38,000` = `38000`); names and months by
/// their words, ignoring case and possessives (`Alice's` is `alice`, a speaker label).
fn unsupported_facts(text: &str, passages: &[Passage]) -> Vec<String> {
    use unicode_segmentation::UnicodeSegmentation;
    fn number(s: &str) -> String {
        let d: String = s
            .chars()
            .filter(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        d.trim_matches('.').to_string()
    }
    fn word(w: &str) -> String {
        let w = w.to_lowercase();
        for suffix in ["'s", "\u{2019}s"] {
            if let Some(stem) = w.strip_suffix(suffix) {
                return stem.to_string();
            }
        }
        w
    }
    let mut numbers = std::collections::HashSet::new();
    let mut words = std::collections::HashSet::new();
    let inputs = passages
        .iter()
        .flat_map(|p| [Some(p.text.as_str()), p.label.as_deref()])
        .flatten();
    for t in inputs {
        for run in t.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ',')) {
            if run.chars().any(|c| c.is_ascii_digit()) {
                numbers.insert(number(run));
            }
        }
        words.extend(t.unicode_words().map(word));
    }
    let mut out: Vec<String> = Vec::new();
    let mut miss = |what: &str| {
        if !out.iter().any(|o| o == what) {
            out.push(what.to_string());
        }
    };
    for s in text::sentences(text) {
        let f = text::facts(&text[s.start..s.end]);
        for n in &f.numbers {
            if !numbers.contains(&number(n)) {
                miss(n);
            }
        }
        for item in f.dates.iter().chain(&f.entities) {
            let ok = item.unicode_words().all(|w| {
                if w.chars().any(|c| c.is_ascii_digit()) {
                    numbers.contains(&number(w))
                } else {
                    crate::text::is_stopword(&w.to_lowercase()) || words.contains(&word(w))
                }
            });
            if !ok {
                miss(item);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::Level;

    fn req(level: Level, passages: &[(&str, Option<&str>)], target: usize) -> CompressRequest {
        CompressRequest {
            level,
            passages: passages
                .iter()
                .map(|(t, l)| Passage {
                    text: t.to_string(),
                    label: l.map(str::to_string),
                })
                .collect(),
            target_tokens: target,
            inputs: Default::default(),
            feedback: None,
            priority: level.as_u8(),
        }
    }

    #[test]
    fn faithful_rewrites_pass_and_invented_facts_do_not() {
        let r = req(
            Level::Summary,
            &[
                (
                    "The 2029 audit put the cost at $1.57 billion, and 38,000 riders by March 2031.",
                    Some("bob (round 7)"),
                ),
                ("PARTA's forecast is too rosy.", Some("alice (round 7)")),
            ],
            60,
        );
        let ok = "In round 7, Bob cited the 2029 audit: $1.57 billion and 38000 riders by \
                  March 2031. Alice called PARTA's forecast too rosy.";
        assert_eq!(validate(ok, &r, false), Ok(()));
        for (bad, fact) in [
            ("Bob said the audit found $2.1 billion.", "2.1"),
            ("Bob cited the 2030 audit.", "2030"),
            ("Bob and Carol Danvers agreed in round 7.", "Carol Danvers"),
            ("The audit was due in April 2031.", "April 2031"),
        ] {
            match validate(bad, &r, false) {
                Err(Rejection::Unfaithful(m)) => assert!(m.contains(fact), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(validate("  ", &r, false), Err(Rejection::Empty));
        let long = "Bob cited the audit. ".repeat(40);
        assert!(matches!(
            validate(&long, &r, false),
            Err(Rejection::OverBudget(_))
        ));
        // The offline compressor is trusted: only emptiness is checked.
        assert_eq!(validate(&long, &r, true), Ok(()));
    }
}
