//! Times on turns and documents (issue 21): a turn or a document says when it was said;
//! windows and citations show it, `--since`/`--until` restrict windows and queries to it,
//! a question that asks when is answered with the date (a relative "last Friday" resolved
//! against the turn's time), and both stores keep it.

use crate::support::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use strata::source::{InputFile, SourceInput, Turn};
use strata::time::TimeSpan;
use strata::{Config, Engine, Level, LevelChoice, NoProgress, ScopeKind, Time};

/// A conversation over two months, each turn with its time (a date, UTC, an offset).
const DEBATE: &str = r#"{"round": 1, "speaker": "caroline", "text": "I went to the LGBTQ support group last Friday and the stories there were so powerful.", "time": "2023-05-08T13:56:00Z"}
{"round": 1, "speaker": "melanie", "text": "That sounds wonderful. I painted a sunrise over the lake with the kids this morning.", "time": "2023-05-08T14:02:00Z"}
{"round": 2, "speaker": "caroline", "text": "The adoption agency called me about the interview for the foster program.", "time": "2023-06-09"}
{"round": 2, "speaker": "melanie", "text": "We are planning a camping trip to the mountains with the whole family.", "time": "2023-06-09T19:00:00+02:00"}
{"round": 3, "speaker": "caroline", "text": "I gave a talk at the high school about my transition journey.", "time": "2023-07-12T10:00:00Z"}
{"round": 3, "speaker": "melanie", "text": "The kids loved the pottery class we took together two days ago.", "time": "2023-07-12T10:05:00Z"}
"#;

fn t(s: &str) -> Time {
    Time::parse(s).unwrap()
}

/// A sled store under `dir` with [`DEBATE`] in scope `d`, compressed by the CLI.
fn timed_store(dir: &Path) -> PathBuf {
    let file = write(dir, "d.jsonl", DEBATE);
    let db = dir.join("db");
    let f = file.display().to_string();
    let (code, out, err) = strata_cli(&db, &["ingest", "--scope", "d", &f]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("6 added"), "{out}");
    let (code, _, err) = strata_cli(&db, &["compress", "--scope", "d"]);
    assert_eq!(code, 0, "{err}");
    db
}

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn ask(db: &Path, extra: &[&str], question: &str) -> Value {
    let mut args = vec!["--json", "query", "--scope", "d"];
    args.extend_from_slice(extra);
    args.push(question);
    let (code, out, err) = strata_cli(db, &args);
    assert_eq!(code, 0, "{err}");
    json_of(&out)
}

/// `strata --json context --scope d --budget BUDGET ARGS…`, as JSON.
fn window_json(db: &Path, budget: &str, args: &[&str]) -> Value {
    let mut a = vec!["--json", "context", "--scope", "d", "--budget", budget];
    a.extend_from_slice(args);
    let (code, out, err) = strata_cli(db, &a);
    assert_eq!(code, 0, "{err}");
    json_of(&out)
}

