//! The TTL sweeper: a background task that purges expired nodes from the store, sleeping
//! until the earliest deadline in the `expiry` tree, woken early when an earlier deadline
//! arrives, and stopped by dropping its guard (the shape of mini-redis's `db.rs`).
//!
//! Expiry arithmetic itself takes `now` as a parameter ([`Store::sweep`]); the clock the
//! sweeper reads is injected so tests drive it with tokio's paused time, never by sleeping.

use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Unix seconds, as the sweeper sees them.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> Clock {
    Arc::new(crate::clock::unix_now)
}

/// A clock that starts at `base` and advances with tokio's (pausable) time.
pub fn tokio_clock(base: u64) -> Clock {
    let start = tokio::time::Instant::now();
    Arc::new(move || base + start.elapsed().as_secs())
}

/// Stops the sweeper when dropped.
pub struct SweeperGuard {
    shutdown: Arc<Notify>,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl SweeperGuard {
    /// Stops the sweeper and waits for it to finish its current sweep.
    pub async fn stop(mut self) {
        self.shutdown.notify_one();
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }
}

impl Drop for SweeperGuard {
    fn drop(&mut self) {
        self.shutdown.notify_one();
    }
}

/// Starts the sweeper on the current tokio runtime. `on_purge` receives the ids removed by
/// each sweep (the engine drops them from the index).
pub fn spawn_sweeper(
    store: Store,
    clock: Clock,
    on_purge: impl Fn(Vec<crate::node::NodeId>) + Send + 'static,
) -> SweeperGuard {
    let shutdown = Arc::new(Notify::new());
    let stop = shutdown.clone();
    let handle = tokio::spawn(async move {
        loop {
            let now = clock();
            match store.sweep(now) {
                Ok(ids) if !ids.is_empty() => {
                    tracing::debug!(n = ids.len(), "swept expired nodes");
                    on_purge(ids);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "expiry sweep failed"),
            }
            let wait = match store.next_deadline() {
                Ok(Some(at)) => Some(Duration::from_secs(at.saturating_sub(now).max(1))),
                _ => None,
            };
            tokio::select! {
                _ = async {
                    match wait {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending::<()>().await,
                    }
                } => {}
                _ = store.expiry_changed() => {}
                _ = stop.notified() => break,
            }
        }
    });
    SweeperGuard {
        shutdown,
        handle: Some(handle),
    }
}
