//! Unicode sentence and word boundaries (UAX #29) of an ASCII text, without the tables.
//!
//! `unicode-segmentation` finds each character's break class by a binary search over a
//! table of every Unicode range; for the offline build, which splits every chunk into
//! sentences and every sentence into words, those searches and the decoding around them
//! were a tenth of the CPU. Here the same sentence state machine —
//! `unicode-segmentation` 1.13's `sentence::fwd`, rule for rule (MIT / Apache-2.0) — reads
//! an ASCII text byte by byte, its class from a 128-entry table, and words are read by the few word rules ASCII can meet ([`words`]). The tests
//! hold every boundary and word to the crate's, exhaustively over short strings of every
//! class and on random longer ones.

/// A byte's sentence-break class (UAX #29; ASCII has no Sep, OLetter, Extend or Format).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cat {
    Cr,
    Lf,
    Sp,
    Lower,
    Upper,
    Numeric,
    ATerm,
    STerm,
    Close,
    SContinue,
    Other,
}

const fn cat(b: u8) -> Cat {
    match b {
        b'\r' => Cat::Cr,
        b'\n' => Cat::Lf,
        b'\t' | 0x0b | 0x0c | b' ' => Cat::Sp,
        b'a'..=b'z' => Cat::Lower,
        b'A'..=b'Z' => Cat::Upper,
        b'0'..=b'9' => Cat::Numeric,
        b'.' => Cat::ATerm,
        b'!' | b'?' => Cat::STerm,
        b'"' | b'\'' | b'(' | b')' | b'[' | b']' | b'{' | b'}' => Cat::Close,
        b',' | b'-' | b':' | b';' => Cat::SContinue,
        _ => Cat::Other,
    }
}

const CATS: [Cat; 128] = {
    let mut t = [Cat::Other; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = cat(b as u8);
        b += 1;
    }
    t
};

/// What the state machine remembers of a class (the crate's `StatePart`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Part {
    Sot,
    Eot,
    Other,
    Cr,
    Lf,
    ATerm,
    UpperLower,
    ClosePlus,
    SpPlus,
    STerm,
}

/// The last four parts, oldest first.
#[derive(Clone, Copy)]
struct State([Part; 4]);

const INITIAL: State = State([Part::Sot; 4]);

impl State {
    fn next(self, c: Cat) -> State {
        let p = self.0;
        match (p[3], c) {
            (Part::ClosePlus, Cat::Close) | (Part::SpPlus, Cat::Sp) => self,
            _ => State([
                p[1],
                p[2],
                p[3],
                match c {
                    Cat::Cr => Part::Cr,
                    Cat::Lf => Part::Lf,
                    Cat::ATerm => Part::ATerm,
                    Cat::Upper | Cat::Lower => Part::UpperLower,
                    Cat::Close => Part::ClosePlus,
                    Cat::Sp => Part::SpPlus,
                    Cat::STerm => Part::STerm,
                    _ => Part::Other,
                },
            ]),
        }
    }

    fn end(self) -> State {
        let p = self.0;
        State([p[1], p[2], p[3], Part::Eot])
    }

    fn is(self, part: Part) -> bool {
        self.0[3] == part
    }
}

/// SB8: ATerm Close* Sp* × ( ¬(OLetter | Upper | Lower | ParaSep | SATerm) )* Lower.
fn sb8(s: State, ahead: &[u8]) -> bool {
    let p = s.0;
    let mut i = if p[3] == Part::SpPlus { 2 } else { 3 };
    if p[i] == Part::ClosePlus {
        i -= 1;
    }
    if p[i] != Part::ATerm {
        return false;
    }
    for &b in ahead {
        match CATS[b as usize] {
            Cat::Lower => return true,
            Cat::Upper | Cat::Cr | Cat::Lf | Cat::STerm | Cat::ATerm => return false,
            _ => {}
        }
    }
    false
}

/// SB8a: SATerm Close* Sp* × (SContinue | SATerm), and SB10's left side.
fn sb8a(s: State) -> bool {
    let p = s.0;
    let mut i = if p[3] == Part::SpPlus { 2 } else { 3 };
    if p[i] == Part::ClosePlus {
        i -= 1;
    }
    p[i] == Part::STerm || p[i] == Part::ATerm
}

/// SB9: SATerm Close* × (Close | Sp | ParaSep).
fn sb9(s: State) -> bool {
    let p = s.0;
    let i = if p[3] == Part::ClosePlus { 2 } else { 3 };
    p[i] == Part::STerm || p[i] == Part::ATerm
}

