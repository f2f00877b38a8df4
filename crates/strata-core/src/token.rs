//! Real token counts (cl100k BPE) for every budget in strata: chunk sizes, level targets,
//! context windows. Never a characters-divided-by-four guess.
//!
//! The tokenizer is `bpe-openai`'s cl100k_base (GitHub's `bpe`: OpenAI's pre-tokenizer
//! pattern and merge table, serialized when the crate is built), whose counts equal
//! tiktoken's — the tests hold it to tiktoken-rs on the bundled data and on random text.

use crate::memo::Memo;
use bpe_openai::Tokenizer;
use std::sync::{LazyLock, OnceLock};

/// The tokenizer's name, reported in stats and part of the compressor identity.
pub const TOKENIZER: &str = "cl100k_base";

fn bpe() -> &'static Tokenizer {
    static CL100K_BASE: LazyLock<Tokenizer> = LazyLock::new(|| {
        // `bpe-openai`'s tables as build.rs re-encoded them (what counting, encoding and
        // decoding read; ~5 ms to load where the crate's own take ~30).
        let tables: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.bincode"));
        let cfg = bincode::config::standard().with_fixed_int_encoding();
        let (bpe, _): (bpe_openai::byte_pair_encoding::BytePairEncoding, usize) =
            bincode::serde::borrow_decode_from_slice(tables, cfg).expect("valid cl100k tables");
        // `bpe-openai`'s pre-tokenizer for cl100k_base, as its `cl100k_base()` builds it
        // (0.3.2): tiktoken's pattern, its negative look-ahead rewritten as a look-ahead
        // pattern.
        let pat1 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+$";
        let pat2 = "\\s+\\s";
        let pat3 = "\\s+";
        Tokenizer::new_lookahead(bpe, &[(pat1, false), (pat2, true), (pat3, false)], false)
            .expect("valid pre-tokenizer")
    });
    &CL100K_BASE
}

/// Loads the tokenizer now (it is loaded at its first use otherwise: ~5 ms), which a
/// command that will count tokens can do on another thread while it opens the store.
pub fn warm() {
    let _ = bpe().count("");
}

/// Number of cl100k tokens in `text` (remembered: [`crate::memo`]).
pub fn count(text: &str) -> usize {
    static MEMO: LazyLock<Memo<u32>> = LazyLock::new(|| Memo::new(1 << 18));
    if text.is_empty() {
        return 0;
    }
    MEMO.get(text, |t| count_pieces(t) as u32) as usize
}

/// Pieces at most this long have their counts remembered ([`count_pieces`]).
const PIECE_BYTES: usize = 24;
/// How many piece counts one thread remembers before it starts again.
const PIECES_KEPT: usize = 1 << 16;

/// `bpe().count(t)` as it computes it — the pre-tokenizer's pieces, each counted on its own,
/// summed — with each short piece's count remembered per thread: a text's words recur (" the",
/// " of", a speaker's name), and a remembered piece costs a hash instead of a BPE pass.
fn count_pieces(t: &str) -> usize {
    thread_local! {
        // foldhash: a piece is hashed per word of every text counted; SipHash was
        // half the cost of a remembered piece.
        static PIECES: std::cell::RefCell<
            std::collections::HashMap<Box<str>, u32, foldhash::fast::RandomState>,
        > = Default::default();
    }
    let tok = bpe();
    let text = tok.normalize(t);
    let text = text.as_str();
    let mut ascii;
    let mut regex;
    let pieces: &mut dyn Iterator<Item = &str> = if text.is_ascii() {
        ascii = AsciiPieces { text, at: 0 };
        &mut ascii
    } else {
        regex = tok.split(text);
        &mut regex
    };
    PIECES.with_borrow_mut(|known| {
        if known.len() >= PIECES_KEPT {
            known.clear();
        }
        pieces
            .map(|piece| {
                if piece.len() > PIECE_BYTES {
                    return tok.bpe.count(piece.as_bytes());
                }
                if let Some(&n) = known.get(piece) {
                    return n as usize;
                }
                let n = tok.bpe.count(piece.as_bytes());
                known.insert(piece.into(), n as u32);
                n
            })
            .sum()
    })
}

/// The pre-tokenizer's pieces of an ASCII text, without the regex: cl100k's pattern
/// (`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
/// leftmost-first, anchored where the last piece ended) read byte by byte, where a letter
/// is `A-Z a-z`, a digit `0-9`, and white space the space and `\t \n \v \f \r`. The regex
/// was a fifth of `ingest`; the tests hold the pieces to `bpe-openai`'s.
struct AsciiPieces<'a> {
    text: &'a str,
    at: usize,
}

