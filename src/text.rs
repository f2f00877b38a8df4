//! Plain-text analysis shared by the chunker, the offline compressor and the navigator:
//! sentences with byte offsets, content words, and the "facts" a summary must keep
//! (numbers, dates, named entities).

use std::collections::BTreeMap;
use unicode_segmentation::UnicodeSegmentation;

/// A sentence of some text, as byte offsets into it (trailing whitespace included, so the
/// sentences of a text tile it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentenceSpan {
    pub start: usize,
    pub end: usize,
}

/// Splits `text` into sentences (Unicode sentence boundaries) that tile it exactly.
/// Fragments too short to stand alone (e.g. after "Mr.") are merged into the previous one.
pub fn sentences(text: &str) -> Vec<SentenceSpan> {
    let mut out: Vec<SentenceSpan> = Vec::new();
    for (start, s) in text.split_sentence_bound_indices() {
        let end = start + s.len();
        let merge = match out.last() {
            Some(prev) => {
                let prev_text = text[prev.start..prev.end].trim_end();
                let words = s.unicode_words().count();
                words == 0 || ends_with_abbreviation(prev_text)
            }
            None => false,
        };
        if merge {
            out.last_mut().expect("checked").end = end;
        } else {
            out.push(SentenceSpan { start, end });
        }
    }
    out
}

fn ends_with_abbreviation(s: &str) -> bool {
    const ABBR: &[&str] = &[
        "mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "jr.", "sr.", "no.", "gen.", "gov.", "sen.",
        "rep.", "prof.", "e.g.", "i.e.", "u.s.", "etc.",
    ];
    let last = s.rsplit(char::is_whitespace).next().unwrap_or("");
    let lower = last
        .trim_start_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    ABBR.contains(&lower.as_str())
        || (lower.chars().count() == 2
            && lower.ends_with('.')
            && lower.starts_with(|c: char| c.is_alphabetic()))
}

/// Common English function words: never keywords, never decide retrieval.
pub fn is_stopword(w: &str) -> bool {
    const STOP: &[&str] = &[
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "shall",
        "may",
        "might",
        "must",
        "upon",
        "us",
        "let",
        "one",
        "said",
        "says",
        "say",
        "tell",
        "told",
        "did",
        "does",
        "doesn",
        "don",
        "didn",
        "won",
        "isn",
        "aren",
        "wasn",
        "s",
        "t",
        "ll",
        "re",
        "ve",
        "d",
        "m",
    ];
    static SET: std::sync::OnceLock<std::collections::HashSet<&'static str>> =
        std::sync::OnceLock::new();
    SET.get_or_init(|| STOP.iter().copied().collect())
        .contains(w)
}

/// Lower-cased content words of `text` (no stop words, no single letters).
pub fn content_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.unicode_words().filter_map(|w| {
        let lw = w.to_lowercase();
        let digit = lw.chars().all(|c| c.is_ascii_digit());
        if (lw.chars().count() < 2 && !digit) || is_stopword(&lw) {
            None
        } else {
            Some(lw)
        }
    })
}

const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The facts a sentence carries: numbers, dates and named entities, as they are written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub numbers: Vec<String>,
    pub dates: Vec<String>,
    pub entities: Vec<String>,
}

impl Facts {
    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty() && self.dates.is_empty() && self.entities.is_empty()
    }
    pub fn count(&self) -> usize {
        self.numbers.len() + self.dates.len() + self.entities.len()
    }
}

/// Extracts numbers ("1,200", "38%", "$1.2"), dates ("March 2031", "1862") and named
/// entities (runs of capitalised words not at the start of a sentence).
pub fn facts(sentence: &str) -> Facts {
    let mut f = Facts::default();
    let words: Vec<(usize, &str)> = sentence.split_word_bound_indices().collect();
    let mut i = 0;
    let mut first_word = true;
    while i < words.len() {
        let (_, w) = words[i];
        let is_word = w.chars().any(|c| c.is_alphanumeric());
        if !is_word {
            i += 1;
            continue;
        }
        if w.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            let digits: String = w.chars().filter(|c| c.is_ascii_digit()).collect();
            let year = digits.len() == 4
                && w.len() == 4
                && (1000..=2999).contains(&digits.parse::<u32>().unwrap_or(0));
            if year {
                f.dates.push(w.to_string());
            } else {
                f.numbers.push(w.to_string());
            }
            first_word = false;
            i += 1;
            continue;
        }
        let lw = w.to_lowercase();
        if MONTHS.contains(&lw.as_str()) && w.chars().next().is_some_and(char::is_uppercase) {
            // "March 2031", "March 3", "3 March": take the month and an adjacent number.
            let mut date = w.to_string();
            if let Some((_, next)) = words.get(i + 2)
                && next.chars().next().is_some_and(|c| c.is_ascii_digit())
            {
                date = format!("{w} {next}");
                i += 2;
            }
            f.dates.push(date);
            first_word = false;
            i += 1;
            continue;
        }
        let capital = w.chars().next().is_some_and(char::is_uppercase);
        if capital && !first_word && !is_stopword(&lw) {
            // Greedy run of capitalised words ("Port Aldous Transit Authority").
            let mut j = i;
            let mut end = i;
            while j < words.len() {
                let (_, wj) = words[j];
                if wj.chars().next().is_some_and(char::is_uppercase) {
                    end = j;
                    j += 1;
                    if words.get(j).is_some_and(|(_, s)| *s == " ") {
                        j += 1;
                        continue;
                    }
                }
                break;
            }
            let start_off = words[i].0;
            let end_off = words[end].0 + words[end].1.len();
            f.entities.push(sentence[start_off..end_off].to_string());
            i = end + 1;
            first_word = false;
            continue;
        }
        first_word = false;
        i += 1;
    }
    f
}

/// Term frequencies of content words, in a fixed (sorted) order so that float sums over
/// them are the same in every process.
pub fn term_counts(text: &str) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for w in content_words(text) {
        *m.entry(w).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_tile_text() {
        let t = "Mr. Smith went to Washington. He paid $1.2 billion!  Then?\n\nDone";
        let s = sentences(t);
        assert_eq!(s.first().unwrap().start, 0);
        assert_eq!(s.last().unwrap().end, t.len());
        for w in s.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert!(t[s[0].start..s[0].end].contains("Washington"));
        // "freedoms." ends with "ms." but is no abbreviation.
        let t = "four human freedoms.\n\nThe first is freedom of speech.";
        assert_eq!(sentences(t).len(), 2);
    }

    #[test]
    fn facts_are_found() {
        let f =
            facts("By March 2031 the Port Aldous Transit Authority expects 38,000 riders in 2030.");
        assert_eq!(f.dates, vec!["March 2031", "2030"]);
        assert_eq!(f.numbers, vec!["38,000"]);
        assert_eq!(f.entities, vec!["Port Aldous Transit Authority"]);
    }
}
