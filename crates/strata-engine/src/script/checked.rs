//! Bounds on what one operation of a script can allocate.
//!
//! rhai checks its size limits (`max_string_size`, `max_array_size`, `max_map_size`)
//! *after* a built-in returns, on its result and on the receiver of a method call; its
//! operation limit and [`super::meter`] are checked *between* operations. So a built-in
//! whose output is not bounded by its inputs could allocate without limit in one call
//! (`a.replace("a", s)`: 5,000 × 250 KB), and one that writes out a value whose strings
//! are shared (a map of 10,000 keys naming one 250 KB string: 12 KB held, 2.5 GB written)
//! could too. This module closes both:
//!
//! - **Checked built-ins.** Every built-in that can grow data beyond a small multiple of
//!   its (already bounded) inputs is replaced by a version registered in the engine's
//!   own namespace, which rhai searches before its packages for the same signature: it
//!   computes the size of its output and refuses before allocating ([`register`]). These
//!   are [`CHECKED`]. The rest of the packages' functions are reviewed by name in
//!   [`BOUNDED`] (output at most a small multiple of the inputs, checked by rhai after) and
//!   [`FIXED`] (no growth: scalars, iterators, shrinking); `script::functions` sorts every
//!   function a script can call into these, and the tests fail on anything unreviewed.
//! - **Capped writers.** Everything that writes a value out — `to_string`, `to_debug`,
//!   string interpolation (which calls `to_string`), `+` of a string and a value,
//!   `to_json`, the script's result, a thrown value in an error message — writes into a
//!   buffer that stops one byte past its limit ([`text`], [`json`]).
//! - **Values in variables.** rhai does not check a container grown by index assignment
//!   (`m[k] = v`, `a[i] = v`): only the assigned item is checked. The sandbox checks the
//!   whole value of a variable as the script reads it (`on_var`, [`Reads`]), keys
//!   included, so a map grown key by key fails within 16 assignments past the limit.
//!   (`this` is disabled, so every container the script can grow is reached through a
//!   variable.) A walk stops at the limits, and walks are amortised to at most 64 values
//!   per read.
//!
//! Built-in operators that rhai resolves without a registered function (`+` and `+=` of
//! strings, characters and arrays) check the sum before allocating (strings) or after
//! (arrays, at most twice the limit); fast operators are off so that a registered
//! function is always preferred.

use super::Limits;
use rhai::{
    Array, Dynamic, Engine, EvalAltResult, FnPtr, FuncRegistration, INT, ImmutableString, Map,
    Position,
};
use std::fmt::Write as _;

/// Functions whose packaged versions can grow data without bound or write out shared
/// data: every one of their signatures must be replaced by a checked one.
pub(super) const CHECKED: &[&str] = &[
    "debug",
    "pad",
    "print",
    "replace",
    "to_debug",
    "to_json",
    "to_string",
];

/// Functions whose output is at most a small multiple of their inputs (each within the
/// limits) and whose result or receiver rhai checks after they return. Those that call a
/// closure (`map`, `filter`, ...) run it as operations, so the memory meter is checked
/// between the calls.
pub(super) const BOUNDED: &[&str] = &[
    "+",
    "+=",
    "append",
    "extract",
    "fill_with",
    "filter",
    "find_map",
    "get",
    "insert",
    "keys",
    "make_lower",
    "make_upper",
    "map",
    "mixin",
    "order",
    "order_by",
    "order_desc",
    "push",
    "reduce",
    "reduce_rev",
    "set",
    "splice",
    "split",
    "split_rev",
    "sub_string",
    "to_blob",
    "to_chars",
    "to_lower",
    "to_upper",
    "values",
    "zip",
];

