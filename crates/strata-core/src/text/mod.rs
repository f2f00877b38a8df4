//! Plain-text analysis shared by the chunker, the offline compressor and the navigator:
//! sentences with byte offsets, content words, and the "facts" a summary must keep
//! (numbers, dates, named entities).

use unicode_segmentation::UnicodeSegmentation;

mod ascii;
mod facts;
pub mod kinds;
pub mod question;
pub mod salience;
pub mod time;
mod words;

pub use question::asks_for_set;

pub(crate) use facts::MONTHS;
pub use facts::{Facts, facts};
pub use words::{addressed, content_words, is_stopword, term_counts};

/// A sentence of some text, as byte offsets into it (trailing whitespace included, so the
/// sentences of a text tile it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentenceSpan {
    pub start: usize,
    pub end: usize,
}

/// A sentence of a passage as the offline compressor and the tag counter both read it:
/// its span (trailing white space included, as [`sentences`] gives it), the content-word
/// counts and the facts of its trimmed text.
#[derive(Debug)]
pub struct ReadSentence {
    pub span: SentenceSpan,
    pub counts: std::collections::BTreeMap<String, u32>,
    pub facts: Facts,
}

/// The non-blank sentences of `text` with their counts and facts, remembered by the text
/// (bounded): a build reads each FULL chunk twice, for its DETAILED (the compressor) and
/// for its METADATA (the tags), one right after the other.
pub fn read_sentences(text: &str) -> std::sync::Arc<Vec<ReadSentence>> {
    static MEMO: std::sync::LazyLock<crate::memo::Memo<std::sync::Arc<Vec<ReadSentence>>>> =
        std::sync::LazyLock::new(|| crate::memo::Memo::new(2048));
    MEMO.get(text, |text| {
        let mut out = Vec::new();
        each_sentence(text, |span| {
            let trimmed = text[span.start..span.end].trim();
            if !trimmed.is_empty() {
                out.push(ReadSentence {
                    span,
                    counts: term_counts(trimmed),
                    facts: facts(trimmed),
                });
            }
        });
        std::sync::Arc::new(out)
    })
}

/// Splits `text` into sentences (Unicode sentence boundaries) that tile it exactly.
/// Fragments too short to stand alone (e.g. after "Mr.") are merged into the previous one.
pub fn sentences(text: &str) -> Vec<SentenceSpan> {
    let mut out = Vec::new();
    each_sentence(text, |s| out.push(s));
    out
}

/// [`sentences`], handed over one at a time in order: a text of millions of sentences (a
/// huge paragraph the chunker splits) needs no list of them.
pub(crate) fn each_sentence(text: &str, f: impl FnMut(SentenceSpan)) {
    // An ASCII text is split without the Unicode tables ([`ascii`]), at the same boundaries.
    match Squeezed::new(text) {
        None if text.is_ascii() => merge_fragments(text, ascii::bounds(text), f),
        None => merge_fragments(
            text,
            text.split_sentence_bound_indices()
                .map(|(start, s)| (start, start + s.len())),
            f,
        ),
        Some(sq) if sq.text.is_ascii() => merge_fragments(
            text,
            ascii::bounds(&sq.text).map(|(start, end)| (sq.original(start), sq.original(end))),
            f,
        ),
        Some(sq) => merge_fragments(
            text,
            sq.text
                .split_sentence_bound_indices()
                .map(|(start, s)| (sq.original(start), sq.original(start + s.len()))),
            f,
        ),
    }
}

fn merge_fragments(
    text: &str,
    fragments: impl Iterator<Item = (usize, usize)>,
    mut f: impl FnMut(SentenceSpan),
) {
    // The sentence so far: a later fragment may still be merged into it.
    let mut last: Option<SentenceSpan> = None;
    for (start, end) in fragments {
        let s = &text[start..end];
        // (A fragment without words is merged before looking at the previous sentence: a
        // long run of blank lines merges line by line in linear time.)
        match &mut last {
            Some(prev)
                if !has_word(s)
                    || ends_with_abbreviation(text[prev.start..prev.end].trim_end()) =>
            {
                prev.end = end;
            }
            _ => {
                if let Some(prev) = last.replace(SentenceSpan { start, end }) {
                    f(prev);
                }
            }
        }
    }
    if let Some(prev) = last {
        f(prev);
    }
}

