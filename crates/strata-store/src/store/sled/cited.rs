//! Node format 3 (layout 5): a node's text kept as the byte ranges of its sources it
//! quotes, with only what it does not quote spelled out.
//!
//! A FULL node's text is its source's text at its span, and the offline compressor's
//! DETAILED, SUMMARY and ABSTRACT nodes are sentences of the chunks beneath them: stored
//! as text, every source was kept two to four times over (issue 23: the store was 5× its
//! input). A node of format 3 holds, instead of its text, a list of pieces — text of its
//! own, or a range of one of its citations — and the first 8 bytes of the blake3 of the
//! text they make. Reading one reads the texts it cites (through [`Texts`], a cache of
//! the sources' texts) and checks the hash: a node whose pieces no longer make its text
//! (its source was replaced or forgotten: the chunks it was built over are gone, so the
//! node is stale) reads as absent, like any node a build would have to make again.
//!
//! A METADATA node's text is its tags written out: kept as one piece that says so.
//!
//! Which nodes are kept so is decided when they are written: a node whose pieces quote at
//! least half its text, or a METADATA node whose text is its tags; any other (a model's own
//! words) stays format 2.

use super::super::{Record, decode, encode};
use crate::error::Result;
use crate::level::Level;
use crate::node::{Meta, Node, NodeId, Span};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The format byte of a node kept as pieces.
pub(super) const FORMAT: u8 = 3;

/// The shortest range worth citing instead of copying (a piece costs up to ~8 bytes).
const MIN_CITED: usize = 16;

/// Occurrences of a probe tried per cited text before the longest is taken.
const TRIES: usize = 8;

/// Text of its own a node may accumulate before quoting less than it writes gives up.
const GIVE_UP_AFTER: usize = 512;

/// One piece of a node's text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) enum Piece {
    /// Text the node does not quote (labels, separators, a model's words).
    Own(String),
    /// `len` bytes of citation `span`'s text, from `start` bytes past the citation's start.
    Cited { span: u32, start: u32, len: u32 },
    /// The node's tags as text ([`crate::node::tags_text`] of its meta): a METADATA node.
    Tags,
}

/// A node of format 3: the node's fields but its id (the record's key) and its text, then
/// its pieces and the check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Packed {
    scope: String,
    level: Level,
    children: Vec<NodeId>,
    citations: Vec<Span>,
    tokens: u32,
    meta: Meta,
    created_at: u64,
    expires_at: Option<u64>,
    pieces: Vec<Piece>,
    check: [u8; 8],
}

impl Record for Packed {
    const VERSION: u8 = FORMAT;
}

fn check_of(text: &str) -> [u8; 8] {
    let h = blake3::hash(text.as_bytes());
    let mut c = [0u8; 8];
    c.copy_from_slice(&h.as_bytes()[..8]);
    c
}

/// The format of a stored node value (its first byte without the compression flag).
pub(super) fn format_of(value: &[u8]) -> Option<u8> {
    value.first().map(|v| v & !super::super::COMPRESSED)
}

/// The sources' texts as the nodes cite them: read from the `texts` tree, kept decoded
/// (up to [`Texts::BUDGET`] bytes, then dropped all at once). A text kept here that a
/// write has since replaced makes a node's check fail, and the node is read again from
/// the tree's current text ([`Texts::forget`] is called after such writes, too).
pub(super) struct Texts {
    map: Mutex<Kept>,
}

/// The texts kept, by source key, and their bytes; the keys of texts too long to cite.
#[derive(Default)]
struct Kept {
    texts: HashMap<Vec<u8>, Arc<str>>,
    bytes: usize,
    too_long: std::collections::HashSet<Vec<u8>>,
}

/// A source whose text is longer than this is not cited by the nodes written over it (they
/// keep their text, format 2): reading one of its nodes must not decode the whole of it.
pub(super) const MAX_CITED: usize = 8 << 20;

impl Texts {
    const BUDGET: usize = 64 << 20;

