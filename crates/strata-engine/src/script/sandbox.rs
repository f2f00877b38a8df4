//! The sandboxed engine: rhai built raw, the basic packages, the checked built-ins, the
//! table type, the primitives, the limits and the callbacks that enforce what rhai does
//! not (wall time, cancellation, memory, the sizes of variables).

use super::bridge::{Answer, Bridge, TERMINATE, terminated};
use super::{
    Call, DEFAULT_HITS, DISABLED, Final, Limits, MAX_HITS, ScriptError, checked, meter, table,
};
use rhai::packages::{
    ArithmeticPackage, BasicArrayPackage, BasicIteratorPackage, BasicMapPackage, BasicMathPackage,
    BasicStringPackage, LogicPackage, MoreStringPackage, Package,
};
use rhai::{Array, Dynamic, Engine, EvalAltResult, INT, OptimizationLevel, Position};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

fn hits(limit: INT) -> usize {
    limit.clamp(1, MAX_HITS as INT) as usize
}

/// The strings of `a`, checked before they are copied: at most `max_bytes` together.
fn strings(what: &str, a: Array, max_bytes: usize) -> Result<Vec<String>, Box<EvalAltResult>> {
    let mut total = 0usize;
    for (i, v) in a.iter().enumerate() {
        let Some(s) = v.read_lock::<rhai::ImmutableString>() else {
            return Err(Box::new(EvalAltResult::ErrorRuntime(
                format!("{what}: element {i} is a {}, not a string", v.type_name()).into(),
                Position::NONE,
            )));
        };
        total = total.saturating_add(s.len());
        if total > max_bytes {
            return Err(checked::too_large(format!(
                "{what}: the strings hold more than {max_bytes} bytes"
            )));
        }
    }
    Ok(a.into_iter()
        .map(|v| v.into_immutable_string().expect("checked").to_string())
        .collect())
}

/// The engine a script runs in, its primitive calls going through `bridge`.
pub(super) fn engine(limits: &Limits, bridge: Arc<Bridge>) -> Engine {
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
    // A registered (checked) function always wins over rhai's built-in operators, and
    // nothing is evaluated at compile time.
    e.set_fast_operators(false);
    e.set_optimization_level(OptimizationLevel::None);
    e.set_max_operations(limits.max_operations.max(1));
    e.set_max_call_levels(limits.max_call_levels);
    e.set_max_expr_depths(limits.max_expr_depth, limits.max_expr_depth);
    e.set_max_string_size(limits.max_string_bytes.max(1));
    e.set_max_array_size(limits.max_array_len.max(1));
    e.set_max_map_size(limits.max_map_len.max(1));
    e.set_max_variables(limits.max_variables.max(1));
    e.set_max_functions(64);
    e.set_max_strings_interned(1024);
    checked::register(&mut e, limits);
    table::register(&mut e, limits);

    let b = bridge.clone();
    let budget = limits.max_memory;
    e.on_progress(move |ops| {
        b.operations.store(ops, Ordering::Relaxed);
        if b.cancel.load(Ordering::Relaxed) {
            b.note(ScriptError::Cancelled);
            return Some(TERMINATE.into());
        }
        let held = meter::held();
        if held > budget {
            b.note(ScriptError::TooLarge(format!(
                "the script held {} MiB of memory (limit {} MiB)",
                held.div_ceil(1 << 20),
                budget >> 20
            )));
            return Some(TERMINATE.into());
        }
        if ops % 16 == 0 && Instant::now() >= b.deadline {
            b.note(ScriptError::TimedOut(b.wall_ms));
            return Some(TERMINATE.into());
        }
        None
    });
    // Reads of variables check their values (see `checked::Reads`): a container grown by
    // index assignment fails within a few uses. Constants (the bindings) are the host's.
    let l = limits.clone();
    let reads = checked::Reads::default();
    #[allow(deprecated)] // "volatile", not deprecated: the API may change in rhai.
    e.on_var(move |name, _, ctx| {
        if let Some(v) = ctx.scope().get(name)
            && !v.is_read_only()
        {
            reads.check(name, v, &l)?;
        }
        Ok(None)
    });
    primitives(&mut e, limits, bridge);
    e
}

fn primitives(e: &mut Engine, limits: &Limits, bridge: Arc<Bridge>) {
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
    let max = limits.max_string_bytes;
    e.register_fn("llm_batch", move |prompts: Array| {
        if prompts.len() > b.max_calls as usize {
            return b.stop(ScriptError::TooManyCalls(b.max_calls));
        }
        let prompts = strings("llm_batch", prompts, max)?;
        if prompts.is_empty() {
            return Ok(Dynamic::from_array(Array::new()));
        }
        let n = prompts.len() as u32;
        b.call(Call::LlmBatch { prompts }, n)
    });
    let b = bridge;
    e.register_fn("final", move |answer: &str, ids: Array| -> Answer {
        let ids = strings("final", ids, max)?;
        *b.final_answer.lock().expect("poisoned") = Some(Final {
            answer: answer.to_string(),
            ids,
        });
        Err(terminated())
    });
}
