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

/// The blocks of a source, in order: heading lines and paragraphs. Blank lines stick to
/// the block before them, so blocks tile the text. A block is handed out once the line
/// after it starts another, so a source of millions of blocks is never listed whole.
struct Blocks<'a> {
    lines: std::str::SplitInclusive<'a, char>,
    structure: Structure,
    pos: usize,
    in_fence: bool,
    para_open: bool,
    /// The last block begun; lines may still be added to it.
    open: Option<Block>,
}

impl<'a> Blocks<'a> {
    fn new(src: &'a str, structure: Structure) -> Blocks<'a> {
        Blocks {
            lines: src.split_inclusive('\n'),
            structure,
            pos: 0,
            in_fence: false,
            para_open: false,
            open: None,
        }
    }

    /// Begins a block; returns the one it ends, if any.
    fn begin(&mut self, b: Block) -> Option<Block> {
        self.open.replace(b)
    }
}

impl Iterator for Blocks<'_> {
    type Item = Block;

    fn next(&mut self) -> Option<Block> {
        while let Some(line) = self.lines.next() {
            let start = self.pos;
            self.pos += line.len();
            let end = self.pos;
            let trimmed = line.trim();
            let fence = trimmed.starts_with("```") || trimmed.starts_with("~~~");
            let heading = if self.structure == Structure::Document && !self.in_fence {
                heading_of(line)
            } else {
                None
            };
            if fence {
                self.in_fence = !self.in_fence;
            }
            let blank = trimmed.is_empty() && !self.in_fence;
            let done = if let Some(h) = heading {
                self.para_open = false;
                self.begin(Block {
                    start,
                    end,
                    heading: Some(h),
                })
            } else if blank {
                self.para_open = false;
                match &mut self.open {
                    Some(b) => {
                        b.end = end;
                        None
                    }
                    None => self.begin(Block {
                        start,
                        end,
                        heading: None,
                    }),
                }
            } else if self.para_open {
                self.open.as_mut().expect("open paragraph").end = end;
                None
            } else {
                self.para_open = true;
                self.begin(Block {
                    start,
                    end,
                    heading: None,
                })
            };
            if done.is_some() {
                return done;
            }
        }
        self.open.take()
    }
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

/// Hands `f` the pieces of a block that is larger than the budget, in order: sentences,
/// and words of sentences that are themselves too long, as `(start, end, tokens)` relative
/// to the source. Every piece fits the budget, except a single character that alone
/// exceeds it. Nothing is listed: a megabyte-long sentence costs no memory per word.
fn split_each(
    src: &str,
    start: usize,
    end: usize,
    budget: usize,
    f: &mut impl FnMut(usize, usize, usize),
) {
    text::each_sentence(&src[start..end], |s| {
        let (s0, s1) = (start + s.start, start + s.end);
        if let Some(t) = token::count_within(&src[s0..s1], budget) {
            f(s0, s1, t);
            return;
        }
        let mut run = SymbolRun::default();
        for (w0, w) in src[s0..s1].split_word_bound_indices() {
            let (a, b) = (s0 + w0, s0 + w0 + w.len());
            if w.contains(char::is_alphanumeric) {
                run.finish(src, budget, f);
                word(src, a, b, budget, f);
            } else {
                run.push(a, b);
            }
        }
        run.finish(src, budget, f);
    });
}

/// [`split_each`], listed.
fn split_large(src: &str, start: usize, end: usize, budget: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    split_each(src, start, end, budget, &mut |a, b, t| out.push((a, b, t)));
    out
}

/// One word segment as a piece, or cut when it alone is over the budget.
fn word(src: &str, a: usize, b: usize, budget: usize, f: &mut impl FnMut(usize, usize, usize)) {
    match token::count_within(&src[a..b], budget) {
        Some(t) => f(a, b, t),
        None => cut_long(src, a, b, budget, f),
    }
}

/// Consecutive word segments without a letter or digit: cut as one long word when they
/// reach [`SYMBOL_RUN_BYTES`], else handed out segment by segment (only then are the
/// segments kept, so a run holds at most that many bytes' worth).
#[derive(Default)]
struct SymbolRun {
    start: usize,
    end: usize,
    segments: Vec<(usize, usize)>,
    open: bool,
}

impl SymbolRun {
    fn push(&mut self, a: usize, b: usize) {
        if !self.open {
            self.open = true;
            self.start = a;
            self.segments.clear();
        }
        self.end = b;
        if self.end - self.start >= SYMBOL_RUN_BYTES {
            self.segments.clear();
        } else {
            self.segments.push((a, b));
        }
    }

