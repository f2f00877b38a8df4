//! `sub_query`: one prompt template over up to [`MAX_ITEMS`] items, each item one call of
//! the engine's sub model (all of them concurrently, under the engine's shared limiter),
//! each output validated against a JSON schema, retried once with what was wrong, and
//! reported per item when it still fails.

use super::session::Session;
use super::{ToolError, provenance_time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use strata_engine::engine::Engine;
use strata_engine::model::usage::metered;
use strata_engine::model::{ChatModel, ChatRequest, Meter, Usage};

/// Most items one `sub_query` call takes.
pub(crate) const MAX_ITEMS: usize = 100;
const DEFAULT_MAX_TOKENS: u32 = 512;
const MAX_MAX_TOKENS: u32 = 8192;

/// What each call does with its item.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Task {
    /// Pick one label (from `labels` when given): output `{"label": ...}`.
    Classify,
    /// Pull out what the prompt asks for, verbatim where possible: output text.
    Extract,
    /// Summarize the item as the prompt asks: output text.
    Summarize,
    /// Decide whether the item meets the prompt's condition: output `{"keep": bool, "reason": ...}`.
    Filter,
    /// Compare the item with what the prompt names: output text.
    Compare,
}

impl Task {
    fn instruction(self) -> &'static str {
        match self {
            Task::Classify => "Classify the item as the request asks. Choose exactly one label.",
            Task::Extract => {
                "Extract what the request asks for from the item. Quote the item's words where you can; add nothing the item does not say."
            }
            Task::Summarize => {
                "Summarize the item as the request asks. Keep names, numbers and dates exactly as written; add nothing the item does not say."
            }
            Task::Filter => {
                "Decide whether the item meets the request's condition, and say why in one sentence."
            }
            Task::Compare => {
                "Compare the item with what the request names, as it asks. Say what agrees, what differs, and what is missing."
            }
        }
    }

    /// The schema an output must follow when the caller gives none (`None`: plain text).
    fn default_schema(self, labels: &[String]) -> Option<Value> {
        match self {
            Task::Classify => {
                let mut label = json!({"type": "string"});
                if !labels.is_empty() {
                    label["enum"] = json!(labels);
                }
                Some(json!({
                    "type": "object",
                    "properties": {"label": label},
                    "required": ["label"],
                }))
            }
            Task::Filter => Some(json!({
                "type": "object",
                "properties": {"keep": {"type": "boolean"}, "reason": {"type": "string"}},
                "required": ["keep"],
            })),
            Task::Extract | Task::Summarize | Task::Compare => None,
        }
    }
}

/// Arguments of `sub_query`. The items are given inline (`items`) or taken from a segment
/// (`segment`, with `offset`); either way at most 100.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubQuery {
    pub(crate) task: Task,
    /// The request for each item; `{{item.FIELD}}` (dotted paths, e.g. `{{item.text}}`,
    /// `{{item.speaker}}`) is replaced by the item's field, `{{item}}` by the whole item.
    pub(crate) prompt: String,
    /// The items (JSON objects, or plain strings, seen as `{"text": ...}`).
    pub(crate) items: Option<Vec<Value>>,
    /// A segment id from `load_corpus`: its items, from `offset`, at most `limit`.
    pub(crate) segment: Option<String>,
    #[serde(default)]
    pub(crate) offset: usize,
    /// How many of the segment's items (default and at most 100).
    pub(crate) limit: Option<usize>,
    /// Labels a classification chooses from.
    #[serde(default)]
    pub(crate) labels: Vec<String>,
    /// A JSON schema every output must follow (the reply must be JSON). Default: by task
    /// (classify `{label}`, filter `{keep, reason}`, others plain text).
    pub(crate) output_schema: Option<Value>,
    /// Longest reply per item, in model tokens (default 512).
    pub(crate) max_tokens: Option<u32>,
}

/// One item's outcome, in input order.
#[derive(Debug, Serialize)]
struct Outcome {
    index: usize,
    /// The item's node id and source spans, when it has them (segment items do).
    #[serde(skip_serializing_if = "Option::is_none")]
    item_id: Option<String>,
    spans: Value,
    ok: bool,
    /// The validated output: JSON when a schema applies, else the reply's text.
    output: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Model calls made for the item (2 when the first output was rejected).
    attempts: u32,
}

