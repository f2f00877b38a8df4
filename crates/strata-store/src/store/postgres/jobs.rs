//! The job queue: enqueue, claim under a lease, renew, finish, requeue.

use super::*;

const JOB_COLS: &str =
    "id, scope, kind, state, created_at, started_at, finished_at, attempts, outcome, error";

fn job_of(r: &tokio_postgres::Row) -> PgResult<Job> {
    let id: i64 = r.get(0);
    let kind = match r.get::<_, &str>(2) {
        "compress" => JobKind::Compress,
        "warm" => JobKind::Warm,
        k => {
            return Err(Error::DataCorruption(format!("job {id}: unknown kind {k:?}")).into());
        }
    };
    let state = match r.get::<_, &str>(3) {
        "queued" => JobState::Queued,
        "running" => JobState::Running,
        "done" => JobState::Done,
        "failed" => JobState::Failed,
        s => {
            return Err(Error::DataCorruption(format!("job {id}: unknown state {s:?}")).into());
        }
    };
    let outcome = match r.get::<_, Option<&[u8]>>(8) {
        Some(b) => Some(decode::<JobOutcome>(&format!("outcome of job {id}"), b)?),
        None => None,
    };
    Ok(Job {
        id: u64_of(id),
        scope: text_of(r.get(1), "a job's scope")?,
        kind,
        state,
        created_at: u64_of(r.get(4)),
        started_at: r.get::<_, Option<i64>>(5).map(u64_of),
        finished_at: r.get::<_, Option<i64>>(6).map(u64_of),
        attempts: u32::try_from(r.get::<_, i32>(7)).unwrap_or(0),
        outcome,
        error: r.get(9),
    })
}

impl JobQueue for PgBackend {
    fn enqueue_job(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        let scope = scope.as_bytes().to_vec();
        let key = lock_key(&String::from_utf8_lossy(&scope));
        let now = i64_of(now);
        self.tx("job enqueue", move |tx| {
            let scope = scope.clone();
            Box::pin(async move {
                // Two replicas queueing for one scope at once coalesce too.
                tx.execute(
                    "SELECT pg_advisory_xact_lock($1, $2)",
                    &[&LOCK_ENQUEUE, &key],
                )
                .await?;
                let found = tx
                    .query_opt(
                        &format!(
                            "SELECT {JOB_COLS} FROM jobs WHERE scope = $1 AND kind = $2 \
                             AND state = 'queued' ORDER BY id LIMIT 1"
                        ),
                        &[&scope, &kind.name()],
                    )
                    .await?;
                if let Some(r) = found {
                    return Ok((job_of(&r)?, true));
                }
                let r = tx
                    .query_one(
                        &format!(
                            "INSERT INTO jobs (id, scope, kind, state, created_at) \
                             VALUES (nextval('job_ids'), $1, $2, 'queued', $3) \
                             RETURNING {JOB_COLS}"
                        ),
                        &[&scope, &kind.name(), &now],
                    )
                    .await?;
                tx.batch_execute("NOTIFY strata_jobs").await?;
                Ok((job_of(&r)?, false))
            })
        })
    }

    fn claim_job(&self, who: &Claimant, now: u64) -> Result<Option<Job>> {
        let owner = who.owner.clone();
        let lease_ms = who.lease.as_millis() as f64;
        let now = i64_of(now);
        let pool = self.pool.clone();
        self.run("job claim", async move {
            // A claim that collides with another replica's claim of the same scope (the
            // unique index on running jobs) tries again; it then skips that scope.
            let mut attempt = 0;
            loop {
                let r: PgResult<Option<Job>> = async {
                    let mut c = pool.get().await?;
                    let tx = c.transaction().await?;
                    // Leases that ran out: their replica died. Their jobs are queued again.
                    let requeued = tx
                        .execute(
                            "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL \
                             WHERE state = 'running' AND lease_until < clock_timestamp()",
                            &[],
                        )
                        .await?;
                    if requeued > 0 {
                        tx.batch_execute("NOTIFY strata_jobs").await?;
                    }
                    let st = tx
                        .prepare_cached(&format!(
                            "UPDATE jobs SET state = 'running', owner = $1, \
                             lease_until = clock_timestamp() + $2 * interval '1 millisecond', \
                             started_at = $3, attempts = attempts + 1 \
                             WHERE id = (SELECT j.id FROM jobs j WHERE j.state = 'queued' \
                                 AND NOT EXISTS (SELECT 1 FROM jobs r \
                                     WHERE r.scope = j.scope AND r.state = 'running') \
                                 ORDER BY j.id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                             RETURNING {JOB_COLS}"
                        ))
                        .await?;
                    let job = match tx.query_opt(&st, &[&owner, &lease_ms, &now]).await? {
                        Some(r) => Some(job_of(&r)?),
                        None => None,
                    };
                    tx.commit().await?;
                    Ok(job)
                }
                .await;
                match r {
                    Err(e)
                        if attempt < 8
                            && (e.is_transient()
                                || e.code() == Some(&SqlState::UNIQUE_VIOLATION)) =>
                    {
                        attempt += 1;
                    }
                    r => return r,
                }
            }
        })
    }

