//! The data model: nodes, their content-addressed ids, and the source spans they cite.

use crate::level::Level;
use crate::time::{Time, TimeSpan};
use serde::{Deserialize, Serialize};
use std::fmt;

/// blake3 of a node's level, its inputs and the compressor's identity. Same inputs, same
/// model, same prompt version ⇒ same id ⇒ cache hit.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub [u8; 32]);

/// An id is a blake3 output, so its first eight bytes are already as spread as a hash of
/// all 32: a map keyed by ids hashes those (one word), not the whole id behind a length
/// prefix. The maps' own hasher (randomly keyed: std's SipHash, or foldhash in [`IdMap`])
/// still mixes them, so where ids
/// land in a map is not predictable from the ids. Equal ids have equal first bytes, as
/// `Hash` requires of `Eq`.
impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let [a, b, c, d, e, f, g, h, ..] = self.0;
        state.write_u64(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
    }
}

/// A map keyed by node ids with a fast, randomly seeded hasher (foldhash): for the maps a
/// read builds over a whole tree (tens of thousands of ids) at every process start.
pub type IdMap<V> = std::collections::HashMap<NodeId, V, foldhash::fast::RandomState>;

impl NodeId {
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    pub fn from_hex(s: &str) -> Option<NodeId> {
        blake3::Hash::from_hex(s.trim())
            .ok()
            .map(|h| NodeId(*h.as_bytes()))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", &self.to_hex()[..12])
    }
}

/// Domain-separated hasher for node ids. Every field is length-prefixed so that no two
/// different inputs can produce the same byte stream.
pub(crate) struct IdHasher(blake3::Hasher);

impl IdHasher {
    pub(crate) fn new(level: Level, compressor: &str) -> Self {
        let mut h = blake3::Hasher::new();
        h.update(b"strata-node-v1");
        h.update(&[level.as_u8()]);
        let mut me = IdHasher(h);
        me.bytes(compressor.as_bytes());
        me
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }
    /// (The field-by-field form of [`derived_id`], kept to test that it is unchanged.)
    #[cfg(test)]
    pub(crate) fn id(&mut self, id: &NodeId) -> &mut Self {
        self.0.update(&id.0);
        self
    }
    pub(crate) fn finish(&self) -> NodeId {
        NodeId(*self.0.finalize().as_bytes())
    }
}

/// The id of a FULL node of a source without a time: its scope, its source, its span and
/// its verbatim text ([`full_id_at`] adds the time of a source that has one). The scope is
/// part of it because a node belongs to one scope (its index document is filtered by it):
/// two scopes ingesting the same file must not share, and so overwrite, its nodes.
/// Lengths go first, so no two (scope, source) pairs hash alike.
///
/// A source's time is source data: the same words said at another time are another
/// statement, so re-ingesting a source with another time makes new nodes (and rebuilds
/// what is derived from them, whose labels show the time). A source without a time
/// hashes exactly as before times existed, so the ids of existing stores stay valid; with
/// one, one more length-prefixed field follows the text, so no timed id equals an untimed
/// one.
pub fn full_id(scope: &str, source: &str, start: usize, end: usize, text: &str) -> NodeId {
    full_id_at(scope, source, start, end, text, None)
}

/// [`full_id`] of a chunk of a source said or written at `time`.
pub fn full_id_at(
    scope: &str,
    source: &str,
    start: usize,
    end: usize,
    text: &str,
    time: Option<&Time>,
) -> NodeId {
    let mut h = IdHasher::new(Level::Full, "");
    h.bytes(&(scope.len() as u64).to_le_bytes())
        .bytes(scope.as_bytes())
        .bytes(&(source.len() as u64).to_le_bytes())
        .bytes(source.as_bytes())
        .bytes(&(start as u64).to_le_bytes())
        .bytes(&(end as u64).to_le_bytes())
        .bytes(text.as_bytes());
    if let Some(t) = time {
        // The normalised form as given (instant, offset, date or not): one spelling each.
        h.bytes(t.to_string().as_bytes());
    }
    h.finish()
}

