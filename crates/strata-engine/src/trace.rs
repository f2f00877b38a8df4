//! Trajectories you can see and learn from. A query's trajectory is written as JSON Lines
//! (`strata query --trace FILE`, `server.trace_file`): one `step` record per step — the
//! state (iteration, tokens and sub-calls so far, the working set), the action, what it
//! observed, and the reward inputs of the run it belongs to (ready, confidence, sub-calls)
//! — then one `result` record with the answer and its citations. The same lines are a
//! training buffer. [`html`] renders traces as one self-contained page (no external
//! assets): the abstraction tree with the path the navigator took through it, the steps,
//! and the cited spans highlighted in their sources.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::navigate::{Citation, QueryResult, Step};
use crate::plan::Plan;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// The reward inputs of a run: how it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reward {
    pub ready: bool,
    pub confidence: f64,
    pub sub_calls: u32,
    pub citations: usize,
}

/// One line of a trace file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Step {
        query_id: String,
        question: String,
        scopes: Vec<String>,
        step: usize,
        action: String,
        detail: String,
        iteration: u32,
        at_ms: u64,
        tokens: u64,
        sub_calls: u32,
        working: Vec<String>,
        reward: Reward,
    },
    Result {
        query_id: String,
        question: String,
        scopes: Vec<String>,
        at: u64,
        answer: String,
        ready: bool,
        confidence: f64,
        citations: Vec<Citation>,
        iterations: u32,
        nodes_examined: Vec<String>,
        tokens_processed: u64,
        sub_calls_made: u32,
        /// How the run ended (absent in traces written before these fields existed).
        #[serde(default)]
        max_iterations_reached: bool,
        #[serde(default)]
        limit_hit: Option<String>,
        #[serde(default)]
        outcome: String,
    },
}

/// The records of one query (`at`: unix seconds, also part of its id).
pub fn records(question: &str, scopes: &[String], r: &QueryResult, at: u64) -> Vec<Record> {
    let query_id = format!(
        "{at}-{}",
        &blake3::hash(format!("{question}\u{0}{}", scopes.join("\u{0}")).as_bytes()).to_hex()[..12]
    );
    let reward = Reward {
        ready: r.ready,
        confidence: r.confidence,
        sub_calls: r.sub_calls_made,
        citations: r.citations.len(),
    };
    let mut out: Vec<Record> = r
        .trajectory
        .iter()
        .enumerate()
        .map(|(i, s): (usize, &Step)| Record::Step {
            query_id: query_id.clone(),
            question: question.to_string(),
            scopes: scopes.to_vec(),
            step: i,
            action: s.action.clone(),
            detail: s.detail.clone(),
            iteration: s.iteration,
            at_ms: s.at_ms,
            tokens: s.tokens,
            sub_calls: s.sub_calls,
            working: s.working.clone(),
            reward: reward.clone(),
        })
        .collect();
    out.push(Record::Result {
        query_id,
        question: question.to_string(),
        scopes: scopes.to_vec(),
        at,
        answer: r.answer.clone(),
        ready: r.ready,
        confidence: r.confidence,
        citations: r.citations.clone(),
        iterations: r.iterations,
        nodes_examined: r.nodes_examined.clone(),
        tokens_processed: r.tokens_processed,
        sub_calls_made: r.sub_calls_made,
        max_iterations_reached: r.max_iterations_reached,
        limit_hit: r.limit_hit.clone(),
        outcome: r.outcome.clone(),
    });
    out
}

/// Appends `records` to the trace file at `path` (created if missing) and syncs it.
pub fn append(path: &Path, records: &[Record]) -> Result<()> {
    let io = |err: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        err,
    };
    let mut buf = Vec::new();
    for r in records {
        serde_json::to_writer(&mut buf, r).map_err(|e| Error::Internal(e.to_string()))?;
        buf.push(b'\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    f.write_all(&buf).map_err(io)?;
    f.sync_data().map_err(io)
}

/// One query of a trace file: its steps and its result.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub steps: Vec<Record>,
    pub result: Option<Record>,
}