    fn finish(&mut self, src: &str, budget: usize, f: &mut impl FnMut(usize, usize, usize)) {
        if !std::mem::take(&mut self.open) {
            return;
        }
        if self.end - self.start >= SYMBOL_RUN_BYTES {
            cut_long(src, self.start, self.end, budget, f);
        } else {
            for &(a, b) in &self.segments {
                word(src, a, b, budget, f);
            }
        }
        self.segments.clear();
    }
}

/// Cuts `[a, b)` — a "word" longer than the budget (a base64 blob, text without spaces) —
/// into prefixes that fit, each found in time linear in its own length.
fn cut_long(
    src: &str,
    mut a: usize,
    b: usize,
    budget: usize,
    f: &mut impl FnMut(usize, usize, usize),
) {
    let mut guess = 0;
    while a < b {
        let (len, t) = token::fitting_prefix(&src[a..b], budget, guess);
        f(a, a + len, t);
        a += len;
        guess = len;
    }
}

/// How much of a source the chunker lists at once. The chunks do not depend on it.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// A block over the budget and over this many bytes (a paragraph of megabytes: a file
    /// without line breaks or blank lines) is split while it is packed, piece by piece,
    /// instead of having its pieces (one per word, at worst) listed in parallel.
    list_max_bytes: usize,
    /// Blocks are sized in parallel in windows of at most this many bytes and blocks, so
    /// what is listed at once is bounded by the window, not by the source.
    window_bytes: usize,
    window_blocks: usize,
}

const LIMITS: Limits = Limits {
    list_max_bytes: 1 << 20,
    window_bytes: 4 << 20,
    window_blocks: 1 << 16,
};

/// Cuts `src` into chunks of about `budget` tokens (never more, except a single character
/// that alone exceeds it). The chunks tile `src`: `chunks[0].start == 0`, each chunk ends
/// where the next starts, and the last ends at `src.len()`.
///
/// Memory: the chunks, plus a window of blocks; never a list per word or sentence of the
/// whole source.
pub fn chunk(src: &str, structure: Structure, budget: usize) -> Vec<Chunk> {
    chunk_within(src, structure, budget, LIMITS)
}

