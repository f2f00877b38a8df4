//! The conformance suite: every backend behaves like every other (tantivy's
//! `directory/tests.rs` habit). Each test is a function over a fresh [`Store`]; the macro at
//! the end runs all of them against each backend.

use super::*;
use crate::level::Level;
use crate::node::{Meta, Span};

pub(crate) fn node(k: u8, expires_at: Option<u64>) -> Node {
    Node {
        id: NodeId([k; 32]),
        scope: "s".into(),
        level: Level::Full,
        text: format!("node {k}"),
        children: Vec::new(),
        citations: vec![Span {
            source: "a".into(),
            start: 0,
            end: 1,
        }],
        tokens: 2,
        meta: Meta::default(),
        created_at: 0,
        expires_at,
    }
}

pub(crate) fn scope_record(name: &str, sources: &[&str]) -> ScopeRecord {
    ScopeRecord {
        name: name.into(),
        kind: ScopeKind::Doc,
        sources: sources
            .iter()
            .enumerate()
            .map(|(i, s)| SourceEntry {
                id: s.to_string(),
                round: None,
                seq: i as u64,
            })
            .collect(),
        next_seq: sources.len() as u64,
        created_at: 0,
        updated_at: 0,
    }
}

pub(crate) fn record(scope: &str, id: &str) -> SourceRecord {
    SourceRecord {
        id: id.into(),
        scope: scope.into(),
        seq: 0,
        round: None,
        speaker: None,
        hash: [0; 32],
        bytes: 1,
        chunk_tokens: 400,
        chunks: Vec::new(),
        time: None,
    }
}

fn put_source(s: &Store, scope: &str, src: &str, text: &str, nodes: Vec<Node>) {
    let rec = scope_record(scope, &[src]);
    s.write_sources(&SourceStep {
        scope: rec.head(),
        list: rec.sources,
        put: vec![SourcePut {
            record: record(scope, src),
            text: text.into(),
            nodes,
        }],
        remove_sources: Vec::new(),
        remove_nodes: Vec::new(),
    })
    .unwrap();
}

fn nodes_live_expire_and_sweep(s: &Store) {
    s.put_node(&node(1, None)).unwrap();
    s.put_node(&node(2, Some(100))).unwrap();
    s.put_node(&node(3, Some(50))).unwrap();
    assert_eq!(s.n_nodes(), 3);
    assert_eq!(
        s.get_node(&NodeId([2; 32])).unwrap(),
        Some(node(2, Some(100)))
    );
    assert!(s.contains_live(&NodeId([2; 32]), 99).unwrap());
    assert!(!s.contains_live(&NodeId([2; 32]), 100).unwrap());
    assert!(s.get_live(&NodeId([2; 32]), 100).unwrap().is_none());
    assert!(s.contains_live(&NodeId([1; 32]), u64::MAX - 1).unwrap());
    assert_eq!(s.next_deadline().unwrap(), Some(50));
    // Rewriting a node with a later deadline moves its expiry entry.
    s.put_node(&node(3, Some(200))).unwrap();
    assert_eq!(s.next_deadline().unwrap(), Some(100));
    assert_eq!(s.sweep(150).unwrap(), vec![NodeId([2; 32])]);
    assert_eq!(s.next_deadline().unwrap(), Some(200));
    assert!(s.remove_node(&NodeId([3; 32])).unwrap());
    assert!(!s.remove_node(&NodeId([3; 32])).unwrap());
    assert_eq!(s.next_deadline().unwrap(), None);
    assert_eq!(s.node_ids().unwrap(), vec![NodeId([1; 32])]);
}

