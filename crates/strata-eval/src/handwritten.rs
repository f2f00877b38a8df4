//! Hand-written questions (`--questions FILE`): a JSON file of scopes, their files and
//! questions with gold spans, read into instances like the generated ones.

use super::tasks::{Gold, Instance, Question};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use strata_core::error::{Error, Result};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct QuestionFile {
    #[serde(default)]
    #[allow(dead_code)]
    about: String,
    scopes: BTreeMap<String, QuestionScope>,
    questions: Vec<HandQuestion>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct QuestionScope {
    kind: String,
    files: Vec<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HandQuestion {
    scope: String,
    question: String,
    expected: Vec<String>,
    gold: Vec<HandGold>,
    #[serde(default)]
    first_only: bool,
    /// A question whose answer is a set of turns or passages: reported apart, as
    /// `handwritten_set`, on citation recall and precision.
    #[serde(default)]
    set: bool,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HandGold {
    source: String,
    /// Documents: the gold span is this text's place in the source. Debates: the turn.
    quote: Option<String>,
}

/// Reads a question file: one instance per scope, files relative to the question file,
/// source ids as written there (`debate.jsonl#47`, `docs/x.txt`).
pub fn handwritten(path: &Path) -> Result<Vec<Instance>> {
    let bad = |m: String| Error::invalid(format!("{}: {m}", path.display()));
    let body = std::fs::read_to_string(path).map_err(|err| Error::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let file: QuestionFile =
        serde_json::from_str(&body).map_err(|e| bad(format!("not a question file: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (name, sc) in &file.scopes {
        let kind: strata_engine::store::ScopeKind = sc.kind.parse()?;
        let mut files = Vec::new();
        let mut texts: BTreeMap<String, String> = BTreeMap::new();
        for rel in &sc.files {
            let mut f = strata_engine::source::read_file(&base.join(rel), kind, u64::MAX)?;
            for s in &mut f.sources {
                s.id = match s.id.rsplit_once('#') {
                    Some((_, line)) if kind == strata_engine::store::ScopeKind::Debate => {
                        format!("{rel}#{line}")
                    }
                    _ => rel.clone(),
                };
                texts.insert(s.id.clone(), s.text.clone());
            }
            f.path = PathBuf::from(rel);
            files.push(f);
        }
        let mut questions = Vec::new();
        for q in file.questions.iter().filter(|q| q.scope == *name) {
            let mut gold = Vec::new();
            for g in &q.gold {
                let text = texts.get(&g.source).ok_or_else(|| {
                    bad(format!(
                        "{:?}: no source {} in scope {name}",
                        q.question, g.source
                    ))
                })?;
                let (start, end) = match &g.quote {
                    Some(quote) => {
                        let at = text.find(quote.as_str()).ok_or_else(|| {
                            bad(format!(
                                "{:?}: {:?} is not in {}",
                                q.question, quote, g.source
                            ))
                        })?;
                        (at, at + quote.len())
                    }
                    None => (0, text.len()),
                };
                gold.push(Gold {
                    source: g.source.clone(),
                    start: start as u64,
                    end: end as u64,
                });
            }
            questions.push(Question {
                task: if q.set {
                    "handwritten_set"
                } else {
                    "handwritten"
                },
                question: q.question.clone(),
                answers: q.expected.clone(),
                gold,
                first_only: q.first_only,
                depth: None,
            });
        }
        let tokens = texts.values().map(|t| strata_engine::token::count(t)).sum();
        out.push(Instance {
            name: format!("handwritten-{name}"),
            kind,
            files,
            tokens,
            questions,
        });
    }
    for q in &file.questions {
        if !file.scopes.contains_key(&q.scope) {
            return Err(bad(format!("{:?}: unknown scope {}", q.question, q.scope)));
        }
    }
    Ok(out)
}
