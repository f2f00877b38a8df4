//! Lists a script reads an item at a time ([`Table`]): a segment of thousands of nodes is
//! bound as a handle, not copied into the script, and each item becomes a script value
//! (a small map) only when it is read.

use super::Limits;
use super::checked::{sizes, too_large};
use rhai::{Array, Dynamic, Engine, EvalAltResult, FnPtr, INT, NativeCallContext};
use serde_json::Value;
use std::sync::Arc;

/// A list bound to a script that it reads one item at a time: `t.len()`, `t[i]` (negative
/// from the end), `for item in t`, and `map`, `filter`, `some`, `all`, `find`, `reduce`
/// and `extract(start, len)` as on arrays. The host keeps it (an `Arc`) while the script
/// runs.
pub trait Table: Send + Sync + 'static {
    fn len(&self) -> usize;
    /// Item `i` (below `len`) as JSON.
    fn item(&self, i: usize) -> Value;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`Table`] as a script value.
#[derive(Clone)]
pub(super) struct Handle(pub(super) Arc<dyn Table>);

type Answer = Result<Dynamic, Box<EvalAltResult>>;

impl Handle {
    fn get(&self, i: usize) -> Dynamic {
        // Items are JSON; a conversion cannot fail on them.
        rhai::serde::to_dynamic(self.0.item(i)).unwrap_or(Dynamic::UNIT)
    }

    fn index(&self, i: INT) -> Option<usize> {
        let n = self.0.len();
        let i = if i < 0 { n as INT + i } else { i };
        usize::try_from(i).ok().filter(|&i| i < n)
    }
}

/// Iterates a table, converting each item when it is reached.
pub(super) struct Items {
    table: Handle,
    next: usize,
}

impl Iterator for Items {
    type Item = Dynamic;
    fn next(&mut self) -> Option<Dynamic> {
        (self.next < self.table.0.len()).then(|| {
            self.next += 1;
            self.table.get(self.next - 1)
        })
    }
}

impl IntoIterator for Handle {
    type Item = Dynamic;
    type IntoIter = Items;
    fn into_iter(self) -> Items {
        Items {
            table: self,
            next: 0,
        }
    }
}

fn call(ctx: &NativeCallContext, f: &FnPtr, item: Dynamic) -> Answer {
    f.call_raw(ctx, None, [item])
}

/// Registers the table type and its functions.
pub(super) fn register(e: &mut Engine, limits: &Limits) {
    e.register_type_with_name::<Handle>("table");
    e.register_iterator::<Handle>();
    e.register_fn("len", |t: &mut Handle| t.0.len() as INT);
    e.register_get("len", |t: &mut Handle| t.0.len() as INT);
    e.register_fn("is_empty", |t: &mut Handle| t.0.is_empty());
    e.register_get("is_empty", |t: &mut Handle| t.0.is_empty());
    e.register_indexer_get(|t: &mut Handle, i: INT| -> Answer {
        match t.index(i) {
            Some(i) => Ok(t.get(i)),
            None => Err(Box::new(EvalAltResult::ErrorArrayBounds(
                t.0.len(),
                i,
                rhai::Position::NONE,
            ))),
        }
    });
    e.register_fn("get", |t: &mut Handle, i: INT| {
        t.index(i).map_or(Dynamic::UNIT, |i| t.get(i))
    });
    for name in ["to_string", "to_debug", "print", "debug"] {
        e.register_fn(name, |t: &mut Handle| {
            format!("table of {} items", t.0.len())
        });
    }
    // What the closures return is checked by rhai; the arrays built of it here are
    // checked as they grow, so a `map` over 20,000 items stops at the limits.
    let l = limits.clone();
    e.register_fn(
        "map",
        move |ctx: NativeCallContext,
              t: &mut Handle,
              f: FnPtr|
              -> Result<Array, Box<EvalAltResult>> {
            let mut out = Array::new();
            let mut held = super::checked::Sizes::default();
            for i in 0..t.0.len() {
                let v = call(&ctx, &f, t.get(i))?;
                grow(&mut held, &v, &l)?;
                out.push(v);
            }
            Ok(out)
        },
    );
    let l = limits.clone();
    e.register_fn(
        "filter",
        move |ctx: NativeCallContext,
              t: &mut Handle,
              f: FnPtr|
              -> Result<Array, Box<EvalAltResult>> {
            let mut out = Array::new();
            let mut held = super::checked::Sizes::default();
            for i in 0..t.0.len() {
                let item = t.get(i);
                if call(&ctx, &f, item.clone())?.as_bool().unwrap_or(false) {
                    grow(&mut held, &item, &l)?;
                    out.push(item);
                }
            }
            Ok(out)
        },
    );
    let l = limits.clone();
    e.register_fn(
        "extract",
        move |t: &mut Handle, start: INT, len: INT| -> Result<Array, Box<EvalAltResult>> {
            let from = t.index(start).unwrap_or(t.0.len());
            let n = usize::try_from(len).unwrap_or(0);
            let mut out = Array::new();
            let mut held = super::checked::Sizes::default();
            for i in from..from.saturating_add(n).min(t.0.len()) {
                let v = t.get(i);
                grow(&mut held, &v, &l)?;
                out.push(v);
            }
            Ok(out)
        },
    );
    e.register_fn(
        "some",
        |ctx: NativeCallContext, t: &mut Handle, f: FnPtr| -> Result<bool, Box<EvalAltResult>> {
            for i in 0..t.0.len() {
                if call(&ctx, &f, t.get(i))?.as_bool().unwrap_or(false) {
                    return Ok(true);
                }
            }
            Ok(false)
        },
    );
    e.register_fn(
        "all",
        |ctx: NativeCallContext, t: &mut Handle, f: FnPtr| -> Result<bool, Box<EvalAltResult>> {
            for i in 0..t.0.len() {
                if !call(&ctx, &f, t.get(i))?.as_bool().unwrap_or(false) {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    );
    e.register_fn(
        "find",
        |ctx: NativeCallContext, t: &mut Handle, f: FnPtr| -> Answer {
            for i in 0..t.0.len() {
                let item = t.get(i);
                if call(&ctx, &f, item.clone())?.as_bool().unwrap_or(false) {
                    return Ok(item);
                }
            }
            Ok(Dynamic::UNIT)
        },
    );
    e.register_fn(
        "reduce",
        |ctx: NativeCallContext, t: &mut Handle, f: FnPtr, initial: Dynamic| -> Answer {
            let mut acc = initial;
            for i in 0..t.0.len() {
                acc = f.call_raw(&ctx, None, [acc, t.get(i)])?;
            }
            Ok(acc)
        },
    );
}

/// Adds `v` to what an array being built holds; fails once that is over the limits.
fn grow(
    held: &mut super::checked::Sizes,
    v: &Dynamic,
    l: &Limits,
) -> Result<(), Box<EvalAltResult>> {
    let s = sizes(v, l);
    held.elements = held.elements.saturating_add(s.elements + 1);
    held.entries = held.entries.saturating_add(s.entries);
    held.bytes = held.bytes.saturating_add(s.bytes);
    held.depth = held.depth.max(s.depth + 1);
    match held.over(l) {
        Some(what) => Err(too_large(what)),
        None => Ok(()),
    }
}
