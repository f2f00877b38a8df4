//! The semantic chunker: cuts a source into chunks that respect its structure (Markdown
//! headings, paragraphs, sentences) within a token budget, and tile it exactly.

use crate::text;
use crate::token;
use rayon::prelude::*;
use unicode_segmentation::UnicodeSegmentation;

/// One chunk: `[start, end)` byte offsets into the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub start: usize,
    pub end: usize,
    /// Real cl100k tokens of `source[start..end]`.
    pub tokens: usize,
    /// Heading path in effect at the chunk (Markdown documents).
    pub headings: Vec<String>,
    /// Index of the section (a level-1 or level-2 heading starts a new one).
    pub section: u32,
}

/// How to read the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structure {
    /// Markdown or plain text: headings start chunks and sections; paragraphs are packed.
    Document,
    /// One debate turn: paragraphs and sentences only.
    Turn,
}

#[derive(Clone, Debug)]
struct Block {
    start: usize,
    end: usize,
    heading: Option<(usize, String)>,
}

/// Splits `src` into blocks: heading lines and paragraphs. Blank lines stick to the block
/// before them, so blocks tile the text.
fn blocks(src: &str, structure: Structure) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut pos = 0;
    let mut in_fence = false;
    let mut para_open = false;
    for line in src.split_inclusive('\n') {
        let start = pos;
        pos += line.len();
        let trimmed = line.trim();
        let fence = trimmed.starts_with("```") || trimmed.starts_with("~~~");
        let heading = if structure == Structure::Document && !in_fence {
            heading_of(line)
        } else {
            None
        };
        if fence {
            in_fence = !in_fence;
        }
        let blank = trimmed.is_empty() && !in_fence;
        if let Some(h) = heading {
            out.push(Block {
                start,
                end: pos,
                heading: Some(h),
            });
            para_open = false;
        } else if blank {
            match out.last_mut() {
                Some(b) => b.end = pos,
                None => out.push(Block {
                    start,
                    end: pos,
                    heading: None,
                }),
            }
            para_open = false;
        } else if para_open {
            out.last_mut().expect("open paragraph").end = pos;
        } else {
            out.push(Block {
                start,
                end: pos,
                heading: None,
            });
            para_open = true;
        }
    }
    out
}

fn heading_of(line: &str) -> Option<(usize, String)> {
    let t = line.trim_start_matches([' ']);
    if line.len() - t.len() > 3 {
        return None;
    }
    let hashes = t.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &t[hashes..];
    if !(rest.starts_with(' ') || rest.starts_with('\t') || rest.trim().is_empty()) {
        return None;
    }
    let title = rest.trim().trim_end_matches('#').trim().to_string();
    Some((hashes, title))
}

/// A run of word segments without a letter or digit (punctuation, symbols, whitespace) at
/// least this long is cut as one long word. Such runs tokenize far below one token per
/// segment (a line of 400 dashes is 6 tokens), so packing them segment by segment made
/// chunks of a few tokens each. Ordinary text has no such run (a ruler line is ~80 bytes).
const SYMBOL_RUN_BYTES: usize = 1024;

/// Pieces of a block that is larger than the budget: sentences, and words of sentences that
/// are themselves too long. Returns `(start, end, tokens)` relative to the source; every
/// piece fits the budget, except a single character that alone exceeds it.
fn split_large(src: &str, start: usize, end: usize, budget: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for s in text::sentences(&src[start..end]) {
        let (s0, s1) = (start + s.start, start + s.end);
        if let Some(t) = token::count_within(&src[s0..s1], budget) {
            out.push((s0, s1, t));
            continue;
        }
        let words: Vec<(usize, usize)> = src[s0..s1]
            .split_word_bound_indices()
            .map(|(w0, w)| (s0 + w0, s0 + w0 + w.len()))
            .collect();
        let mut i = 0;
        while i < words.len() {
            let mut j = i;
            while j < words.len() && !src[words[j].0..words[j].1].contains(char::is_alphanumeric) {
                j += 1;
            }
            if j > i && words[j - 1].1 - words[i].0 >= SYMBOL_RUN_BYTES {
                cut_long(src, words[i].0, words[j - 1].1, budget, &mut out);
                i = j;
                continue;
            }
            for &(a, b) in &words[i..j.max(i + 1)] {
                match token::count_within(&src[a..b], budget) {
                    Some(t) => out.push((a, b, t)),
                    None => cut_long(src, a, b, budget, &mut out),
                }
            }
            i = j.max(i + 1);
        }
    }
    out
}

