//! `strata mcp` as an agent meets it: the built binary as a child process on a store with
//! the sample data, spoken to in MCP (JSON-RPC, one message a line) over its stdin and
//! stdout — initialize, tools/list, every tool, invalid arguments, an unknown tool, a
//! ping — and `sub_query` against the mock OpenAI-compatible server with scripted replies.

use crate::support::*;
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tools `strata mcp` lists, sorted.
pub(crate) const TOOLS: [&str; 8] = [
    "context",
    "execute_analysis",
    "forget",
    "grep",
    "load_corpus",
    "peek",
    "query",
    "sub_query",
];

/// `strata mcp` on `db`, and the client half of its stdio.
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next: u64,
}

impl Mcp {
    fn start(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Mcp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("--db")
            .arg(db)
            .args(args)
            .arg("mcp")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Mcp {
            child,
            stdin,
            lines,
            next: 0,
        }
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its response (notifications in between are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("no response to {method}: {e}"));
            let msg: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
            assert_eq!(msg["jsonrpc"], "2.0", "{msg}");
            if msg["id"] == json!(id) {
                return msg;
            }
            assert!(
                msg.get("id").is_none(),
                "a response to another request: {msg}"
            );
        }
    }

    /// tools/call; returns the whole response.
    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// tools/call that must succeed; returns its structured content (checked against the
    /// JSON text beside it).
    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        let res = &r["result"];
        assert_eq!(res["isError"], json!(false), "{tool} {args}: {r}");
        let text: Value =
            serde_json::from_str(res["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, res["structuredContent"]);
        res["structuredContent"].clone()
    }

    /// tools/call that must fail as the tool's own error; returns its message.
    fn tool_error(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args.clone());
        assert_eq!(r["result"]["isError"], json!(true), "{tool} {args}: {r}");
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// tools/call that must be refused as invalid params (-32602); returns the message.
    fn invalid(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args.clone());
        assert_eq!(r["error"]["code"], json!(-32602), "{tool} {args}: {r}");
        r["error"]["message"].as_str().unwrap().to_string()
    }

    fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "strata-tests", "version": "0"}
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "strata mcp exited with {status}");
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store with the sample debate (scope `debate`) and documents (scope `docs`).
fn sample_store(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("db");
    let ingest = |scope: &str, files: Vec<std::path::PathBuf>| {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("--db")
            .arg(&db)
            .args(["ingest", "--scope", scope])
            .args(files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ingest("debate", vec![debate_path()]);
    ingest("docs", doc_paths());
    db
}

/// The bytes a span stands for, read back through `peek`.
fn span_text(mcp: &mut Mcp, scope: &str, span: &Value) -> String {
    let r = mcp.ok(
        "peek",
        json!({"scope": scope, "source": span["source"], "start": span["start"], "end": span["end"]}),
    );
    assert_eq!(r["spans"][0], *span);
    r["text"].as_str().unwrap().to_string()
}

#[test]
fn an_agent_uses_every_tool_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let mut mcp = Mcp::start(&db, &[], &[]);

    let init = mcp.initialize();
    let res = &init["result"];
    assert_eq!(res["serverInfo"]["name"], "strata", "{init}");
    assert_eq!(res["protocolVersion"], "2025-06-18", "{init}");
    assert!(res["capabilities"]["tools"].is_object(), "{init}");

    // tools/list: every tool, each with an object schema for its arguments.
    let list = mcp.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, TOOLS);
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(!t["description"].as_str().unwrap().is_empty(), "{t}");
    }
    let load = tools.iter().find(|t| t["name"] == "load_corpus").unwrap();
    for p in [
        "scope",
        "segment",
        "sources",
        "rounds",
        "speakers",
        "levels",
        "date_from",
        "date_to",
        "search",
        "page",
        "page_size",
    ] {
        assert!(
            load["inputSchema"]["properties"][p].is_object(),
            "load_corpus lacks {p}: {load}"
        );
    }
    let sq = tools.iter().find(|t| t["name"] == "sub_query").unwrap();
    let tasks: Vec<&str> = sq["inputSchema"]["$defs"]["Task"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["const"].as_str().unwrap())
        .collect();
    assert_eq!(
        tasks,
        ["classify", "extract", "summarize", "filter", "compare"],
        "{sq}"
    );

    // load_corpus: alice's turns, two a page; then the next page of the same segment.
    let p1 = mcp.ok(
        "load_corpus",
        json!({"scope": "debate", "speakers": ["Alice"], "page_size": 2}),
    );
    assert_eq!(p1["segment"], "seg-1");
    assert_eq!(p1["page"], 1);
    let total = p1["total"].as_u64().unwrap();
    assert!(total >= 40, "{total}");
    assert_eq!(p1["pages"], json!(total.div_ceil(2)));
    assert_eq!(p1["provenance"]["filters"]["speakers"], json!(["alice"]));
    assert_eq!(p1["provenance"]["filters"]["levels"], json!(["full"]));
    assert!(p1["provenance"]["timestamp"]["unix"].as_u64().unwrap() > 1_700_000_000);
    let items = p1["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for (i, it) in items.iter().enumerate() {
        assert_eq!(it["index"], i);
        assert_eq!(it["speaker"], "alice");
        assert_eq!(it["level"], "full");
        assert_eq!(it["round"], i + 1, "one turn a round");
        let span = &it["spans"][0];
        assert_eq!(
            it["spans"].as_array().unwrap().len(),
            1,
            "a FULL chunk has one span"
        );
        assert_eq!(
            span_text(&mut mcp, "debate", span),
            it["text"].as_str().unwrap()
        );
    }
    let p2 = mcp.ok(
        "load_corpus",
        json!({"segment": "seg-1", "page": 2, "page_size": 2}),
    );
    assert_eq!(p2["segment"], "seg-1");
    assert_eq!(p2["total"], p1["total"]);
    assert_eq!(p2["items"][0]["index"], 2);
    assert_ne!(p2["items"][0]["id"], p1["items"][0]["id"]);

    // A search term at a derived level (built on demand, offline) and a round range.
    let sums = mcp.ok(
        "load_corpus",
        json!({"scope": "debate", "levels": ["summary"], "search": "harbour line", "rounds": {"from": 1, "to": 2}}),
    );
    assert_eq!(sums["segment"], "seg-2");
    let items = sums["items"].as_array().unwrap();
    assert!(!items.is_empty(), "{sums}");
    for it in items {
        assert_eq!(it["level"], "summary");
        assert!(
            it["text"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("harbour line")
        );
        assert!(
            it["rounds"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| (1..=2).contains(&r.as_u64().unwrap()))
        );
        assert!(!it["spans"].as_array().unwrap().is_empty());
    }
    // Paging a segment keeps the page size it was made with: page 2 of ten a page is
    // items 10 to 19 (it was 20 to 39).
    let tens = mcp.ok("load_corpus", json!({"scope": "debate", "page_size": 10}));
    let page2 = mcp.ok(
        "load_corpus",
        json!({"segment": tens["segment"], "page": 2}),
    );
    assert_eq!(page2["page_size"], 10, "{page2}");
    let indexes: Vec<u64> = page2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|it| it["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, (10..20).collect::<Vec<u64>>());
    // A date range that ends before anything was stored selects nothing.
    let none = mcp.ok(
        "load_corpus",
        json!({"scope": "docs", "date_to": "2001-01-01"}),
    );
    assert_eq!(
        (none["total"].clone(), none["items"].clone()),
        (json!(0), json!([]))
    );

    // sub_query: an empty batch is an empty result; offline, anything else says it needs a model.
    let empty = mcp.ok(
        "sub_query",
        json!({"task": "summarize", "prompt": "{{item.text}}", "items": []}),
    );
    assert_eq!(empty["results"], json!([]));
    assert_eq!(empty["n_items"], 0);
    assert_eq!(empty["usage"]["calls"], 0);
    let e = mcp.tool_error(
        "sub_query",
        json!({"task": "summarize", "prompt": "{{item.text}}", "segment": "seg-1", "limit": 2}),
    );
    assert!(
        e.starts_with("sub_query needs a model and strata runs offline"),
        "{e}"
    );

    // execute_analysis: a script over the segment (a table of alice's turns, read an item at
    // a time), with the engine's primitives; then scripts that break the sandbox's limits or
    // reach for what it does not offer, each a one-line tool error.
    let r = mcp.ok(
        "execute_analysis",
        json!({"script": r#"
            let items = segments["seg-1"];
            let rounds = [];
            for it in items { rounds.push(it.round); }
            let hits = grep("Harbour Line", "full", 3);
            let first = peek(hits[0].id);
            #{ n: items.len(), first_round: rounds[0], speakers: items.map(|it| it.speaker).filter(|s| s != "alice").len(),
               hit_level: first.level, hit_spans: first.spans.len(), children: children(first.id).len() }
        "#, "segments": ["seg-1"]}),
    );
    assert_eq!(r["value"]["n"], json!(total), "{r}");
    assert_eq!(r["value"]["first_round"], json!(1), "{r}");
    assert_eq!(r["value"]["speakers"], json!(0), "{r}");
    assert_eq!(r["value"]["hit_level"], json!("full"), "{r}");
    assert_eq!(r["value"]["hit_spans"], json!(1), "{r}");
    assert_eq!(r["value"]["children"], json!(0), "{r}");
    assert_eq!(r["primitive_calls"], json!(3), "{r}");
    assert_eq!(r["provenance"]["scopes"], json!(["debate"]), "{r}");
    let r = mcp.ok(
        "execute_analysis",
        json!({"script": r#"final("two", ["a", "b"]); 99"#}),
    );
    assert_eq!(
        r["final"],
        json!({"answer": "two", "ids": ["a", "b"]}),
        "{r}"
    );
    for (script, limits, why) in [
        (
            "loop { }",
            json!({"max_operations": 10000}),
            "limit of 10000 operations",
        ),
        ("let s = \"x\"; loop { s += s; }", json!({}), "size limit"),
        ("fn f(n) { f(n + 1) } f(0)", json!({}), "nesting limit"),
        ("open(\"/etc/passwd\")", json!({}), "called `open"),
        (
            "eval(\"1\")",
            json!({}),
            "`eval`, which the sandbox does not offer",
        ),
        ("llm_query(\"hi\")", json!({}), "no model to ask"),
    ] {
        let mut args = json!({"script": script});
        args.as_object_mut()
            .unwrap()
            .extend(limits.as_object().unwrap().clone());
        let e = mcp.tool_error("execute_analysis", args);
        assert!(e.contains(why), "{script}: {e}");
        assert!(!e.contains('\n'), "{script}: {e}");
    }

    // context: within budget, every node with its spans.
    let w = mcp.ok("context", json!({"scope": "debate", "budget": 400}));
    assert!(w["tokens"].as_u64().unwrap() <= 400, "{w}");
    assert!(!w["text"].as_str().unwrap().is_empty());
    for n in w["nodes"].as_array().unwrap() {
        assert!(!n["spans"].as_array().unwrap().is_empty(), "{n}");
    }

    // query: cited spans whose quotes are the source's bytes.
    let q = mcp.ok(
        "query",
        json!({"question": "How long is the Harbour Line?", "scopes": ["debate"], "time_limit_ms": 60000}),
    );
    assert_eq!(q["limit_hit"], Value::Null, "{q}");
    let cites = q["citations"].as_array().unwrap();
    assert!(!cites.is_empty(), "{q}");
    for c in cites {
        let span = json!({"source": c["source"], "start": c["start"], "end": c["end"]});
        assert_eq!(
            span_text(&mut mcp, "debate", &span),
            c["quote"].as_str().unwrap()
        );
    }
    assert!(
        q["answer"]
            .as_str()
            .unwrap()
            .contains(cites[0]["quote"].as_str().unwrap()),
        "{q}"
    );
    assert_eq!(q["provenance"]["scopes"], json!(["debate"]));
    assert_eq!(q["provenance"]["navigator"], "offline");

    // grep, then peek at a hit by id.
    let g = mcp.ok(
        "grep",
        json!({"pattern": "Eastgate nurse", "scopes": ["debate"], "levels": ["full"], "limit": 3}),
    );
    let hits = g["hits"].as_array().unwrap();
    assert!(!hits.is_empty() && hits.len() <= 3, "{g}");
    assert!(
        hits[0]["text"].as_str().unwrap().contains("Eastgate"),
        "{g}"
    );
    let id = hits[0]["id"].as_str().unwrap();
    let p = mcp.ok("peek", json!({"ids": [id]}));
    assert_eq!(p["nodes"][0]["text"], hits[0]["text"]);
    assert_eq!(p["nodes"][0]["spans"], hits[0]["spans"]);

    // Invalid arguments: JSON-RPC -32602 with a reason.
    let e = mcp.invalid(
        "load_corpus",
        json!({"scope": "debate", "page_size": "ten"}),
    );
    assert!(e.contains("page_size") || e.contains("invalid type"), "{e}");
    let e = mcp.invalid(
        "load_corpus",
        json!({"scope": "debate", "levels": ["huge"]}),
    );
    assert!(e.contains("huge"), "{e}");
    let e = mcp.invalid("load_corpus", json!({"scope": "debate", "page_size": 1000}));
    assert_eq!(e, "page_size must be 1 to 100");
    let e = mcp.invalid("load_corpus", json!({"segment": "seg-99"}));
    assert!(e.starts_with("unknown segment `seg-99`"), "{e}");
    let e = mcp.invalid("context", json!({"scope": "nope", "budget": 100}));
    assert!(e.starts_with("unknown scope `nope`"), "{e}");
    let e = mcp.invalid("query", json!({"question": "q", "time_limit_ms": -1}));
    assert!(
        e.contains("time_limit_ms") || e.contains("invalid value"),
        "{e}"
    );
    let e = mcp.invalid("grep", json!({"scopes": ["debate"]}));
    assert!(e.contains("pattern"), "{e}");
    let e = mcp.invalid("peek", json!({"ids": ["xyz"]}));
    assert_eq!(e, "`xyz` is not a node id (64 hex digits)");
    let e = mcp.invalid(
        "peek",
        json!({"scope": "debate", "source": p1["items"][0]["source"], "start": 5, "end": 1}),
    );
    assert!(e.starts_with("bytes 5..1 are not within source"), "{e}");
    let e = mcp.invalid(
        "sub_query",
        json!({"task": "guess", "prompt": "x", "items": []}),
    );
    assert!(e.contains("guess"), "{e}");
    let e = mcp.invalid(
        "sub_query",
        json!({"task": "extract", "prompt": "{{item.nope}}", "items": [{"text": "a"}]}),
    );
    assert_eq!(
        e,
        "item 0 has no field `nope` (the prompt's `{{item.nope}}`)"
    );
    let e = mcp.invalid(
        "sub_query",
        json!({"task": "extract", "prompt": "x", "items": vec![json!("a"); 101]}),
    );
    assert_eq!(e, "101 items given; a sub_query takes at most 100");
    let e = mcp.invalid(
        "execute_analysis",
        json!({"script": "1", "sub_queries": ["sq-7"]}),
    );
    assert!(e.starts_with("unknown sub-query result `sq-7`"), "{e}");

    // An unknown tool, then the session still answers a ping.
    let r = mcp.call("summon", json!({}));
    assert_eq!(r["error"]["code"], json!(-32602), "{r}");
    let r = mcp.request("ping", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    mcp.finish();
}

// ---------------------------------------------------------------- sub_query with a model

#[derive(Default)]
struct Chat {
    /// Every request's (system, user) prompts.
    log: Mutex<Vec<(String, String)>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Wakes requests waiting for company (see `chat`).
    arrived: tokio::sync::Notify,
}

/// Scripted replies, chosen by what the prompt holds. The first requests wait (up to 5 s)
/// until another is in flight, so a batch that ran one call at a time would show it.
async fn chat(
    State(mock): State<Arc<Chat>>,
    axum::Json(body): axum::Json<Value>,
) -> axum::Json<Value> {
    let msg = |role: &str| {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == role)
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    let (system, user) = (msg("system"), msg("user"));
    mock.log
        .lock()
        .unwrap()
        .push((system.clone(), user.clone()));
    let n = mock.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    mock.max_in_flight.fetch_max(n, Ordering::SeqCst);
    mock.arrived.notify_waiters();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while mock.in_flight.load(Ordering::SeqCst) < 2
            && mock.max_in_flight.load(Ordering::SeqCst) < 2
        {
            mock.arrived.notified().await;
        }
    })
    .await;
    let retry = user.contains("It was rejected:");
    let reply = if system.contains("Classify") {
        if user.contains("budget") {
            r#"{"label": "proposal"}"#.to_string()
        } else if user.contains("delay") {
            "```json\n{\"label\": \"objection\"}\n```".to_string()
        } else if user.contains("wobbly") {
            // Not one of the labels the first time; right when told what was wrong.
            if retry {
                r#"{"label": "other"}"#
            } else {
                r#"{"label": "banana"}"#
            }
            .to_string()
        } else {
            "I would say it is a proposal.".to_string()
        }
    } else {
        // extract: the first percentage in the item.
        user.split_whitespace()
            .find(|w| w.contains('%'))
            .unwrap_or("none")
            .trim_end_matches([',', '.'])
            .to_string()
    };
    mock.in_flight.fetch_sub(1, Ordering::SeqCst);
    axum::Json(json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": "mock",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

#[test]
fn sub_query_validates_retries_once_and_keeps_input_order() {
    let rt = rt();
    let mock = Arc::new(Chat::default());
    let url = serve_mock(
        &rt,
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(mock.clone()),
    );
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let mut mcp = Mcp::start(
        &db,
        &["--root-model", "openai:mock", "--base-url", &url],
        &[
            ("STRATA_MODEL_API_KEY_ENV", "STRATA_TEST_NO_SUCH_KEY"),
            ("STRATA_MODEL_RETRIES", "0"),
        ],
    );
    mcp.initialize();

    let r = mcp.ok(
        "sub_query",
        json!({
            "task": "classify",
            "labels": ["proposal", "objection", "other"],
            "prompt": "Speaker {{item.who}} said: {{item.text}}",
            "items": [
                {"who": "alice", "text": "Raise the budget to 40 million."},
                {"who": "bob", "text": "We should delay the vote."},
                {"who": "chen", "text": "A wobbly idea."},
                {"who": "dana", "text": "Something else entirely."}
            ]
        }),
    );
    let results = r["results"].as_array().unwrap();
    let got: Vec<(u64, bool, Value, u64)> = results
        .iter()
        .map(|o| {
            (
                o["index"].as_u64().unwrap(),
                o["ok"].as_bool().unwrap(),
                o["output"].clone(),
                o["attempts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, true, json!({"label": "proposal"}), 1),
            (1, true, json!({"label": "objection"}), 1),
            (2, true, json!({"label": "other"}), 2),
            (3, false, Value::Null, 2),
        ]
    );
    let e = results[3]["error"].as_str().unwrap();
    assert!(
        e.starts_with("invalid output after a retry: it is not JSON"),
        "{e}"
    );
    assert_eq!(
        (r["n_ok"].clone(), r["n_failed"].clone()),
        (json!(3), json!(1))
    );
    assert_eq!(r["id"], "sq-1");
    assert_eq!(r["provenance"]["model"], "openai:mock");
    assert_eq!(r["provenance"]["batch_size"], 4);
    assert_eq!(r["usage"]["calls"], 6, "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], 600, "{r}");
    assert!(r["cost_usd"].is_number());
    // The retry told the model what was wrong.
    let log = mock.log.lock().unwrap().clone();
    let retry = log
        .iter()
        .find(|(_, u)| u.contains("wobbly") && u.contains("It was rejected:"))
        .unwrap();
    assert!(retry.1.contains(r#"{"label": "banana"}"#), "{}", retry.1);
    assert!(
        retry.1.contains("does not follow the schema"),
        "{}",
        retry.1
    );
    assert!(log[0].1.starts_with("Speaker "), "{log:?}");
    assert!(
        mock.max_in_flight.load(Ordering::SeqCst) >= 2,
        "the items ran one at a time"
    );

    // Over a segment: each result carries its item's node id and source spans.
    let seg = mcp.ok(
        "load_corpus",
        json!({"scope": "debate", "speakers": ["bob"], "rounds": {"from": 1, "to": 1}}),
    );
    let items = seg["items"].as_array().unwrap().clone();
    let r = mcp.ok(
        "sub_query",
        json!({"task": "extract", "prompt": "The figure {{item.speaker}} gives in round {{item.round}}: {{item.text}}", "segment": seg["segment"]}),
    );
    assert_eq!(r["n_items"], json!(items.len()));
    for (o, it) in r["results"].as_array().unwrap().iter().zip(&items) {
        assert_eq!(o["item_id"], it["id"]);
        assert_eq!(o["spans"], it["spans"]);
    }
    assert_eq!(r["results"][0]["output"], "11%", "{r}");
    assert!(
        mock.log
            .lock()
            .unwrap()
            .iter()
            .any(|(_, u)| u.starts_with("The figure bob gives in round 1: "))
    );

    // The results stay in the session for execute_analysis: a script over both.
    let a = mcp.ok(
        "execute_analysis",
        json!({"script": r#"
            let labels = sub_queries["sq-1"].results.filter(|o| o.ok).map(|o| o.output.label);
            #{ labels: labels, extracted: sub_queries[SECOND].results.len() }
        "#.replace("SECOND", &format!("{:?}", r["id"].as_str().unwrap())),
          "sub_queries": ["sq-1", r["id"]]}),
    );
    assert_eq!(
        a["value"],
        json!({"labels": ["proposal", "objection", "other"], "extracted": r["results"].as_array().unwrap().len()}),
        "{a}"
    );
    assert_eq!(a["provenance"]["sub_queries"], json!(2), "{a}");
    mcp.finish();
}

/// The official Python MCP SDK's python (PyPI `mcp` 2.3.0): `STRATA_MCP_PYTHON`, else
/// target/mcp-client-venv (scripts/mcp-client-venv.sh). None (with a message) when there
/// is none, unless `STRATA_MCP_REQUIRED=1` (set by `.ci/run` once the venv exists).
pub(crate) fn mcp_python() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("STRATA_MCP_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo().join("target/mcp-client-venv/bin/python"));
    let required = std::env::var("STRATA_MCP_REQUIRED").is_ok_and(|v| v == "1");
    if !python.exists() {
        assert!(
            !required,
            "STRATA_MCP_REQUIRED=1 but there is no venv at {}",
            python.display()
        );
        eprintln!(
            "Python MCP client test skipped: no virtual environment at {} (scripts/mcp-client-venv.sh makes one from PyPI; .ci/run runs it)",
            python.display()
        );
        return None;
    }
    Some(python)
}

/// The official Python MCP client spawns `strata mcp` through its own stdio transport
/// and uses it (tests/it/drive_mcp_client.py): the handshake, the tool list, grep → peek,
/// a context window, a question whose citations read back byte for byte, invalid
/// arguments and an unknown tool as -32602, a ping.
#[test]
fn the_official_python_mcp_client_uses_strata_mcp() {
    let Some(python) = mcp_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let out = Command::new(python)
        .arg(repo().join("tests/it/drive_mcp_client.py"))
        .arg(env!("CARGO_BIN_EXE_strata"))
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drive_mcp_client.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["sdk"], "2.3.0", "{seen}");
    assert_eq!(seen["server"], "strata");
    assert_eq!(seen["tools"], json!(TOOLS), "{seen}");
    assert_eq!(seen["schemas"], true);
    assert!(seen["grep_hits"].as_u64().unwrap() >= 1, "{seen}");
    assert_eq!(seen["peek_same_text"], true);
    assert!(seen["context_tokens"].as_u64().unwrap() <= 300, "{seen}");
    assert!(
        seen["answer"].as_str().unwrap().contains("Harbour Line"),
        "{seen}"
    );
    assert!(seen["citations"].as_u64().unwrap() >= 1, "{seen}");
    assert_eq!(seen["citations_exact"], true);
    assert_eq!(seen["invalid_code"], -32602, "{seen}");
    assert_eq!(seen["unknown_code"], -32602, "{seen}");
    assert_eq!(seen["ping"], true);
}

/// `strata mcp` started with a scoped token (`STRATA_MCP_TOKEN`, one of `server.tokens`)
/// cannot read, search or list another scope: each is unknown to it, and searches over
/// every scope search only its own.
#[test]
fn a_scoped_token_limits_an_mcp_session_to_its_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let tokens = r#"[{"token": "docs-reader", "scopes": ["do*"], "access": "read"}]"#;
    // A node of the debate, found with full access.
    let mut full = Mcp::start(&db, &[], &[("STRATA_SERVER_TOKENS", tokens)]);
    full.initialize();
    let hits = full.ok("grep", json!({"pattern": "fare cap", "scopes": ["debate"]}));
    let debate_node = hits["hits"][0]["id"].as_str().unwrap().to_string();
    full.finish();

    let mut mcp = Mcp::start(
        &db,
        &[],
        &[
            ("STRATA_SERVER_TOKENS", tokens),
            ("STRATA_MCP_TOKEN", "docs-reader"),
        ],
    );
    mcp.initialize();
    for (tool, args) in [
        ("context", json!({"scope": "debate", "budget": 300})),
        ("load_corpus", json!({"scope": "debate"})),
        ("grep", json!({"pattern": "fare cap", "scopes": ["debate"]})),
        (
            "query",
            json!({"question": "What fare cap?", "scopes": ["debate"]}),
        ),
        (
            "peek",
            json!({"scope": "debate", "source": "data/debate.jsonl#1"}),
        ),
    ] {
        let e = mcp.invalid(tool, args);
        assert_eq!(e, "unknown scope `debate`", "{tool}");
    }
    let e = mcp.invalid("peek", json!({"ids": [debate_node]}));
    assert!(e.starts_with("unknown node"), "{e}");
    // Over every scope: only its own.
    let hits = mcp.ok("grep", json!({"pattern": "fare cap freedom peace"}));
    let hits = hits["hits"].as_array().unwrap();
    assert!(!hits.is_empty());
    assert!(hits.iter().all(|h| h["scope"] == "docs"), "{hits:?}");
    let r = mcp.ok(
        "query",
        json!({"question": "What fare cap did chen propose?"}),
    );
    for c in r["citations"].as_array().unwrap() {
        assert!(c["source"].as_str().unwrap().contains("data/docs/"), "{c}");
    }
    mcp.ok("context", json!({"scope": "docs", "budget": 300}));
    mcp.finish();

    // A token that is not configured: the session does not start.
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(&db)
        .arg("mcp")
        .env("STRATA_SERVER_TOKENS", tokens)
        .env("STRATA_MCP_TOKEN", "nope")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("STRATA_MCP_TOKEN is none of"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `forget`: a read-only token may not forget; a writer names sources (or asks for the
/// whole scope explicitly); what was forgotten is gone from every tool's answers and from
/// the session's segments.
#[test]
fn the_forget_tool_writes_only_with_a_writing_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = sample_store(dir.path());
    let tokens = r#"[{"token": "r", "scopes": ["*"], "access": "read"}, {"token": "w", "scopes": ["docs"], "access": "write"}]"#;
    let lincoln = repo()
        .join("data/docs/1862-lincoln.txt")
        .display()
        .to_string();
    let lincoln = lincoln.as_str();
    let mut reader = Mcp::start(
        &db,
        &[],
        &[("STRATA_SERVER_TOKENS", tokens), ("STRATA_MCP_TOKEN", "r")],
    );
    reader.initialize();
    let e = reader.invalid("forget", json!({"scope": "docs", "sources": [lincoln]}));
    assert!(e.contains("may read `docs` but not write it"), "{e}");
    reader.finish();

    let mut mcp = Mcp::start(
        &db,
        &[],
        &[("STRATA_SERVER_TOKENS", tokens), ("STRATA_MCP_TOKEN", "w")],
    );
    mcp.initialize();
    let seg = mcp.ok(
        "load_corpus",
        json!({"scope": "docs", "sources": [lincoln]}),
    );
    let seg_id = seg["segment"].as_str().unwrap().to_string();
    assert!(
        mcp.invalid("forget", json!({"scope": "docs"}))
            .contains("whole_scope")
    );
    assert!(
        mcp.invalid("forget", json!({"scope": "debate", "whole_scope": true}))
            .contains("unknown scope")
    );
    let e = mcp.invalid("forget", json!({"scope": "docs", "sources": ["nope.txt"]}));
    assert!(e.contains("has no source `nope.txt`"), "{e}");
    let r = mcp.ok("forget", json!({"scope": "docs", "sources": [lincoln]}));
    assert_eq!(r["sources"], json!([lincoln]), "{r}");
    assert!(r["nodes"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["provenance"]["time"]["unix"].is_u64(), "{r}");
    // Its segment is gone; no tool finds the text.
    let e = mcp.invalid("load_corpus", json!({"segment": seg_id, "page": 1}));
    assert!(e.contains("seg-"), "{e}");
    let hits = mcp.ok(
        "grep",
        json!({"pattern": "emancipation", "scopes": ["docs"], "limit": 100}),
    );
    for h in hits["hits"].as_array().unwrap() {
        assert!(!h.to_string().contains(lincoln), "{h}");
    }
    let r = mcp.call(
        "peek",
        json!({"scope": "docs", "source": lincoln, "start": 0, "end": 10}),
    );
    assert!(
        r["error"].is_object() || r["result"]["isError"] == json!(true),
        "{r}"
    );
    mcp.finish();
}
