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

use super::{Explorer, Place, QueryResult, context_label};
use crate::error::Result;
use crate::index::Grep;
use crate::level::Level;
use crate::model::{ChatModel, prompts};
use crate::node::NodeId;
use crate::text;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// Working-set entries shown to the model per turn (the rest are listed as a count).
const SHOWN: usize = 30;
/// Characters of one node's text shown after a `peek`.
const PEEK_CHARS: usize = 2400;
/// Nodes read per `peek`.
const PEEK_MAX: usize = 6;
/// FULL chunks searched for one quote cited against a higher node.
const QUOTE_SCAN: usize = 64;

/// What the question asks, fixed before the loop so that later turns cannot drift.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Intent {
    pub entity: String,
    pub attribute: String,
    pub output_type: String,
    pub keywords: Vec<String>,
}

const OUTPUT_TYPES: [&str; 6] = ["number", "date", "name", "list", "yes_no", "text"];

/// A string field of a model's JSON reply, trimmed; absent or not a string is "".
fn str_field(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string()
}

impl Intent {
    fn from_json(v: &Value) -> std::result::Result<Intent, String> {
        let s = |k: &str| str_field(v, k);
        let output_type = s("output_type").to_lowercase().replace([' ', '-'], "_");
        let keywords: Vec<String> = match v.get("keywords") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .take(8)
                .collect(),
            Some(Value::String(k)) => k
                .split([',', ' '])
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .take(8)
                .collect(),
            _ => Vec::new(),
        };
        let i = Intent {
            entity: s("entity"),
            attribute: s("attribute"),
            output_type: if OUTPUT_TYPES.contains(&output_type.as_str()) {
                output_type
            } else {
                "text".into()
            },
            keywords,
        };
        if i.attribute.is_empty() && i.entity.is_empty() && i.keywords.is_empty() {
            return Err("the intent names nothing".into());
        }
        Ok(i)
    }

    /// The intent of `question` without a model: its searchable words.
    fn heuristic(ex: &Explorer<'_>, question: &str) -> Intent {
        Intent {
            entity: String::new(),
            attribute: question.trim().to_string(),
            output_type: "text".into(),
            keywords: ex
                .engine
                .index()
                .analyze(question)
                .into_iter()
                .take(6)
                .collect(),
        }
    }
}

/// The first JSON object in a model's reply (code fences and prose around it ignored).
fn parse_json(reply: &str) -> std::result::Result<Value, String> {
    let start = reply.find('{').ok_or("no JSON object in the reply")?;
    let end = reply.rfind('}').ok_or("no JSON object in the reply")?;
    if end < start {
        return Err("no JSON object in the reply".into());
    }
    let v: Value =
        serde_json::from_str(&reply[start..=end]).map_err(|e| format!("malformed JSON: {e}"))?;
    if !v.is_object() {
        return Err("the reply is not a JSON object".into());
    }
    Ok(v)
}

/// One quoted piece of evidence.
#[derive(Clone, Debug, PartialEq)]
struct QuoteRef {
    id: String,
    quote: String,
}

/// A validated action.
#[derive(Clone, Debug, PartialEq)]
enum Action {
    Peek(Vec<String>),
    Grep {
        pattern: String,
        level: Level,
    },
    Descend(Vec<String>),
    PartitionMap {
        ids: Vec<String>,
        instruction: String,
    },
    Finish {
        quotes: Vec<QuoteRef>,
        confidence: f64,
        ready: bool,
    },
}

/// A turn's reply: the action plus the model's running notes.
#[derive(Clone, Debug, PartialEq)]
struct Turn {
    hypothesis: String,
    learned: String,
    action: Action,
}

fn ids_of(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| match x {
                Value::String(s) => Some(s.trim().to_string()),
                Value::Number(n) => Some(format!("n{n}")),
                _ => None,
            })
            .filter(|s| !s.is_empty())
            .collect(),
        Some(Value::String(s)) => s
            .split([',', ' '])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

