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
        // The body and the entries in one snapshot: a writer between two reads cannot
        // make a list that never was.
        let (body, entries) = self.read("scope read", move |c| {
            let key = key.clone();
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT s.body, m.entry FROM scopes s \
                         LEFT JOIN members m ON m.scope = s.name WHERE s.name = $1",
                    )
                    .await?;
                let rows = c.query(&st, &[&key]).await?;
                Ok((
                    rows.first().map(|r| r.get::<_, Vec<u8>>(0)),
                    rows.iter()
                        .filter_map(|r| r.get::<_, Option<Vec<u8>>>(1))
                        .collect::<Vec<_>>(),
                ))
            })
        })?;
        body.map(|b| with_entries(name, &b, &entries)).transpose()
    }

    fn get_scope_head(&self, name: &str) -> Result<Option<ScopeHead>> {
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
        b.map(|b| Ok(StoredScope::decode(&format!("scope {name}"), &b)?.head()))
            .transpose()
    }

    fn get_entry(&self, scope: &str, source: &str) -> Result<Option<SourceEntry>> {
        let (s, id) = (scope.as_bytes().to_vec(), source.as_bytes().to_vec());
        let (body, entry) = self.read("entry read", move |c| {
            let (s, id) = (s.clone(), id.clone());
            Box::pin(async move {
                let st = c
                    .prepare_cached(
                        "SELECT s.body, m.entry FROM scopes s \
                         LEFT JOIN members m ON m.scope = s.name AND m.id = $2 \
                         WHERE s.name = $1",
                    )
                    .await?;
                Ok(match c.query_opt(&st, &[&s, &id]).await? {
                    Some(r) => (Some(r.get::<_, Vec<u8>>(0)), r.get::<_, Option<Vec<u8>>>(1)),
                    None => (None, None),
                })
            })
        })?;
        let Some(body) = body else { return Ok(None) };
        match StoredScope::decode(&format!("scope {scope}"), &body)? {
            StoredScope::Inline(r) => Ok(r.entry(source).cloned()),
            StoredScope::Head(_) => entry
                .map(|e| decode(&format!("entry {source}"), &e))
                .transpose(),
        }
    }

    fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        let rows = self.read("scopes", |c| {
            Box::pin(async move {
                let rows = c
                    .query(
                        "SELECT s.name, s.body, m.entry FROM scopes s \
                         LEFT JOIN members m ON m.scope = s.name ORDER BY s.name",
                        &[],
                    )
                    .await?;
                let mut out: Vec<ScopeRows> = Vec::new();
                for r in &rows {
                    let name: Vec<u8> = r.get(0);
                    if out.last().is_none_or(|(n, _, _)| *n != name) {
                        out.push((name, r.get(1), Vec::new()));
                    }
                    if let (Some(e), Some(last)) = (r.get::<_, Option<Vec<u8>>>(2), out.last_mut())
                    {
                        last.2.push(e);
                    }
                }
                Ok(out)
            })
        })?;
        rows.iter()
            .map(|(name, body, entries)| {
                with_entries(&String::from_utf8_lossy(name), body, entries)
            })
            .collect()
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
            removed: Vec<String>,
            entry_ids: Vec<Vec<u8>>,
            entries: Vec<Vec<u8>>,
        }
        let scope = step.scope.name.clone();
        let s = Arc::new(Step {
            name: scope.as_bytes().to_vec(),
            body: encode(&step.scope)?,
            removed: step.remove_sources.clone(),
            entry_ids: step.list.iter().map(|e| e.id.as_bytes().to_vec()).collect(),
            entries: step.list.iter().map(encode).collect::<Result<_>>()?,
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
            scope: scope.clone(),
        });
        self.fenced_write("source write", &scope, move |tx| {
            let s = s.clone();
            Box::pin(async move {
                move_inline_list(tx, &s.name, &s.scope, &s.removed).await?;
                put_entries(tx, &s.name, &s.entry_ids, &s.entries).await?;
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
                remove_sources(tx, &s.name, &s.removed).await?;
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
        })
    }

    fn forget(&self, step: &ForgetStep) -> Result<()> {
        struct Step {
            scope: String,
            name: Vec<u8>,
            body: Option<Vec<u8>>,
            remove_nodes: Vec<Vec<u8>>,
            removed: Vec<String>,
        }
        let s = Arc::new(Step {
            name: step.scope.as_bytes().to_vec(),
            body: step.record.as_ref().map(encode).transpose()?,
            removed: step.remove_sources.clone(),
            remove_nodes: step.remove_nodes.iter().map(|id| id.0.to_vec()).collect(),
            scope: step.scope.clone(),
        });
        self.fenced_write("forget", &step.scope, move |tx| {
            let s = s.clone();
            Box::pin(async move {
                remove_nodes(tx, &s.remove_nodes).await?;
                if !s.remove_nodes.is_empty() {
                    let st = tx
                        .prepare_cached("DELETE FROM embeddings WHERE id = ANY($1)")
                        .await?;
                    tx.execute(&st, &[&s.remove_nodes]).await?;
                }
                if s.body.is_some() {
                    move_inline_list(tx, &s.name, &s.scope, &s.removed).await?;
                } else {
                    let st = tx
                        .prepare_cached("DELETE FROM members WHERE scope = $1")
                        .await?;
                    tx.execute(&st, &[&s.name]).await?;
                }
                remove_sources(tx, &s.name, &s.removed).await?;
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
        })
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

/// A scope's name, body and `members` entries, as read.
type ScopeRows = (Vec<u8>, Vec<u8>, Vec<Vec<u8>>);

/// A stored scope with its list: the inline one (format 1), or its `members` rows.
fn with_entries(name: &str, body: &[u8], entries: &[Vec<u8>]) -> Result<ScopeRecord> {
    match StoredScope::decode(&format!("scope {name}"), body)? {
        StoredScope::Inline(r) => Ok(r),
        StoredScope::Head(h) => {
            let entries = entries
                .iter()
                .map(|e| decode(&format!("an entry of scope {name}"), e))
                .collect::<Result<Vec<SourceEntry>>>()?;
            Ok(ScopeRecord::of(h, entries))
        }
    }
}

/// A scope record of format 1 (its list inline, written by an older strata) moves its list
/// to `members`, but for the sources the step removes; the step then writes the head.
async fn move_inline_list(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &[u8],
    scope: &str,
    removed: &[String],
) -> PgResult<()> {
    let st = tx
        .prepare_cached("SELECT body FROM scopes WHERE name = $1")
        .await?;
    let Some(row) = tx.query_opt(&st, &[&name]).await? else {
        return Ok(());
    };
    let moved = StoredScope::decode(&format!("scope {scope}"), &row.get::<_, Vec<u8>>(0))?
        .entries_to_move(removed);
    if moved.is_empty() {
        return Ok(());
    }
    let ids: Vec<Vec<u8>> = moved.iter().map(|e| e.id.as_bytes().to_vec()).collect();
    let entries = moved.iter().map(encode).collect::<Result<Vec<_>>>()?;
    put_entries(tx, name, &ids, &entries).await
}

/// Writes a scope's entries (a source listed anew, or its entry changed).
async fn put_entries(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &[u8],
    ids: &[Vec<u8>],
    entries: &[Vec<u8>],
) -> PgResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let st = tx
        .prepare_cached(
            "INSERT INTO members (scope, id, entry) \
             SELECT $1, * FROM unnest($2::bytea[], $3::bytea[]) \
             ON CONFLICT (scope, id) DO UPDATE SET entry = EXCLUDED.entry",
        )
        .await?;
    tx.execute(&st, &[&name, &ids, &entries]).await?;
    Ok(())
}

/// Removes sources from a scope: record, text and entry.
async fn remove_sources(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &[u8],
    ids: &[String],
) -> PgResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
    for sql in [
        "DELETE FROM sources WHERE scope = $1 AND id = ANY($2)",
        "DELETE FROM members WHERE scope = $1 AND id = ANY($2)",
    ] {
        let st = tx.prepare_cached(sql).await?;
        tx.execute(&st, &[&name, &ids]).await?;
    }
    Ok(())
}

impl PgBackend {
    /// One transaction that writes `scope` under its fence: it announces a write to the
    /// change feed, locks the scope's row and checks the fence ([`fenced`]), runs `body`
    /// (which returns the scope's new version, -1 when it deleted the scope), and after the
    /// commit moves this process's fence to that version — what every step that writes a
    /// scope's record shares.
    fn fenced_write<F>(&self, what: &'static str, scope: &str, body: F) -> Result<()>
    where
        F: for<'a> Fn(
                &'a deadpool_postgres::Transaction<'a>,
            )
                -> std::pin::Pin<Box<dyn Future<Output = PgResult<i64>> + Send + 'a>>
            + Send
            + Sync
            + 'static,
    {
        let fence = self.fences.lock().expect("poisoned").get(scope).copied();
        let (name, scope_) = (scope.as_bytes().to_vec(), scope.to_string());
        let body = Arc::new(body);
        let version = self.tx(what, move |tx| {
            let (body, name, scope) = (body.clone(), name.clone(), scope_.clone());
            Box::pin(async move {
                feed_writer(tx).await?;
                fenced(tx, &name, fence, &scope).await?;
                body(tx).await
            })
        })?;
        if let Some(v) = self.fences.lock().expect("poisoned").get_mut(scope) {
            *v = version;
        }
        Ok(())
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
