//! The sandbox: runs a [Rhai](https://rhai.rs) script that can reach nothing but the
//! engine's primitives, and cannot take more memory or time than it is given.
//!
//! Python RLM implementations run the root model's code with `exec`, which can reach
//! `__import__` and `open`. Here there is nothing to escape from: the engine is built raw
//! (`Engine::new_raw`), with only the basic packages for arithmetic, logic, strings,
//! arrays, maps, iteration and maths, no module resolver, and `eval`, `import`, `print`,
//! `debug` and `this` disabled as symbols. The only other functions a script sees are
//! [`PRIMITIVES`], checked versions of built-ins, and the functions of [`Table`]s:
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
//! sizes, variables, memory, primitive calls, wall time, the size of the result — ends
//! the script with a typed [`ScriptError`] whose message is one line. What bounds memory:
//!
//! - **Per operation**: every built-in that could grow data beyond its inputs is checked
//!   before it allocates, every value written out goes through a capped buffer, and every
//!   variable's value is checked when it is read (`checked`). One operation allocates at
//!   most a small multiple of the size limits.
//! - **Per script**: the script's thread is metered by the allocator (`meter`); past
//!   [`Limits::max_memory`] the script is stopped at its next operation.
//! - **Per process**: at most [`MAX_SCRIPTS`] scripts run at once and together they are
//!   lent at most [`MAX_TOTAL_MEMORY`]; a script waits for room, within its wall time.
//!
//! Nothing of the script runs on the async executor: it runs on its own thread, and each
//! primitive call is sent to the caller, which answers it on its own task ([`run`]), so
//! the host may hold borrowed, non-`'static` state (the navigator's explorer) and make
//! async model calls. [`run`] returns only once the script's thread has ended, whatever
//! ended it (a result, a limit, the wall time); dropping its future stops the script at
//! its next operation and waits for the thread (one operation: milliseconds).
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
//! bindings.insert("items", json!([{"id": "a", "text": "41% have no car"}]));
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

mod bridge;
mod checked;
mod job;
mod meter;
mod sandbox;
mod table;

use bridge::{Bridge, Msg};
pub use futures::future::BoxFuture;
use job::Job;
pub use meter::{MAX_SCRIPTS, MAX_TOTAL_MEMORY};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
pub use table::Table;

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

/// Symbols disabled in the language: they do not parse. (`this` would let a script
/// method grow a container without reading a variable, which is where sizes are checked.)
const DISABLED: [&str; 6] = ["eval", "import", "export", "print", "debug", "this"];

/// Results a `grep` or `search` asks for when the script does not say.
const DEFAULT_HITS: usize = 10;
/// The most results one `grep` or `search` may ask for.
const MAX_HITS: usize = 200;
/// The script thread's stack: the call-depth limit is reached long before it is used up.
const STACK_BYTES: usize = 32 << 20;
/// How long after the wall-time limit the caller tells a script thread that has not
/// noticed it (one long operation) to stop.
const GRACE: Duration = Duration::from_millis(250);

/// What one script may use. [`Limits::default`] suits a navigator iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Rhai operations (roughly: expression nodes, loop iterations, calls).
    pub max_operations: u64,
    /// Nested function calls.
    pub max_call_levels: usize,
    /// Nesting of expressions (and of expressions inside functions).
    pub max_expr_depth: usize,
    /// Bytes of one string, and of all strings (and map keys) inside one array or map.
    pub max_string_bytes: usize,
    /// Elements of one array (nested arrays included).
    pub max_array_len: usize,
    /// Entries of one map (nested maps included).
    pub max_map_len: usize,
    /// Variables alive at once.
    pub max_variables: usize,
    /// Primitive calls (`llm_batch` counts once per prompt).
    pub max_calls: u32,
    /// Bytes of the script's source.
    pub max_source_bytes: usize,
    /// Wall time from start to result, primitive calls and any wait for room included.
    pub wall_time: Duration,
    /// Bytes the script's thread may hold at once: its values, the engine running it,
    /// everything allocated for it (metered by the allocator; at most
    /// [`MAX_TOTAL_MEMORY`]). Reserved from the process's pool while it runs.
    pub max_memory: u64,
    /// Bytes of the JSON of the script's result.
    pub max_result_bytes: usize,
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
            max_memory: 64 << 20,
            max_result_bytes: 1 << 20,
        }
    }
}