/// [`NodeStore::losses`] moves with every removal (by id, sweep or forget) and every earlier
/// deadline, and with nothing else; a backend shared between processes may keep none.
fn losses_count_removals_and_earlier_deadlines(s: &Store) {
    let Some(start) = s.losses().unwrap() else {
        assert!(
            s.generation().is_none(),
            "only a shared store may keep no count"
        );
        return;
    };
    let moved = |by: u64| assert_eq!(s.losses().unwrap(), Some(start + by));
    s.put_nodes(&[node(1, Some(100)), node(2, Some(100)), node(3, None)])
        .unwrap();
    moved(0);
    // A later deadline, or the same, loses nothing; an earlier one does.
    s.put_node(&node(1, Some(200))).unwrap();
    s.put_node(&node(2, Some(100))).unwrap();
    moved(0);
    s.put_node(&node(3, Some(500))).unwrap();
    moved(1);
    s.put_node(&node(1, Some(150))).unwrap();
    moved(2);
    assert!(!s.remove_node(&NodeId([9; 32])).unwrap());
    moved(2);
    assert!(s.remove_node(&NodeId([2; 32])).unwrap());
    moved(3);
    assert!(s.sweep(10).unwrap().is_empty());
    moved(3);
    assert_eq!(s.sweep(160).unwrap(), vec![NodeId([1; 32])]);
    moved(4);
    put_source(s, "kb", "a.md", "alpha", vec![node(5, None)]);
    moved(4);
    s.put_liveness("kb", &vec![7f32]).unwrap();
    s.put_view("kb", &vec![8f32]).unwrap();
    assert_eq!(s.get_liveness::<Vec<f32>>("kb").unwrap(), Some(vec![7.0]));
    s.forget(&ForgetStep {
        scope: "kb".into(),
        record: None,
        remove_sources: vec!["a.md".into()],
        remove_nodes: vec![NodeId([5; 32])],
    })
    .unwrap();
    moved(5);
    assert_eq!(
        s.get_liveness::<Vec<f32>>("kb").unwrap(),
        None,
        "gone with the view"
    );
    assert_eq!(s.get_view::<Vec<f32>>("kb").unwrap(), None);
}

fn every_node_change_is_pending_until_cleared(s: &Store) {
    s.put_nodes(&[node(1, None), node(2, Some(10))]).unwrap();
    let first = s.pending_index().unwrap();
    assert_eq!(first.len(), 2);
    s.clear_pending_index(&first).unwrap();
    assert!(!s.has_pending_index());
    // A removal and a sweep are changes the index must see too.
    assert!(s.remove_node(&NodeId([1; 32])).unwrap());
    assert_eq!(s.sweep(10).unwrap(), vec![NodeId([2; 32])]);
    assert_eq!(s.n_pending_index(), 2);
    // A node changed again after its mark was read keeps a mark.
    let read = s.pending_index().unwrap();
    s.put_node(&node(1, None)).unwrap();
    s.clear_pending_index(&read).unwrap();
    let left: Vec<NodeId> = s
        .pending_index()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(left, vec![NodeId([1; 32])]);
}

fn a_source_step_writes_and_removes_together(s: &Store) {
    put_source(s, "kb", "a.md", "alpha", vec![node(1, None), node(2, None)]);
    assert_eq!(s.get_text("kb", "a.md").unwrap().as_deref(), Some("alpha"));
    assert_eq!(s.get_scope("kb").unwrap().unwrap().sources.len(), 1);
    assert_eq!(s.n_pending_index(), 2);
    // Replace a.md's chunk 2 with chunk 3, add b.md, all in one step.
    let mut rec = scope_record("kb", &["a.md", "b.md"]);
    rec.updated_at = 9;
    s.write_sources(&SourceStep {
        scope: rec.head(),
        list: rec.sources.clone(),
        put: vec![
            SourcePut {
                record: record("kb", "a.md"),
                text: "alpha 2".into(),
                nodes: vec![node(3, None)],
            },
            SourcePut {
                record: record("kb", "b.md"),
                text: "beta".into(),
                nodes: vec![node(4, None)],
            },
        ],
        remove_sources: Vec::new(),
        remove_nodes: vec![NodeId([2; 32])],
    })
    .unwrap();
    assert_eq!(s.get_scope("kb").unwrap(), Some(rec.clone()));
    assert_eq!(
        s.get_text("kb", "a.md").unwrap().as_deref(),
        Some("alpha 2")
    );
    assert!(s.get_node(&NodeId([2; 32])).unwrap().is_none());
    assert_eq!(s.n_nodes(), 3);
    // Remove b.md and its chunk (the step lists nothing anew: a.md keeps its entry).
    s.write_sources(&SourceStep {
        scope: rec.head(),
        list: Vec::new(),
        put: Vec::new(),
        remove_sources: vec!["b.md".into()],
        remove_nodes: vec![NodeId([4; 32])],
    })
    .unwrap();
    assert!(s.get_source("kb", "b.md").unwrap().is_none());
    assert!(s.get_text("kb", "b.md").unwrap().is_none());
    assert_eq!(s.get_entry("kb", "b.md").unwrap(), None);
    let scopes = s.scopes().unwrap();
    assert_eq!(scopes.len(), 1);
    assert_eq!(scopes[0].sources, rec.sources[..1]);
}