    pub(super) fn new() -> Texts {
        Texts {
            map: Mutex::new(Kept::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The text under `key` in `tree`: from memory when it was read before, unless
    /// `fresh`.
    pub(super) fn get(
        &self,
        tree: &sled::Tree,
        key: &[u8],
        fresh: bool,
    ) -> Result<Option<Arc<str>>> {
        if !fresh && let Some(t) = self.lock().texts.get(key) {
            return Ok(Some(t.clone()));
        }
        self.read(tree, key)
    }

    /// The text under `key` for a node about to be written, when it may be cited (no
    /// longer than [`MAX_CITED`]; a longer one is not decoded, and remembered as such).
    pub(super) fn citable(&self, tree: &sled::Tree, key: &[u8]) -> Result<Option<Arc<str>>> {
        {
            let g = self.lock();
            if g.too_long.contains(key) {
                return Ok(None);
            }
            if let Some(t) = g.texts.get(key) {
                return Ok((t.len() <= MAX_CITED).then(|| t.clone()));
            }
        }
        let Some(v) = tree.get(key).map_err(super::sled_error)? else {
            return Ok(None);
        };
        // The length the value decodes to, without decoding it: a compressed value's
        // frame says it; a plain one is about its own length.
        let len = match v.split_first() {
            Some((&f, packed)) if f & super::super::COMPRESSED != 0 => {
                zstd::zstd_safe::get_frame_content_size(packed)
                    .ok()
                    .flatten()
                    .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
            }
            _ => v.len(),
        };
        if len > MAX_CITED {
            self.lock().too_long.insert(key.to_vec());
            return Ok(None);
        }
        self.read(tree, key)
    }

    /// The text under `key` read from the tree (and kept).
    fn read(&self, tree: &sled::Tree, key: &[u8]) -> Result<Option<Arc<str>>> {
        let Some(v) = tree.get(key).map_err(super::sled_error)? else {
            self.forget(key);
            return Ok(None);
        };
        let text: Arc<str> = decode::<String>("a source's text", &v)?.into();
        let mut g = self.lock();
        if g.bytes + text.len() > Self::BUDGET {
            g.texts.clear();
            g.bytes = 0;
        }
        g.bytes += text.len();
        if let Some(old) = g.texts.insert(key.to_vec(), text.clone()) {
            g.bytes -= old.len();
        }
        Ok(Some(text))
    }

    /// Drops what is kept of `key` (its source was written or removed).
    pub(super) fn forget(&self, key: &[u8]) {
        let mut g = self.lock();
        if let Some(old) = g.texts.remove(key) {
            g.bytes -= old.len();
        }
        g.too_long.remove(key);
    }
}

/// The bytes of `text` at `span`, when the span lies within it.
fn at<'a>(text: &'a str, span: &Span) -> Option<&'a [u8]> {
    let (s, e) = (
        usize::try_from(span.start).ok()?,
        usize::try_from(span.end).ok()?,
    );
    text.as_bytes().get(s..e)
}

/// Encodes `node` for the `nodes` tree: format 3 when its text quotes its citations
/// enough (`bases[i]`: the text of citation `i`, when known), else as any record.
pub(super) fn encode_node(node: &Node, bases: &[Option<&[u8]>]) -> Result<Vec<u8>> {
    let pieces = match &node.meta.tags {
        Some(tags) if node.level == Level::Metadata => {
            (crate::node::tags_text(&node.meta, tags) == node.text).then(|| vec![Piece::Tags])
        }
        _ if node.level != Level::Metadata && node.text.len() >= MIN_CITED => {
            pieces_of(&node.text, bases)
        }
        _ => None,
    };
    if let Some(pieces) = pieces {
        debug_assert_eq!(
            assemble(node, &pieces, |i| bases[i].map(|b| b.to_vec())).as_deref(),
            Some(node.text.as_str())
        );
        let packed = Packed {
            scope: node.scope.clone(),
            level: node.level,
            children: node.children.clone(),
            citations: node.citations.clone(),
            tokens: node.tokens,
            meta: node.meta.clone(),
            created_at: node.created_at,
            expires_at: node.expires_at,
            pieces,
            check: check_of(&node.text),
        };
        return encode(&packed);
    }
    encode(node)
}

/// Decodes a value of the `nodes` tree; a node of format 3 is assembled from the texts
/// `text(span)` gives (`None` when its pieces no longer make its text: see the module).
pub(super) fn decode_node(
    id: NodeId,
    what: &str,
    value: &[u8],
    text: impl Fn(&str, &Span, bool) -> Result<Option<Arc<str>>>,
) -> Result<Option<Node>> {
    if format_of(value) != Some(FORMAT) {
        return decode::<Node>(what, value).map(Some);
    }
    let p = decode::<Packed>(what, value)?;
    let mut node = Node {
        id,
        scope: p.scope,
        level: p.level,
        text: String::new(),
        children: p.children,
        citations: p.citations,
        tokens: p.tokens,
        meta: p.meta,
        created_at: p.created_at,
        expires_at: p.expires_at,
    };
    let (pieces, check) = (p.pieces, p.check);
    // First from the texts kept in memory, then (when that fails) from the tree.
    for fresh in [false, true] {
        let got = assemble(&node, &pieces, |i| {
            text(&node.scope, &node.citations[i], fresh)
                .ok()
                .flatten()
                .and_then(|t| at(&t, &node.citations[i]).map(<[u8]>::to_vec))
        });
        if let Some(t) = got
            && check_of(&t) == check
        {
            node.text = t;
            return Ok(Some(node));
        }
    }
    // The pieces' sources are not readable at all: an error, not a stale node.
    for c in &node.citations {
        text(&node.scope, c, true)?;
    }
    tracing::debug!("{what}: its cited sources changed; read as absent");
    Ok(None)
}

/// The text `pieces` make of `node` (its text aside) and its citations' texts (`base(i)`:
/// citation `i`'s bytes).
fn assemble(
    node: &Node,
    pieces: &[Piece],
    base: impl Fn(usize) -> Option<Vec<u8>>,
) -> Option<String> {
    let mut bases: Vec<Option<Option<Vec<u8>>>> = vec![None; node.citations.len()];
    let mut out: Vec<u8> = Vec::new();
    for p in pieces {
        match p {
            Piece::Own(s) => out.extend_from_slice(s.as_bytes()),
            Piece::Tags => out.extend_from_slice(
                crate::node::tags_text(&node.meta, node.meta.tags.as_ref()?).as_bytes(),
            ),
            Piece::Cited { span, start, len } => {
                let i = *span as usize;
                let slot = bases.get_mut(i)?;
                let b = slot.get_or_insert_with(|| base(i)).as_deref()?;
                let (s, l) = (*start as usize, *len as usize);
                out.extend_from_slice(b.get(s..s.checked_add(l)?)?);
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `text` as pieces quoting `bases`, or `None` when less than half of it is quoted.
fn pieces_of(text: &str, bases: &[Option<&[u8]>]) -> Option<Vec<Piece>> {
    let t = text.as_bytes();
    let finders: Vec<(usize, &[u8])> = bases
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.filter(|b| b.len() >= MIN_CITED).map(|b| (i, b)))
        .collect();
    if finders.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    let (mut p, mut own_from, mut cited) = (0usize, 0usize, 0usize);
    while p < t.len() {
        match longest(&t[p..], &finders) {
            Some((i, at, mut len)) => {
                // Pieces end where the text's characters do.
                while !text.is_char_boundary(p + len) {
                    len -= 1;
                }
                if len < MIN_CITED {
                    p = next_word(t, p);
                    continue;
                }
                if own_from < p {
                    out.push(Piece::Own(text[own_from..p].to_string()));
                }
                out.push(Piece::Cited {
                    span: u32::try_from(i).ok()?,
                    start: u32::try_from(at).ok()?,
                    len: u32::try_from(len).ok()?,
                });
                p += len;
                own_from = p;
                cited += len;
            }
            None => p = next_word(t, p),
        }
        if p - cited > GIVE_UP_AFTER && p - cited > cited {
            return None;
        }
    }
    if own_from < t.len() {
        out.push(Piece::Own(text[own_from..].to_string()));
    }
    (cited * 2 >= t.len()).then_some(out)
}

/// Where the word after the one at `p` starts (past the next space or line break), or
/// the end: always a character boundary.
fn next_word(t: &[u8], p: usize) -> usize {
    match t[p + 1..].iter().position(|&b| b == b' ' || b == b'\n') {
        Some(k) => p + 1 + k + 1,
        None => t.len(),
    }
}

/// The longest prefix of `rest` (of at least [`MIN_CITED`] bytes) found in one of the
/// bases: (which, where, how long).
fn longest(rest: &[u8], bases: &[(usize, &[u8])]) -> Option<(usize, usize, usize)> {
    if rest.len() < MIN_CITED {
        return None;
    }
    let probe = &rest[..MIN_CITED];
    let mut best: Option<(usize, usize, usize)> = None;
    for &(i, b) in bases {
        for at in memchr::memmem::find_iter(b, probe).take(TRIES) {
            let len = MIN_CITED
                + rest[MIN_CITED..]
                    .iter()
                    .zip(&b[at + MIN_CITED..])
                    .take_while(|(x, y)| x == y)
                    .count();
            if best.is_none_or(|(_, _, l)| len > l) {
                best = Some((i, at, len));
                if len == rest.len() {
                    return best;
                }
            }
        }
    }
    best
}

/// The text of each of `node`'s citations within `source`'s text (`None` for citations
/// of other sources, or spans outside it).
pub(super) fn bases_in<'a>(node: &Node, source: &str, text: &'a str) -> Vec<Option<&'a [u8]>> {
    node.citations
        .iter()
        .map(|c| {
            (c.source == source && text.len() <= MAX_CITED)
                .then(|| at(text, c))
                .flatten()
        })
        .collect()
}

/// The citations' texts, each source read once (through `text`).
pub(super) fn bases_of(
    node: &Node,
    text: impl Fn(&Span) -> Result<Option<Arc<str>>>,
) -> Result<Vec<Option<Arc<str>>>> {
    let mut seen: HashMap<&str, Option<Arc<str>>> = HashMap::new();
    let mut out = Vec::with_capacity(node.citations.len());
    for c in &node.citations {
        let t = match seen.get(c.source.as_str()) {
            Some(t) => t.clone(),
            None => {
                let t = text(c)?;
                seen.insert(&c.source, t.clone());
                t
            }
        };
        out.push(t);
    }
    Ok(out)
}

/// `bases_of`'s texts narrowed to each citation's span.
pub(super) fn spans_of<'a>(node: &Node, texts: &'a [Option<Arc<str>>]) -> Vec<Option<&'a [u8]>> {
    node.citations
        .iter()
        .zip(texts)
        .map(|(c, t)| t.as_deref().and_then(|t| at(t, c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Tags;

    const SRC: &str = "The council met on Monday. It voted to fund the Eastgate line at 48 million. \
                       Nobody objected to the river crossing plan. Le conseil a voté au café.";

    fn node(level: Level, text: &str, meta: Meta) -> Node {
        Node {
            id: NodeId([7; 32]),
            scope: "s".into(),
            level,
            text: text.into(),
            children: vec![],
            citations: vec![Span {
                source: "a".into(),
                start: 0,
                end: SRC.len() as u64,
            }],
            tokens: 9,
            meta,
            created_at: 1,
            expires_at: Some(2),
        }
    }

    /// Encodes `n` over `SRC` and reads it back over `now` (the source's text then).
    fn round_trip(n: &Node, now: &str) -> (u8, Option<Node>) {
        let v = encode_node(n, &[Some(SRC.as_bytes())]).unwrap();
        let now: Arc<str> = now.into();
        let back = decode_node(n.id, "node", &v, |scope, c, _| {
            assert_eq!((scope, c.source.as_str()), ("s", "a"));
            Ok(Some(now.clone()))
        })
        .unwrap();
        (format_of(&v).unwrap(), back)
    }

    #[test]
    fn sentences_of_the_source_are_cited_and_labels_kept() {
        let n = node(
            Level::Detailed,
            "alice: It voted to fund the Eastgate line at 48 million. Nobody objected to the river crossing plan.",
            Meta::default(),
        );
        let pieces = pieces_of(&n.text, &[Some(SRC.as_bytes())]).expect("quotes most of it");
        assert_eq!(pieces[0], Piece::Own("alice: ".into()));
        assert!(matches!(pieces[1], Piece::Cited { span: 0, .. }));
        assert_eq!(round_trip(&n, SRC), (FORMAT, Some(n.clone())));
    }

    #[test]
    fn a_node_over_a_source_since_changed_reads_as_absent() {
        let n = node(Level::Full, SRC, Meta::default());
        assert_eq!(round_trip(&n, SRC), (FORMAT, Some(n.clone())));
        let changed = SRC.replace("48", "49");
        assert_eq!(round_trip(&n, &changed), (FORMAT, None));
        assert_eq!(round_trip(&n, "short"), (FORMAT, None));
    }

    #[test]
    fn text_that_quotes_little_stays_text() {
        let n = node(
            Level::Summary,
            "A summary in other words entirely: funding was approved after a long debate about routes.",
            Meta::default(),
        );
        assert_eq!(round_trip(&n, "gone"), (2, Some(n.clone())));
    }

    #[test]
    fn a_metadata_node_keeps_its_tags_not_their_text() {
        let meta = Meta {
            speakers: vec!["alice".into()],
            tags: Some(Tags {
                keywords: vec!["council".into(), "line".into()],
                entities: vec!["Eastgate".into()],
                numbers: vec!["48 million".into()],
                dates: vec!["Monday".into()],
            }),
            ..Meta::default()
        };
        let text = crate::node::tags_text(&meta, meta.tags.as_ref().unwrap());
        let n = node(Level::Metadata, &text, meta.clone());
        assert_eq!(round_trip(&n, "gone"), (FORMAT, Some(n.clone())));
        // Text that is not the tags' stays text.
        let other = node(Level::Metadata, "keywords: something else", meta);
        assert_eq!(round_trip(&other, "gone"), (2, Some(other.clone())));
    }

    #[test]
    fn pieces_end_on_character_boundaries() {
        // "café" in the source, "cafè" here: the bytes of 'é' and 'è' share their first.
        let n = node(
            Level::Detailed,
            "Nobody objected to the river crossing plan. Le conseil a voté au cafè.",
            Meta::default(),
        );
        let (_, back) = round_trip(&n, SRC);
        assert_eq!(back, Some(n));
    }

    /// Reading a node of a very long source must not decode all of it: its nodes keep their
    /// text, and the store does not even decode its text to decide so.
    #[test]
    fn nodes_of_a_source_too_long_to_cite_keep_their_text() {
        let long = SRC.repeat(MAX_CITED / SRC.len() + 1);
        let mut n = node(Level::Full, SRC, Meta::default());
        assert!(bases_in(&n, "a", &long).iter().all(Option::is_none));
        assert_eq!(
            format_of(&encode_node(&n, &bases_in(&n, "a", &long)).unwrap()),
            Some(2)
        );
        n.citations[0].end = SRC.len() as u64;
        assert!(bases_in(&n, "a", SRC).iter().all(Option::is_some));

        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("texts").unwrap();
        tree.insert(b"long", encode(&long).unwrap()).unwrap();
        tree.insert(b"short", encode(&SRC.to_string()).unwrap())
            .unwrap();
        let texts = Texts::new();
        assert_eq!(texts.citable(&tree, b"long").unwrap(), None);
        assert!(texts.lock().too_long.contains(&b"long"[..]));
        assert!(texts.lock().texts.is_empty(), "not decoded");
        assert_eq!(
            texts.citable(&tree, b"short").unwrap().as_deref(),
            Some(SRC)
        );
        // Reading a node's text (not writing one) reads any length.
        assert_eq!(
            texts.get(&tree, b"long", false).unwrap().map(|t| t.len()),
            Some(long.len())
        );
    }
}
