//! Code mode (`strategy = code`): each iteration the root model writes one Rhai program
//! that evaluates the whole working set and returns `{selected_ids, extracted,
//! confidence, stop}` (the per-iteration design, not one program per chunk). The program
//! runs in the sandbox (`crate::script`) with the working set bound as `working` and the
//! question as `question`; its primitives (`grep`, `peek`, `children`, `search`,
//! `llm_query`, `llm_batch`) are answered here, on the explorer, under its budgets.
//!
//! What the program returns is untrusted like any reply: selected ids are sanitised
//! against the working set and the nodes its primitives returned (unknown ones reported),
//! the working set keeps `min_keep` nodes, two iterations without narrowing end the loop,
//! confidence is clamped to [0, 1], and `extracted` quotes are located byte-exactly in
//! FULL chunks ([`Nav::resolve_quotes`]) and held to the evidence check before they are an
//! answer, exactly as a structured `finish`. A program that fails (a parse error, a limit,
//! a primitive error, a result of the wrong shape) costs an iteration and is reported to
//! the model; two in a row, or one on the last iteration, end the loop, and the best
//! answer so far stands, else the offline policy answers (counted in `usage.fallbacks`).

use super::reply::{Intent, QuoteRef};
use super::{Flow, Nav, clip_to, failed};
use crate::corpus::Place;
use crate::error::Result;
use crate::level::Level;
use crate::model::{ChatModel, prompts};
use crate::navigate::QueryResult;
use crate::navigate::primitives::{Answer, Primitives, View};
use crate::node::{NodeId, context_label};
use crate::script::{self, Bindings, Limits, Outcome};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

/// Characters of a working-set node's text in `working`.
const WORKING_CHARS: usize = 1200;
/// Working-set nodes bound in `working`.
const WORKING_MAX: usize = 200;
/// Characters of a node's text that `peek` returns.
const PEEK_CHARS: usize = 4000;
/// Characters of a node's text in `grep`, `search` and `children` results.
const HIT_CHARS: usize = 600;
/// Characters of a program's result shown back to the model.
const RESULT_CHARS: usize = 1500;

/// Answers `question` with `root` writing one program per iteration; `helper` serves the
/// programs' `llm_query` and `llm_batch`.
pub(crate) async fn run(
    ex: crate::navigate::Explorer<'_>,
    question: &str,
    root: &dyn ChatModel,
    helper: &dyn ChatModel,
) -> Result<QueryResult> {
    let mut nav = Nav::new(ex, question);
    nav.ex.step(
        "policy",
        format!(
            "code mode: root model {}, prompts {}",
            root.identity(),
            prompts::NAV_VERSION
        ),
    );
    // No intent call: the program reads the question itself; ranking uses its words.
    nav.intent = Intent::heuristic(&nav.ex, question);
    nav.ranking = nav.ex.question(question);
    nav.start(helper).await?;
    loop {
        let last = nav.last_turn();
        match nav.program(root, helper, last).await? {
            Flow::Continue if !last => {}
            Flow::Continue | Flow::Stop => break,
            Flow::Finish(cited, confidence) => return nav.finish(cited, confidence),
            Flow::FallBack(why) => return nav.fall_back(why),
            Flow::Offline(why) => return nav.answer_offline(why),
        }
    }
    nav.conclude()
}

/// The sandbox limits of one program: a navigator iteration's. (Memory: the default
/// 64 MiB; the process runs at most `script::MAX_SCRIPTS` programs and scripts at once.)
fn limits() -> Limits {
    Limits {
        // `working` holds up to 200 texts of 1,200 characters.
        max_string_bytes: 1 << 20,
        max_calls: 100,
        // Helper calls to a slow local model fit.
        wall_time: Duration::from_secs(120),
        ..Limits::default()
    }
}

/// The program in a reply: the text inside the first code fence, else the whole reply.
fn program_of(reply: &str) -> &str {
    let Some(open) = reply.find("```") else {
        return reply.trim();
    };
    let body = &reply[open + 3..];
    // Skip the fence's language tag.
    let body = body.split_once('\n').map_or(body, |(_, rest)| rest);
    body.split("```").next().unwrap_or(body).trim()
}

