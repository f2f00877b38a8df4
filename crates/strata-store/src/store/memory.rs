//! The in-memory backend: plain ordered maps behind one mutex. For tests, and as the
//! reference the conformance suite holds every other backend to. Nothing is durable, so
//! `flush` has nothing to do; every operation is atomic because it holds the one lock.

use super::job::{self, JobTable, LocalQueue};
use super::{
    Claimant, EmbedKey, FallbackCounts, ForgetStep, Job, JobKind, JobQueue, NodeStore, PendingMark,
    Replication, ScopeHead, ScopeRecord, SourceEntry, SourceRecord, SourceStep, SourceStore,
    VectorStore,
};
use crate::error::Result;
use crate::node::{FallbackMark, Node, NodeId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

#[derive(Default)]
pub struct MemoryBackend {
    inner: Mutex<Inner>,
    queue: LocalQueue,
}

#[derive(Default)]
struct Inner {
    nodes: BTreeMap<NodeId, Node>,
    /// (deadline, id) for every node that expires.
    expiry: BTreeSet<(u64, NodeId)>,
    scopes: BTreeMap<String, ScopeHead>,
    /// (scope, source) → the scope's entry for it.
    members: BTreeMap<(String, String), SourceEntry>,
    /// (scope, source) → record and text.
    sources: BTreeMap<(String, String), (SourceRecord, String)>,
    pending: BTreeMap<NodeId, u64>,
    fallbacks: BTreeMap<NodeId, FallbackMark>,
    generation: u64,
    embeddings: BTreeMap<(EmbedKey, NodeId), Vec<f32>>,
    views: BTreeMap<String, Vec<u8>>,
    /// [`NodeStore::losses`].
    losses: u64,
    jobs: BTreeMap<u64, Vec<u8>>,
    next_job: u64,
}

impl Inner {
    fn scope(&self, head: &ScopeHead) -> ScopeRecord {
        let entries = self
            .members
            .range((head.name.clone(), String::new())..)
            .take_while(|((s, _), _)| *s == head.name)
            .map(|(_, e)| e.clone())
            .collect();
        ScopeRecord::of(head.clone(), entries)
    }

    fn mark(&mut self, id: NodeId) {
        self.generation += 1;
        self.pending.insert(id, self.generation);
    }

    fn put(&mut self, node: &Node, mark: Option<FallbackMark>) {
        match mark {
            Some(m) => self.fallbacks.insert(node.id, m),
            None => self.fallbacks.remove(&node.id),
        };
        if let Some(old) = self.nodes.get(&node.id) {
            if old.expires_at.unwrap_or(u64::MAX) > node.expires_at.unwrap_or(u64::MAX) {
                self.losses += 1;
            }
            if let Some(at) = old.expires_at {
                self.expiry.remove(&(at, node.id));
            }
        }
        if let Some(at) = node.expires_at {
            self.expiry.insert((at, node.id));
        }
        self.nodes.insert(node.id, node.clone());
        self.mark(node.id);
    }

    fn remove(&mut self, id: &NodeId) -> bool {
        self.fallbacks.remove(id);
        match self.nodes.remove(id) {
            Some(old) => {
                if let Some(at) = old.expires_at {
                    self.expiry.remove(&(at, *id));
                }
                self.losses += 1;
                self.mark(*id);
                true
            }
            None => false,
        }
    }
}

impl MemoryBackend {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("memory store poisoned")
    }
}

impl NodeStore for MemoryBackend {
    fn put_nodes(&self, nodes: &[Node], mark: Option<FallbackMark>) -> Result<()> {
        let mut m = self.lock();
        for n in nodes {
            m.put(n, mark);
        }
        Ok(())
    }

    fn fallback_mark(&self, id: &NodeId) -> Result<Option<FallbackMark>> {
        Ok(self.lock().fallbacks.get(id).copied())
    }

    fn n_fallback_marks(&self) -> usize {
        self.lock().fallbacks.len()
    }

    fn fallback_counts(&self) -> Result<FallbackCounts> {
        let m = self.lock();
        Ok(FallbackCounts {
            nodes: m.fallbacks.len(),
            awaiting_model: m.fallbacks.values().filter(|f| f.is_retried()).count(),
        })
    }

