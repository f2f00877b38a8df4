//! The LLM navigation policy: a root model chooses every step.
//!
//! Before the loop the question is frozen into an intent (entity, attribute, output type,
//! keywords). Each turn the model sees the question, the intent, its own hypothesis and
//! notes, the result of its last action and the working set (nodes named `n1`, `n2`, ...),
//! and answers with one JSON action. The model's output is untrusted: ids are resolved and
//! sanitised against the working set by [`Explorer`], malformed replies cost a turn, and
//! every budget (iterations, sub-calls, tokens, two turns without narrowing) holds. A
//! `finish` names quoted sentences; each is located byte-exactly in a FULL chunk, so the
//! answer is, as with the offline policy, only ever cited source text. An answer that is
//! not ready is refined with feedback while turns remain (`refinement_history` keeps each
//! round). When the model fails — errors after its retries, replies that never parse, no
//! verifiable quote — the offline policy answers instead and the fallback is counted.

use super::explore::Place;
use super::{Explorer, QueryResult};
use crate::error::Result;
use crate::index::Grep;
use crate::level::Level;
use crate::model::{ChatModel, prompts};
use crate::node::{NodeId, context_label};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

mod actions;
mod quote;
mod reply;

use reply::{Action, Intent, Turn, parse_json};

/// Working-set entries shown to the model per turn (the rest are listed as a count).
const SHOWN: usize = 30;
/// Characters of one node's text shown after a `peek`.
const PEEK_CHARS: usize = 2400;
/// Nodes read per `peek`.
const PEEK_MAX: usize = 6;
/// FULL chunks searched for one quote cited against a higher node.
const QUOTE_SCAN: usize = 64;

/// A verified citation: a FULL node and a byte range of its source.
type Cited = (NodeId, u64, u64);

struct Nav<'e, 'a> {
    ex: Explorer<'a>,
    question: &'e str,
    intent: Intent,
    hypothesis: String,
    notes: Vec<String>,
    observation: String,
    handles: HashMap<NodeId, String>,
    by_handle: HashMap<String, NodeId>,
    /// Nodes whose whole text the model has been shown.
    read: HashSet<NodeId>,
    /// Model outputs rejected (malformed, unknown ids, unverifiable quotes).
    invalid: u64,
    /// The best answer the model gave that was not ready, kept for when turns run out.
    best: Option<(Vec<Cited>, f64)>,
}

