//! The model's replies: parsed leniently, validated strictly.

use crate::level::Level;
use crate::navigate::Explorer;
use serde_json::Value;

/// What the question asks, fixed before the loop so that later turns cannot drift.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Intent {
    pub(crate) entity: String,
    pub(crate) attribute: String,
    pub(crate) output_type: String,
    pub(crate) keywords: Vec<String>,
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
    pub(super) fn from_json(v: &Value) -> std::result::Result<Intent, String> {
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
    pub(super) fn heuristic(ex: &Explorer<'_>, question: &str) -> Intent {
        Intent {
            entity: String::new(),
            attribute: question.trim().to_string(),
            output_type: "text".into(),
            keywords: ex.corpus.analyze(question).into_iter().take(6).collect(),
        }
    }
}

/// The first JSON object in a model's reply (code fences and prose around it ignored).
pub(super) fn parse_json(reply: &str) -> std::result::Result<Value, String> {
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

/// The complete part of a JSON object cut off at a token limit, closed into an object: its
/// complete top-level fields, and of a top-level array being written, its complete
/// elements: `{"action": "peek", "ids": ["n1", "n2", "n` gives `{"action": "peek", "ids":
/// ["n1", "n2"]}`. `None` when not even one field is complete.
pub(super) fn salvage(reply: &str) -> Option<Value> {
    let start = reply.find('{')?;
    let body = &reply[start..];
    let (mut open, mut in_string, mut escaped) = (Vec::new(), false, false);
    let mut cut = None;
    for (i, c) in body.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => open.push(c),
            '}' | ']' => {
                open.pop();
                if open.is_empty() {
                    // Not cut off after all.
                    return serde_json::from_str(&body[..=i])
                        .ok()
                        .filter(Value::is_object);
                }
            }
            // After a complete field, or a complete element of a top-level array.
            ',' if open.len() == 1 => cut = Some((i, "}")),
            ',' if open.len() == 2 && open[1] == '[' => cut = Some((i, "]}")),
            _ => {}
        }
    }
    let (at, close) = cut?;
    let v: Value = serde_json::from_str(&format!("{}{close}", &body[..at])).ok()?;
    v.is_object().then_some(v)
}

/// One quoted piece of evidence.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct QuoteRef {
    pub(super) id: String,
    pub(super) quote: String,
}

/// A validated action.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Action {
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
pub(super) struct Turn {
    pub(super) hypothesis: String,
    pub(super) learned: String,
    pub(super) action: Action,
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
    pub(super) fn from_json(v: &Value) -> std::result::Result<Turn, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        // Cut off at the token limit: the complete fields are kept.
        let cut = "```json\n{\"action\": \"peek\", \"confidence\": 0.9, \"ids\": [\"n1\", \"n2\"], \
                   \"learned\": \"a, {b} \\\" c\", \"quotes\": [{\"id\": \"n1\", \"quote\": \"A long, long";
        let v = salvage(cut).unwrap();
        assert_eq!(
            v,
            json!({"action": "peek", "confidence": 0.9, "ids": ["n1", "n2"], "learned": "a, {b} \" c"})
        );
        assert_eq!(
            Turn::from_json(&v).unwrap().action,
            Action::Peek(vec!["n1".into(), "n2".into()])
        );
        // Cut inside an array of ids: its complete elements.
        let v = salvage("{\"action\": \"peek\", \"ids\": [\"n24\", \"n25\", \"n2").unwrap();
        assert_eq!(v, json!({"action": "peek", "ids": ["n24", "n25"]}));
        // Inside an array of objects: the complete objects only.
        let v = salvage("{\"action\": \"finish\", \"quotes\": [{\"id\": \"n1\", \"quote\": \"A.\"}, {\"id\": \"n2\", \"quo")
            .unwrap();
        assert_eq!(
            v,
            json!({"action": "finish", "quotes": [{"id": "n1", "quote": "A."}]})
        );
        assert_eq!(salvage("{\"action\": \"pe"), None);
        assert_eq!(salvage("no json"), None);
        assert_eq!(salvage("{\"a\": 1}"), Some(json!({"a": 1})));
        assert!(parse_json("no json here").is_err());
        let i = Intent::from_json(&json!({"entity": "Eastgate", "attribute": "car ownership",
            "output_type": "Number", "keywords": ["car", "households"]}))
        .unwrap();
        assert_eq!(i.output_type, "number");
        assert!(Intent::from_json(&json!({"output_type": "number"})).is_err());
    }
}