fn quotes(v: &Value) -> Vec<&str> {
    v["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["quote"].as_str().unwrap())
        .collect()
}

#[test]
fn timed_turns_show_their_dates_in_windows_and_citations_and_answer_when() {
    let dir = tempfile::tempdir().unwrap();
    let db = timed_store(dir.path());

    // Every turn of a window says when it was said (in the offset it was given in).
    let (code, text, err) = strata_cli(
        &db,
        &[
            "context", "--scope", "d", "--level", "full", "--budget", "2000",
        ],
    );
    assert_eq!(code, 0, "{err}");
    for line in [
        "## Round 1 (full)\ncaroline (2023-05-08): I went to the LGBTQ support group",
        "## Round 2 (full)\ncaroline (2023-06-09): The adoption agency",
        "\nmelanie (2023-06-09): We are planning a camping trip",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    let (_, out, _) = strata_cli(
        &db,
        &[
            "--json", "context", "--scope", "d", "--level", "full", "--budget", "2000",
        ],
    );
    assert!(
        json_of(&out)["text"]
            .as_str()
            .unwrap()
            .contains("\nmelanie (2023-07-12): ")
    );

    // "When did…?": the date comes first, resolved from "last Friday" against the turn's
    // time (Monday 8 May 2023); the citation carries the time as given.
    let v = ask(&db, &[], "When did Caroline go to the LGBTQ support group?");
    assert_eq!(v["when"], "2023-05-05", "{v:#}");
    let answer = v["answer"].as_str().unwrap();
    assert!(answer.starts_with("5 May 2023 (2023-05-05)\n"), "{answer}");
    let c = &v["citations"][0];
    assert!(
        c["quote"]
            .as_str()
            .unwrap()
            .contains("support group last Friday"),
        "{c}"
    );
    assert_eq!(c["time"], "2023-05-08T13:56:00Z");
    assert_eq!(
        (c["round"].as_u64(), c["speaker"].as_str()),
        (Some(1), Some("caroline"))
    );
    // The rest of the answer is the quotes, as always.
    assert!(
        answer
            .lines()
            .nth(1)
            .unwrap()
            .contains(c["quote"].as_str().unwrap())
    );
    assert!(
        v["refinement_history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().contains("\"last Friday\"")),
        "{v:#}"
    );

    // No relative expression: the turn's own date. "two days ago": two days before it.
    let v = ask(
        &db,
        &[],
        "When did Caroline give a talk at the high school?",
    );
    assert_eq!(v["when"], "2023-07-12", "{v:#}");
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .starts_with("12 July 2023 (2023-07-12)\n")
    );
    let v = ask(&db, &[], "When did the kids take the pottery class?");
    assert_eq!(v["when"], "2023-07-10", "{v:#}");

    // A question that does not ask when is answered as before.
    let v = ask(&db, &[], "What did Melanie paint over the lake?");
    assert!(v.get("when").is_none(), "{v:#}");
    assert!(quotes(&v).iter().any(|q| q.contains("sunrise")), "{v:#}");
    assert_eq!(v["answer"].as_str().unwrap(), quotes(&v).join(" … "));

    // The text output says when too.
    let (code, out, err) = strata_cli(
        &db,
        &[
            "query",
            "--scope",
            "d",
            "When did Caroline go to the LGBTQ support group?",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("When: 5 May 2023 (2023-05-05)"), "{out}");
    assert!(
        out.contains("caroline, round 1, 2023-05-08T13:56:00Z"),
        "{out}"
    );
}

#[test]
fn since_and_until_restrict_windows_and_queries() {
    let dir = tempfile::tempdir().unwrap();
    let db = timed_store(dir.path());
    let window = |extra: &[&str]| {
        let mut args = vec![
            "context", "--scope", "d", "--level", "full", "--budget", "2000",
        ];
        args.extend_from_slice(extra);
        strata_cli(&db, &args)
    };
    let (code, text, err) = window(&["--since", "2023-06-01", "--until", "2023-06-30"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("adoption agency") && text.contains("camping trip"),
        "{text}"
    );
    assert!(
        !text.contains("support group") && !text.contains("pottery"),
        "{text}"
    );
    // A date bound includes its whole day; a timestamp bound is exact.
    let (_, text, _) = window(&["--until", "2023-05-08"]);
    assert!(
        text.contains("support group") && text.contains("sunrise"),
        "{text}"
    );
    assert!(!text.contains("adoption"), "{text}");
    let (_, text, _) = window(&["--since", "2023-07-12T10:01:00Z"]);
    assert!(
        text.contains("pottery") && !text.contains("high school"),
        "{text}"
    );

    // A query searches only what was said in the range.
    let q = "What did Caroline say about the LGBTQ support group?";
    let v = ask(&db, &["--until", "2023-05-31"], q);
    assert!(
        quotes(&v).iter().any(|q| q.contains("support group")),
        "{v:#}"
    );
    let v = ask(&db, &["--since", "2023-06-01"], q);
    assert!(
        !quotes(&v).iter().any(|q| q.contains("support group")),
        "{v:#}"
    );
    for c in v["citations"].as_array().unwrap() {
        assert!(c["time"].as_str().unwrap() >= "2023-06", "{c}");
    }

    // Nothing in the range, a bad bound, bounds the wrong way round: one line each.
    for (args, want) in [
        (
            vec!["--since", "2023-08-01"],
            "nothing in `d` was said since 2023-08-01",
        ),
        (
            vec!["--since", "yesterday"],
            "since: invalid time `yesterday`",
        ),
        (
            vec!["--since", "2023-07-01", "--until", "2023-06-01"],
            "since (2023-07-01) is after until (2023-06-01)",
        ),
    ] {
        let (code, _, err) = window(&args);
        assert_ne!(code, 0);
        assert!(
            err.contains(want) && err.trim().lines().count() == 1,
            "{err}"
        );
        let mut a = vec!["query", "--scope", "d"];
        a.extend_from_slice(&args);
        a.push(q);
        let (code, _, err) = strata_cli(&db, &a);
        assert_ne!(code, 0);
        assert!(err.trim().lines().count() == 1, "{err}");
    }
}

#[test]
fn a_question_naming_when_reads_what_was_said_then() {
    let dir = tempfile::tempdir().unwrap();
    let db = timed_store(dir.path());
    let first_note = |v: &Value| v["refinement_history"][0].as_str().unwrap().to_string();

    // Both of Melanie's turns with the kids answer the question without a time; "in July"
    // (the July before the latest time said, 2023-07-12) leaves the one said then.
    let v = ask(&db, &[], "What did Melanie do with the kids?");
    let q = quotes(&v);
    assert!(
        q.iter().any(|q| q.contains("pottery")) && q.iter().any(|q| q.contains("sunrise")),
        "{v:#}"
    );
    let v = ask(&db, &[], "What did Melanie do with the kids in July?");
    assert_eq!(v["ready"], true, "{v:#}");
    let q = quotes(&v);
    assert!(q[0].contains("pottery"), "{v:#}");
    assert!(!q.iter().any(|q| q.contains("sunrise")), "{v:#}");
    let note = first_note(&v);
    assert!(
        note.contains("\"in July\": 2023-07")
            && note.contains("only what was said between 2023-07-01 and 2023-08-01 is read"),
        "{note}"
    );

    // A question whose only word besides its date names who speaks: their turn then.
    let v = ask(&db, &[], "What did Caroline do in June 2023?");
    assert_eq!(v["ready"], true, "{v:#}");
    assert_eq!(
        quotes(&v),
        ["The adoption agency called me about the interview for the foster program."]
    );
    assert!(
        v["refinement_history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().contains("sentence of theirs")),
        "{v:#}"
    );
    // "since" bounds one side.
    let v = ask(&db, &[], "What did Caroline say since June?");
    assert!(!quotes(&v).is_empty(), "{v:#}");
    for c in v["citations"].as_array().unwrap() {
        assert!(c["time"].as_str().unwrap() >= "2023-06", "{c}");
    }
    // Nothing said then: everything is read, the question as asked — and it is not
    // answered from another month.
    let v = ask(&db, &[], "What did Caroline do in August 2023?");
    assert_eq!(v["ready"], false, "{v:#}");
    assert!(
        first_note(&v).contains("nothing was said between 2023-08-01 and 2023-09-01"),
        "{v:#}"
    );
    // Something was said then, but nothing said then answers it: everything is read, the
    // question as asked (a question's date may be a day nothing was said of it).
    let v = ask(&db, &[], "What trip is Melanie planning in May 2023?");
    assert!(quotes(&v)[0].contains("camping trip"), "{v:#}");
    assert!(
        v["refinement_history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().contains("nothing said then answers it")),
        "{v:#}"
    );
    let w = window_json(
        &db,
        "400",
        &["--for", "What trip is Melanie planning in May 2023?"],
    );
    assert!(w["text"].as_str().unwrap().contains("camping"), "{w:#}");
    assert!(
        w["placed"]
            .as_str()
            .unwrap()
            .contains("so everything is read for it"),
        "{w:#}"
    );
    // A date after an article names a thing; a range given outright wins.
    let v = ask(&db, &[], "Who set the May 7 deadline?");
    assert!(!first_note(&v).contains("places itself in time"), "{v:#}");
    let v = ask(
        &db,
        &["--until", "2023-05-31"],
        "What did Melanie do with the kids in July?",
    );
    assert!(quotes(&v).iter().any(|q| q.contains("sunrise")), "{v:#}");
    assert!(!first_note(&v).contains("places itself in time"), "{v:#}");

    // A question-focused window reads a placed question the same way; a turn about to be
    // spoken (no question mark) is read against the whole scope.
    let window_for = |text: &str| window_json(&db, "400", &["--for", text]);
    let w = window_for("What did Melanie do with the kids in July?");
    assert!(w["text"].as_str().unwrap().contains("pottery"), "{w:#}");
    assert!(!w["text"].as_str().unwrap().contains("sunrise"), "{w:#}");
    assert!(
        w["placed"]
            .as_str()
            .unwrap()
            .contains("between 2023-07-01 and 2023-08-01"),
        "{w:#}"
    );
    let w = window_for("I took the kids somewhere in July.");
    assert!(w["text"].as_str().unwrap().contains("sunrise"), "{w:#}");
    assert!(w.get("placed").is_none(), "{w:#}");

    // What was said later about then counts: a turn of 20 July saying "last month" (June)
    // is read for a question about June, whose own turns hold no race.
    let more = write(
        dir.path(),
        "more.jsonl",
        r#"{"round": 4, "speaker": "caroline", "text": "Last month I ran a charity race for the adoption agency.", "time": "2023-07-20"}
"#,
    );
    let more = more.display().to_string();
    let (code, out, err) = strata_cli(&db, &["ingest", "--scope", "d", &more]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = strata_cli(&db, &["compress", "--scope", "d"]);
    assert_eq!(code, 0, "{err}");
    let v = ask(&db, &[], "What race did Caroline run in June?");
    assert_eq!(v["ready"], true, "{v:#}");
    assert!(quotes(&v)[0].contains("charity race"), "{v:#}");
    let note = first_note(&v);
    assert!(
        note.contains("(2 chunks), and what was said at other times that mentions a date then (1)"),
        "{note}"
    );
}

/// A window of a time range quotes no sentence twice (its overview picked from the very
/// round shown below it); a question placed in time with nothing else to search for gets
/// the unfocused window of what was said then; a question nothing in the scope holds gets
/// the unfocused window, not an empty one.
#[test]
fn windows_of_a_time_range_say_each_sentence_once_and_a_bare_time_gets_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let db = timed_store(dir.path());
    let window = |args: &[&str]| window_json(&db, "300", args);
    let w = window(&[
        "--level",
        "auto",
        "--since",
        "2023-06-01",
        "--until",
        "2023-06-30",
    ]);
    let text = w["text"].as_str().unwrap();
    assert_eq!(
        text.matches("The adoption agency called me").count(),
        1,
        "{text}"
    );

    let w = window(&["--for", "What happened in June?"]);
    let text = w["text"].as_str().unwrap();
    assert!(
        text.contains("adoption agency") && text.contains("camping trip"),
        "{text}"
    );
    assert!(
        !text.contains("sunrise") && !text.contains("pottery"),
        "{text}"
    );
    assert!(
        w["placed"].as_str().unwrap().contains("2023-06-01"),
        "{w:#}"
    );

    let w = window(&["--for", "What about the zebras?"]);
    assert_eq!(w["level"], "auto", "{w:#}");
    assert!(w["tokens"].as_u64().unwrap() > 0, "{w:#}");
    assert_eq!(w["for"], "What about the zebras?", "{w:#}");
}

/// A question that asks when is answered from the cited turn that says a date, also when
/// it is not cited first (the turn that says why comes first).
#[test]
fn a_when_question_is_answered_from_the_citation_that_says_a_date() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "c.jsonl",
        r#"{"round": 1, "speaker": "melanie", "text": "Hey Caroline! What motivated you to pursue counseling?", "time": "2023-05-08T13:56:00Z"}
{"round": 1, "speaker": "caroline", "text": "My own journey and the support I got made a huge difference, so I want to help others the same way.", "time": "2023-05-08T14:00:00Z"}
{"round": 2, "speaker": "melanie", "text": "That is lovely. Do you remember when you decided on it?", "time": "2023-06-01T10:00:00Z"}
{"round": 2, "speaker": "caroline", "text": "Last summer, after the pride parade, I knew.", "time": "2023-06-01T10:05:00Z"}
"#,
    );
    let db = dir.path().join("db");
    let (code, out, err) = strata_cli(
        &db,
        &["ingest", "--scope", "d", &file.display().to_string()],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = ask(&db, &[], "When did Caroline decide to pursue counseling?");
    let q = quotes(&v);
    assert!(q.iter().any(|q| q.starts_with("Last summer")), "{v:#}");
    // Said on 1 June 2023 (meteorological summer): last summer is 2022's.
    assert_eq!(v["when"], "2022-06-01/2022-08-31", "{v:#}");
    assert!(
        v["answer"]
            .as_str()
            .unwrap()
            .starts_with("1 June 2022 \u{2013} 31 August 2022"),
        "{v:#}"
    );
}

#[test]
fn a_bad_time_is_one_line_naming_the_line_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let bad = DEBATE.replacen("2023-06-09T19:00:00+02:00", "2023-06-31", 1);
    let file = write(dir.path(), "bad.jsonl", &bad);
    let e = Engine::in_memory(Config::default()).unwrap();
    let err = e
        .ingest_files("d", None, std::slice::from_ref(&file), T0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.jsonl line 4, column") && err.contains("invalid time `2023-06-31`"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
    assert!(e.scope_names().unwrap().is_empty());
    // Through the CLI: the same line, a failed exit, an empty store.
    let db = dir.path().join("db");
    let (code, _, err) = strata_cli(
        &db,
        &["ingest", "--scope", "d", &file.display().to_string()],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("line 4") && err.trim().lines().count() == 1,
        "{err}"
    );
    let (_, out, _) = strata_cli(&db, &["--json", "stats"]);
    assert_eq!(
        json_of(&out)["scopes"].as_array().map(Vec::len),
        Some(0),
        "{out}"
    );
}

#[test]
fn documents_carry_the_time_given_at_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let notes = write(
        dir.path(),
        "notes.md",
        "The depot on Quarry Lane stores exactly 417 snowploughs.\n\nThe ferry runs hourly.\n",
    );
    let db = dir.path().join("db");
    let n = notes.display().to_string();
    let (code, out, err) = strata_cli(
        &db,
        &["ingest", "--scope", "kb", "--time", "2024-01-15", &n],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, text, err) = strata_cli(
        &db,
        &[
            "context", "--scope", "kb", "--level", "full", "--budget", "500",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("2024-01-15: The depot on Quarry Lane"),
        "{text}"
    );
    let (code, out, err) = strata_cli(
        &db,
        &[
            "--json",
            "query",
            "--scope",
            "kb",
            "In what year were the snowploughs counted?",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v = json_of(&out);
    assert_eq!(v["citations"][0]["time"], "2024-01-15", "{v:#}");
    assert_eq!(v["when"], "2024-01-15", "{v:#}");

    // `--time` is for documents; a debate's turns carry their own.
    let f = write(dir.path(), "d.jsonl", DEBATE).display().to_string();
    let (code, _, err) = strata_cli(&db, &["ingest", "--scope", "d", "--time", "2024-01-15", &f]);
    assert_ne!(code, 0);
    assert!(
        err.contains("is a debate: a time given for the files is for documents"),
        "{err}"
    );
    let (code, _, err) = strata_cli(&db, &["ingest", "--scope", "kb", "--time", "soon", &n]);
    assert_ne!(code, 0);
    assert!(err.contains("--time: invalid time `soon`"), "{err}");
}

#[test]
fn a_time_is_part_of_a_full_id_only_when_given() {
    let e = Engine::in_memory(Config::default()).unwrap();
    let text = "The depot on Quarry Lane stores exactly 417 snowploughs.";
    let input = |time: Option<Time>| {
        InputFile::single(
            ScopeKind::Debate,
            "",
            SourceInput {
                id: "d#1".into(),
                text: text.into(),
                round: Some(1),
                speaker: Some("okafor".into()),
                time,
            },
        )
    };
    let chunk = |e: &Engine| e.store().get_source("d", "d#1").unwrap().unwrap().chunks[0].id;
    e.ingest("d", &[input(None)], T0).unwrap();
    // Without a time, the id is the one stores made before times existed.
    assert_eq!(
        chunk(&e),
        strata::node::full_id("d", "d#1", 0, text.len(), text)
    );
    // The same words at a time are another statement: new nodes.
    let at = t("2026-03-04T18:02:00Z");
    let r = e.ingest("d", &[input(Some(at))], T0 + 1).unwrap();
    assert_eq!(r.replaced, 1);
    let timed = chunk(&e);
    assert_eq!(
        timed,
        strata::node::full_id_at("d", "d#1", 0, text.len(), text, Some(&at))
    );
    assert_ne!(
        timed,
        strata::node::full_id("d", "d#1", 0, text.len(), text)
    );
    assert!(
        e.store()
            .get_node(&strata::node::full_id("d", "d#1", 0, text.len(), text))
            .unwrap()
            .is_none()
    );
    // The same instant spelled otherwise is the same time: unchanged.
    let r = e
        .ingest("d", &[input(Some(t("2026-03-04T18:02:00+00:00")))], T0 + 2)
        .unwrap();
    assert_eq!(r.unchanged, 1);
    assert_eq!(chunk(&e), timed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_turns_documents_and_queries_carry_times() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    for (i, line) in DEBATE.lines().enumerate() {
        let turn: Value = serde_json::from_str(line).unwrap();
        // Both route families take the field.
        let path = if i % 2 == 0 {
            "/api/debates/d/turns"
        } else {
            "/api/v1/debates/d/turns"
        };
        let (code, v) = s.post(path, turn).await;
        assert_eq!(code, 201, "{v}");
    }
    let (code, v) = s
        .post(
            "/api/debates/d/turns",
            json!({"round": 4, "speaker": "caroline", "text": "Hi.", "time": "2023-02-30"}),
        )
        .await;
    // A body that does not type-check is a 422, as every other bad field.
    assert_eq!(code, 422, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains("invalid time `2023-02-30`") && !detail.contains('\n'),
        "{v}"
    );
    let (code, v) = s
        .post(
            "/api/documents",
            json!({"scope": "kb", "source": "depot.md", "text": "The depot stores 417 snowploughs.", "time": "2024-01-15"}),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = s
        .post(
            "/api/documents",
            json!({"scope": "kb", "source": "x.md", "text": "x", "time": "noon"}),
        )
        .await;
    assert_eq!(code, 422, "{v}");
    for scope in ["d", "kb"] {
        let (code, v) = s
            .post(&format!("/api/debates/{scope}/compress"), json!({}))
            .await;
        assert_eq!(code, 200, "{v}");
        let job = s.wait_job(v["job_id"].as_u64().unwrap()).await;
        assert_eq!(job["state"], "done", "{job}");
    }

    let (code, v) = s
        .post(
            "/api/debates/d/query-rlm",
            json!({"query": "When did Caroline go to the LGBTQ support group?", "strategy": "offline"}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["when"], "2023-05-05", "{v:#}");
    assert_eq!(v["citations"][0]["time"], "2023-05-08T13:56:00Z", "{v:#}");
    let (code, v) = s
        .post(
            "/api/debates/d/query-rlm",
            json!({"query": "What did Caroline say about the LGBTQ support group?",
                   "strategy": "offline", "since": "2023-06-01"}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert!(
        !quotes(&v).iter().any(|q| q.contains("support group")),
        "{v:#}"
    );
    let (code, v) = s
        .post(
            "/api/knowledge/query-rlm",
            json!({"query": "How many snowploughs does the depot store?", "scopes": ["kb"],
                   "strategy": "offline", "until": "2024-01-15"}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["citations"][0]["time"], "2024-01-15", "{v:#}");
    let (code, v) = s
        .post(
            "/api/debates/d/query-rlm",
            json!({"query": "anything", "since": "last week"}),
        )
        .await;
    assert_eq!(code, 422, "{v}");

    let (code, w) = s
        .get("/api/debates/d/context/full?budget=2000&since=2023-06-01&until=2023-06-30")
        .await;
    assert_eq!(code, 200, "{w}");
    let text = w["text"].as_str().unwrap();
    assert!(
        text.contains("## Round 2 (full)\ncaroline (2023-06-09): The adoption agency"),
        "{text}"
    );
    assert!(!text.contains("support group"), "{text}");
    let (code, w) = s
        .get("/api/debates/d/context/full?budget=2000&since=2024-01-01")
        .await;
    assert_eq!(code, 400, "{w}");
    s.stop().await;
}

/// Turns with times appended through the library to the store `open` opens, checked after
/// a reopen: in the source record, the FULL node's meta, the levels above it and a window.
fn check_store_keeps_times(open: impl Fn() -> Engine) {
    let e = open();
    let at = t("2023-05-08T13:56:00+02:00");
    let turn = |round: u32, text: &str, time: Option<Time>| Turn {
        round,
        speaker: "caroline".into(),
        text: text.into(),
        time,
    };
    let (_, first) = e
        .append(
            "d",
            turn(1, "I went to the support group last Friday.", Some(at)),
            T0,
        )
        .unwrap();
    let (_, second) = e
        .append(
            "d",
            turn(1, "It was a powerful evening.", Some(t("2023-05-09"))),
            T0,
        )
        .unwrap();
    let (_, untimed) = e
        .append("d", turn(2, "No time on this one.", None), T0)
        .unwrap();
    drop(e);
    let e = open();
    let rec = e.store().get_source("d", &first).unwrap().unwrap();
    assert_eq!(rec.time, Some(at));
    assert_eq!(rec.time.unwrap().to_string(), "2023-05-08T13:56:00+02:00");
    assert_eq!(
        e.store().get_source("d", &untimed).unwrap().unwrap().time,
        None
    );
    let full = e.store().get_node(&rec.chunks[0].id).unwrap().unwrap();
    assert_eq!(full.meta.time, Some(TimeSpan::of(at)));
    let rt = rt();
    compress(&rt, &e, "d", T0);
    let plan = e.plan("d").unwrap();
    let round1 = e.node(&plan.groups[0].summary, T0).unwrap();
    assert_eq!(
        round1.meta.time,
        Some(TimeSpan {
            first: at,
            last: t("2023-05-09")
        })
    );
    assert_eq!(e.node(&plan.groups[1].summary, T0).unwrap().meta.time, None);
    let abs = e.node(&plan.abstract_id, T0).unwrap();
    assert_eq!(
        abs.meta.time.map(|s| s.date_label()).as_deref(),
        Some("2023-05-08 \u{2013} 2023-05-09")
    );
    let meta = e
        .node(&plan.metadata()[&plan.groups[0].summary], T0)
        .unwrap();
    assert!(
        meta.text.contains("time: 2023-05-08 \u{2013} 2023-05-09"),
        "{}",
        meta.text
    );
    let w = rt
        .block_on(e.context_during(
            "d",
            LevelChoice::Fixed(Level::Full),
            1000,
            &strata::TimeRange::parse(Some("2023-05-09"), None).unwrap(),
            T0,
            &NoProgress,
        ))
        .unwrap();
    assert!(w.text.contains("It was a powerful evening.") && !w.text.contains("support group"));
    assert!(!w.text.contains("No time on this one"), "{}", w.text);
    let rec = e.store().get_source("d", &second).unwrap().unwrap();
    assert!(rec.time.unwrap().is_date());
}

#[test]
fn sled_keeps_times_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    check_store_keeps_times(|| Engine::open(&db, Config::default()).unwrap());
}

#[test]
fn postgres_keeps_times_across_a_reopen() {
    let Some(url) = crate::postgres::database("time_postgres") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let open = || {
        Engine::open(
            Path::new(&url),
            crate::postgres::config_in(&tmp.path().join("idx")),
        )
        .unwrap()
    };
    check_store_keeps_times(open);
}
