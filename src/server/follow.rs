//! The index follower of a replica of a shared store: while the server runs, the index
//! follows the other processes' node changes.

use crate::engine::Engine;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often a serving replica says it is alive (and prunes the feed).
const HEARTBEAT: Duration = Duration::from_secs(30);
/// The shortest time between two index commits the follower makes: a burst of changes
/// is applied in one commit (queries apply what is left before they search anyway).
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// Keeps the engine's index current while it serves: woken by the other processes'
/// node changes (`LISTEN/NOTIFY` through [`Store::events`]), it applies the change feed
/// to the index (or rebuilds the index when it fell off the feed), and says every
/// [`HEARTBEAT`] that this replica is alive. `None` for a store no other process writes.
pub(super) fn spawn_follower(
    engine: Arc<Engine>,
    mut stop: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut events = engine.store().events()?;
    Some(tokio::spawn(async move {
        let mut beat = tokio::time::interval(HEARTBEAT);
        loop {
            tokio::select! {
                r = events.nodes.changed() => if r.is_err() { return },
                _ = beat.tick() => {
                    let e = engine.clone();
                    let r = tokio::task::spawn_blocking(move || e.store().heartbeat()).await;
                    if let Ok(Err(e)) = r {
                        tracing::warn!(error = %e, "cannot record this replica's heartbeat");
                    }
                }
                _ = stop.changed() => return,
            }
            events.nodes.borrow_and_update();
            let e = engine.clone();
            let r = tokio::task::spawn_blocking(move || {
                if e.store().index_must_rebuild()? {
                    tracing::warn!("this replica fell off the change feed: rebuilding its index");
                    e.reindex()
                } else {
                    e.sync_index()
                }
            })
            .await;
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot apply the change feed yet"),
                Err(e) => tracing::error!(error = %e, "the index follower failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }))
}
