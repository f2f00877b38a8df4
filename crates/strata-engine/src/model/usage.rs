//! Usage accounting: calls, retries and tokens per model, and what they cost.
//!
//! A build or a query runs inside [`metered`]; every model call made while it is polled —
//! by any client, at any depth — is recorded in its [`Meter`] (and in the meters of the
//! scopes around it: a query that has to build first pays for the build too). This is a
//! tokio task-local rather than a parameter so that one shared client serves many
//! concurrent builds and queries and each still sees exactly its own calls; it holds
//! because nothing between a call and its caller spawns a task.

use crate::config::Prices;
use serde::Serialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one model did for one build or query.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ModelUsage {
    /// Calls made (one per prompt, however many attempts it took).
    pub calls: u64,
    /// HTTP requests sent (attempts, retries included).
    pub requests: u64,
    pub retries: u64,
    /// Responses with status 429.
    pub rate_limited: u64,
    /// Responses with status 5xx.
    pub server_errors: u64,
    /// Attempts that hit the per-call timeout.
    pub timeouts: u64,
    /// Calls that failed after their retries.
    pub failed: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Estimated from the price table; 0 when the model has no price.
    pub cost_usd: f64,
}

/// Model usage of one build or query.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Usage {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub wall_ms: u64,
    /// Model outputs rejected by validation (empty, over budget, unfaithful, malformed,
    /// naming ids that do not exist).
    pub invalid_outputs: u64,
    /// Times the deterministic offline path replaced a model's result.
    pub fallbacks: u64,
    pub by_model: BTreeMap<String, ModelUsage>,
}

impl Usage {
    /// Totals of `meter`, priced with `prices`.
    pub fn from_meter(meter: &Meter, prices: &Prices, wall: Duration) -> Usage {
        let mut by_model = meter.snapshot();
        let mut u = Usage {
            wall_ms: wall.as_millis() as u64,
            invalid_outputs: meter.invalid_outputs.load(Ordering::Relaxed),
            fallbacks: meter.fallbacks.load(Ordering::Relaxed),
            ..Usage::default()
        };
        for (name, m) in &mut by_model {
            m.cost_usd = prices.cost(name, m.prompt_tokens, m.completion_tokens);
            u.calls += m.calls;
            u.prompt_tokens += m.prompt_tokens;
            u.completion_tokens += m.completion_tokens;
            u.cost_usd += m.cost_usd;
        }
        u.by_model = by_model;
        u
    }
}

impl Usage {
    /// Adds the calls `meter` recorded (priced with `prices`) to these totals.
    pub fn add(&mut self, meter: &Meter, prices: &Prices) {
        for (name, mut m) in meter.snapshot() {
            m.cost_usd = prices.cost(&name, m.prompt_tokens, m.completion_tokens);
            self.calls += m.calls;
            self.prompt_tokens += m.prompt_tokens;
            self.completion_tokens += m.completion_tokens;
            self.cost_usd += m.cost_usd;
            let e = self.by_model.entry(name).or_default();
            e.calls += m.calls;
            e.requests += m.requests;
            e.retries += m.retries;
            e.rate_limited += m.rate_limited;
            e.server_errors += m.server_errors;
            e.timeouts += m.timeouts;
            e.failed += m.failed;
            e.prompt_tokens += m.prompt_tokens;
            e.completion_tokens += m.completion_tokens;
            e.cost_usd += m.cost_usd;
        }
    }
}

/// Collects [`ModelUsage`] per model name, and what the caller made of the outputs.
#[derive(Debug, Default)]
pub struct Meter {
    models: Mutex<BTreeMap<String, ModelUsage>>,
    invalid_outputs: AtomicU64,
    fallbacks: AtomicU64,
}

/// What became of a model's output, as the code that used it judged (see
/// [`Usage::invalid_outputs`], [`Usage::fallbacks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Rejected by validation.
    Invalid,
    /// Replaced by the deterministic offline path.
    Fallback,
}

impl Meter {
    pub fn snapshot(&self) -> BTreeMap<String, ModelUsage> {
        self.models.lock().expect("poisoned").clone()
    }

    fn apply(&self, model: &str, f: &dyn Fn(&mut ModelUsage)) {
        let mut m = self.models.lock().expect("poisoned");
        match m.get_mut(model) {
            Some(u) => f(u),
            None => f(m.entry(model.to_string()).or_default()),
        }
    }
}

tokio::task_local! {
    static METERS: Vec<Arc<Meter>>;
}

/// Runs `fut` with `meter` recording the model calls it makes (nested inside any
/// enclosing scope's meters).
pub async fn metered<F: Future>(meter: Arc<Meter>, fut: F) -> F::Output {
    let mut meters = METERS.try_with(Clone::clone).unwrap_or_default();
    meters.push(meter);
    METERS.scope(meters, fut).await
}

/// Records an event for `model` in every meter of the current scope (none outside one).
pub(crate) fn record(model: &str, f: impl Fn(&mut ModelUsage)) {
    let _ = METERS.try_with(|ms| {
        for m in ms {
            m.apply(model, &f);
        }
    });
}

/// Counts `outcome` in every meter of the current scope (none outside one).
pub(crate) fn note(outcome: Outcome) {
    let _ = METERS.try_with(|ms| {
        for m in ms {
            match outcome {
                Outcome::Invalid => &m.invalid_outputs,
                Outcome::Fallback => &m.fallbacks,
            }
            .fetch_add(1, Ordering::Relaxed);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nested_scopes_see_their_own_calls_and_their_childrens() {
        let outer = Arc::new(Meter::default());
        let inner = Arc::new(Meter::default());
        record("m", |u| u.calls += 100); // outside any scope: dropped
        metered(outer.clone(), async {
            record("m", |u| u.calls += 1);
            metered(inner.clone(), async {
                record("m", |u| {
                    u.calls += 1;
                    u.prompt_tokens += 2_000_000;
                });
            })
            .await;
        })
        .await;
        assert_eq!(outer.snapshot()["m"].calls, 2);
        assert_eq!(inner.snapshot()["m"].calls, 1);
        let mut prices = Prices::default();
        prices.0.insert(
            "m".into(),
            crate::config::Price {
                prompt: 0.5,
                completion: 4.0,
            },
        );
        let u = Usage::from_meter(&inner, &prices, Duration::from_millis(3));
        assert_eq!((u.calls, u.prompt_tokens, u.wall_ms), (1, 2_000_000, 3));
        assert!((u.cost_usd - 1.0).abs() < 1e-12, "{}", u.cost_usd);
    }
}
