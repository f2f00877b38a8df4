//! The one [`Host`] for scripts: it answers the sandbox's primitives (`grep`, `search`,
//! `peek`, `children`, `llm_query`, `llm_batch`) over a [`View`] — what the script may
//! read. Two views exist: the navigator's working set in code mode
//! (`navigate::llm::code`: only nodes of the working set or returned to the program, under
//! the query's token and sub-call budgets, each call a trajectory step) and a session's
//! corpus in MCP's `execute_analysis` (`mcp::analysis`: the segments' scopes, every live
//! node). The host parses levels and runs the helper calls — checked against the view's
//! budget, concurrent under the engine's shared limiter, counted by the view — so both
//! answer them alike; the view decides where to look and how a node reads.

use crate::level::Level;
use crate::model::{ChatModel, prompts};
use crate::script::{Call, Host};
use futures::future::BoxFuture;
use serde_json::Value;

/// A primitive's answer, or a one-line message the script can `catch`.
pub type Answer = Result<Value, String>;

/// What a script's primitives read and how much they may spend.
pub trait View: Send {
    /// Nodes matching `pattern` at `level` (`None`: the view's choice), best first.
    fn grep(&mut self, pattern: &str, level: Option<Level>, limit: usize) -> Answer;
    /// The view's ranked retrieval for `query`, best first.
    fn search(&mut self, query: &str, limit: usize) -> Answer;
    /// One node the script names, with its text.
    fn peek(&mut self, id: &str) -> Answer;
    /// The children of a node the script names.
    fn children(&mut self, id: &str) -> Answer;
    /// The model that answers `llm_query` and `llm_batch`, or why there is none.
    fn helper(&self) -> Result<&dyn ChatModel, String>;
    /// Helper calls left in the view's budget (`None`: no budget).
    fn sub_calls_left(&self) -> Option<usize>;
    /// `asked` helper calls were made by `what` (`llm_query` or `llm_batch`), `failed` of
    /// them failed.
    fn sub_called(&mut self, what: &str, asked: usize, failed: usize);
}

/// The script host over `view`.
pub struct Primitives<V> {
    pub(crate) view: V,
}

impl<V> Primitives<V> {
    /// The host over `view`.
    pub fn new(view: V) -> Primitives<V> {
        Primitives { view }
    }

    /// The view the primitives run on (what a host reports after a run: its sub-calls).
    pub fn view(&self) -> &V {
        &self.view
    }
}

impl<V: View> Primitives<V> {
    /// Helper calls, concurrent under the engine's shared limiter; a failed one is `null`.
    async fn llm(&mut self, asks: Vec<String>, what: &str) -> Result<Vec<Value>, String> {
        if let Some(left) = self.view.sub_calls_left()
            && asks.len() > left
        {
            return Err(format!(
                "{} helper call(s) asked, {left} left in this query's budget",
                asks.len()
            ));
        }
        let replies = {
            let helper = self.view.helper()?;
            futures::future::join_all(asks.iter().map(|p| helper.chat(prompts::helper(p)))).await
        };
        let failed = replies.iter().filter(|r| r.is_err()).count();
        self.view.sub_called(what, asks.len(), failed);
        Ok(replies
            .into_iter()
            .map(|r| r.map_or(Value::Null, |r| Value::String(r.text.trim().to_string())))
            .collect())
    }
}

