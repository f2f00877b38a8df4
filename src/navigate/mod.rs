//! The navigator: answers a question by exploring the level tree through a few structured
//! primitives — `peek`, `grep`, `descend`, `finish` — never by reading the whole scope. The
//! primitives ([`Explorer`]) validate every id against the working set and account for every
//! token; a policy decides which to call. The offline policy ranks with BM25 and answers
//! with the best-supported source sentences, each cited by its exact byte span.

mod explore;
pub(crate) mod llm;
mod offline;
mod support;

pub(crate) use explore::{Cited, Explorer};
pub(crate) use offline::offline;

use serde::Serialize;

/// One cited source span. `quote == source_text[start..end]`, always.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Citation {
    pub source: String,
    pub start: u64,
    pub end: u64,
    pub quote: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub action: String,
    pub detail: String,
}

/// The answer and how it was found.
#[derive(Clone, Debug, Serialize)]
pub struct QueryResult {
    pub answer: String,
    pub ready: bool,
    pub confidence: f64,
    pub citations: Vec<Citation>,
    pub iterations: u32,
    pub refinement_history: Vec<String>,
    pub nodes_examined: Vec<String>,
    pub sub_calls_made: u32,
    pub tokens_processed: u64,
    pub trajectory: Vec<Step>,
    /// Model calls, tokens and cost of this query (builds it triggered included).
    pub usage: crate::model::Usage,
}