/// SB11: SATerm Close* Sp* ParaSep? ÷.
fn sb11(s: State) -> bool {
    let p = s.0;
    let mut i = match p[3] {
        Part::Cr | Part::Lf => 2,
        _ => 3,
    };
    if p[i] == Part::SpPlus {
        i -= 1;
    }
    if p[i] == Part::ClosePlus {
        i -= 1;
    }
    p[i] == Part::STerm || p[i] == Part::ATerm
}

/// The sentences of an ASCII `text` as `(start, end)` byte ranges that tile it: what
/// `text.split_sentence_bound_indices()` gives.
pub(super) fn bounds(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    debug_assert!(text.is_ascii());
    let mut breaks = Breaks {
        text: text.as_bytes(),
        pos: 0,
        state: INITIAL,
    };
    let mut start = breaks.next();
    std::iter::from_fn(move || {
        let s = start?;
        let e = breaks.next()?;
        start = Some(e);
        Some((s, e))
    })
}

/// The break positions, the crate's `SentenceBreaks::next` for bytes.
struct Breaks<'a> {
    text: &'a [u8],
    pos: usize,
    state: State,
}

impl Breaks<'_> {
    fn next(&mut self) -> Option<usize> {
        while self.pos < self.text.len() {
            let before = self.pos;
            let state = self.state;
            let c = CATS[self.text[before] as usize];
            self.pos += 1;
            self.state = state.next(c);
            // SB1 (the start of the text).
            if state.is(Part::Sot) {
                return Some(before);
            }
            // SB3: CR × LF.
            if c == Cat::Lf && state.is(Part::Cr) {
                continue;
            }
            // SB4: ParaSep ÷.
            if state.is(Part::Cr) || state.is(Part::Lf) {
                return Some(before);
            }
            // SB6: ATerm × Numeric.
            if c == Cat::Numeric && state.is(Part::ATerm) {
                continue;
            }
            // SB7: (Upper | Lower) ATerm × Upper.
            if c == Cat::Upper && state.0[2] == Part::UpperLower && state.0[3] == Part::ATerm {
                continue;
            }
            if sb8(state, &self.text[before..]) {
                continue;
            }
            if matches!(c, Cat::SContinue | Cat::STerm | Cat::ATerm) && sb8a(state) {
                continue;
            }
            if matches!(c, Cat::Close | Cat::Sp | Cat::Cr | Cat::Lf) && sb9(state) {
                continue;
            }
            // SB10.
            if matches!(c, Cat::Sp | Cat::Cr | Cat::Lf) && sb8a(state) {
                continue;
            }
            if sb11(state) {
                return Some(before);
            }
            // SB998.
        }
        if self.state.is(Part::Sot) || self.state.is(Part::Eot) {
            None
        } else {
            self.state = self.state.end();
            Some(self.pos)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use unicode_segmentation::UnicodeSegmentation;

    fn theirs(text: &str) -> Vec<(usize, usize)> {
        text.split_sentence_bound_indices()
            .map(|(s, t)| (s, s + t.len()))
            .collect()
    }

    fn ours(text: &str) -> Vec<(usize, usize)> {
        bounds(text).collect()
    }

    /// Every ASCII character's class is the crate's: each alone, and after "a. " (where
    /// the class decides the break).
    #[test]
    fn every_ascii_character_splits_as_the_crate_splits() {
        for b in 0u8..128 {
            let c = b as char;
            for text in [
                format!("{c}"),
                format!("a. {c}b"),
                format!("Ab.{c}"),
                format!("x!{c} y"),
                format!("x.){c}a"),
                format!("{c}{c}. {c}"),
            ] {
                assert_eq!(ours(&text), theirs(&text), "{text:?}");
            }
        }
    }

    /// `check` of every string of at most `len` characters of `alphabet`.
    pub(super) fn every_string(alphabet: &[u8], len: usize, check: &impl Fn(&str)) {
        fn walk(alphabet: &[u8], text: &mut Vec<u8>, left: usize, check: &impl Fn(&str)) {
            check(std::str::from_utf8(text).unwrap());
            if left == 0 {
                return;
            }
            for &b in alphabet {
                text.push(b);
                walk(alphabet, text, left - 1, check);
                text.pop();
            }
        }
        walk(alphabet, &mut Vec::new(), len, check);
    }

    /// Every string of up to five characters over one character of each class (and a
    /// second Close and Sp, which collapse in runs).
    #[test]
    fn short_strings_of_every_class_split_as_the_crate_splits() {
        every_string(b"\r\n \ta B3.!\"(,#", 5, &|s| {
            assert_eq!(ours(s), theirs(s), "{s:?}")
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn random_ascii_splits_as_the_crate_splits(
            text in "[a-zA-Z0-9 .!?\"'(),;:\\-\n\r\t#]{0,80}",
        ) {
            prop_assert_eq!(ours(&text), theirs(&text));
        }

        #[test]
        fn random_prose_splits_as_the_crate_splits(
            words in proptest::collection::vec(
                "(Mr|Dr|U\\.S|e\\.g|J\\.K|[A-Z][a-z]{0,6}|[a-z]{1,7}|[0-9]{1,4}(\\.[0-9]+)?)[.!?,;:]?[\"')]?",
                0..40,
            ),
            seps in proptest::collection::vec("( |  |\n|\n\n| \r\n|\t)", 40),
        ) {
            let mut text = String::new();
            for (w, s) in words.iter().zip(&seps) {
                text.push_str(w);
                text.push_str(s);
            }
            prop_assert_eq!(ours(&text), theirs(&text));
        }
    }
}

/// The word-boundary segments of an ASCII `text` with their offsets: what
/// `text.split_word_bound_indices()` gives (UAX #29). In ASCII a word is a run of letters,
/// digits and `_` (WB5, WB8–WB10, WB13a–b) where one `:` `.` `'` between two letters
/// (WB6–7) or one `,` `;` `.` `'` between two digits (WB11–12) does not break it; CR LF is
/// one segment (WB3), a run of spaces is one (WB3d), and any other character is one alone.
pub(super) fn word_bounds(text: &str) -> impl Iterator<Item = (usize, &str)> + '_ {
    debug_assert!(text.is_ascii());
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= b.len() {
            return None;
        }
        let start = at;
        let c = b[at];
        at += 1;
        if word(c) {
            while at < b.len() {
                let c = b[at];
                if word(c) {
                    at += 1;
                    continue;
                }
                // One joiner between two letters or two digits.
                let (prev, next) = (b[at - 1], b.get(at + 1).copied());
                let joins = match next {
                    Some(n) if prev.is_ascii_alphabetic() && n.is_ascii_alphabetic() => {
                        matches!(c, b':' | b'.' | b'\'')
                    }
                    Some(n) if prev.is_ascii_digit() && n.is_ascii_digit() => {
                        matches!(c, b',' | b';' | b'.' | b'\'')
                    }
                    _ => false,
                };
                if !joins {
                    break;
                }
                at += 2;
            }
        } else if c == b'\r' && b.get(at) == Some(&b'\n') {
            at += 1;
        } else if c == b' ' {
            while b.get(at) == Some(&b' ') {
                at += 1;
            }
        }
        Some((start, &text[start..at]))
    })
}