    fn renew_job(&self, id: u64, who: &Claimant) -> Result<bool> {
        let (id, owner) = (i64_of(id), who.owner.clone());
        let lease_ms = who.lease.as_millis() as f64;
        self.tx("job lease", move |tx| {
            let owner = owner.clone();
            Box::pin(async move {
                let n = tx
                    .execute(
                        "UPDATE jobs SET lease_until = clock_timestamp() + $3 * interval '1 millisecond' \
                         WHERE id = $1 AND owner = $2 AND state = 'running'",
                        &[&id, &owner, &lease_ms],
                    )
                    .await?;
                Ok(n == 1)
            })
        })
    }

    fn finish_job(&self, job: &Job, who: &Claimant, keep: usize) -> Result<bool> {
        let job = Arc::new(job.clone());
        let outcome = Arc::new(job.outcome.as_ref().map(encode).transpose()?);
        let owner = who.owner.clone();
        let keep = i64::try_from(keep.max(1)).unwrap_or(i64::MAX);
        self.tx("job end", move |tx| {
            let (job, outcome, owner) = (job.clone(), outcome.clone(), owner.clone());
            Box::pin(async move {
                let error = job.error.as_ref().map(|e| e.replace('\0', " "));
                let n = tx
                    .execute(
                        "UPDATE jobs SET state = $3, started_at = $4, finished_at = $5, \
                         outcome = $6, error = $7, owner = NULL, lease_until = NULL \
                         WHERE id = $1 AND owner = $2 AND state = 'running' AND attempts = $8",
                        &[
                            &i64_of(job.id),
                            &owner,
                            &job.state.name(),
                            &job.started_at.map(i64_of),
                            &job.finished_at.map(i64_of),
                            &*outcome,
                            &error,
                            &i32::try_from(job.attempts).unwrap_or(i32::MAX),
                        ],
                    )
                    .await?;
                if n != 1 {
                    return Ok(false);
                }
                tx.execute(
                    "DELETE FROM jobs WHERE state IN ('done', 'failed') AND id < \
                     (SELECT id FROM jobs WHERE state IN ('done', 'failed') \
                      ORDER BY id DESC OFFSET $1::int8 - 1 LIMIT 1)",
                    &[&keep],
                )
                .await?;
                tx.batch_execute("NOTIFY strata_jobs").await?;
                Ok(true)
            })
        })
    }

    fn requeue_abandoned(&self, who: &Claimant) -> Result<usize> {
        let owner = who.owner.clone();
        let n = self.tx("job requeue", move |tx| {
            let owner = owner.clone();
            Box::pin(async move {
                // This replica's previous process is gone (one live process per name),
                // and so is every replica whose lease ran out.
                let n = tx
                    .execute(
                        "UPDATE jobs SET state = 'queued', owner = NULL, lease_until = NULL \
                         WHERE state = 'running' \
                         AND (owner = $1 OR lease_until < clock_timestamp())",
                        &[&owner],
                    )
                    .await?;
                if n > 0 {
                    tx.batch_execute("NOTIFY strata_jobs").await?;
                }
                Ok(n)
            })
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn next_lease_expiry(&self) -> Result<Option<Duration>> {
        let ms = self.read("job leases", |c| {
            Box::pin(async move {
                Ok(c.query_one(
                    "SELECT (extract(epoch FROM min(lease_until) - clock_timestamp()) * 1000)::float8 \
                     FROM jobs WHERE state = 'running'",
                    &[],
                )
                .await?
                .get::<_, Option<f64>>(0))
            })
        })?;
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64)))
    }

    fn get_job(&self, id: u64) -> Result<Option<Job>> {
        let id = i64_of(id);
        self.read("job read", move |c| {
            Box::pin(async move {
                match c
                    .query_opt(
                        &format!("SELECT {JOB_COLS} FROM jobs WHERE id = $1"),
                        &[&id],
                    )
                    .await?
                {
                    Some(r) => Ok(Some(job_of(&r)?)),
                    None => Ok(None),
                }
            })
        })
    }

    fn jobs(&self) -> Result<Vec<Job>> {
        self.read("jobs", |c| {
            Box::pin(async move {
                c.query(&format!("SELECT {JOB_COLS} FROM jobs ORDER BY id"), &[])
                    .await?
                    .iter()
                    .map(job_of)
                    .collect()
            })
        })
    }

    fn queued_jobs(&self) -> Result<usize> {
        let n = self.read("jobs", |c| {
            Box::pin(async move {
                Ok(
                    c.query_one("SELECT count(*) FROM jobs WHERE state = 'queued'", &[])
                        .await?
                        .get::<_, i64>(0),
                )
            })
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
