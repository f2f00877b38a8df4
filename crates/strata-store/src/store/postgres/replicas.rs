//! What many processes share: scope locks, the change feed's events, replicas' heartbeats.

use super::*;

/// A held scope lock: the pooled connection whose session holds the advisory lock.
struct PgScopeLock {
    client: Option<deadpool_postgres::Object>,
    key: i32,
    scope: String,
    handle: tokio::runtime::Handle,
    fences: Fences,
}

impl Drop for PgScopeLock {
    fn drop(&mut self) {
        self.fences.lock().expect("poisoned").remove(&self.scope);
        let Some(client) = self.client.take() else {
            return;
        };
        let key = self.key;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let ok = client
                .execute("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_SCOPE, &key])
                .await
                .is_ok();
            if !ok {
                // Never hand a session that may still hold the lock back to the pool:
                // closing it releases the lock.
                drop(deadpool_postgres::Object::take(client));
            }
            let _ = tx.send(());
        });
        let _ = rx.recv();
    }
}

impl PgBackend {
    /// Makes sure this replica has a row (a position in the feed). A replica that had
    /// none, on a feed that was ever pruned, rebuilds its index.
    pub(super) fn register(&self, at_open: bool) -> Result<()> {
        let name = self.replica.clone();
        let (inserted, pruned) = self.tx("replica registration", move |tx| {
            let name = name.clone();
            Box::pin(async move {
                let pruned: i64 = tx
                    .query_one(
                        "SELECT value FROM strata_meta WHERE key = 'feed_pruned_below'",
                        &[],
                    )
                    .await?
                    .get(0);
                let r = tx
                    .query_one(
                        "INSERT INTO replicas (name, watermark) VALUES ($1, 0) \
                         ON CONFLICT (name) DO UPDATE SET seen_at = now() \
                         RETURNING (xmax = 0), watermark",
                        &[&name],
                    )
                    .await?;
                let (inserted, w): (bool, i64) = (r.get(0), r.get(1));
                Ok((inserted || w < pruned, pruned))
            })
        })?;
        if inserted && pruned > 0 {
            if !at_open {
                tracing::warn!(
                    replica = %self.replica,
                    "this replica was forgotten (silent for a day); its index is rebuilt"
                );
            }
            self.rebuild.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Drops the feed rows every remembered replica has indexed, and forgets replicas
    /// silent for [`FORGET_REPLICAS_AFTER_SECS`]. At most every [`PRUNE_EVERY`].
    pub(super) fn prune(&self) -> Result<()> {
        {
            let mut last = self.last_prune.lock().expect("poisoned");
            if last.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        self.tx("feed pruning", |tx| {
            Box::pin(async move {
                tx.execute(
                    "DELETE FROM replicas WHERE seen_at < now() - $1 * interval '1 second'",
                    &[&(FORGET_REPLICAS_AFTER_SECS as f64)],
                )
                .await?;
                let low: Option<i64> = tx
                    .query_one("SELECT min(watermark) FROM replicas", &[])
                    .await?
                    .get(0);
                if let Some(low) = low {
                    tx.execute(
                        "UPDATE strata_meta SET value = GREATEST(value, $1) \
                         WHERE key = 'feed_pruned_below'",
                        &[&low],
                    )
                    .await?;
                    tx.execute("DELETE FROM node_changes WHERE xid < $1", &[&low])
                        .await?;
                }
                Ok(())
            })
        })
    }

    /// Listens for the replicas' wake-ups on a connection of its own, reconnecting when
    /// it drops (and then signalling both, since anything may have changed meanwhile).
    pub(super) fn listen(&self) -> Events {
        let (nodes_tx, nodes) = watch::channel(0u64);
        let (jobs_tx, jobs) = watch::channel(0u64);
        let config = self.config.clone();
        self.handle.spawn(async move {
            loop {
                match config.connect(NoTls).await {
                    Ok((client, mut conn)) => {
                        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                        let driver = tokio::spawn(async move {
                            let mut messages = futures::stream::poll_fn(move |cx| {
                                conn.poll_message(cx)
                            });
                            use futures::StreamExt as _;
                            while let Some(m) = messages.next().await {
                                match m {
                                    Ok(AsyncMessage::Notification(n)) => {
                                        let _ = tx.send(n.channel().to_string());
                                    }
                                    Ok(_) => {}
                                    Err(_) => break,
                                }
                            }
                        });
                        if client
                            .batch_execute("LISTEN strata_nodes; LISTEN strata_jobs")
                            .await
                            .is_ok()
                        {
                            nodes_tx.send_modify(|n| *n += 1);
                            jobs_tx.send_modify(|n| *n += 1);
                            while let Some(channel) = rx.recv().await {
                                match channel.as_str() {
                                    "strata_nodes" => nodes_tx.send_modify(|n| *n += 1),
                                    _ => jobs_tx.send_modify(|n| *n += 1),
                                }
                            }
                        }
                        driver.abort();
                        drop(client);
                    }
                    Err(e) => {
                        tracing::warn!(error = %one_line(&e), "cannot listen for other replicas' changes; retrying");
                    }
                }
                if nodes_tx.is_closed() && jobs_tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Events { nodes, jobs }
    }
}

impl Replication for PgBackend {
    fn lock_scope(&self, scope: &str) -> Result<ScopeLock> {
        let key = lock_key(scope);
        let name = scope.as_bytes().to_vec();
        let pool = self.pool.clone();
        let (client, version) = self.run("scope lock", async move {
            let c = pool.get().await?;
            c.execute("SELECT pg_advisory_lock($1, $2)", &[&LOCK_SCOPE, &key])
                .await?;
            let v = c
                .query_opt("SELECT version FROM scopes WHERE name = $1", &[&name])
                .await
                .map(|r| r.map_or(-1, |r| r.get::<_, i64>(0)));
            match v {
                Ok(v) => Ok((c, v)),
                Err(e) => {
                    // Closing the session releases the lock.
                    drop(deadpool_postgres::Object::take(c));
                    Err(e.into())
                }
            }
        })?;
        self.fences
            .lock()
            .expect("poisoned")
            .insert(scope.to_string(), version);
        Ok(ScopeLock::held(Box::new(PgScopeLock {
            client: Some(client),
            key,
            scope: scope.to_string(),
            handle: self.handle.clone(),
            fences: self.fences.clone(),
        })))
    }

    fn events(&self) -> Option<Events> {
        Some(self.events.get_or_init(|| self.listen()).clone())
    }

    fn shared(&self) -> bool {
        true
    }

    fn index_must_rebuild(&self) -> Result<bool> {
        Ok(self.rebuild.swap(false, Ordering::SeqCst))
    }

    fn replicas(&self) -> Result<Vec<ReplicaStatus>> {
        let me = self.replica.clone();
        self.read("replicas", move |c| {
            let me = me.clone();
            Box::pin(async move {
                Ok(c.query(
                    "SELECT r.name, \
                     (SELECT count(DISTINCT id) FROM node_changes c WHERE c.xid >= r.watermark), \
                     extract(epoch FROM now() - r.seen_at)::float8 \
                     FROM replicas r ORDER BY r.name",
                    &[],
                )
                .await?
                .iter()
                .map(|r| {
                    let name: String = r.get(0);
                    ReplicaStatus {
                        this: name == me,
                        name,
                        behind: usize::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                        seen_secs_ago: r.get::<_, f64>(2).max(0.0) as u64,
                    }
                })
                .collect())
            })
        })
    }

    fn heartbeat(&self) -> Result<()> {
        self.register(false)?;
        self.prune()
    }

    fn replica_name(&self) -> String {
        self.replica.clone()
    }

    fn flush(&self) -> Result<()> {
        // Every write committed with synchronous_commit on: durable already.
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        let r = self.read("database size", |c| {
            Box::pin(async move {
                Ok(
                    c.query_one("SELECT pg_database_size(current_database())", &[])
                        .await?
                        .get::<_, i64>(0),
                )
            })
        });
        r.map(u64_of).unwrap_or(0)
    }
}
