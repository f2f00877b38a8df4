//! The sandbox (`strata::script`): hostile scripts end in clean, typed, one-line errors
//! within their limits; the engine offers exactly the primitives; primitive calls reach
//! the host and come back.

use crate::support::rt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use strata::script::{self, Bindings, Call, Host, Limits, Outcome, ScriptError};

/// A host with a few nodes; `search` is down and `llm_query` can hang.
#[derive(Default)]
struct Fake {
    calls: Vec<Call>,
    hang: bool,
    /// Hanging calls dropped unanswered.
    dropped: Arc<AtomicUsize>,
}

struct OnDrop(Arc<AtomicUsize>);
impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Host for Fake {
    fn call(&mut self, call: Call) -> BoxFuture<'_, Result<Value, String>> {
        self.calls.push(call.clone());
        let hang = self.hang;
        let dropped = self.dropped.clone();
        Box::pin(async move {
            match call {
                Call::Grep {
                    pattern,
                    level,
                    limit,
                } => Ok(json!([
                    {"id": "n2", "score": 1.5, "pattern": pattern, "level": level, "limit": limit}
                ])),
                Call::Peek { id } if id == "n2" => Ok(
                    json!({"id": "n2", "level": "full", "text": "In Eastgate 41% of households do not own a car."}),
                ),
                Call::Peek { id } => Err(format!("unknown id {id:?}")),
                Call::Children { id } => Ok(json!([format!("{id}.1"), format!("{id}.2")])),
                Call::Search { .. } => Err("the index is\nbeing rebuilt".into()),
                Call::LlmQuery { .. } if hang => {
                    let _guard = OnDrop(dropped);
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                Call::LlmQuery { prompt } => Ok(json!(format!("echo {prompt}"))),
                Call::LlmBatch { prompts } => Ok(json!(
                    prompts
                        .iter()
                        .map(|p| format!("echo {p}"))
                        .collect::<Vec<_>>()
                )),
            }
        })
    }
}

fn run_with(source: &str, limits: &Limits, host: &mut Fake) -> Result<Outcome, ScriptError> {
    let mut b = Bindings::new();
    b.insert(
        "working".into(),
        json!([{"id": "n1", "text": "The ferry costs four euros."},
               {"id": "n2", "text": "In Eastgate 41% of households do not own a car."}]),
    );
    rt().block_on(script::run(source, &b, limits, host))
}

fn run(source: &str) -> Result<Outcome, ScriptError> {
    run_with(source, &Limits::default(), &mut Fake::default())
}

/// The script fails, with a one-line message.
fn fails(source: &str) -> ScriptError {
    let e = run(source).expect_err(source);
    let msg = e.to_string();
    assert!(!msg.contains('\n') && msg.len() < 400, "{msg:?}");
    e
}

#[test]
fn the_sandbox_registers_exactly_the_primitives() {
    let names: BTreeSet<String> = script::signatures()
        .iter()
        .map(|s| s.split('(').next().unwrap().to_string())
        .collect();
    let want: BTreeSet<String> = script::PRIMITIVES.iter().map(|s| s.to_string()).collect();
    assert_eq!(names, want, "{:#?}", script::signatures());
    // Whatever the basic packages hold, none of it reaches outside.
    for name in [
        "open",
        "read_file",
        "write",
        "exec",
        "system",
        "command",
        "sleep",
        "http_get",
        "fetch",
        "connect",
        "socket",
        "env",
        "timestamp",
        "parse_json",
        "exit",
    ] {
        let src = format!("{name}(\"x\")");
        match fails(&src) {
            ScriptError::UnknownFunction(f) => assert!(f.starts_with(name), "{f}"),
            e => panic!("{src}: {e:?}"),
        }
    }
}

#[test]
fn eval_import_and_printing_do_not_parse() {
    for (src, sym) in [
        ("eval(\"1 + 1\")", "eval"),
        ("import \"std\" as s; 1", "import"),
        ("print(\"hello\")", "print"),
        ("debug(42)", "debug"),
    ] {
        assert_eq!(fails(src), ScriptError::Forbidden(sym.into()), "{src}");
    }
    // A function pointer to a name that is not offered fails when called.
    assert!(matches!(
        fails("let f = Fn(\"open\"); f.call(\"/etc/passwd\")"),
        ScriptError::UnknownFunction(_)
    ));
    assert!(matches!(
        fails("spawn(\"ls\")"),
        ScriptError::Parse(_) | ScriptError::UnknownFunction(_)
    ));
}