impl<V: View> Host for Primitives<V> {
    fn call(&mut self, call: Call) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            match call {
                Call::Grep {
                    pattern,
                    level,
                    limit,
                } => {
                    let level = level
                        .map(|l| l.parse::<Level>().map_err(|e| e.to_string()))
                        .transpose()?;
                    self.view.grep(&pattern, level, limit)
                }
                Call::Search { query, limit } => self.view.search(&query, limit),
                Call::Peek { id } => self.view.peek(&id),
                Call::Children { id } => self.view.children(&id),
                Call::LlmQuery { prompt } => match self.llm(vec![prompt], "llm_query").await?.pop()
                {
                    Some(Value::Null) | None => Err("the helper model failed".into()),
                    Some(v) => Ok(v),
                },
                Call::LlmBatch { prompts } => self.llm(prompts, "llm_batch").await.map(Value::from),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ModelError;
    use crate::model::{ChatReply, ChatRequest};
    use std::sync::Mutex;

    /// A model that echoes the prompt's last line, failing on "fail".
    struct Echo;
    impl ChatModel for Echo {
        fn identity(&self) -> String {
            "echo".into()
        }
        fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatReply, ModelError>> {
            let last = req.user;
            Box::pin(async move {
                if last.contains("fail") {
                    return Err(ModelError::Failed("asked to fail".into()));
                }
                Ok(ChatReply {
                    text: format!(" {} ", last.lines().last().unwrap_or("")),
                    truncated: false,
                })
            })
        }
    }

    /// A view that records what it was asked.
    #[derive(Default)]
    struct Log {
        asked: Mutex<Vec<String>>,
        left: Option<usize>,
        model: bool,
    }
    impl View for Log {
        fn grep(&mut self, pattern: &str, level: Option<Level>, limit: usize) -> Answer {
            let l = level.map_or("none", |l| l.name());
            self.asked
                .lock()
                .unwrap()
                .push(format!("grep {pattern} {l} {limit}"));
            Ok(Value::from(l))
        }
        fn search(&mut self, query: &str, limit: usize) -> Answer {
            self.asked
                .lock()
                .unwrap()
                .push(format!("search {query} {limit}"));
            Ok(Value::Null)
        }
        fn peek(&mut self, id: &str) -> Answer {
            Err(format!("no node {id}"))
        }
        fn children(&mut self, id: &str) -> Answer {
            self.asked.lock().unwrap().push(format!("children {id}"));
            Ok(Value::Array(Vec::new()))
        }
        fn helper(&self) -> Result<&dyn ChatModel, String> {
            if self.model {
                Ok(&Echo)
            } else {
                Err("no model to ask".into())
            }
        }
        fn sub_calls_left(&self) -> Option<usize> {
            self.left
        }
        fn sub_called(&mut self, what: &str, asked: usize, failed: usize) {
            self.asked
                .lock()
                .unwrap()
                .push(format!("{what} {asked} {failed}"));
            if let Some(l) = self.left.as_mut() {
                *l -= asked;
            }
        }
    }

    fn call(host: &mut Primitives<Log>, c: Call) -> Answer {
        futures::executor::block_on(host.call(c))
    }

    #[test]
    fn the_host_parses_levels_and_hands_the_rest_to_its_view() {
        let mut h = Primitives {
            view: Log::default(),
        };
        let grep = |level: Option<&str>| Call::Grep {
            pattern: "levy".into(),
            level: level.map(str::to_string),
            limit: 3,
        };
        assert_eq!(call(&mut h, grep(Some("raw"))), Ok(Value::from("full")));
        assert_eq!(call(&mut h, grep(None)), Ok(Value::from("none")));
        let e = call(&mut h, grep(Some("huge"))).unwrap_err();
        assert!(e.contains("unknown level `huge`"), "{e}");
        assert_eq!(
            call(&mut h, Call::Peek { id: "x".into() }),
            Err("no node x".into())
        );
        call(
            &mut h,
            Call::Search {
                query: "q".into(),
                limit: 2,
            },
        )
        .unwrap();
        call(&mut h, Call::Children { id: "c".into() }).unwrap();
        assert_eq!(
            *h.view.asked.lock().unwrap(),
            [
                "grep levy full 3",
                "grep levy none 3",
                "search q 2",
                "children c"
            ]
        );
    }

    #[test]
    fn helper_calls_are_checked_against_the_budget_counted_and_failures_are_null() {
        let mut h = Primitives {
            view: Log {
                left: Some(3),
                model: true,
                ..Log::default()
            },
        };
        let batch = |ps: &[&str]| Call::LlmBatch {
            prompts: ps.iter().map(|p| p.to_string()).collect(),
        };
        assert_eq!(
            call(&mut h, batch(&["a", "please fail"])),
            Ok(json_array(&[Value::from("a"), Value::Null]))
        );
        let e = call(&mut h, batch(&["b", "c"])).unwrap_err();
        assert_eq!(e, "2 helper call(s) asked, 1 left in this query's budget");
        assert_eq!(
            call(
                &mut h,
                Call::LlmQuery {
                    prompt: "fail".into()
                }
            ),
            Err("the helper model failed".into())
        );
        assert_eq!(
            *h.view.asked.lock().unwrap(),
            ["llm_batch 2 1", "llm_query 1 1"]
        );
        // No model: the view says why, and nothing is counted.
        let mut none = Primitives {
            view: Log::default(),
        };
        let e = call(
            &mut none,
            Call::LlmQuery {
                prompt: "hi".into(),
            },
        )
        .unwrap_err();
        assert_eq!(e, "no model to ask");
        assert!(none.view.asked.lock().unwrap().is_empty());
    }

    fn json_array(v: &[Value]) -> Value {
        Value::Array(v.to_vec())
    }
}
