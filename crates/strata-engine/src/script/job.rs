//! What the script thread runs: the engine over the bindings, metered, and the typed,
//! one-line error for whatever ended it.

use super::bridge::Bridge;
use super::{
    Bindings, Bound, Final, Limits, Outcome, ScriptError, checked, meter, one_line, sandbox,
};
use rhai::{Dynamic, EvalAltResult, ParseErrorType, Position, Scope};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// What the script thread runs.
pub(super) struct Job {
    pub(super) source: String,
    pub(super) bindings: Bindings,
    pub(super) limits: Limits,
    pub(super) bridge: Bridge,
}

impl Job {
    /// Runs the script on the current thread, metered; its memory is all freed (or given
    /// back) when this returns.
    pub(super) fn run(self) -> Result<Outcome, ScriptError> {
        let Job {
            source,
            bindings,
            limits,
            bridge,
        } = self;
        meter::start(limits.max_memory);
        let bridge = Arc::new(bridge);
        let result = Self::eval(&source, bindings, &limits, &bridge);
        let mut out = result.map(|(value, final_answer)| Outcome {
            value,
            final_answer,
            operations: bridge.operations.load(Ordering::Relaxed),
            calls: bridge.calls.load(Ordering::Relaxed).min(limits.max_calls),
            elapsed_ms: 0,
            memory_peak: 0,
        });
        bridge.give_back(source);
        if let Ok(o) = &mut out {
            o.memory_peak = meter::peak();
        }
        out
    }

    fn eval(
        source: &str,
        bindings: Bindings,
        limits: &Limits,
        bridge: &Arc<Bridge>,
    ) -> Result<(Value, Option<Final>), ScriptError> {
        let engine = sandbox::engine(limits, bridge.clone());
        let ast = engine
            .compile(source)
            .map_err(|e| parse_error(*e.0, e.1, limits))?;
        let mut scope = Scope::new();
        let mut given = Vec::new();
        for (name, b) in bindings.0 {
            let v = match b {
                Bound::Json(v) => {
                    let d = rhai::serde::to_dynamic(&v).map_err(|e| {
                        ScriptError::Invalid(format!(
                            "binding `{name}`: {}",
                            one_line(&e.to_string())
                        ))
                    });
                    given.push(v);
                    d?
                }
                Bound::Tables(tables) => {
                    let mut m = rhai::Map::new();
                    for (id, t) in tables {
                        m.insert(id.into(), Dynamic::from(super::table::Handle(t)));
                    }
                    m.into()
                }
            };
            scope.push_constant_dynamic(name, v);
        }
        bridge.give_back(given);
        let result = engine.eval_ast_with_scope::<Dynamic>(&mut scope, &ast);
        drop(scope);
        match result {
            Ok(v) => {
                let bytes = checked::json(&v, limits.max_result_bytes).map_err(|e| match e {
                    checked::NotJson::TooLong(cap) => ScriptError::TooLarge(format!(
                        "the script's result is longer than {cap} bytes of JSON"
                    )),
                    checked::NotJson::Unwritable(why) => ScriptError::BadResult(why),
                })?;
                drop(v);
                let value = serde_json::from_slice(&bytes)
                    .map_err(|e| ScriptError::BadResult(one_line(&e.to_string())))?;
                Ok((value, None))
            }
            Err(e) => {
                if let Some(stopped) = bridge.stopped.lock().expect("poisoned").take() {
                    return Err(stopped);
                }
                if let Some(f) = bridge.final_answer.lock().expect("poisoned").take() {
                    return Ok((Value::Null, Some(f)));
                }
                Err(runtime_error(*e, limits))
            }
        }
    }
}

pub(super) fn parse_error(e: ParseErrorType, pos: Position, limits: &Limits) -> ScriptError {
    // A disabled symbol is reported as "reserved keyword 'eval' is disabled".
    let said = e.to_string();
    if said.contains("disabled")
        && let Some(s) = super::DISABLED
            .iter()
            .find(|s| said.contains(&format!("'{s}'")))
    {
        return ScriptError::Forbidden(s.to_string());
    }
    match e {
        ParseErrorType::Reserved(s) if super::DISABLED.contains(&s.as_str()) => {
            ScriptError::Forbidden(s)
        }
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

/// A value in an error message: at most 300 characters of it are ever written out.
fn shown(v: &Dynamic) -> String {
    one_line(&checked::text(v, true, 400))
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
        EvalAltResult::ErrorDataTooLarge(what, _) if what.starts_with(char::is_uppercase) => {
            // rhai's own check ("Length of string", "Size of array/BLOB", ...).
            ScriptError::TooLarge(format!(
                "{what} (limits: {} bytes of string, {} array elements, {} map entries)",
                limits.max_string_bytes, limits.max_array_len, limits.max_map_len
            ))
        }
        EvalAltResult::ErrorDataTooLarge(what, _) => ScriptError::TooLarge(one_line(&what)),
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
            let field = |k: &str| {
                m.get(k)
                    .map(|v| one_line(&checked::text(v, false, 400)))
                    .unwrap_or_default()
            };
            if m.contains_key("primitive") {
                ScriptError::Primitive {
                    name: field("primitive"),
                    message: field("error"),
                }
            } else {
                ScriptError::Runtime(format!("thrown: {}", shown(&Dynamic::from_map(m))))
            }
        }
        EvalAltResult::ErrorRuntime(v, _) => ScriptError::Runtime(format!("thrown: {}", shown(&v))),
        EvalAltResult::ErrorTerminated(..) => ScriptError::Cancelled,
        e => {
            // Other errors name types and positions, not values; still, at most 400 bytes.
            let mut text = checked::Capped::new(400);
            let _ = std::fmt::Write::write_fmt(&mut text, format_args!("{e}"));
            ScriptError::Runtime(one_line(&text.buf))
        }
    }
}
