//! The engine's background work, started and stopped as one: the job workers, the TTL
//! sweeper, the index follower of a shared store and the warmer. Every long-lived front
//! end — `strata serve`, `strata mcp`, the Python binding — holds one [`Service`] beside
//! its engine (mini-redis's `DbDropGuard` habit): dropping it tells every task to stop;
//! [`Service::shutdown`] also waits for them and flushes the store.

use crate::clock::unix_now;
use crate::engine::Engine;
use crate::error::Result;
use crate::expire::{SweeperGuard, system_clock};
use crate::jobs::{JobHook, JobKind, Jobs, WorkerConfig, spawn_workers};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often a serving replica says it is alive (and prunes the feed).
const HEARTBEAT: Duration = Duration::from_secs(30);
/// The shortest time between two index commits the follower makes: a burst of changes
/// is applied in one commit (queries apply what is left before they search anyway).
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// The background tasks of one engine. Started on the current tokio runtime; they stop
/// when this is dropped (a running job finishes within `server.shutdown_grace_secs` or
/// is parked for the next start).
pub struct Service {
    engine: Arc<Engine>,
    jobs: Arc<Jobs>,
    stop: Arc<watch::Sender<bool>>,
    tasks: Vec<JoinHandle<()>>,
    sweeper: Option<SweeperGuard>,
}

impl Service {
    /// Starts the workers (`server.workers`), the sweeper, the warmer (when
    /// `server.warm_before_secs` > 0) and, on a store other processes write, the index
    /// follower. Must be called within a tokio runtime.
    pub fn start(engine: Arc<Engine>) -> Result<Service> {
        Service::start_with(engine, Arc::new(|_, _| {}))
    }

    /// [`Service::start`] with a hook told of every job's start and end (metrics).
    pub fn start_with(engine: Arc<Engine>, hook: JobHook) -> Result<Service> {
        let cfg = engine.config().server.clone();
        // The job queue sits above the engine (it runs the engine's builds): the one
        // place outside the engine that holds its store.
        let jobs = Arc::new(Jobs::open_with(
            engine.store_for_jobs().clone(),
            Duration::from_millis(cfg.job_lease_ms),
        )?);
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = spawn_workers(
            engine.clone(),
            jobs.clone(),
            WorkerConfig {
                workers: cfg.workers,
                warm_horizon_secs: cfg.warm_before_secs,
                shutdown_grace: Duration::from_secs(cfg.shutdown_grace_secs),
            },
            stop_rx.clone(),
            hook,
        );
        let sweep_engine = engine.clone();
        // A sweep marks the nodes it removes as pending for the index in the same
        // transaction; applying the marks here keeps the index current (or the next open
        // does).
        let sweeper = engine.spawn_sweeper(system_clock(), move |_ids| {
            if let Err(e) = sweep_engine.sync_index() {
                tracing::warn!(error = %e, "cannot drop swept nodes from the index yet");
            }
        });
        tasks.extend(spawn_follower(engine.clone(), stop_rx.clone()));
        if cfg.warm_before_secs > 0 {
            tasks.push(tokio::spawn(warm(
                engine.clone(),
                jobs.clone(),
                cfg.warm_before_secs,
                stop_rx,
            )));
        }
        Ok(Service {
            engine,
            jobs,
            stop: Arc::new(stop),
            tasks,
            sweeper: Some(sweeper),
        })
    }

    /// The job queue the workers serve.
    pub fn jobs(&self) -> &Arc<Jobs> {
        &self.jobs
    }

    /// Tells every task to stop (running jobs get their grace period); does not wait.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// A function that does what [`Service::stop`] does, for a shutdown signal elsewhere.
    pub fn stopper(&self) -> impl Fn() + Send + Sync + 'static {
        let stop = self.stop.clone();
        move || {
            let _ = stop.send(true);
        }
    }

    /// Stops every task, waits for them, and flushes the store.
    pub async fn shutdown(mut self) -> Result<()> {
        self.stop();
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
        if let Some(s) = self.sweeper.take() {
            s.stop().await;
        }
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || engine.flush())
            .await
            .map_err(|e| crate::error::Error::Internal(e.to_string()))??;
        Ok(())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // The sweeper's guard stops it when dropped.
        let _ = self.stop.send(true);
    }
}

/// Re-warms scopes that were queried within their TTL before their levels expire.
async fn warm(engine: Arc<Engine>, jobs: Arc<Jobs>, ahead: u64, mut stop: watch::Receiver<bool>) {
    let ttl = engine.config().store.ttl_secs;
    let every = Duration::from_secs((ahead / 2).clamp(1, 60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let now = unix_now();
        for scope in engine.recently_queried(now, ttl) {
            let expiring = engine.expires_within(&scope, now, ahead).unwrap_or(false);
            if expiring && let Err(e) = jobs.enqueue(&scope, JobKind::Warm, now) {
                tracing::warn!(error = %e, %scope, "cannot queue a warming job");
            }
        }
    }
}

/// Keeps the engine's index current: woken by the other processes' node changes
/// (`LISTEN/NOTIFY` through [`crate::store::Store::events`]), it applies the change feed
/// to the index (or rebuilds the index when it fell off the feed), and says every
/// [`HEARTBEAT`] that this replica is alive. `None` for a store no other process writes.
fn spawn_follower(engine: Arc<Engine>, mut stop: watch::Receiver<bool>) -> Option<JoinHandle<()>> {
    let mut events = engine.events()?;
    Some(tokio::spawn(async move {
        let mut beat = tokio::time::interval(HEARTBEAT);
        loop {
            tokio::select! {
                r = events.nodes.changed() => if r.is_err() { return },
                _ = beat.tick() => {
                    let e = engine.clone();
                    let r = tokio::task::spawn_blocking(move || e.heartbeat()).await;
                    if let Ok(Err(e)) = r {
                        tracing::warn!(error = %e, "cannot record this replica's heartbeat");
                    }
                }
                _ = stop.changed() => return,
            }
            events.nodes.borrow_and_update();
            let e = engine.clone();
            let r = tokio::task::spawn_blocking(move || e.follow_changes()).await;
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
