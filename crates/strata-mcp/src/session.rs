//! What one MCP session keeps between calls: the segments `load_corpus` made and the
//! results `sub_query` returned, each under an id the agent passes back (`seg-3`, `sq-7`).
//! It lives as long as the server process (one stdio session), bounded: the newest
//! [`KEEP`] of each kind are kept, and an id that was let go is an invalid argument that
//! says so.

use super::ToolError;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How many segments, and how many sub-query results, a session keeps.
pub(crate) const KEEP: usize = 64;

/// One node as an agent sees it: where it sits (level, sources, rounds, speakers,
/// headings), its text, and the source spans it stands for.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Item {
    pub(crate) id: String,
    pub(crate) level: strata_core::level::Level,
    /// The first source beneath the node (its only one for a FULL chunk).
    pub(crate) source: Option<String>,
    pub(crate) sources: Vec<String>,
    /// The round, when the node lies in exactly one.
    pub(crate) round: Option<u32>,
    pub(crate) rounds: Vec<u32>,
    /// The speaker, when the node has exactly one.
    pub(crate) speaker: Option<String>,
    pub(crate) speakers: Vec<String>,
    pub(crate) headings: Vec<String>,
    pub(crate) tokens: u32,
    /// When the node was stored (unix seconds).
    pub(crate) created_at: u64,
    pub(crate) text: String,
    pub(crate) spans: Vec<strata_engine::node::Span>,
}

/// The nodes `load_corpus` selected, and how.
#[derive(Debug, Serialize)]
pub(crate) struct Segment {
    pub(crate) id: String,
    pub(crate) scope: String,
    /// The filters as applied (echoed in every page's provenance).
    pub(crate) filters: Value,
    pub(crate) created_at: u64,
    /// Items per page, as the call that made it asked: later pages without a
    /// `page_size` use it (so page 2 follows page 1).
    pub(crate) page_size: usize,
    pub(crate) items: Vec<Item>,
}

/// One `sub_query` call's outcome, as returned to the agent.
#[derive(Debug)]
pub(crate) struct SubQueryRecord {
    pub(crate) id: String,
    pub(crate) result: Value,
}

#[derive(Default)]
struct State {
    next: u64,
    segments: BTreeMap<u64, Arc<Segment>>,
    sub_queries: BTreeMap<u64, Arc<SubQueryRecord>>,
}

/// A session's state. A std Mutex: it is held only to insert or look up, never across an
/// await.
#[derive(Default)]
pub(crate) struct Session {
    state: Mutex<State>,
}

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a segment made by `make` (which is given its id); returns it.
    pub(crate) fn add_segment(&self, make: impl FnOnce(String) -> Segment) -> Arc<Segment> {
        let mut s = self.lock();
        s.next += 1;
        let n = s.next;
        let seg = Arc::new(make(format!("seg-{n}")));
        s.segments.insert(n, seg.clone());
        while s.segments.len() > KEEP {
            s.segments.pop_first();
        }
        seg
    }

    /// Keeps a sub-query result made by `make` (which is given its id); returns it.
    pub(crate) fn add_sub_query(&self, make: impl FnOnce(String) -> Value) -> Arc<SubQueryRecord> {
        let mut s = self.lock();
        s.next += 1;
        let n = s.next;
        let id = format!("sq-{n}");
        let rec = Arc::new(SubQueryRecord {
            result: make(id.clone()),
            id,
        });
        s.sub_queries.insert(n, rec.clone());
        while s.sub_queries.len() > KEEP {
            s.sub_queries.pop_first();
        }
        rec
    }

    /// Lets go of what may quote a forgotten part of `scope`: its segments, and every
    /// sub-query result (a result does not say which segments its items came from).
    pub(crate) fn forget(&self, scope: &str) {
        let mut s = self.lock();
        s.segments.retain(|_, seg| seg.scope != scope);
        s.sub_queries.clear();
    }

    pub(crate) fn segment(&self, id: &str) -> Result<Arc<Segment>, ToolError> {
        let s = self.lock();
        number(id, "seg-")
            .and_then(|n| s.segments.get(&n).cloned())
            .ok_or_else(|| unknown("segment", id, "seg-", s.segments.keys()))
    }

    pub(crate) fn sub_query(&self, id: &str) -> Result<Arc<SubQueryRecord>, ToolError> {
        let s = self.lock();
        number(id, "sq-")
            .and_then(|n| s.sub_queries.get(&n).cloned())
            .ok_or_else(|| unknown("sub-query result", id, "sq-", s.sub_queries.keys()))
    }
}

fn number(id: &str, prefix: &str) -> Option<u64> {
    id.strip_prefix(prefix)?.parse().ok()
}

fn unknown<'a>(
    what: &str,
    id: &str,
    prefix: &str,
    kept: impl DoubleEndedIterator<Item = &'a u64> + Clone,
) -> ToolError {
    let range = match (kept.clone().next(), kept.clone().next_back()) {
        (Some(a), Some(b)) if a == b => format!("{prefix}{a}"),
        (Some(a), Some(b)) => format!("{prefix}{a} to {prefix}{b}"),
        _ => "none yet".to_string(),
    };
    ToolError::Invalid(format!(
        "unknown {what} `{}` (this session keeps the newest {KEEP}: {range})",
        id.escape_debug()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: String) -> Segment {
        Segment {
            id,
            scope: "s".into(),
            filters: Value::Null,
            created_at: 0,
            page_size: 20,
            items: Vec::new(),
        }
    }

    #[test]
    fn ids_are_kept_until_newer_ones_push_them_out() {
        let s = Session::default();
        let first = s.add_segment(seg);
        assert_eq!(first.id, "seg-1");
        assert_eq!(s.segment("seg-1").unwrap().id, "seg-1");
        for _ in 0..KEEP {
            s.add_segment(seg);
        }
        let ToolError::Invalid(e) = s.segment("seg-1").unwrap_err() else {
            panic!("an unknown id is an invalid argument")
        };
        assert_eq!(
            e,
            "unknown segment `seg-1` (this session keeps the newest 64: seg-2 to seg-65)"
        );
        let q = s.add_sub_query(Value::String);
        assert_eq!(q.id, "sq-66");
        assert!(s.sub_query("sq-66").is_ok());
        assert!(s.sub_query("seg-2").is_err());
        assert!(s.segment("sq-66").is_err());
    }
}
