//! One snapshot per HTTP route family (`expect![]`; `UPDATE_EXPECT=1` rewrites them): what
//! a client reads back from the debate routes, the document and knowledge routes, the
//! `/rlm` context routes, the job route and the forget routes, on a server in this process.
//! Values that differ from run to run (times, durations, job and context ids, counters of
//! the process) are replaced by their kind; long texts are cut to 100 characters.

use crate::support::*;
use expect_test::expect;
use serde_json::{Value, json};
use strata::Config;

/// Keys whose values differ between runs.
const VOLATILE: &[&str] = &[
    "at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "queued_at",
    "timestamp",
    "seconds",
    "elapsed_ms",
    "duration_ms",
    "time_ms",
    "latency_ms",
    "job_id",
    "context_id",
    "id",
    "uptime_seconds",
    "usage",
    "wall_ms",
    "at_ms",
    "time_seconds",
    // Whether an append's or a compress's job joined one still queued, and what that job
    // then built, depend on when the worker took it.
    "coalesced",
    "outcome",
];

fn redact(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = if VOLATILE.contains(&k.as_str()) && !v.is_null() {
                        Value::String(format!("<{}>", kind(v)))
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(redact).collect()),
        Value::String(s) if s.chars().count() > 100 => {
            Value::String(format!("{}…", s.chars().take(100).collect::<String>()))
        }
        other => other.clone(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `status` and the redacted body, one route a block.
fn show(out: &mut String, what: &str, (code, v): (u16, Value)) {
    out.push_str(&format!(
        "{what} -> {code}\n{}\n",
        serde_json::to_string_pretty(&redact(&v)).unwrap()
    ));
}

/// POST, then wait for the job the write queued. A scope's index statistics (BM25's document
/// counts) depend on how its builds fell: a node an append rebuilds stays counted as a deleted
/// document until its segment merges, so three appends built one by one score a citation a
/// little differently from three built in one job. Waiting for each fixes the history the
/// snapshot sees; without it the snapshot depended on when the worker took each job.
async fn settled(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let res = s.post(path, body).await;
    if let Some(id) = res.1["job_id"].as_u64() {
        s.wait_job(id).await;
    }
    res
}

fn turn(round: u32, speaker: &str, text: &str) -> Value {
    json!({"round": round, "speaker": speaker, "text": text})
}

async fn debate(s: &Server) -> String {
    let mut out = String::new();
    let turns = [
        (
            1,
            "alice",
            "The tram line would cost 240 million euros and open in 2031.",
        ),
        (
            1,
            "bob",
            "Buses cost 35 million for twelve routes; I propose buses.",
        ),
        (
            2,
            "alice",
            "The 2029 audit found the tram estimate low by a fifth.",
        ),
    ];
    for (r, sp, t) in turns {
        show(
            &mut out,
            "POST turns",
            settled(s, "/api/v1/debates/d/turns", turn(r, sp, t)).await,
        );
    }
    show(
        &mut out,
        "POST compress",
        s.post("/api/v1/debates/d/compress", json!({})).await,
    );
    let (_, j) = s.post("/api/v1/debates/d/compress", json!({})).await;
    if let Some(id) = j["job_id"].as_u64() {
        s.wait_job(id).await;
    }
    show(
        &mut out,
        "GET context/summary",
        s.get("/api/v1/debates/d/context/summary").await,
    );
    show(
        &mut out,
        "GET context/auto budget 60",
        s.get("/api/v1/debates/d/context/auto?budget=60").await,
    );
    show(
        &mut out,
        "POST query-rlm",
        s.post(
            "/api/v1/debates/d/query-rlm",
            json!({"query": "What did the 2029 audit find?"}),
        )
        .await,
    );
    show(&mut out, "GET debate", s.get("/api/v1/debates/d").await);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debate_routes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    let out = debate(&s).await;
    s.stop().await;
    expect![[r###"
        POST turns -> 201
        {
          "chunks": 1,
          "coalesced": "<bool>",
          "debate": "d",
          "job_id": "<number>",
          "round": 1,
          "source": "d#turn-1",
          "speaker": "alice"
        }
        POST turns -> 201
        {
          "chunks": 1,
          "coalesced": "<bool>",
          "debate": "d",
          "job_id": "<number>",
          "round": 1,
          "source": "d#turn-2",
          "speaker": "bob"
        }
        POST turns -> 201
        {
          "chunks": 1,
          "coalesced": "<bool>",
          "debate": "d",
          "job_id": "<number>",
          "round": 2,
          "source": "d#turn-3",
          "speaker": "alice"
        }
        POST compress -> 200
        {
          "coalesced": "<bool>",
          "complete": true,
          "compressed_tokens": {
            "ABSTRACT": 22,
            "DETAILED": 44,
            "SUMMARY": 34
          },
          "compression_ratios": {
            "ABSTRACT": 0.5,
            "DETAILED": 1.0,
            "SUMMARY": 0.7727272727272727
          },
          "job_id": "<number>",
          "levels": {
            "ABSTRACT": {
              "live": 1,
              "planned": 1,
              "tokens": 22
            },
            "DETAILED": {
              "live": 3,
              "planned": 3,
              "tokens": 44
            },
            "FULL": {
              "live": 3,
              "planned": 3,
              "tokens": 44
            },
            "METADATA": {
              "live": 6,
              "planned": 6,
              "tokens": 230
            },
            "SUMMARY": {
              "live": 2,
              "planned": 2,
              "tokens": 34
            }
          },
          "levels_created": 5,
          "original_tokens": 44,
          "outcome": "<object>",
          "state": "done",
          "time_seconds": "<number>"
        }
        GET context/summary -> 200
        {
          "budget": null,
          "content": "## Round 1 (summary)\nalice: The tram line would cost 240 million euros and open in 2031.\n\n## Round 2…",
          "level": "SUMMARY",
          "nodes": [
            {
              "content": "alice: The tram line would cost 240 million euros and open in 2031.",
              "id": "<string>",
              "key_topics": [
                "million",
                "buses",
                "cost",
                "propose",
                "routes",
                "twelve",
                "euros",
                "line",
                "open",
                "tram"
              ],
              "level": "summary",
              "token_count": 18,
              "tokens": 18
            },
            {
              "content": "alice: The 2029 audit found the tram estimate low by a fifth.",
              "id": "<string>",
              "key_topics": [
                "estimate",
                "audit",
                "fifth",
                "found",
                "tram",
                "low"
              ],
              "level": "summary",
              "token_count": 16,
              "tokens": 16
            }
          ],
          "omitted": 0,
          "pending_turns": 0,
          "scope": "d",
          "stale_levels": [],
          "text": "## Round 1 (summary)\nalice: The tram line would cost 240 million euros and open in 2031.\n\n## Round 2…",
          "token_count": 48,
          "tokens": 48
        }
        GET context/auto budget 60 -> 200
        {
          "budget": 60,
          "content": "## Overview (salient sentences)\nalice (round 1): The tram line would cost 240 million euros and open…",
          "level": "AUTO",
          "nodes": [
            {
              "content": "The tram line would cost 240 million euros and open in 2031.",
              "id": "<string>",
              "key_topics": [
                "million",
                "euros",
                "cost",
                "line",
                "open",
                "tram"
              ],
              "level": "full",
              "token_count": 16,
              "tokens": 16
            },
            {
              "content": "The 2029 audit found the tram estimate low by a fifth.",
              "id": "<string>",
              "key_topics": [
                "estimate",
                "audit",
                "fifth",
                "found",
                "tram",
                "low"
              ],
              "level": "full",
              "token_count": 14,
              "tokens": 14
            }
          ],
          "omitted": 1,
          "pending_turns": 0,
          "scope": "d",
          "stale_levels": [],
          "text": "## Overview (salient sentences)\nalice (round 1): The tram line would cost 240 million euros and open…",
          "token_count": 52,
          "tokens": 52
        }
        POST query-rlm -> 200
        {
          "answer": "The 2029 audit found the tram estimate low by a fifth.",
          "budgets": {
            "iterations": {
              "limit": 6,
              "used": 2
            },
            "sub_calls": {
              "limit": 32,
              "used": 0
            },
            "tokens": {
              "limit": 200000,
              "used": 66
            }
          },
          "citations": [
            {
              "end": 54,
              "quote": "The 2029 audit found the tram estimate low by a fifth.",
              "round": 2,
              "source": "d#turn-3",
              "speaker": "alice",
              "start": 0
            }
          ],
          "confidence": 0.48542685973299227,
          "iteration": 0,
          "iterations": 2,
          "limit_hit": null,
          "max_iterations": 6,
          "max_iterations_reached": false,
          "navigation_history": [
            "iteration 1: grep over summary/detailed/full picked groups: working set 2 → 1",
            "iteration 2: grep within the groups picked chunks: working set 1 → 1",
            "read 3 chunk(s), 1 candidate sentence(s); cited the best 1 of 3 ranked turn(s)",
            "cited first: turn ranked 1 (retrieval 1.000, score 1.000); its best sentence, terms 2029, audit"
          ],
          "nodes_examined": [
            "67b4f2d876bf2b0b2063f9acc0eefbee794d1acf0bcea3011e9a6106881cf830",
            "5a00abbb7c08615480355fa417e53ed5c89e405cf75f3f1250c6360106dad66b",
            "eebefbcf15273af54355a93389cd445d2d659c1768f1b1468f3daeb4f8c8ad37",
            "a64c84adaba0902681f79908a7be39bf21564f37051951c5f5b16fe1d9e93155",
            "2175bf20cae1888732ec44298c8608ceeea89e4f494187032e53cae4ef4df2f3"
          ],
          "outcome": "<string>",
          "ready": true,
          "refinement_history": [],
          "start_level": "ABSTRACT",
          "strategy": "auto",
          "sub_calls_made": 0,
          "tokens_processed": 66,
          "trajectory": [
            {
              "action": "peek",
              "at_ms": "<number>",
              "detail": "1 abstract node(s), 22 tokens",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 22,
              "working": [
                "67b4f2d876bf2b0b2063f9acc0eefbee794d1acf0bcea3011e9a6106881cf830"
              ]
            },
            {
              "action": "descend",
              "at_ms": "<number>",
              "detail": "1 node(s) → 2 child node(s)",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 22,
              "working": [
                "67b4f2d876bf2b0b2063f9acc0eefbee794d1acf0bcea3011e9a6106881cf830"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"What did the 2029 audit find\" at summary/detailed/full: 3 hit(s)",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 22,
              "working": [
                "67b4f2d876bf2b0b2063f9acc0eefbee794d1acf0bcea3011e9a6106881cf830"
              ]
            },
            {
              "action": "descend",
              "at_ms": "<number>",
              "detail": "1 node(s) → 1 child node(s)",
              "iteration": 1,
              "sub_calls": 0,
              "tokens": 22,
              "working": [
                "5a00abbb7c08615480355fa417e53ed5c89e405cf75f3f1250c6360106dad66b"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"What did the 2029 audit find\" at detailed/full within the working set: 2 hit(s)",
              "iteration": 1,
              "sub_calls": 0,
              "tokens": 22,
              "working": [
                "5a00abbb7c08615480355fa417e53ed5c89e405cf75f3f1250c6360106dad66b"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"What did the 2029 audit find\" at full: 1 hit(s)",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 22,
              "working": [
                "eebefbcf15273af54355a93389cd445d2d659c1768f1b1468f3daeb4f8c8ad37"
              ]
            },
            {
              "action": "peek",
              "at_ms": "<number>",
              "detail": "3 full node(s), 44 tokens",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 66,
              "working": [
                "eebefbcf15273af54355a93389cd445d2d659c1768f1b1468f3daeb4f8c8ad37",
                "a64c84adaba0902681f79908a7be39bf21564f37051951c5f5b16fe1d9e93155",
                "2175bf20cae1888732ec44298c8608ceeea89e4f494187032e53cae4ef4df2f3"
              ]
            },
            {
              "action": "finish",
              "at_ms": "<number>",
              "detail": "1 citation(s), confidence 0.49, ready true",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 66,
              "working": [
                "eebefbcf15273af54355a93389cd445d2d659c1768f1b1468f3daeb4f8c8ad37",
                "a64c84adaba0902681f79908a7be39bf21564f37051951c5f5b16fe1d9e93155",
                "2175bf20cae1888732ec44298c8608ceeea89e4f494187032e53cae4ef4df2f3"
              ]
            }
          ],
          "usage": "<object>"
        }
        GET debate -> 405
        {
          "detail": "/api/v1/debates/d takes DELETE",
          "error": "/api/v1/debates/d takes DELETE",
          "status": 405,
          "title": "Method Not Allowed",
          "type": "about:blank"
        }
    "###]].assert_eq(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_knowledge_and_forget_routes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    let mut out = String::new();
    let doc = |source: &str, text: &str| json!({"scope": "kb", "source": source, "text": text});
    show(
        &mut out,
        "POST documents",
        settled(&s, "/api/documents", doc("ferry.md", "The harbour authority paid 12 million euros for the new ferry. It carries 300 people.")).await,
    );
    show(
        &mut out,
        "POST documents (second)",
        settled(
            &s,
            "/api/documents",
            doc(
                "tours.md",
                "Boat tours leave the pier every hour in summer.",
            ),
        )
        .await,
    );
    // FIXME(issue 21): the right sentence is cited, but the answer ends not ready
    // (confidence 0.16): "cost" is not in it ("paid"), and readiness counts the question's
    // terms the citation covers — a paraphrase the offline scorer does not see.
    show(
        &mut out,
        "POST knowledge/query-rlm",
        s.post(
            "/api/v1/knowledge/query-rlm",
            json!({"query": "How much did the ferry cost?", "workspace_id": "kb"}),
        )
        .await,
    );
    let r = s
        .req(
            reqwest::Method::DELETE,
            "/api/v1/scopes/kb/sources/tours.md",
        )
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    show(
        &mut out,
        "DELETE scopes/kb/sources/tours.md",
        (code, r.json().await.unwrap_or(Value::Null)),
    );
    let r = s
        .req(reqwest::Method::DELETE, "/api/v1/scopes/kb")
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    show(
        &mut out,
        "DELETE scopes/kb",
        (code, r.json().await.unwrap_or(Value::Null)),
    );
    s.stop().await;
    expect![[r#"
        POST documents -> 201
        {
          "added": 1,
          "chunks": 1,
          "coalesced": "<bool>",
          "job_id": "<number>",
          "replaced": 0,
          "scope": "kb",
          "unchanged": 0
        }
        POST documents (second) -> 201
        {
          "added": 1,
          "chunks": 1,
          "coalesced": "<bool>",
          "job_id": "<number>",
          "replaced": 0,
          "scope": "kb",
          "unchanged": 0
        }
        POST knowledge/query-rlm -> 200
        {
          "answer": "The harbour authority paid 12 million euros for the new ferry.",
          "budgets": {
            "iterations": {
              "limit": 6,
              "used": 2
            },
            "sub_calls": {
              "limit": 32,
              "used": 0
            },
            "tokens": {
              "limit": 200000,
              "used": 29
            }
          },
          "citations": [
            {
              "end": 62,
              "quote": "The harbour authority paid 12 million euros for the new ferry.",
              "round": null,
              "source": "ferry.md",
              "speaker": null,
              "start": 0
            }
          ],
          "confidence": 0.16207652439312228,
          "iteration": 0,
          "iterations": 2,
          "limit_hit": null,
          "max_iterations": 6,
          "max_iterations_reached": false,
          "navigation_history": [
            "iteration 1: grep over summary/detailed/full picked groups: working set 2 → 1",
            "iteration 2: grep within the groups picked chunks: working set 1 → 1",
            "read 1 chunk(s), 1 candidate sentence(s); cited the best 1 of 1 ranked turn(s)",
            "cited first: turn ranked 1 (retrieval 1.000, score 1.000); its best sentence, terms ferri"
          ],
          "nodes_examined": [
            "432c68d29e85abcbae40b7b51de173f472268e58ff1e176376aa1750d67f5f98",
            "9f883d55e1357c181cccce5fdc24cfa48b8ede6cc250121332fdc2f1be9a215b",
            "1871660296fa215605986ac7c71dd7b44aa7acc96824c21c0c452cf387217b8c"
          ],
          "outcome": "<string>",
          "ready": false,
          "refinement_history": [],
          "scopes": [
            "kb"
          ],
          "sources": [
            "ferry.md"
          ],
          "start_level": "ABSTRACT",
          "strategy": "auto",
          "sub_calls_made": 0,
          "tokens_processed": 29,
          "trajectory": [
            {
              "action": "peek",
              "at_ms": "<number>",
              "detail": "1 abstract node(s), 10 tokens",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 10,
              "working": [
                "432c68d29e85abcbae40b7b51de173f472268e58ff1e176376aa1750d67f5f98"
              ]
            },
            {
              "action": "descend",
              "at_ms": "<number>",
              "detail": "1 node(s) → 2 child node(s)",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 10,
              "working": [
                "432c68d29e85abcbae40b7b51de173f472268e58ff1e176376aa1750d67f5f98"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"How much did the ferry cost\" at summary/detailed/full: 3 hit(s)",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 10,
              "working": [
                "432c68d29e85abcbae40b7b51de173f472268e58ff1e176376aa1750d67f5f98"
              ]
            },
            {
              "action": "descend",
              "at_ms": "<number>",
              "detail": "1 node(s) → 1 child node(s)",
              "iteration": 1,
              "sub_calls": 0,
              "tokens": 10,
              "working": [
                "9f883d55e1357c181cccce5fdc24cfa48b8ede6cc250121332fdc2f1be9a215b"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"How much did the ferry cost\" at detailed/full within the working set: 2 hit(s)",
              "iteration": 1,
              "sub_calls": 0,
              "tokens": 10,
              "working": [
                "9f883d55e1357c181cccce5fdc24cfa48b8ede6cc250121332fdc2f1be9a215b"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"How much did the ferry cost\" at full: 1 hit(s)",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 10,
              "working": [
                "1871660296fa215605986ac7c71dd7b44aa7acc96824c21c0c452cf387217b8c"
              ]
            },
            {
              "action": "peek",
              "at_ms": "<number>",
              "detail": "1 full node(s), 19 tokens",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 29,
              "working": [
                "1871660296fa215605986ac7c71dd7b44aa7acc96824c21c0c452cf387217b8c"
              ]
            },
            {
              "action": "finish",
              "at_ms": "<number>",
              "detail": "1 citation(s), confidence 0.16, ready false",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 29,
              "working": [
                "1871660296fa215605986ac7c71dd7b44aa7acc96824c21c0c452cf387217b8c"
              ]
            }
          ],
          "usage": "<object>",
          "workspace_id": "kb"
        }
        DELETE scopes/kb/sources/tours.md -> 200
        {
          "bytes": 47,
          "node_bytes": 427,
          "nodes": 7,
          "nodes_by_level": {
            "abstract": 1,
            "detailed": 1,
            "full": 1,
            "metadata": 3,
            "summary": 1
          },
          "remaining_sources": 1,
          "scope": "kb",
          "scope_removed": false,
          "sources": [
            "tours.md"
          ]
        }
        DELETE scopes/kb -> 200
        {
          "bytes": 85,
          "node_bytes": 452,
          "nodes": 7,
          "nodes_by_level": {
            "abstract": 1,
            "detailed": 1,
            "full": 1,
            "metadata": 3,
            "summary": 1
          },
          "remaining_sources": 0,
          "scope": "kb",
          "scope_removed": true,
          "sources": [
            "ferry.md"
          ]
        }
    "#]].assert_eq(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rlm_context_routes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), Config::default()).await;
    let mut out = String::new();
    let text = "The tram line would cost 240 million euros. The depot will be at Nordhafen. \
                The audit of 2029 confirmed 41,000 daily riders. Ferry berths move to the east quay.";
    let (code, c) = s
        .post(
            "/api/v1/rlm/compress",
            json!({"content": text, "source_type": "text"}),
        )
        .await;
    let ctx = c["context_id"].as_str().unwrap_or_default().to_string();
    show(&mut out, "POST rlm/compress", (code, c));
    show(
        &mut out,
        "POST rlm/query",
        s.post(
            "/api/v1/rlm/query",
            json!({"context_id": ctx, "query": "How many daily riders did the audit confirm?"}),
        )
        .await,
    );
    show(
        &mut out,
        "GET rlm/contexts",
        s.get("/api/v1/rlm/contexts").await,
    );
    show(
        &mut out,
        "GET rlm/context/{id}",
        s.get(&format!("/api/v1/rlm/context/{ctx}")).await,
    );
    show(
        &mut out,
        "POST rlm/stream targeted",
        s.post(
            "/api/v1/rlm/stream",
            json!({"context_id": ctx, "mode": "targeted", "query": "ferry berths"}),
        )
        .await,
    );
    show(
        &mut out,
        "GET rlm/strategies",
        s.get("/api/v1/rlm/strategies").await,
    );
    show(
        &mut out,
        "GET rlm/stream/modes",
        s.get("/api/v1/rlm/stream/modes").await,
    );
    s.stop().await;
    expect![[r#"
        POST rlm/compress -> 200
        {
          "compression_result": {
            "compressed_tokens": 54,
            "compression_ratio": 1.255813953488372,
            "levels": {
              "ABSTRACT": {
                "nodes": 1,
                "tokens": 26
              },
              "DETAILED": {
                "nodes": 1,
                "tokens": 14
              },
              "FULL": {
                "nodes": 1,
                "tokens": 43
              },
              "METADATA": {
                "nodes": 3,
                "tokens": 150
              },
              "SUMMARY": {
                "nodes": 1,
                "tokens": 14
              }
            },
            "original_tokens": 43,
            "source_type": "text"
          },
          "context_id": "<string>",
          "created_at": "<string>",
          "job_id": "<number>",
          "state": "done",
          "time_seconds": "<number>"
        }
        POST rlm/query -> 200
        {
          "answer": "The audit of 2029 confirmed 41,000 daily riders.",
          "budgets": {
            "iterations": {
              "limit": 6,
              "used": 2
            },
            "sub_calls": {
              "limit": 32,
              "used": 0
            },
            "tokens": {
              "limit": 200000,
              "used": 69
            }
          },
          "citations": [
            {
              "end": 124,
              "quote": "The audit of 2029 confirmed 41,000 daily riders.",
              "round": null,
              "source": "ctx_574f93b981ea84af.text",
              "speaker": null,
              "start": 76
            }
          ],
          "confidence": 0.453574306633271,
          "iteration": 0,
          "iterations": 2,
          "limit_hit": "no_narrowing",
          "max_iterations": 6,
          "max_iterations_reached": false,
          "metadata": {
            "confidence": 0.453574306633271,
            "context_id": "<string>",
            "iterations": 2,
            "refined": false,
            "strategy": "auto",
            "sub_calls_made": 0,
            "tokens_processed": 69
          },
          "navigation_history": [
            "iteration 1: grep over summary/detailed/full picked groups: working set 1 → 1",
            "iteration 2: grep within the groups picked chunks: working set 1 → 1",
            "read 1 chunk(s), 1 candidate sentence(s); cited the best 1 of 1 ranked turn(s)",
            "cited first: turn ranked 1 (retrieval 1.000, score 1.000); its best sentence, terms audit, confirm, …"
          ],
          "nodes_examined": [
            "629ac56a8e9b3cdb56f68a567ad02a118dd40392adc2bff1696a89538bf9d36a",
            "4273810224fe3ffa1c821ec79ab0f423b31f365081f6461d41bf40e501b8587b",
            "74775c85bac23cd2374a3a028591b3afff7ee31fc1b13f31d70c78f36d954814"
          ],
          "outcome": "<string>",
          "ready": true,
          "refinement_history": [],
          "start_level": "ABSTRACT",
          "strategy": "auto",
          "sub_calls_made": 0,
          "timestamp": "<string>",
          "tokens_processed": 69,
          "trajectory": [
            {
              "action": "peek",
              "at_ms": "<number>",
              "detail": "1 abstract node(s), 26 tokens",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 26,
              "working": [
                "629ac56a8e9b3cdb56f68a567ad02a118dd40392adc2bff1696a89538bf9d36a"
              ]
            },
            {
              "action": "descend",
              "at_ms": "<number>",
              "detail": "1 node(s) → 1 child node(s)",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 26,
              "working": [
                "629ac56a8e9b3cdb56f68a567ad02a118dd40392adc2bff1696a89538bf9d36a"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"How many daily riders did the audit confirm\" at summary/detailed/full: 3 hit(s)",
              "iteration": 0,
              "sub_calls": 0,
              "tokens": 26,
              "working": [
                "629ac56a8e9b3cdb56f68a567ad02a118dd40392adc2bff1696a89538bf9d36a"
              ]
            },
            {
              "action": "descend",
              "at_ms": "<number>",
              "detail": "1 node(s) → 1 child node(s)",
              "iteration": 1,
              "sub_calls": 0,
              "tokens": 26,
              "working": [
                "4273810224fe3ffa1c821ec79ab0f423b31f365081f6461d41bf40e501b8587b"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"How many daily riders did the audit confirm\" at detailed/full within the working set: 2 hit(s)",
              "iteration": 1,
              "sub_calls": 0,
              "tokens": 26,
              "working": [
                "4273810224fe3ffa1c821ec79ab0f423b31f365081f6461d41bf40e501b8587b"
              ]
            },
            {
              "action": "grep",
              "at_ms": "<number>",
              "detail": "\"How many daily riders did the audit confirm\" at full: 1 hit(s)",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 26,
              "working": [
                "74775c85bac23cd2374a3a028591b3afff7ee31fc1b13f31d70c78f36d954814"
              ]
            },
            {
              "action": "peek",
              "at_ms": "<number>",
              "detail": "1 full node(s), 43 tokens",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 69,
              "working": [
                "74775c85bac23cd2374a3a028591b3afff7ee31fc1b13f31d70c78f36d954814"
              ]
            },
            {
              "action": "finish",
              "at_ms": "<number>",
              "detail": "1 citation(s), confidence 0.45, ready true",
              "iteration": 2,
              "sub_calls": 0,
              "tokens": 69,
              "working": [
                "74775c85bac23cd2374a3a028591b3afff7ee31fc1b13f31d70c78f36d954814"
              ]
            }
          ],
          "usage": "<object>"
        }
        GET rlm/contexts -> 200
        {
          "contexts": [
            {
              "created_at": "<string>",
              "id": "<string>",
              "original_tokens": 43,
              "source_type": "text",
              "sources": 1
            }
          ],
          "limit": 50,
          "offset": 0,
          "total": 1
        }
        GET rlm/context/{id} -> 200
        {
          "compressed_tokens": 54,
          "compression_ratio": 1.255813953488372,
          "created_at": "<string>",
          "id": "<string>",
          "levels": {
            "ABSTRACT": {
              "live": 1,
              "node_ids": [
                "629ac56a8e9b3cdb56f68a567ad02a118dd40392adc2bff1696a89538bf9d36a"
              ],
              "nodes": 1,
              "planned": 1,
              "tokens": 26
            },
            "DETAILED": {
              "live": 1,
              "node_ids": [
                "60ee589131aa4182482aa89ea122fcf2414ab3d217e0b84f46c5fd26678aacc8"
              ],
              "nodes": 1,
              "planned": 1,
              "tokens": 14
            },
            "FULL": {
              "live": 1,
              "node_ids": [
                "74775c85bac23cd2374a3a028591b3afff7ee31fc1b13f31d70c78f36d954814"
              ],
              "nodes": 1,
              "planned": 1,
              "tokens": 43
            },
            "METADATA": {
              "live": 3,
              "node_ids": [
                "72b24b8ad25d2f92a2c0ab262fbc5cf626a33435c5a62d4499d463b1b11b23fe",
                "abbd34f19668401ed0ab6de0f2351883df66be66c72aebec5a088b18c235cdcf",
                "f4ff3adb7b1ba27850cf3c2e1c0b2b5bb055902dbce870834148507f397feb20"
              ],
              "nodes": 3,
              "planned": 3,
              "tokens": 150
            },
            "SUMMARY": {
              "live": 1,
              "node_ids": [
                "4273810224fe3ffa1c821ec79ab0f423b31f365081f6461d41bf40e501b8587b"
              ],
              "nodes": 1,
              "planned": 1,
              "tokens": 14
            }
          },
          "original_tokens": 43,
          "source_type": "text"
        }
        POST rlm/stream targeted -> 200
        {
          "chunks": [
            {
              "content": "The tram line would cost 240 million euros. The depot will be at Nordhafen. The audit of 2029 confir…",
              "is_final": true,
              "level": "FOR",
              "metadata": {
                "node_ids": [
                  "74775c85bac23cd2374a3a028591b3afff7ee31fc1b13f31d70c78f36d954814"
                ]
              },
              "token_count": 43
            }
          ],
          "context_id": "<string>",
          "mode": "targeted",
          "query": "ferry berths",
          "timestamp": "<string>",
          "total_chunks": 1
        }
        GET rlm/strategies -> 200
        {
          "default": "auto",
          "documentation": "docs/USAGE.md, section Strategies",
          "strategies": {
            "auto": {
              "description": "The root model chooses every step when one is configured; otherwise the hierarchical descent",
              "name": "Auto",
              "token_reduction": "varies with the strategy chosen",
              "use_case": "General purpose"
            },
            "code": {
              "description": "The root model writes one sandboxed Rhai program per iteration that evaluates the whole working set …",
              "name": "Code",
              "token_reduction": "reads what the program selects, within its operation limits",
              "use_case": "Questions that need many nodes compared or filtered at once"
            },
            "grep": {
              "description": "One flat search over every chunk (detailed and full text), no descent",
              "name": "Grep",
              "token_reduction": "reads only the chunks the search returns",
              "use_case": "Finding a specific fact, a name, a number"
            },
            "hierarchical": {
              "description": "Down the pre-built tree: ABSTRACT, groups by the evidence beneath them, chunks within the groups",
              "name": "Hierarchical",
              "token_reduction": "reads one path down the tree per step",
              "use_case": "Complex documents, iterative exploration"
            },
            "offline": {
              "description": "Always the offline (BM25) navigator, its hierarchical descent; no model is called",
              "name": "Offline",
              "token_reduction": "reads at most query.max_nodes hits per step, never the whole context",
              "use_case": "Deterministic answers, no model cost"
            },
            "partition_map": {
              "description": "Searches each group on its own and lets each group's best chunk compete (a root model: one helper ca…",
              "name": "Partition Map",
              "token_reduction": "reads each group's best chunk and the chunks that win",
              "use_case": "Questions whose evidence is spread over many rounds or sections"
            },
            "peek": {
              "description": "Reads the overview and every group's summary, keeps the groups whose text matches, reads their chunk…",
              "name": "Peek",
              "token_reduction": "reads the overview, every group's summary and the matching groups' chunks",
              "use_case": "Rapid exploration, questions about what a section says"
            },
            "summarize": {
              "description": "The compressed levels decide: groups by their SUMMARY, chunks by their DETAILED; full text is read o…",
              "name": "Summarize",
              "token_reduction": "reads the compressed levels; full text only for the cited spans",
              "use_case": "Long documents, getting the gist"
            }
          }
        }
        GET rlm/stream/modes -> 200
        {
          "modes": [
            {
              "description": "ABSTRACT, then SUMMARY, DETAILED and FULL, each in reading order",
              "mode": "top_down",
              "use_case": "When you need a quick overview first"
            },
            {
              "description": "FULL, then DETAILED, SUMMARY and ABSTRACT",
              "mode": "bottom_up",
              "use_case": "When you need specific details first"
            },
            {
              "description": "One level only (`level`, default SUMMARY)",
              "mode": "targeted",
              "use_case": "When you know exactly what level you need"
            },
            {
              "description": "Like top_down, in chunks of `chunk_size` tokens (the HTTP answer holds them all)",
              "mode": "progressive",
              "use_case": "For UIs that show content as it comes"
            }
          ]
        }
    "#]].assert_eq(&out);
}
