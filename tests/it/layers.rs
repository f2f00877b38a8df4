//! The library's module layers, checked from its source: every `crate::…` and `super::…`
//! path outside test code is an edge from the module that writes it to the module it
//! names. The modules live in the workspace's layered crates ([`CRATES`]): a library crate
//! holds modules (`strata_core::level` is the module `level`), a front-end crate *is* one
//! (`strata-http` is `server`, its `crate::edge` is `server::edge`). Three rules
//! (docs/ARCHITECTURE.md, "Layers"):
//! - among top-level modules, a module uses only modules of a lower layer, as listed in the
//!   `layers` block of docs/ARCHITECTURE.md (every module listed exactly once);
//! - inside a directory module, its children form no import cycle (a child using its
//!   parent's own items is not an edge);
//! - a crate holds only modules of its layers, and depends on no crate above it (the
//!   compiler then refuses any import that goes up across crates).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["navigate", "offline", "score"]`); the crate root is empty.
type ModPath = Vec<String>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layered crates, lowest first: package name, directory (from the workspace root),
/// the highest layer its modules may be in, and the module the crate is (a front end), if
/// it is one rather than holding several.
const CRATES: &[(&str, &str, usize, Option<&str>)] = &[
    // No code: one feature set per dependency for the whole workspace (below every crate).
    ("strata-deps", "crates/strata-deps", 0, None),
    ("strata-core", "crates/strata-core", 3, None),
    ("strata-store", "crates/strata-store", 5, None),
    ("strata-engine", "crates/strata-engine", 12, None),
    ("strata-mcp", "crates/strata-mcp", 12, Some("mcp")),
    ("strata-eval", "crates/strata-eval", 12, Some("eval")),
    ("strata-http", "crates/strata-http", 13, Some("server")),
    ("strata", ".", usize::MAX, None),
];

/// The `src` directory of each layered crate, lowest first, with the module path of its
/// root (empty for a crate of several modules).
fn crate_srcs() -> Vec<(PathBuf, ModPath)> {
    CRATES
        .iter()
        .map(|(_, dir, _, module)| {
            let root_path = module.iter().map(|m| m.to_string()).collect();
            (root().join(dir).join("src"), root_path)
        })
        .collect()
}

/// The module path a path starting with `name::` names (a crate of the workspace).
fn crate_prefix(name: &str) -> Option<ModPath> {
    CRATES.iter().find_map(|(package, _, _, module)| {
        (package.replace('-', "_") == name).then(|| module.iter().map(|m| m.to_string()).collect())
    })
}

/// The `layers` block: one line per layer, lowest first, `N module module …`.
fn layers() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let block = doc
        .split("```layers\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/ARCHITECTURE.md has a ```layers block");
    let mut out = BTreeMap::new();
    for (i, line) in block.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let mut words = line.split_whitespace();
        let n: usize = words.next().unwrap().trim_end_matches('.').parse().unwrap();
        assert_eq!(n, i + 1, "layers are numbered 1, 2, …: {line}");
        for m in words {
            assert!(out.insert(m.to_string(), n).is_none(), "{m} listed twice");
        }
    }
    out
}

/// Every `.rs` file under `dir`, with its module path. `cli/` and `main.rs` belong to the
/// binary, not the library.
fn files(dir: &Path, prefix: &ModPath, out: &mut Vec<(PathBuf, ModPath)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if p.is_dir() {
            if prefix.is_empty() && name == "cli" {
                continue;
            }
            let mut sub = prefix.clone();
            sub.push(name);
            files(&p, &sub, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if prefix.is_empty() && stem == "main" {
                continue;
            }
            let mut m = prefix.clone();
            if !matches!(stem, "mod" | "lib") {
                m.push(stem.to_string());
            }
            out.push((p, m));
        }
    }
}

