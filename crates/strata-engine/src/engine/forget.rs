//! Forgetting: sources leave their scope with every node derived from them, from the store
//! and the index, in one store transaction (docs/ARCHITECTURE.md, "Writes").

use super::Engine;
use crate::error::{Error, Result};
use crate::level::PerLevel;
use crate::node::NodeId;
use crate::store::ForgetStep;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};

/// What a forget removed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ForgetReport {
    pub scope: String,
    /// Whether the scope itself went (no sources were named: the whole scope).
    pub scope_removed: bool,
    /// The sources removed, in scope order.
    pub sources: Vec<String>,
    /// Nodes removed per level (full, detailed, summary, abstract, metadata): the FULL
    /// chunks of the sources and every node built over them, of any build.
    pub nodes_by_level: PerLevel<usize>,
    pub nodes: usize,
    /// Bytes of source text removed.
    pub bytes: u64,
    /// Bytes of node text removed (every level).
    pub node_bytes: u64,
    /// Sources the scope still holds (its levels are rebuilt from them on the next
    /// compress or read).
    pub remaining_sources: usize,
}

impl Engine {
    /// Removes `sources` (none: every source, and the scope itself) from `scope` with
    /// every node derived from them: their FULL chunks, and every stored node of the scope
    /// whose citations name one of them (the current tree's and any older build's), with
    /// their vectors and the scope's last complete view; the index drops them too. The
    /// rest of the scope keeps its nodes where the new tree still has them, and the next
    /// compress (or context, or query) builds what the new tree lacks.
    ///
    /// The write protocol: under the write lock (and the scope's lock on a shared store)
    /// and with builds' node writes held off, what to remove is decided and removed in one
    /// store transaction; a build that ran meanwhile writes nothing over it afterwards.
    /// The report is returned after the store is flushed and the index has committed the
    /// removals; a crash before the transaction leaves everything as it was, after it the
    /// next open removes what the index still holds.
    pub fn forget(&self, scope: &str, sources: &[String], now: u64) -> Result<ForgetReport> {
        crate::id::scope(scope)?;
        for s in sources {
            crate::id::source(s)?;
        }
        self.writing()?;
        let report = {
            let _w = self.write.lock().expect("write lock poisoned");
            let _s = self.store.lock_scope(scope)?;
            let mut forgets = self.forgets.write();
            let r = self.forget_locked(scope, sources, now)?;
            *forgets += 1;
            r
        };
        crate::fail::point("forget:after-commit");
        self.store.flush()?;
        crate::fail::point("forget:after-flush");
        self.sync_index()?;
        // The index's files drop the documents' terms too (the removal itself is durable
        // and searches no longer see them: a failure here is only logged).
        if let Err(e) = self.index.purge_deleted() {
            tracing::warn!(error = %e, "forgotten documents stay in the index files until its next merge");
        }
        // Windows keep their scope's ranked sentences in memory: drop them all.
        crate::context::forget_cached();
        if sources.is_empty() {
            // A scope forgotten whole is not warmed again.
            self.forget_queried(scope);
        }
        Ok(report)
    }

    fn forget_locked(&self, scope: &str, sources: &[String], now: u64) -> Result<ForgetReport> {
        let rec = self.scope(scope)?;
        let whole = sources.is_empty();
        let gone: BTreeSet<&str> = if whole {
            rec.sources.iter().map(|e| e.id.as_str()).collect()
        } else {
            let listed: HashSet<&str> = rec.sources.iter().map(|e| e.id.as_str()).collect();
            for s in sources {
                if !listed.contains(s.as_str()) {
                    return Err(Error::UnknownSource {
                        scope: scope.to_string(),
                        source_id: s.clone(),
                    });
                }
            }
            sources.iter().map(String::as_str).collect()
        };
        let mut next = rec.clone();
        next.sources.retain(|e| !gone.contains(e.id.as_str()));
        next.updated_at = now;
        // What the rest of the scope still stands on is never removed: the new tree (its
        // FULL chunks included). Node ids name their scope and source, so a chunk of a
        // forgotten source is never another source's; this holds whatever ids share.
        let mut keep: HashSet<NodeId> = HashSet::new();
        let record = if whole {
            None
        } else {
            keep.extend(self.plan_of(&next)?.all_ids());
            Some(next)
        };
        let mut report = ForgetReport {
            scope: scope.to_string(),
            scope_removed: whole,
            sources: rec
                .sources
                .iter()
                .filter(|e| gone.contains(e.id.as_str()))
                .map(|e| e.id.clone())
                .collect(),
            remaining_sources: record.as_ref().map_or(0, |r| r.sources.len()),
            ..Default::default()
        };
        let ids: Vec<&str> = gone.iter().copied().collect();
        let mut remove: BTreeSet<NodeId> = BTreeSet::new();
        for r in self.store.get_sources(scope, &ids)?.into_iter().flatten() {
            report.bytes += r.bytes;
            remove.extend(
                r.chunks
                    .iter()
                    .map(|c| c.id)
                    .filter(|id| !keep.contains(id)),
            );
        }
        // Every stored node of the scope over a forgotten source, whichever build made
        // it: a derived node cites every chunk beneath it.
        let stored = self.store.node_ids()?;
        for batch in stored.chunks(1024) {
            for n in self.store.get_nodes(batch)?.into_iter().flatten() {
                if n.scope == scope
                    && !keep.contains(&n.id)
                    && (whole || n.citations.iter().any(|c| gone.contains(c.source.as_str())))
                {
                    remove.insert(n.id);
                }
            }
        }
        let remove: Vec<NodeId> = remove.into_iter().collect();
        for batch in remove.chunks(1024) {
            for n in self.store.get_nodes(batch)?.into_iter().flatten() {
                report.nodes_by_level[n.level] += 1;
                report.nodes += 1;
                report.node_bytes += n.text.len() as u64;
            }
        }
        crate::fail::point("forget:before-commit");
        self.store.forget(&ForgetStep {
            scope: scope.to_string(),
            record: record.as_ref().map(|r| r.head()),
            remove_sources: report.sources.clone(),
            remove_nodes: remove,
        })?;
        Ok(report)
    }
}
