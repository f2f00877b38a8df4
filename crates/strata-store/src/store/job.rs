//! The job queue's records, and the queue of the embedded backends.
//!
//! A job is claimed by exactly one worker of one process. On the embedded backends (sled,
//! memory) one process holds the store, so [`LocalQueue`] makes enqueue and claim atomic
//! with a process-local lock, and every running job is this process's: the ones a previous
//! process left running are queued again at open. The PostgreSQL backend claims with
//! `FOR UPDATE SKIP LOCKED` and a lease instead (`store::postgres`).

use super::{decode, encode};
use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Build what is missing or expired.
    Compress,
    /// Also rebuild what expires within the warming horizon.
    Warm,
}

impl JobKind {
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Compress => "compress",
            JobKind::Warm => "warm",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobState {
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
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

/// Who claims jobs, and for how long a claim holds without renewal.
#[derive(Clone, Debug)]
pub struct Claimant {
    /// The process's replica name (one live process per name).
    pub owner: String,
    /// A running job whose lease was not renewed for this long is another replica's to
    /// take (its process died). Unused by the embedded backends.
    pub lease: Duration,
}

/// The raw job table of an embedded backend: encoded jobs by id.
pub(crate) trait JobTable {
    fn next_job_id(&self) -> Result<u64>;
    fn put_job_bytes(&self, id: u64, bytes: Vec<u8>) -> Result<()>;
    fn get_job_bytes(&self, id: u64) -> Result<Option<Vec<u8>>>;
    fn remove_job_bytes(&self, id: u64) -> Result<()>;
    /// Every job, lowest id first.
    fn job_bytes(&self) -> Result<Vec<Vec<u8>>>;
    /// Makes the table durable.
    fn flush_jobs(&self) -> Result<()>;
}

/// The queue of a store one process holds: a lock of this process makes enqueue and claim
/// atomic.
#[derive(Default)]
pub(crate) struct LocalQueue {
    lock: Mutex<()>,
}

fn put(t: &dyn JobTable, job: &Job) -> Result<()> {
    t.put_job_bytes(job.id, encode(job)?)
}

pub(crate) fn all(t: &dyn JobTable) -> Result<Vec<Job>> {
    t.job_bytes()?.iter().map(|v| decode("job", v)).collect()
}

pub(crate) fn get(t: &dyn JobTable, id: u64) -> Result<Option<Job>> {
    match t.get_job_bytes(id)? {
        Some(v) => Ok(Some(decode(&format!("job {id}"), &v)?)),
        None => Ok(None),
    }
}

impl LocalQueue {
    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().expect("job queue lock poisoned")
    }

    pub(crate) fn enqueue(
        &self,
        t: &dyn JobTable,
        scope: &str,
        kind: JobKind,
        now: u64,
    ) -> Result<(Job, bool)> {
        let _g = self.guard();
        if let Some(existing) = all(t)?
            .into_iter()
            .find(|j| j.state == JobState::Queued && j.scope == scope && j.kind == kind)
        {
            return Ok((existing, true));
        }
        let job = Job {
            id: t.next_job_id()?,
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
        put(t, &job)?;
        t.flush_jobs()?;
        Ok((job, false))
    }

    /// The oldest queued job whose scope has no running job.
    pub(crate) fn claim(&self, t: &dyn JobTable, now: u64) -> Result<Option<Job>> {
        let _g = self.guard();
        let jobs = all(t)?;
        let busy: std::collections::HashSet<&str> = jobs
            .iter()
            .filter(|j| j.state == JobState::Running)
            .map(|j| j.scope.as_str())
            .collect();
        let Some(mut job) = jobs
            .iter()
            .find(|j| j.state == JobState::Queued && !busy.contains(j.scope.as_str()))
            .cloned()
        else {
            return Ok(None);
        };
        job.state = JobState::Running;
        job.started_at = Some(now);
        job.attempts += 1;
        put(t, &job)?;
        Ok(Some(job))
    }

    /// Records the end (or the parking) of a running job and keeps the newest `keep`
    /// finished jobs.
    pub(crate) fn finish(&self, t: &dyn JobTable, job: &Job, keep: usize) -> Result<bool> {
        let _g = self.guard();
        let running = get(t, job.id)?
            .is_some_and(|j| j.state == JobState::Running && j.attempts == job.attempts);
        if !running {
            return Ok(false);
        }
        put(t, job)?;
        let finished: Vec<u64> = all(t)?
            .into_iter()
            .filter(|j| matches!(j.state, JobState::Done | JobState::Failed))
            .map(|j| j.id)
            .collect();
        for id in finished.iter().take(finished.len().saturating_sub(keep)) {
            t.remove_job_bytes(*id)?;
        }
        t.flush_jobs()?;
        Ok(true)
    }

    /// Jobs a previous process left running are queued again (one process holds the store,
    /// so none of them is still running).
    pub(crate) fn requeue_running(&self, t: &dyn JobTable) -> Result<usize> {
        let _g = self.guard();
        let mut n = 0;
        for mut job in all(t)? {
            if job.state == JobState::Running {
                job.state = JobState::Queued;
                put(t, &job)?;
                n += 1;
            }
        }
        if n > 0 {
            t.flush_jobs()?;
        }
        Ok(n)
    }
}