/// The id of a derived node: its level, its inputs' ids (which transitively cover their
/// text) and the compressor identity (model id + prompt version + level targets).
///
/// The bytes [`IdHasher`] would feed blake3 field by field are laid out once and hashed in
/// one call: the same id, at about half the instructions (a plan computes one per chunk,
/// per DETAILED's tags and per group each time it is loaded).
pub fn derived_id(level: Level, compressor: &str, inputs: &[NodeId]) -> NodeId {
    const DOMAIN: &[u8] = b"strata-node-v1";
    let mut buf: Vec<u8> =
        Vec::with_capacity(DOMAIN.len() + 1 + 8 + compressor.len() + 8 + 8 + 32 * inputs.len());
    buf.extend_from_slice(DOMAIN);
    buf.push(level.as_u8());
    buf.extend_from_slice(&(compressor.len() as u64).to_le_bytes());
    buf.extend_from_slice(compressor.as_bytes());
    // The count of inputs, a field of 8 bytes: its length, then it.
    buf.extend_from_slice(&8u64.to_le_bytes());
    buf.extend_from_slice(&(inputs.len() as u64).to_le_bytes());
    for i in inputs {
        buf.extend_from_slice(&i.0);
    }
    NodeId(*blake3::hash(&buf).as_bytes())
}

/// UTF-8 byte offsets `[start, end)` into a source's text as ingested.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Span {
    pub source: String,
    pub start: u64,
    pub end: u64,
}

/// Merges adjacent spans of the same source (chunks tile their source, so the spans beneath
/// a group collapse to one span per contiguous run).
pub fn merge_spans(spans: impl IntoIterator<Item = Span>) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for s in spans {
        if let Some(last) = out.last_mut()
            && last.source == s.source
            && last.end == s.start
        {
            last.end = s.end;
            continue;
        }
        out.push(s);
    }
    out
}

/// Routing tags, the payload of METADATA nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tags {
    pub keywords: Vec<String>,
    pub entities: Vec<String>,
    pub numbers: Vec<String>,
    pub dates: Vec<String>,
}

/// Where a node sits in its scope.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Debate rounds beneath the node, ascending.
    pub rounds: Vec<u32>,
    /// Speakers beneath the node, in order of first appearance.
    pub speakers: Vec<String>,
    /// Heading path of a document chunk or section.
    pub headings: Vec<String>,
    /// Routing tags (METADATA nodes only).
    pub tags: Option<Tags>,
    /// When the sources beneath were said or written (FULL: its source's time; derived:
    /// the earliest and latest beneath); `None` when none has a time.
    pub time: Option<TimeSpan>,
}

/// A METADATA node's text: its place (speakers, rounds, time, section) and its tags, as
/// one line. The store keeps a node whose text is this without the text (it is made
/// again from the node's meta when read).
pub fn tags_text(meta: &Meta, t: &Tags) -> String {
    let mut parts = Vec::new();
    if !meta.speakers.is_empty() {
        parts.push(format!("speakers: {}", meta.speakers.join(", ")));
    }
    if let (Some(a), Some(b)) = (meta.rounds.first(), meta.rounds.last()) {
        parts.push(if a == b {
            format!("round: {a}")
        } else {
            format!("rounds: {a}-{b}")
        });
    }
    if let Some(t) = &meta.time {
        parts.push(format!("time: {}", t.date_label()));
    }
    if !meta.headings.is_empty() {
        parts.push(format!("section: {}", meta.headings.join(" › ")));
    }
    for (name, v) in [
        ("entities", &t.entities),
        ("numbers", &t.numbers),
        ("dates", &t.dates),
        ("keywords", &t.keywords),
    ] {
        if !v.is_empty() {
            parts.push(format!("{name}: {}", v.join(", ")));
        }
    }
    parts.join("; ")
}

/// One node of the level tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    pub scope: String,
    pub level: Level,
    pub text: String,
    pub children: Vec<NodeId>,
    /// FULL nodes: exactly their own span. Others: the spans of every FULL chunk beneath,
    /// adjacent ones merged.
    pub citations: Vec<Span>,
    /// cl100k tokens of `text`.
    pub tokens: u32,
    pub meta: Meta,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds; `None` = never expires (FULL nodes, or TTL 0).
    pub expires_at: Option<u64>,
}

impl Node {
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|t| t > now)
    }
}