/// Values the script sees as constants, by name (e.g. `working`, `segments`, `items`).
/// Names must be identifiers and must not shadow a primitive.
#[derive(Clone, Default)]
pub struct Bindings(Vec<(String, Bound)>);

#[derive(Clone)]
enum Bound {
    /// Converted into script values when the script starts.
    Json(Value),
    /// A map of tables by id, each read an item at a time.
    Tables(Vec<(String, Arc<dyn Table>)>),
}

impl Bindings {
    pub fn new() -> Bindings {
        Bindings::default()
    }

    /// Binds `name` to `value` (a later binding of the same name replaces it).
    pub fn insert(&mut self, name: &str, value: Value) {
        self.set(name.to_string(), Bound::Json(value));
    }

    /// Binds `name` to a map from ids to [`Table`]s: `name[id]` is a table the script
    /// reads an item at a time (`segments["seg-1"]`).
    pub fn insert_tables(&mut self, name: &str, tables: Vec<(String, Arc<dyn Table>)>) {
        self.set(name.to_string(), Bound::Tables(tables));
    }

    fn set(&mut self, name: String, b: Bound) {
        self.0.retain(|(n, _)| *n != name);
        self.0.push((name, b));
    }
}

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
    /// The most bytes the script's thread held (see [`Limits::max_memory`]).
    pub memory_peak: u64,
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
    /// No room in the process's pool ([`MAX_SCRIPTS`], [`MAX_TOTAL_MEMORY`]) within the
    /// script's wall time.
    #[error("the sandbox is busy: other scripts held its room for the whole wall-time limit ({0})")]
    Busy(String),
}

/// How a function a script can call is kept from growing data without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Growth {
    /// One of [`PRIMITIVES`] (answered by the host, which bounds its answers).
    Primitive,
    /// Registered by the sandbox: checked before it allocates (the checked built-ins, the
    /// functions of a [`Table`]).
    Sandbox,
    /// A packaged function whose output is at most a small multiple of its inputs,
    /// checked by rhai when it returns.
    Bounded,
    /// A packaged function that does not grow data.
    Fixed,
    /// A packaged function that can grow data without bound and is not replaced by a
    /// checked one: a script could call it. Never expected.
    Unchecked,
    /// A packaged function nobody has classified (a new rhai version?). Never expected.
    Unreviewed,
}

/// Every function a script can call, as `name(parameter types)`, sorted, with how it is
/// bounded. Packaged functions that a sandbox function of the same signature replaces are
/// not listed (a script cannot reach them).
pub fn functions() -> Vec<(String, Growth)> {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let limits = Limits::default();
    let bridge = Bridge::new(tx, &limits, Instant::now(), Arc::default());
    let engine = sandbox::engine(&limits, Arc::new(bridge));
    let own: Vec<String> = engine
        .gen_fn_signatures(false)
        .iter()
        .map(|s| normal(s))
        .collect();
    let mut out: Vec<(String, Growth)> = Vec::new();
    for s in engine.gen_fn_signatures(true) {
        let sig = normal(&s);
        let name = sig.split('(').next().unwrap_or_default();
        let name = name.strip_prefix("get$").unwrap_or(name);
        let own_fn = own.contains(&sig);
        let growth = if own_fn && PRIMITIVES.contains(&name) {
            Growth::Primitive
        } else if own_fn {
            Growth::Sandbox
        } else if checked::CHECKED.contains(&name) {
            Growth::Unchecked
        } else if checked::BOUNDED.contains(&name) {
            Growth::Bounded
        } else if checked::FIXED.contains(&name) {
            Growth::Fixed
        } else {
            Growth::Unreviewed
        };
        if !out.iter().any(|(s, _)| *s == sig) {
            out.push((sig, growth));
        } else if own_fn {
            // A packaged function replaced by the sandbox's.
            out.retain(|(s, _)| *s != sig);
            out.push((sig, growth));
        }
    }
    out.sort();
    out
}