/// What a program returned, validated.
struct Returned {
    selected: Vec<String>,
    extracted: Vec<Extract>,
    confidence: f64,
    stop: bool,
    hypothesis: String,
}

/// One extracted quote: from a named node, or from wherever it is among the selection.
enum Extract {
    At(QuoteRef),
    Anywhere(String),
}

impl Returned {
    fn from_outcome(o: &Outcome) -> std::result::Result<Returned, String> {
        if let Some(f) = &o.final_answer {
            // The ids become the working set first, so the answer is looked for there.
            return Ok(Returned {
                selected: f.ids.clone(),
                extracted: vec![Extract::Anywhere(f.answer.clone())],
                confidence: 1.0,
                stop: true,
                hypothesis: f.answer.clone(),
            });
        }
        let Value::Object(m) = &o.value else {
            return Err(format!(
                "the program must end with a map #{{selected_ids, extracted, confidence, stop}}, not {}",
                clip_to(&o.value.to_string(), 80)
            ));
        };
        let strings = |v: Option<&Value>| -> Vec<String> {
            match v {
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| match x {
                        Value::String(s) => Some(s.clone()),
                        Value::Object(o) => o.get("id").and_then(Value::as_str).map(str::to_string),
                        _ => None,
                    })
                    .collect(),
                Some(Value::String(s)) => vec![s.clone()],
                _ => Vec::new(),
            }
        };
        let extracted = match m.get("extracted") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|x| match x {
                    Value::String(s) => Some(Extract::Anywhere(s.clone())),
                    Value::Object(o) => {
                        let quote = o.get("quote").and_then(Value::as_str)?.to_string();
                        Some(match o.get("id").and_then(Value::as_str) {
                            Some(id) => Extract::At(QuoteRef {
                                id: id.to_string(),
                                quote,
                            }),
                            None => Extract::Anywhere(quote),
                        })
                    }
                    _ => None,
                })
                .collect(),
            Some(Value::String(s)) => vec![Extract::Anywhere(s.clone())],
            _ => Vec::new(),
        };
        let confidence = m.get("confidence").and_then(Value::as_f64).unwrap_or(0.0);
        Ok(Returned {
            selected: strings(m.get("selected_ids")),
            extracted,
            confidence: if confidence.is_finite() {
                confidence.clamp(0.0, 1.0)
            } else {
                0.0
            },
            stop: m.get("stop").and_then(Value::as_bool).unwrap_or(false),
            hypothesis: m
                .get("hypothesis")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        })
    }
}

impl Nav<'_, '_> {
    /// One iteration: ask for a program, run it, take what it returned.
    async fn program(
        &mut self,
        root: &dyn ChatModel,
        helper: &dyn ChatModel,
        last: bool,
    ) -> Result<Flow> {
        let state = self.render(last)?;
        let reply = match root.chat(prompts::code(&state)).await {
            Err(e) if self.best.is_some() => {
                self.ex
                    .history
                    .push(format!("{}: the best answer so far stands", failed(&e)));
                return Ok(Flow::Stop);
            }
            Err(e) => return Ok(Flow::FallBack(failed(&e))),
            Ok(r) => r,
        };
        if reply.truncated {
            return Ok(self.failed("the program was cut off at its token limit", last));
        }
        let source = program_of(&reply.text).to_string();
        let bindings = self.bindings()?;
        let mut prims = Primitives {
            view: Prims {
                nav: self,
                helper,
                known: HashSet::new(),
            },
        };
        let ran = script::run(&source, &bindings, &limits(), &mut prims).await;
        let known = prims.view.known;
        let outcome = match ran {
            Ok(o) => o,
            Err(e) => return Ok(self.failed(&e.to_string(), last)),
        };
        let returned = match Returned::from_outcome(&outcome) {
            Ok(r) => r,
            Err(e) => return Ok(self.failed(&e, last)),
        };
        self.bad_replies = 0;
        self.ex.step(
            "program",
            format!(
                "{} operation(s), {} primitive call(s), {} ms, {} KiB at most: {} selected, {} extracted, confidence {:.2}, stop {}",
                outcome.operations,
                outcome.calls,
                outcome.elapsed_ms,
                outcome.memory_peak.div_ceil(1024),
                returned.selected.len(),
                returned.extracted.len(),
                returned.confidence,
                returned.stop
            ),
        );
        self.take(returned, &outcome, &known, last)
    }

