//! Content words: stop words, the words that decide retrieval, term counts.

use std::collections::BTreeMap;
use unicode_segmentation::UnicodeSegmentation;

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
    // foldhash: a stop-word test runs for every word the build reads (SipHash was ~3 %).
    static SET: std::sync::OnceLock<
        std::collections::HashSet<&'static str, foldhash::fast::FixedState>,
    > = std::sync::OnceLock::new();
    SET.get_or_init(|| STOP.iter().copied().collect())
        .contains(w)
}

/// Lower-cased content words of `text` (no stop words, no single letters).
/// Personal pronouns of the first person (the one speaking), contractions included.
const FIRST_PERSON: &[&str] = &[
    "i",
    "i'm",
    "i've",
    "i'd",
    "i'll",
    "me",
    "my",
    "mine",
    "myself",
    "we",
    "we're",
    "we've",
    "we'd",
    "we'll",
    "us",
    "our",
    "ours",
    "ourselves",
];
/// Personal pronouns of the second person (the one spoken to), contractions included.
const SECOND_PERSON: &[&str] = &[
    "you",
    "you're",
    "you've",
    "you'd",
    "you'll",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Whether `sentence` speaks of the one it is said to and not of the one saying it ("It
/// sounds like your first yoga class was quite an experience!"): it holds a pronoun of the
/// second person and none of the first. English grammar's closed class of personal
/// pronouns, nothing else.
pub fn addressed(sentence: &str) -> bool {
    let mut second = false;
    for w in sentence
        .split(|c: char| !c.is_alphanumeric() && c != '\'' && c != '\u{2019}')
        .filter(|w| !w.is_empty())
    {
        let w = w.to_lowercase().replace('\u{2019}', "'");
        if FIRST_PERSON.contains(&w.as_str()) {
            return false;
        }
        second |= SECOND_PERSON.contains(&w.as_str());
    }
    second
}

pub fn content_words(text: &str) -> impl Iterator<Item = String> + '_ {
    // An ASCII text's words without the Unicode tables: the same words.
    let words: Box<dyn Iterator<Item = &str>> = if text.is_ascii() {
        Box::new(super::ascii::words(text))
    } else {
        Box::new(text.unicode_words())
    };
    words.filter_map(|w| {
        let lw = w.to_lowercase();
        let digit = lw.chars().all(|c| c.is_ascii_digit());
        if (lw.chars().count() < 2 && !digit) || is_stopword(&lw) {
            None
        } else {
            Some(lw)
        }
    })
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
mod person_tests {
    use super::addressed;

    #[test]
    fn a_sentence_about_the_one_spoken_to() {
        assert!(addressed(
            "It sounds like your first yoga class was quite an experience!"
        ));
        assert!(addressed("You\u{2019}ve run every morning?"));
        assert!(!addressed("My first class is today, and you should come."));
        assert!(!addressed("I'm glad you liked it."));
        assert!(!addressed("The class starts at five."));
    }
}