/// A scope a strata before per-entry lists left (record format 1, its list inline, as
/// `scope_record("d", &["a", "b", "c"])`): it reads as it was; its next step moves the list
/// out, keeping what the step does not remove. Each backend's test stores the old record.
pub(crate) fn an_inline_scope_reads_and_moves_its_list_out(s: &Store) {
    let old = scope_record("d", &["a", "b", "c"]);
    assert_eq!(s.get_scope("d").unwrap().as_ref(), Some(&old));
    assert_eq!(s.get_scope_head("d").unwrap(), Some(old.head()));
    assert_eq!(s.get_entry("d", "b").unwrap(), old.entry("b").cloned());
    assert_eq!(s.get_entry("d", "z").unwrap(), None);
    let mut head = old.head();
    head.next_seq += 1;
    let new = SourceEntry {
        id: "e".into(),
        round: None,
        seq: 3,
    };
    s.write_sources(&SourceStep {
        scope: head.clone(),
        list: vec![new.clone()],
        put: Vec::new(),
        remove_sources: vec!["b".into()],
        remove_nodes: Vec::new(),
    })
    .unwrap();
    let mut want = old.sources.clone();
    want.remove(1);
    want.push(new);
    assert_eq!(s.get_scope("d").unwrap(), Some(ScopeRecord::of(head, want)));
    assert_eq!(s.get_entry("d", "c").unwrap(), old.entry("c").cloned());
    assert_eq!(s.get_entry("d", "b").unwrap(), None);
}

/// A step writes the entries it names and leaves the others: a turn appended to a long
/// debate writes its own entry and the head, and the list reads back in scope order.
fn a_scope_lists_its_entries_one_step_at_a_time(s: &Store) {
    let head = |next_seq| ScopeHead {
        name: "d".into(),
        kind: ScopeKind::Debate,
        next_seq,
        created_at: 1,
        updated_at: next_seq,
    };
    // Turns arrive out of round order: t0 in round 2, t1 in round 1, t2 in round 2.
    for (seq, (id, round)) in [("t0", 2), ("t1", 1), ("t2", 2)].into_iter().enumerate() {
        let seq = seq as u64;
        s.write_sources(&SourceStep {
            scope: head(seq + 1),
            list: vec![SourceEntry {
                id: id.into(),
                round: Some(round),
                seq,
            }],
            put: vec![SourcePut {
                record: record("d", id),
                text: id.into(),
                nodes: Vec::new(),
            }],
            remove_sources: Vec::new(),
            remove_nodes: Vec::new(),
        })
        .unwrap();
        assert_eq!(s.get_scope_head("d").unwrap(), Some(head(seq + 1)));
    }
    let rec = s.get_scope("d").unwrap().unwrap();
    let order: Vec<&str> = rec.sources.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(order, ["t1", "t0", "t2"], "by round, then arrival");
    assert_eq!(rec.head(), head(3));
    assert_eq!(
        s.get_entry("d", "t0").unwrap(),
        Some(SourceEntry {
            id: "t0".into(),
            round: Some(2),
            seq: 0
        })
    );
    assert_eq!(s.get_entry("d", "t9").unwrap(), None);
    assert_eq!(s.get_entry("other", "t0").unwrap(), None);
    // Re-placing a turn (its round changed) rewrites its entry alone.
    s.write_sources(&SourceStep {
        scope: head(3),
        list: vec![SourceEntry {
            id: "t2".into(),
            round: Some(0),
            seq: 2,
        }],
        put: Vec::new(),
        remove_sources: Vec::new(),
        remove_nodes: Vec::new(),
    })
    .unwrap();
    let order: Vec<String> = s
        .get_scope("d")
        .unwrap()
        .unwrap()
        .sources
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(order, ["t2", "t1", "t0"]);
    // A scope whose name is a prefix of another's shares none of its entries.
    put_source(s, "d2", "t0", "x", Vec::new());
    assert_eq!(s.get_scope("d").unwrap().unwrap().sources.len(), 3);
    assert_eq!(s.get_scope("d2").unwrap().unwrap().sources.len(), 1);
}