    /// A program that could not be used: costs an iteration and is fed back; two in a row,
    /// or one on the last iteration, end the loop.
    fn failed(&mut self, why: &str, last: bool) -> Flow {
        self.note_invalid();
        self.bad_replies += 1;
        self.ex.step("program", format!("failed: {why}"));
        self.account(false, &format!("the program failed: {why}"));
        self.observation = format!(
            "Your program failed: {why}. Reply with a corrected program only, ending with the map \
             #{{selected_ids, extracted, confidence, stop}}."
        );
        if self.bad_replies >= 2 || last {
            if self.best.is_some() {
                return Flow::Stop;
            }
            return Flow::FallBack(format!("the root model's programs failed ({why})"));
        }
        Flow::Continue
    }

    /// The working set as the program sees it.
    fn bindings(&mut self) -> Result<Bindings> {
        let mut working = Vec::new();
        for (id, score) in self.ex.working.clone().into_iter().take(WORKING_MAX) {
            let n = self.ex.corpus.node(&id, self.ex.now)?;
            self.ex.examine(id);
            working.push(json!({
                "id": self.handle(id),
                "level": n.level.name(),
                "label": context_label(&n),
                "text": clip_to(&n.text, WORKING_CHARS),
                "read": self.read.contains(&id),
                "score": score,
            }));
        }
        let mut b = Bindings::new();
        b.insert("question", json!(self.question));
        b.insert("working", Value::Array(working));
        Ok(b)
    }

    /// Applies what a program returned: the new working set, a draft or an answer.
    fn take(
        &mut self,
        r: Returned,
        outcome: &Outcome,
        known: &HashSet<NodeId>,
        last: bool,
    ) -> Result<Flow> {
        if !r.hypothesis.trim().is_empty() {
            self.hypothesis = r.hypothesis.trim().to_string();
        }
        // Selected ids: only the working set and what the program's primitives returned.
        let (ids, mut unknown) = self.resolve_all(&r.selected);
        let allowed: HashSet<NodeId> = self
            .ex
            .working
            .iter()
            .map(|(id, _)| *id)
            .chain(known.iter().copied())
            .collect();
        let mut selected = Vec::new();
        for id in ids {
            if allowed.contains(&id) {
                selected.push(id);
            } else {
                unknown.push(self.handle(id));
            }
        }
        if !unknown.is_empty() {
            self.note_invalid();
            self.ex.step(
                "invalid",
                format!(
                    "selected ids outside the working set ignored: {}",
                    unknown.join(", ")
                ),
            );
        }
        let narrowed = self.select(selected);
        let quotes = self.quotes(&r.extracted)?;
        if r.stop || (last && !quotes.is_empty()) {
            // An answer: verified and checked like a structured `finish` (whose rejection
            // costs the iteration).
            return self.answer(&quotes, r.confidence, r.stop, last);
        }
        self.account(
            narrowed,
            &format!(
                "program: {} node(s) selected, {} quote(s) extracted",
                r.selected.len(),
                r.extracted.len()
            ),
        );
        let mut problems = Vec::new();
        if !quotes.is_empty() {
            let resolved = self.resolve_quotes(&quotes)?;
            problems = resolved.problems;
            if !resolved.cited.is_empty() {
                if let Ok(text) = self.ex.answer_text(&resolved.cited) {
                    self.ex.drafts.push(text);
                }
                self.keep_draft(resolved.cited, r.confidence * resolved.share)?;
            }
        }
        self.observation = format!(
            "Your program returned: {}\nThe working set has {} node(s) now.{}{}",
            clip_to(&outcome.value.to_string(), RESULT_CHARS),
            self.ex.working.len(),
            if unknown.is_empty() {
                String::new()
            } else {
                format!(
                    " Ids ignored (not in the working set): {}.",
                    unknown.join(", ")
                )
            },
            if problems.is_empty() {
                String::new()
            } else {
                format!(" Quotes not verified: {}.", problems.join("; "))
            }
        );
        Ok(Flow::Continue)
    }

