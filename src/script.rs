//! The sandbox: runs a [Rhai](https://rhai.rs) script that can reach nothing but the
//! engine's primitives.
//!
//! Python RLM implementations run the root model's code with `exec`, which can reach
//! `__import__` and `open`. Here there is nothing to escape from: the engine is built raw
//! (`Engine::new_raw`), with only the basic packages for arithmetic, logic, strings,
//! arrays, maps, iteration and maths, no module resolver, and `eval`, `import`, `print` and
//! `debug` disabled as symbols. The only other functions a script sees are [`PRIMITIVES`]:
//!
//! | function | what it does (answered by the caller's [`Host`]) |
//! |---|---|
//! | `grep(pattern)`, `grep(pattern, level)`, `grep(pattern, level, limit)` | search at a level |
//! | `peek(id)` | one node (or item) with its text |
//! | `children(id)` | the nodes one level below |
//! | `search(query)`, `search(query, limit)` | ranked retrieval |
//! | `llm_query(prompt)` | one sub-model call: its text |
//! | `llm_batch(prompts)` | many sub-model calls, run concurrently: their texts in order |
//! | `final(answer, ids)` | ends the script with an answer and the ids it rests on |
//!
//! Every limit breach — operations, call depth, expression nesting, string, array and map
//! sizes, variables, primitive calls, wall time — ends the script with a typed
//! [`ScriptError`] whose message is one line. Nothing of the script runs on the async
//! executor: it runs on its own thread, and each primitive call is sent to the caller,
//! which answers it on its own task ([`run`]), so the host may hold borrowed, non-`'static`
//! state (the navigator's explorer) and make async model calls. Dropping the future
//! returned by [`run`] cancels the script at its next operation.
//!
//! ```no_run
//! # async fn demo() -> Result<(), strata::script::ScriptError> {
//! use serde_json::{Value, json};
//! use strata::script::{self, Bindings, BoxFuture, Call, Host, Limits};
//!
//! struct Items;
//! impl Host for Items {
//!     fn call(&mut self, call: Call) -> BoxFuture<'_, Result<Value, String>> {
//!         Box::pin(async move {
//!             match call {
//!                 Call::Peek { id } => Ok(json!({"id": id, "text": "..."})),
//!                 other => Err(format!("{} is not offered here", other.name())),
//!             }
//!         })
//!     }
//! }
//!
//! let mut bindings = Bindings::new();
//! bindings.insert("items".into(), json!([{"id": "a", "text": "41% have no car"}]));
//! let out = script::run(
//!     r#"items.filter(|i| i.text.contains("car")).map(|i| i.id)"#,
//!     &bindings,
//!     &Limits::default(),
//!     &mut Items,
//! )
//! .await?;
//! assert_eq!(out.value, json!(["a"]));
//! # Ok(()) }
//! ```

pub use futures::future::BoxFuture;
use rhai::packages::{
    ArithmeticPackage, BasicArrayPackage, BasicIteratorPackage, BasicMapPackage, BasicMathPackage,
    BasicStringPackage, LogicPackage, MoreStringPackage, Package,
};
use rhai::{Array, Dynamic, Engine, EvalAltResult, INT, ParseErrorType, Position, Scope};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The functions a script can call beyond the basic packages — and nothing else.
pub const PRIMITIVES: [&str; 7] = [
    "grep",
    "peek",
    "children",
    "search",
    "llm_query",
    "llm_batch",
    "final",
];

/// Symbols disabled in the language: they do not parse.
const DISABLED: [&str; 5] = ["eval", "import", "export", "print", "debug"];

/// Results a `grep` or `search` asks for when the script does not say.
const DEFAULT_HITS: usize = 10;
/// The most results one `grep` or `search` may ask for.
const MAX_HITS: usize = 200;
/// The script thread's stack: the call-depth limit is reached long before it is used up.
const STACK_BYTES: usize = 32 << 20;
/// How long after the wall-time limit the caller stops waiting for a script thread that
/// has not noticed it (a single long built-in operation).
const GRACE: Duration = Duration::from_secs(2);
/// The value a script is terminated with (the reason is kept beside it).
const TERMINATE: &str = "strata-sandbox-terminated";

