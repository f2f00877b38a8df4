//! The background job queue: compression and warming jobs, persisted in the store so they
//! survive a restart, coalesced per scope, run by a fixed number of workers.

use crate::build::BuildReport;
use crate::clock::unix_now;
use crate::engine::Engine;
use crate::error::Result;
use crate::progress::NoProgress;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

pub use crate::store::{Claimant, Job, JobKind, JobOutcome, JobState};

impl From<&BuildReport> for JobOutcome {
    fn from(r: &BuildReport) -> Self {
        JobOutcome {
            nodes_built: r.nodes_built,
            cache_hits: r.cache_hits,
            model_calls: r.model_calls,
            fallbacks: r.fallbacks,
            failures: r.failures.len(),
            elapsed_ms: r.elapsed_ms,
        }
    }
}

/// Finished jobs kept for `GET /api/jobs/{id}`.
const KEEP_FINISHED: usize = 500;

/// The queue. Queue state and claims live in the store (so several processes sharing a
/// PostgreSQL store share one queue); this process's wake-ups live here.
pub struct Jobs {
    store: Store,
    /// This process's name and lease for claims.
    who: Claimant,
    /// Wakes idle workers of this process: a job was queued, or a scope a worker held
    /// became free.
    wake: Notify,
    /// Counts finished (or parked) jobs: `wait` watches it instead of polling.
    finished: watch::Sender<u64>,
    /// Another process changed the queue (shared stores only).
    remote: Option<watch::Receiver<u64>>,
}

/// Called when a job changes state (metrics).
pub type JobHook = Arc<dyn Fn(&Job, Option<&BuildReport>) + Send + Sync>;

/// How long a claim holds without renewal by default (`server.job_lease_ms`).
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

impl Jobs {
    /// Opens the queue with the default lease. Jobs left `running` by a previous process
    /// of this replica (or whose lease ran out) are queued again.
    pub fn open(store: Store) -> Result<Jobs> {
        Self::open_with(store, DEFAULT_LEASE)
    }

    /// Opens the queue; claims made here hold for `lease` unless renewed.
    pub fn open_with(store: Store, lease: Duration) -> Result<Jobs> {
        let who = Claimant {
            owner: store.replica_name(),
            lease,
        };
        let n = store.requeue_abandoned(&who)?;
        if n > 0 {
            tracing::info!(n, "queued again the jobs a stopped process left running");
        }
        let remote = store.events().map(|e| e.jobs);
        Ok(Jobs {
            store,
            who,
            wake: Notify::new(),
            finished: watch::channel(0).0,
            remote,
        })
    }

    /// Queues a job, or returns the queued (not yet running) job of the same kind for the
    /// same scope: duplicate requests coalesce. The flag says whether it coalesced. The
    /// job is durable on return.
    pub fn enqueue(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        let r = self.store.enqueue_job(scope, kind, now)?;
        self.wake.notify_waiters();
        Ok(r)
    }