/// Answers `question` with `root` choosing the steps; `helper` serves `partition_map`.
pub async fn run(
    ex: Explorer<'_>,
    question: &str,
    root: &dyn ChatModel,
    helper: &dyn ChatModel,
) -> Result<QueryResult> {
    let mut nav = Nav {
        intent: Intent::default(),
        ex,
        question,
        hypothesis: String::new(),
        notes: Vec::new(),
        observation: String::new(),
        handles: HashMap::new(),
        by_handle: HashMap::new(),
        read: HashSet::new(),
        invalid: 0,
        best: None,
    };
    nav.ex.step(
        "policy",
        format!(
            "root model {}, prompts {}",
            root.identity(),
            prompts::NAV_VERSION
        ),
    );
    nav.intent = match nav.ask(root, prompts::intent(question)).await {
        Ok(Ok(v)) => match Intent::from_json(&v) {
            Ok(i) => i,
            Err(e) => {
                nav.invalid += 1;
                nav.ex.step("invalid", format!("intent: {e}"));
                Intent::heuristic(&nav.ex, question)
            }
        },
        Ok(Err(e)) => {
            nav.invalid += 1;
            nav.ex.step("invalid", format!("intent: {e}"));
            Intent::heuristic(&nav.ex, question)
        }
        Err(e) => return nav.fall_back(format!("the root model failed: {e}")),
    };
    let i = &nav.intent;
    nav.ex.step(
        "intent",
        format!(
            "entity {:?}, attribute {:?}, output {}, keywords {}",
            i.entity,
            i.attribute,
            i.output_type,
            i.keywords.join(", ")
        ),
    );
    nav.start()?;

    let mut bad_replies = 0;
    let mut refinements = 0;
    loop {
        let last = nav.ex.exhausted()
            || nav.ex.iterations + 1 >= nav.ex.cfg.max_iterations
            || nav.ex.budget_left() == 0;
        let state = nav.render(last)?;
        let turn = match nav.ask(root, prompts::navigate(&state)).await {
            Err(e) if nav.best.is_some() => {
                nav.ex.history.push(format!(
                    "the root model failed ({e}): the best answer so far stands"
                ));
                break;
            }
            Err(e) => return nav.fall_back(format!("the root model failed: {e}")),
            Ok(Err(e)) => Err(e),
            Ok(Ok(v)) => Turn::from_json(&v),
        };
        let turn = match turn {
            Ok(t) => {
                bad_replies = 0;
                t
            }
            Err(e) => {
                nav.invalid += 1;
                bad_replies += 1;
                nav.ex.step("invalid", e.clone());
                nav.account(false, &format!("invalid reply: {e}"));
                nav.observation = format!(
                    "Your last reply was rejected: {e}. Reply with one JSON object as described."
                );
                if bad_replies >= 2 || last {
                    break;
                }
                continue;
            }
        };
        if !turn.hypothesis.is_empty() {
            nav.hypothesis = turn.hypothesis.clone();
        }
        if !turn.learned.is_empty() {
            nav.notes.push(turn.learned.clone());
        }
        match turn.action {
            Action::Finish {
                quotes,
                confidence,
                ready,
            } => {
                let (cited, problems, share) = nav.resolve_quotes(&quotes)?;
                // Confidence is the model's, discounted by the share of its quotes that
                // could not be verified.
                let confidence = if confidence.is_finite() {
                    confidence.clamp(0.0, 1.0) * share
                } else {
                    0.0
                };
                if !problems.is_empty() {
                    nav.invalid += 1;
                    nav.ex.step("invalid", problems.join("; "));
                }
                if cited.is_empty() {
                    nav.account(false, "finish without a verifiable quote");
                    nav.observation = format!(
                        "Your answer was rejected: {}. Quote a sentence exactly from a node \
                         you have read (peek FULL nodes first).",
                        if problems.is_empty() {
                            "it has no quotes".to_string()
                        } else {
                            problems.join("; ")
                        }
                    );
                    if last {
                        break;
                    }
                    continue;
                }
                let ready_now = ready && confidence >= nav.ex.cfg.ready_threshold;
                if ready_now || last {
                    let confidence = if ready {
                        confidence
                    } else {
                        confidence.min(nav.ex.cfg.ready_threshold * 0.99)
                    };
                    nav.ex.history.push(format!(
                        "answer (confidence {confidence:.2}): {}",
                        nav.hypothesis
                    ));
                    return nav.finish(cited, confidence);
                }
                // Not ready: keep it, and refine with feedback while turns remain.
                let keep = nav.best.as_ref().is_none_or(|b| confidence >= b.1);
                if keep {
                    nav.best = Some((cited.clone(), confidence));
                }
                refinements += 1;
                nav.ex.history.push(format!(
                    "refinement {refinements}: not ready (confidence {confidence:.2}, {} citation(s)): {}",
                    cited.len(),
                    nav.hypothesis
                ));
                nav.ex.step(
                    "refine",
                    format!("answer not ready (confidence {confidence:.2}); exploring further"),
                );
                nav.account(false, "answer not ready");
                nav.observation = format!(
                    "Your answer is not ready yet (confidence {confidence:.2}). Find the missing \
                     evidence, then finish again.{}",
                    if problems.is_empty() {
                        String::new()
                    } else {
                        format!(" Problems: {}.", problems.join("; "))
                    }
                );
            }
            _ if last => {
                nav.invalid += 1;
                nav.ex
                    .step("invalid", "the last turn must finish".to_string());
                break;
            }
            Action::Peek(ids) => nav.peek(&ids)?,
            Action::Grep { pattern, level } => {
                nav.ex.embed_pattern(&pattern).await;
                nav.grep(&pattern, level)?
            }
            Action::Descend(ids) => nav.descend(&ids)?,
            Action::PartitionMap { ids, instruction } => {
                nav.partition_map(helper, &ids, &instruction).await?
            }
        }
    }
    match nav.best.take() {
        Some((cited, confidence)) => {
            if !nav
                .ex
                .history
                .last()
                .is_some_and(|h| h.contains("best answer so far"))
            {
                nav.ex
                    .history
                    .push("turns ran out: the best answer so far stands".into());
            }
            let cap = nav.ex.cfg.ready_threshold * 0.99;
            nav.finish(cited, confidence.min(cap))
        }
        None => nav.fall_back("the root model gave no verifiable answer".into()),
    }
}

impl<'e, 'a> Nav<'e, 'a> {
    /// One root-model call: `Err` when the call failed, `Ok(Err)` when the reply is not a
    /// JSON object.
    async fn ask(
        &mut self,
        model: &dyn ChatModel,
        req: crate::model::ChatRequest,
    ) -> std::result::Result<std::result::Result<Value, String>, crate::model::ModelError> {
        let reply = model.chat(req).await?;
        if reply.truncated {
            return Ok(Err("the reply was cut off at its token limit".into()));
        }
        Ok(parse_json(&reply.text))
    }

