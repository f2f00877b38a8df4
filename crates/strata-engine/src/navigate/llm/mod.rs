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
//! round). Before an answer is given, the evidence check ([`check`]) holds it against the
//! question and the offline policy's evidence: an answer the evidence does not support is
//! never ready. When the model fails — errors after its retries, replies that never parse,
//! no verifiable quote, only unsupported answers — the offline policy answers instead and
//! the fallback is counted.

use super::{Cited, Explorer, QueryResult};
use crate::corpus::{Place, Question};
use crate::error::Result;
use crate::level::Level;
use crate::model::usage::{self, Outcome};
use crate::model::{ChatModel, ModelError, prompts};
use crate::node::NodeId;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

mod actions;
mod check;
mod code;
mod quote;
mod reply;
mod set;
mod view;

use check::{Evidence, Verdict};
use quote::Resolved;

use reply::{Action, Intent, QuoteRef, Turn, parse_json, salvage};

pub(crate) use code::run as run_code;

/// Working-set entries shown to the model per turn (the rest are listed as a count).
const SHOWN: usize = 30;
/// Characters of one node's text shown after a `peek`.
const PEEK_CHARS: usize = 2400;
/// Nodes read per `peek`.
const PEEK_MAX: usize = 6;
/// FULL chunks searched for one quote cited against a higher node.
const QUOTE_SCAN: usize = 64;

/// An answer the model gave that was not ready, kept for when turns run out.
struct Draft {
    cited: Vec<Cited>,
    confidence: f64,
}

struct Nav<'e, 'a> {
    ex: Explorer<'a>,
    question: &'e str,
    intent: Intent,
    /// The question and the intent's keywords, analysed once: what nodes are ranked by.
    ranking: Question,
    /// The question alone, analysed once: what answers are checked against.
    asked: Question,
    hypothesis: String,
    notes: Vec<String>,
    observation: String,
    handles: HashMap<NodeId, String>,
    by_handle: HashMap<String, NodeId>,
    /// Nodes whose whole text the model has been shown.
    read: HashSet<NodeId>,
    /// Model outputs rejected (malformed, unknown ids, unverifiable quotes).
    /// Replies in a row that could not be used (two end the loop).
    bad_replies: u32,
    /// Answers that were not ready and were sent back for refinement.
    refinements: u32,
    /// The best answer the model gave that was not ready, kept for when turns run out.
    best: Option<Draft>,
    /// The offline policy's evidence for the question, once an answer has been checked.
    evidence: Option<Evidence>,
    /// Answers sent back by the evidence check (one is; the next decides).
    checks_sent_back: u32,
}

/// A root-model reply: a JSON object, or why it cannot be used.
enum Reply {
    Json(Value),
    Unusable(String),
}

/// What the loop does after a turn.
enum Flow {
    Continue,
    /// Stop asking: the best answer so far stands, else the offline policy answers.
    Stop,
    /// The verified answer, with its confidence.
    Finish(Vec<Cited>, f64),
    FallBack(String),
    /// The evidence check gives the offline evidence instead (why).
    Offline(String),
}

/// The outcome of asking for the next turn.
enum Next {
    Act(Turn),
    Then(Flow),
}

/// Answers `question` with `root` choosing the steps; `helper` serves `partition_map`.
pub(crate) async fn run(
    ex: Explorer<'_>,
    question: &str,
    root: &dyn ChatModel,
    helper: &dyn ChatModel,
) -> Result<QueryResult> {
    let mut nav = Nav::new(ex, question);
    nav.ex.step(
        "policy",
        format!(
            "root model {}, prompts {}",
            root.identity(),
            prompts::NAV_VERSION
        ),
    );
    // A set question: the candidates are fanned out to the helper and aggregated.
    if super::offline::wants_set(&nav.ex, &nav.asked) {
        return nav.answer_set(helper).await;
    }
    if let Err(e) = nav.freeze_intent(root).await {
        return nav.fall_back(failed(&e));
    }
    nav.start(helper).await?;
    loop {
        let last = nav.last_turn();
        let flow = match nav.next_turn(root, last).await? {
            Next::Act(turn) => nav.act(turn, helper, last).await?,
            Next::Then(flow) => flow,
        };
        match flow {
            Flow::Continue => {}
            Flow::Stop => break,
            Flow::Finish(cited, confidence) => return nav.finish(cited, confidence),
            Flow::FallBack(why) => return nav.fall_back(why),
            Flow::Offline(why) => return nav.answer_offline(why),
        }
    }
    nav.conclude()
}

