//! Replies in a debate. A turn that answers the one before it — "Aye.", "None from me.",
//! "I second the motion.", "I am with Wes on this one", "And a third one from me: …" —
//! says what it is about only through the turn it answers: an adjacency pair, the basic
//! unit of dialogue. A set answer reads the few turns after each turn it read, keeps the
//! replies among them, and finds each reply's *opening*: the nearest earlier turn that is
//! not itself a reply (through a run of replies, such as a roll call). The reply's first
//! sentence is then credited with the opening's words (at context weight) and performs
//! what the opening called for or stood for ([`text::acts_through`]).

use crate::error::Result;
use crate::navigate::Explorer;
use crate::node::{Node, NodeId};
use crate::text::{self, Act, Reply};
use std::collections::HashMap;

/// Turns read after each read turn, looking for its replies.
const AFTER: usize = 3;
/// Turns a run of replies may reach back to its opening (a roll call of this many).
const BACK: usize = 6;

/// A reply's first sentence and what it stands for through its opening.
pub(super) struct ReplyTo {
    /// Where the reply sentence starts in its source (as a candidate's `start`).
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) quote: String,
    /// The opening turn's text.
    pub(super) opening: String,
    /// What the reply performs through the opening (its own acts aside).
    pub(super) acts: Vec<Act>,
    /// The whole turn answers (a turn that performs what its opening called for), not only
    /// its first sentence.
    pub(super) whole: bool,
}

/// The first sentence of a turn, trimmed: (start, end) within its text.
fn first_sentence(n: &Node) -> Option<(usize, usize)> {
    let s = text::sentences(&n.text).into_iter().next()?;
    let raw = &n.text[s.start..s.end];
    let start = s.start + (raw.len() - raw.trim_start().len());
    let end = s.end - (raw.len() - raw.trim_end().len());
    (end > start).then_some((start, end))
}

fn reply_kind(n: &Node) -> Option<Reply> {
    let (a, b) = first_sentence(n)?;
    text::reply_of(&n.text[a..b])
}

/// How `n` answers the turns before it (`back`, nearest first, as far as they were read),
/// and its opening: for a reply by its first words, the nearest earlier turn that is not
/// one; otherwise, when `n` performs acts, the turn before the run of turns that perform
/// them too, if that turn called for one of them ([`Reply::Called`]).
fn classify<'n>(n: &Node, back: &[&'n Node]) -> Option<(Reply, &'n Node)> {
    if let Some(kind) = reply_kind(n) {
        let opening = back.iter().find(|t| reply_kind(t).is_none())?;
        return Some((kind, opening));
    }
    let acts = text::turn_acts(&n.text);
    if acts.is_empty() {
        return None;
    }
    let opening = back.iter().find(|t| {
        reply_kind(t).is_none() && !text::turn_acts(&t.text).iter().any(|a| acts.contains(a))
    })?;
    text::called_acts(&opening.text)
        .iter()
        .any(|a| acts.contains(a))
        .then_some((Reply::Called, *opening))
}

/// Adds to `chunks` the replies among the turns after each of them, and returns every
/// reply among `chunks` (by node) with its opening. Documents have no turns: nothing.
pub(super) fn replies(
    ex: &mut Explorer<'_>,
    chunks: &mut Vec<Node>,
    asked: Option<Act>,
) -> Result<HashMap<NodeId, ReplyTo>> {
    let mut known: HashMap<NodeId, Node> = chunks.iter().map(|n| (n.id, n.clone())).collect();
    // The turns after each read turn, and before each that may be a reply (by its first
    // words, or as a turn that performs the asked act): where replies and openings are.
    let mut around: Vec<NodeId> = Vec::new();
    let mut backs: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    let mut forward: Vec<NodeId> = Vec::new();
    for n in chunks.iter() {
        let may_reply =
            reply_kind(n).is_some() || asked.is_some_and(|a| text::turn_acts(&n.text).contains(&a));
        let (back, after) = ex.turns_around(&n.id, if may_reply { BACK } else { 0 }, AFTER);
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
        if classify(n, &back).is_some() {
            chunks.push(n.clone());
        }
    }
    let mut out = HashMap::new();
    for n in chunks.iter() {
        let back: Vec<&Node> = back_of(ex, &n.id, &backs)
            .iter()
            .map_while(|b| known.get(b))
            .collect();
        let (Some((kind, opening)), Some((a, b))) = (classify(n, &back), first_sentence(n)) else {
            continue;
        };
        let previous = back.first().map_or("", |t| t.text.as_str());
        let base = n.citations[0].start;
        out.insert(
            n.id,
            ReplyTo {
                start: base + a as u64,
                end: base + b as u64,
                quote: n.text[a..b].to_string(),
                opening: opening.text.clone(),
                acts: text::acts_through(kind, previous, &opening.text),
                whole: kind == Reply::Called,
            },
        );
    }
    Ok(out)
}