/// The source without comments and without test-only items (`#[cfg(test)]` items), and
/// the names of child modules declared test-only (`#[cfg(test)] mod tests;`).
fn strip(src: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::new();
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        if t.starts_with("#[cfg(test)]") {
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim().starts_with("#[") {
                j += 1;
            }
            let item = lines.get(j).map_or("", |l| l.trim());
            if item.ends_with(';') && !item.contains('{') {
                if let Some(name) = item
                    .trim_start_matches("pub ")
                    .strip_prefix("mod ")
                    .map(|r| r.trim_end_matches(';').trim())
                {
                    test_mods.push(name.to_string());
                }
                i = j + 1;
                continue;
            }
            // Skip the item's balanced braces.
            let mut depth = 0i64;
            let mut opened = false;
            while j < lines.len() {
                let code = code_of(lines[j]);
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                opened |= code.contains('{');
                j += 1;
                if opened && depth <= 0 {
                    break;
                }
            }
            i = j;
            continue;
        }
        out.push_str(code_of(lines[i]));
        out.push('\n');
        i += 1;
    }
    (out, test_mods)
}

/// A line without its `//` comment (a `//` inside a string literal ends the line early:
/// harmless, no path follows one there).
fn code_of(line: &str) -> &str {
    match line.find("//") {
        Some(k) => &line[..k],
        None => line,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a file names: `crate::a::b`, `super::x` (resolved against `here`, the file's
/// module), and each
/// branch of `crate::{a::b, c}` (first segment and one more are enough).
fn paths(code: &str, here: &ModPath, crate_root: &ModPath) -> Vec<ModPath> {
    let mut out = Vec::new();
    let text = code;
    // A lower crate's module named through the crate (`strata_core::level`) is the module;
    // a front-end crate named is its module (`strata_mcp::Strata` is `mcp::Strata`).
    let mut starts: Vec<(String, Option<ModPath>)> = vec![
        ("crate::".into(), Some(crate_root.clone())),
        ("super::".into(), None),
    ];
    for (package, _, _, _) in CRATES.iter().filter(|c| c.0 != "strata") {
        let name = package.replace('-', "_");
        let prefix = crate_prefix(&name).unwrap();
        starts.push((format!("{name}::"), Some(prefix)));
    }
    for (start, base) in &starts {
        let start = start.as_str();
        let mut from = 0;
        while let Some(k) = text[from..].find(start) {
            let at = from + k;
            from = at + start.len();
            if at > 0 && is_ident(text[..at].chars().last().unwrap()) {
                continue;
            }
            if at >= 2 && &text[at - 2..at] == "::" {
                continue; // the second `super` of `super::super::`
            }
            let mut prefix: ModPath = match base {
                Some(p) => p.clone(),
                None => here[..here.len() - 1].to_vec(),
            };
            let mut rest = &text[from..];
            while let Some(r) = rest.strip_prefix("super::") {
                prefix.pop();
                rest = r;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // Top-level branches of the group.
                let mut depth = 0;
                let mut branch = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.push(join(&prefix, &branch));
                            branch.clear();
                            continue;
                        }
                        _ => {}
                    }
                    branch.push(c);
                }
                out.push(join(&prefix, &branch));
            } else {
                let seg: String = rest
                    .chars()
                    .take_while(|c| is_ident(*c) || *c == ':')
                    .collect();
                out.push(join(&prefix, &seg));
            }
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

fn join(prefix: &ModPath, rest: &str) -> ModPath {
    let mut p = prefix.clone();
    p.extend(
        rest.split("::")
            .map(|s| s.trim().trim_start_matches('{').trim())
            .take_while(|s| !s.is_empty() && s.chars().all(is_ident))
            .map(String::from),
    );
    p
}

struct Graph {
    /// Top-level module → modules it uses (with one file that does, for the message).
    top: BTreeMap<String, BTreeMap<String, String>>,
    /// Directory module → (child → siblings it uses).
    inner: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>,
    modules: BTreeSet<String>,
}

/// Each top-level module → the `src` directory of the crate that holds it.
fn homes() -> BTreeMap<String, PathBuf> {
    let mut home = BTreeMap::new();
    for (src, crate_root) in crate_srcs() {
        let mut all = Vec::new();
        files(&src, &crate_root, &mut all);
        for m in all.iter().filter_map(|(_, m)| m.first()) {
            if let Some(other) = home.insert(m.clone(), src.clone())
                && other != src
            {
                panic!(
                    "module {m} is in both {} and {}",
                    other.display(),
                    src.display()
                );
            }
        }
    }
    home
}

fn graph() -> Graph {
    let mut all = Vec::new();
    let mut reexport: BTreeMap<String, String> = BTreeMap::new();
    for (src, crate_root) in crate_srcs() {
        let mut here = Vec::new();
        files(&src, &crate_root, &mut here);
        all.extend(
            here.into_iter()
                .map(|(p, m)| (src.clone(), crate_root.clone(), p, m)),
        );
        // Items a crate root re-exports (`pub use error::{Error, Result};`) → their module.
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        reexports(&lib, &mut reexport);
    }
    let homes = homes();
    let modules: BTreeSet<String> = homes.keys().cloned().collect();
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    let mut g = Graph {
        top: BTreeMap::new(),
        inner: BTreeMap::new(),
        modules: modules.clone(),
    };
    // Test-only modules are declared by their parent; read parents first.
    all.sort_by_key(|(_, _, _, m)| m.len());
    for (src, crate_root, path, here) in &all {
        if test_only.iter().any(|t| here.starts_with(t)) {
            continue;
        }
        let (code, tests) = strip(&std::fs::read_to_string(path).unwrap());
        for t in tests {
            let mut m = here.clone();
            m.push(t);
            test_only.insert(m);
        }
        if here.is_empty() {
            continue; // lib.rs declares and re-exports; it is the top
        }
        let rel = path.strip_prefix(root()).unwrap().display().to_string();
        for mut target in paths(&code, here, crate_root) {
            if let Some(m) = reexport.get(&target[0])
                && !modules.contains(&target[0])
            {
                target.insert(0, m.clone());
            }
            if !modules.contains(&target[0]) {
                continue; // an extern crate or macro path
            }
            if target[0] != here[0] {
                g.top
                    .entry(here[0].clone())
                    .or_default()
                    .entry(target[0].clone())
                    .or_insert_with(|| rel.clone());
                continue;
            }
            // Inside one top-level module: the first components where they part.
            let k = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if k < here.len() && k < target.len() {
                let dir = here[..k].to_vec();
                let from = here[k].clone();
                let to = target[k].clone();
                if is_child_module(src, &dir[crate_root.len().min(dir.len())..], &to) {
                    g.inner
                        .entry(dir)
                        .or_default()
                        .entry(from)
                        .or_default()
                        .insert(to);
                }
            }
        }
    }
    g
}

/// The `pub use module::{Item, …};` lines of a crate root: each item → its module.
fn reexports(lib: &str, reexport: &mut BTreeMap<String, String>) {
    // A statement at a time, however many lines it takes; comments and attributes out.
    let code: String = lib.lines().map(|l| format!("{}\n", code_of(l))).collect();
    for statement in code.split(';') {
        let statement: Vec<&str> = statement
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("#["))
            .collect();
        let line = statement.join(" ");
        let Some(at) = line.find("pub use ") else {
            continue;
        };
        let line = &line[at..];
        if let Some(rest) = line.trim().strip_prefix("pub use ") {
            let (module, items) = rest.split_once("::").unwrap_or((rest, ""));
            if module.starts_with("strata_") {
                continue; // a lower crate's modules, under their own names
            }
            for item in items
                .trim_end_matches(';')
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
            {
                let name = item.split("::").last().unwrap().trim();
                let name = name.rsplit(" as ").next().unwrap().trim();
                if !name.is_empty() {
                    reexport.insert(name.to_string(), module.to_string());
                }
            }
        }
    }
}

fn is_child_module(src: &Path, dir: &[String], name: &str) -> bool {
    let mut p = src.to_path_buf();
    p.extend(dir);
    p.join(format!("{name}.rs")).exists() || p.join(name).is_dir()
}

/// A cycle in `edges`, if any (depth-first search).
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n.as_str())
            && let Some(c) = visit(n, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn every_module_uses_only_lower_layers() {
    let layers = layers();
    let g = graph();
    let unlisted: Vec<_> = g
        .modules
        .iter()
        .filter(|m| !layers.contains_key(*m))
        .collect();
    assert!(
        unlisted.is_empty(),
        "modules missing from the layers block of docs/ARCHITECTURE.md: {unlisted:?}"
    );
    let gone: Vec<_> = layers.keys().filter(|m| !g.modules.contains(*m)).collect();
    assert!(
        gone.is_empty(),
        "layers block lists modules that do not exist: {gone:?}"
    );
    let mut wrong = Vec::new();
    for (from, uses) in &g.top {
        for (to, file) in uses {
            if layers[to] >= layers[from] {
                wrong.push(format!(
                    "{from} (layer {}) uses {to} (layer {}) in {file}",
                    layers[from], layers[to]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that do not go down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn each_crate_holds_its_layers_and_depends_only_on_lower_crates() {
    let layers = layers();
    let homes = homes();
    let mut wrong = Vec::new();
    for (module, src) in &homes {
        let (name, _, max, _) = CRATES
            .iter()
            .find(|(_, dir, _, _)| root().join(dir).join("src") == *src)
            .unwrap();
        if let Some(&layer) = layers.get(module)
            && layer > *max
        {
            wrong.push(format!(
                "{module} (layer {layer}) is in {name}, which holds layers 1–{max} only"
            ));
        }
    }
    for (rank, (name, dir, _, _)) in CRATES.iter().enumerate() {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
        for dep in strata_dependencies(&manifest) {
            let at = CRATES.iter().position(|(n, _, _, _)| *n == dep);
            // The root package's dev-dependency on itself (with `eval`) is not an edge.
            if dep != *name && at.is_none_or(|at| at >= rank) {
                wrong.push(format!("{name} depends on {dep}, which is not below it"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The strata crates a manifest depends on, in any dependency table.
fn strata_dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line.trim_end_matches(']').ends_with("dependencies");
            continue;
        }
        let key: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if in_deps && (key == "strata" || key.starts_with("strata-")) {
            out.push(key);
        }
    }
    out
}

#[test]
fn no_import_cycle_inside_a_directory_module() {
    let g = graph();
    for (dir, edges) in &g.inner {
        if let Some(c) = cycle(edges) {
            panic!("import cycle inside {}: {}", dir.join("::"), c.join(" → "));
        }
    }
}

#[test]
fn the_checker_sees_paths_of_every_shape() {
    let here: ModPath = vec!["navigate".into(), "offline".into(), "score".into()];
    let code = "use crate::{corpus::Question, error::Result};\n\
                use super::super::explore::Explorer;\n\
                use super::cues::Cues;\n\
                let x = crate::text::facts(t);\n\
                let y = my_crate::thing;\n\
                let z = strata_core::level::Level::Full;\n\
                let w = strata_mcp::Strata::new(e);";
    let got: Vec<String> = paths(code, &here, &Vec::new())
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "corpus::Question",
            "error::Result",
            "text::facts",
            "navigate::explore::Explorer",
            "navigate::offline::cues::Cues",
            "level::Level::Full",
            "mcp::Strata::new",
        ]
    );
    assert_eq!(
        strata_dependencies(
            "[dependencies]\nstrata-core.workspace = true\nserde = \"1\"\n\
             [dev-dependencies]\nstrata = { path = \".\" }\n[features]\nstrata-x = []\n"
        ),
        ["strata-core", "strata"]
    );
    let (code, tests) = strip(
        "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::engine::Engine;\n}\n\
         #[cfg(test)]\nmod conformance;\n// crate::b in a comment\nuse crate::c;\n",
    );
    assert!(code.contains("crate::a") && code.contains("crate::c"));
    assert!(!code.contains("engine") && !code.contains("crate::b"));
    assert_eq!(tests, ["conformance"]);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&edges), None);
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
}