    fn handle(&mut self, id: NodeId) -> String {
        if let Some(h) = self.handles.get(&id) {
            return h.clone();
        }
        let h = format!("n{}", self.handles.len() + 1);
        self.handles.insert(id, h.clone());
        self.by_handle.insert(h.clone(), id);
        h
    }

    /// A model's name for a node: a handle (`n3`, `3`, `[n3]`) or a hex id prefix (≥ 8).
    fn resolve(&self, name: &str) -> Option<NodeId> {
        let n = name
            .trim()
            .trim_matches(|c: char| matches!(c, '[' | ']' | '(' | ')' | '"' | '\'' | '#'))
            .to_lowercase();
        if let Some(id) = self.by_handle.get(&n) {
            return Some(*id);
        }
        if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() {
            return self.by_handle.get(&format!("n{n}")).copied();
        }
        if n.len() >= 8 && n.chars().all(|c| c.is_ascii_hexdigit()) {
            let mut found = self
                .ex
                .places
                .keys()
                .filter(|id| id.to_hex().starts_with(&n));
            let first = found.next().copied();
            return if found.next().is_none() { first } else { None };
        }
        None
    }

    fn resolve_all(&self, names: &[String]) -> (Vec<NodeId>, Vec<String>) {
        let mut ids = Vec::new();
        let mut unknown = Vec::new();
        for n in names {
            match self.resolve(n) {
                Some(id) if !ids.contains(&id) => ids.push(id),
                Some(_) => {}
                None => unknown.push(n.clone()),
            }
        }
        (ids, unknown)
    }

    /// Records one turn: an iteration, whether it narrowed, and a history line.
    fn account(&mut self, narrowed: bool, what: &str) {
        self.ex.iterations += 1;
        if narrowed {
            self.ex.no_narrowing = 0;
        } else {
            self.ex.no_narrowing += 1;
        }
        let line = format!(
            "iteration {}: {what}: working set {}",
            self.ex.iterations,
            self.ex.working.len()
        );
        self.ex.history.push(line);
    }

    fn level_of(&self, id: &NodeId) -> Level {
        match self.ex.places.get(id) {
            Some(Place::Abstract(..)) => Level::Abstract,
            Some(Place::Summary(..)) => Level::Summary,
            Some(Place::Detailed(..)) => Level::Detailed,
            Some(Place::Full(..)) | None => Level::Full,
        }
    }

    /// The most detailed level in the working set.
    fn depth(&self) -> Level {
        self.ex
            .working
            .iter()
            .map(|(id, _)| self.level_of(id))
            .min()
            .unwrap_or(Level::Full)
    }