fn batch_reads_answer_in_the_order_asked(s: &Store) {
    s.put_nodes(&[node(1, None), node(2, Some(10))]).unwrap();
    let ids = [
        NodeId([2; 32]),
        NodeId([3; 32]),
        NodeId([1; 32]),
        NodeId([2; 32]),
    ];
    let got = s.get_nodes(&ids).unwrap();
    assert_eq!(
        got,
        vec![
            Some(node(2, Some(10))),
            None,
            Some(node(1, None)),
            Some(node(2, Some(10)))
        ]
    );
    assert!(s.all_live(&[NodeId([1; 32]), NodeId([2; 32])], 9).unwrap());
    assert!(!s.all_live(&[NodeId([1; 32]), NodeId([2; 32])], 10).unwrap());
    assert!(!s.all_live(&[NodeId([1; 32]), NodeId([3; 32])], 0).unwrap());
    assert!(s.all_live(&[], 0).unwrap());
    put_source(s, "kb", "a.md", "alpha", Vec::new());
    put_source(s, "kb", "b.md", "beta", Vec::new());
    let recs = s.get_sources("kb", &["b.md", "zz", "a.md"]).unwrap();
    let names: Vec<Option<String>> = recs.into_iter().map(|r| r.map(|r| r.id)).collect();
    assert_eq!(names, vec![Some("b.md".into()), None, Some("a.md".into())]);
}

// Regression: `kb\0x` + `a.md` and `kb` + `x\0a.md` were one key.
fn composite_keys_cannot_collide(s: &Store) {
    put_source(s, "kb\0x", "a.md", "one", Vec::new());
    put_source(s, "kb", "x\0a.md", "two", Vec::new());
    put_source(s, "ab", "c", "three", Vec::new());
    put_source(s, "a", "bc", "four", Vec::new());
    assert_eq!(s.get_text("kb\0x", "a.md").unwrap().as_deref(), Some("one"));
    assert_eq!(s.get_text("kb", "x\0a.md").unwrap().as_deref(), Some("two"));
    assert_eq!(s.get_text("ab", "c").unwrap().as_deref(), Some("three"));
    assert_eq!(s.get_text("a", "bc").unwrap().as_deref(), Some("four"));
    let names: Vec<String> = s.scopes().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["a", "ab", "kb", "kb\0x"]);
}

fn vectors_and_views(s: &Store) {
    let (m1, m2) = (EmbedKey::of("one"), EmbedKey::of("two"));
    s.put_node(&node(1, None)).unwrap();
    s.put_embeddings(m1, &[(NodeId([1; 32]), vec![1.0, 0.0])])
        .unwrap();
    s.put_embeddings(m2, &[(NodeId([2; 32]), vec![0.0, 1.0])])
        .unwrap();
    assert_eq!(
        s.get_embedding(m1, &NodeId([1; 32])).unwrap(),
        Some(vec![1.0, 0.0])
    );
    assert!(!s.has_embedding(m2, &NodeId([1; 32])).unwrap());
    assert_eq!(s.n_embeddings(), 2);
    assert_eq!(s.remove_orphan_embeddings().unwrap(), 1, "node 2 is gone");
    assert_eq!(s.n_embeddings(), 1);

    s.put_view("kb", &vec![1f32, 2.0, 3.0]).unwrap();
    assert_eq!(
        s.get_view::<Vec<f32>>("kb").unwrap(),
        Some(vec![1.0, 2.0, 3.0])
    );
    assert_eq!(s.get_view::<Vec<f32>>("other").unwrap(), None);

    s.flush().unwrap();
}