impl<'e, 'a> Nav<'e, 'a> {
    fn new(ex: Explorer<'a>, question: &'e str) -> Self {
        let asked = ex.question(question);
        Nav {
            asked,
            ex,
            question,
            intent: Intent::default(),
            ranking: Question::default(),
            hypothesis: String::new(),
            notes: Vec::new(),
            observation: String::new(),
            handles: HashMap::new(),
            by_handle: HashMap::new(),
            read: HashSet::new(),
            bad_replies: 0,
            refinements: 0,
            best: None,
            evidence: None,
            checks_sent_back: 0,
        }
    }

    /// Asks the root model what the question asks (an invalid reply: the question's own
    /// words stand in). Err only when the model itself failed.
    async fn freeze_intent(&mut self, root: &dyn ChatModel) -> Result<(), ModelError> {
        let question = self.question;
        self.intent = match self.ask(root, prompts::intent(question)).await? {
            Reply::Json(v) => match Intent::from_json(&v) {
                Ok(i) => i,
                Err(e) => {
                    self.note_invalid();
                    self.ex.step("invalid", format!("intent: {e}"));
                    Intent::heuristic(&self.ex, question)
                }
            },
            Reply::Unusable(e) => {
                self.note_invalid();
                self.ex.step("invalid", format!("intent: {e}"));
                Intent::heuristic(&self.ex, question)
            }
        };
        let i = &self.intent;
        let detail = format!(
            "entity {:?}, attribute {:?}, output {}, keywords {}",
            i.entity,
            i.attribute,
            i.output_type,
            i.keywords.join(", ")
        );
        self.ex.step("intent", detail);
        let ranking = format!("{} {}", self.question, self.intent.keywords.join(" "));
        self.ranking = self.ex.question(&ranking);
        Ok(())
    }

    /// True when this turn must finish: a budget is spent or this is the last iteration
    /// (the limit is noted: the result says what ended the run).
    fn last_turn(&mut self) -> bool {
        let forced = if let Some(reason) = self.ex.stop.reason() {
            Some(reason)
        } else if self.ex.no_narrowing >= 2 {
            Some("no_narrowing")
        } else if self.ex.own_iterations() + 1 >= self.ex.cfg.max_iterations {
            Some("max_iterations")
        } else if self.ex.budget_left() == 0 {
            Some("max_tokens")
        } else {
            None
        };
        if forced.is_some() {
            self.ex.forced = forced;
        }
        forced.is_some()
    }

    /// Shows the model the state and reads its next action. A reply that cannot be used
    /// costs a turn (two in a row, or on the last turn, end the loop).
    async fn next_turn(&mut self, root: &dyn ChatModel, last: bool) -> Result<Next> {
        let state = self.render(last)?;
        let parsed = match self.ask(root, prompts::navigate(&state)).await {
            Err(e) if self.best.is_some() => {
                self.ex
                    .history
                    .push(format!("{}: the best answer so far stands", failed(&e)));
                return Ok(Next::Then(Flow::Stop));
            }
            Err(e) => {
                return Ok(Next::Then(Flow::FallBack(failed(&e))));
            }
            Ok(Reply::Unusable(e)) => Err(e),
            Ok(Reply::Json(v)) => Turn::from_json(&v),
        };
        match parsed {
            Ok(t) => {
                self.bad_replies = 0;
                Ok(Next::Act(t))
            }
            Err(e) => {
                self.note_invalid();
                self.bad_replies += 1;
                self.ex.step("invalid", e.clone());
                self.account(false, &format!("invalid reply: {e}"));
                self.observation = format!(
                    "Your last reply was rejected: {e}. Reply with one JSON object as described."
                );
                Ok(Next::Then(if self.bad_replies >= 2 || last {
                    Flow::Stop
                } else {
                    Flow::Continue
                }))
            }
        }
    }