impl Turn {
    /// Lenient about shape (numbers as strings, ids as a list or a string), strict about
    /// meaning: an unknown action or a missing argument is an error.
    fn from_json(v: &Value) -> std::result::Result<Turn, String> {
        let s = |k: &str| str_field(v, k);
        let action = s("action").to_lowercase();
        let ids = ids_of(v.get("ids"));
        let need_ids = |ids: Vec<String>| {
            if ids.is_empty() {
                Err(format!("`{action}` needs `ids` from the working set"))
            } else {
                Ok(ids)
            }
        };
        let action = match action.as_str() {
            "peek" => Action::Peek(need_ids(ids)?),
            "descend" => Action::Descend(need_ids(ids)?),
            "grep" | "search" => {
                let pattern = s("pattern");
                if pattern.is_empty() {
                    return Err("`grep` needs a `pattern`".into());
                }
                let level = match s("level").to_lowercase().as_str() {
                    "summary" => Level::Summary,
                    "detailed" => Level::Detailed,
                    _ => Level::Full,
                };
                Action::Grep { pattern, level }
            }
            "partition_map" | "map" => Action::PartitionMap {
                ids: need_ids(ids)?,
                instruction: s("instruction"),
            },
            "finish" | "answer" => {
                let quotes = match v.get("quotes") {
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(|q| {
                            let id = match q.get("id") {
                                Some(Value::String(s)) => s.trim().to_string(),
                                Some(Value::Number(n)) => format!("n{n}"),
                                _ => return None,
                            };
                            let quote = q.get("quote").and_then(Value::as_str).unwrap_or("");
                            Some(QuoteRef {
                                id,
                                quote: quote.trim().to_string(),
                            })
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let confidence = match v.get("confidence") {
                    Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
                    Some(Value::String(s)) => s.trim().parse().unwrap_or(0.0),
                    _ => 0.5,
                };
                let ready = match v.get("ready") {
                    Some(Value::Bool(b)) => *b,
                    Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
                    _ => true,
                };
                Action::Finish {
                    quotes,
                    confidence,
                    ready,
                }
            }
            "" => return Err("the reply names no `action`".into()),
            other => {
                return Err(format!(
                    "unknown action `{other}` (use peek, grep, descend, partition_map or finish)"
                ));
            }
        };
        Ok(Turn {
            hypothesis: s("hypothesis"),
            learned: s("learned"),
            action,
        })
    }
}

/// Where `quote` is in `text`, as a byte range: verbatim, then ignoring case and spacing,
/// then the sentence sharing most of its words (at least 60 % of them).
fn locate(text: &str, quote: &str) -> Option<(usize, usize)> {
    locate_verbatim(text, quote).or_else(|| locate_by_words(text, quote))
}

fn unquote(quote: &str) -> &str {
    quote
        .trim()
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’'))
        .trim()
}

/// `quote` in `text` verbatim, or ignoring case and runs of whitespace.
fn locate_verbatim(text: &str, quote: &str) -> Option<(usize, usize)> {
    let q = unquote(quote);
    if q.is_empty() {
        return None;
    }
    if let Some(p) = text.find(q) {
        return Some((p, p + q.len()));
    }
    // Normalised: lower case, runs of whitespace as one space; keep a map back to bytes.
    let mut norm = String::new();
    let mut map = Vec::new();
    let mut space = true;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !space {
                norm.push(' ');
                map.push(i);
                space = true;
            }
        } else {
            for l in c.to_lowercase() {
                let before = norm.len();
                norm.push(l);
                map.extend(std::iter::repeat_n(i, norm.len() - before));
            }
            space = false;
        }
    }
    let qn = q
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    if let Some(p) = norm.find(&qn) {
        let start = map[p];
        let last = map[p + qn.len() - 1];
        let end = last + text[last..].chars().next().map_or(1, char::len_utf8);
        return Some((start, end));
    }
    None
}

/// The sentence of `text` that shares most of `quote`'s content words (at least 60 %).
fn locate_by_words(text: &str, quote: &str) -> Option<(usize, usize)> {
    let qwords: HashSet<String> = text::content_words(unquote(quote)).collect();
    if qwords.is_empty() {
        return None;
    }
    let mut best: Option<(f64, usize, usize)> = None;
    for s in text::sentences(text) {
        let raw = &text[s.start..s.end];
        let words: HashSet<String> = text::content_words(raw).collect();
        let shared = qwords.intersection(&words).count();
        let score = shared as f64 / qwords.len() as f64;
        if shared >= qwords.len().min(2) && score >= 0.6 && best.is_none_or(|b| score > b.0) {
            let start = s.start + (raw.len() - raw.trim_start().len());
            let end = s.end - (raw.len() - raw.trim_end().len());
            best = Some((score, start, end));
        }
    }
    best.map(|(_, s, e)| (s, e))
}

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

