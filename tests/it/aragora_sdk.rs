//! aragora's own Python SDK (`aragora-sdk` 2.11.0 from PyPI, unmodified) against `strata
//! serve` on 127.0.0.1: every RLM method of the SDK, sync and async (tests/it/
//! drive_aragora_sdk.py checks each answer), and the server's OpenAPI document through
//! `openapi-spec-validator`. The virtual environment comes from scripts/aragora-sdk-venv.sh
//! (`.ci/run` makes it); without one the test says so and skips, unless
//! `STRATA_ARAGORA_REQUIRED=1` (set by `.ci/run` once the venv exists), when it fails.

use crate::support::{Server, repo};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use strata::Config;

/// The venv's python: `STRATA_ARAGORA_PYTHON`, else target/aragora-sdk-venv.
fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("STRATA_ARAGORA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/aragora-sdk-venv/bin/python"));
    let required = std::env::var("STRATA_ARAGORA_REQUIRED").is_ok_and(|v| v == "1");
    if !python.exists() {
        assert!(
            !required,
            "STRATA_ARAGORA_REQUIRED=1 but there is no venv at {}",
            python.display()
        );
        eprintln!(
            "aragora-sdk test skipped: no virtual environment at {} (scripts/aragora-sdk-venv.sh makes one from PyPI; .ci/run runs it)",
            python.display()
        );
        return None;
    }
    // A venv that exists must be the right one: a broken one fails the test.
    let out = Command::new(&python)
        .args([
            "-c",
            "from importlib.metadata import version; print(version('aragora-sdk')); import openapi_spec_validator",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the venv at {} lacks aragora-sdk or openapi-spec-validator: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2.11.0");
    Some(python)
}

/// Every RLM method of aragora's SDK, sync and async, in drive_aragora_sdk.py.
const SDK_METHODS: [&str; 19] = [
    "debates.compress",
    "debates.get_context_level",
    "debates.query_rlm",
    "debates.get_refinement_status",
    "rlm.get_codebase_health",
    "rlm.reset_codebase_health",
    "rlm.compress_and_query",
    "rlm.compress",
    "rlm.list_contexts",
    "rlm.query",
    "rlm.get_stats",
    "rlm.list_strategies",
    "rlm.stream",
    "rlm.list_stream_modes",
    "openapi.request_post_api_v1_debates_by_debate_id_query_rlm",
    "openapi.request_post_api_v1_debates_by_debate_id_refinement_status",
    "openapi.request_post_api_v1_knowledge_query_rlm",
    "openapi.request_post_api_v1_metrics_rlm",
    "openapi.request_post_api_v1_rlm_status",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aragoras_own_sdk_works_unmodified() {
    let Some(python) = sdk_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.token = "sdk-token".into();
    let s = Server::start(dir.path(), cfg).await;
    for (r, sp, text) in [
        (
            1,
            "alice",
            "The tram would cost 420 million and open in 2031.",
        ),
        (1, "bob", "I oppose the tram; buses cost a quarter of that."),
        (2, "alice", "The audit confirmed 38,000 daily riders."),
        (2, "bob", "I now support the tram after the audit."),
    ] {
        let turn = json!({"round": r, "speaker": sp, "text": text});
        let (code, v) = s.post("/api/v1/debates/d1/turns", turn).await;
        assert_eq!(code, 201, "{v}");
    }
    let doc = json!({"scope": "kb", "source": "notes/tram.md",
        "text": "# Tram\n\nThe depot will be at Millbrook, next to the river.\n"});
    let (code, v) = s.post("/api/v1/documents", doc).await;
    assert_eq!(code, 201, "{v}");
    s.wait_job(v["job_id"].as_u64().unwrap()).await;

    let script = repo().join("tests/it/drive_aragora_sdk.py");
    let (py, base) = (python.clone(), s.base.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(script)
            .env("STRATA_URL", base)
            .env("STRATA_TOKEN", "sdk-token")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "drive_aragora_sdk.py failed:\n{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    let calls = report["calls"].as_object().unwrap();
    for m in SDK_METHODS {
        // Each method ran with the sync and the async client.
        let n = calls.get(m).and_then(Value::as_u64).unwrap_or(0);
        assert!(n >= 2, "{m} was called {n} time(s): {report}");
    }
    assert_eq!(calls.len(), SDK_METHODS.len(), "{report}");

    // The server's own document validates as OpenAPI 3.1.
    let (code, spec) = s.get("/api/openapi.json").await;
    assert_eq!(code, 200);
    assert_eq!(spec["openapi"], "3.1.0");
    let path = repo().join("target/openapi.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let out = Command::new(&python)
        .args(["-m", "openapi_spec_validator"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator rejects the document: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    s.stop().await;
}
