//! Nodes, their deadlines, fallback marks, the pending-index feed and vectors.

use super::*;

impl NodeStore for PgBackend {
    fn put_nodes(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()> {
        let rows = Arc::new(NodeRows::of(nodes, mark)?);
        self.tx("node write", move |tx| {
            let rows = rows.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                write_nodes(tx, &rows).await
            })
        })
    }

    fn get_node(&self, id: &NodeId) -> Result<Option<Node>> {
        let key = id.0.to_vec();
        let body = self.read("node read", move |c| {
            let id = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT body FROM nodes WHERE id = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&id])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        body.map(|b| decode(&format!("node {id}"), &b)).transpose()
    }

    fn deadline(&self, id: &NodeId) -> Result<Option<u64>> {
        let id = id.0.to_vec();
        self.read("deadline read", move |c| {
            let id = id.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT expires_at FROM nodes WHERE id = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&id])
                    .await?
                    .map(|r| r.get::<_, Option<i64>>(0).map_or(u64::MAX, u64_of)))
            })
        })
    }

    fn remove_node(&self, id: &NodeId) -> Result<bool> {
        let ids = Arc::new(vec![id.0.to_vec()]);
        self.tx("node removal", move |tx| {
            let ids = ids.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                Ok(!remove_nodes(tx, &ids).await?.is_empty())
            })
        })
    }

    fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let now = i64_of(now);
        let gone = self.tx("sweep", move |tx| {
            Box::pin(async move {
                feed_writer(tx).await?;
                let st = tx
                    .prepare_cached("DELETE FROM nodes WHERE expires_at <= $1 RETURNING id")
                    .await?;
                let gone: Vec<Vec<u8>> = tx
                    .query(&st, &[&now])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                feed(tx, &gone).await?;
                Ok(gone)
            })
        })?;
        let mut ids = gone
            .iter()
            .map(|b| node_id(b))
            .collect::<PgResult<Vec<_>>>()
            .map_err(|e| e.into_error("sweep"))?;
        ids.sort();
        Ok(ids)
    }

    fn next_deadline(&self) -> Result<Option<u64>> {
        self.read("next deadline", |c| {
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT min(expires_at) FROM nodes")
                    .await?;
                Ok(c.query_one(&st, &[])
                    .await?
                    .get::<_, Option<i64>>(0)
                    .map(u64_of))
            })
        })
    }

    fn node_ids(&self) -> Result<Vec<NodeId>> {
        self.read("node ids", |c| {
            Box::pin(async move {
                c.query("SELECT id FROM nodes ORDER BY id", &[])
                    .await?
                    .iter()
                    .map(|r| node_id(r.get(0)))
                    .collect()
            })
        })
    }

    fn n_nodes(&self) -> usize {
        self.count("nodes", "SELECT count(*) FROM nodes")
    }

    fn get_nodes(&self, ids: &[NodeId]) -> Result<Vec<Option<Node>>> {
        let rows = self.by_ids(
            "node reads",
            "SELECT id, body FROM nodes WHERE id = ANY($1)",
            None,
            ids.iter().map(|id| id.0.to_vec()).collect(),
            |r| r.get::<_, Vec<u8>>(1),
        )?;
        ids.iter()
            .map(|id| {
                rows.get(&id.0[..])
                    .map(|b| decode(&format!("node {id}"), b))
                    .transpose()
            })
            .collect()
    }

    fn deadlines(&self, ids: &[NodeId]) -> Result<Vec<Option<u64>>> {
        let rows = self.by_ids(
            "deadline reads",
            "SELECT id, expires_at FROM nodes WHERE id = ANY($1)",
            None,
            ids.iter().map(|id| id.0.to_vec()).collect(),
            |r| r.get::<_, Option<i64>>(1).map_or(u64::MAX, u64_of),
        )?;
        Ok(ids.iter().map(|id| rows.get(&id.0[..]).copied()).collect())
    }

    fn fallback_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>> {
        let key = id.0.to_vec();
        let b = self.read("fallback mark", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT fallback FROM nodes WHERE id = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&key])
                    .await?
                    .and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("fallback mark of {id}"), &b))
            .transpose()
    }

    fn n_fallback_marks(&self) -> usize {
        self.count(
            "fallback marks",
            "SELECT count(*) FROM nodes WHERE fallback IS NOT NULL",
        )
    }

    fn fallback_counts(&self) -> Result<FallbackCounts> {
        let marks = self.read("fallback marks", |c| {
            Box::pin(async move {
                Ok(
                    c.query("SELECT fallback FROM nodes WHERE fallback IS NOT NULL", &[])
                        .await?
                        .iter()
                        .map(|r| r.get::<_, Vec<u8>>(0))
                        .collect::<Vec<_>>(),
                )
            })
        })?;
        let mut c = FallbackCounts::default();
        for m in marks {
            c.nodes += 1;
            if decode::<FallbackMark>("fallback mark", &m)?.is_retried() {
                c.awaiting_model += 1;
            }
        }
        Ok(c)
    }

    fn pending_index(&self) -> Result<Vec<PendingMark>> {
        let name = self.replica.clone();
        let rows = self.read("change feed", move |c| {
            let name = name.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT id, max(seq) FROM node_changes \
                         WHERE xid >= (SELECT watermark FROM replicas WHERE name = $1) \
                         GROUP BY id ORDER BY id",
                    )
                    .await?;
                c.query(&st, &[&name])
                    .await?
                    .iter()
                    .map(|r| {
                        Ok(PendingMark {
                            id: node_id(r.get(0))?,
                            generation: u64_of(r.get(1)),
                        })
                    })
                    .collect::<PgResult<Vec<_>>>()
            })
        })?;
        Ok(rows)
    }

    fn n_pending_index(&self) -> usize {
        let name = self.replica.clone();
        let r = self.read("change feed", move |c| {
            let name = name.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT count(DISTINCT id) FROM node_changes \
                         WHERE xid >= (SELECT watermark FROM replicas WHERE name = $1)",
                    )
                    .await?;
                Ok(c.query_one(&st, &[&name]).await?.get::<_, i64>(0))
            })
        });
        match r {
            Ok(n) => usize::try_from(n).unwrap_or(0),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count pending index changes");
                0
            }
        }
    }

    /// Moves this replica's watermark past every feed row the index has applied: to the
    /// oldest transaction still running, or to the oldest row not covered by `done` (a
    /// change made after the marks were read), whichever is lower. Rows above it that
    /// were applied are applied again next time (idempotent), none is skipped.
    fn clear_pending_index(&self, done: &[PendingMark]) -> Result<()> {
        if done.is_empty() {
            return Ok(());
        }
        let name = self.replica.clone();
        let ids: Arc<Vec<Vec<u8>>> = Arc::new(done.iter().map(|m| m.id.0.to_vec()).collect());
        let gens: Arc<Vec<i64>> = Arc::new(done.iter().map(|m| i64_of(m.generation)).collect());
        self.tx("index watermark", move |tx| {
            let (name, ids, gens) = (name.clone(), ids.clone(), gens.clone());
            Box::pin(async move {
                let st = tx
                    .prepare_cached(
                        &format!("WITH {HORIZON}, done(id, g) AS (SELECT * FROM unnest($2::bytea[], $3::int8[])), \
                         w AS (SELECT watermark FROM replicas WHERE name = $1), \
                         open AS (SELECT min(c.xid) AS x FROM node_changes c \
                                  LEFT JOIN done d ON d.id = c.id \
                                  WHERE c.xid >= (SELECT watermark FROM w) \
                                  AND (d.g IS NULL OR c.seq > d.g)) \
                         UPDATE replicas SET seen_at = now(), watermark = GREATEST(watermark, \
                             LEAST((SELECT h FROM horizon), (SELECT x FROM open))) \
                         WHERE name = $1"
                        ),
                    )
                    .await?;
                tx.execute(&st, &[&name, &*ids, &*gens, &LOCK_FEED]).await?;
                Ok(())
            })
        })
    }
}