/// What one script may use. [`Limits::default`] suits a navigator iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Rhai operations (roughly: expression nodes, loop iterations, calls).
    pub max_operations: u64,
    /// Nested function calls.
    pub max_call_levels: usize,
    /// Nesting of expressions (and of expressions inside functions).
    pub max_expr_depth: usize,
    /// Bytes of one string, and of all strings inside one array or map.
    pub max_string_bytes: usize,
    /// Elements of one array (nested arrays included).
    pub max_array_len: usize,
    /// Entries of one map (nested maps included).
    pub max_map_len: usize,
    /// Variables alive at once (bounds memory together with the sizes above).
    pub max_variables: usize,
    /// Primitive calls (`llm_batch` counts once per prompt).
    pub max_calls: u32,
    /// Bytes of the script's source.
    pub max_source_bytes: usize,
    /// Wall time from start to result, primitive calls included.
    pub wall_time: Duration,
    /// Bytes the process's resident memory may grow by while the script runs (0: no
    /// check; Linux only, read from /proc every ~2 ms of running). The other limits bound
    /// each value; this bounds what they cannot see, such as a map grown key by key by
    /// index assignment, which rhai does not size-check.
    pub max_memory_growth: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_operations: 1_000_000,
            max_call_levels: 32,
            max_expr_depth: 64,
            max_string_bytes: 256 << 10,
            max_array_len: 10_000,
            max_map_len: 10_000,
            max_variables: 256,
            max_calls: 200,
            max_source_bytes: 64 << 10,
            wall_time: Duration::from_secs(10),
            max_memory_growth: 512 << 20,
        }
    }
}

/// Values the script sees as constants, by name (e.g. `working`, `segments`, `items`).
/// Names must be identifiers and must not shadow a primitive.
pub type Bindings = serde_json::Map<String, Value>;

/// A primitive call, sent to the caller's [`Host`].
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    Grep {
        pattern: String,
        /// `full`, `detailed`, `summary`, `abstract`, `metadata`; `None` = the host's choice.
        level: Option<String>,
        limit: usize,
    },
    Peek {
        id: String,
    },
    Children {
        id: String,
    },
    Search {
        query: String,
        limit: usize,
    },
    LlmQuery {
        prompt: String,
    },
    /// Run concurrently by the host (under the engine's shared limiter); the answer is an
    /// array of the same length, in order.
    LlmBatch {
        prompts: Vec<String>,
    },
}

impl Call {
    /// The primitive's name, as the script calls it.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Grep { .. } => "grep",
            Call::Peek { .. } => "peek",
            Call::Children { .. } => "children",
            Call::Search { .. } => "search",
            Call::LlmQuery { .. } => "llm_query",
            Call::LlmBatch { .. } => "llm_batch",
        }
    }
}

/// What answers a script's primitive calls. An `Err` is a one-line message the script can
/// `catch` (as a map `#{primitive, error}`); uncaught, it ends the script as
/// [`ScriptError::Primitive`]. The host enforces its own budgets (sub-calls, tokens).
pub trait Host: Send {
    fn call(&mut self, call: Call) -> BoxFuture<'_, Result<Value, String>>;
}

/// What a script passed to `final(answer, ids)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Final {
    pub answer: String,
    pub ids: Vec<String>,
}

/// A script that ran to its end.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What the script evaluated to (its last expression, or `return`), as JSON; `null`
    /// when it ended with `final`.
    pub value: Value,
    /// The `final(answer, ids)` call that ended it, if any.
    pub final_answer: Option<Final>,
    /// Operations it used.
    pub operations: u64,
    /// Primitive calls it made.
    pub calls: u32,
    pub elapsed_ms: u64,
}

/// Why a script did not run to its end. Every message is one line.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScriptError {
    /// The caller's input is not a script this sandbox takes (too long, a bad binding).
    #[error("invalid script input: {0}")]
    Invalid(String),
    #[error("the script does not parse: {0}")]
    Parse(String),
    /// A disabled symbol: `eval`, `import`, `export`, `print`, `debug`.
    #[error("the script uses `{0}`, which the sandbox does not offer")]
    Forbidden(String),
    #[error("the script called `{0}`, which does not exist in the sandbox")]
    UnknownFunction(String),
    #[error("the script exceeded its limit of {0} operations")]
    TooManyOperations(u64),
    #[error("the script exceeded its nesting limit: {0}")]
    TooDeep(String),
    #[error("the script exceeded a size limit: {0}")]
    TooLarge(String),
    #[error("the script exceeded its limit of {0} primitive calls")]
    TooManyCalls(u32),
    #[error("the script exceeded its wall-time limit of {0} ms")]
    TimedOut(u64),
    #[error("the script's `{name}` failed: {message}")]
    Primitive { name: String, message: String },
    #[error("the script failed: {0}")]
    Runtime(String),
    #[error("the script's result is not JSON: {0}")]
    BadResult(String),
    #[error("the script was cancelled")]
    Cancelled,
}

