//! The model's actions, carried out on the explorer: `peek`, `grep`, `descend`,
//! `partition_map`, and the rejection of an action that names nothing usable.

use super::{Nav, PEEK_MAX, clip};
use crate::corpus::Place;
use crate::error::Result;
use crate::level::Level;
use crate::model::{ChatModel, prompts};
use crate::node::{NodeId, context_label};
use std::collections::HashSet;
use std::fmt::Write as _;

impl Nav<'_, '_> {
    pub(super) fn peek(&mut self, names: &[String]) -> Result<()> {
        let (ids, unknown) = self.resolve_all(names);
        let ids: Vec<NodeId> = self.ex.sanitise(&ids).into_iter().take(PEEK_MAX).collect();
        if ids.is_empty() {
            return self.reject(&format!(
                "peek: none of {} is in the working set",
                names.join(", ")
            ));
        }
        // Reading again what was read teaches nothing (small models do it, and the turns
        // without narrowing end the loop): a node above FULL is descended into instead.
        if ids
            .iter()
            .all(|id| self.read.contains(id) && self.level_of(id) != Level::Full)
        {
            let handles: Vec<String> = ids.iter().map(|id| self.handle(*id)).collect();
            self.ex.step(
                "peek",
                format!("{} already read: descending instead", handles.join(", ")),
            );
            self.descend(&handles)?;
            self.observation = format!(
                "{} had already been read (its text was shown before), so it was descended                  into instead: {}",
                handles.join(", "),
                self.observation
            );
            return Ok(());
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
            self.note_invalid();
            let _ = writeln!(obs, "(unknown ids ignored: {})", unknown.join(", "));
        }
        self.observation = obs;
        self.account(false, &format!("peek {} node(s)", nodes.len()));
        Ok(())
    }

    pub(super) fn grep(&mut self, pattern: &str, level: Level) -> Result<()> {
        let working: Vec<NodeId> = self.ex.working.iter().map(|(id, _)| *id).collect();
        let within = self.beneath(&working, level);
        let pattern_q = self.ex.question(pattern);
        let hits = self.ex.grep(
            &pattern_q,
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
    pub(super) fn beneath(&self, ids: &[NodeId], level: Level) -> Vec<NodeId> {
        let mut out = Vec::new();
        for id in ids {
            let Some(place) = self.ex.trees.place(id) else {
                continue;
            };
            let (pi, chunks): (usize, Vec<usize>) = match place {
                Place::Abstract(pi) => (pi, (0..self.ex.trees.plans[pi].chunks.len()).collect()),
                Place::Summary(pi, gi) => (pi, self.ex.trees.plans[pi].groups[gi].chunks.clone()),
                Place::Detailed(pi, ci) | Place::Full(pi, ci) => (pi, vec![ci]),
            };
            let p = &self.ex.trees.plans[pi];
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

    pub(super) fn descend(&mut self, names: &[String]) -> Result<()> {
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
            self.note_invalid();
        }
        self.account(narrowed, &format!("descend into {} node(s)", chosen.len()));
        Ok(())
    }

    pub(super) async fn partition_map(
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
            let n = self.ex.corpus.node(id, self.ex.now)?;
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
            self.note_invalid();
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
    pub(super) fn reject(&mut self, why: &str) -> Result<()> {
        self.note_invalid();
        self.ex.step("invalid", why.to_string());
        self.observation = format!("{why}. Use ids from the working set listed below.");
        self.account(false, why);
        Ok(())
    }
}
