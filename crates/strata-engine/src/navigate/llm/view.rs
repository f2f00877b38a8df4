//! What the model sees: short handles for nodes (`n1`, `n2`, ...), the first observation,
//! and the state rendered each turn.

use super::{Nav, PEEK_MAX, SHOWN, clip};
use crate::config::Strategy;
use crate::error::Result;
use crate::level::Level;
use crate::model::ChatModel;
use crate::node::{NodeId, context_label};
use std::fmt::Write as _;

impl Nav<'_, '_> {
    pub(super) fn handle(&mut self, id: NodeId) -> String {
        if let Some(h) = self.handles.get(&id) {
            return h.clone();
        }
        let h = format!("n{}", self.handles.len() + 1);
        self.handles.insert(id, h.clone());
        self.by_handle.insert(h.clone(), id);
        h
    }

    /// A model's name for a node: a handle (`n3`, `3`, `[n3]`) or a hex id prefix (≥ 8).
    pub(super) fn resolve(&self, name: &str) -> Option<NodeId> {
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
                .trees
                .placed()
                .filter(|id| id.to_hex().starts_with(&n));
            let first = found.next().copied();
            return if found.next().is_none() { first } else { None };
        }
        None
    }

    pub(super) fn resolve_all(&self, names: &[String]) -> (Vec<NodeId>, Vec<String>) {
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

    /// The first observation. By default the ABSTRACT of each scope (or, when the
    /// configuration starts lower, the ranked groups, DETAILED or FULL nodes); a strategy
    /// other than `auto`/`hierarchical` makes its own primitive the first step.
    pub(super) async fn start(&mut self, helper: &dyn ChatModel) -> Result<()> {
        let tops: Vec<NodeId> = self.ex.working.iter().map(|(id, _)| *id).collect();
        let start = self.ex.cfg.start_level;
        match (self.ex.cfg.strategy, start) {
            (Strategy::Grep, _) | (_, Level::Detailed | Level::Full) => {
                let level = if start == Level::Detailed {
                    Level::Detailed
                } else {
                    Level::Full
                };
                let limit = self.ex.cfg.top_chunks.max(self.ex.cfg.min_keep) * 2;
                let ranking = self.ranking.clone();
                let hits = self.ex.grep(&ranking, &[level], None, limit)?;
                if !hits.is_empty() {
                    self.ex.working = hits;
                }
                self.observation = format!(
                    "A search of every {level} node for the question found {} node(s);                      they are the working set, best first.",
                    self.ex.working.len()
                );
            }
            (Strategy::Peek | Strategy::Summarize, _) => {
                let mut obs = String::new();
                if start == Level::Abstract {
                    self.show(&tops, "The ABSTRACT of each scope:", &mut obs)?;
                }
                let groups = self.ex.descend(&tops);
                let shown: Vec<NodeId> = if self.ex.cfg.strategy == Strategy::Peek {
                    // The first sections, in order: how the scope begins.
                    self.ex.working = groups.iter().map(|g| (*g, 0.0)).collect();
                    groups.iter().take(PEEK_MAX).copied().collect()
                } else {
                    self.ex.working = self.rank(groups)?;
                    self.ex
                        .working
                        .iter()
                        .take(PEEK_MAX)
                        .map(|(id, _)| *id)
                        .collect()
                };
                let title = if self.ex.cfg.strategy == Strategy::Peek {
                    "The first groups' SUMMARY:"
                } else {
                    "The SUMMARY of the groups that match the question best:"
                };
                self.show(&shown, title, &mut obs)?;
                self.observation = obs;
            }
            (Strategy::PartitionMap, _) => {
                let groups = self.ex.descend(&tops);
                self.ex.working = self.rank(groups)?;
                let names: Vec<String> = self
                    .ex
                    .working
                    .clone()
                    .into_iter()
                    .map(|(id, _)| self.handle(id))
                    .collect();
                let question = self.question.to_string();
                self.partition_map(helper, &names, &question).await?;
            }
            (_, Level::Abstract) => {
                let mut obs = String::new();
                self.show(&tops, "The ABSTRACT of each scope:", &mut obs)?;
                self.observation = obs;
            }
            _ => {
                let groups = self.ex.descend(&tops);
                self.ex.working = self.rank(groups)?;
                self.observation = "The groups of each scope are listed below.".into();
            }
        }
        Ok(())
    }

    /// Reads `ids` (peek) and writes them into `obs` under `title`.
    fn show(&mut self, ids: &[NodeId], title: &str, obs: &mut String) -> Result<()> {
        let nodes = self.ex.peek(ids)?;
        self.read.extend(nodes.iter().map(|n| n.id));
        let _ = writeln!(obs, "{title}");
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
        Ok(())
    }

    pub(super) fn render(&mut self, last: bool) -> Result<String> {
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
            let n = self.ex.corpus.node(id, self.ex.now)?;
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
}