/// The signatures of the functions registered beyond the basic packages: exactly the
/// [`PRIMITIVES`] (what a prompt can show a model, and what the tests hold it to).
pub fn signatures() -> Vec<String> {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let bridge = Bridge::new(tx, &Limits::default(), Instant::now(), Arc::default());
    let mut s = engine(&Limits::default(), Arc::new(bridge)).gen_fn_signatures(false);
    s.sort();
    s
}

/// Runs `source` with `bindings` as constants, within `limits`, its primitive calls
/// answered by `host`. See the module documentation.
pub async fn run<H: Host>(
    source: &str,
    bindings: &Bindings,
    limits: &Limits,
    host: &mut H,
) -> Result<Outcome, ScriptError> {
    if source.len() > limits.max_source_bytes {
        return Err(ScriptError::Invalid(format!(
            "the script has {} bytes, more than the limit of {}",
            source.len(),
            limits.max_source_bytes
        )));
    }
    for name in bindings.keys() {
        check_binding(name)?;
    }
    let started = Instant::now();
    let deadline = started + limits.wall_time;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let _cancel_on_drop = CancelOnDrop(cancel.clone());
    let job = Job {
        source: source.to_string(),
        bindings: bindings.clone(),
        limits: limits.clone(),
        bridge: Bridge::new(tx.clone(), limits, deadline, cancel.clone()),
    };
    std::thread::Builder::new()
        .name("strata-script".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let r = job.run();
            let _ = tx.send(Msg::Done(Box::new(r)));
        })
        .map_err(|e| ScriptError::Runtime(format!("cannot start the script thread: {e}")))?;
    let hard_stop = tokio::time::Instant::from_std(deadline + GRACE);
    let wall_ms = limits.wall_time.as_millis() as u64;
    loop {
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = tokio::time::sleep_until(hard_stop) => {
                cancel.store(true, Ordering::SeqCst);
                return Err(ScriptError::TimedOut(wall_ms));
            }
        };
        match msg {
            Some(Msg::Call(call, reply)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let answer = match tokio::time::timeout(left, host.call(call)).await {
                    Ok(a) => a,
                    Err(_) => Err("the wall-time limit ran out".into()),
                };
                // The script may have given up waiting (its own deadline): nothing to do.
                let _ = reply.send(answer);
            }
            Some(Msg::Done(r)) => {
                return (*r).map(|mut o| {
                    o.elapsed_ms = started.elapsed().as_millis() as u64;
                    o
                });
            }
            None => {
                return Err(ScriptError::Runtime(
                    "the script thread stopped without a result".into(),
                ));
            }
        }
    }
}

fn check_binding(name: &str) -> Result<(), ScriptError> {
    let mut chars = name.chars();
    let ident = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident || name.len() > 64 {
        return Err(ScriptError::Invalid(format!(
            "binding {:?} is not an identifier",
            one_line(name)
        )));
    }
    if PRIMITIVES.contains(&name) {
        return Err(ScriptError::Invalid(format!(
            "binding `{name}` would shadow a primitive"
        )));
    }
    Ok(())
}

/// A message from the script thread.
enum Msg {
    Call(Call, std::sync::mpsc::Sender<Result<Value, String>>),
    Done(Box<Result<Outcome, ScriptError>>),
}

struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The script thread's side: sends primitive calls, keeps what ended the script.
struct Bridge {
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
    deadline: Instant,
    wall_ms: u64,
    cancel: Arc<AtomicBool>,
    calls: AtomicU32,
    max_calls: u32,
    operations: AtomicU64,
    /// Set by `final`.
    final_answer: Mutex<Option<Final>>,
    /// Why the script was terminated (a limit the engine does not know, or cancellation).
    stopped: Mutex<Option<ScriptError>>,
    /// The memory check: the limit, the resident bytes at the start, the last check.
    memory: Option<(u64, u64, Mutex<Instant>)>,
}

/// This process's resident memory in bytes (None where /proc is not there). Pages are
/// taken as 4 KiB (on larger pages the figure reads low).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

