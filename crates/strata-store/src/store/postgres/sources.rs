//! Scopes, sources and their texts, ingest and forget steps, views.

use super::*;

impl SourceStore for PgBackend {
    fn get_sources(&self, scope: &str, ids: &[&str]) -> Result<Vec<Option<SourceRecord>>> {
        let rows = self.by_ids(
            "source reads",
            "SELECT id, record FROM sources WHERE scope = $1 AND id = ANY($2)",
            Some(scope.as_bytes().to_vec()),
            ids.iter().map(|id| id.as_bytes().to_vec()).collect(),
            |r| r.get::<_, Vec<u8>>(1),
        )?;
        ids.iter()
            .map(|id| {
                rows.get(id.as_bytes())
                    .map(|b| decode(&format!("source {id}"), b))
                    .transpose()
            })
            .collect()
    }

    fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>> {
        let key = name.as_bytes().to_vec();
        let b = self.read("scope read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT body FROM scopes WHERE name = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&key])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("scope {name}"), &b)).transpose()
    }

    fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        let bodies = self.read("scopes", |c| {
            Box::pin(async move {
                Ok(c.query("SELECT body FROM scopes ORDER BY name", &[])
                    .await?
                    .iter()
                    .map(|r| r.get::<_, Vec<u8>>(0))
                    .collect::<Vec<_>>())
            })
        })?;
        bodies.iter().map(|b| decode("scope", b)).collect()
    }

    fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>> {
        let (s, id) = (scope.as_bytes().to_vec(), source.as_bytes().to_vec());
        let b = self.read("source read", move |c| {
            let (s, id) = (s.clone(), id.clone());
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT record FROM sources WHERE scope = $1 AND id = $2")
                    .await?;
                Ok(c.query_opt(&st, &[&s, &id])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })?;
        b.map(|b| decode(&format!("source {source}"), &b))
            .transpose()
    }

    fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>> {
        let (s, id) = (scope.as_bytes().to_vec(), source.as_bytes().to_vec());
        self.read("text read", move |c| {
            let (s, id) = (s.clone(), id.clone());
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT text FROM sources WHERE scope = $1 AND id = $2")
                    .await?;
                match c.query_opt(&st, &[&s, &id]).await? {
                    Some(r) => Ok(Some(text_of(r.get(0), "a source text")?)),
                    None => Ok(None),
                }
            })
        })
    }

    fn write_sources(&self, step: &SourceStep) -> Result<()> {
        struct Step {
            scope: String,
            name: Vec<u8>,
            body: Vec<u8>,
            nodes: NodeRows,
            source_ids: Vec<Vec<u8>>,
            records: Vec<Vec<u8>>,
            texts: Vec<Vec<u8>>,
            remove_nodes: Vec<Vec<u8>>,
            remove_sources: Vec<Vec<u8>>,
            fence: Option<i64>,
        }
        let scope = step.scope.name.clone();
        let fence = self.fences.lock().expect("poisoned").get(&scope).copied();
        let s = Arc::new(Step {
            name: scope.as_bytes().to_vec(),
            body: encode(&step.scope)?,
            nodes: NodeRows::of(step.put.iter().flat_map(|p| &p.nodes), None)?,
            source_ids: step
                .put
                .iter()
                .map(|p| p.record.id.as_bytes().to_vec())
                .collect(),
            records: step
                .put
                .iter()
                .map(|p| encode(&p.record))
                .collect::<Result<_>>()?,
            texts: step
                .put
                .iter()
                .map(|p| p.text.as_bytes().to_vec())
                .collect(),
            remove_nodes: step.remove_nodes.iter().map(|id| id.0.to_vec()).collect(),
            remove_sources: step
                .remove_sources
                .iter()
                .map(|id| id.as_bytes().to_vec())
                .collect(),
            fence,
            scope,
        });
        let s2 = s.clone();
        let version = self.tx("source write", move |tx| {
            let s = s2.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                fenced(tx, &s.name, s.fence, &s.scope).await?;
                write_nodes(tx, &s.nodes).await?;
                if !s.source_ids.is_empty() {
                    let st = tx
                        .prepare_cached(
                            "INSERT INTO sources (scope, id, record, text) \
                             SELECT $1, * FROM unnest($2::bytea[], $3::bytea[], $4::bytea[]) \
                             ON CONFLICT (scope, id) DO UPDATE \
                             SET record = EXCLUDED.record, text = EXCLUDED.text",
                        )
                        .await?;
                    tx.execute(&st, &[&s.name, &s.source_ids, &s.records, &s.texts])
                        .await?;
                }
                remove_nodes(tx, &s.remove_nodes).await?;
                if !s.remove_sources.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM sources WHERE scope = $1 AND id = ANY($2)")
                        .await?;
                    tx.execute(&st, &[&s.name, &s.remove_sources]).await?;
                }
                let st = tx
                    .prepare_cached(
                        "INSERT INTO scopes (name, body) VALUES ($1, $2) \
                         ON CONFLICT (name) DO UPDATE \
                         SET body = EXCLUDED.body, version = scopes.version + 1 \
                         RETURNING version",
                    )
                    .await?;
                Ok(tx
                    .query_one(&st, &[&s.name, &s.body])
                    .await?
                    .get::<_, i64>(0))
            })
        })?;
        if let Some(v) = self.fences.lock().expect("poisoned").get_mut(&s.scope) {
            *v = version;
        }
        Ok(())
    }

    fn forget(&self, step: &ForgetStep) -> Result<()> {
        struct Step {
            scope: String,
            name: Vec<u8>,
            body: Option<Vec<u8>>,
            remove_nodes: Vec<Vec<u8>>,
            remove_sources: Vec<Vec<u8>>,
            fence: Option<i64>,
        }
        let scope = step.scope.clone();
        let fence = self.fences.lock().expect("poisoned").get(&scope).copied();
        let s = Arc::new(Step {
            name: scope.as_bytes().to_vec(),
            body: step.record.as_ref().map(encode).transpose()?,
            remove_nodes: step.remove_nodes.iter().map(|id| id.0.to_vec()).collect(),
            remove_sources: step
                .remove_sources
                .iter()
                .map(|id| id.as_bytes().to_vec())
                .collect(),
            fence,
            scope,
        });
        let s2 = s.clone();
        let version = self.tx("forget", move |tx| {
            let s = s2.clone();
            Box::pin(async move {
                feed_writer(tx).await?;
                fenced(tx, &s.name, s.fence, &s.scope).await?;
                remove_nodes(tx, &s.remove_nodes).await?;
                if !s.remove_nodes.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM embeddings WHERE id = ANY($1)")
                        .await?;
                    tx.execute(&st, &[&s.remove_nodes]).await?;
                }
                if !s.remove_sources.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM sources WHERE scope = $1 AND id = ANY($2)")
                        .await?;
                    tx.execute(&st, &[&s.name, &s.remove_sources]).await?;
                }
                let st = tx
                    .prepare_cached("DELETE FROM views WHERE scope = $1")
                    .await?;
                tx.execute(&st, &[&s.name]).await?;
                match &s.body {
                    Some(body) => {
                        let st = tx
                            .prepare_cached(
                                "UPDATE scopes SET body = $2, version = version + 1 \
                                 WHERE name = $1 RETURNING version",
                            )
                            .await?;
                        Ok(tx.query_one(&st, &[&s.name, body]).await?.get::<_, i64>(0))
                    }
                    None => {
                        let st = tx
                            .prepare_cached("DELETE FROM scopes WHERE name = $1")
                            .await?;
                        tx.execute(&st, &[&s.name]).await?;
                        Ok(-1)
                    }
                }
            })
        })?;
        if let Some(v) = self.fences.lock().expect("poisoned").get_mut(&s.scope) {
            *v = version;
        }
        Ok(())
    }

    fn put_view(&self, scope: &str, bytes: Vec<u8>) -> Result<()> {
        let data = Arc::new((scope.as_bytes().to_vec(), bytes));
        self.tx("view write", move |tx| {
            let d = data.clone();
            Box::pin(async move {
                let st = tx
                    .prepare_cached(
                        "INSERT INTO views (scope, body) VALUES ($1, $2) \
                         ON CONFLICT (scope) DO UPDATE SET body = EXCLUDED.body",
                    )
                    .await?;
                tx.execute(&st, &[&d.0, &d.1]).await?;
                Ok(())
            })
        })
    }

    fn get_view(&self, scope: &str) -> Result<Option<Vec<u8>>> {
        let key = scope.as_bytes().to_vec();
        self.read("view read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached("SELECT body FROM views WHERE scope = $1")
                    .await?;
                Ok(c.query_opt(&st, &[&key])
                    .await?
                    .map(|r| r.get::<_, Vec<u8>>(0)))
            })
        })
    }
}

/// Locks the scope's row for the transaction and checks the fence: when this process took
/// the scope's lock at `fence` (the record's version then) and the version is another now,
/// the connection that held the lock was lost and another writer may have written — the
/// step is refused and nothing is written.
async fn fenced(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &[u8],
    fence: Option<i64>,
    scope: &str,
) -> PgResult<()> {
    let st = tx
        .prepare_cached("SELECT version FROM scopes WHERE name = $1 FOR UPDATE")
        .await?;
    let now = tx
        .query_opt(&st, &[&name])
        .await?
        .map_or(-1, |r| r.get::<_, i64>(0));
    if let Some(expected) = fence
        && expected != now
    {
        return Err(Error::Store(format!(
            "scope `{scope}` changed while this process held its lock (the connection holding it was lost); nothing was written: retry"
        ))
        .into());
    }
    Ok(())
}