/// Runs `sub_query`; the result is kept in the session under its id.
pub(crate) async fn sub_query(
    engine: &Engine,
    session: &Session,
    a: SubQuery,
    now: u64,
) -> Result<Value, ToolError> {
    let max_tokens = a.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 || max_tokens > MAX_MAX_TOKENS {
        return Err(ToolError::Invalid(format!(
            "max_tokens must be 1 to {MAX_MAX_TOKENS}"
        )));
    }
    if a.prompt.trim().is_empty() {
        return Err(ToolError::Invalid("prompt is empty".into()));
    }
    let items = items(session, &a)?;
    let template = Template::parse(&a.prompt)?;
    let prompts = items
        .iter()
        .enumerate()
        .map(|(i, item)| template.render(item, i))
        .collect::<Result<Vec<_>, _>>()?;
    let schema = a
        .output_schema
        .clone()
        .or_else(|| a.task.default_schema(&a.labels));
    let validator = schema
        .as_ref()
        .map(|s| {
            jsonschema::validator_for(s).map_err(|e| {
                ToolError::Invalid(format!("output_schema is not a valid JSON schema: {e}"))
            })
        })
        .transpose()?;
    if a.task == Task::Classify && a.labels.is_empty() && a.output_schema.is_none() {
        return Err(ToolError::Invalid(
            "classify needs `labels` (or an output_schema saying what to output)".into(),
        ));
    }
    let model = match (items.is_empty(), engine.sub_chat()) {
        (true, _) => None,
        (false, Some(m)) => Some(m.clone()),
        (false, None) => {
            return Err(ToolError::Failed(
                "sub_query needs a model and strata runs offline: start `strata mcp` with --model openai:NAME (or --root-model) and --base-url URL".into(),
            ));
        }
    };
    let system = system_prompt(a.task, &a.labels, schema.as_ref());
    let t0 = std::time::Instant::now();
    let meter = Arc::new(Meter::default());
    let calls = prompts.into_iter().enumerate().map(|(i, user)| {
        let call = Call {
            model: model.as_deref(),
            system: &system,
            schema: schema.as_ref(),
            validator: validator.as_ref(),
            max_tokens,
        };
        let item = &items[i];
        async move {
            let (result, attempts) = call.run(user).await;
            let (ok, output, error) = match result {
                Ok(v) => (true, v, None),
                Err(e) => (false, Value::Null, Some(e)),
            };
            Outcome {
                index: i,
                item_id: item.get("id").and_then(Value::as_str).map(str::to_string),
                spans: item.get("spans").cloned().unwrap_or(json!([])),
                ok,
                output,
                error,
                attempts,
            }
        }
    });
    // Every call is awaited here, in this task, so the meter sees each one; the model
    // client takes its place in the engine's limiter per request, which bounds how many
    // run at once (shared with builds and queries).
    let outcomes: Vec<Outcome> = metered(meter.clone(), futures::future::join_all(calls)).await;
    let usage = Usage::from_meter(&meter, &engine.config().prices, t0.elapsed());
    let n_ok = outcomes.iter().filter(|o| o.ok).count();
    let rec = session.add_sub_query(|id| {
        json!({
            "id": id,
            "task": a.task,
            "n_items": outcomes.len(),
            "n_ok": n_ok,
            "n_failed": outcomes.len() - n_ok,
            "results": outcomes,
            "usage": usage,
            "cost_usd": usage.cost_usd,
            "provenance": {
                "model": model.as_ref().map(|m| m.identity()),
                "batch_size": outcomes.len(),
                "segment": a.segment,
                "offset": a.segment.as_ref().map(|_| a.offset),
                "output_schema": schema,
                "prompt": a.prompt,
                "timestamp": provenance_time(now),
            },
        })
    });
    Ok(rec.result.clone())
}