/// Functions that do not grow data: numbers, comparisons, predicates, iterators, and
/// those that shrink or reorder in place.
pub(super) const FIXED: &[&str] = &[
    "!",
    "!=",
    "%",
    "&",
    "*",
    "**",
    "-",
    "/",
    "<",
    "<<",
    "<=",
    "==",
    ">",
    ">=",
    ">>",
    "E",
    "PI",
    "^",
    "|",
    "abs",
    "acos",
    "acosh",
    "all",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "bits",
    "bytes",
    "ceiling",
    "chars",
    "chop",
    "clear",
    "contains",
    "cos",
    "cosh",
    "crop",
    "dedup",
    "drain",
    "end",
    "ends_with",
    "exp",
    "find",
    "floor",
    "for_each",
    "fraction",
    "hypot",
    "index_of",
    "int",
    "is_empty",
    "is_even",
    "is_exclusive",
    "is_finite",
    "is_inclusive",
    "is_infinite",
    "is_nan",
    "is_odd",
    "is_zero",
    "len",
    "ln",
    "log",
    "max",
    "min",
    "parse_float",
    "parse_int",
    "pop",
    "range",
    "remove",
    "retain",
    "reverse",
    "round",
    "shift",
    "sign",
    "sin",
    "sinh",
    "some",
    "sort",
    "sort_by",
    "sort_desc",
    "sqrt",
    "start",
    "starts_with",
    "tan",
    "tanh",
    "to_binary",
    "to_degrees",
    "to_float",
    "to_hex",
    "to_int",
    "to_octal",
    "to_radians",
    "trim",
    "truncate",
];

/// Nesting of values (arrays in arrays...) a variable may hold.
const MAX_DEPTH: usize = 128;

/// What a value holds, counted as rhai counts it (every reference to a shared string
/// counts its bytes again) and with map keys counted as string bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Sizes {
    pub(super) elements: usize,
    pub(super) entries: usize,
    pub(super) bytes: usize,
    pub(super) depth: usize,
    /// Values visited to count these (what the walk cost).
    pub(super) nodes: usize,
}

impl Sizes {
    fn add(&mut self, o: Sizes) {
        self.elements = self.elements.saturating_add(o.elements);
        self.entries = self.entries.saturating_add(o.entries);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.depth = self.depth.max(o.depth);
    }

    /// Which limit these sizes break, if any.
    pub(super) fn over(&self, limits: &Limits) -> Option<String> {
        if self.bytes > limits.max_string_bytes {
            Some(format!(
                "a value holds {} bytes of strings (limit {})",
                self.bytes, limits.max_string_bytes
            ))
        } else if self.elements > limits.max_array_len {
            Some(format!(
                "a value holds {} array elements (limit {})",
                self.elements, limits.max_array_len
            ))
        } else if self.entries > limits.max_map_len {
            Some(format!(
                "a value holds {} map entries (limit {})",
                self.entries, limits.max_map_len
            ))
        } else if self.depth > MAX_DEPTH {
            Some(format!("a value is nested deeper than {MAX_DEPTH}"))
        } else {
            None
        }
    }
}

/// The sizes of `v`. The walk stops early once `stop` is exceeded (it only has to know
/// that a limit is broken), so it costs at most the limits.
pub(super) fn sizes(v: &Dynamic, stop: &Limits) -> Sizes {
    let mut s = Sizes::default();
    walk(v, 1, stop, &mut s);
    s
}

fn walk(v: &Dynamic, depth: usize, stop: &Limits, s: &mut Sizes) {
    if s.over(stop).is_some() {
        return;
    }
    s.depth = s.depth.max(depth);
    s.nodes += 1;
    if v.is_shared() {
        // A variable captured by a closure; unreadable only while it is being written.
        if let Some(inner) = v.read_lock::<Dynamic>() {
            walk(&inner, depth, stop, s);
        }
    } else if let Some(text) = v.read_lock::<ImmutableString>() {
        s.add(Sizes {
            bytes: text.len(),
            ..Sizes::default()
        });
    } else if let Some(a) = v.read_lock::<Array>() {
        for x in a.iter() {
            s.elements = s.elements.saturating_add(1);
            walk(x, depth + 1, stop, s);
            if s.over(stop).is_some() {
                return;
            }
        }
    } else if let Some(m) = v.read_lock::<Map>() {
        for (k, x) in m.iter() {
            s.entries = s.entries.saturating_add(1);
            s.bytes = s.bytes.saturating_add(k.len());
            walk(x, depth + 1, stop, s);
            if s.over(stop).is_some() {
                return;
            }
        }
    } else if let Some(f) = v.read_lock::<FnPtr>() {
        // Curried arguments are held like an array's elements.
        for x in f.iter_curry() {
            s.elements = s.elements.saturating_add(1);
            walk(x, depth + 1, stop, s);
        }
    } else if let Some(b) = v.read_lock::<rhai::Blob>() {
        s.elements = s.elements.saturating_add(b.len());
    }
}