    fn get_node(&self, id: &NodeId) -> Result<Option<Node>> {
        Ok(self.lock().nodes.get(id).cloned())
    }

    fn deadline(&self, id: &NodeId) -> Result<Option<u64>> {
        Ok(self
            .lock()
            .nodes
            .get(id)
            .map(|n| n.expires_at.unwrap_or(u64::MAX)))
    }

    fn remove_node(&self, id: &NodeId) -> Result<bool> {
        Ok(self.lock().remove(id))
    }

    fn sweep(&self, now: u64) -> Result<Vec<NodeId>> {
        let mut m = self.lock();
        let due: Vec<NodeId> = m
            .expiry
            .range(..=(now, NodeId([0xff; 32])))
            .map(|(_, id)| *id)
            .collect();
        for id in &due {
            m.remove(id);
        }
        Ok(due)
    }

    fn losses(&self) -> Result<Option<u64>> {
        Ok(Some(self.lock().losses))
    }

    fn next_deadline(&self) -> Result<Option<u64>> {
        Ok(self.lock().expiry.first().map(|(at, _)| *at))
    }

    fn node_ids(&self) -> Result<Vec<NodeId>> {
        Ok(self.lock().nodes.keys().copied().collect())
    }

    fn n_nodes(&self) -> usize {
        self.lock().nodes.len()
    }

    fn pending_index(&self) -> Result<Vec<PendingMark>> {
        Ok(self
            .lock()
            .pending
            .iter()
            .map(|(id, g)| PendingMark {
                id: *id,
                generation: *g,
            })
            .collect())
    }

    fn n_pending_index(&self) -> usize {
        self.lock().pending.len()
    }

    fn clear_pending_index(&self, done: &[PendingMark]) -> Result<()> {
        let mut m = self.lock();
        for d in done {
            if m.pending.get(&d.id) == Some(&d.generation) {
                m.pending.remove(&d.id);
            }
        }
        Ok(())
    }
}

impl SourceStore for MemoryBackend {
    fn get_scope(&self, name: &str) -> Result<Option<ScopeRecord>> {
        let m = self.lock();
        Ok(m.scopes.get(name).map(|h| m.scope(h)))
    }

    fn get_scope_head(&self, name: &str) -> Result<Option<ScopeHead>> {
        Ok(self.lock().scopes.get(name).cloned())
    }

    fn get_entry(&self, scope: &str, source: &str) -> Result<Option<SourceEntry>> {
        Ok(self
            .lock()
            .members
            .get(&(scope.to_string(), source.to_string()))
            .cloned())
    }

    fn scopes(&self) -> Result<Vec<ScopeRecord>> {
        let m = self.lock();
        Ok(m.scopes.values().map(|h| m.scope(h)).collect())
    }

    fn get_source(&self, scope: &str, source: &str) -> Result<Option<SourceRecord>> {
        Ok(self
            .lock()
            .sources
            .get(&(scope.to_string(), source.to_string()))
            .map(|(r, _)| r.clone()))
    }

    fn get_text(&self, scope: &str, source: &str) -> Result<Option<String>> {
        Ok(self
            .lock()
            .sources
            .get(&(scope.to_string(), source.to_string()))
            .map(|(_, t)| t.clone()))
    }

    fn write_sources(&self, step: &SourceStep) -> Result<()> {
        let mut m = self.lock();
        let scope = step.scope.name.clone();
        for p in &step.put {
            for n in &p.nodes {
                m.put(n, None);
            }
            m.sources.insert(
                (scope.clone(), p.record.id.clone()),
                (p.record.clone(), p.text.clone()),
            );
        }
        for id in &step.remove_nodes {
            m.remove(id);
        }
        for e in &step.list {
            m.members.insert((scope.clone(), e.id.clone()), e.clone());
        }
        for id in &step.remove_sources {
            m.sources.remove(&(scope.clone(), id.clone()));
            m.members.remove(&(scope.clone(), id.clone()));
        }
        m.scopes.insert(scope, step.scope.clone());
        Ok(())
    }

