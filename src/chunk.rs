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

/// Pieces of a block that is larger than the budget: sentences, and words of sentences that
/// are themselves too long. Returns `(start, end, tokens)` relative to the source.
fn split_large(src: &str, start: usize, end: usize, budget: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for s in text::sentences(&src[start..end]) {
        let (s0, s1) = (start + s.start, start + s.end);
        let t = token::count(&src[s0..s1]);
        if t <= budget {
            out.push((s0, s1, t));
            continue;
        }
        for (w0, w) in src[s0..s1].split_word_bound_indices() {
            let mut a = s0 + w0;
            let b = a + w.len();
            // A "word" longer than the budget (a base64 blob, say): cut at char boundaries.
            while a < b {
                let piece = token::truncate_to(&src[a..b], budget);
                let len = piece
                    .len()
                    .max(src[a..b].chars().next().map_or(1, char::len_utf8));
                out.push((a, a + len, token::count(&src[a..a + len])));
                a += len;
            }
        }
    }
    out
}

/// Cuts `src` into chunks of about `budget` tokens (never more, except a single character
/// that alone exceeds it). The chunks tile `src`: `chunks[0].start == 0`, each chunk ends
/// where the next starts, and the last ends at `src.len()`.
pub fn chunk(src: &str, structure: Structure, budget: usize) -> Vec<Chunk> {
    let budget = budget.max(1);
    let blocks = blocks(src, structure);
    // Token counting dominates; do it in parallel.
    let block_tokens: Vec<usize> = blocks
        .par_iter()
        .map(|b| token::count(&src[b.start..b.end]))
        .collect();

    // Pieces: (start, end, tokens, starts_new_chunk, heading)
    struct Piece {
        start: usize,
        end: usize,
        tokens: usize,
        boundary: bool,
        heading: Option<(usize, String)>,
    }
    let large: Vec<Option<Vec<(usize, usize, usize)>>> = blocks
        .par_iter()
        .zip(block_tokens.par_iter())
        .map(|(b, &t)| (t > budget).then(|| split_large(src, b.start, b.end, budget)))
        .collect();
    let mut pieces = Vec::with_capacity(blocks.len());
    for ((b, t), big) in blocks.into_iter().zip(block_tokens).zip(large) {
        let boundary = b.heading.is_some();
        match big {
            None => pieces.push(Piece {
                start: b.start,
                end: b.end,
                tokens: t,
                boundary,
                heading: b.heading,
            }),
            Some(parts) => {
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
    let mut cur: Option<(usize, usize, usize)> = None; // start, end, approx tokens
    let mut cur_headings: Vec<String> = Vec::new();
    let mut cur_section = 0;
    let flush = |cur: &mut Option<(usize, usize, usize)>,
                 chunks: &mut Vec<Chunk>,
                 hs: &Vec<String>,
                 sec: u32| {
        if let Some((s, e, _)) = cur.take() {
            chunks.push(Chunk {
                start: s,
                end: e,
                tokens: 0,
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
            Some((_, e, t)) if *t + p.tokens <= budget => {
                *e = p.end;
                *t += p.tokens;
            }
            _ => {
                flush(&mut cur, &mut chunks, &cur_headings, cur_section);
                cur = Some((p.start, p.end, p.tokens));
                cur_headings = headings.iter().map(|(_, h)| h.clone()).collect();
                cur_section = section;
            }
        }
    }
    flush(&mut cur, &mut chunks, &cur_headings, cur_section);
    // A whitespace-only chunk (blank lines before a first heading) carries nothing to
    // compress or cite: fold it into its neighbour so spans still tile.
    let mut i = 0;
    while chunks.len() > 1 && i < chunks.len() {
        if src[chunks[i].start..chunks[i].end].trim().is_empty() {
            if i + 1 < chunks.len() {
                chunks[i + 1].start = chunks[i].start;
            } else {
                chunks[i - 1].end = chunks[i].end;
            }
            chunks.remove(i);
        } else {
            i += 1;
        }
    }
    chunks
        .par_iter_mut()
        .for_each(|c| c.tokens = token::count(&src[c.start..c.end]));
    // Packing added up per-piece counts; BPE is not quite additive across piece joins, so
    // a rare chunk lands a token or two over. Re-pack those with exact counts.
    if chunks.iter().any(|c| c.tokens > budget) {
        chunks = chunks
            .into_iter()
            .flat_map(|c| {
                if c.tokens <= budget {
                    vec![c]
                } else {
                    repack(src, c, budget)
                }
            })
            .collect();
    }
    chunks
}

/// Splits an over-budget chunk at sentence/word boundaries, counting exactly.
fn repack(src: &str, c: Chunk, budget: usize) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut start = c.start;
    let mut end = c.start;
    for (_, e, _) in split_large(src, c.start, c.end, budget) {
        if end > start && token::count(&src[start..e]) > budget {
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
