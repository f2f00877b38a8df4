//! Replies in a debate. A turn that answers the one before it — "Aye.", "None from me.",
//! "Same here." — says what it is about only through the turn it answers: an adjacency
//! pair, the basic unit of dialogue. What makes a turn a reply here is its shape, not its
//! words: its first sentence is short and holds at most one content word, so its meaning
//! comes from the turn before. A set answer reads the few turns after each turn it read,
//! keeps the replies among them, and finds each reply's *opening*: the nearest earlier turn
//! that is not itself a reply (through a run of replies, such as a roll call). The reply's
//! first sentence is then credited with the opening's words.

use crate::error::Result;
use crate::navigate::Explorer;
use crate::node::{Node, NodeId};
use crate::text;
use std::collections::HashMap;

/// Turns read after each read turn, looking for its replies.
const AFTER: usize = 3;
/// Turns a run of replies may reach back to its opening (a roll call of this many).
const BACK: usize = 6;
/// A reply's first sentence has at most this many words ...
const REPLY_WORDS: usize = 8;
/// ... and at most this many content words (not stop words).
const REPLY_CONTENT: usize = 1;

/// A reply's first sentence and what it answers.
pub(super) struct ReplyTo {
    /// Where the reply sentence starts in its source (as a candidate's `start`).
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) quote: String,
    /// The opening turn's text.
    pub(super) opening: String,
}

/// The first sentence of a turn, trimmed: (start, end) within its text.
fn first_sentence(n: &Node) -> Option<(usize, usize)> {
    let s = text::sentences(&n.text).into_iter().next()?;
    let raw = &n.text[s.start..s.end];
    let start = s.start + (raw.len() - raw.trim_start().len());
    let end = s.end - (raw.len() - raw.trim_end().len());
    (end > start).then_some((start, end))
}

/// Whether a turn is a reply by its shape: a short first sentence with at most
/// [`REPLY_CONTENT`] content words.
fn is_reply(n: &Node) -> bool {
    let Some((a, b)) = first_sentence(n) else {
        return false;
    };
    let first = &n.text[a..b];
    use unicode_segmentation::UnicodeSegmentation;
    first.unicode_words().count() <= REPLY_WORDS
        && text::content_words(first).count() <= REPLY_CONTENT
}

/// The opening a reply answers: the nearest turn before it (`back`, nearest first) that is
/// not a reply itself.
fn opening_of<'n>(n: &Node, back: &[&'n Node]) -> Option<&'n Node> {
    if !is_reply(n) {
        return None;
    }
    back.iter().find(|t| !is_reply(t)).copied()
}

/// Adds to `chunks` the replies among the turns after each of them, and returns every
/// reply among `chunks` (by node) with its opening. Documents have no turns: nothing.
pub(super) fn replies(
    ex: &mut Explorer<'_>,
    chunks: &mut Vec<Node>,
) -> Result<HashMap<NodeId, ReplyTo>> {
    let mut known: HashMap<NodeId, Node> = chunks.iter().map(|n| (n.id, n.clone())).collect();
    // The turns after each read turn, and before each that is a reply: where replies and
    // openings are.
    let mut around: Vec<NodeId> = Vec::new();
    let mut backs: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    let mut forward: Vec<NodeId> = Vec::new();
    for n in chunks.iter() {
        let (back, after) = ex.turns_around(&n.id, if is_reply(n) { BACK } else { 0 }, AFTER);
        for id in after.iter().chain(&back) {
            if !known.contains_key(id) && !around.contains(id) {
                around.push(*id);
            }
        }
        forward.extend(after);
        backs.insert(n.id, back);
    }
    if around.is_empty() && backs.values().all(Vec::is_empty) {
        return Ok(HashMap::new());
    }
    for n in ex.read_turns(
        &around,
        "the turns around the read ones: replies and what they answer",
    )? {
        known.insert(n.id, n);
    }
    let back_of = |ex: &Explorer<'_>, id: &NodeId, backs: &HashMap<NodeId, Vec<NodeId>>| {
        backs
            .get(id)
            .cloned()
            .unwrap_or_else(|| ex.turns_around(id, BACK, 0).0)
    };
    // Replies after the read turns join them.
    let read: std::collections::HashSet<NodeId> = chunks.iter().map(|n| n.id).collect();
    forward.sort();
    forward.dedup();
    for id in forward {
        if read.contains(&id) {
            continue;
        }
        let Some(n) = known.get(&id) else { continue };
        let back: Vec<&Node> = back_of(ex, &id, &backs)
            .iter()
            .map_while(|b| known.get(b))
            .collect();
        if opening_of(n, &back).is_some() {
            chunks.push(n.clone());
        }
    }
    let mut out = HashMap::new();
    for n in chunks.iter() {
        let back: Vec<&Node> = back_of(ex, &n.id, &backs)
            .iter()
            .map_while(|b| known.get(b))
            .collect();
        let (Some(opening), Some((a, b))) = (opening_of(n, &back), first_sentence(n)) else {
            continue;
        };
        let base = n.citations[0].start;
        out.insert(
            n.id,
            ReplyTo {
                start: base + a as u64,
                end: base + b as u64,
                quote: n.text[a..b].to_string(),
                opening: opening.text.clone(),
            },
        );
    }
    Ok(out)
}