/// An error for a limit `what` broke (ends the script; not catchable).
pub(super) fn too_large(what: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorDataTooLarge(what, Position::NONE))
}

/// Reads of one variable between two walks of its value, at most.
const READS_PER_WALK: u32 = 16;
/// Values a walk may visit per read since the last one (its amortised cost).
const NODES_PER_READ: usize = 64;

/// The check of variables as they are read: each read of a variable walks its whole value
/// unless that is large and was walked within the last [`READS_PER_WALK`] reads, so the
/// walks cost at most [`NODES_PER_READ`] values per read on average (building a map of
/// 10,000 entries key by key walks it ~600 times, not 10,000). A container grown by index
/// assignment (each assignment is one read of its variable) fails at most 16 assignments
/// past a limit, each of them checked on its own by rhai.
#[derive(Default)]
pub(super) struct Reads {
    /// Per variable name: reads since its value was walked, and what that walk visited.
    seen: std::cell::RefCell<std::collections::HashMap<String, (u32, usize)>>,
}

impl Reads {
    pub(super) fn check(
        &self,
        name: &str,
        v: &Dynamic,
        limits: &Limits,
    ) -> Result<(), Box<EvalAltResult>> {
        let mut seen = self.seen.borrow_mut();
        let due = match seen.get_mut(name) {
            Some((reads, nodes)) => {
                *reads += 1;
                *reads >= READS_PER_WALK || *reads as usize * NODES_PER_READ >= *nodes
            }
            None => true,
        };
        if !due {
            return Ok(());
        }
        let s = sizes(v, limits);
        seen.insert(name.to_string(), (0, s.nodes));
        match s.over(limits) {
            Some(what) => Err(too_large(what)),
            None => Ok(()),
        }
    }
}

/// A string buffer that takes at most `cap` bytes: writing more keeps `cap + 1` (cut at
/// a character boundary, so at most `cap + 4`) and fails, which stops a formatter.
pub(super) struct Capped {
    pub(super) buf: String,
    cap: usize,
    pub(super) over: bool,
}

impl Capped {
    pub(super) fn new(cap: usize) -> Capped {
        Capped {
            buf: String::new(),
            cap,
            over: false,
        }
    }
}

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.over {
            return Err(std::fmt::Error);
        }
        if self.buf.len() + s.len() <= self.cap {
            self.buf.push_str(s);
            return Ok(());
        }
        let mut end = self.cap + 1 - self.buf.len();
        while !s.is_char_boundary(end.min(s.len())) {
            end += 1;
        }
        self.buf.push_str(&s[..end.min(s.len())]);
        self.over = true;
        Err(std::fmt::Error)
    }
}

/// Bytes written by a serializer, at most `cap`.
struct CappedBytes {
    buf: Vec<u8>,
    cap: usize,
}