fn chunk_within(src: &str, structure: Structure, budget: usize, limits: Limits) -> Vec<Chunk> {
    let budget = budget.max(1);
    // Token counting dominates; do it in parallel. A block over the budget is split into
    // pieces that fit; its own exact count is never needed, so never computed.
    enum Sized {
        Fits(usize),
        Split(Vec<(usize, usize, usize)>),
        /// Too big to list: split while packing.
        Stream,
    }
    let mut blocks = Blocks::new(src, structure).peekable();
    let mut packer = Packer::new(budget);
    let mut window: Vec<Block> = Vec::new();
    loop {
        window.clear();
        let mut bytes = 0;
        loop {
            let room = limits.window_bytes.saturating_sub(bytes);
            let first = window.is_empty();
            let Some(b) = blocks.next_if(|b| first || b.end - b.start <= room) else {
                break;
            };
            bytes += b.end - b.start;
            window.push(b);
            if window.len() >= limits.window_blocks {
                break;
            }
        }
        if window.is_empty() {
            break;
        }
        let sized: Vec<Sized> = window
            .par_iter()
            .map(
                |b| match token::count_within(&src[b.start..b.end], budget) {
                    Some(t) => Sized::Fits(t),
                    None if b.end - b.start > limits.list_max_bytes => Sized::Stream,
                    None => Sized::Split(split_large(src, b.start, b.end, budget)),
                },
            )
            .collect();
        for (b, sized) in window.iter().zip(sized) {
            let heading = b.heading.as_ref();
            match sized {
                Sized::Fits(t) => packer.push(b.start, b.end, t, heading),
                Sized::Split(parts) => {
                    for (i, (s, e, t)) in parts.into_iter().enumerate() {
                        packer.push(s, e, t, heading.filter(|_| i == 0));
                    }
                }
                Sized::Stream => {
                    let mut first = true;
                    split_each(src, b.start, b.end, budget, &mut |s, e, t| {
                        packer.push(s, e, t, heading.filter(|_| first));
                        first = false;
                    });
                }
            }
        }
    }
    let chunks = fold_blank_chunks(src, packer.finish(), budget);
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

/// Packs pieces, in order, into chunks of at most the budget (by the sum of the pieces'
/// counts); a heading starts a chunk, and a level-1 or level-2 heading a section.
struct Packer {
    budget: usize,
    chunks: Vec<Chunk>,
    /// The heading path in effect: (level, title).
    headings: Vec<(usize, String)>,
    section: u32,
    seen_heading: bool,
    /// The chunk being packed: start, end, tokens (the sum of the pieces'), whether it is
    /// a single piece (then the sum is the exact count).
    cur: Option<(usize, usize, usize, bool)>,
    cur_headings: Vec<String>,
    cur_section: u32,
}

impl Packer {
    fn new(budget: usize) -> Packer {
        Packer {
            budget,
            chunks: Vec::new(),
            headings: Vec::new(),
            section: 0,
            seen_heading: false,
            cur: None,
            cur_headings: Vec::new(),
            cur_section: 0,
        }
    }

    /// Adds the piece `[start, end)` of `tokens` tokens; `heading` when it is a heading
    /// line (or begins with one).
    fn push(&mut self, start: usize, end: usize, tokens: usize, heading: Option<&(usize, String)>) {
        if let Some((lvl, title)) = heading {
            self.flush();
            if *lvl <= 2 && (self.seen_heading || !self.chunks.is_empty()) {
                self.section += 1;
            }
            self.seen_heading = true;
            self.headings.retain(|(l, _)| l < lvl);
            self.headings.push((*lvl, title.clone()));
        }
        match &mut self.cur {
            Some((_, e, t, single)) if *t + tokens <= self.budget => {
                *e = end;
                *t += tokens;
                *single = false;
            }
            _ => {
                self.flush();
                self.cur = Some((start, end, tokens, true));
                self.cur_headings = self.headings.iter().map(|(_, h)| h.clone()).collect();
                self.cur_section = self.section;
            }
        }
    }

    fn flush(&mut self) {
        if let Some((s, e, t, single)) = self.cur.take() {
            self.chunks.push(Chunk {
                start: s,
                end: e,
                // Known exactly for a single piece; 0 = to count.
                tokens: if single { t } else { 0 },
                headings: self.cur_headings.clone(),
                section: self.cur_section,
            });
        }
    }

    fn finish(mut self) -> Vec<Chunk> {
        self.flush();
        self.chunks
    }
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

    /// Listing less at once (small windows, every block over the budget split while
    /// packing) cuts exactly the same chunks as listing everything.
    #[test]
    fn the_chunks_do_not_depend_on_how_much_is_listed_at_once() {
        let all = Limits {
            list_max_bytes: usize::MAX,
            window_bytes: usize::MAX,
            window_blocks: usize::MAX,
        };
        let mut samples = vec![
            "intro\n\n# One\n\npara one.\n\n## Two\n\n```\n# no\n```\n\n### Three\n\nthree.\n"
                .repeat(40),
            "Sentence number seven talks about trains. ".repeat(400),
            format!(
                "{}{}{}",
                "word ".repeat(3000),
                "-".repeat(3000),
                " and more. ".repeat(50)
            ),
            format!(
                "a {} b {} c\n\n{}",
                "x".repeat(9000),
                ". ".repeat(700),
                "\n".repeat(3000)
            ),
        ];
        let mut md = String::new();
        for i in 0..300 {
            match i % 7 {
                0 => md.push_str(&format!("# Part {i}\n\n")),
                3 => md.push_str(&format!("## Sub {i}\n")),
                _ => {}
            }
            md.push_str(&"Mr. Smith went to Washington; he paid $1.2 billion! ".repeat(i % 13 + 1));
            md.push_str(if i % 5 == 0 { "\n\n\n" } else { "\n" });
        }
        samples.push(md);
        for src in &samples {
            for structure in [Structure::Document, Structure::Turn] {
                for budget in [16, 50, 400] {
                    let want = chunk_within(src, structure, budget, all);
                    check_tiles(src, &want);
                    for limits in [
                        Limits {
                            list_max_bytes: 0,
                            window_bytes: 0,
                            window_blocks: 1,
                        },
                        Limits {
                            list_max_bytes: 64,
                            window_bytes: 500,
                            window_blocks: 3,
                        },
                    ] {
                        assert_eq!(chunk_within(src, structure, budget, limits), want);
                    }
                }
            }
        }
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
