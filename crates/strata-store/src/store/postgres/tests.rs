use super::*;
use crate::store::Store;
use crate::store::tests::{node, record, scope_record};
use crate::store::{SourcePut, SourceStep};

/// Two replicas (two stores, as two processes would have) on one fresh database.
fn two(test: &str) -> Option<(String, Store, Store)> {
    let pg = scratch::Scratch::for_test(test)?;
    let url = pg.database().unwrap();
    let a = Store::open_postgres(&url, "a", 4, None).unwrap();
    let b = Store::open_postgres(&url, "b", 4, None).unwrap();
    Some((url, a, b))
}

fn who(owner: &str, lease_ms: u64) -> Claimant {
    Claimant {
        owner: owner.into(),
        lease: Duration::from_millis(lease_ms),
    }
}

fn step(scope: &str, src: &str, n: u8) -> SourceStep {
    let rec = scope_record(scope, &[src]);
    SourceStep {
        scope: rec.head(),
        list: rec.sources,
        put: vec![SourcePut {
            record: record(scope, src),
            text: format!("text {n}"),
            nodes: vec![node(n, None)],
        }],
        remove_sources: Vec::new(),
        remove_nodes: Vec::new(),
    }
}

#[test]
fn a_job_is_claimed_by_one_replica_and_taken_back_when_its_lease_runs_out() {
    let Some((_, a, b)) = two("job_claims") else {
        return;
    };
    let (job, _) = a.enqueue_job("kb", JobKind::Compress, 1).unwrap();
    // a claims it with a lease that runs out at once (a dead replica); b sees no job
    // to claim until then, then takes it back.
    let mine = a.claim_job(&who("a", 1), 2).unwrap().unwrap();
    assert_eq!(mine.id, job.id);
    let deadline = Instant::now() + Duration::from_secs(10);
    let theirs = loop {
        if let Some(j) = b.claim_job(&who("b", 60_000), 3).unwrap() {
            break j;
        }
        assert!(Instant::now() < deadline, "the lease never ran out");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!((theirs.id, theirs.attempts), (job.id, 2));
    // The replica that lost its claim can neither renew nor record the end.
    assert!(!a.renew_job(job.id, &who("a", 1)).unwrap());
    let mut late = mine.clone();
    late.state = JobState::Done;
    assert!(!a.finish_job(&late, &who("a", 1), 10).unwrap());
    let mut done = theirs.clone();
    done.state = JobState::Done;
    assert!(b.finish_job(&done, &who("b", 60_000), 10).unwrap());
    assert_eq!(a.get_job(job.id).unwrap().unwrap().state, JobState::Done);
    // A live lease is respected: a's claim of a new job stays a's.
    a.enqueue_job("kb", JobKind::Compress, 4).unwrap();
    assert!(a.claim_job(&who("a", 60_000), 5).unwrap().is_some());
    assert!(b.claim_job(&who("b", 60_000), 5).unwrap().is_none());
    assert!(b.next_lease_expiry().unwrap().unwrap() > Duration::from_secs(30));
}

#[test]
fn each_replica_follows_the_change_feed_from_its_own_place() {
    let Some((_, a, b)) = two("feed") else {
        return;
    };
    let mut events = b.events().unwrap();
    let seen = *events.nodes.borrow_and_update();
    a.put_nodes(&[node(1, None), node(2, Some(5))]).unwrap();
    // b is woken by a's commit (LISTEN/NOTIFY).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), events.nodes.changed())
            .await
            .expect("no notification")
            .unwrap();
    });
    assert!(*events.nodes.borrow() > seen);
    let pa = a.pending_index().unwrap();
    let pb = b.pending_index().unwrap();
    assert_eq!(pa.len(), 2);
    assert_eq!(pa, pb);
    a.clear_pending_index(&pa).unwrap();
    assert_eq!(a.n_pending_index(), 0);
    assert_eq!(b.n_pending_index(), 2, "b's index has not seen them");
    let lag: Vec<(String, usize, bool)> = a
        .replicas()
        .unwrap()
        .into_iter()
        .map(|r| (r.name, r.behind, r.this))
        .collect();
    assert_eq!(
        lag,
        vec![("a".to_string(), 0, true), ("b".to_string(), 2, false)]
    );
    // A removal by b is a change for a.
    b.sweep(5).unwrap();
    assert_eq!(
        a.pending_index()
            .unwrap()
            .iter()
            .map(|m| m.id)
            .collect::<Vec<_>>(),
        vec![NodeId([2; 32])]
    );
    b.clear_pending_index(&pb).unwrap();
    assert_eq!(b.n_pending_index(), 1, "the sweep came after b's read");
}

