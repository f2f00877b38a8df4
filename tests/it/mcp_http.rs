//! MCP over Streamable HTTP at `strata serve`'s `/mcp`: plain HTTP JSON-RPC against the
//! real binary (no Python needed), and the official Python MCP SDK's streamable-HTTP
//! client (tests/it/drive_mcp_client.py, skipped without its venv) — both with the REST
//! API used on the same store in the same test, and the tokens enforced.

use crate::mcp::{TOOLS, mcp_python};
use crate::support::{Served, repo};
use serde_json::{Value, json};
use std::process::Command;

const CONFIG: &str = r#"[server]
token = "admin"

[[server.tokens]]
token = "reader"
scopes = ["team-a-*"]
access = "read"
"#;

/// A JSON-RPC client of `/mcp` over plain HTTP.
struct Client {
    http: reqwest::Client,
    url: String,
    token: Option<&'static str>,
    session: Option<String>,
    next: u64,
}

/// An HTTP answer: status, headers we look at, and the JSON-RPC messages in its body
/// (a JSON body, or the `data:` lines of an event stream).
struct Answer {
    status: u16,
    content_type: String,
    session: Option<String>,
    messages: Vec<Value>,
    body: String,
}

impl Client {
    fn new(served: &Served, token: Option<&'static str>) -> Client {
        Client {
            http: crate::support::http_client(),
            url: format!("http://{}/mcp", served.addr),
            token,
            session: None,
            next: 1,
        }
    }

    async fn post(&self, msg: &Value, extra: &[(&str, &str)]) -> Answer {
        let mut r = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .body(msg.to_string());
        if let Some(t) = self.token {
            r = r.bearer_auth(t);
        }
        if let Some(s) = &self.session {
            r = r.header("mcp-session-id", s);
        }
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let header = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type").unwrap_or_default();
        let session = header("mcp-session-id");
        let body = r.text().await.unwrap();
        let messages = if content_type.starts_with("text/event-stream") {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect()
        } else {
            serde_json::from_str(&body).into_iter().collect()
        };
        Answer {
            status,
            content_type,
            session,
            messages,
            body,
        }
    }

    /// A request; its response message (`result` or `error`).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let a = self.post(&msg, &[]).await;
        assert_eq!(a.status, 200, "{method}: {}", a.body);
        if self.session.is_none() {
            self.session = a.session.clone();
        }
        a.messages
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("{method}: no response in {}", a.body))
    }

    async fn initialize(&mut self) -> Value {
        let r = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "strata-test", "version": "0"},
                }),
            )
            .await;
        assert!(self.session.is_some(), "no Mcp-Session-Id: {r}");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let a = self.post(&note, &[]).await;
        assert_eq!(a.status, 202, "{}", a.body);
        r
    }

    /// A tool's structured result, or the JSON-RPC error.
    async fn tool(&mut self, name: &str, args: Value) -> Result<Value, Value> {
        let r = self
            .request("tools/call", json!({"name": name, "arguments": args}))
            .await;
        match r.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(r["result"]["structuredContent"].clone()),
        }
    }
}