type Answer = Result<Dynamic, Box<EvalAltResult>>;

impl Bridge {
    fn new(
        tx: tokio::sync::mpsc::UnboundedSender<Msg>,
        limits: &Limits,
        deadline: Instant,
        cancel: Arc<AtomicBool>,
    ) -> Bridge {
        Bridge {
            tx,
            deadline,
            wall_ms: limits.wall_time.as_millis() as u64,
            cancel,
            calls: AtomicU32::new(0),
            max_calls: limits.max_calls,
            operations: AtomicU64::new(0),
            final_answer: Mutex::new(None),
            stopped: Mutex::new(None),
            memory: (limits.max_memory_growth > 0)
                .then(resident_bytes)
                .flatten()
                .map(|start| (limits.max_memory_growth, start, Mutex::new(Instant::now()))),
        }
    }

    /// True when the process has grown past the memory limit since the script began
    /// (checked at most every 2 ms; then the script is stopped with why).
    fn out_of_memory(&self, now: Instant) -> bool {
        let Some((limit, start, last)) = &self.memory else {
            return false;
        };
        {
            let mut last = last.lock().expect("poisoned");
            if now.duration_since(*last) < Duration::from_millis(2) {
                return false;
            }
            *last = now;
        }
        let Some(grown) = resident_bytes().map(|b| b.saturating_sub(*start)) else {
            return false;
        };
        if grown <= *limit {
            return false;
        }
        self.stopped
            .lock()
            .expect("poisoned")
            .get_or_insert(ScriptError::TooLarge(format!(
                "the process grew by {} MiB while the script ran (limit {} MiB)",
                grown >> 20,
                limit >> 20
            )));
        true
    }

    /// Ends the script (not catchable by it) because of `why`.
    fn stop(&self, why: ScriptError) -> Answer {
        self.stopped.lock().expect("poisoned").get_or_insert(why);
        Err(terminated())
    }

    fn call(&self, call: Call, weight: u32) -> Answer {
        let name = call.name();
        let made = self.calls.fetch_add(weight, Ordering::SeqCst) + weight;
        if made > self.max_calls {
            return self.stop(ScriptError::TooManyCalls(self.max_calls));
        }
        let (reply, answer) = std::sync::mpsc::channel();
        if self.tx.send(Msg::Call(call, reply)).is_err() {
            return self.stop(ScriptError::Cancelled);
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        match answer.recv_timeout(left) {
            Ok(Ok(v)) => rhai::serde::to_dynamic(&v),
            Ok(Err(message)) => {
                if self.cancel.load(Ordering::SeqCst) {
                    return self.stop(ScriptError::Cancelled);
                }
                if Instant::now() >= self.deadline {
                    return self.stop(ScriptError::TimedOut(self.wall_ms));
                }
                let mut m = rhai::Map::new();
                m.insert("primitive".into(), name.into());
                m.insert("error".into(), one_line(&message).into());
                Err(Box::new(EvalAltResult::ErrorRuntime(
                    m.into(),
                    Position::NONE,
                )))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                self.stop(ScriptError::TimedOut(self.wall_ms))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                self.stop(ScriptError::Cancelled)
            }
        }
    }
}

fn terminated() -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorTerminated(
        TERMINATE.into(),
        Position::NONE,
    ))
}

fn hits(limit: INT) -> usize {
    limit.clamp(1, MAX_HITS as INT) as usize
}

fn strings(what: &str, a: Array) -> Result<Vec<String>, Box<EvalAltResult>> {
    a.into_iter()
        .enumerate()
        .map(|(i, v)| {
            v.into_immutable_string()
                .map(|s| s.to_string())
                .map_err(|t| {
                    Box::new(EvalAltResult::ErrorRuntime(
                        format!("{what}: element {i} is a {t}, not a string").into(),
                        Position::NONE,
                    ))
                })
        })
        .collect()
}