    fn peek(&mut self, names: &[String]) -> Result<()> {
        let (ids, unknown) = self.resolve_all(names);
        let ids: Vec<NodeId> = self.ex.sanitise(&ids).into_iter().take(PEEK_MAX).collect();
        if ids.is_empty() {
            return self.reject(&format!(
                "peek: none of {} is in the working set",
                names.join(", ")
            ));
        }
        let nodes = self.ex.peek(&ids)?;
        self.read.extend(nodes.iter().map(|n| n.id));
        let mut obs = String::new();
        for n in &nodes {
            let h = self.handle(n.id);
            let _ = writeln!(
                obs,
                "{h} [{}] {}:\n{}",
                n.level,
                context_label(n),
                clip(&n.text)
            );
        }
        if !unknown.is_empty() {
            self.invalid += 1;
            let _ = writeln!(obs, "(unknown ids ignored: {})", unknown.join(", "));
        }
        self.observation = obs;
        self.account(false, &format!("peek {} node(s)", nodes.len()));
        Ok(())
    }

    fn grep(&mut self, pattern: &str, level: Level) -> Result<()> {
        let working: Vec<NodeId> = self.ex.working.iter().map(|(id, _)| *id).collect();
        let within = self.beneath(&working, level);
        let hits = self.ex.grep(
            pattern,
            &[level],
            Some(&within),
            self.ex.cfg.top_chunks.max(self.ex.cfg.min_keep) * 2,
        )?;
        if hits.is_empty() {
            self.observation = format!(
                "grep {pattern:?} at {level}: no hits beneath the working set. Try other words."
            );
            self.account(false, &format!("grep {pattern:?}: no hits"));
            return Ok(());
        }
        let (before, depth) = (self.ex.working.len(), self.depth());
        self.ex.working = hits;
        let narrowed = self.depth() < depth || self.ex.working.len() < before;
        self.observation = format!(
            "grep {pattern:?} at {level}: {} hit(s); they are the working set now, best first.",
            self.ex.working.len()
        );
        self.account(narrowed, &format!("grep {pattern:?} at {level}"));
        Ok(())
    }

    /// `ids` and every node beneath them at `level`.
    fn beneath(&self, ids: &[NodeId], level: Level) -> Vec<NodeId> {
        let mut out = Vec::new();
        for id in ids {
            let Some(place) = self.ex.places.get(id) else {
                continue;
            };
            let (pi, chunks): (usize, Vec<usize>) = match *place {
                Place::Abstract(pi) => (pi, (0..self.ex.plans[pi].chunks.len()).collect()),
                Place::Summary(pi, gi) => (pi, self.ex.plans[pi].groups[gi].chunks.clone()),
                Place::Detailed(pi, ci) | Place::Full(pi, ci) => (pi, vec![ci]),
            };
            let p = &self.ex.plans[pi];
            match level {
                Level::Summary => {
                    let mut gs: Vec<usize> = chunks.iter().map(|&ci| p.chunks[ci].group).collect();
                    gs.dedup();
                    out.extend(gs.into_iter().map(|gi| p.groups[gi].summary));
                }
                Level::Detailed => out.extend(chunks.iter().map(|&ci| p.chunks[ci].detailed)),
                _ => out.extend(chunks.iter().map(|&ci| p.chunks[ci].full)),
            }
        }
        let mut seen = HashSet::new();
        out.retain(|id| seen.insert(*id));
        out
    }

    fn descend(&mut self, names: &[String]) -> Result<()> {
        let (ids, unknown) = self.resolve_all(names);
        let mut chosen = self.ex.sanitise(&ids);
        if chosen.is_empty() {
            return self.reject(&format!(
                "descend: none of {} is in the working set",
                names.join(", ")
            ));
        }
        // Below a FULL node is its text: descending into FULL nodes reads them.
        if chosen.iter().all(|id| self.level_of(id) == Level::Full) {
            let handles: Vec<String> = chosen.iter().map(|id| self.handle(*id)).collect();
            return self.peek(&handles);
        }
        // Safeguard: keep at least `min_keep` nodes in play, best of the rest first.
        for (id, _) in self.ex.working.clone() {
            if chosen.len() >= self.ex.cfg.min_keep {
                break;
            }
            if !chosen.contains(&id) {
                chosen.push(id);
            }
        }
        let (before, depth) = (self.ex.working.len(), self.depth());
        let children = self.ex.descend(&chosen);
        if children.is_empty() {
            self.observation =
                "descend: FULL nodes have no children; peek them to read them.".into();
            self.account(false, "descend into FULL nodes");
            return Ok(());
        }
        self.ex.working = self.rank(children)?;
        let narrowed = self.depth() < depth || self.ex.working.len() < before;
        self.observation = format!(
            "descend into {} node(s): {} child node(s) are the working set now, ranked by the \
             question.{}",
            chosen.len(),
            self.ex.working.len(),
            if unknown.is_empty() {
                String::new()
            } else {
                format!(" Unknown ids ignored: {}.", unknown.join(", "))
            }
        );
        if !unknown.is_empty() {
            self.invalid += 1;
        }
        self.account(narrowed, &format!("descend into {} node(s)", chosen.len()));
        Ok(())
    }