/// The items a call runs over, as JSON objects.
fn items(session: &Session, a: &SubQuery) -> Result<Vec<Value>, ToolError> {
    let items: Vec<Value> = match (&a.items, &a.segment) {
        (Some(items), None) => {
            if a.offset != 0 || a.limit.is_some() {
                return Err(ToolError::Invalid(
                    "offset and limit select from a segment; inline items are taken whole".into(),
                ));
            }
            if items.len() > MAX_ITEMS {
                return Err(ToolError::Invalid(format!(
                    "{} items given; a sub_query takes at most {MAX_ITEMS}",
                    items.len()
                )));
            }
            items
                .iter()
                .map(|v| match v {
                    Value::String(s) => json!({ "text": s }),
                    v => v.clone(),
                })
                .collect()
        }
        (None, Some(id)) => {
            let seg = session.segment(id)?;
            let limit = a.limit.unwrap_or(MAX_ITEMS);
            if limit == 0 || limit > MAX_ITEMS {
                return Err(ToolError::Invalid(format!(
                    "limit must be 1 to {MAX_ITEMS}"
                )));
            }
            if a.offset > seg.items.len() {
                return Err(ToolError::Invalid(format!(
                    "offset {} is past the end of segment {} ({} items)",
                    a.offset,
                    seg.id,
                    seg.items.len()
                )));
            }
            let end = (a.offset + limit).min(seg.items.len());
            seg.items[a.offset..end]
                .iter()
                .map(|it| serde_json::to_value(it).expect("an item serializes"))
                .collect()
        }
        _ => {
            return Err(ToolError::Invalid(
                "give either `items` or `segment`".into(),
            ));
        }
    };
    Ok(items)
}

fn system_prompt(task: Task, labels: &[String], schema: Option<&Value>) -> String {
    let mut s = format!(
        "You process one item of a batch for an agent. {}",
        task.instruction()
    );
    if !labels.is_empty() {
        s.push_str(&format!(" Labels: {}.", labels.join(", ")));
    }
    match schema {
        Some(schema) => s.push_str(&format!(
            " Reply with only a JSON value that follows this JSON schema, no other text:\n{schema}"
        )),
        None => s.push_str(" Reply with the answer only, as plain text."),
    }
    s
}

/// One item's model call(s).
struct Call<'a> {
    model: Option<&'a dyn ChatModel>,
    system: &'a str,
    schema: Option<&'a Value>,
    validator: Option<&'a jsonschema::Validator>,
    max_tokens: u32,
}

impl Call<'_> {
    /// The validated output, or why there is none; and how many calls it took.
    async fn run(&self, user: String) -> (Result<Value, String>, u32) {
        let Some(model) = self.model else {
            return (Err("no model".into()), 0);
        };
        let mut req = ChatRequest {
            system: self.system.to_string(),
            user: user.clone(),
            schema: self
                .schema
                .map(|s| ("strata_sub_query".to_string(), s.clone())),
            max_tokens: self.max_tokens,
        };
        let mut attempts = 0;
        let mut last = String::new();
        while attempts < 2 {
            attempts += 1;
            let reply = match model.chat(req.clone()).await {
                Ok(r) => r,
                // The client already retried what is worth retrying (429, 5xx, timeouts).
                Err(e) => return (Err(format!("model call failed: {e}")), attempts),
            };
            match self.judge(&reply.text, reply.truncated) {
                Ok(v) => return (Ok(v), attempts),
                Err(why) => {
                    last = why.clone();
                    req.user = format!(
                        "{user}\n\nYour previous reply was:\n{}\n\nIt was rejected: {why}. Reply again, following the instructions exactly.",
                        reply.text
                    );
                }
            }
        }
        (
            Err(format!("invalid output after a retry: {last}")),
            attempts,
        )
    }

    /// Parses and validates one reply.
    fn judge(&self, text: &str, truncated: bool) -> Result<Value, String> {
        if truncated {
            return Err(format!(
                "it was cut off at max_tokens ({}); reply more briefly",
                self.max_tokens
            ));
        }
        let Some(validator) = self.validator else {
            let t = text.trim();
            return if t.is_empty() {
                Err("it was empty".into())
            } else {
                Ok(Value::String(t.to_string()))
            };
        };
        let v: Value =
            serde_json::from_str(strip_fence(text)).map_err(|e| format!("it is not JSON ({e})"))?;
        let errors: Vec<String> = validator
            .iter_errors(&v)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(v)
        } else {
            Err(format!(
                "it does not follow the schema: {}",
                errors.join("; ")
            ))
        }
    }
}

/// A reply's JSON without the Markdown code fence some models wrap it in.
fn strip_fence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

/// A prompt template: literal text and `{{item...}}` placeholders.
#[derive(Debug, PartialEq)]
enum Piece {
    Text(String),
    /// The path below `item` (empty: the whole item).
    Field(Vec<String>),
}

