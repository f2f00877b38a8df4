//! Ending a query early: cancelled (Ctrl-C on `strata query`, an MCP client's cancel) or
//! out of wall time (`query.time_limit_ms`). A stopped query still answers: its model calls
//! end at once with [`ModelError::Stopped`], the policies treat that as a failed call (the
//! best answer so far stands, else the offline policy answers from the scope in
//! milliseconds), and the result says what stopped it (`limit_hit`: `cancelled` or
//! `time_limit`).

use crate::error::ModelError;
use crate::model::{ChatModel, ChatReply, ChatRequest};
use futures::future::BoxFuture;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What may stop a query before its budgets do. Cloning shares the cancellation.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    cancel: CancellationToken,
    /// The wall-time limit and when it runs out.
    deadline: Option<(Duration, Instant)>,
}

impl Stop {
    /// Stops when `cancel` is cancelled (and never on its own).
    pub fn new(cancel: CancellationToken) -> Stop {
        Stop {
            cancel,
            deadline: None,
        }
    }

    /// Also stops `ms` milliseconds from now (0: no limit).
    pub fn with_time_limit(mut self, ms: u64) -> Stop {
        if ms > 0 {
            let limit = Duration::from_millis(ms);
            self.deadline = Some((limit, Instant::now() + limit));
        }
        self
    }

    /// Stops the query: what it gathered so far is its answer.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Why the query must stop now, if it must: `cancelled` or `time_limit`.
    pub fn reason(&self) -> Option<&'static str> {
        if self.cancel.is_cancelled() {
            Some("cancelled")
        } else if self.deadline.is_some_and(|(_, at)| Instant::now() >= at) {
            Some("time_limit")
        } else {
            None
        }
    }

    /// The time limit, in milliseconds (0: none).
    pub fn time_limit_ms(&self) -> u64 {
        self.deadline.map_or(0, |(d, _)| d.as_millis() as u64)
    }

    /// Waits until the query must stop; returns why.
    pub async fn stopped(&self) -> &'static str {
        match self.deadline {
            Some((_, at)) => tokio::select! {
                _ = self.cancel.cancelled() => "cancelled",
                _ = tokio::time::sleep_until(at.into()) => "time_limit",
            },
            None => {
                self.cancel.cancelled().await;
                "cancelled"
            }
        }
    }

    /// One plain phrase on why it stopped (for errors and the outcome).
    pub(crate) fn describe(&self, reason: &str) -> String {
        match reason {
            "time_limit" => format!(
                "the query's time limit ({} ms) ran out",
                self.time_limit_ms()
            ),
            _ => "the query was cancelled".to_string(),
        }
    }
}

/// A chat model whose calls end as soon as the query must stop.
pub(crate) struct Stoppable<'a> {
    pub(crate) inner: &'a dyn ChatModel,
    pub(crate) stop: &'a Stop,
}

impl ChatModel for Stoppable<'_> {
    fn identity(&self) -> String {
        self.inner.identity()
    }

    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatReply, ModelError>> {
        Box::pin(async move {
            if let Some(why) = self.stop.reason() {
                return Err(ModelError::Stopped(self.stop.describe(why)));
            }
            tokio::select! {
                r = self.inner.chat(req) => r,
                why = self.stop.stopped() => Err(ModelError::Stopped(self.stop.describe(why))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_time_limit_stops_and_says_so() {
        let s = Stop::default().with_time_limit(20);
        assert_eq!(s.reason(), None);
        assert_eq!(s.stopped().await, "time_limit");
        assert_eq!(s.reason(), Some("time_limit"));
        assert!(s.describe("time_limit").contains("20 ms"));
    }

    #[tokio::test]
    async fn cancelling_a_clone_stops_the_original() {
        let s = Stop::default().with_time_limit(60_000);
        let c = s.clone();
        let waiter = tokio::spawn(async move { c.stopped().await });
        s.cancel();
        assert_eq!(waiter.await.unwrap(), "cancelled");
        assert_eq!(Stop::default().time_limit_ms(), 0);
    }
}