    /// Carries out one turn's action (the last turn may only finish).
    async fn act(&mut self, turn: Turn, helper: &dyn ChatModel, last: bool) -> Result<Flow> {
        if !turn.hypothesis.is_empty() {
            self.hypothesis = turn.hypothesis.clone();
        }
        if !turn.learned.is_empty() {
            self.notes.push(turn.learned.clone());
        }
        match turn.action {
            Action::Finish {
                quotes,
                confidence,
                ready,
            } => return self.answer(&quotes, confidence, ready, last),
            _ if last => {
                self.note_invalid();
                self.ex
                    .step("invalid", "the last turn must finish".to_string());
                return Ok(Flow::Stop);
            }
            Action::Peek(ids) => self.peek(&ids)?,
            Action::Grep { pattern, level } => {
                self.ex.embed_pattern(&pattern).await;
                self.grep(&pattern, level)?
            }
            Action::Descend(ids) => self.descend(&ids)?,
            Action::PartitionMap { ids, instruction } => {
                self.partition_map(helper, &ids, &instruction).await?
            }
        }
        Ok(Flow::Continue)
    }

    /// A `finish`: its quotes verified, then the answer given (ready, or the last turn),
    /// refused (nothing verifiable), or kept and sent back for refinement.
    fn answer(
        &mut self,
        quotes: &[QuoteRef],
        confidence: f64,
        ready: bool,
        last: bool,
    ) -> Result<Flow> {
        let Resolved {
            cited,
            problems,
            share,
        } = self.resolve_quotes(quotes)?;
        // Confidence is the model's, discounted by the share of its quotes that could not
        // be verified.
        let confidence = if confidence.is_finite() {
            confidence.clamp(0.0, 1.0) * share
        } else {
            0.0
        };
        if !problems.is_empty() {
            self.note_invalid();
            self.ex.step("invalid", problems.join("; "));
        }
        if cited.is_empty() {
            self.account(false, "finish without a verifiable quote");
            self.observation = format!(
                "Your answer was rejected: {}. Quote a sentence exactly from a node \
                 you have read (peek FULL nodes first).",
                if problems.is_empty() {
                    "it has no quotes".to_string()
                } else {
                    problems.join("; ")
                }
            );
            return Ok(if last { Flow::Stop } else { Flow::Continue });
        }
        let ready_now = ready && confidence >= self.ex.cfg.ready_threshold;
        if ready_now || last {
            let cap = self.ex.cfg.ready_threshold * 0.99;
            let confidence = if ready {
                confidence
            } else {
                confidence.min(cap)
            };
            return Ok(match self.check(&cited, last)? {
                Verdict::Accept => {
                    self.ex.history.push(format!(
                        "answer (confidence {confidence:.2}): {}",
                        self.hypothesis
                    ));
                    Flow::Finish(cited, confidence)
                }
                Verdict::KeepNotReady(why) => {
                    let confidence = confidence.min(cap);
                    self.ex.history.push(format!(
                        "answer (confidence {confidence:.2}), not ready: {why}: {}",
                        self.hypothesis
                    ));
                    Flow::Finish(cited, confidence)
                }
                Verdict::Refine(why) => {
                    self.keep_draft(cited, confidence.min(cap))?;
                    self.send_back(&why)?;
                    Flow::Continue
                }
                Verdict::Offline(why) => Flow::Offline(why),
            });
        }
        self.refine(cited, confidence, &problems)?;
        Ok(Flow::Continue)
    }

    /// Keeps a not-ready answer as the best so far (if it is), unless the evidence does
    /// not support it at all.
    fn keep_draft(&mut self, cited: Vec<Cited>, confidence: f64) -> Result<()> {
        if self.support_of(&cited)?.unsupported().is_some() {
            return Ok(());
        }
        if self
            .best
            .as_ref()
            .is_none_or(|b| confidence >= b.confidence)
        {
            self.best = Some(Draft { cited, confidence });
        }
        Ok(())
    }