fn the_job_queue_coalesces_claims_once_and_keeps_history(s: &Store) {
    let who = Claimant {
        owner: "replica-a".into(),
        lease: std::time::Duration::from_secs(60),
    };
    let (a, coalesced) = s.enqueue_job("kb", JobKind::Compress, 10).unwrap();
    assert!(!coalesced);
    assert_eq!(
        (a.state, a.attempts, a.scope.as_str()),
        (JobState::Queued, 0, "kb")
    );
    // The same request again coalesces; another kind or scope does not.
    let (again, coalesced) = s.enqueue_job("kb", JobKind::Compress, 11).unwrap();
    assert!(coalesced);
    assert_eq!(again.id, a.id);
    let (b, _) = s.enqueue_job("kb", JobKind::Warm, 12).unwrap();
    let (c, _) = s.enqueue_job("other", JobKind::Compress, 13).unwrap();
    assert!(
        a.id < b.id && b.id < c.id,
        "ids grow: {} {} {}",
        a.id,
        b.id,
        c.id
    );

    // Oldest first; a scope being built is skipped.
    let first = s.claim_job(&who, 20).unwrap().unwrap();
    assert_eq!(first.id, a.id);
    assert_eq!(
        (first.state, first.attempts, first.started_at),
        (JobState::Running, 1, Some(20))
    );
    let second = s.claim_job(&who, 21).unwrap().unwrap();
    assert_eq!(second.id, c.id, "kb is busy: its warm job waits");
    assert!(s.claim_job(&who, 22).unwrap().is_none());
    // A running job does not coalesce a new request: that one queues behind it.
    let (d, coalesced) = s.enqueue_job("other", JobKind::Compress, 23).unwrap();
    assert!(!coalesced && d.id > c.id);
    assert!(s.renew_job(first.id, &who).unwrap());

    let mut done = first.clone();
    done.state = JobState::Done;
    done.finished_at = Some(30);
    done.outcome = Some(JobOutcome {
        nodes_built: 3,
        cache_hits: 1,
        model_calls: 2,
        fallbacks: 0,
        failures: 0,
        elapsed_ms: 5,
    });
    assert!(s.finish_job(&done, &who, 1).unwrap());
    assert_eq!(s.get_job(a.id).unwrap(), Some(done.clone()));
    // A job's end is recorded once: the same end again finds no running claim.
    assert!(!s.finish_job(&done, &who, 1).unwrap());
    // kb is free again: its warm job is next.
    assert_eq!(s.claim_job(&who, 31).unwrap().unwrap().id, b.id);

    // Parking (shutdown) queues the job again; it keeps its attempt count.
    let mut parked = second.clone();
    parked.state = JobState::Queued;
    assert!(s.finish_job(&parked, &who, 1).unwrap());
    let again = s.claim_job(&who, 40).unwrap().unwrap();
    assert_eq!((again.id, again.attempts), (c.id, 2));

    // A failed job is history too; only the newest `keep` finished jobs stay.
    let mut failed = again.clone();
    failed.state = JobState::Failed;
    failed.error = Some("boom".into());
    assert!(s.finish_job(&failed, &who, 1).unwrap());
    let states: Vec<(u64, JobState)> = s.jobs().unwrap().iter().map(|j| (j.id, j.state)).collect();
    assert_eq!(
        states,
        vec![
            (b.id, JobState::Running),
            (c.id, JobState::Failed),
            (d.id, JobState::Queued)
        ]
    );
    assert_eq!(s.queued_jobs().unwrap(), 1);
    // A job left running by this replica's previous process is queued again at open.
    assert_eq!(s.requeue_abandoned(&who).unwrap(), 1);
    assert_eq!(s.get_job(b.id).unwrap().unwrap().state, JobState::Queued);
}