/// Whether `s` holds a word (`unicode_words` yields one): a word is a segment with an
/// alphanumeric character, so in ASCII any letter or digit makes one.
fn has_word(s: &str) -> bool {
    if s.is_ascii() {
        ascii::words(s).next().is_some()
    } else {
        s.unicode_words().next().is_some()
    }
}

/// Characters of the Unicode sentence-break classes Sp and Close (UAX #29, as
/// unicode-segmentation 1.13 has them; a unit test checks them against it).
const SENTENCE_SP: &[(char, char)] = &[
    ('\u{9}', '\u{9}'),
    ('\u{b}', '\u{c}'),
    ('\u{20}', '\u{20}'),
    ('\u{a0}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
];
const SENTENCE_CLOSE: &[(char, char)] = &[
    ('\u{22}', '\u{22}'),
    ('\u{27}', '\u{29}'),
    ('\u{5b}', '\u{5b}'),
    ('\u{5d}', '\u{5d}'),
    ('\u{7b}', '\u{7b}'),
    ('\u{7d}', '\u{7d}'),
    ('\u{ab}', '\u{ab}'),
    ('\u{bb}', '\u{bb}'),
    ('\u{f3a}', '\u{f3d}'),
    ('\u{169b}', '\u{169c}'),
    ('\u{2018}', '\u{201f}'),
    ('\u{2039}', '\u{203a}'),
    ('\u{2045}', '\u{2046}'),
    ('\u{207d}', '\u{207e}'),
    ('\u{208d}', '\u{208e}'),
    ('\u{2308}', '\u{230b}'),
    ('\u{2329}', '\u{232a}'),
    ('\u{275b}', '\u{2760}'),
    ('\u{2768}', '\u{2775}'),
    ('\u{27c5}', '\u{27c6}'),
    ('\u{27e6}', '\u{27ef}'),
    ('\u{2983}', '\u{2998}'),
    ('\u{29d8}', '\u{29db}'),
    ('\u{29fc}', '\u{29fd}'),
    ('\u{2e00}', '\u{2e0d}'),
    ('\u{2e1c}', '\u{2e1d}'),
    ('\u{2e20}', '\u{2e29}'),
    ('\u{2e42}', '\u{2e42}'),
    ('\u{2e55}', '\u{2e5c}'),
    ('\u{3008}', '\u{3011}'),
    ('\u{3014}', '\u{301b}'),
    ('\u{301d}', '\u{301f}'),
    ('\u{fd3e}', '\u{fd3f}'),
    ('\u{fe17}', '\u{fe18}'),
    ('\u{fe35}', '\u{fe44}'),
    ('\u{fe47}', '\u{fe48}'),
    ('\u{fe59}', '\u{fe5e}'),
    ('\u{ff08}', '\u{ff09}'),
    ('\u{ff3b}', '\u{ff3b}'),
    ('\u{ff3d}', '\u{ff3d}'),
    ('\u{ff5b}', '\u{ff5b}'),
    ('\u{ff5d}', '\u{ff5d}'),
    ('\u{ff5f}', '\u{ff60}'),
    ('\u{ff62}', '\u{ff63}'),
    ('\u{1f676}', '\u{1f678}'),
];

fn in_ranges(c: char, ranges: &[(char, char)]) -> bool {
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether an ASCII text holds a run of more than [`SQUEEZE_RUN`] characters of one of
/// the classes Sp or Close (what [`Squeezed::new`] squeezes).
fn has_ascii_run(text: &[u8]) -> bool {
    let (mut class, mut len) = (0u8, 0usize);
    for &b in text {
        let k = squeeze_class(b as char);
        if k != 0 && k == class {
            len += 1;
            if len > SQUEEZE_RUN {
                return true;
            }
        } else {
            class = k;
            len = 1;
        }
    }
    false
}

/// Sp = 1, Close = 2, anything else 0.
fn squeeze_class(c: char) -> u8 {
    if c.is_ascii() {
        return match c {
            '\t' | '\u{b}' | '\u{c}' | ' ' => 1,
            '"' | '\'' | '(' | ')' | '[' | ']' | '{' | '}' => 2,
            _ => 0,
        };
    }
    if in_ranges(c, SENTENCE_SP) {
        1
    } else if in_ranges(c, SENTENCE_CLOSE) {
        2
    } else {
        0
    }
}

/// `text` with every run of more than `SQUEEZE_RUN` characters of one of the classes Sp or
/// Close cut to its first `SQUEEZE_RUN` characters, and the way back to `text`'s offsets.
///
/// unicode-segmentation looks ahead from every character of "ATerm Close* Sp*" (rule SB8),
/// so a full stop followed by a megabyte of spaces takes quadratic time. Sentence breaks
/// never fall inside such a run, and a run's length changes no break around it (the
/// segmenter's state after it and every look-ahead through it are the same for 1 or 10^6
/// of them), so the squeezed text has the same sentence breaks, mapped back.
struct Squeezed {
    text: String,
    /// `(offset in text, offset in the original)` at the end of each squeezed run.
    anchors: Vec<(usize, usize)>,
}

const SQUEEZE_RUN: usize = 64;

impl Squeezed {
    /// `None` when `text` has no run to squeeze (all ordinary text): use it as it is.
    fn new(text: &str) -> Option<Squeezed> {
        // Most texts have no run of SQUEEZE_RUN spaces or closing marks: an ASCII text is
        // checked byte by byte first (a run of multi-byte Sp or Close characters needs
        // non-ASCII text).
        if text.is_ascii() && !has_ascii_run(text.as_bytes()) {
            return None;
        }
        let mut runs: Vec<(usize, usize, usize)> = Vec::new(); // start, end of kept, end
        let mut class = 0u8;
        let mut run_start = 0usize;
        let mut run_len = 0usize;
        let mut kept_end = 0usize;
        let finish = |runs: &mut Vec<_>, class: u8, len: usize, start, kept, end| {
            if class != 0 && len > SQUEEZE_RUN {
                runs.push((start, kept, end));
            }
        };
        for (i, c) in text.char_indices() {
            let k = squeeze_class(c);
            if k == class && k != 0 {
                run_len += 1;
                if run_len == SQUEEZE_RUN {
                    kept_end = i + c.len_utf8();
                }
                continue;
            }
            finish(&mut runs, class, run_len, run_start, kept_end, i);
            class = k;
            run_start = i;
            run_len = 1;
            kept_end = i + c.len_utf8();
        }
        finish(&mut runs, class, run_len, run_start, kept_end, text.len());
        if runs.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut anchors = Vec::with_capacity(runs.len());
        let mut pos = 0;
        for (start, kept, end) in runs {
            debug_assert!(start < kept && kept < end);
            out.push_str(&text[pos..kept]);
            anchors.push((out.len(), end));
            pos = end;
        }
        out.push_str(&text[pos..]);
        Some(Squeezed { text: out, anchors })
    }

    /// The original offset of an offset into the squeezed text (a run's end maps to the
    /// end of the whole run).
    fn original(&self, at: usize) -> usize {
        let i = self.anchors.partition_point(|&(sq, _)| sq <= at);
        match i {
            0 => at,
            _ => {
                let (sq, orig) = self.anchors[i - 1];
                orig + (at - sq)
            }
        }
    }
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
    ABBR.contains(&lower.as_str()) || is_initials(&lower)
}

/// Initials and initialisms: one or more single letters, each followed by a full stop
/// ("J.", "J.K.", "e.g.", "U.S.A."). A sentence rarely ends on one; a name often
/// continues after it ("J.K. Rowling").
fn is_initials(token: &str) -> bool {
    let mut chars = token.chars().peekable();
    let mut letters = 0;
    while let Some(c) = chars.next() {
        if !c.is_alphabetic() || chars.next() != Some('.') {
            return false;
        }
        letters += 1;
    }
    letters > 0
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

    /// Regression: "J.K. Rowling" was cut after "J.K." (only one-letter initials were
    /// known); initials of any length now continue the sentence.
    #[test]
    fn sentence_splitter_keeps_jk_rowling_whole() {
        let t = "I just finished a book by J.K. Rowling. It was great.";
        let s = sentences(t);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(t[s[0].start..s[0].end].contains("Rowling"));
        let t = "We met J. R. R. Tolkien fans in the U.S.A. last May. Then we left.";
        assert_eq!(sentences(t).len(), 2);
        assert!(
            is_initials("j.k.") && is_initials("e.g.") && !is_initials("no.") && !is_initials("ok")
        );
    }

    /// The Sp and Close tables are what the segmenter uses: probed through its own breaks.
    #[test]
    fn squeeze_classes_match_the_segmenter() {
        let bounds = |t: &str| {
            t.split_sentence_bounds()
                .map(str::to_string)
                .collect::<Vec<String>>()
        };
        for (ranges, class) in [(SENTENCE_SP, 1u8), (SENTENCE_CLOSE, 2)] {
            for &(lo, hi) in ranges {
                for c in lo..=hi {
                    assert_eq!(squeeze_class(c), class, "{c:?}");
                    // Kept after a full stop; a Close after it is kept only if it is Close.
                    assert_eq!(bounds(&format!("a.{c}B")), [format!("a.{c}"), "B".into()]);
                    let want = if class == 1 {
                        vec![format!("a.{c}"), ")B".into()]
                    } else {
                        vec![format!("a.{c})"), "B".into()]
                    };
                    assert_eq!(bounds(&format!("a.{c})B")), want, "{c:?}");
                    // Never a break inside a run (unlike line separators).
                    assert_eq!(bounds(&format!("{c}{c}x")).len(), 1, "{c:?}");
                }
            }
        }
        assert_eq!(squeeze_class('a'), 0);
        assert_eq!(squeeze_class('\n'), 0);
        assert_eq!(squeeze_class('.'), 0);
    }

    #[test]
    fn long_runs_after_a_full_stop_split_as_before() {
        let direct = |t: &str| {
            let mut out = Vec::new();
            merge_fragments(
                t,
                t.split_sentence_bound_indices()
                    .map(|(start, s)| (start, start + s.len())),
                |s| out.push(s),
            );
            out
        };
        for t in [
            format!("It ended.{}then it rained. Next", " ".repeat(500)),
            format!("It ended.{}Then it rained.", "\u{3000}".repeat(500)),
            format!("It ended.{}{}Then", ")".repeat(300), " ".repeat(300)),
            format!("{}x. y", " ".repeat(100)),
            format!("x.{}", "\u{201d}".repeat(100)),
        ] {
            assert!(Squeezed::new(&t).is_some());
            assert_eq!(sentences(&t), direct(&t), "{t:?}");
        }
        assert!(Squeezed::new("An ordinary sentence.   Another one.").is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Squeezing long Sp/Close runs never changes the sentences.
        #[test]
        fn squeezing_keeps_every_break(parts in proptest::collection::vec(
            (proptest::sample::select(vec![
                " ", "\t", "\u{a0}", "\u{3000}", ")", "\"", "\u{201d}", "\u{300d}", ".", "!",
                "?", "a", "B", "7", "\n", "\u{301}", "#", ",", "Mr.", "e.g.", "日", "\r\n",
            ]), 1usize..150),
            1..12,
        )) {
            let t: String = parts.iter().map(|(s, n)| s.repeat(*n)).collect();
            let mut direct = Vec::new();
            merge_fragments(
                &t,
                t.split_sentence_bound_indices().map(|(start, s)| (start, start + s.len())),
                |s| direct.push(s),
            );
            proptest::prop_assert_eq!(sentences(&t), direct);
        }
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