#[test]
fn an_infinite_loop_ends_at_the_operation_limit() {
    let limits = Limits {
        max_operations: 10_000,
        ..Limits::default()
    };
    let e = run_with("loop { }", &limits, &mut Fake::default()).unwrap_err();
    assert_eq!(e, ScriptError::TooManyOperations(10_000));
    assert_eq!(
        e.to_string(),
        "the script exceeded its limit of 10000 operations"
    );
}

#[test]
fn a_loop_the_operation_limit_allows_ends_at_the_wall_time_limit() {
    let limits = Limits {
        max_operations: u64::MAX,
        wall_time: Duration::from_millis(200),
        ..Limits::default()
    };
    let t = Instant::now();
    let e = run_with("let x = 0; loop { x += 1; }", &limits, &mut Fake::default()).unwrap_err();
    assert_eq!(e, ScriptError::TimedOut(200));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // A primitive call that never answers is cut off at the same limit.
    let t = Instant::now();
    let mut host = Fake {
        hang: true,
        ..Fake::default()
    };
    let e = run_with("llm_query(\"hello\")", &limits, &mut host).unwrap_err();
    assert_eq!(e, ScriptError::TimedOut(200));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn deep_recursion_and_nesting_end_at_their_limits() {
    assert_eq!(
        fails("fn down(n) { down(n + 1) } down(0)"),
        ScriptError::TooDeep("more than 32 nested function calls".into())
    );
    let nested = format!("{}1{}", "(".repeat(500), ")".repeat(500));
    assert!(matches!(fails(&nested), ScriptError::TooDeep(_)));
}

#[test]
fn huge_strings_arrays_and_maps_end_at_their_limits() {
    for src in [
        "let s = \"x\"; loop { s += s; }",
        "let s = \"x\"; s.pad(100000000, \"y\"); s",
        "let a = []; loop { a.push(1); }",
        "let a = []; a.pad(100000000, 0); a",
        "let a = [\"x\"]; let s = \"0123456789\"; for i in 0..16 { s += s; } loop { a.push(s); }",
        "let m = #{}; let i = 0; loop { let n = #{}; n[`k${i}`] = i; m.mixin(n); i += 1; }",
    ] {
        let e = fails(src);
        assert!(matches!(e, ScriptError::TooLarge(_)), "{src}: {e:?}");
    }
    // rhai does not check a map's size when it grows by index assignment: small keys end
    // at the operation limit...
    assert_eq!(
        fails("let m = #{}; let i = 0; loop { m[`k${i}`] = i; i += 1; }"),
        ScriptError::TooManyOperations(1_000_000)
    );
    // ...and large ones, which would fill memory long before it, at the memory limit.
    if std::path::Path::new("/proc/self/statm").exists() {
        let limits = Limits {
            max_memory_growth: 64 << 20,
            ..Limits::default()
        };
        let src = "let s = \"x\"; for i in 0..17 { s += s; } \
                   let m = #{}; let i = 0; loop { m[s + i] = i; i += 1; }";
        let e = run_with(src, &limits, &mut Fake::default()).unwrap_err();
        assert!(
            matches!(&e, ScriptError::TooLarge(m) if m.contains("grew by")),
            "{e:?}"
        );
        assert!(e.to_string().ends_with("(limit 64 MiB)"), "{e}");
    }
    let vars: String = (0..300).map(|i| format!("let v{i} = {i}; ")).collect();
    assert!(matches!(fails(&vars), ScriptError::TooLarge(_)));
    // The source itself is bounded.
    let long = "1;".repeat(40_000);
    assert!(matches!(fails(&long), ScriptError::Invalid(_)));
}

#[test]
fn primitive_calls_reach_the_host_and_come_back() {
    let mut host = Fake::default();
    let out = run_with(
        r#"
        let hits = grep("Eastgate car", "full", 3);
        let node = peek(hits[0].id);
        let kids = children("n1");
        let one = llm_query("a");
        let many = llm_batch(["b", "c"]);
        let lost = "";
        try { search("cars"); } catch (e) { lost = e.error; }
        #{ text: node.text, kids: kids, one: one, many: many, lost: lost,
           found: working.filter(|w| w.text.contains("41%")).map(|w| w.id) }
        "#,
        &Limits::default(),
        &mut host,
    )
    .unwrap();
    assert_eq!(
        out.value,
        json!({
            "text": "In Eastgate 41% of households do not own a car.",
            "kids": ["n1.1", "n1.2"], "one": "echo a", "many": ["echo b", "echo c"],
            "lost": "the index is being rebuilt", "found": ["n2"]
        })
    );
    assert_eq!(out.final_answer, None);
    // llm_batch counts once per prompt.
    assert_eq!(out.calls, 7);
    assert!(out.operations > 0);
    assert_eq!(
        host.calls[0],
        Call::Grep {
            pattern: "Eastgate car".into(),
            level: Some("full".into()),
            limit: 3
        }
    );
    assert_eq!(
        host.calls[4],
        Call::LlmBatch {
            prompts: vec!["b".into(), "c".into()]
        }
    );
}