    /// Waits until job `id` is done or failed, at most `timeout`; returns the job as it is
    /// then (`None`: no such job). Woken by every job's end (in any process sharing the
    /// store), never by polling.
    pub async fn wait(&self, id: u64, timeout: Duration) -> Result<Option<Job>> {
        let mut finished = self.finished.subscribe();
        let mut remote = self.remote.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Seen before the check, so an end between the check and the wait still wakes.
            finished.borrow_and_update();
            if let Some(r) = &mut remote {
                r.borrow_and_update();
            }
            let job = self.get(id)?;
            match &job {
                Some(j) if matches!(j.state, JobState::Queued | JobState::Running) => {}
                _ => return Ok(job),
            }
            let changed = async {
                match &mut remote {
                    Some(r) => tokio::select! {
                        _ = finished.changed() => {}
                        _ = r.changed() => {}
                    },
                    None => {
                        let _ = finished.changed().await;
                    }
                }
            };
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.get(id);
            }
        }
    }

    pub fn get(&self, id: u64) -> Result<Option<Job>> {
        self.store.get_job(id)
    }

    pub fn all(&self) -> Result<Vec<Job>> {
        self.store.jobs()
    }

    /// Jobs waiting to run.
    pub fn depth(&self) -> usize {
        self.store.queued_jobs().unwrap_or(0)
    }

    /// Takes the oldest queued job whose scope no worker (of any process) is building.
    fn claim(&self, now: u64) -> Result<Option<Job>> {
        self.store.claim_job(&self.who, now)
    }

    /// Records the end of `job`; `false` when this process no longer held it (its lease
    /// ran out and another process took it back, so that one records the end).
    fn release(&self, job: &Job) -> Result<bool> {
        let held = self.store.finish_job(job, &self.who, KEEP_FINISHED)?;
        // Another job for this scope may have been waiting for it.
        self.wake.notify_waiters();
        self.finished.send_modify(|n| *n += 1);
        Ok(held)
    }

    /// Waits for a reason to try claiming again: a job queued or a scope freed here or
    /// in another process, a lease running out, or shutdown.
    async fn idle(
        &self,
        shutdown: &mut watch::Receiver<bool>,
        remote: &mut Option<watch::Receiver<u64>>,
        woken: impl Future<Output = ()>,
    ) {
        let lease = match self.store.next_lease_expiry() {
            Ok(Some(d)) => d + Duration::from_millis(10),
            _ => Duration::MAX,
        };
        let remote_changed = async {
            match remote {
                Some(r) => {
                    if r.changed().await.is_err() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = woken => {}
            _ = remote_changed => {}
            _ = shutdown.changed() => {}
            _ = sleep_for(lease) => {}
        }
    }
}

async fn sleep_for(d: Duration) {
    match tokio::time::Instant::now().checked_add(d) {
        Some(at) if d != Duration::MAX => tokio::time::sleep_until(at).await,
        _ => std::future::pending::<()>().await,
    }
}

/// Settings of the worker pool.
#[derive(Clone, Debug)]
pub(crate) struct WorkerConfig {
    pub workers: usize,
    /// A warming job rebuilds nodes that expire within this many seconds.
    pub warm_horizon_secs: u64,
    /// On shutdown, a running job gets this long to finish before it is parked (queued
    /// again, to resume after the restart).
    pub shutdown_grace: Duration,
}

/// Starts `cfg.workers` workers. They stop when `shutdown` becomes true: each finishes
/// its running job within the grace period or parks it.
pub(crate) fn spawn_workers(
    engine: Arc<Engine>,
    jobs: Arc<Jobs>,
    cfg: WorkerConfig,
    shutdown: watch::Receiver<bool>,
    hook: JobHook,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..cfg.workers)
        .map(|_| {
            let (engine, jobs, cfg, mut shutdown, hook) = (
                engine.clone(),
                jobs.clone(),
                cfg.clone(),
                shutdown.clone(),
                hook.clone(),
            );
            tokio::spawn(async move {
                let mut remote = jobs.remote.clone();
                loop {
                    if *shutdown.borrow() {
                        break;
                    }
                    // Registered before the claim: a job queued or a scope freed between
                    // the claim and the wait still wakes this worker.
                    let woken = jobs.wake.notified();
                    tokio::pin!(woken);
                    woken.as_mut().enable();
                    if let Some(r) = &mut remote {
                        r.borrow_and_update();
                    }
                    let job = match jobs.claim(unix_now()) {
                        Ok(Some(j)) => j,
                        Ok(None) => {
                            jobs.idle(&mut shutdown, &mut remote, woken).await;
                            continue;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "cannot read the job queue");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
                    crate::fail::point("job:claimed");
                    hook(&job, None);
                    run_one(&engine, &jobs, job, &cfg, &mut shutdown, &hook).await;
                }
            })
        })
        .collect()
}

async fn run_one(
    engine: &Engine,
    jobs: &Jobs,
    mut job: Job,
    cfg: &WorkerConfig,
    shutdown: &mut watch::Receiver<bool>,
    hook: &JobHook,
) {
    let now = unix_now();
    let refresh = match job.kind {
        JobKind::Compress => None,
        JobKind::Warm => Some(now + cfg.warm_horizon_secs),
    };
    let build = engine.compress_with(&job.scope, now, refresh, &NoProgress);
    tokio::pin!(build);
    // The claim is renewed while the build runs (every third of the lease), so that
    // another process takes the job back only when this one is gone.
    let renew = async {
        let every = (jobs.who.lease / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match jobs.store.renew_job(job.id, &jobs.who) {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(
                        job = job.id,
                        "lost the claim on a running job; another replica runs it"
                    );
                }
                Err(e) => tracing::warn!(error = %e, job = job.id, "cannot renew a job's claim"),
            }
        }
    };
    tokio::pin!(renew);
    let result = tokio::select! {
        r = &mut build => Some(r),
        _ = &mut renew => unreachable!("renewal never ends"),
        _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
            // Shutting down: give the build its grace period, then park it. The nodes it
            // already wrote stay cached, so the rerun is cheap.
            tokio::select! {
                r = tokio::time::timeout(cfg.shutdown_grace, &mut build) => r.ok(),
                _ = &mut renew => unreachable!("renewal never ends"),
            }
        }
    };
    match result {
        Some(Ok(report)) => {
            job.state = JobState::Done;
            job.finished_at = Some(unix_now());
            job.outcome = Some(JobOutcome::from(&report));
            hook(&job, Some(&report));
        }
        Some(Err(e)) => {
            job.state = JobState::Failed;
            job.finished_at = Some(unix_now());
            job.error = Some(e.to_string());
            hook(&job, None);
        }
        None => {
            tracing::warn!(job = job.id, scope = %job.scope, "job parked by shutdown");
            job.state = JobState::Queued;
            hook(&job, None);
        }
    }
    crate::fail::point("job:before-finish");
    match jobs.release(&job) {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            job = job.id,
            "the job's claim was lost before it ended; the replica that took it back records it"
        ),
        Err(e) => tracing::error!(error = %e, job = job.id, "cannot record the job's end"),
    }
}