#[test]
fn a_scope_is_written_by_one_process_at_a_time() {
    let Some((url, a, b)) = two("scope_lock") else {
        return;
    };
    let held = a.lock_scope("debate").unwrap();
    // b's lock waits until a lets go (seen in pg_locks, not guessed with a timer).
    let (tx, rx) = std::sync::mpsc::channel();
    let b2 = b.clone();
    let waiter = std::thread::spawn(move || {
        let g = b2.lock_scope("debate").unwrap();
        tx.send(()).unwrap();
        drop(g);
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !waiting_for_advisory_lock(&url) {
        assert!(Instant::now() < deadline, "b never waited for the lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(rx.try_recv().is_err(), "b got the lock a holds");
    a.write_sources(&step("debate", "t1", 1)).unwrap();
    drop(held);
    rx.recv().unwrap();
    waiter.join().unwrap();
    // Another scope is not held up by it.
    let _other = b.lock_scope("another").unwrap();
    let _g = a.lock_scope("debate").unwrap();
}

#[test]
fn a_writer_whose_lock_was_lost_writes_nothing() {
    let Some((_, a, b)) = two("fence") else {
        return;
    };
    a.write_sources(&step("debate", "t1", 1)).unwrap();
    let g = a.lock_scope("debate").unwrap();
    // b writes without the lock, as if a's lock had gone with its connection.
    b.write_sources(&step("debate", "t2", 2)).unwrap();
    let e = a
        .write_sources(&step("debate", "t3", 3))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("changed while this process held its lock"),
        "{e}"
    );
    assert!(a.get_source("debate", "t3").unwrap().is_none());
    drop(g);
    // With the lock taken again, writes go through.
    let _g = a.lock_scope("debate").unwrap();
    a.write_sources(&step("debate", "t3", 3)).unwrap();
    a.write_sources(&step("debate", "t4", 4)).unwrap();
}

#[test]
fn a_schema_newer_than_the_binary_is_refused_in_one_line() {
    let Some(pg) = scratch::Scratch::for_test("newer_schema") else {
        return;
    };
    let url = pg.database().unwrap();
    drop(Store::open_postgres(&url, "a", 2, None).unwrap());
    scratch_execute(
        &url,
        "INSERT INTO strata_migrations (version, description) VALUES (999, 'future')",
    );
    let e = PgBackend::open(&url, "a", 2, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("schema version 999, newer than this strata"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    // Opening again changes nothing in a current schema.
    let url2 = pg.database().unwrap();
    drop(Store::open_postgres(&url2, "a", 2, None).unwrap());
    let s = Store::open_postgres(&url2, "a", 2, None).unwrap();
    assert_eq!(s.n_nodes(), 0);
}

/// A database a strata before source times left (schema 1, version 1 records) opens:
/// migration 2 is applied and its records read as records without a time.
#[test]
fn a_schema_1_database_with_version_1_records_opens() {
    use crate::store::record::v1;
    let Some(pg) = scratch::Scratch::for_test("schema_1_records") else {
        return;
    };
    let url = pg.database().unwrap();
    drop(Store::open_postgres(&url, "a", 2, None).unwrap());
    let n = node(7, None);
    let old = v1::Node {
        id: n.id,
        scope: n.scope.clone(),
        level: n.level,
        text: n.text.clone(),
        children: Vec::new(),
        citations: n.citations.clone(),
        tokens: n.tokens,
        meta: v1::Meta {
            rounds: vec![2],
            speakers: vec!["bob".into()],
            headings: Vec::new(),
            tags: None,
        },
        created_at: n.created_at,
        expires_at: None,
    };
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    scratch_execute(
        &url,
        &format!(
            "DELETE FROM strata_migrations WHERE version >= 2;
             DELETE FROM strata_meta WHERE key = 'record_format';
             DROP TABLE members;
             INSERT INTO nodes (id, expires_at, body) VALUES ('\\x{}', NULL, '\\x{}');",
            hex(&n.id.0),
            hex(&v1::encode(&old))
        ),
    );
    let s = Store::open_postgres(&url, "a", 2, None).unwrap();
    let got = s.get_node(&n.id).unwrap().unwrap();
    assert_eq!(
        (got.meta.speakers.as_slice(), got.meta.time),
        (&["bob".to_string()][..], None)
    );
    assert_eq!(got.text, n.text);
}

/// A database whose scope bodies are format 1 (its list inline, schema 2): the scope reads
/// as it was, and its next write moves the list to `members`.
#[test]
fn a_schema_2_scope_moves_its_list_out_at_its_next_write() {
    let Some(pg) = scratch::Scratch::for_test("schema_2_scope") else {
        return;
    };
    let url = pg.database().unwrap();
    drop(Store::open_postgres(&url, "a", 2, None).unwrap());
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    scratch_execute(
        &url,
        &format!(
            "DELETE FROM strata_migrations WHERE version >= 3;
             DROP TABLE members;
             INSERT INTO scopes (name, body) VALUES ('\\x{}', '\\x{}');",
            hex(b"d"),
            hex(&encode(&scope_record("d", &["a", "b", "c"])).unwrap())
        ),
    );
    let s = Store::open_postgres(&url, "a", 2, None).unwrap();
    crate::store::tests::an_inline_scope_reads_and_moves_its_list_out(&s);
}

fn scratch_execute(url: &str, sql: &str) {
    scratch::execute(url, sql).unwrap();
}

fn waiting_for_advisory_lock(url: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
        tokio::spawn(conn);
        let r = c
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                &[],
            )
            .await
            .unwrap();
        r.get::<_, i64>(0) > 0
    })
}

#[test]
fn passwords_never_reach_a_message() {
    assert_eq!(
        redact("postgres://strata:s3cret@db:5432/strata"),
        "postgres://strata:***@db:5432/strata"
    );
    assert_eq!(
        redact("postgresql://u@h/d?sslmode=disable"),
        "postgresql://u@h/d?sslmode=disable"
    );
    assert_eq!(redact("postgres://h/d"), "postgres://h/d");
    assert!(is_url("postgres://h/d") && is_url("postgresql://h") && !is_url("data/db"));
}

#[test]
fn an_unreachable_database_is_one_line() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = PgBackend::open(
        &format!("postgres://strata:pw@127.0.0.1:{port}/strata"),
        "t",
        2,
        None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("cannot reach PostgreSQL at 127.0.0.1:"), "{e}");
    assert!(!e.contains('\n') && !e.contains("pw"), "{e}");
}