/// `name(types)` of a signature as rhai prints it, parameter names and return type
/// dropped, so that a packaged function and its replacement read the same.
fn normal(sig: &str) -> String {
    let (name, rest) = sig.split_once('(').unwrap_or((sig, ")"));
    // The parameters: up to the `)` that closes the list (types may hold brackets).
    let mut depth = 0usize;
    let mut params = vec![String::new()];
    for c in rest.chars() {
        match c {
            ')' if depth == 0 => break,
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                params.push(String::new());
                continue;
            }
            _ => {}
        }
        params.last_mut().expect("one").push(c);
    }
    let types: Vec<&str> = params
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .map(|p| {
            let t = p.split_once(": ").map_or(p, |(_, t)| t);
            let t = t.trim_start_matches("&mut ").trim_start_matches("mut ");
            let t = t.trim_start_matches('&');
            match t.rsplit("::").next().unwrap_or(t) {
                "str" | "String" | "ImmutableString" | "string" => "string",
                "Array" | "array" | "Vec<Dynamic>" => "array",
                "Map" | "map" => "map",
                "FnPtr" | "Fn" => "Fn",
                "INT" | "i64" => "i64",
                "FLOAT" | "f64" => "f64",
                t => t,
            }
        })
        .collect();
    format!("{name}({})", types.join(", "))
}

/// Runs `source` with `bindings` as constants, within `limits`, its primitive calls
/// answered by `host`; returns once the script's thread has ended. See the module
/// documentation.
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
    if !meter::POOL.fits(limits.max_memory) {
        return Err(ScriptError::Invalid(format!(
            "a script may hold at most {} MiB, not {} MiB",
            MAX_TOTAL_MEMORY >> 20,
            limits.max_memory.div_ceil(1 << 20)
        )));
    }
    for (name, _) in &bindings.0 {
        check_binding(name)?;
    }
    let started = Instant::now();
    let deadline = started + limits.wall_time;
    let wall_ms = limits.wall_time.as_millis() as u64;
    let Some(_room) = meter::POOL
        .admit(limits.max_memory, tokio::time::Instant::from_std(deadline))
        .await
    else {
        return Err(ScriptError::Busy(meter::POOL.describe()));
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let job = Job {
        source: source.to_string(),
        bindings: bindings.clone(),
        limits: limits.clone(),
        bridge: Bridge::new(tx.clone(), limits, deadline, cancel.clone()),
    };
    let thread = std::thread::Builder::new()
        .name("strata-script".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let r = job.run();
            let _ = tx.send(Msg::Done(Box::new(r)));
        })
        .map_err(|e| ScriptError::Runtime(format!("cannot start the script thread: {e}")))?;
    // Declared after `_room`, so dropped before it: the room is given back only once the
    // thread has ended.
    let mut running = Running {
        cancel,
        rx,
        thread: Some(thread),
    };
    let result = running.serve(host, deadline, wall_ms).await;
    running.end().await;
    result.map(|mut o| {
        o.elapsed_ms = started.elapsed().as_millis() as u64;
        o
    })
}

/// A running script's thread, as the caller sees it. Dropped before it has ended (the
/// future of [`run`] dropped), it stops the script and waits for its thread.
struct Running {
    cancel: Arc<AtomicBool>,
    rx: tokio::sync::mpsc::UnboundedReceiver<Msg>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Answers the script's calls until it is done, or until the wall time (and a grace)
    /// has run out.
    async fn serve<H: Host>(
        &mut self,
        host: &mut H,
        deadline: Instant,
        wall_ms: u64,
    ) -> Result<Outcome, ScriptError> {
        let hard_stop = tokio::time::Instant::from_std(deadline + GRACE);
        loop {
            let msg = tokio::select! {
                m = self.rx.recv() => m,
                _ = tokio::time::sleep_until(hard_stop) => return Err(ScriptError::TimedOut(wall_ms)),
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
                Some(Msg::Drop(given_back)) => drop(given_back),
                Some(Msg::Done(r)) => return *r,
                None => {
                    return Err(ScriptError::Runtime(
                        "the script thread stopped without a result".into(),
                    ));
                }
            }
        }
    }

    /// Stops the script (if it still runs) and waits until its thread has ended.
    async fn end(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
        // The thread holds the sender until it ends; calls still coming are refused.
        while let Some(msg) = self.rx.recv().await {
            if let Msg::Call(_, reply) = msg {
                let _ = reply.send(Err("the script was stopped".into()));
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(t) = self.thread.take() else {
            return;
        };
        self.cancel.store(true, Ordering::SeqCst);
        // Unanswered calls are dropped with the receiver: a script waiting for one sees
        // its channel closed (or the cancel flag within 20 ms) and stops.
        self.rx.close();
        while self.rx.try_recv().is_ok() {}
        // One operation at most: the checked built-ins keep each one short.
        let _ = t.join();
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

/// `s` on one line, at most 300 characters.
fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= 300 {
        return flat;
    }
    let cut: String = flat.chars().take(300).collect();
    format!("{cut}…")
}