/// The sandboxed engine: raw, the basic packages, the primitives, the limits.
fn engine(limits: &Limits, bridge: Arc<Bridge>) -> Engine {
    let mut e = Engine::new_raw();
    for module in [
        ArithmeticPackage::new().as_shared_module(),
        LogicPackage::new().as_shared_module(),
        BasicStringPackage::new().as_shared_module(),
        MoreStringPackage::new().as_shared_module(),
        BasicArrayPackage::new().as_shared_module(),
        BasicMapPackage::new().as_shared_module(),
        BasicIteratorPackage::new().as_shared_module(),
        BasicMathPackage::new().as_shared_module(),
    ] {
        e.register_global_module(module);
    }
    e.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    for s in DISABLED {
        e.disable_symbol(s);
    }
    e.set_max_operations(limits.max_operations.max(1));
    e.set_max_call_levels(limits.max_call_levels);
    e.set_max_expr_depths(limits.max_expr_depth, limits.max_expr_depth);
    e.set_max_string_size(limits.max_string_bytes.max(1));
    e.set_max_array_size(limits.max_array_len.max(1));
    e.set_max_map_size(limits.max_map_len.max(1));
    e.set_max_variables(limits.max_variables.max(1));
    e.set_max_functions(64);
    e.set_max_strings_interned(1024);
    let b = bridge.clone();
    e.on_progress(move |ops| {
        b.operations.store(ops, Ordering::Relaxed);
        if b.cancel.load(Ordering::Relaxed) {
            b.stopped
                .lock()
                .expect("poisoned")
                .get_or_insert(ScriptError::Cancelled);
            return Some(TERMINATE.into());
        }
        if ops % 16 == 0 {
            let now = Instant::now();
            if now >= b.deadline {
                b.stopped
                    .lock()
                    .expect("poisoned")
                    .get_or_insert(ScriptError::TimedOut(b.wall_ms));
                return Some(TERMINATE.into());
            }
            if b.out_of_memory(now) {
                return Some(TERMINATE.into());
            }
        }
        None
    });

    let b = bridge.clone();
    e.register_fn("grep", move |pattern: &str| {
        b.call(
            Call::Grep {
                pattern: pattern.into(),
                level: None,
                limit: DEFAULT_HITS,
            },
            1,
        )
    });
    let b = bridge.clone();
    e.register_fn("grep", move |pattern: &str, level: &str| {
        b.call(
            Call::Grep {
                pattern: pattern.into(),
                level: Some(level.into()),
                limit: DEFAULT_HITS,
            },
            1,
        )
    });
    let b = bridge.clone();
    e.register_fn("grep", move |pattern: &str, level: &str, limit: INT| {
        b.call(
            Call::Grep {
                pattern: pattern.into(),
                level: Some(level.into()),
                limit: hits(limit),
            },
            1,
        )
    });
    let b = bridge.clone();
    e.register_fn("peek", move |id: &str| {
        b.call(Call::Peek { id: id.into() }, 1)
    });
    let b = bridge.clone();
    e.register_fn("children", move |id: &str| {
        b.call(Call::Children { id: id.into() }, 1)
    });
    let b = bridge.clone();
    e.register_fn("search", move |query: &str| {
        b.call(
            Call::Search {
                query: query.into(),
                limit: DEFAULT_HITS,
            },
            1,
        )
    });
    let b = bridge.clone();
    e.register_fn("search", move |query: &str, limit: INT| {
        b.call(
            Call::Search {
                query: query.into(),
                limit: hits(limit),
            },
            1,
        )
    });
    let b = bridge.clone();
    e.register_fn("llm_query", move |prompt: &str| {
        b.call(
            Call::LlmQuery {
                prompt: prompt.into(),
            },
            1,
        )
    });
    let b = bridge.clone();
    e.register_fn("llm_batch", move |prompts: Array| {
        let prompts = strings("llm_batch", prompts)?;
        if prompts.is_empty() {
            return Ok(Dynamic::from_array(Array::new()));
        }
        let n = prompts.len() as u32;
        b.call(Call::LlmBatch { prompts }, n)
    });
    let b = bridge;
    e.register_fn("final", move |answer: &str, ids: Array| -> Answer {
        let ids = strings("final", ids)?;
        *b.final_answer.lock().expect("poisoned") = Some(Final {
            answer: answer.to_string(),
            ids,
        });
        Err(terminated())
    });
    e
}

/// What the script thread runs.
struct Job {
    source: String,
    bindings: Bindings,
    limits: Limits,
    bridge: Bridge,
}