    /// Makes `selected` (best first) the working set, keeping `min_keep` nodes: the best of
    /// the old working set fill up. Nothing selected leaves it as it is. Whether it
    /// narrowed: fewer nodes, or a deeper level.
    fn select(&mut self, mut selected: Vec<NodeId>) -> bool {
        if selected.is_empty() {
            return false;
        }
        let (before, depth) = (self.ex.working.len(), self.depth());
        for (id, _) in self.ex.working.clone() {
            if selected.len() >= self.ex.cfg.min_keep {
                break;
            }
            if !selected.contains(&id) {
                selected.push(id);
            }
        }
        let n = selected.len();
        self.ex.working = selected
            .into_iter()
            .enumerate()
            .map(|(i, id)| (id, (n - i) as f32))
            .collect();
        self.depth() < depth || self.ex.working.len() < before
    }

    /// Quotes named by node, and free quotes tied to the first node (of the working set,
    /// then of what was read) that holds them.
    fn quotes(&mut self, extracted: &[Extract]) -> Result<Vec<QuoteRef>> {
        let mut out = Vec::new();
        for e in extracted {
            match e {
                Extract::At(q) => out.push(q.clone()),
                Extract::Anywhere(quote) => {
                    let mut candidates: Vec<NodeId> =
                        self.ex.working.iter().map(|(id, _)| *id).collect();
                    let mut read: Vec<NodeId> = self.read.iter().copied().collect();
                    read.sort();
                    candidates.extend(read);
                    let mut found = None;
                    for id in candidates {
                        let q = QuoteRef {
                            id: self.handle(id),
                            quote: quote.clone(),
                        };
                        if !self
                            .resolve_quotes(std::slice::from_ref(&q))?
                            .cited
                            .is_empty()
                        {
                            found = Some(q);
                            break;
                        }
                    }
                    out.push(found.unwrap_or(QuoteRef {
                        id: "(none)".into(),
                        quote: quote.clone(),
                    }));
                }
            }
        }
        Ok(out)
    }

    /// The nodes one level below `id` (FULL nodes have none).
    fn children_of(&self, id: &NodeId) -> Vec<NodeId> {
        let plans = &self.ex.trees.plans;
        match self.ex.trees.place(id) {
            Some(Place::Abstract(pi)) => plans[pi].groups.iter().map(|g| g.summary).collect(),
            Some(Place::Summary(pi, gi)) => {
                let p = &plans[pi];
                p.groups[gi]
                    .chunks
                    .iter()
                    .map(|&ci| p.chunks[ci].detailed)
                    .collect()
            }
            Some(Place::Detailed(pi, ci)) => vec![plans[pi].chunks[ci].full],
            _ => Vec::new(),
        }
    }
}

/// What one program's primitives read: the explorer's working set.
struct Prims<'n, 'e, 'a> {
    nav: &'n mut Nav<'e, 'a>,
    helper: &'n dyn ChatModel,
    /// Nodes the primitives returned: the program may select them.
    known: HashSet<NodeId>,
}