    /// `ids` ranked by BM25 for the question and the intent's keywords (ties: given order).
    fn rank(&self, ids: Vec<NodeId>) -> Result<Vec<(NodeId, f32)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let query = format!("{} {}", self.question, self.intent.keywords.join(" "));
        let scopes: Vec<String> = self.ex.plans.iter().map(|p| p.scope.clone()).collect();
        let mut levels: Vec<Level> = ids.iter().map(|id| self.level_of(id)).collect();
        levels.sort();
        levels.dedup();
        let hits = self.ex.engine.index().search(&Grep {
            text: &query,
            scopes: &scopes,
            levels: &levels,
            within: Some(&ids),
            limit: ids.len(),
        })?;
        let score: HashMap<NodeId, f32> = hits.into_iter().map(|h| (h.id, h.score)).collect();
        let mut ranked: Vec<(NodeId, f32)> = ids
            .into_iter()
            .map(|id| (id, score.get(&id).copied().unwrap_or(0.0)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(ranked)
    }

    /// The first observation: the ABSTRACT of each scope (or, when the configuration
    /// starts lower, the ranked groups).
    fn start(&mut self) -> Result<()> {
        let tops: Vec<NodeId> = self.ex.working.iter().map(|(id, _)| *id).collect();
        if self.ex.cfg.start_level == Level::Abstract {
            let nodes = self.ex.peek(&tops)?;
            self.read.extend(nodes.iter().map(|n| n.id));
            let mut obs = String::from("The ABSTRACT of each scope:\n");
            for n in &nodes {
                let h = self.handle(n.id);
                let _ = writeln!(
                    obs,
                    "{h} [abstract] {}:\n{}",
                    context_label(n),
                    clip(&n.text)
                );
            }
            self.observation = obs;
        } else {
            let groups = self.ex.descend(&tops);
            self.ex.working = self.rank(groups)?;
            self.observation = "The groups of each scope are listed below.".into();
        }
        Ok(())
    }

    fn render(&mut self, last: bool) -> Result<String> {
        let mut s = String::new();
        let i = self.intent.clone();
        let _ = writeln!(s, "Question: {}", self.question);
        let _ = writeln!(
            s,
            "Intent (fixed): entity: {}; attribute: {}; answer type: {}; keywords: {}",
            if i.entity.is_empty() { "-" } else { &i.entity },
            if i.attribute.is_empty() {
                "-"
            } else {
                &i.attribute
            },
            i.output_type,
            i.keywords.join(", ")
        );
        let _ = writeln!(
            s,
            "Hypothesis: {}",
            if self.hypothesis.is_empty() {
                "(none yet)"
            } else {
                &self.hypothesis
            }
        );
        if !self.notes.is_empty() {
            s.push_str("Learned so far:\n");
            let from = self.notes.len().saturating_sub(8);
            for n in &self.notes[from..] {
                let _ = writeln!(s, "- {n}");
            }
        }
        let _ = writeln!(s, "Last result:\n{}", self.observation.trim_end());
        let working: Vec<(NodeId, f32)> = self.ex.working.clone();
        let _ = writeln!(s, "Working set ({} node(s)):", working.len());
        for (id, _) in working.iter().take(SHOWN) {
            let n = self.ex.engine.node(id, self.ex.now)?;
            self.ex.examine(*id);
            let h = self.handle(*id);
            let preview: String = n
                .text
                .split_whitespace()
                .take(30)
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                s,
                "{h} [{}] {}{}: {preview}{}",
                n.level,
                if self.read.contains(id) {
                    "(read) "
                } else {
                    ""
                },
                context_label(&n),
                if n.text.split_whitespace().nth(30).is_some() {
                    " ..."
                } else {
                    ""
                }
            );
        }
        if working.len() > SHOWN {
            let _ = writeln!(s, "(and {} more, ranked lower)", working.len() - SHOWN);
        }
        let sub_left = self.ex.cfg.max_sub_calls.saturating_sub(self.ex.sub_calls);
        let _ = write!(
            s,
            "Turn {} of {}; {sub_left} helper call(s) left.",
            self.ex.iterations + 1,
            self.ex.cfg.max_iterations
        );
        if last {
            s.push_str(" This is your last turn: you must finish now, quoting your evidence.");
        }
        Ok(s)
    }

    fn finish(mut self, cited: Vec<Cited>, confidence: f64) -> Result<QueryResult> {
        let invalid = self.invalid;
        self.ex.step(
            "finish-llm",
            format!("{} verified citation(s)", cited.len()),
        );
        let mut r = self.ex.finish(cited, confidence)?;
        r.usage.invalid_outputs = invalid;
        Ok(r)
    }

    /// The offline policy answers instead; what the model did stays in the trajectory.
    fn fall_back(self, why: String) -> Result<QueryResult> {
        let Nav {
            ex,
            question,
            invalid,
            ..
        } = self;
        let mut mine = ex;
        mine.step("fallback", format!("{why}; the offline policy answers"));
        mine.history
            .push(format!("{why}; answered by the offline policy"));
        let mut fresh = Explorer::new(mine.engine, mine.plans.clone(), mine.cfg.clone(), mine.now);
        // The question's vector (hybrid grep) carries over.
        fresh.dense = mine.dense.take();
        let mut r = super::offline(fresh, question)?;
        let mut trajectory = std::mem::take(&mut mine.trajectory);
        trajectory.append(&mut r.trajectory);
        r.trajectory = trajectory;
        let mut history = std::mem::take(&mut mine.history);
        history.append(&mut r.refinement_history);
        r.refinement_history = history;
        let theirs: HashSet<String> = r.nodes_examined.iter().cloned().collect();
        let mut examined: Vec<String> = mine
            .examined
            .iter()
            .map(NodeId::to_hex)
            .filter(|h| !theirs.contains(h))
            .collect();
        examined.append(&mut r.nodes_examined);
        r.nodes_examined = examined;
        r.iterations += mine.iterations;
        r.tokens_processed += mine.tokens;
        r.sub_calls_made += mine.sub_calls;
        r.usage.invalid_outputs = invalid;
        r.usage.fallbacks = 1;
        Ok(r)
    }
}

fn clip(t: &str) -> &str {
    clip_to(t, PEEK_CHARS)
}

fn clip_to(t: &str, max: usize) -> &str {
    if t.len() <= max {
        return t;
    }
    let mut end = max;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    &t[..end]
}