    /// An answer that is not ready: kept (if it is the best so far) and sent back with
    /// feedback while turns remain.
    fn refine(&mut self, cited: Vec<Cited>, confidence: f64, problems: &[String]) -> Result<()> {
        let n = cited.len();
        let cited_copy = cited.clone();
        self.keep_draft(cited, confidence)?;
        self.refinements += 1;
        if let Ok(text) = self.ex.answer_text(&cited_copy) {
            self.ex.drafts.push(text);
        }
        self.ex.history.push(format!(
            "refinement {}: not ready (confidence {confidence:.2}, {n} citation(s)): {}",
            self.refinements, self.hypothesis
        ));
        self.ex.step(
            "refine",
            format!("answer not ready (confidence {confidence:.2}); exploring further"),
        );
        self.account(false, "answer not ready");
        self.observation = format!(
            "Your answer is not ready yet (confidence {confidence:.2}). Find the missing \
             evidence, then finish again.{}",
            if problems.is_empty() {
                String::new()
            } else {
                format!(" Problems: {}.", problems.join("; "))
            }
        );
        Ok(())
    }

    /// The loop ended without a ready answer: the best one so far stands, else the offline
    /// policy answers.
    fn conclude(mut self) -> Result<QueryResult> {
        match self.best.take() {
            Some(Draft { cited, confidence }) => {
                if let Verdict::Offline(why) = self.check(&cited, true)? {
                    return self.answer_offline(format!("the best answer so far: {why}"));
                }
                // The best draft is the answer now, not an earlier one.
                if let Ok(t) = self.ex.answer_text(&cited)
                    && let Some(i) = self.ex.drafts.iter().rposition(|d| *d == t)
                {
                    self.ex.drafts.remove(i);
                }
                if !self
                    .ex
                    .history
                    .last()
                    .is_some_and(|h| h.contains("best answer so far"))
                {
                    self.ex
                        .history
                        .push("turns ran out: the best answer so far stands".into());
                }
                let cap = self.ex.cfg.ready_threshold * 0.99;
                self.finish(cited, confidence.min(cap))
            }
            None => self.fall_back("the root model gave no verifiable answer".into()),
        }
    }

    /// One root-model call: `Err` when the call failed.
    async fn ask(
        &mut self,
        model: &dyn ChatModel,
        req: crate::model::ChatRequest,
    ) -> Result<Reply, ModelError> {
        let reply = model.chat(req).await?;
        if reply.truncated {
            // Small models run on (long quotes in a `peek`): the fields written before the
            // cut are still the model's choice.
            if let Some(v) = salvage(&reply.text) {
                let fields = v.as_object().map_or(0, |o| o.len());
                self.ex.step(
                    "salvage",
                    format!(
                        "the reply was cut off at its token limit; its {fields} complete field(s) are used"
                    ),
                );
                return Ok(Reply::Json(v));
            }
            return Ok(Reply::Unusable(
                "the reply was cut off at its token limit".into(),
            ));
        }
        Ok(match parse_json(&reply.text) {
            Ok(v) => Reply::Json(v),
            Err(e) => Reply::Unusable(e),
        })
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
        match self.ex.trees.place(id) {
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

    /// `ids` ranked for the question and the intent's keywords, through the explorer's
    /// retrieval seam (ties: given order).
    fn rank(&mut self, ids: Vec<NodeId>) -> Result<Vec<(NodeId, f32)>> {
        self.ex.rank(&self.ranking, ids)
    }

    /// Counts a model reply that validation rejected.
    fn note_invalid(&self) {
        usage::note(Outcome::Invalid);
    }

    fn finish(mut self, cited: Vec<Cited>, confidence: f64) -> Result<QueryResult> {
        self.ex.step(
            "finish-llm",
            format!("{} verified citation(s)", cited.len()),
        );
        self.ex.finish(cited, confidence)
    }

    /// The offline policy answers instead; what the model did stays in the trajectory.
    /// When the evidence check already ran it, its selection is the answer.
    fn fall_back(self, why: String) -> Result<QueryResult> {
        if self.evidence.is_some() {
            return self.answer_offline(why);
        }
        let Nav {
            mut ex, question, ..
        } = self;
        ex.step("fallback", format!("{why}; the offline policy answers"));
        ex.history
            .push(format!("{why}; answered by the offline policy"));
        usage::note(Outcome::Fallback);
        super::offline(ex.restart(), question)
    }
}

/// Why a root-model call gave nothing: it failed, or the query was stopped.
fn failed(e: &ModelError) -> String {
    match e {
        ModelError::Stopped(why) => why.clone(),
        e => format!("the root model failed: {e}"),
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
