//! What the model sees: short handles for nodes (`n1`, `n2`, ...), the first observation,
//! and the state rendered each turn.

use super::{Nav, SHOWN, clip};
use crate::error::Result;
use crate::level::Level;
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

    /// The first observation: the ABSTRACT of each scope (or, when the configuration
    /// starts lower, the ranked groups).
    pub(super) fn start(&mut self) -> Result<()> {
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