/// Cuts `[a, b)` — a "word" longer than the budget (a base64 blob, text without spaces) —
/// into prefixes that fit, each found in time linear in its own length.
fn cut_long(
    src: &str,
    mut a: usize,
    b: usize,
    budget: usize,
    out: &mut Vec<(usize, usize, usize)>,
) {
    let mut guess = 0;
    while a < b {
        let (len, t) = token::fitting_prefix(&src[a..b], budget, guess);
        out.push((a, a + len, t));
        a += len;
        guess = len;
    }
}

/// Cuts `src` into chunks of about `budget` tokens (never more, except a single character
/// that alone exceeds it). The chunks tile `src`: `chunks[0].start == 0`, each chunk ends
/// where the next starts, and the last ends at `src.len()`.
pub fn chunk(src: &str, structure: Structure, budget: usize) -> Vec<Chunk> {
    let budget = budget.max(1);
    let blocks = blocks(src, structure);
    // Token counting dominates; do it in parallel. A block over the budget is split into
    // pieces that fit; its own exact count is never needed, so never computed.
    enum Sized {
        Fits(usize),
        Split(Vec<(usize, usize, usize)>),
    }
    let sized: Vec<Sized> = blocks
        .par_iter()
        .map(
            |b| match token::count_within(&src[b.start..b.end], budget) {
                Some(t) => Sized::Fits(t),
                None => Sized::Split(split_large(src, b.start, b.end, budget)),
            },
        )
        .collect();

    // Pieces: (start, end, tokens, starts_new_chunk, heading)
    struct Piece {
        start: usize,
        end: usize,
        tokens: usize,
        boundary: bool,
        heading: Option<(usize, String)>,
    }
    let mut pieces = Vec::with_capacity(blocks.len());
    for (b, sized) in blocks.into_iter().zip(sized) {
        let boundary = b.heading.is_some();
        match sized {
            Sized::Fits(t) => pieces.push(Piece {
                start: b.start,
                end: b.end,
                tokens: t,
                boundary,
                heading: b.heading,
            }),
            Sized::Split(parts) => {
                for (i, (s, e, pt)) in parts.into_iter().enumerate() {
                    pieces.push(Piece {
                        start: s,
                        end: e,
                        tokens: pt,
                        boundary: boundary && i == 0,
                        heading: if i == 0 { b.heading.clone() } else { None },
                    });
                }
            }
        }
    }

    let mut chunks: Vec<Chunk> = Vec::new();
    let mut headings: Vec<(usize, String)> = Vec::new();
    let mut section: u32 = 0;
    let mut seen_heading = false;
    // start, end, tokens (the sum of the pieces'), whether it is a single piece (then the
    // sum is the exact count)
    let mut cur: Option<(usize, usize, usize, bool)> = None;
    let mut cur_headings: Vec<String> = Vec::new();
    let mut cur_section = 0;
    let flush = |cur: &mut Option<(usize, usize, usize, bool)>,
                 chunks: &mut Vec<Chunk>,
                 hs: &Vec<String>,
                 sec: u32| {
        if let Some((s, e, t, single)) = cur.take() {
            chunks.push(Chunk {
                start: s,
                end: e,
                // Known exactly for a single piece; 0 = to count.
                tokens: if single { t } else { 0 },
                headings: hs.clone(),
                section: sec,
            });
        }
    };
    for p in pieces {
        if let Some((lvl, title)) = &p.heading {
            flush(&mut cur, &mut chunks, &cur_headings, cur_section);
            if *lvl <= 2 && seen_heading {
                section += 1;
            }
            if *lvl <= 2 && !seen_heading && !chunks.is_empty() {
                section += 1;
            }
            seen_heading = true;
            headings.retain(|(l, _)| l < lvl);
            headings.push((*lvl, title.clone()));
        } else if p.boundary {
            flush(&mut cur, &mut chunks, &cur_headings, cur_section);
        }
        match &mut cur {
            Some((_, e, t, single)) if *t + p.tokens <= budget => {
                *e = p.end;
                *t += p.tokens;
                *single = false;
            }
            _ => {
                flush(&mut cur, &mut chunks, &cur_headings, cur_section);
                cur = Some((p.start, p.end, p.tokens, true));
                cur_headings = headings.iter().map(|(_, h)| h.clone()).collect();
                cur_section = section;
            }
        }
    }
    flush(&mut cur, &mut chunks, &cur_headings, cur_section);
    let chunks = fold_blank_chunks(src, chunks, budget);
    // Packing added up per-piece counts; BPE is not quite additive across piece joins, so
    // a rare chunk lands a token or two over. Re-pack those with exact counts.
    let counted: Vec<Option<usize>> = chunks
        .par_iter()
        .map(|c| match c.tokens {
            t if t > 0 && t <= budget => Some(t),
            _ => token::count_within(&src[c.start..c.end], budget),
        })
        .collect();
    let mut out = Vec::with_capacity(chunks.len());
    for (mut c, t) in chunks.into_iter().zip(counted) {
        match t {
            Some(t) => {
                c.tokens = t;
                out.push(c);
            }
            None => out.extend(repack(src, c, budget)),
        }
    }
    out
}

