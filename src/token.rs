//! Real token counts (cl100k BPE) for every budget in strata: chunk sizes, level targets,
//! context windows. Never a characters-divided-by-four guess.

use tiktoken_rs::CoreBPE;

/// The tokenizer's name, reported in stats and part of the compressor identity.
pub const TOKENIZER: &str = "cl100k_base";

fn bpe() -> &'static CoreBPE {
    tiktoken_rs::cl100k_base_singleton()
}

/// Number of cl100k tokens in `text`.
pub fn count(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    bpe().encode_ordinary(text).len()
}

/// The longest prefix of `text` (cut at a char boundary) that fits in `max` tokens. Used only
/// for pathological inputs, e.g. a single "word" longer than a whole chunk budget.
pub fn truncate_to(text: &str, max: usize) -> &str {
    if count(text) <= max {
        return text;
    }
    // Binary search over char boundaries.
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    let (mut lo, mut hi) = (0usize, bounds.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if count(&text[..bounds[mid]]) <= max {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    &text[..bounds[lo.max(1)]]
}