fn ascii_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
}

/// Neither white space, a letter nor a digit.
fn ascii_other(b: u8) -> bool {
    !ascii_space(b) && !b.is_ascii_alphanumeric()
}

fn line_break(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

impl<'a> Iterator for AsciiPieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let b = &self.text.as_bytes()[self.at..];
        let first = *b.first()?;
        let at = |i: usize| b.get(i).copied();
        let run = |from: usize, f: fn(u8) -> bool| {
            from + b
                .get(from..)
                .unwrap_or_default()
                .iter()
                .take_while(|&&c| f(c))
                .count()
        };
        let len = 'len: {
            // (?i:'s|'t|'re|'ve|'m|'ll|'d)
            if first == b'\'' {
                let lower = |i: usize| at(i).map(|c| c.to_ascii_lowercase());
                match (lower(1), lower(2)) {
                    (Some(b's' | b't' | b'm' | b'd'), _) => break 'len 2,
                    (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => break 'len 3,
                    _ => {}
                }
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !line_break(first)
                && !first.is_ascii_alphanumeric()
                && at(1).is_some_and(|c| c.is_ascii_alphabetic())
            {
                break 'len run(1, |c| c.is_ascii_alphabetic());
            }
            if first.is_ascii_alphabetic() {
                break 'len run(0, |c| c.is_ascii_alphabetic());
            }
            // \p{N}{1,3}
            if first.is_ascii_digit() {
                break 'len run(0, |c| c.is_ascii_digit()).min(3);
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
            let punct = if first == b' ' && at(1).is_some_and(ascii_other) {
                Some(1)
            } else if ascii_other(first) {
                Some(0)
            } else {
                None
            };
            if let Some(p) = punct {
                break 'len run(run(p, ascii_other), line_break);
            }
            // White space from here on.
            let end = run(0, ascii_space);
            // \s*[\r\n]+: up to the run's last line break.
            if let Some(nl) = b[..end].iter().rposition(|&c| line_break(c)) {
                break 'len nl + 1;
            }
            // \s+$
            if end == b.len() {
                break 'len end;
            }
            // \s+(?!\S): all but the last, which goes with what follows; else \s+.
            if end >= 2 { end - 1 } else { end }
        };
        let piece = &self.text[self.at..self.at + len];
        self.at += len;
        Some(piece)
    }
}

/// The first `n` tokens of `text` (decoded; a character split between tokens is dropped).
pub fn head(text: &str, n: usize) -> String {
    let t = bpe().encode(text);
    let k = n.min(t.len());
    String::from_utf8_lossy(&bpe().bpe.decode_tokens(&t[..k]))
        .trim_end_matches('\u{fffd}')
        .to_string()
}

/// The last `n` tokens of `text` (decoded; a character split between tokens is dropped).
pub fn tail(text: &str, n: usize) -> String {
    let t = bpe().encode(text);
    let k = t.len().saturating_sub(n);
    String::from_utf8_lossy(&bpe().bpe.decode_tokens(&t[k..]))
        .trim_start_matches('\u{fffd}')
        .to_string()
}

/// The longest token of the vocabulary, in bytes. Tokens concatenate to the text, so a
/// text of `n` bytes has at least `n / max_token_bytes()` tokens (rounded up).
pub fn max_token_bytes() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        let b = &bpe().bpe;
        (0..b.num_tokens() as u32)
            .map(|id| b.token_len(id))
            .max()
            .unwrap_or(1)
    })
}

/// `Some(count(text))` when that is at most `max`, else `None`. A text too long to fit
/// (more than `max * max_token_bytes()` bytes) is not tokenized at all, so asking whether a
/// 10 MB text fits a chunk costs nothing.
pub fn count_within(text: &str, max: usize) -> Option<usize> {
    if text.len() > max.saturating_mul(max_token_bytes()) {
        return None;
    }
    let n = count(text);
    (n <= max).then_some(n)
}