impl std::io::Write for CappedBytes {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.cap {
            return Err(std::io::Error::other("over the limit"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `v` as text (`{v}`, or `{v:?}` when `debug`), at most `cap + 4` bytes: a longer text
/// is cut one character past `cap`, so that the string is over the limit and whatever
/// takes it (interpolation, `+`, the function's own result) fails on its size.
pub(super) fn text(v: &Dynamic, debug: bool, cap: usize) -> ImmutableString {
    let mut out = Capped::new(cap);
    let _ = if debug {
        write!(out, "{v:?}")
    } else {
        write!(out, "{v}")
    };
    out.buf.into()
}

/// Why a value could not be written as JSON.
#[derive(Debug, PartialEq)]
pub(super) enum NotJson {
    /// Longer than the cap.
    TooLong(usize),
    /// Holds something JSON has no form for (a function pointer, a table, ...).
    Unwritable(String),
}

/// `v` as JSON, written into a buffer of at most `cap` bytes.
pub(super) fn json(v: &Dynamic, cap: usize) -> Result<Vec<u8>, NotJson> {
    let mut out = CappedBytes {
        buf: Vec::new(),
        cap,
    };
    match serde_json::to_writer(&mut out, &AsJson(v)) {
        Ok(()) => Ok(out.buf),
        Err(e) if e.is_io() => Err(NotJson::TooLong(cap)),
        Err(e) => Err(NotJson::Unwritable(super::one_line(&e.to_string()))),
    }
}

/// A script value as JSON: what JSON has a form for, and an error for the rest.
struct AsJson<'a>(&'a Dynamic);

impl serde::Serialize for AsJson<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap, SerializeSeq};
        let v = self.0;
        if v.is_shared() {
            let inner = v
                .read_lock::<Dynamic>()
                .ok_or_else(|| S::Error::custom("a value is being written"))?;
            return AsJson(&inner).serialize(ser);
        }
        if v.is_unit() {
            return ser.serialize_unit();
        }
        if let Ok(b) = v.as_bool() {
            return ser.serialize_bool(b);
        }
        if let Ok(i) = v.as_int() {
            return ser.serialize_i64(i);
        }
        if let Ok(f) = v.as_float() {
            return ser.serialize_f64(f);
        }
        if let Ok(c) = v.as_char() {
            return ser.serialize_char(c);
        }
        if let Some(s) = v.read_lock::<ImmutableString>() {
            return ser.serialize_str(&s);
        }
        if let Some(a) = v.read_lock::<Array>() {
            let mut seq = ser.serialize_seq(Some(a.len()))?;
            for x in a.iter() {
                seq.serialize_element(&AsJson(x))?;
            }
            return seq.end();
        }
        if let Some(m) = v.read_lock::<Map>() {
            let mut map = ser.serialize_map(Some(m.len()))?;
            for (k, x) in m.iter() {
                map.serialize_entry(k.as_str(), &AsJson(x))?;
            }
            return map.end();
        }
        Err(S::Error::custom(format!(
            "a {} has no JSON form",
            v.type_name()
        )))
    }
}

/// Bytes of `s` with every `find` replaced by `with` (as `str::replace` counts them).
fn replaced_len(s: &str, find: &str, with: &str) -> usize {
    let n = s.matches(find).count();
    s.len() - n * find.len() + n.saturating_mul(with.len())
}

fn fits(bytes: usize, max: usize) -> Result<(), Box<EvalAltResult>> {
    if bytes > max {
        return Err(too_large(format!(
            "the string would be {bytes} bytes (limit {max})"
        )));
    }
    if !super::meter::room(bytes) {
        return Err(too_large(format!(
            "{bytes} more bytes do not fit in the script's memory"
        )));
    }
    Ok(())
}

fn replace(
    s: &mut ImmutableString,
    find: &str,
    with: &str,
    max: usize,
) -> Result<(), Box<EvalAltResult>> {
    fits(replaced_len(s, find, with), max)?;
    *s = s.replace(find, with).into();
    Ok(())
}

/// Pads `s` with `with` to `len` characters (rhai's `pad`), checked before it grows.
fn pad(
    s: &mut ImmutableString,
    len: INT,
    with: &str,
    max: usize,
) -> Result<(), Box<EvalAltResult>> {
    let have = s.chars().count();
    let Ok(want) = usize::try_from(len) else {
        return Ok(());
    };
    if want <= have || with.is_empty() {
        return Ok(());
    }
    let missing = want - have;
    let per = with.chars().count();
    let (whole, part) = (missing / per, missing % per);
    let tail: usize = with.chars().take(part).map(char::len_utf8).sum();
    fits(
        s.len()
            .saturating_add(whole.saturating_mul(with.len()))
            .saturating_add(tail),
        max,
    )?;
    let t = s.make_mut();
    for _ in 0..whole {
        t.push_str(with);
    }
    t.extend(with.chars().take(part));
    Ok(())
}

/// `f` of an array as a value, the array moved out and back (no copy).
fn as_value<T>(a: &mut Array, f: impl FnOnce(&Dynamic) -> T) -> T {
    let d = Dynamic::from_array(std::mem::take(a));
    let out = f(&d);
    *a = d.into_array().expect("an array");
    out
}

/// `f` of a map as a value, the map moved out and back (no copy).
fn map_as_value<T>(m: &mut Map, f: impl FnOnce(&Dynamic) -> T) -> T {
    let d = Dynamic::from_map(std::mem::take(m));
    let out = f(&d);
    *m = d.try_cast::<Map>().expect("a map");
    out
}