/// Reads a trace file: the queries in the order they began. A malformed line is an error
/// naming its line.
pub fn read(path: &Path) -> Result<Vec<(String, Trace)>> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let mut order: Vec<String> = Vec::new();
    let mut by_id: BTreeMap<String, Trace> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: Record = serde_json::from_str(line).map_err(|e| {
            Error::invalid(format!(
                "{}:{}: not a trace record: {e}",
                path.display(),
                n + 1
            ))
        })?;
        let id = match &rec {
            Record::Step { query_id, .. } | Record::Result { query_id, .. } => query_id.clone(),
        };
        if !by_id.contains_key(&id) {
            order.push(id.clone());
        }
        let t = by_id.entry(id).or_default();
        match rec {
            r @ Record::Step { .. } => t.steps.push(r),
            r @ Record::Result { .. } => t.result = Some(r),
        }
    }
    if order.is_empty() {
        return Err(Error::invalid(format!(
            "{}: no trace records",
            path.display()
        )));
    }
    Ok(order
        .into_iter()
        .map(|id| {
            let t = by_id.remove(&id).unwrap_or_default();
            (id, t)
        })
        .collect())
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:80em;color:#222}\
h1{font-size:1.3em}h2{font-size:1.15em;margin-top:1.6em}table{border-collapse:collapse}\
td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top;text-align:left}\
ul.tree{list-style:none;padding-left:1.2em}li.node{margin:1px 0}\
li.visited>span.label{background:#fff3b0;font-weight:600}\
li.cited>span.label{background:#b8f0c0;font-weight:700}\
span.level{color:#777;font-size:.85em;margin-right:.4em}\
pre.source{white-space:pre-wrap;border:1px solid #ddd;padding:.6em;max-height:30em;overflow:auto}\
mark.cite{background:#b8f0c0}.answer{border-left:4px solid #3a3;padding-left:.8em}";

/// One self-contained HTML page for `traces` (from [`read`]), with the trees and source
/// texts read from `engine`'s store.
pub fn html(engine: &Engine, traces: &[(String, Trace)]) -> Result<String> {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>strata trace</title>\
         <style>{STYLE}</style></head><body>"
    );
    for (id, t) in traces {
        let Some(Record::Result {
            question,
            scopes,
            answer,
            ready,
            confidence,
            citations,
            nodes_examined,
            ..
        }) = &t.result
        else {
            let _ = write!(
                h,
                "<section class=\"query\"><h1>{}: unfinished</h1></section>",
                esc(id)
            );
            continue;
        };
        let _ = write!(
            h,
            "<section class=\"query\" data-query=\"{}\"><h1>{}</h1>\
             <p class=\"answer\">{}</p><p>ready: {ready}, confidence {confidence:.2}, \
             {} citation(s), {} step(s)</p>",
            esc(id),
            esc(question),
            if answer.is_empty() {
                "(no answer)".to_string()
            } else {
                esc(answer)
            },
            citations.len(),
            t.steps.len()
        );
        // The path: every node a step's working set held, or the navigator examined.
        let mut visited: HashSet<String> = nodes_examined.iter().cloned().collect();
        h.push_str(
            "<h2>Path</h2><table class=\"path\"><tr><th>#</th><th>iteration</th>\
                    <th>action</th><th>observed</th><th>tokens</th><th>sub-calls</th>\
                    <th>ms</th><th>working set</th></tr>",
        );
        for s in &t.steps {
            if let Record::Step {
                step,
                action,
                detail,
                iteration,
                at_ms,
                tokens,
                sub_calls,
                working,
                ..
            } = s
            {
                visited.extend(working.iter().cloned());
                let _ = write!(
                    h,
                    "<tr class=\"step\" data-action=\"{}\"><td>{step}</td><td>{iteration}</td>\
                     <td>{}</td><td>{}</td><td>{tokens}</td><td>{sub_calls}</td><td>{at_ms}</td>\
                     <td>{}</td></tr>",
                    esc(action),
                    esc(action),
                    esc(detail),
                    working.len()
                );
            }
        }
        h.push_str("</table>");
        // The trees, with the path marked.
        let cited_sources: HashSet<&str> = citations.iter().map(|c| c.source.as_str()).collect();
        for scope in scopes_of(engine, scopes)? {
            let plan = engine.plan(&scope)?;
            tree(&mut h, &plan, &visited, &cited_sources, citations);
        }
        // The cited spans in their sources.
        h.push_str("<h2>Cited sources</h2>");
        let mut by_source: BTreeMap<(String, &str), Vec<&Citation>> = BTreeMap::new();
        for c in citations {
            let scope = source_scope(engine, scopes, &c.source)?;
            by_source
                .entry((scope, c.source.as_str()))
                .or_default()
                .push(c);
        }
        for ((scope, source), cs) in by_source {
            let text = engine.source_text(&scope, source)?;
            let _ = write!(h, "<h3>{}</h3><pre class=\"source\">", esc(source));
            let mut spans: Vec<(usize, usize)> = cs
                .iter()
                .map(|c| (c.start as usize, c.end as usize))
                .collect();
            spans.sort();
            let mut at = 0;
            for (a, b) in spans {
                let (a, b) = (a.max(at).min(text.len()), b.min(text.len()));
                if a >= b || !text.is_char_boundary(a) || !text.is_char_boundary(b) {
                    continue;
                }
                h.push_str(&esc(&text[at..a]));
                let _ = write!(h, "<mark class=\"cite\">{}</mark>", esc(&text[a..b]));
                at = b;
            }
            h.push_str(&esc(&text[at..]));
            h.push_str("</pre>");
        }
        h.push_str("</section>");
    }
    h.push_str("</body></html>");
    Ok(h)
}

fn scopes_of(engine: &Engine, scopes: &[String]) -> Result<Vec<String>> {
    if scopes.is_empty() {
        engine.scope_names()
    } else {
        Ok(scopes.to_vec())
    }
}

/// The scope (of those the query searched) that holds `source`.
fn source_scope(engine: &Engine, scopes: &[String], source: &str) -> Result<String> {
    for s in scopes_of(engine, scopes)? {
        if engine.plan(&s)?.sources.iter().any(|p| p.id == source) {
            return Ok(s);
        }
    }
    Err(Error::invalid(format!(
        "the cited source `{source}` is in none of the trace's scopes (was the store changed?)"
    )))
}

/// The tree of `plan`: ABSTRACT, its groups (SUMMARY), and the chunks of the groups the
/// path entered; visited nodes and cited chunks marked.
fn tree(
    h: &mut String,
    plan: &Plan,
    visited: &HashSet<String>,
    cited_sources: &HashSet<&str>,
    citations: &[Citation],
) {
    let mark = |id: &str, cited: bool| {
        if cited {
            "node cited"
        } else if visited.contains(id) {
            "node visited"
        } else {
            "node"
        }
    };
    let abs = plan.abstract_id.to_hex();
    let _ = write!(
        h,
        "<h2>Tree of {}</h2><ul class=\"tree\" data-scope=\"{}\"><li class=\"{}\" data-id=\"{abs}\">\
         <span class=\"level\">abstract</span><span class=\"label\">{}</span><ul class=\"tree\">",
        esc(&plan.scope),
        esc(&plan.scope),
        mark(&abs, false),
        esc(&plan.scope)
    );
    for g in &plan.groups {
        let sid = g.summary.to_hex();
        let chunk_ids: Vec<(String, String, usize)> = g
            .chunks
            .iter()
            .map(|&ci| {
                let c = &plan.chunks[ci];
                (c.full.to_hex(), c.detailed.to_hex(), ci)
            })
            .collect();
        let entered = visited.contains(&sid)
            || chunk_ids
                .iter()
                .any(|(f, d, _)| visited.contains(f) || visited.contains(d));
        let _ = write!(
            h,
            "<li class=\"{}\" data-id=\"{sid}\"><span class=\"level\">summary</span>\
             <span class=\"label\">{}</span>",
            mark(&sid, false),
            esc(&g.label)
        );
        if entered {
            h.push_str("<ul class=\"tree\">");
            for (full, det, ci) in chunk_ids {
                let c = &plan.chunks[ci];
                let src = &plan.sources[c.source];
                let cited = cited_sources.contains(src.id.as_str())
                    && citations
                        .iter()
                        .any(|x| x.source == src.id && x.start < c.end && c.start < x.end);
                let shown = if visited.contains(&full) { &full } else { &det };
                let label = match plan.chunk_label(ci) {
                    Some(l) => format!("{l}: {} [{}..{})", src.id, c.start, c.end),
                    None => format!("{} [{}..{})", src.id, c.start, c.end),
                };
                let _ = write!(
                    h,
                    "<li class=\"{}\" data-id=\"{full}\"><span class=\"level\">chunk</span>\
                     <span class=\"label\">{}</span></li>",
                    mark(shown, cited),
                    esc(&label)
                );
            }
            h.push_str("</ul>");
        }
        h.push_str("</li>");
    }
    h.push_str("</ul></li></ul>");
}
