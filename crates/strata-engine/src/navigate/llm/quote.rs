//! Locating a model's quotes byte-exactly in FULL chunks.

use super::reply::QuoteRef;
use super::{Cited, Nav, QUOTE_SCAN, clip_to};
use crate::error::Result;
use crate::level::Level;
use crate::node::NodeId;
use crate::text;
use std::collections::HashSet;

/// Where `quote` is in `text`, as a byte range: verbatim, then ignoring case and spacing,
/// then the sentence sharing most of its words (at least 60 % of them).
fn locate(text: &str, quote: &str) -> Option<(usize, usize)> {
    locate_verbatim(text, quote).or_else(|| locate_by_words(text, quote))
}

fn unquote(quote: &str) -> &str {
    quote
        .trim()
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’'))
        .trim()
}

/// `quote` in `text` verbatim, or ignoring case and runs of whitespace.
pub(super) fn locate_verbatim(text: &str, quote: &str) -> Option<(usize, usize)> {
    let q = unquote(quote);
    if q.is_empty() {
        return None;
    }
    if let Some(p) = text.find(q) {
        return Some((p, p + q.len()));
    }
    // Normalised: lower case, runs of whitespace as one space; keep a map back to bytes.
    let mut norm = String::new();
    let mut map = Vec::new();
    let mut space = true;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !space {
                norm.push(' ');
                map.push(i);
                space = true;
            }
        } else {
            for l in c.to_lowercase() {
                let before = norm.len();
                norm.push(l);
                map.extend(std::iter::repeat_n(i, norm.len() - before));
            }
            space = false;
        }
    }
    let qn = q
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    if let Some(p) = norm.find(&qn) {
        let start = map[p];
        let last = map[p + qn.len() - 1];
        let end = last + text[last..].chars().next().map_or(1, char::len_utf8);
        return Some((start, end));
    }
    None
}

/// The sentence of `text` that shares most of `quote`'s content words (at least 60 %).
fn locate_by_words(text: &str, quote: &str) -> Option<(usize, usize)> {
    let qwords: HashSet<String> = text::content_words(unquote(quote)).collect();
    if qwords.is_empty() {
        return None;
    }
    let mut best: Option<(f64, usize, usize)> = None;
    for s in text::sentences(text) {
        let raw = &text[s.start..s.end];
        let words: HashSet<String> = text::content_words(raw).collect();
        let shared = qwords.intersection(&words).count();
        let score = shared as f64 / qwords.len() as f64;
        if shared >= qwords.len().min(2) && score >= 0.6 && best.is_none_or(|b| score > b.0) {
            let start = s.start + (raw.len() - raw.trim_start().len());
            let end = s.end - (raw.len() - raw.trim_end().len());
            best = Some((score, start, end));
        }
    }
    best.map(|(_, s, e)| (s, e))
}

/// The sentences of a quote (at least 20 characters each; shorter ones say too little to
/// be located on their own).
fn sentences_of(quote: &str) -> Vec<&str> {
    let q = unquote(quote);
    text::sentences(q)
        .into_iter()
        .map(|s| q[s.start..s.end].trim())
        .filter(|s| s.chars().count() >= 20)
        .collect()
}

/// The quotes of a `finish`, located: the verified spans, what could not be verified, and
/// the share of the quotes considered that were verified.
pub(super) struct Resolved {
    pub(super) cited: Vec<Cited>,
    pub(super) problems: Vec<String>,
    pub(super) share: f64,
}

