//! Hostile scripts against the real `strata mcp`, started under an address-space limit
//! (`prlimit --as`, 2 GiB) with its peak memory read from outside (`VmHWM` in
//! `/proc/PID/status`, before it is stopped): every script is answered with a one-line
//! tool error, the process lives on and answers a normal script afterwards, and its peak
//! stays under [`PEAK_BOUND_MIB`] — four scripts at once included. The navigator's code
//! mode gets the same programs from a scripted mock model (a child process too): each
//! query still answers, from the offline policy, within the same bound.
//!
//! Before the sandbox bounded every operation, the first of these (88 bytes) got the
//! process killed under a 2 GiB limit, and the shared-string maps wrote out 100 MB to
//! 2.5 GB in one call.

use crate::support::*;
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The address space the server may use (what the attacker ran it under).
const AS_LIMIT: u64 = 2 << 30;
/// The most resident memory the server may reach, in MiB: its own (~40 MiB) plus four
/// scripts of 64 MiB each at once (`script::MAX_SCRIPTS` × `Limits::max_memory`), plus
/// what one operation may allocate past its check, with room for the allocator's slack.
const PEAK_BOUND_MIB: u64 = 640;

/// 250 KB of one string.
const BIG: &str = r#"let s = ""; s.pad(250000, "y");"#;

/// The hostile scripts, with a word their error must hold.
fn hostile() -> Vec<(String, &'static str)> {
    vec![
        // 5,000 × 250 KB in one `replace`.
        (
            r#"let s = ""; s.pad(250000, "y"); let a = ""; a.pad(5000, "a"); a.replace("a", s); a.len()"#.into(),
            "size limit",
        ),
        // to_json over a map of 10,000 keys sharing one 250 KB string (2.5 GB written).
        (
            format!("{BIG} let m = #{{}}; for i in 0..10000 {{ m[`k${{i}}`] = s; }} m.to_json().len()"),
            "size limit",
        ),
        // A returned map of 400 such keys (100 MB of JSON).
        (
            format!("{BIG} let m = #{{}}; for i in 0..400 {{ m[`k${{i}}`] = s; }} m"),
            "size limit",
        ),
        ("let s = \"x\"; loop { s += s; }".into(), "size limit"),
        ("let a = [1]; loop { a += a; }".into(), "size limit"),
        (format!("{BIG} let a = [s]; loop {{ a += a; }}"), "size limit"),
        // A map grown by index assignment with big values.
        (
            format!("{BIG} let m = #{{}}; let i = 0; loop {{ m[`k${{i}}`] = s + i; i += 1; }}"),
            "size limit",
        ),
        // Nested arrays of shared strings, written out.
        (
            format!("{BIG} let a = [s]; let b = #{{}}; for i in 0..1000 {{ b[`k${{i}}`] = a; }} b.to_json().len()"),
            "size limit",
        ),
        (
            format!("{BIG} let a = []; a.pad(1000, ()); for i in 0..1000 {{ a[i] = [s]; }} a"),
            "size limit",
        ),
        // Interpolation and to_string of a value of shared strings.
        (
            format!("{BIG} let m = #{{}}; for i in 0..10000 {{ m[`k${{i}}`] = s; }} `${{m}}`.len()"),
            "size limit",
        ),
        (
            r#"let n = ""; n.pad(250000, "\n"); n.to_debug().len()"#.into(),
            "size limit",
        ),
        // A function pointer curried with a shared string, again and again.
        (
            format!("{BIG} let f = Fn(\"x\"); for i in 0..10000 {{ f = f.curry(s); }} f.to_debug()"),
            "size limit",
        ),
        // Memory the value limits do not see: 250 variables of 260 KB each.
        (heavy(), "MiB of memory"),
    ]
}

/// 65 MB in 250 variables, each within the limits.
fn heavy() -> String {
    let mut s = String::from(r#"let s = ""; s.pad(260000, "y");"#);
    for i in 0..250 {
        s.push_str(&format!(" let v{i} = s + {i};"));
    }
    s.push_str(" 1");
    s
}

/// `strata mcp` as a child process (under `prlimit --as` when there is one).
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next: u64,
    /// Responses read while waiting for another.
    early: HashMap<u64, Value>,
}