impl Prims<'_, '_, '_> {
    fn node(&mut self, id: NodeId, chars: usize) -> Answer {
        let n = self
            .nav
            .ex
            .corpus
            .node(&id, self.nav.ex.now)
            .map_err(|e| e.to_string())?;
        self.known.insert(id);
        Ok(json!({
            "id": self.nav.handle(id),
            "level": n.level.name(),
            "label": context_label(&n),
            "text": clip_to(&n.text, chars),
        }))
    }

    /// A node the program may name: in the working set, or returned by a primitive.
    fn named(&self, name: &str) -> std::result::Result<NodeId, String> {
        let id = self
            .nav
            .resolve(name)
            .ok_or_else(|| format!("unknown id {name:?}"))?;
        let in_working = self.nav.ex.working.iter().any(|(w, _)| *w == id);
        if in_working || self.known.contains(&id) {
            Ok(id)
        } else {
            Err(format!(
                "{name} is not in the working set nor among the nodes this program was given"
            ))
        }
    }

    fn hits(&mut self, hits: Vec<(NodeId, f32)>) -> Answer {
        let mut out = Vec::with_capacity(hits.len());
        for (id, score) in hits {
            let mut v = self.node(id, HIT_CHARS)?;
            v["score"] = json!(score);
            out.push(v);
        }
        Ok(Value::Array(out))
    }
}

/// Code mode's view: the working set and what the program was given, under the query's
/// budgets; every read is a trajectory step.
impl View for Prims<'_, '_, '_> {
    fn grep(&mut self, pattern: &str, level: Option<Level>, limit: usize) -> Answer {
        let level = level.unwrap_or(Level::Full);
        let working: Vec<NodeId> = self.nav.ex.working.iter().map(|(id, _)| *id).collect();
        let within = self.nav.beneath(&working, level);
        let q = self.nav.ex.question(pattern);
        let hits = self
            .nav
            .ex
            .grep(&q, &[level], Some(&within), limit)
            .map_err(|e| e.to_string())?;
        self.hits(hits)
    }

    fn search(&mut self, query: &str, limit: usize) -> Answer {
        let q = self.nav.ex.question(query);
        let hits = self
            .nav
            .ex
            .grep(&q, &[Level::Detailed, Level::Full], None, limit)
            .map_err(|e| e.to_string())?;
        self.hits(hits)
    }

    fn peek(&mut self, name: &str) -> Answer {
        let id = self.named(name)?;
        if self.nav.ex.budget_left() == 0 {
            return Err("the query's token budget is spent".into());
        }
        let n = self
            .nav
            .ex
            .corpus
            .node(&id, self.nav.ex.now)
            .map_err(|e| e.to_string())?;
        self.nav.ex.tokens += n.tokens as u64;
        self.nav.ex.examine(id);
        self.nav.read.insert(id);
        let v = self.node(id, PEEK_CHARS)?;
        self.nav.ex.step(
            "peek",
            format!("program: {name} [{}], {} tokens", n.level, n.tokens),
        );
        Ok(v)
    }

    fn children(&mut self, name: &str) -> Answer {
        let id = self.named(name)?;
        let kids = self.nav.children_of(&id);
        self.nav.ex.step(
            "descend",
            format!("program: {name} → {} child node(s)", kids.len()),
        );
        let mut out = Vec::with_capacity(kids.len());
        for k in kids {
            out.push(self.node(k, HIT_CHARS)?);
        }
        Ok(Value::Array(out))
    }

    fn helper(&self) -> std::result::Result<&dyn ChatModel, String> {
        Ok(self.helper)
    }

    fn sub_calls_left(&self) -> Option<usize> {
        let ex = &self.nav.ex;
        Some(ex.cfg.max_sub_calls.saturating_sub(ex.sub_calls) as usize)
    }

    fn sub_called(&mut self, what: &str, asked: usize, failed: usize) {
        let ex = &mut self.nav.ex;
        ex.sub_calls += asked as u32;
        ex.step(
            what,
            format!("program: {asked} sub-call(s), {failed} failed"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_the_fenced_code_or_the_whole_reply() {
        assert_eq!(program_of("  1 + 1 \n"), "1 + 1");
        assert_eq!(
            program_of("Here:\n```rhai\nlet x = 1;\nx\n```\nDone."),
            "let x = 1;\nx"
        );
        assert_eq!(program_of("```\n#{stop: true}\n```"), "#{stop: true}");
    }
}
