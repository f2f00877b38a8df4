//! Trajectories: `query --trace` records read back, and the HTML page of `strata trace`
//! checked as a browser sees it (headless Chromium's DOM, when Chromium is installed —
//! `.ci/run` installs Debian's `chromium`; elsewhere the page's markup is checked and the
//! browser half says it is skipped).

use crate::support::*;
use strata::config::Strategy;
use strata::trace::{self, Record};

#[test]
fn a_trace_reads_back_and_renders_the_tree_the_path_and_the_cited_spans() {
    let e = demo_engine();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q.jsonl");
    let mut qcfg = e.config().query.clone();
    qcfg.strategy = Strategy::Offline;
    let scopes = vec!["debate".to_string()];
    for q in [
        "What did chen propose about fares?",
        "What cost estimate did the 2029 audit give?",
    ] {
        let r = rt()
            .block_on(e.query(&strata::Ask::new(&scopes, q, T0).settings(&qcfg)))
            .unwrap();
        check_citations(e, &r);
        trace::append(&file, &trace::records(q, &scopes, &r, T0)).unwrap();
    }
    let traces = trace::read(&file).unwrap();
    assert_eq!(traces.len(), 2);
    let (_, t) = &traces[0];
    assert!(t.steps.len() >= 3, "{:?}", t.steps);
    // Every step carries the state, the action, what it saw, and the run's reward inputs.
    for (i, s) in t.steps.iter().enumerate() {
        let Record::Step {
            step,
            action,
            working,
            reward,
            ..
        } = s
        else {
            panic!("{s:?}")
        };
        assert_eq!(*step, i);
        assert!(!action.is_empty() && !working.is_empty());
        assert!(reward.ready && reward.citations >= 1, "{reward:?}");
    }
    let Some(Record::Result { citations, .. }) = &t.result else {
        panic!("no result record")
    };
    let quote = citations[0].quote.clone();

    let page = trace::html(e, &traces).unwrap();
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no external assets"
    );
    // A browser serialises text with only &, < and > escaped; the page escapes quotes too.
    let (dom, quotes_escaped) = match chromium() {
        Some(bin) => {
            let html = dir.path().join("q.html");
            std::fs::write(&html, &page).unwrap();
            let out = std::process::Command::new(bin)
                .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
                .arg(format!("file://{}", html.display()))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            (String::from_utf8(out.stdout).unwrap(), false)
        }
        None => {
            eprintln!(
                "trace DOM check in a browser skipped: no chromium (apt-get install chromium)"
            );
            (page.clone(), true)
        }
    };
    assert_eq!(dom.matches("<section class=\"query\"").count(), 2);
    assert!(dom.contains("<ul class=\"tree\" data-scope=\"debate\">"));
    assert!(dom.matches("<tr class=\"step\"").count() >= t.steps.len());
    assert!(
        dom.contains("class=\"node visited\""),
        "the path is marked in the tree"
    );
    assert!(
        dom.contains("class=\"node cited\""),
        "the cited chunks are marked"
    );
    let marked = format!(
        "<mark class=\"cite\">{}</mark>",
        html_escape(&quote, quotes_escaped)
    );
    assert!(
        dom.contains(&marked),
        "the quote {quote:?} is highlighted in its source"
    );
}

#[test]
fn a_malformed_trace_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.jsonl");
    std::fs::write(&file, "{\"kind\":\"step\"}\n").unwrap();
    let e = trace::read(&file).unwrap_err().to_string();
    assert!(e.contains("bad.jsonl:1: not a trace record"), "{e}");
    std::fs::write(&file, "\n").unwrap();
    assert!(
        trace::read(&file)
            .unwrap_err()
            .to_string()
            .contains("no trace records")
    );
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|b| {
        std::process::Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn html_escape(s: &str, quotes: bool) -> String {
    let s = s
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    if quotes {
        s.replace('"', "&quot;").replace('\'', "&#39;")
    } else {
        s
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_writes_the_trajectory_of_every_query_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("served.jsonl");
    let mut cfg = strata::Config::default();
    cfg.server.trace_file = file.display().to_string();
    let s = Server::start(&dir.path().join("db"), cfg).await;
    let turn = |round: u32, speaker: &str, text: &str| serde_json::json!({"round": round, "speaker": speaker, "text": text});
    for (r, sp, t) in [
        (
            1,
            "ana",
            "I propose a levy of 3 percent on harbour freight.",
        ),
        (
            1,
            "ben",
            "I object to the levy; it will drive freight to Rotterdam.",
        ),
    ] {
        assert_eq!(s.post("/api/debates/d/turns", turn(r, sp, t)).await.0, 201);
    }
    let (code, v) = s
        .post(
            "/api/debates/d/query-rlm",
            serde_json::json!({"query": "What levy did ana propose?"}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    s.stop().await;
    let traces = trace::read(&file).unwrap();
    assert_eq!(traces.len(), 1);
    let Some(Record::Result { question, .. }) = &traces[0].1.result else {
        panic!("no result record")
    };
    assert_eq!(question, "What levy did ana propose?");
    assert!(!traces[0].1.steps.is_empty());
}