/// REST on the same server: a document into `scope`, built.
async fn ingest(served: &Served, scope: &str, source: &str, text: &str) {
    let http = crate::support::http_client();
    let base = format!("http://{}", served.addr);
    let r = http
        .post(format!("{base}/api/v1/documents"))
        .bearer_auth("admin")
        .header("content-type", "application/json")
        .body(json!({"scope": scope, "source": source, "text": text}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: Value = r.json().await.unwrap();
    let job = v["job_id"].as_u64().unwrap();
    let r = http
        .get(format!("{base}/api/v1/jobs/{job}?wait=60"))
        .bearer_auth("admin")
        .send()
        .await
        .unwrap();
    let j: Value = r.json().await.unwrap();
    assert_eq!(j["state"], "done", "{j}");
}

fn hit_scopes(grep: &Value) -> Vec<String> {
    grep["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["scope"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_shares_the_store_and_the_tokens_of_the_rest_api() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), CONFIG, &[]);

    // No token, a wrong token: 401, as for /api.
    for token in [None, Some("nope")] {
        let c = Client::new(&served, token);
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
        let a = c.post(&init, &[]).await;
        assert_eq!(a.status, 401, "{}", a.body);
        assert!(a.content_type.starts_with("application/problem+json"));
    }
    // The edge guard runs before MCP: a write from a foreign web origin is refused.
    let c = Client::new(&served, Some("admin"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
    let a = c.post(&init, &[("origin", "http://evil.example")]).await;
    assert_eq!(a.status, 403, "{}", a.body);
    // A body that does not say JSON: 415, unread.
    let r = crate::support::http_client()
        .post(format!("http://{}/mcp", served.addr))
        .bearer_auth("admin")
        .header("content-type", "text/plain")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);

    // The full token: handshake, the same tools as `strata mcp`.
    let mut admin = Client::new(&served, Some("admin"));
    let init = admin.initialize().await;
    assert_eq!(init["result"]["serverInfo"]["name"], "strata", "{init}");
    let tools = admin.request("tools/list", json!({})).await;
    let mut names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, TOOLS);

    // Written through REST while the session is open, read through MCP.
    ingest(
        &served,
        "team-a-docs",
        "notes/tram.md",
        "# Tram\n\nThe tram depot will be at Millbrook, next to the river.\n",
    )
    .await;
    ingest(
        &served,
        "team-b-docs",
        "notes/ferry.md",
        "# Ferry\n\nThe ferry depot needs 12 berths at Millbrook quay.\n",
    )
    .await;
    let g = admin
        .tool("grep", json!({"pattern": "Millbrook depot"}))
        .await
        .unwrap();
    let mut scopes = hit_scopes(&g);
    scopes.sort();
    scopes.dedup();
    assert_eq!(scopes, ["team-a-docs", "team-b-docs"], "{g}");
    let ctx = admin
        .tool("context", json!({"scope": "team-b-docs", "budget": 300}))
        .await
        .unwrap();
    assert!(ctx["text"].as_str().unwrap().contains("12 berths"), "{ctx}");

    // The scoped token: its own session sees its scopes only.
    let mut reader = Client::new(&served, Some("reader"));
    reader.initialize().await;
    let g = reader
        .tool("grep", json!({"pattern": "Millbrook depot"}))
        .await
        .unwrap();
    assert!(
        !hit_scopes(&g).is_empty() && hit_scopes(&g).iter().all(|s| s == "team-a-docs"),
        "{g}"
    );
    for (tool, args) in [
        ("context", json!({"scope": "team-b-docs", "budget": 300})),
        (
            "grep",
            json!({"pattern": "berths", "scopes": ["team-b-docs"]}),
        ),
    ] {
        let e = reader.tool(tool, args).await.unwrap_err();
        assert_eq!(e["message"], "unknown scope `team-b-docs`", "{tool}: {e}");
    }
    // Nor can it use the full token's session.
    let mut hijack = Client::new(&served, Some("reader"));
    hijack.session = admin.session.clone();
    hijack.next = 100;
    let e = hijack
        .tool("context", json!({"scope": "team-b-docs", "budget": 300}))
        .await
        .unwrap_err();
    assert!(
        e["message"].as_str().unwrap().contains("another token"),
        "{e}"
    );
    // The full token's session still works.
    admin
        .tool("context", json!({"scope": "team-a-docs", "budget": 300}))
        .await
        .unwrap();

    // The one writing tool: refused to the read-only token, and what the full token's
    // session forgets is gone for the REST API too.
    let e = reader
        .tool(
            "forget",
            json!({"scope": "team-a-docs", "whole_scope": true}),
        )
        .await
        .unwrap_err();
    assert!(e["message"].as_str().unwrap().contains("not write"), "{e}");
    let f = admin
        .tool(
            "forget",
            json!({"scope": "team-b-docs", "whole_scope": true}),
        )
        .await
        .unwrap();
    assert_eq!(f["scope_removed"], true, "{f}");
    let r = crate::support::http_client()
        .get(format!(
            "http://{}/api/v1/rlm/context/team-b-docs",
            served.addr
        ))
        .bearer_auth("admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

/// The official Python MCP SDK's streamable-HTTP client against `strata serve`'s `/mcp`
/// (tests/it/drive_mcp_client.py `http`): tools listed and called (context, grep, query),
/// a document ingested through REST mid-session seen through MCP, 401 without a token, and
/// a scoped token's session limited to its scopes.
#[test]
fn the_official_python_mcp_client_uses_strata_serve_over_http() {
    let Some(python) = mcp_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), CONFIG, &[]);
    let rt = crate::support::rt();
    rt.block_on(ingest(
        &served,
        "team-b-docs",
        "notes/ferry.md",
        "# Ferry\n\nThe ferry depot needs 12 berths at Millbrook quay.\n",
    ));
    let out = Command::new(python)
        .arg(repo().join("tests/it/drive_mcp_client.py"))
        .args([
            "http",
            &format!("http://{}", served.addr),
            "admin",
            "reader",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drive_mcp_client.py http failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["sdk"], "2.3.0", "{seen}");
    assert_eq!(seen["server"], "strata");
    assert_eq!(seen["tools"], json!(TOOLS), "{seen}");
    assert_eq!(seen["no_token_status"], 401, "{seen}");
    assert_eq!(seen["rest_ingest_status"], 201, "{seen}");
    assert_eq!(seen["grep_new_doc"], json!(["team-a-docs"]), "{seen}");
    assert!(
        seen["context_text"].as_str().unwrap().contains("Millbrook"),
        "{seen}"
    );
    assert!(
        seen["answer"].as_str().unwrap().contains("Millbrook"),
        "{seen}"
    );
    assert!(seen["citations"].as_u64().unwrap() >= 1, "{seen}");
    assert_eq!(seen["reader_grep_scopes"], json!(["team-a-docs"]), "{seen}");
    assert_eq!(
        seen["reader_other_scope"], "unknown scope `team-b-docs`",
        "{seen}"
    );
}

/// A session's standing event stream (GET /mcp) outlives `server.idle_timeout_ms`: rmcp's
/// keep-alive comments, every half the idle timeout, are bytes on the connection, so the
/// idle timer of the edge does not cut a live stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_outlives_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(
        dir.path(),
        CONFIG,
        &[("STRATA_SERVER_IDLE_TIMEOUT_MS", "1000")],
    );
    let mut c = Client::new(&served, Some("admin"));
    c.initialize().await;
    let mut r = c
        .http
        .get(&c.url)
        .bearer_auth("admin")
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", c.session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let t0 = std::time::Instant::now();
    let mut chunks = 0;
    // Three idle timeouts: the stream must still be open and sending.
    while t0.elapsed() < std::time::Duration::from_millis(3000) {
        let next = tokio::time::timeout(std::time::Duration::from_millis(2000), r.chunk()).await;
        match next {
            Ok(Ok(Some(_))) => chunks += 1,
            other => panic!("the stream ended after {:?}: {other:?}", t0.elapsed()),
        }
    }
    assert!(chunks >= 3, "{chunks} chunks in 3 s");
    // The session still answers on another connection.
    c.tool("context", json!({"scope": "nope", "budget": 300}))
        .await
        .unwrap_err();
}