impl Job {
    fn run(self) -> Result<Outcome, ScriptError> {
        let Job {
            source,
            bindings,
            limits,
            bridge,
        } = self;
        let bridge = Arc::new(bridge);
        let engine = engine(&limits, bridge.clone());
        let ast = engine
            .compile(&source)
            .map_err(|e| parse_error(*e.0, e.1, &limits))?;
        let mut scope = Scope::new();
        for (name, v) in bindings {
            let v = rhai::serde::to_dynamic(&v).map_err(|e| {
                ScriptError::Invalid(format!("binding `{name}`: {}", one_line(&e.to_string())))
            })?;
            scope.push_constant_dynamic(name, v);
        }
        let result = engine.eval_ast_with_scope::<Dynamic>(&mut scope, &ast);
        let operations = bridge.operations.load(Ordering::Relaxed);
        let calls = bridge.calls.load(Ordering::Relaxed).min(limits.max_calls);
        let done = |value, final_answer| Outcome {
            value,
            final_answer,
            operations,
            calls,
            elapsed_ms: 0,
        };
        match result {
            Ok(v) => {
                let value = rhai::serde::from_dynamic::<Value>(&v)
                    .map_err(|e| ScriptError::BadResult(one_line(&e.to_string())))?;
                Ok(done(value, None))
            }
            Err(e) => {
                if let Some(stopped) = bridge.stopped.lock().expect("poisoned").take() {
                    return Err(stopped);
                }
                if let Some(f) = bridge.final_answer.lock().expect("poisoned").take() {
                    return Ok(done(Value::Null, Some(f)));
                }
                Err(runtime_error(*e, &limits))
            }
        }
    }
}

fn parse_error(e: ParseErrorType, pos: Position, limits: &Limits) -> ScriptError {
    // A disabled symbol is reported as "reserved keyword 'eval' is disabled".
    let said = e.to_string();
    if said.contains("disabled")
        && let Some(s) = DISABLED.iter().find(|s| said.contains(&format!("'{s}'")))
    {
        return ScriptError::Forbidden(s.to_string());
    }
    match e {
        ParseErrorType::Reserved(s) if DISABLED.contains(&s.as_str()) => ScriptError::Forbidden(s),
        ParseErrorType::ExprTooDeep => ScriptError::TooDeep(format!(
            "expressions nested deeper than {}",
            limits.max_expr_depth
        )),
        ParseErrorType::LiteralTooLarge(what, max) => {
            ScriptError::TooLarge(format!("{what} literal longer than {max}"))
        }
        e => ScriptError::Parse(one_line(&format!("{e} ({pos})"))),
    }
}

fn runtime_error(e: EvalAltResult, limits: &Limits) -> ScriptError {
    match e {
        EvalAltResult::ErrorInFunctionCall(_, _, inner, _)
        | EvalAltResult::ErrorInModule(_, inner, _) => runtime_error(*inner, limits),
        EvalAltResult::ErrorParsing(p, pos) => parse_error(p, pos, limits),
        EvalAltResult::ErrorTooManyOperations(_) => {
            ScriptError::TooManyOperations(limits.max_operations)
        }
        EvalAltResult::ErrorStackOverflow(_) => ScriptError::TooDeep(format!(
            "more than {} nested function calls",
            limits.max_call_levels
        )),
        EvalAltResult::ErrorDataTooLarge(what, _) => ScriptError::TooLarge(format!(
            "{what} (limits: {} bytes of string, {} array elements, {} map entries)",
            limits.max_string_bytes, limits.max_array_len, limits.max_map_len
        )),
        EvalAltResult::ErrorTooManyVariables(_) => {
            ScriptError::TooLarge(format!("more than {} variables", limits.max_variables))
        }
        EvalAltResult::ErrorTooManyModules(_) | EvalAltResult::ErrorModuleNotFound(..) => {
            ScriptError::Forbidden("import".into())
        }
        EvalAltResult::ErrorFunctionNotFound(sig, _) => {
            ScriptError::UnknownFunction(one_line(&sig))
        }
        EvalAltResult::ErrorRuntime(v, _) if v.is_map() => {
            let m = v.cast::<rhai::Map>();
            let field = |k: &str| m.get(k).map(|x| x.to_string()).unwrap_or_default();
            if m.contains_key("primitive") {
                ScriptError::Primitive {
                    name: field("primitive"),
                    message: field("error"),
                }
            } else {
                ScriptError::Runtime(one_line(&format!("thrown: {m:?}")))
            }
        }
        EvalAltResult::ErrorTerminated(..) => ScriptError::Cancelled,
        e => ScriptError::Runtime(one_line(&e.to_string())),
    }
}

/// `s` on one line, at most 300 characters.
fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= 300 {
        return flat;
    }
    let cut: String = flat.chars().take(300).collect();
    format!("{cut}…")
}