impl Nav<'_, '_> {
    /// Locates each quote in a FULL chunk at or beneath its node. Returns the verified
    /// (FULL node, start, end) spans and what could not be verified.
    pub(super) fn resolve_quotes(&mut self, quotes: &[QuoteRef]) -> Result<Resolved> {
        let mut cited: Vec<Cited> = Vec::new();
        let mut problems = Vec::new();
        let considered = quotes.len().min(self.ex.cfg.max_citations.max(1) * 2);
        let mut verified = 0usize;
        for q in &quotes[..considered] {
            let Some(id) = self.resolve(&q.id) else {
                problems.push(format!("unknown id {:?}", q.id));
                continue;
            };
            let fulls = self.beneath(&[id], Level::Full);
            // The quote, or for a bare id the model's answer, names the sentence.
            let wanted = if q.quote.is_empty() {
                self.hypothesis.clone()
            } else {
                q.quote.clone()
            };
            // Beneath a high node (an ABSTRACT over a long scope) more chunks than are
            // scanned: those that share the quote's words first.
            let fulls = if fulls.len() > QUOTE_SCAN && !wanted.trim().is_empty() {
                let by_quote = self.ex.question(&wanted);
                self.ex
                    .rank(&by_quote, fulls)?
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect()
            } else {
                fulls
            };
            let mut found = None;
            for f in fulls.iter().take(QUOTE_SCAN) {
                let n = self.ex.corpus.node(f, self.ex.now)?;
                if let Some((s, e)) = locate(&n.text, &wanted) {
                    found = Some(Cited::in_chunk(&n, s, e));
                    break;
                }
                if q.quote.is_empty() && fulls.len() == 1 {
                    // A bare FULL id: cite the chunk, trimmed.
                    let t = n.text.trim_end();
                    let s = n.text.len() - n.text.trim_start().len();
                    if s < t.len() {
                        found = Some(Cited::in_chunk(&n, s, t.len()));
                    }
                }
            }
            if found.is_none() && !q.quote.is_empty() {
                // Small models mix up ids: a verbatim quote of another node the model has
                // read is still evidence (the slip is reported).
                let mut others: Vec<NodeId> = self
                    .read
                    .iter()
                    .filter(|r| self.level_of(r) == Level::Full && !fulls.contains(r))
                    .copied()
                    .collect();
                others.sort();
                for f in others {
                    let n = self.ex.corpus.node(&f, self.ex.now)?;
                    if let Some((s, e)) = locate_verbatim(&n.text, &q.quote) {
                        found = Some(Cited::in_chunk(&n, s, e));
                        problems.push(format!(
                            "quote cited as {} is in {}",
                            q.id,
                            self.handles.get(&f).cloned().unwrap_or_default()
                        ));
                        break;
                    }
                }
            }
            if found.is_none() && !q.quote.is_empty() {
                // Several sentences glued together (copied from a DETAILED node, which
                // drops the sentences between them): each one that is in a chunk beneath
                // the node is cited on its own.
                let pieces = sentences_of(&q.quote);
                if pieces.len() >= 2 {
                    let mut parts = Vec::new();
                    for piece in &pieces {
                        for f in fulls.iter().take(QUOTE_SCAN) {
                            let n = self.ex.corpus.node(f, self.ex.now)?;
                            if let Some((s, e)) = locate(&n.text, piece) {
                                parts.push(Cited::in_chunk(&n, s, e));
                                break;
                            }
                        }
                    }
                    if !parts.is_empty() {
                        problems.push(format!(
                            "quote {:?} is not one passage: {} of its {} sentences were found in {}",
                            clip_to(&q.quote, 80),
                            parts.len(),
                            pieces.len(),
                            q.id
                        ));
                        verified += 1;
                        for c in parts {
                            if !cited.contains(&c) {
                                cited.push(c);
                            }
                        }
                        continue;
                    }
                }
            }
            if found.is_some() {
                verified += 1;
            }
            match found {
                Some(c) if !cited.contains(&c) => cited.push(c),
                Some(_) => {}
                None => problems.push(format!(
                    "quote {:?} not found in {}",
                    clip_to(&q.quote, 80),
                    q.id
                )),
            }
        }
        cited.truncate(self.ex.cfg.max_citations.max(1));
        Ok(Resolved {
            cited,
            problems,
            share: verified as f64 / considered.max(1) as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_found_verbatim_loosely_or_by_their_words() {
        let t = "Alice opened.  The 2029 audit put the cost at $1.57 billion. Bob disagreed \
                 with   the  audit's method.";
        let (s, e) = locate(t, "The 2029 audit put the cost at $1.57 billion.").unwrap();
        assert_eq!(&t[s..e], "The 2029 audit put the cost at $1.57 billion.");
        // Case and spacing differ: the span is the source's own bytes.
        let (s, e) = locate(t, "“bob DISAGREED with the audit's method”").unwrap();
        assert_eq!(&t[s..e], "Bob disagreed with   the  audit's method");
        // Paraphrase: the sentence sharing most words.
        let (s, e) = locate(t, "the audit said the cost was $1.57 billion in 2029").unwrap();
        assert_eq!(&t[s..e], "The 2029 audit put the cost at $1.57 billion.");
        assert_eq!(locate(t, "Carol resigned over the budget"), None);
        assert_eq!(
            sentences_of(
                "“The 2029 audit put the cost at $1.57 billion. Bob disagreed. Carol left the council in May.”"
            ),
            [
                "The 2029 audit put the cost at $1.57 billion.",
                "Carol left the council in May."
            ]
        );
        assert_eq!(locate(t, ""), None);
    }
}