#[derive(Debug)]
struct Template(Vec<Piece>);

impl Template {
    fn parse(t: &str) -> Result<Template, ToolError> {
        let mut pieces = Vec::new();
        let mut rest = t;
        while let Some(open) = rest.find("{{") {
            pieces.push(Piece::Text(rest[..open].to_string()));
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| {
                ToolError::Invalid("the prompt opens a `{{` placeholder it does not close".into())
            })?;
            let name = after[..close].trim();
            let mut path = name.split('.').map(str::trim);
            if path.next() != Some("item") {
                return Err(ToolError::Invalid(format!(
                    "unknown placeholder `{{{{{name}}}}}`: placeholders are `{{{{item}}}}` and `{{{{item.FIELD}}}}`"
                )));
            }
            let path: Vec<String> = path.map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(ToolError::Invalid(format!(
                    "placeholder `{{{{{name}}}}}` has an empty field name"
                )));
            }
            pieces.push(Piece::Field(path));
            rest = &after[close + 2..];
        }
        pieces.push(Piece::Text(rest.to_string()));
        Ok(Template(pieces))
    }

    /// The prompt for item `index`; a field the item lacks is an invalid argument.
    fn render(&self, item: &Value, index: usize) -> Result<String, ToolError> {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(path) => {
                    let mut v = item;
                    for key in path {
                        v = match v {
                            Value::Object(m) => m.get(key),
                            Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
                            _ => None,
                        }
                        .ok_or_else(|| {
                            ToolError::Invalid(format!(
                                "item {index} has no field `{}` (the prompt's `{{{{item.{}}}}}`)",
                                path.join("."),
                                path.join(".")
                            ))
                        })?;
                    }
                    out.push_str(&show(v));
                }
            }
        }
        Ok(out)
    }
}

/// A field as prompt text: strings as they are, lists of strings joined, JSON otherwise.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(a) if a.iter().all(|x| x.is_string() || x.is_number()) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => s.clone(),
                x => x.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(t: &str, item: Value) -> Result<String, String> {
        Template::parse(t)
            .and_then(|t| t.render(&item, 3))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn templates_fill_fields_and_name_what_is_missing() {
        let item = json!({"text": "Hi.", "speakers": ["alice", "bob"], "round": 2, "m": {"k": 1}});
        assert_eq!(
            render(
                "{{item.text}} by {{ item.speakers }} in {{item.round}} {{item.m.k}}",
                item.clone()
            ),
            Ok("Hi. by alice, bob in 2 1".into())
        );
        assert_eq!(render("{{item}}", json!("x")), Ok("x".into()));
        assert_eq!(
            render("{{item.speaker}}", item.clone()),
            Err("item 3 has no field `speaker` (the prompt's `{{item.speaker}}`)".into())
        );
        assert_eq!(
            render("{{items.text}}", item.clone()),
            Err("unknown placeholder `{{items.text}}`: placeholders are `{{item}}` and `{{item.FIELD}}`".into())
        );
        assert_eq!(
            render("{{item.text", item),
            Err("the prompt opens a `{{` placeholder it does not close".into())
        );
    }

    #[test]
    fn replies_are_judged_against_the_schema() {
        let schema = Task::Filter.default_schema(&[]).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let call = Call {
            model: None,
            system: "",
            schema: Some(&schema),
            validator: Some(&validator),
            max_tokens: 10,
        };
        assert_eq!(
            call.judge("```json\n{\"keep\": true}\n```", false),
            Ok(json!({"keep": true}))
        );
        let e = call.judge("{\"keep\": \"yes\"}", false).unwrap_err();
        assert!(
            e.starts_with("it does not follow the schema: at /keep: "),
            "{e}"
        );
        assert!(
            call.judge("keep it", false)
                .unwrap_err()
                .starts_with("it is not JSON")
        );
        assert_eq!(
            call.judge("{\"keep\": true}", true),
            Err("it was cut off at max_tokens (10); reply more briefly".into())
        );
        let text = Call {
            validator: None,
            schema: None,
            ..call
        };
        assert_eq!(text.judge("  x ", false), Ok(json!("x")));
        assert_eq!(text.judge(" ", false), Err("it was empty".into()));
    }
}
