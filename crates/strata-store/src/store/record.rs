//! What the backends keep as bytes, version by version. Every value is bincode behind a
//! format version byte ([`super::encode`]); each type says which version it writes and
//! how it reads the older ones, so a store written by an older strata still opens.
//!
//! Version 2 of nodes and source records (source times, issue 21) added
//! `SourceRecord::time` and `Meta::time`; their version 1 shapes are kept here and read as
//! records without a time. Views (plans) are derived data: one of another version is not
//! read (the engine ignores it and writes a new one at the next complete build).

use super::{ChunkRef, Job, JobOutcome, ScopeHead, ScopeRecord, SourceEntry, SourceRecord};
use crate::level::Level;
use crate::node::{FallbackMark, Meta, Node, NodeId, Span, Tags};
use bincode::error::DecodeError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A value the store keeps as bytes.
pub trait Record: Serialize + DeserializeOwned {
    /// The format version this strata writes.
    const VERSION: u8 = 1;

    /// The oldest version it reads.
    const OLDEST: u8 = Self::VERSION;

    /// Decodes the body of a version from [`Record::OLDEST`] to before [`Record::VERSION`]
    /// (`None`: a version this strata cannot read).
    fn decode_old(_version: u8, _body: &[u8]) -> Option<Result<Self, DecodeError>> {
        None
    }

    /// The versions it reads, for an error message: `version 2`, `versions 1 to 2`.
    fn versions_read() -> String {
        if Self::OLDEST == Self::VERSION {
            format!("version {}", Self::VERSION)
        } else {
            format!("versions {} to {}", Self::OLDEST, Self::VERSION)
        }
    }
}

fn body<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    bincode::serde::decode_from_slice(body, bincode::config::standard()).map(|(v, _)| v)
}

/// Format 1 of a scope: its list inline (read; written only by older stratas).
impl Record for ScopeRecord {}

/// Format 2 of a scope: the head, its entries stored one by one beside it.
impl Record for ScopeHead {
    const VERSION: u8 = 2;
}
impl Record for SourceEntry {}
impl Record for String {}
impl Record for FallbackMark {}
impl Record for Vec<f32> {}
impl Record for Job {}
impl Record for JobOutcome {}

impl Record for Node {
    const VERSION: u8 = 2;
    const OLDEST: u8 = 1;
    fn decode_old(version: u8, b: &[u8]) -> Option<Result<Node, DecodeError>> {
        (version == 1).then(|| body::<v1::Node>(b).map(Node::from))
    }
}

impl Record for SourceRecord {
    const VERSION: u8 = 2;
    const OLDEST: u8 = 1;
    fn decode_old(version: u8, b: &[u8]) -> Option<Result<SourceRecord, DecodeError>> {
        (version == 1).then(|| body::<v1::SourceRecord>(b).map(SourceRecord::from))
    }
}