/// The words of an ASCII `text`: what `text.unicode_words()` yields (the segments of
/// [`word_bounds`] that hold a letter or a digit).
pub(super) fn words(text: &str) -> impl Iterator<Item = &str> + '_ {
    word_bounds(text)
        .map(|(_, w)| w)
        .filter(|w| w.bytes().any(|c| c.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod word_tests {
    use super::*;
    use proptest::prelude::*;
    use unicode_segmentation::UnicodeSegmentation;

    fn check(text: &str) {
        let ours: Vec<&str> = words(text).collect();
        let theirs: Vec<&str> = text.unicode_words().collect();
        assert_eq!(ours, theirs, "{text:?}");
        let ours: Vec<(usize, &str)> = word_bounds(text).collect();
        let theirs: Vec<(usize, &str)> = text.split_word_bound_indices().collect();
        assert_eq!(ours, theirs, "{text:?}");
    }

    #[test]
    fn every_ascii_character_between_letters_and_digits_splits_as_the_crate_splits() {
        for b in 0u8..128 {
            let c = b as char;
            for text in [
                format!("{c}"),
                format!("a{c}b"),
                format!("1{c}2"),
                format!("a{c}1"),
                format!("1{c}a"),
                format!("_{c}a"),
                format!("a{c}{c}b"),
                format!("a{c}"),
                format!("{c}1"),
            ] {
                check(&text);
            }
        }
    }

    /// Every string of up to five characters over one character of each class that
    /// words meet.
    #[test]
    fn short_strings_of_every_class_split_as_the_crate_splits() {
        super::tests::every_string(b"aZ9_.:,;' -\r\n\t\"", 5, &check);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn random_ascii_words_are_the_crates(text in "[a-zA-Z0-9_ .:,;'\"!?()\\-\r\n\t#$%\x00-\x1f\x7f]{0,80}") {
            let ours: Vec<&str> = words(&text).collect();
            let theirs: Vec<&str> = text.unicode_words().collect();
            prop_assert_eq!(ours, theirs);
            let ours: Vec<(usize, &str)> = word_bounds(&text).collect();
            let theirs: Vec<(usize, &str)> = text.split_word_bound_indices().collect();
            prop_assert_eq!(ours, theirs);
        }
    }
}
