//! The navigator: answers a question by exploring the level tree through a few structured
//! primitives — `peek`, `grep`, `descend`, `finish` — never by reading the whole scope. The
//! primitives ([`Explorer`]) validate every id against the working set and account for every
//! token; a policy decides which to call. The offline policy ranks with BM25 and answers
//! with the best-supported source sentences, each cited by its exact byte span.

mod explore;
pub(crate) mod llm;
mod offline;
pub mod primitives;
mod stop;
mod support;

pub(crate) use explore::{Cited, Explorer};
pub(crate) use offline::offline;
pub use stop::Stop;
pub(crate) use stop::Stoppable;

use serde::Serialize;

/// One cited source span. `quote == source_text[start..end]`, always.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Citation {
    pub source: String,
    pub start: u64,
    pub end: u64,
    pub quote: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
    /// When the source was said or written, as given (RFC 3339 or a date); left out when
    /// it has no time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "2026-03-04T18:02:00Z")]
    pub time: Option<crate::time::Time>,
}

/// One step of a query's trajectory: what the navigator did and saw, and where it stood
/// then (`strata query --trace` writes these as JSON Lines; `strata trace` renders them).
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Step {
    pub action: String,
    /// What the action observed (hits, tokens read, what was chosen).
    pub detail: String,
    /// Iterations completed before this step.
    pub iteration: u32,
    /// Milliseconds since the query's navigation began.
    pub at_ms: u64,
    /// Tokens read so far.
    pub tokens: u64,
    /// Sub-model calls so far.
    pub sub_calls: u32,
    /// The working set when the step was taken, best first (at most 32 ids).
    pub working: Vec<String>,
}

/// The answer and how it was found.
#[derive(Clone, Debug, Serialize)]
pub struct QueryResult {
    /// The cited quotes, joined. A question that asks when ("When did…?", "what year…")
    /// whose timed citations give a date gets that date first, on a line of its own (see
    /// [`QueryResult::when`]).
    pub answer: String,
    /// The date a question that asks when is answered with: the date expression ("last
    /// Friday", "two days ago", "in March") of the first timed citation that says one,
    /// resolved against its source's time, else the first timed citation's date. ISO
    /// 8601: `2023-05-05`, `2023-04`, `2022`, or an interval `2023-05-06/2023-05-07`. Source data, never a guess: `None`
    /// when the question does not ask when or nothing it cites has a time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    pub ready: bool,
    pub confidence: f64,
    pub citations: Vec<Citation>,
    pub iterations: u32,
    /// How the navigation went, step by step (notes, narrowing, refinements).
    pub refinement_history: Vec<String>,
    /// Earlier answers a later one replaced, oldest first (the HTTP API's aragora-style
    /// `refinement_history`; `iteration` = their number). Not in the CLI's JSON.
    #[serde(skip)]
    pub drafts: Vec<String>,
    pub nodes_examined: Vec<String>,
    pub sub_calls_made: u32,
    pub tokens_processed: u64,
    pub trajectory: Vec<Step>,
    /// Model calls, tokens and cost of this query (builds it triggered included).
    pub usage: crate::model::Usage,
    /// The navigation used up its iterations (of the policy that hit the limit: a
    /// fallback policy has budgets of its own).
    pub max_iterations_reached: bool,
    /// What ended the run when it did not end on its own: `max_iterations`, `max_tokens`,
    /// `max_sub_calls`, `no_narrowing` (two iterations without narrowing), `cancelled` or
    /// `time_limit` (`query.time_limit_ms`); `null` when the policy finished within its
    /// budgets.
    pub limit_hit: Option<String>,
    /// Each budget, used against its limit.
    pub budgets: Budgets,
    /// One plain sentence on how the run ended: "answered within its budgets", "stopped at
    /// the iteration limit (6 of 6): answered from what was gathered", "...: nothing was
    /// found that answers the question".
    pub outcome: String,
}

/// Used against limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Budget {
    pub used: u64,
    pub limit: u64,
}

/// A query's budgets (`query.max_iterations`, `query.max_tokens`, `query.max_sub_calls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Budgets {
    pub iterations: Budget,
    pub tokens: Budget,
    pub sub_calls: Budget,
}

pub use crate::model::wait_for;

/// Runs synchronous work (the offline navigator's scoring, index commits: CPU and disk)
/// without stalling the runtime's other tasks: on a multi-threaded runtime the worker
/// hands its tasks to another thread first (`block_in_place`); elsewhere (a current-thread
/// runtime, no runtime) it runs inline.
pub fn off_executor<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