/// Pads `a` with `item` to `len` elements (rhai's `pad`), checked before it grows.
fn pad_array(a: &mut Array, len: INT, item: Dynamic, l: &Limits) -> Result<(), Box<EvalAltResult>> {
    let Ok(want) = usize::try_from(len) else {
        return Ok(());
    };
    if want <= a.len() {
        return Ok(());
    }
    let n = want - a.len();
    let mut total = as_value(a, |d| sizes(d, l));
    let one = sizes(&item, l);
    total.elements = total
        .elements
        .saturating_add(n.saturating_mul(one.elements + 1));
    total.entries = total.entries.saturating_add(n.saturating_mul(one.entries));
    total.bytes = total.bytes.saturating_add(n.saturating_mul(one.bytes));
    total.depth = total.depth.max(one.depth + 1);
    if let Some(what) = total.over(l) {
        return Err(too_large(what));
    }
    if !super::meter::room(n.saturating_mul(std::mem::size_of::<Dynamic>())) {
        return Err(too_large(
            "the padding does not fit in the script's memory".into(),
        ));
    }
    a.resize(want, item);
    Ok(())
}

/// Registers `name(T)` writing its argument out, capped.
fn shown<T: Clone + 'static>(e: &mut Engine, name: &str, debug: bool, max: usize) {
    e.register_fn(name, move |v: &mut T| {
        text(&Dynamic::from(v.clone()), debug, max)
    });
}

/// Registers the checked built-ins in the engine's own namespace (found before the
/// packages' versions of the same signatures).
pub(super) fn register(e: &mut Engine, limits: &Limits) {
    let max = limits.max_string_bytes;
    for (name, debug) in [
        ("to_string", false),
        ("print", false),
        ("to_debug", true),
        ("debug", true),
    ] {
        e.register_fn(name, move |v: &mut Dynamic| text(v, debug, max));
        e.register_fn(name, move |a: &mut Array| {
            as_value(a, |d| text(d, debug, max))
        });
        e.register_fn(name, move |m: &mut Map| {
            map_as_value(m, |d| text(d, debug, max))
        });
        // The packages have a version for each of these types; each is replaced.
        shown::<FnPtr>(e, name, debug, max);
        shown::<ImmutableString>(e, name, debug, max);
        shown::<char>(e, name, debug, max);
        shown::<bool>(e, name, debug, max);
        shown::<f64>(e, name, debug, max);
        shown::<f32>(e, name, debug, max);
        shown::<()>(e, name, debug, max);
        if matches!(name, "print" | "debug") {
            e.register_fn(name, ImmutableString::new);
        }
    }
    e.register_fn(
        "to_json",
        move |m: &mut Map| -> Result<String, Box<EvalAltResult>> {
            let out = map_as_value(m, |d| json(d, max)).map_err(|e| match e {
                NotJson::TooLong(cap) => {
                    too_large(format!("to_json: the JSON is longer than {cap} bytes"))
                }
                NotJson::Unwritable(why) => Box::new(EvalAltResult::ErrorRuntime(
                    format!("to_json: {why}").into(),
                    Position::NONE,
                )),
            })?;
            Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
        },
    );
    let mutating = |name: &str| FuncRegistration::new(name).with_purity(false);
    mutating("replace")
        .register_into_engine(e, move |s: &mut ImmutableString, f: &str, w: &str| {
            replace(s, f, w, max)
        });
    mutating("replace").register_into_engine(
        e,
        move |s: &mut ImmutableString, f: &str, w: char| {
            replace(s, f, w.encode_utf8(&mut [0; 4]), max)
        },
    );
    mutating("replace").register_into_engine(
        e,
        move |s: &mut ImmutableString, f: char, w: &str| {
            replace(s, f.encode_utf8(&mut [0; 4]), w, max)
        },
    );
    mutating("replace").register_into_engine(
        e,
        move |s: &mut ImmutableString, f: char, w: char| {
            replace(
                s,
                f.encode_utf8(&mut [0; 4]),
                w.encode_utf8(&mut [0; 4]),
                max,
            )
        },
    );
    mutating("pad").register_into_engine(e, move |s: &mut ImmutableString, len: INT, c: char| {
        pad(s, len, c.encode_utf8(&mut [0; 4]), max)
    });
    mutating("pad").register_into_engine(e, move |s: &mut ImmutableString, len: INT, w: &str| {
        pad(s, len, w, max)
    });
    let l = limits.clone();
    mutating("pad").register_into_engine(e, move |a: &mut Array, len: INT, item: Dynamic| {
        pad_array(a, len, item, &l)
    });
}