    async fn partition_map(
        &mut self,
        helper: &dyn ChatModel,
        names: &[String],
        instruction: &str,
    ) -> Result<()> {
        let (ids, unknown) = self.resolve_all(names);
        let left = self.ex.cfg.max_sub_calls.saturating_sub(self.ex.sub_calls) as usize;
        let ids: Vec<NodeId> = self.ex.sanitise(&ids).into_iter().take(left).collect();
        if ids.is_empty() {
            let why = if left == 0 {
                "partition_map: no helper calls left".to_string()
            } else {
                format!(
                    "partition_map: none of {} is in the working set",
                    names.join(", ")
                )
            };
            return self.reject(&why);
        }
        let instruction = if instruction.trim().is_empty() {
            self.question.to_string()
        } else {
            instruction.trim().to_string()
        };
        let mut nodes = Vec::with_capacity(ids.len());
        for id in &ids {
            let n = self.ex.engine.node(id, self.ex.now)?;
            self.ex.tokens += n.tokens as u64;
            self.ex.examine(*id);
            nodes.push(n);
        }
        let calls = nodes
            .iter()
            .map(|n| helper.chat(prompts::partition(&instruction, &context_label(n), &n.text)));
        // Concurrent; the shared limiter caps how many are in flight.
        let replies = futures::future::join_all(calls).await;
        self.ex.sub_calls += ids.len() as u32;
        let mut obs = format!(
            "partition_map {instruction:?} over {} node(s):\n",
            ids.len()
        );
        let mut failed = 0;
        for (n, r) in nodes.iter().zip(replies) {
            let h = self.handle(n.id);
            match r {
                Ok(r) => {
                    let _ = writeln!(obs, "{h}: {}", clip(r.text.trim()));
                }
                Err(e) => {
                    failed += 1;
                    let _ = writeln!(obs, "{h}: (the helper failed: {e})");
                }
            }
        }
        if !unknown.is_empty() {
            self.invalid += 1;
            let _ = writeln!(obs, "(unknown ids ignored: {})", unknown.join(", "));
        }
        self.ex.step(
            "partition_map",
            format!(
                "{} sub-call(s), {failed} failed: {instruction:?}",
                ids.len()
            ),
        );
        self.observation = obs;
        self.account(false, &format!("partition_map over {} node(s)", ids.len()));
        Ok(())
    }

    /// An action that named nothing usable: costs a turn, tells the model why.
    fn reject(&mut self, why: &str) -> Result<()> {
        self.invalid += 1;
        self.ex.step("invalid", why.to_string());
        self.observation = format!("{why}. Use ids from the working set listed below.");
        self.account(false, why);
        Ok(())
    }