fn fallback_marks_live_and_die_with_their_node(s: &Store) {
    use crate::node::FallbackMark;
    assert!(!s.has_fallback_marks());
    s.put_node_marked(&node(1, Some(100)), Some(FallbackMark::ModelUnavailable))
        .unwrap();
    s.put_node_marked(&node(2, None), Some(FallbackMark::Unfaithful))
        .unwrap();
    s.put_node(&node(3, Some(100))).unwrap();
    assert_eq!(
        s.fallback_mark(&NodeId([1; 32])).unwrap(),
        Some(FallbackMark::ModelUnavailable)
    );
    assert_eq!(s.fallback_mark(&NodeId([3; 32])).unwrap(), None);
    assert_eq!(
        s.fallback_counts().unwrap(),
        FallbackCounts {
            nodes: 2,
            awaiting_model: 1
        }
    );
    // A model-made rewrite clears the mark; removal and sweeps take it with the node.
    s.put_node(&node(2, None)).unwrap();
    assert_eq!(s.fallback_mark(&NodeId([2; 32])).unwrap(), None);
    s.sweep(100).unwrap();
    assert!(!s.has_fallback_marks());
    s.put_node_marked(&node(4, None), Some(FallbackMark::Empty))
        .unwrap();
    s.remove_node(&NodeId([4; 32])).unwrap();
    assert!(!s.has_fallback_marks());
    // A node's vectors go with `remove_node_embeddings`, of every embedder.
    let (m1, m2) = (EmbedKey::of("one"), EmbedKey::of("two"));
    s.put_embeddings(
        m1,
        &[(NodeId([5; 32]), vec![1.0]), (NodeId([6; 32]), vec![1.0])],
    )
    .unwrap();
    s.put_embeddings(m2, &[(NodeId([5; 32]), vec![1.0])])
        .unwrap();
    s.remove_node_embeddings(&NodeId([5; 32])).unwrap();
    assert_eq!(s.n_embeddings(), 1);
    assert!(s.has_embedding(m1, &NodeId([6; 32])).unwrap());
}

/// A store on a fresh database of this test binary's throwaway PostgreSQL cluster, as a
/// replica of its own; `None` (the test is skipped, and says so) where PostgreSQL cannot
/// run.
pub(crate) fn postgres_store(test: &str) -> Option<Store> {
    let pg = super::postgres::scratch::Scratch::for_test(test)?;
    let url = pg.database().unwrap();
    Some(Store::open_postgres(&url, "conformance", 4, None).unwrap())
}

fn a_forget_step_removes_sources_nodes_vectors_and_view_together(s: &Store) {
    let m = EmbedKey::of("one");
    // kb holds a.md (nodes 1, 2) and b.md (node 3); node 4 is derived over 1 and 3.
    let both = scope_record("kb", &["a.md", "b.md"]);
    s.write_sources(&SourceStep {
        scope: both.head(),
        list: both.sources.clone(),
        put: vec![
            SourcePut {
                record: record("kb", "a.md"),
                text: "alpha".into(),
                nodes: vec![node(1, None), node(2, None)],
            },
            SourcePut {
                record: record("kb", "b.md"),
                text: "beta".into(),
                nodes: vec![node(3, None)],
            },
        ],
        remove_sources: Vec::new(),
        remove_nodes: Vec::new(),
    })
    .unwrap();
    s.put_node_marked(&node(4, Some(100)), Some(FallbackMark::Empty))
        .unwrap();
    s.put_embeddings(
        m,
        &[(NodeId([1; 32]), vec![1.0]), (NodeId([3; 32]), vec![3.0])],
    )
    .unwrap();
    s.put_embeddings(EmbedKey::of("two"), &[(NodeId([4; 32]), vec![4.0])])
        .unwrap();
    s.put_view("kb", &vec![1f32]).unwrap();
    s.put_view("other", &vec![2f32]).unwrap();
    let pending: Vec<PendingMark> = s.pending_index().unwrap();
    s.clear_pending_index(&pending).unwrap();

    // Forget a.md: its record, text, chunks, the derived node 4 with its mark and vectors.
    let mut rec = both.clone();
    rec.sources.remove(0);
    s.forget(&ForgetStep {
        scope: "kb".into(),
        record: Some(rec.head()),
        remove_sources: vec!["a.md".into()],
        remove_nodes: vec![NodeId([1; 32]), NodeId([2; 32]), NodeId([4; 32])],
    })
    .unwrap();
    assert_eq!(s.get_scope("kb").unwrap(), Some(rec));
    assert!(s.get_source("kb", "a.md").unwrap().is_none());
    assert!(s.get_text("kb", "a.md").unwrap().is_none());
    assert_eq!(s.get_text("kb", "b.md").unwrap().as_deref(), Some("beta"));
    assert_eq!(s.node_ids().unwrap(), vec![NodeId([3; 32])]);
    assert_eq!(
        s.next_deadline().unwrap(),
        None,
        "node 4's expiry entry went"
    );
    assert!(!s.has_fallback_marks());
    assert_eq!(s.n_embeddings(), 1);
    assert_eq!(
        s.get_embedding(m, &NodeId([3; 32])).unwrap(),
        Some(vec![3.0])
    );
    assert_eq!(
        s.get_view::<Vec<f32>>("kb").unwrap(),
        None,
        "the view cited a.md"
    );
    assert_eq!(s.get_view::<Vec<f32>>("other").unwrap(), Some(vec![2.0]));
    let mut marked: Vec<NodeId> = s.pending_index().unwrap().iter().map(|p| p.id).collect();
    marked.sort();
    assert_eq!(
        marked,
        vec![NodeId([1; 32]), NodeId([2; 32]), NodeId([4; 32])],
        "every removal is pending for the index"
    );

    // Forget the whole scope: the record goes too; another scope is untouched.
    put_source(s, "kept", "c.md", "gamma", vec![]);
    s.forget(&ForgetStep {
        scope: "kb".into(),
        record: None,
        remove_sources: vec!["b.md".into()],
        remove_nodes: vec![NodeId([3; 32])],
    })
    .unwrap();
    assert_eq!(s.get_scope("kb").unwrap(), None);
    assert!(s.get_text("kb", "b.md").unwrap().is_none());
    assert_eq!(s.n_nodes(), 0);
    assert_eq!(s.n_embeddings(), 0);
    let names: Vec<String> = s.scopes().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, vec!["kept".to_string()]);
    assert_eq!(
        s.get_text("kept", "c.md").unwrap().as_deref(),
        Some("gamma")
    );
    s.flush().unwrap();
}