#[test]
fn final_ends_the_script_with_its_answer() {
    let out = run(r#"final("41% have no car", ["n2"]); loop { }"#).unwrap();
    let f = out.final_answer.unwrap();
    assert_eq!(
        (f.answer.as_str(), f.ids),
        ("41% have no car", vec!["n2".to_string()])
    );
    assert_eq!(out.value, Value::Null);
    // final inside try/catch still ends the script.
    let out = run(r#"try { final("a", []) } catch { 1 }; 2"#).unwrap();
    assert!(out.final_answer.is_some());
    assert!(
        matches!(fails("final(\"a\", [1])"), ScriptError::Runtime(m) if m.contains("element 0"))
    );
}

#[test]
fn failures_of_the_host_and_the_script_are_typed() {
    assert_eq!(
        fails("peek(\"n9\")"),
        ScriptError::Primitive {
            name: "peek".into(),
            message: "unknown id \"n9\"".into()
        }
    );
    assert!(matches!(fails("throw \"no\""), ScriptError::Runtime(_)));
    assert!(matches!(fails("1 +"), ScriptError::Parse(_)));
    assert!(matches!(fails("working.push(1)"), ScriptError::Runtime(_)));
    assert!(matches!(
        fails("let f = |x| x; f"),
        ScriptError::BadResult(_)
    ));
    let limits = Limits {
        max_calls: 3,
        ..Limits::default()
    };
    let e = run_with("loop { children(\"n1\"); }", &limits, &mut Fake::default()).unwrap_err();
    assert_eq!(e, ScriptError::TooManyCalls(3));
    let mut bad = Bindings::new();
    bad.insert("not an identifier".into(), json!(1));
    let e = rt()
        .block_on(script::run(
            "1",
            &bad,
            &Limits::default(),
            &mut Fake::default(),
        ))
        .unwrap_err();
    assert!(matches!(e, ScriptError::Invalid(_)), "{e}");
    let mut shadow = Bindings::new();
    shadow.insert("peek".into(), json!(1));
    let e = rt()
        .block_on(script::run(
            "1",
            &shadow,
            &Limits::default(),
            &mut Fake::default(),
        ))
        .unwrap_err();
    assert!(matches!(e, ScriptError::Invalid(_)), "{e}");
}

#[test]
fn dropping_the_run_drops_its_outstanding_call() {
    let rt = rt();
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut host = Fake {
        hang: true,
        dropped: dropped.clone(),
        ..Fake::default()
    };
    let b = Bindings::new();
    let limits = Limits {
        wall_time: Duration::from_secs(600),
        ..Limits::default()
    };
    // The caller gives up after 100 ms (a cancelled query): the hanging model call goes
    // with it, and the script thread is told to stop.
    let r = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(100),
            script::run("llm_query(\"a\")", &b, &limits, &mut host),
        )
        .await
    });
    assert!(r.is_err());
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    assert_eq!(host.calls.len(), 1);
}
