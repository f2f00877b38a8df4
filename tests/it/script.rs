//! The sandbox (`strata::script`): hostile scripts end in clean, typed, one-line errors
//! within their limits; every function a script can call is a primitive, checked, or
//! reviewed as bounded; primitive calls reach the host and come back; tables are read an
//! item at a time; no script thread outlives its `run`. (The same hostile scripts against
//! the real binary, with its memory read from outside: `security_script`.)

use crate::support::rt;
use expect_test::expect;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use strata::script::{self, Bindings, Call, Growth, Host, Limits, Outcome, ScriptError, Table};

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
        "working",
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

/// Every function a script can call: the primitives, the sandbox's own (checked before
/// they allocate), and packaged ones reviewed as bounded or fixed. A packaged function
/// that can grow data and is not replaced, or one nobody reviewed (a new rhai), fails.
#[test]
fn every_function_a_script_can_call_is_a_primitive_checked_or_reviewed() {
    let fns = script::functions();
    let name = |s: &str| s.split('(').next().unwrap().to_string();
    let primitives: BTreeSet<String> = fns
        .iter()
        .filter(|(_, g)| *g == Growth::Primitive)
        .map(|(s, _)| name(s))
        .collect();
    let want: BTreeSet<String> = script::PRIMITIVES.iter().map(|s| s.to_string()).collect();
    assert_eq!(primitives, want);
    let own: Vec<&str> = fns
        .iter()
        .filter(|(_, g)| *g == Growth::Sandbox)
        .map(|(s, _)| s.as_str())
        .collect();
    expect![[r#"
        all(table, Fn)
        debug(())
        debug()
        debug(Dynamic)
        debug(Fn)
        debug(array)
        debug(bool)
        debug(char)
        debug(f32)
        debug(f64)
        debug(map)
        debug(string)
        debug(table)
        extract(table, i64, i64)
        filter(table, Fn)
        find(table, Fn)
        get$is_empty(table)
        get$len(table)
        get(table, i64)
        index$get$(table, i64)
        is_empty(table)
        len(table)
        map(table, Fn)
        pad(array, i64, Dynamic)
        pad(string, i64, char)
        pad(string, i64, string)
        print(())
        print()
        print(Dynamic)
        print(Fn)
        print(array)
        print(bool)
        print(char)
        print(f32)
        print(f64)
        print(map)
        print(string)
        print(table)
        reduce(table, Fn, Dynamic)
        replace(string, char, char)
        replace(string, char, string)
        replace(string, string, char)
        replace(string, string, string)
        some(table, Fn)
        to_debug(())
        to_debug(Dynamic)
        to_debug(Fn)
        to_debug(array)
        to_debug(bool)
        to_debug(char)
        to_debug(f32)
        to_debug(f64)
        to_debug(map)
        to_debug(string)
        to_debug(table)
        to_json(map)
        to_string(())
        to_string(Dynamic)
        to_string(Fn)
        to_string(array)
        to_string(bool)
        to_string(char)
        to_string(f32)
        to_string(f64)
        to_string(map)
        to_string(string)
        to_string(table)"#]]
    .assert_eq(&own.join("\n"));
    let wrong: Vec<&(String, Growth)> = fns
        .iter()
        .filter(|(_, g)| matches!(g, Growth::Unchecked | Growth::Unreviewed))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
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
    // rhai does not check a map's size when it grows by index assignment; the sandbox
    // checks a variable's whole value when it is read: a map of small entries ends one
    // past the entry limit, one of large keys one past the string limit.
    assert_eq!(
        fails("let m = #{}; let i = 0; loop { m[`k${i}`] = i; i += 1; }"),
        ScriptError::TooLarge("a value holds 10001 map entries (limit 10000)".into())
    );
    let e = fails(
        "let s = \"x\"; for i in 0..17 { s += s; } \
         let m = #{}; let i = 0; loop { m[s + i] = i; i += 1; }",
    );
    assert!(
        matches!(&e, ScriptError::TooLarge(m) if m.contains("bytes of strings (limit 262144)")),
        "{e:?}"
    );
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
    assert_eq!(
        fails("let f = |x| x; f"),
        ScriptError::BadResult("a Fn has no JSON form".into())
    );
    let limits = Limits {
        max_calls: 3,
        ..Limits::default()
    };
    let e = run_with("loop { children(\"n1\"); }", &limits, &mut Fake::default()).unwrap_err();
    assert_eq!(e, ScriptError::TooManyCalls(3));
    let mut bad = Bindings::new();
    bad.insert("not an identifier", json!(1));
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
    shadow.insert("peek", json!(1));
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

/// A script that fails with a size limit, in one line.
fn too_large(source: &str) -> String {
    match fails(source) {
        ScriptError::TooLarge(m) => m,
        e => panic!("{source}: {e:?}"),
    }
}

/// Built-ins whose output is not bounded by their inputs are checked before they
/// allocate; values whose strings are shared are never written out whole. Within the
/// limits, the same functions work as rhai's do.
#[test]
fn growing_built_ins_are_refused_before_they_allocate() {
    const BIG: &str = r#"let s = ""; s.pad(250000, "y");"#;
    let refused = [
        // 5,000 × 250 KB in one `replace`.
        format!(r#"{BIG} let a = ""; a.pad(5000, "a"); a.replace("a", s); a.len()"#),
        format!(r#"{BIG} let a = "aa"; a.replace('a', s); a"#),
        r#"let s = "x"; s.pad(300000, '字'); s"#.to_string(),
        r#"let s = "x"; s.pad(100000, "字字字"); s"#.to_string(),
        // Maps and arrays of one shared string: 12 KB held, gigabytes written out.
        format!("{BIG} let m = #{{}}; for i in 0..10000 {{ m[`k${{i}}`] = s; }} m.to_json().len()"),
        format!("{BIG} let m = #{{}}; for i in 0..400 {{ m[`k${{i}}`] = s; }} m"),
        format!("{BIG} let a = []; a.pad(1000, ()); for i in 0..1000 {{ a[i] = s; }} `${{a}}`"),
        format!(
            "{BIG} let a = [s]; let b = #{{}}; for i in 0..1000 {{ b[`k${{i}}`] = a; }} b.to_json()"
        ),
        // Escaping doubles it: 400 KB of debug text from 200 KB.
        r#"let n = ""; n.pad(200000, "\n"); n.to_debug()"#.to_string(),
        r#"let n = ""; n.pad(200000, "\n"); [n].to_debug()"#.to_string(),
        // JSON escapes a control character in six bytes.
        r#"let n = ""; n.pad(100000, "\x01"); #{n: n}.to_json()"#.to_string(),
        format!("{BIG} let m = #{{a: s}}; m.b = s; m"),
        format!("{BIG} let a = []; a.pad(20, s); a"),
        format!("{BIG} let a = [s]; loop {{ a += a; }}"),
        "let a = [1]; loop { a += a; }".to_string(),
        format!("{BIG} let m = #{{}}; let i = 0; loop {{ m[`k${{i}}`] = s + i; i += 1; }}"),
        format!("{BIG} let f = Fn(\"x\"); for i in 0..20 {{ f = f.curry(s); }} f"),
        format!("{BIG} let t = `${{s}}${{s}}`; t.len()"),
        format!("{BIG} (s + 1) + (s + 2)"),
    ];
    for src in &refused {
        let m = too_large(src);
        assert!(m.len() < 300, "{m}");
    }
    // Within the limits they work as rhai's do.
    let out = run(r#"
        let a = "banana"; a.replace("an", "AN");
        let b = "x"; b.pad(4, '-');
        let c = "x"; c.pad(6, "ab");
        let d = [1]; d.pad(3, 0);
        let e = ""; e.replace("", "-");
        #{ a: a, b: b, c: c, d: d, e: e, json: #{k: [1, "two", 3.5, ()]}.to_json(),
           text: `${[1, "x"]}|${#{k: 1}}`, dbg: "q".to_debug() }
    "#)
    .unwrap();
    assert_eq!(
        out.value,
        json!({"a": "bANANa", "b": "x---", "c": "xababa", "d": [1, 0, 0], "e": "-",
               "json": r#"{"k":[1,"two",3.5,null]}"#, "text": r#"[1, "x"]|#{"k": 1}"#,
               "dbg": "\"q\""})
    );
    // A thrown value too large to show is cut in the message.
    let e = fails(&format!("{BIG} throw s"));
    assert!(
        matches!(&e, ScriptError::Runtime(m) if m.len() < 400),
        "{e:?}"
    );
}

/// Memory the per-value limits do not see (many variables, each within them) is metered
/// on the script's thread: past `max_memory` the script stops at its next operation.
#[test]
fn a_script_that_holds_too_much_memory_is_stopped_and_one_within_reports_its_peak() {
    let mut src = String::from(r#"let s = ""; s.pad(250000, "y");"#);
    for i in 0..120 {
        src.push_str(&format!(" let v{i} = s + {i};"));
    }
    src.push_str(" 1");
    let limits = Limits {
        max_memory: 16 << 20,
        ..Limits::default()
    };
    let e = run_with(&src, &limits, &mut Fake::default()).unwrap_err();
    let ScriptError::TooLarge(m) = &e else {
        panic!("{e:?}")
    };
    assert!(
        m.starts_with("the script held ") && m.ends_with(" MiB of memory (limit 16 MiB)"),
        "{m}"
    );
    let out = run_with(
        "let s = \"x\"; s.pad(100000, \"y\"); s.len()",
        &limits,
        &mut Fake::default(),
    )
    .unwrap();
    assert_eq!(out.value, json!(100000));
    assert!(
        (100_000..16 << 20).contains(&out.memory_peak),
        "{}",
        out.memory_peak
    );
    // A budget larger than the process lends is refused up front.
    let huge = Limits {
        max_memory: script::MAX_TOTAL_MEMORY + 1,
        ..Limits::default()
    };
    let e = run_with("1", &huge, &mut Fake::default()).unwrap_err();
    assert!(matches!(e, ScriptError::Invalid(_)), "{e:?}");
}

#[test]
fn a_result_over_its_size_limit_is_refused_in_one_line() {
    let limits = Limits {
        max_result_bytes: 1000,
        ..Limits::default()
    };
    let e = run_with(
        r#"let s = ""; s.pad(2000, "y"); s"#,
        &limits,
        &mut Fake::default(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the script exceeded a size limit: the script's result is longer than 1000 bytes of JSON"
    );
    let out = run_with(
        r#"let s = ""; s.pad(900, "y"); s.len()"#,
        &limits,
        &mut Fake::default(),
    )
    .unwrap();
    assert_eq!(out.value, json!(900));
}

/// 20,000 items of 600 bytes, read an item at a time.
struct Numbers {
    reads: AtomicUsize,
}

impl Table for Numbers {
    fn len(&self) -> usize {
        20_000
    }
    fn item(&self, i: usize) -> Value {
        self.reads.fetch_add(1, Ordering::SeqCst);
        json!({"n": i, "text": format!("{i:0>600}")})
    }
}

fn with_table(source: &str, limits: &Limits) -> (Result<Outcome, ScriptError>, Arc<Numbers>) {
    let table = Arc::new(Numbers {
        reads: AtomicUsize::new(0),
    });
    let mut b = Bindings::new();
    b.insert_tables(
        "segments",
        vec![("seg-1".into(), table.clone() as Arc<dyn Table>)],
    );
    let r = rt().block_on(script::run(source, &b, limits, &mut Fake::default()));
    drop(b);
    (r, table)
}

/// A table (a segment of 12 MB) is not copied into the script: its length is known at
/// once, items are converted as they are read, and what is built from them is checked
/// as it grows.
#[test]
fn a_table_is_read_an_item_at_a_time() {
    let (r, table) = with_table(
        r#"
        let t = segments["seg-1"];
        let total = 0;
        for item in t { total += item.text.len(); }
        #{ n: t.len(), segments: segments.len(), last: t[-1].n, first: t[0].n, get: t.get(20000),
           some: t.some(|it| it.n == 19999), all: t.all(|it| it.n >= 0),
           found: t.find(|it| it.n == 7).n, every_5000: t.filter(|it| it.n % 5000 == 0).map(|it| it.n),
           sum: t.reduce(|acc, it| acc + it.n, 0), total: total, slice: t.extract(19998, 5).map(|it| it.n),
           text: `${t}` }
        "#,
        &Limits::default(),
    );
    let out = r.unwrap();
    assert_eq!(
        out.value,
        json!({"n": 20000, "segments": 1, "last": 19999, "first": 0, "get": null, "some": true,
               "all": true, "found": 7, "every_5000": [0, 5000, 10000, 15000],
               "sum": 199_990_000, "total": 12_000_000, "slice": [19998, 19999],
               "text": "table of 20000 items"})
    );
    assert!(out.memory_peak < 16 << 20, "{}", out.memory_peak);
    assert!(table.reads.load(Ordering::SeqCst) > 20_000);
    // Out of range, and an array of every text: refused, in one line.
    let (r, _) = with_table(r#"segments["seg-1"][20000]"#, &Limits::default());
    assert!(matches!(r, Err(ScriptError::Runtime(_))), "{r:?}");
    let (r, _) = with_table(r#"segments["seg-1"].map(|it| it.text)"#, &Limits::default());
    assert!(
        matches!(&r, Err(ScriptError::TooLarge(m)) if m.contains("bytes of strings")),
        "{r:?}"
    );
}

/// Whatever ends a script — its result, a limit, the wall time, a dropped future — its
/// thread has ended when `run` returns: it no longer holds the table it was given.
#[test]
fn no_script_thread_outlives_its_run() {
    let forever = r#"let t = segments["seg-1"]; let i = 0; loop { i += t[i % 100].n; }"#;
    let limits = Limits {
        max_operations: u64::MAX,
        wall_time: Duration::from_millis(300),
        ..Limits::default()
    };
    let (r, table) = with_table(forever, &limits);
    assert_eq!(r.unwrap_err(), ScriptError::TimedOut(300));
    assert_eq!(Arc::strong_count(&table), 1);
    let (r, table) = with_table(r#"segments["seg-1"].len()"#, &Limits::default());
    assert_eq!(r.unwrap().value, json!(20000));
    assert_eq!(Arc::strong_count(&table), 1);
    // The caller gives up (a cancelled query): the future is dropped mid-run.
    let table = Arc::new(Numbers {
        reads: AtomicUsize::new(0),
    });
    let mut b = Bindings::new();
    b.insert_tables(
        "segments",
        vec![("seg-1".into(), table.clone() as Arc<dyn Table>)],
    );
    let long = Limits {
        max_operations: u64::MAX,
        wall_time: Duration::from_secs(600),
        ..Limits::default()
    };
    let r = rt().block_on(async {
        tokio::time::timeout(
            Duration::from_millis(200),
            script::run(forever, &b, &long, &mut Fake::default()),
        )
        .await
    });
    assert!(r.is_err());
    drop(b);
    assert_eq!(Arc::strong_count(&table), 1);
}