    /// Locates each quote in a FULL chunk at or beneath its node. Returns the verified
    /// (FULL node, start, end) spans and what could not be verified.
    fn resolve_quotes(&mut self, quotes: &[QuoteRef]) -> Result<(Vec<Cited>, Vec<String>, f64)> {
        let mut cited: Vec<Cited> = Vec::new();
        let mut problems = Vec::new();
        let considered = quotes.len().min(self.ex.cfg.max_citations.max(1) * 2);
        let mut verified = 0usize;
        for q in &quotes[..considered] {
            let Some(id) = self.resolve(&q.id) else {
                problems.push(format!("unknown id {:?}", q.id));
                continue;
            };
            let fulls = self.beneath(&[id], Level::Full);
            // The quote, or for a bare id the model's answer, names the sentence.
            let wanted = if q.quote.is_empty() {
                self.hypothesis.clone()
            } else {
                q.quote.clone()
            };
            let mut found = None;
            for f in fulls.iter().take(QUOTE_SCAN) {
                let n = self.ex.engine.node(f, self.ex.now)?;
                if let Some((s, e)) = locate(&n.text, &wanted) {
                    let base = n.citations[0].start;
                    found = Some((*f, base + s as u64, base + e as u64));
                    break;
                }
                if q.quote.is_empty() && fulls.len() == 1 {
                    // A bare FULL id: cite the chunk, trimmed.
                    let t = n.text.trim_end();
                    let s = n.text.len() - n.text.trim_start().len();
                    if s < t.len() {
                        let base = n.citations[0].start;
                        found = Some((*f, base + s as u64, base + t.len() as u64));
                    }
                }
            }
            if found.is_none() && !q.quote.is_empty() {
                // Small models mix up ids: a verbatim quote of another node the model has
                // read is still evidence (the slip is reported).
                let mut others: Vec<NodeId> = self
                    .read
                    .iter()
                    .filter(|r| self.level_of(r) == Level::Full && !fulls.contains(r))
                    .copied()
                    .collect();
                others.sort();
                for f in others {
                    let n = self.ex.engine.node(&f, self.ex.now)?;
                    if let Some((s, e)) = locate_verbatim(&n.text, &q.quote) {
                        let base = n.citations[0].start;
                        found = Some((f, base + s as u64, base + e as u64));
                        problems.push(format!(
                            "quote cited as {} is in {}",
                            q.id,
                            self.handles.get(&f).cloned().unwrap_or_default()
                        ));
                        break;
                    }
                }
            }
            if found.is_some() {
                verified += 1;
            }
            match found {
                Some(c) if !cited.contains(&c) => cited.push(c),
                Some(_) => {}
                None => problems.push(format!(
                    "quote {:?} not found in {}",
                    clip_to(&q.quote, 80),
                    q.id
                )),
            }
        }
        cited.truncate(self.ex.cfg.max_citations.max(1));
        Ok((cited, problems, verified as f64 / considered.max(1) as f64))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quotes_are_found_verbatim_loosely_or_by_their_words() {
        let t = "Alice opened.  The 2029 audit put the cost at $1.57 billion. Bob disagreed \
                 with   the  audit's method.";
        let (s, e) = locate(t, "The 2029 audit put the cost at $1.57 billion.").unwrap();
        assert_eq!(&t[s..e], "The 2029 audit put the cost at $1.57 billion.");
        // Case and spacing differ: the span is the source's own bytes.
        let (s, e) = locate(t, "“bob DISAGREED with the audit's method”").unwrap();
        assert_eq!(&t[s..e], "Bob disagreed with   the  audit's method");
        // Paraphrase: the sentence sharing most words.
        let (s, e) = locate(t, "the audit said the cost was $1.57 billion in 2029").unwrap();
        assert_eq!(&t[s..e], "The 2029 audit put the cost at $1.57 billion.");
        assert_eq!(locate(t, "Carol resigned over the budget"), None);
        assert_eq!(locate(t, ""), None);
    }

    #[test]
    fn replies_parse_leniently_and_validate_strictly() {
        let v =
            parse_json("Sure! ```json\n{\"action\": \"peek\", \"ids\": \"n1, n2\"}\n```").unwrap();
        let t = Turn::from_json(&v).unwrap();
        assert_eq!(t.action, Action::Peek(vec!["n1".into(), "n2".into()]));
        let v = json!({"action": "finish", "quotes": [{"id": 3, "quote": "x"}],
                       "confidence": "0.7", "ready": "true"});
        match Turn::from_json(&v).unwrap().action {
            Action::Finish {
                quotes,
                confidence,
                ready,
            } => {
                assert_eq!(
                    quotes,
                    vec![QuoteRef {
                        id: "n3".into(),
                        quote: "x".into()
                    }]
                );
                assert!((confidence - 0.7).abs() < 1e-9 && ready);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            json!({"action": "explode"}),
            json!({"action": "peek", "ids": []}),
            json!({"action": "grep", "pattern": ""}),
            json!({"hypothesis": "x"}),
        ] {
            assert!(Turn::from_json(&bad).is_err(), "{bad}");
        }
        assert!(parse_json("{\"action\": \"peek\", ").is_err());
        assert!(parse_json("no json here").is_err());
        let i = Intent::from_json(&json!({"entity": "Eastgate", "attribute": "car ownership",
            "output_type": "Number", "keywords": ["car", "households"]}))
        .unwrap();
        assert_eq!(i.output_type, "number");
        assert!(Intent::from_json(&json!({"output_type": "number"})).is_err());
    }
}