/// The version 1 shapes (before source times), field for field.
pub(crate) mod v1 {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub(crate) struct Meta {
        pub(crate) rounds: Vec<u32>,
        pub(crate) speakers: Vec<String>,
        pub(crate) headings: Vec<String>,
        pub(crate) tags: Option<Tags>,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub(crate) struct Node {
        pub(crate) id: NodeId,
        pub(crate) scope: String,
        pub(crate) level: Level,
        pub(crate) text: String,
        pub(crate) children: Vec<NodeId>,
        pub(crate) citations: Vec<Span>,
        pub(crate) tokens: u32,
        pub(crate) meta: Meta,
        pub(crate) created_at: u64,
        pub(crate) expires_at: Option<u64>,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub(crate) struct SourceRecord {
        pub(crate) id: String,
        pub(crate) scope: String,
        pub(crate) seq: u64,
        pub(crate) round: Option<u32>,
        pub(crate) speaker: Option<String>,
        pub(crate) hash: [u8; 32],
        pub(crate) bytes: u64,
        pub(crate) chunk_tokens: u32,
        pub(crate) chunks: Vec<ChunkRef>,
    }

    /// Bytes exactly as a strata before source times wrote them.
    #[cfg(test)]
    pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
        let mut out = vec![1];
        out.extend(bincode::serde::encode_to_vec(v, bincode::config::standard()).unwrap());
        out
    }
}

impl From<v1::Node> for Node {
    fn from(n: v1::Node) -> Node {
        Node {
            id: n.id,
            scope: n.scope,
            level: n.level,
            text: n.text,
            children: n.children,
            citations: n.citations,
            tokens: n.tokens,
            meta: Meta {
                rounds: n.meta.rounds,
                speakers: n.meta.speakers,
                headings: n.meta.headings,
                tags: n.meta.tags,
                time: None,
            },
            created_at: n.created_at,
            expires_at: n.expires_at,
        }
    }
}

impl From<v1::SourceRecord> for SourceRecord {
    fn from(r: v1::SourceRecord) -> SourceRecord {
        SourceRecord {
            id: r.id,
            scope: r.scope,
            seq: r.seq,
            round: r.round,
            speaker: r.speaker,
            hash: r.hash,
            bytes: r.bytes,
            chunk_tokens: r.chunk_tokens,
            chunks: r.chunks,
            time: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode, encode};
    use super::*;

    fn old_node() -> v1::Node {
        v1::Node {
            id: crate::node::full_id("s", "a.md", 0, 5, "hello"),
            scope: "s".into(),
            level: Level::Full,
            text: "hello".into(),
            children: Vec::new(),
            citations: vec![Span {
                source: "a.md".into(),
                start: 0,
                end: 5,
            }],
            tokens: 1,
            meta: v1::Meta {
                rounds: vec![3],
                speakers: vec!["alice".into()],
                headings: vec!["Intro".into()],
                tags: None,
            },
            created_at: 7,
            expires_at: Some(9),
        }
    }

    #[test]
    fn version_1_records_decode_as_records_without_a_time() {
        let old = old_node();
        let n: Node = decode("node", &v1::encode(&old)).unwrap();
        assert_eq!(n, Node::from(old.clone()));
        assert_eq!(n.meta.time, None);
        assert_eq!(n.meta.speakers, ["alice"]);
        assert_eq!(n.expires_at, Some(9));

        let rec = v1::SourceRecord {
            id: "d#1".into(),
            scope: "d".into(),
            seq: 4,
            round: Some(2),
            speaker: Some("bob".into()),
            hash: [7; 32],
            bytes: 5,
            chunk_tokens: 512,
            chunks: vec![ChunkRef {
                id: old.id,
                start: 0,
                end: 5,
                tokens: 1,
                section: 0,
                headings: Vec::new(),
            }],
        };
        let r: SourceRecord = decode("source", &v1::encode(&rec)).unwrap();
        assert_eq!(r.time, None);
        assert_eq!((r.seq, r.round, r.chunks.len()), (4, Some(2), 1));
    }

    #[test]
    fn records_are_written_at_version_2_with_their_time() {
        let t = crate::time::Time::parse("2026-03-04T18:02:00+01:00").unwrap();
        let mut n = Node::from(old_node());
        n.meta.time = Some(crate::time::TimeSpan::of(t));
        let bytes = encode(&n).unwrap();
        assert_eq!(bytes[0], 2);
        assert_eq!(decode::<Node>("node", &bytes).unwrap(), n);
        // A version this strata does not know is one line naming what it reads.
        let mut future = bytes.clone();
        future[0] = 3;
        let e = decode::<Node>("node x", &future).unwrap_err().to_string();
        assert!(
            e.ends_with("node x: format version 3, this strata reads versions 1 to 2"),
            "{e}"
        );
        let e = decode::<ScopeRecord>("scope y", &future)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("scope y: format version 3, this strata reads version 1"),
            "{e}"
        );
    }
}