/// Why a node's text is not (only) its model's: the offline fallback made it, or it was
/// built over such a node. Stored beside the node (`Store::fallback_mark`), never part of
/// its id: the id says which model *should* have made the node, the mark says it did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackMark {
    /// The model did not answer (connection refused, timeouts, 5xx or 429 after the
    /// client's retries): the fallback made the node. Retried once the model answers.
    ModelUnavailable,
    /// The model made this node, over inputs the fallback made during an outage: its
    /// inputs will change when they are retried, so it is retried with them.
    BuiltOverFallback,
    /// The model's outputs were empty; at temperature 0 they would be again: not retried.
    Empty,
    /// The model's outputs were over budget (or cut off at their token limit): not retried.
    OverBudget,
    /// The model's outputs stated facts their inputs lack: not retried.
    Unfaithful,
    /// The model server refused the request (a 4xx) or its reply was no completion:
    /// not retried automatically.
    Refused,
    /// The prompt would have exceeded `model.context_tokens`: not sent.
    OverContext,
}

impl FallbackMark {
    /// Whether the next build with the model makes this node again.
    pub fn is_retried(self) -> bool {
        matches!(
            self,
            FallbackMark::ModelUnavailable | FallbackMark::BuiltOverFallback
        )
    }
}

/// Words that say who, when and where a node is from: speakers, rounds, the names of its
/// sources (when few) and its heading path. Indexed with the node, and credited to every
/// sentence of a chunk when the question names them.
pub fn context_label(n: &Node) -> String {
    let mut parts: Vec<String> = Vec::new();
    parts.extend(n.meta.speakers.iter().cloned());
    parts.extend(n.meta.rounds.iter().map(|r| format!("round {r}")));
    let mut sources: Vec<&str> = n.citations.iter().map(|s| s.source.as_str()).collect();
    sources.dedup();
    if sources.len() <= 4 {
        for s in sources {
            // A debate turn's id is `file#line`: the file says nothing about the turn.
            if n.meta.speakers.is_empty() {
                let name = std::path::Path::new(s)
                    .file_stem()
                    .and_then(|x| x.to_str())
                    .unwrap_or(s);
                parts.push(name.replace(['-', '_', '.'], " "));
            }
        }
    }
    parts.extend(n.meta.headings.iter().cloned());
    if let Some(t) = &n.meta.time {
        parts.push(time_words(t));
    }
    parts.join(" ")
}

/// When a node was said, in the words a question uses: `Wednesday 4 March 2026`, or
/// `4 March 2026 to 9 March 2026` for a span of days. Weekday, day, month and year are
/// each a word a question may name ("in March", "on Wednesday", "in 2026").
pub(crate) fn time_words(t: &TimeSpan) -> String {
    let (a, b) = (t.first.date(), t.last.date());
    if a == b {
        a.format("%A %-d %B %Y").to_string()
    } else {
        format!("{} to {}", a.format("%-d %B %Y"), b.format("%-d %B %Y"))
    }
}

#[cfg(test)]
mod derived_id_tests {
    use super::*;

    /// The field-by-field form `derived_id` had (and `IdHasher` still is): ids in stores
    /// written before must not change.
    fn by_fields(level: Level, compressor: &str, inputs: &[NodeId]) -> NodeId {
        let mut h = IdHasher::new(level, compressor);
        h.bytes(&(inputs.len() as u64).to_le_bytes());
        for i in inputs {
            h.id(i);
        }
        h.finish()
    }

    #[test]
    fn derived_ids_are_the_ids_stores_already_hold() {
        let ids: Vec<NodeId> = (0..40u8).map(|i| NodeId([i; 32])).collect();
        for level in [
            Level::Detailed,
            Level::Summary,
            Level::Abstract,
            Level::Metadata,
        ] {
            for compressor in ["", "offline-extractive-v4+salience-v5", &"x".repeat(300)] {
                for n in [0, 1, 2, 3, 40] {
                    assert_eq!(
                        derived_id(level, compressor, &ids[..n]),
                        by_fields(level, compressor, &ids[..n]),
                        "{level:?} {compressor} {n}"
                    );
                }
            }
        }
        assert_eq!(
            derived_id(Level::Summary, "c", &ids[..2]).to_hex(),
            PINNED,
            "a derived id changed: every store's derived nodes would be rebuilt"
        );
    }
    const PINNED: &str = "b0ec92f1aa577846aa7ed12da26f6a0a8e27f0db02d3d59dd89db2084066c43a";
}