/// A prefix of `text` that fits in `max` tokens, cut at a char boundary: its length in
/// bytes and its exact token count. It is the longest such prefix or close to it (it ends
/// where the `max`-th token of a slightly longer window ends), and never empty: when the
/// first character alone takes more than `max` tokens, it is that character.
///
/// Used to cut a "word" longer than a whole chunk (a base64 blob, text without spaces).
/// The cost is linear in the prefix returned, not in `text`: windows of the text are
/// tokenized, doubling from about `4 * max` bytes until one holds more than `max` tokens,
/// so cutting a long text into pieces with repeated calls is linear overall. `guess`, the
/// length of the previous piece of the same text (0 if none), makes the first window fit
/// the text's density: about twice the piece is tokenized instead of three or four times.
pub fn fitting_prefix(text: &str, max: usize, guess: usize) -> (usize, usize) {
    let Some(first) = text.chars().next() else {
        return (0, 0);
    };
    let first = first.len_utf8();
    let max = max.max(1);
    let start = match guess {
        0 => max.saturating_mul(4),
        g => g.saturating_add(g / 16).saturating_add(16),
    };
    let mut window = floor_boundary(text, start).max(first);
    let toks = loop {
        let toks = bpe().encode(&text[..window]);
        if toks.len() > max {
            break toks;
        }
        if window == text.len() {
            return (window, toks.len());
        }
        let next = floor_boundary(text, window.saturating_mul(2));
        window = if next > window {
            next
        } else {
            ceil_boundary(text, window + 1)
        };
    };
    // Cut where the `max`-th token of the window ends. BPE does not merge across the end
    // of a token it produced, so the prefix usually encodes to the same `max` tokens; when
    // it does not (a cut inside a character or between pre-tokenizer pieces), cut again
    // at its own `max`-th token. Every round shortens the prefix, so this ends.
    let mut end = bytes_of(&toks[..max]);
    loop {
        end = floor_boundary(text, end);
        if end == 0 {
            return (first, count(&text[..first]));
        }
        let toks = bpe().encode(&text[..end]);
        if toks.len() <= max {
            return (end, toks.len());
        }
        end = bytes_of(&toks[..max]);
    }
}

/// Bytes the tokens decode to.
fn bytes_of(tokens: &[u32]) -> usize {
    let b = &bpe().bpe;
    tokens.iter().map(|&t| b.token_len(t)).sum()
}