/// Blank regions of up to this many bytes are folded whole into a neighbour chunk. A bigger
/// one (never in ordinary text: it takes pages of blank lines) keeps its own chunks, which
/// the splitter already cut to the budget; folding it would make a huge chunk to re-pack.
const FOLD_MAX_BYTES: usize = 1024;

/// A whitespace-only chunk (blank lines before a first heading) carries nothing to
/// compress or cite: fold it into the next chunk (the last one into the previous) so spans
/// still tile. One pass; a short text of nothing but whitespace stays one chunk.
fn fold_blank_chunks(src: &str, chunks: Vec<Chunk>, budget: usize) -> Vec<Chunk> {
    let n = chunks.len();
    if n < 2 {
        return chunks;
    }
    let mut out: Vec<Chunk> = Vec::with_capacity(n);
    // Blank chunks waiting to be folded into the next one.
    let mut pending: Vec<Chunk> = Vec::new();
    for (i, mut c) in chunks.into_iter().enumerate() {
        let blank = src[c.start..c.end].trim().is_empty();
        if blank && i + 1 < n {
            pending.push(c);
            continue;
        }
        let region = pending.first().map_or(c.start, |p| p.start);
        if blank {
            // The last chunk is blank: fold it, with the blank chunks before it, into the
            // previous chunk (or keep them as one chunk when there is none).
            if c.end - region <= FOLD_MAX_BYTES {
                c.start = region;
                c.tokens = 0;
                match out.last_mut() {
                    Some(prev) => {
                        prev.end = c.end;
                        prev.tokens = 0;
                    }
                    None => out.push(c),
                }
            } else {
                out.append(&mut pending);
                out.push(c);
            }
            continue;
        }
        if c.start - region > FOLD_MAX_BYTES {
            // Too long to fold whole: keep its chunks, and fold only the last one into `c`
            // when they fit together.
            let last = pending.pop().expect("a region before c");
            out.append(&mut pending);
            match token::count_within(&src[last.start..c.end], budget) {
                Some(t) => {
                    c.start = last.start;
                    c.tokens = t;
                }
                None => out.push(last),
            }
        } else if region < c.start {
            c.start = region;
            c.tokens = 0;
        }
        pending.clear();
        out.push(c);
    }
    out
}

/// Splits an over-budget chunk at sentence/word boundaries, counting exactly.
fn repack(src: &str, c: Chunk, budget: usize) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut start = c.start;
    let mut end = c.start;
    for (_, e, _) in split_large(src, c.start, c.end, budget) {
        if end > start && token::count_within(&src[start..e], budget).is_none() {
            out.push(Chunk {
                start,
                end,
                tokens: token::count(&src[start..end]),
                ..c.clone()
            });
            start = end;
        }
        end = e;
    }
    out.push(Chunk {
        start,
        end: c.end,
        tokens: token::count(&src[start..c.end]),
        ..c
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_tiles(src: &str, chunks: &[Chunk]) {
        let joined: String = chunks.iter().map(|c| &src[c.start..c.end]).collect();
        assert_eq!(joined, src);
    }

    #[test]
    fn headings_start_chunks_and_sections() {
        let src =
            "intro line\n\n# One\n\npara one.\n\n## Two\n\npara two.\n\n### Three\n\nthree.\n";
        let c = chunk(src, Structure::Document, 400);
        check_tiles(src, &c);
        assert_eq!(c.len(), 4);
        assert_eq!(c[1].headings, vec!["One"]);
        assert_eq!(c[3].headings, vec!["One", "Two", "Three"]);
        assert_eq!(
            c.iter().map(|c| c.section).collect::<Vec<_>>(),
            vec![0, 1, 2, 2]
        );
    }

    #[test]
    fn budget_is_respected_and_long_words_are_cut() {
        let mut src = String::new();
        for i in 0..300 {
            src.push_str(&format!("Sentence number {i} talks about trains. "));
        }
        src.push_str(&"x".repeat(5000));
        src.push_str("\n\nend é");
        let c = chunk(&src, Structure::Turn, 50);
        check_tiles(&src, &c);
        assert!(
            c.iter().all(|c| c.tokens <= 50),
            "{:?}",
            c.iter().map(|c| c.tokens).max()
        );
    }

    #[test]
    fn headings_inside_code_fences_are_not_headings() {
        let src = "```\n# not a heading\n\nstill code\n```\n\n# real\ntext\n";
        let c = chunk(src, Structure::Document, 400);
        check_tiles(src, &c);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].headings, vec!["real"]);
    }
}
