//! The background job queue: compression and warming jobs, persisted in the store so they
//! survive a restart, coalesced per scope, run by a fixed number of workers.

use crate::build::BuildReport;
use crate::error::Result;
use crate::progress::NoProgress;
use crate::store::Store;
use crate::{clock::unix_now, engine::Engine};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Build what is missing or expired.
    Compress,
    /// Also rebuild what expires within the warming horizon.
    Warm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

/// What a finished build did, kept with its job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobOutcome {
    pub nodes_built: usize,
    pub cache_hits: usize,
    pub model_calls: u64,
    pub fallbacks: u64,
    pub failures: usize,
    pub elapsed_ms: u64,
}

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    pub id: u64,
    pub scope: String,
    pub kind: JobKind,
    pub state: JobState,
    pub created_at: u64,
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
    /// Times the job was started (a job interrupted by a shutdown or crash runs again).
    pub attempts: u32,
    pub outcome: Option<JobOutcome>,
    pub error: Option<String>,
}

/// Finished jobs kept for `GET /api/jobs/{id}`.
const KEEP_FINISHED: usize = 500;

/// The queue. Queue state lives in the store; this process's claims live in memory.
pub struct Jobs {
    store: Store,
    /// Guards claim/enqueue so two workers never take the same job. A std Mutex: never held
    /// across an await.
    lock: Mutex<HashSet<String>>,
    /// Wakes idle workers: a job was queued, or a scope a worker held became free.
    wake: Notify,
    /// Counts finished (or parked) jobs: `wait` watches it instead of polling.
    finished: watch::Sender<u64>,
}

/// Called when a job changes state (metrics).
pub(crate) type JobHook = Arc<dyn Fn(&Job, Option<&BuildReport>) + Send + Sync>;

impl Jobs {
    /// Opens the queue. Jobs left `running` by a previous process were interrupted: they
    /// are queued again.
    pub fn open(store: Store) -> Result<Jobs> {
        for mut job in store.jobs::<Job>()? {
            if job.state == JobState::Running {
                job.state = JobState::Queued;
                store.put_job(job.id, &job)?;
            }
        }
        Ok(Jobs {
            store,
            lock: Mutex::new(HashSet::new()),
            wake: Notify::new(),
            finished: watch::channel(0).0,
        })
    }

    /// Queues a job, or returns the queued (not yet running) job of the same kind for the
    /// same scope: duplicate requests coalesce. The flag says whether it coalesced.
    pub fn enqueue(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        let _g = self.lock.lock().expect("jobs lock poisoned");
        if let Some(existing) = self
            .store
            .jobs::<Job>()?
            .into_iter()
            .find(|j| j.state == JobState::Queued && j.scope == scope && j.kind == kind)
        {
            return Ok((existing, true));
        }
        let job = Job {
            id: self.store.next_job_id()?,
            scope: scope.to_string(),
            kind,
            state: JobState::Queued,
            created_at: now,
            started_at: None,
            finished_at: None,
            attempts: 0,
            outcome: None,
            error: None,
        };
        self.store.put_job(job.id, &job)?;
        self.store.flush()?;
        drop(_g);
        self.wake.notify_waiters();
        Ok((job, false))
    }

    /// Waits until job `id` is done or failed, at most `timeout`; returns the job as it is
    /// then (`None`: no such job). Woken by every job's end, never by polling.
    pub async fn wait(&self, id: u64, timeout: Duration) -> Result<Option<Job>> {
        let mut finished = self.finished.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Seen before the check, so an end between the check and the wait still wakes.
            finished.borrow_and_update();
            let job = self.get(id)?;
            match &job {
                Some(j) if matches!(j.state, JobState::Queued | JobState::Running) => {}
                _ => return Ok(job),
            }
            if tokio::time::timeout_at(deadline, finished.changed())
                .await
                .is_err()
            {
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
        self.store
            .jobs::<Job>()
            .map(|v| v.iter().filter(|j| j.state == JobState::Queued).count())
            .unwrap_or(0)
    }

    /// Takes the oldest queued job whose scope no worker is building.
    fn claim(&self, now: u64) -> Result<Option<Job>> {
        let mut busy = self.lock.lock().expect("jobs lock poisoned");
        let next = self
            .store
            .jobs::<Job>()?
            .into_iter()
            .find(|j| j.state == JobState::Queued && !busy.contains(&j.scope));
        let Some(mut job) = next else {
            return Ok(None);
        };
        job.state = JobState::Running;
        job.started_at = Some(now);
        job.attempts += 1;
        self.store.put_job(job.id, &job)?;
        busy.insert(job.scope.clone());
        Ok(Some(job))
    }

    fn release(&self, job: &Job) -> Result<()> {
        let mut busy = self.lock.lock().expect("jobs lock poisoned");
        busy.remove(&job.scope);
        self.store.put_job(job.id, job)?;
        // Keep the history bounded: the newest finished jobs only.
        let finished: Vec<u64> = self
            .store
            .jobs::<Job>()?
            .into_iter()
            .filter(|j| matches!(j.state, JobState::Done | JobState::Failed))
            .map(|j| j.id)
            .collect();
        for id in finished
            .iter()
            .take(finished.len().saturating_sub(KEEP_FINISHED))
        {
            self.store.remove_job(*id)?;
        }
        self.store.flush()?;
        drop(busy);
        // Another job for this scope may have been waiting for it.
        self.wake.notify_waiters();
        self.finished.send_modify(|n| *n += 1);
        Ok(())
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
                loop {
                    if *shutdown.borrow() {
                        break;
                    }
                    // Registered before the claim: a job queued or a scope freed between
                    // the claim and the wait still wakes this worker.
                    let woken = jobs.wake.notified();
                    tokio::pin!(woken);
                    woken.as_mut().enable();
                    let job = match jobs.claim(unix_now()) {
                        Ok(Some(j)) => j,
                        Ok(None) => {
                            tokio::select! {
                                _ = woken => {}
                                _ = shutdown.changed() => {}
                            }
                            continue;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "cannot read the job queue");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
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
    let result = tokio::select! {
        r = &mut build => Some(r),
        _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
            // Shutting down: give the build its grace period, then park it. The nodes it
            // already wrote stay cached, so the rerun is cheap.
            tokio::time::timeout(cfg.shutdown_grace, &mut build).await.ok()
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
    if let Err(e) = jobs.release(&job) {
        tracing::error!(error = %e, job = job.id, "cannot record the job's end");
    }
}