/// The largest char boundary of `s` at or before `i` (`s.len()` when `i` is past the end).
fn floor_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest char boundary of `s` at or after `i`.
fn ceil_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundled data's texts: the debate's JSON Lines and each sample document.
    fn bundled_texts() -> Vec<String> {
        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data");
        let mut files = vec![format!("{data}/debate.jsonl")];
        for e in std::fs::read_dir(format!("{data}/docs")).unwrap() {
            files.push(e.unwrap().path().display().to_string());
        }
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }

    /// The ASCII pieces are `bpe-openai`'s pre-tokenizer's: on the bundled data and on
    /// random ASCII over white space runs, line breaks, apostrophes, digits and punctuation.
    #[test]
    fn ascii_pieces_are_the_pretokenizers() {
        let same = |t: &str| {
            let ours: Vec<&str> = AsciiPieces { text: t, at: 0 }.collect();
            let theirs: Vec<&str> = bpe().split(t).collect();
            assert_eq!(ours, theirs, "{t:?}");
        };
        for text in bundled_texts() {
            let ascii: String = text.chars().filter(char::is_ascii).collect();
            same(&ascii);
        }
        let alphabet: &[u8] =
            b"aAbZz 09\n\r\t\x0b\x0c\x00\x1c\x7f'''sStTrReEvVmMlLdD.,;:\"-_()!?$%  \n\n  ";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..50_000 {
            let mut s = String::new();
            for _ in 0..(n % 40) + 1 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s.push(alphabet[(x % alphabet.len() as u64) as usize] as char);
            }
            same(&s);
        }
    }

    /// The counts are tiktoken's cl100k_base counts: on the bundled data cut into pieces,
    /// and on random strings over an alphabet of scripts, emoji, combining marks,
    /// whitespace runs and punctuation (the pre-tokenizer's corners).
    #[test]
    fn counts_equal_tiktokens() {
        let reference = tiktoken_rs::cl100k_base().unwrap();
        let same = |t: &str| {
            // Twice: the second time from the remembered pieces.
            for _ in 0..2 {
                assert_eq!(count_pieces(t), reference.encode_ordinary(t).len(), "{t:?}");
            }
        };
        for text in bundled_texts() {
            same(&text);
            for piece in text.split_inclusive(['.', '\n']) {
                same(piece);
            }
        }
        let alphabet: Vec<char> = "aAbZ 09.,;:'\"\n\t\r  €é漢字日本語🙂👍🏽\u{200d}\u{301}ß-_()[]{}<>/\\|!?@#$%^&*=+~`ÅøΩЖжعربي हिन्दी 1234567890 \u{feff}\u{a0}"
            .chars()
            .collect();
        let mut x: u64 = 0x1234_5678_9abc_def1;
        for n in 0..20_000 {
            let mut s = String::new();
            for _ in 0..(n % 60) + 1 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            same(&s);
        }
    }

    /// The tables build.rs re-encodes give what `bpe-openai`'s own give: the same tokens
    /// (not only their number) for the bundled data and for every token's own bytes, and
    /// decoding gives the text back.
    #[test]
    fn the_reencoded_tables_encode_as_bpe_openais() {
        let theirs = bpe_openai::cl100k_base();
        let ours = bpe();
        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data");
        let mut texts = vec![std::fs::read_to_string(format!("{data}/debate.jsonl")).unwrap()];
        for e in std::fs::read_dir(format!("{data}/docs")).unwrap() {
            texts.push(std::fs::read_to_string(e.unwrap().path()).unwrap());
        }
        texts.push(
            "aAbZ 09.,;:'\"\n\t\r  €é漢字日本語🙂👍🏽\u{200d}\u{301}ß ÅøΩЖжعربي हिन्दी \u{feff}"
                .repeat(20),
        );
        for t in &texts {
            let toks = ours.encode(t.as_str());
            assert_eq!(toks, theirs.encode(t.as_str()));
            assert_eq!(ours.count(t.as_str()), toks.len());
            assert_eq!(ours.bpe.decode_tokens(&toks), t.as_bytes());
        }
        assert_eq!(ours.bpe.num_tokens(), theirs.bpe.num_tokens());
        for id in 0..ours.bpe.num_tokens() as u32 {
            let b = theirs.bpe.token_bytes(id);
            assert_eq!(ours.bpe.token_bytes(id), b);
            assert_eq!(
                ours.bpe.encode_via_backtracking(b),
                theirs.bpe.encode_via_backtracking(b)
            );
        }
    }

    #[test]
    fn head_and_tail_cut_at_tokens() {
        let t = "The quick brown fox jumps over the lazy dog.";
        assert_eq!(head(t, 3), "The quick brown");
        assert_eq!(tail(t, 3), " lazy dog.");
        assert_eq!(head(t, 1000), t);
        assert_eq!(tail(t, 0), "");
        // A character split between tokens is dropped, never half-kept.
        assert!(head("🙂🙂🙂", 1).is_empty() || head("🙂🙂🙂", 1) == "🙂");
    }

    #[test]
    fn max_token_bytes_bounds_every_token() {
        let m = max_token_bytes();
        assert!(m >= 16, "{m}");
        // A text of n bytes never has fewer than n / m tokens.
        for t in [" ".repeat(5000), "-".repeat(5000), "a".repeat(5000)] {
            assert!(count(&t) * m >= t.len(), "{} tokens", count(&t));
        }
    }

    #[test]
    fn count_within_is_exact_or_none() {
        let t = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let n = count(&t);
        assert_eq!(count_within(&t, n), Some(n));
        assert_eq!(count_within(&t, n + 5), Some(n));
        assert_eq!(count_within(&t, n - 1), None);
        assert_eq!(count_within("", 0), Some(0));
        assert_eq!(count_within(&"x".repeat(10_000_000), 10), None);
    }

    #[test]
    fn fitting_prefix_fits_and_uses_the_budget() {
        let samples = [
            "abcdefghij".repeat(3000),
            "a".repeat(20_000),
            " ".repeat(20_000),
            "日本語のテキストを分割する".repeat(500),
            "QmFzZTY0IGJsb2Igd2l0aCBzb21lIHRleHQ=+/09".repeat(500),
            "é".repeat(7000),
            "1234567890".repeat(2000),
        ];
        for text in &samples {
            for (max, guess) in [
                (1, 0),
                (2, 0),
                (7, 0),
                (50, 0),
                (400, 0),
                (50, 1),
                (50, 150),
                (50, 1 << 40),
            ] {
                let (len, n) = fitting_prefix(text, max, guess);
                let first = text.chars().next().unwrap().len_utf8();
                assert!(text.is_char_boundary(len) && len >= first);
                assert_eq!(n, count(&text[..len]));
                assert!(n <= max || len == first, "{n} > {max}");
                // It uses (nearly) the whole budget, or takes the whole text.
                assert!(
                    len == text.len() || n + max / 8 + 1 >= max,
                    "{n} tokens for {max}"
                );
            }
        }
        // A character that alone exceeds the budget is returned alone.
        let (len, n) = fitting_prefix("😀😀", 1, 0);
        assert_eq!(&"😀😀"[..len], "😀");
        assert_eq!(n, count("😀"));
        assert_eq!(fitting_prefix("", 5, 0), (0, 0));
        // Short texts fit whole.
        assert_eq!(fitting_prefix("hello", 5, 0), (5, 1));
    }
}