    fn forget(&self, step: &ForgetStep) -> Result<()> {
        let mut m = self.lock();
        for id in &step.remove_nodes {
            m.remove(id);
        }
        let gone: BTreeSet<&NodeId> = step.remove_nodes.iter().collect();
        m.embeddings.retain(|(_, n), _| !gone.contains(n));
        for id in &step.remove_sources {
            m.sources.remove(&(step.scope.clone(), id.clone()));
            m.members.remove(&(step.scope.clone(), id.clone()));
        }
        match &step.record {
            Some(r) => m.scopes.insert(step.scope.clone(), r.clone()),
            None => {
                m.members.retain(|(s, _), _| *s != step.scope);
                m.scopes.remove(&step.scope)
            }
        };
        m.views.remove(&step.scope);
        m.views.remove(&super::liveness_key(&step.scope));
        Ok(())
    }

    fn put_view(&self, scope: &str, bytes: Vec<u8>) -> Result<()> {
        self.lock().views.insert(scope.to_string(), bytes);
        Ok(())
    }

    fn get_view(&self, scope: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().views.get(scope).cloned())
    }
}

impl VectorStore for MemoryBackend {
    fn put_embeddings(&self, model: EmbedKey, vectors: &[(NodeId, Vec<f32>)]) -> Result<()> {
        let mut m = self.lock();
        for (id, v) in vectors {
            m.embeddings.insert((model, *id), v.clone());
        }
        Ok(())
    }

    fn get_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<Option<Vec<f32>>> {
        Ok(self.lock().embeddings.get(&(model, *id)).cloned())
    }

    fn has_embedding(&self, model: EmbedKey, id: &NodeId) -> Result<bool> {
        Ok(self.lock().embeddings.contains_key(&(model, *id)))
    }

    fn n_embeddings(&self) -> usize {
        self.lock().embeddings.len()
    }

    fn remove_orphan_embeddings(&self) -> Result<usize> {
        let mut m = self.lock();
        let before = m.embeddings.len();
        let Inner {
            embeddings, nodes, ..
        } = &mut *m;
        embeddings.retain(|(_, id), _| nodes.contains_key(id));
        Ok(before - m.embeddings.len())
    }

    fn remove_node_embeddings(&self, id: &NodeId) -> Result<()> {
        self.lock().embeddings.retain(|(_, n), _| n != id);
        Ok(())
    }
}

impl JobQueue for MemoryBackend {
    fn enqueue_job(&self, scope: &str, kind: JobKind, now: u64) -> Result<(Job, bool)> {
        self.queue.enqueue(self, scope, kind, now)
    }

    fn claim_job(&self, _who: &Claimant, now: u64) -> Result<Option<Job>> {
        self.queue.claim(self, now)
    }

    fn renew_job(&self, _id: u64, _who: &Claimant) -> Result<bool> {
        Ok(true)
    }

    fn finish_job(&self, job: &Job, _who: &Claimant, keep: usize) -> Result<bool> {
        self.queue.finish(self, job, keep)
    }

    fn requeue_abandoned(&self, _who: &Claimant) -> Result<usize> {
        self.queue.requeue_running(self)
    }

    fn get_job(&self, id: u64) -> Result<Option<Job>> {
        job::get(self, id)
    }

    fn jobs(&self) -> Result<Vec<Job>> {
        job::all(self)
    }
}

impl Replication for MemoryBackend {
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        0
    }
}

impl JobTable for MemoryBackend {
    fn next_job_id(&self) -> Result<u64> {
        let mut m = self.lock();
        m.next_job += 1;
        Ok(m.next_job)
    }

    fn put_job_bytes(&self, id: u64, bytes: Vec<u8>) -> Result<()> {
        self.lock().jobs.insert(id, bytes);
        Ok(())
    }

    fn get_job_bytes(&self, id: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.lock().jobs.get(&id).cloned())
    }

    fn remove_job_bytes(&self, id: u64) -> Result<()> {
        self.lock().jobs.remove(&id);
        Ok(())
    }

    fn job_bytes(&self) -> Result<Vec<Vec<u8>>> {
        Ok(self.lock().jobs.values().cloned().collect())
    }

    fn flush_jobs(&self) -> Result<()> {
        Ok(())
    }
}