/// [`super::Replication`] on every backend: a scope's lock is taken, released and taken
/// again, two scopes' at once; a heartbeat, the replica's name, the index's standing and a
/// flush answer without error.
fn scope_locks_heartbeats_and_flush(s: &Store) {
    let a = s.lock_scope("rep-a").unwrap();
    let b = s.lock_scope("rep-b").unwrap();
    drop(a);
    let again = s.lock_scope("rep-a").unwrap();
    drop((again, b));
    s.heartbeat().unwrap();
    assert!(!s.replica_name().is_empty());
    assert!(!s.index_must_rebuild().unwrap());
    s.flush().unwrap();
}

/// One suite per storage trait (`NodeStore`, `SourceStore`, `VectorStore`, `JobQueue`,
/// `Replication`), each run on every backend: `store::tests::<suite>::<backend>::<test>`.
macro_rules! conformance {
    ($($suite:ident: [$($test:ident),* $(,)?]),* $(,)?) => {$(
        mod $suite {
            use super::*;
            mod sled_backend {
                $(#[test] fn $test() { super::$test(&super::Store::temporary().unwrap()) })*
            }
            mod memory_backend {
                $(#[test] fn $test() { super::$test(&super::Store::in_memory()) })*
            }
            mod postgres_backend {
                $(#[test] fn $test() {
                    if let Some(s) = super::postgres_store(stringify!($test)) {
                        super::$test(&s)
                    }
                })*
            }
        }
    )*};
}

conformance!(
    node_store: [
        nodes_live_expire_and_sweep,
        losses_count_removals_and_earlier_deadlines,
        every_node_change_is_pending_until_cleared,
        fallback_marks_live_and_die_with_their_node,
        batch_reads_answer_in_the_order_asked,
    ],
    source_store: [
        a_source_step_writes_and_removes_together,
        a_scope_lists_its_entries_one_step_at_a_time,
        composite_keys_cannot_collide,
        a_forget_step_removes_sources_nodes_vectors_and_view_together,
    ],
    vector_store: [vectors_and_views],
    job_queue: [the_job_queue_coalesces_claims_once_and_keeps_history],
    replication: [scope_locks_heartbeats_and_flush],
);
