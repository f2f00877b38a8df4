//! The engine's background work as one guard (`strata::service::Service`): what `serve`,
//! `mcp` and the Python binding start beside their engine. No test sleeps: a job's end is
//! awaited through the queue's own notification.

use crate::support::*;
use std::sync::Arc;
use std::time::Duration;
use strata::Config;
use strata::service::Service;
use strata::store::{JobKind, JobState};

fn no_ttl() -> Config {
    let mut c = Config::default();
    c.store.ttl_secs = 0;
    c
}

#[test]
fn a_service_runs_queued_jobs_and_stops_on_shutdown() {
    let rt = rt();
    let e = Arc::new(samples(no_ttl()));
    rt.block_on(async {
        let service = Service::start(e.clone()).unwrap();
        let (job, _) = service
            .jobs()
            .enqueue("debate", JobKind::Compress, T0)
            .unwrap();
        let done = service
            .jobs()
            .wait(job.id, Duration::from_secs(120))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.state, JobState::Done, "{done:?}");
        service.shutdown().await.unwrap();
    });
    // The job built every level: a compress now builds nothing.
    let r = compress(&rt, &e, "debate", T0 + 1);
    assert_eq!((r.model_calls, r.nodes_built), (0, 0));
}

#[test]
fn a_dropped_service_leaves_queued_jobs_for_the_next_one() {
    let rt = rt();
    let e = Arc::new(samples(no_ttl()));
    rt.block_on(async {
        let service = Service::start(e.clone()).unwrap();
        service.stop();
        // Stopped before the job is queued: no worker of this service takes it (a worker
        // checks the stop before every claim).
        let (job, _) = service
            .jobs()
            .enqueue("docs", JobKind::Compress, T0)
            .unwrap();
        drop(service);
        let queued = e.store().jobs().unwrap();
        assert!(
            queued
                .iter()
                .any(|j| j.id == job.id && j.state == JobState::Queued),
            "a stopped service took the job: {queued:?}"
        );
        let next = Service::start(e.clone()).unwrap();
        let done = next
            .jobs()
            .wait(job.id, Duration::from_secs(120))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.state, JobState::Done, "{done:?}");
        next.shutdown().await.unwrap();
    });
}

#[test]
fn queries_are_remembered_for_warming_until_the_scope_is_forgotten() {
    let rt = rt();
    let e = samples(no_ttl());
    assert!(e.recently_queried(T0, 3600).is_empty());
    query(&rt, &e, "debate", "What did the audit say about costs?", T0);
    assert_eq!(
        e.recently_queried(T0 + 10, 3600),
        vec!["debate".to_string()]
    );
    // Outside the window: not warmed.
    assert!(e.recently_queried(T0 + 3600, 3600).is_empty());
    // Forgetting one source keeps the scope queried; forgetting the scope does not.
    let first = e.scope("docs").unwrap().sources[0].id.clone();
    query(&rt, &e, "docs", "What are the four freedoms?", T0);
    e.forget("docs", &[first], T0 + 1).unwrap();
    assert!(
        e.recently_queried(T0 + 2, 3600)
            .contains(&"docs".to_string())
    );
    e.forget("docs", &[], T0 + 3).unwrap();
    assert_eq!(e.recently_queried(T0 + 4, 3600), vec!["debate".to_string()]);
}