impl VectorStore for PgBackend {
    fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()> {
        let mut rows = BTreeMap::new();
        for (id, v) in vectors {
            rows.insert(id.0.to_vec(), encode(v)?);
        }
        let (ids, vecs): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
        let data = Arc::new((model.0.to_vec(), ids, vecs));
        self.tx("vector write", move |tx| {
            let d = data.clone();
            Box::pin(async move {
                let st = tx
                    .prepare_cached(
                        "INSERT INTO embeddings (model, id, vector) \
                         SELECT $1, * FROM unnest($2::bytea[], $3::bytea[]) \
                         ON CONFLICT (model, id) DO UPDATE SET vector = EXCLUDED.vector",
                    )
                    .await?;
                tx.execute(&st, &[&d.0, &d.1, &d.2]).await?;
                Ok(())
            })
        })
    }

    fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>> {
        let key = (model.0.to_vec(), id.0.to_vec());
        let b = self.read("vector read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT vector FROM embeddings WHERE model = $1 AND id = $2")
                    .await?;
                Ok(c.query_opt(&st, &[&key.0, &key.1])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("embedding of {id}"), &b))
            .transpose()
    }

    fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool> {
        let key = (model.0.to_vec(), id.0.to_vec());
        self.read("vector read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT 1 FROM embeddings WHERE model = $1 AND id = $2")
                    .await?;
                Ok(c.query_opt(&st, &[&key.0, &key.1]).await?.is_some())
            })
        })
    }

    fn n_embeddings(&self) -> usize {
        self.count("vectors", "SELECT count(*) FROM embeddings")
    }

    fn remove_orphan_embeddings(&self) -> Result<usize> {
        let n = self.tx("vector cleanup", |tx| {
            Box::pin(async move {
                Ok(tx
                    .execute(
                        "DELETE FROM embeddings e \
                         WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = e.id)",
                        &[],
                    )
                    .await?)
            })
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn remove_node_embeddings(&self, id: &NodeId) -> Result<()> {
        let id = id.0.to_vec();
        self.tx("vector removal", move |tx| {
            let id = id.clone();
            Box::pin(async move {
                tx.execute("DELETE FROM embeddings WHERE id = $1", &[&id])
                    .await?;
                Ok(())
            })
        })
    }
}