fn prlimit() -> Option<PathBuf> {
    ["/usr/bin/prlimit", "/bin/prlimit", "/usr/sbin/prlimit"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

impl Server {
    fn start(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let strata = env!("CARGO_BIN_EXE_strata");
        let mut cmd = match prlimit() {
            Some(p) => {
                // prlimit sets the limit and execs strata: the same process id.
                let mut c = Command::new(p);
                c.arg(format!("--as={AS_LIMIT}")).arg("--").arg(strata);
                c
            }
            None => {
                eprintln!(
                    "security_script: no prlimit here; the server runs without a memory limit (its peak is still read and bounded)"
                );
                Command::new(strata)
            }
        };
        let mut child = cmd
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
        let mut s = Server {
            stdin: child.stdin.take(),
            child,
            lines,
            next: 0,
            early: HashMap::new(),
        };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "strata-security", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "strata", "{init}");
        s.notify("notifications/initialized");
        s
    }

    fn write(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str) {
        self.write(&json!({"jsonrpc": "2.0", "method": method}));
    }

    /// Sends a request without waiting; returns its id.
    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The response to request `id` (others read meanwhile are kept).
    fn response(&mut self, id: u64) -> Value {
        if let Some(r) = self.early.remove(&id) {
            return r;
        }
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(300))
                .unwrap_or_else(|e| {
                    let status = self.child.try_wait();
                    panic!("no response to request {id} ({e}); the server: {status:?}")
                });
            let msg: Value = serde_json::from_str(&line).unwrap();
            match msg["id"].as_u64() {
                Some(got) if got == id => return msg,
                Some(got) => {
                    self.early.insert(got, msg);
                }
                None => {}
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.response(id)
    }

    fn tool(&mut self, name: &str, args: Value) -> u64 {
        self.send("tools/call", json!({"name": name, "arguments": args}))
    }

    /// A tool's answer: Ok(structured content) or Err(its one-line error).
    fn answer(&mut self, id: u64) -> Result<Value, String> {
        let r = self.response(id);
        let res = &r["result"];
        let text = res["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        if res["isError"] == json!(true) {
            assert!(!text.contains('\n') && text.len() < 500, "{text:?}");
            Err(text.to_string())
        } else {
            Ok(res["structuredContent"].clone())
        }
    }

    /// The most resident memory the process has had, in MiB.
    fn peak_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kb / 1024
    }

    /// A normal script still runs.
    fn still_answers(&mut self) {
        let id = self.tool("execute_analysis", json!({"script": "40 + 2"}));
        assert_eq!(self.answer(id).unwrap()["value"], json!(42));
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "strata mcp exited with {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn store(dir: &Path) -> PathBuf {
    let db = dir.join("db");
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(&db)
        .args(["ingest", "--scope", "debate"])
        .arg(debate_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    db
}

#[test]
fn hostile_scripts_are_refused_in_one_line_and_the_server_stays_within_its_memory() {
    if !Path::new("/proc/self/status").exists() {
        eprintln!("security_script: no /proc here; the server's peak memory cannot be read");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path());
    let mut mcp = Server::start(&db, &[], &[]);
    let base = mcp.peak_mib();

    for (script, why) in hostile() {
        let id = mcp.tool("execute_analysis", json!({"script": script}));
        let e = mcp.answer(id).expect_err(&script);
        assert!(e.contains(why), "{script}: {e}");
        mcp.still_answers();
    }
    let one_at_a_time = mcp.peak_mib();

    // Eight heavy scripts sent at once: four run, the rest wait for room; each is
    // stopped at its own memory limit.
    let ids: Vec<u64> = (0..8)
        .map(|_| {
            mcp.tool(
                "execute_analysis",
                json!({"script": heavy(), "timeout_ms": 60000}),
            )
        })
        .collect();
    for id in ids {
        let e = mcp.answer(id).unwrap_err();
        assert!(e.contains("MiB of memory (limit 64 MiB)"), "{e}");
    }
    mcp.still_answers();

    // A whole-corpus segment is bound as a table: its length at once, items as read.
    let id = mcp.tool("load_corpus", json!({"scope": "debate", "page_size": 10}));
    let seg = mcp.answer(id).unwrap();
    let id = mcp.tool(
        "execute_analysis",
        json!({"script": r#"
            let t = segments[SEG];
            let chars = 0;
            for it in t { chars += it.text.len(); }
            #{ n: t.len(), segments: segments.len(), chars: chars, last: t[-1].index }
        "#.replace("SEG", &seg["segment"].to_string()), "segments": [seg["segment"]]}),
    );
    let r = mcp.answer(id).unwrap();
    let total = seg["total"].as_u64().unwrap();
    assert_eq!(r["value"]["n"], json!(total), "{r}");
    assert_eq!(r["value"]["segments"], json!(1), "{r}");
    assert_eq!(r["value"]["last"], json!(total - 1), "{r}");
    assert!(r["value"]["chars"].as_u64().unwrap() > 10_000, "{r}");

    let peak = mcp.peak_mib();
    eprintln!(
        "security_script: strata mcp peak memory (VmHWM) {base} MiB at start, {one_at_a_time} MiB after {} hostile scripts one at a time, {peak} MiB after eight heavy ones at once (bound {PEAK_BOUND_MIB} MiB, address space {} MiB)",
        hostile().len(),
        AS_LIMIT >> 20
    );
    assert!(peak < PEAK_BOUND_MIB, "{peak} MiB");
    mcp.finish();
}

/// The mock root model: each code-mode request gets the next program of the queue; the
/// helper's requests get a plain answer.
#[derive(Default)]
struct Programs {
    queue: Mutex<VecDeque<String>>,
    served: Mutex<usize>,
}

async fn chat(
    State(p): State<Arc<Programs>>,
    axum::Json(body): axum::Json<Value>,
) -> axum::Json<Value> {
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    let reply = if system.contains("writing one program") {
        *p.served.lock().unwrap() += 1;
        let next = p.queue.lock().unwrap().pop_front();
        format!(
            "```rhai\n{}\n```",
            next.unwrap_or_else(|| "#{ stop: true }".into())
        )
    } else {
        "not mentioned".to_string()
    };
    axum::Json(json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": "mock",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

#[test]
fn hostile_programs_in_code_mode_fall_back_and_the_server_stays_within_its_memory() {
    if !Path::new("/proc/self/status").exists() {
        eprintln!("security_script: no /proc here; the server's peak memory cannot be read");
        return;
    }
    let rt = rt();
    let programs = Arc::new(Programs::default());
    let url = serve_mock(
        &rt,
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(programs.clone()),
    );
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path());
    let mut mcp = Server::start(
        &db,
        &["--root-model", "openai:mock", "--base-url", &url],
        &[
            ("STRATA_MODEL_API_KEY_ENV", "STRATA_TEST_NO_SUCH_KEY"),
            ("STRATA_MODEL_RETRIES", "0"),
            ("STRATA_QUERY_STRATEGY", "code"),
        ],
    );
    let base = mcp.peak_mib();
    let scripts: Vec<String> = hostile().into_iter().map(|(s, _)| s).collect();
    // Two failed programs end the loop: the offline policy answers.
    for pair in scripts.chunks(2) {
        let before = *programs.served.lock().unwrap();
        programs.queue.lock().unwrap().extend(pair.iter().cloned());
        if pair.len() == 1 {
            programs.queue.lock().unwrap().push_back(pair[0].clone());
        }
        let id = mcp.tool(
            "query",
            json!({"question": "How long is the Harbour Line?", "scopes": ["debate"]}),
        );
        let q = mcp.answer(id).unwrap();
        assert!(!q["answer"].as_str().unwrap().is_empty(), "{q}");
        assert_eq!(q["usage"]["fallbacks"], json!(1), "{q}");
        let failed: Vec<&str> = q["trajectory"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["action"] == "program")
            .map(|s| s["detail"].as_str().unwrap())
            .collect();
        // Each failed: most at a limit; under code mode's larger string limit (1 MiB) a
        // few run to their end and return what is not a program's map.
        assert_eq!(failed.len(), 2, "{q}");
        for f in failed {
            assert!(f.starts_with("failed: "), "{f}");
        }
        assert_eq!(*programs.served.lock().unwrap(), before + 2);
    }
    let peak = mcp.peak_mib();
    eprintln!(
        "security_script: code mode, strata mcp peak memory (VmHWM) {base} MiB at start, {peak} MiB after {} hostile programs (bound {PEAK_BOUND_MIB} MiB)",
        scripts.len()
    );
    assert!(peak < PEAK_BOUND_MIB, "{peak} MiB");
    mcp.still_answers();
    mcp.finish();
}
