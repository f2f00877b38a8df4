//! Context windows: a scope at one level, or the best mix of levels (`auto`), within a
//! budget of real tokens.

use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::level::Level;
use crate::node::{Node, NodeId};
use crate::plan::Plan;
use crate::store::ScopeKind;
use crate::token;
use serde::Serialize;

/// A fixed level, or the best mix under the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelChoice {
    Fixed(Level),
    Auto,
}

impl std::str::FromStr for LevelChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("auto") {
            Ok(LevelChoice::Auto)
        } else {
            s.parse().map(LevelChoice::Fixed).map_err(|_| {
                Error::invalid(format!(
                    "unknown level `{s}`: expected full (or raw), detailed, summary, abstract, metadata or auto"
                ))
            })
        }
    }
}

impl std::fmt::Display for LevelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LevelChoice::Fixed(l) => write!(f, "{l}"),
            LevelChoice::Auto => f.write_str("auto"),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ContextNode {
    pub id: String,
    pub level: Level,
    pub tokens: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct ContextWindow {
    pub scope: String,
    pub level: String,
    pub budget: usize,
    /// Real cl100k tokens of `text`; never more than `budget`.
    pub tokens: usize,
    pub text: String,
    /// The nodes used, in the order they appear in `text`.
    pub nodes: Vec<ContextNode>,
    /// Nodes of the requested level that did not fit.
    pub omitted: usize,
}

/// One block of a window: a header line and the text of one or more nodes.
struct Item {
    header: Option<String>,
    body: String,
    nodes: Vec<(NodeId, Level, u32)>,
    /// Position in scope order, for output ordering.
    order: usize,
}

impl Item {
    fn render(&self) -> String {
        match &self.header {
            Some(h) => format!("{h}\n{}", self.body),
            None => self.body.clone(),
        }
    }
}

const OVERVIEW: usize = 0;

/// The one rule for a window's budget: at least one token. Entry points call it before
/// they build anything; [`window`] calls it too.
pub(crate) fn check_budget(budget: usize) -> Result<()> {
    if budget == 0 {
        return Err(Error::invalid("the budget must be at least 1 token"));
    }
    Ok(())
}

/// Builds a window for `scope`; the caller has made sure its tree is live.
pub(crate) fn window(
    corpus: &Corpus<'_>,
    plan: &Plan,
    choice: LevelChoice,
    budget: usize,
    now: u64,
) -> Result<ContextWindow> {
    check_budget(budget)?;
    let (items, omitted_before) = match choice {
        LevelChoice::Fixed(level) => fixed(corpus, plan, level, budget, now)?,
        LevelChoice::Auto => auto(corpus, plan, budget, now)?,
    };
    let (text, tokens, items, dropped) = fit(items, budget);
    Ok(ContextWindow {
        scope: plan.scope.clone(),
        level: choice.to_string(),
        budget,
        tokens,
        text,
        nodes: items
            .iter()
            .flat_map(|i| i.nodes.iter())
            .map(|(id, level, tokens)| ContextNode {
                id: id.to_hex(),
                level: *level,
                tokens: *tokens,
            })
            .collect(),
        omitted: omitted_before + dropped,
    })
}

/// Joins items and drops from the far end until the exact token count fits.
fn fit(mut items: Vec<Item>, budget: usize) -> (String, usize, Vec<Item>, usize) {
    items.sort_by_key(|i| i.order);
    let mut dropped = 0;
    loop {
        let text = items
            .iter()
            .map(Item::render)
            .collect::<Vec<_>>()
            .join("\n\n");
        let t = token::count(&text);
        if t <= budget {
            return (text, t, items, dropped);
        }
        // Over by BPE effects at the joins: drop the least valuable item (the one picked
        // last is at the end for fixed levels and the oldest detail for auto).
        let idx = items
            .iter()
            .enumerate()
            .filter(|(_, i)| i.order != OVERVIEW)
            .map(|(k, _)| k)
            .next_back()
            .unwrap_or(items.len() - 1);
        dropped += items.remove(idx).nodes.len();
    }
}

fn label(plan: &Plan, ci: usize, text: &str) -> String {
    match plan.chunk_label(ci) {
        Some(l) => format!("{l}: {text}"),
        None => text.to_string(),
    }
}

/// One item per group at `level` (FULL and DETAILED concatenate the group's chunks).
fn group_item(corpus: &Corpus<'_>, plan: &Plan, gi: usize, level: Level, now: u64) -> Result<Item> {
    let g = &plan.groups[gi];
    let header = Some(format!("## {} ({})", g.label, level));
    let order = gi + 1;
    match level {
        Level::Full | Level::Detailed => {
            let mut body = String::new();
            let mut nodes = Vec::new();
            let mut last_source = None;
            for &ci in &g.chunks {
                let c = &plan.chunks[ci];
                let id = if level == Level::Full {
                    c.full
                } else {
                    c.detailed
                };
                let n = corpus.node(&id, now)?;
                // FULL chunks of one source are contiguous: no separator, no repeated label.
                if last_source == Some(c.source) && level == Level::Full {
                    body.push_str(&n.text);
                } else {
                    if !body.is_empty() {
                        body.push_str(if body.ends_with('\n') { "" } else { "\n" });
                    }
                    body.push_str(&label(plan, ci, n.text.trim_start()));
                }
                last_source = Some(c.source);
                nodes.push((n.id, n.level, n.tokens));
            }
            Ok(Item {
                header,
                body: body.trim_end().to_string(),
                nodes,
                order,
            })
        }
        _ => {
            let n = corpus.node(&g.summary, now)?;
            Ok(Item {
                header,
                body: n.text.clone(),
                nodes: vec![(n.id, n.level, n.tokens)],
                order,
            })
        }
    }
}

fn overview(n: &Node) -> Item {
    Item {
        header: Some(format!("## Overview ({})", n.level)),
        body: n.text.clone(),
        nodes: vec![(n.id, n.level, n.tokens)],
        order: OVERVIEW,
    }
}

fn cost(i: &Item) -> usize {
    token::count(&i.render()) + 1
}

/// A single level. Debates keep the most recent nodes that fit, documents the first ones.
fn fixed(
    corpus: &Corpus<'_>,
    plan: &Plan,
    level: Level,
    budget: usize,
    now: u64,
) -> Result<(Vec<Item>, usize)> {
    let all: Vec<Item> = match level {
        Level::Abstract => vec![overview(&corpus.node(&plan.abstract_id, now)?)],
        Level::Metadata => {
            let mut v = vec![overview(
                &corpus.node(&plan.metadata[&plan.abstract_id], now)?,
            )];
            for (gi, g) in plan.groups.iter().enumerate() {
                let n = corpus.node(&plan.metadata[&g.summary], now)?;
                v.push(Item {
                    header: Some(format!("## {} (metadata)", g.label)),
                    body: n.text.clone(),
                    nodes: vec![(n.id, n.level, n.tokens)],
                    order: gi + 1,
                });
            }
            v
        }
        _ => (0..plan.groups.len())
            .map(|gi| group_item(corpus, plan, gi, level, now))
            .collect::<Result<_>>()?,
    };
    let total = all.len();
    let mut picked = Vec::new();
    let mut used = 0;
    let recent_first = plan.kind == ScopeKind::Debate;
    let iter: Box<dyn Iterator<Item = Item>> = if recent_first {
        Box::new(all.into_iter().rev())
    } else {
        Box::new(all.into_iter())
    };
    for item in iter {
        let c = cost(&item);
        if used + c > budget {
            break;
        }
        used += c;
        picked.push(item);
    }
    let omitted = total - picked.len();
    Ok((picked, omitted))
}

/// The best mix under the budget. Debates: the ABSTRACT of the whole, the latest round in
/// FULL (DETAILED if FULL does not fit in half the budget), a SUMMARY of every older round
/// (most recent first if not all fit), then more recent rounds upgraded to FULL or DETAILED
/// while the budget allows. Documents: the ABSTRACT, a SUMMARY of every section in order,
/// then sections upgraded in order.
fn auto(corpus: &Corpus<'_>, plan: &Plan, budget: usize, now: u64) -> Result<(Vec<Item>, usize)> {
    let n = plan.groups.len();
    let mut p = Packer {
        items: (0..=n).map(|_| None).collect(),
        costs: vec![0; n],
        used: 0,
    };
    let abs = overview(&corpus.node(&plan.abstract_id, now)?);
    let c = cost(&abs);
    // The overview is worth at most half the window: past that, the groups say more.
    if c <= budget / 2 {
        p.used += c;
        p.items[OVERVIEW] = Some(abs);
    }
    let order: Vec<usize> = match plan.kind {
        ScopeKind::Debate => (0..n).rev().collect(),
        ScopeKind::Doc => (0..n).collect(),
    };
    let fine = [Level::Full, Level::Detailed];
    if plan.kind == ScopeKind::Debate && n > 0 {
        let half = p.used + (budget - p.used) / 2;
        p.place(corpus, plan, now, n - 1, &fine, half)?;
    }
    for &gi in &order {
        // A debate keeps a contiguous run of recent rounds: no gap where a long round
        // did not fit and an older, shorter one did.
        if p.costs[gi] == 0
            && !p.place(corpus, plan, now, gi, &[Level::Summary], budget)?
            && plan.kind == ScopeKind::Debate
        {
            break;
        }
    }
    for &gi in &order {
        let placed_finer = p.items[gi + 1]
            .as_ref()
            .is_some_and(|it| it.nodes.first().is_some_and(|x| x.1 < Level::Summary));
        if placed_finer {
            continue;
        }
        if !p.place(corpus, plan, now, gi, &fine, budget)? {
            break;
        }
    }
    let omitted = p.items.iter().skip(1).filter(|i| i.is_none()).count();
    Ok((p.items.into_iter().flatten().collect(), omitted))
}

/// The groups chosen so far by `auto`, and their cost.
struct Packer {
    items: Vec<Option<Item>>,
    costs: Vec<usize>,
    used: usize,
}

impl Packer {
    /// Puts group `gi` at the finest of `levels` that keeps the total within `limit`.
    fn place(
        &mut self,
        corpus: &Corpus<'_>,
        plan: &Plan,
        now: u64,
        gi: usize,
        levels: &[Level],
        limit: usize,
    ) -> Result<bool> {
        for &level in levels {
            let it = group_item(corpus, plan, gi, level, now)?;
            let c = cost(&it);
            if self.used - self.costs[gi] + c <= limit {
                self.used = self.used - self.costs[gi] + c;
                self.costs[gi] = c;
                self.items[gi + 1] = Some(it);
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::Engine;
    use crate::source::{InputFile, Turn, turn_input};

    fn debate(rounds: u32) -> Engine {
        let e = Engine::in_memory(Config::default()).unwrap();
        let mut sources = Vec::new();
        for r in 1..=rounds {
            for sp in ["ana", "ben"] {
                let text = format!(
                    "In round {r} {sp} argued that the levy should rise by {r} percent. \
                     The committee heard the objection and moved on to other business."
                );
                let t = Turn {
                    round: r,
                    speaker: sp.to_string(),
                    text,
                };
                sources.push(turn_input(format!("d#{r}-{sp}"), t).unwrap());
            }
        }
        let bytes = sources.iter().map(|s| s.text.len() as u64).sum();
        let file = InputFile {
            path: "d.jsonl".into(),
            kind: ScopeKind::Debate,
            sources,
            bytes,
        };
        e.ingest("d", &[file], 0).unwrap();
        e
    }

    #[test]
    fn levels_parse_in_any_case_and_auto_is_a_choice() {
        assert_eq!("AUTO".parse::<LevelChoice>().unwrap(), LevelChoice::Auto);
        assert_eq!(
            "Summary".parse::<LevelChoice>().unwrap(),
            LevelChoice::Fixed(Level::Summary)
        );
        let e = "huge".parse::<LevelChoice>().unwrap_err().to_string();
        assert!(e.contains("unknown level `huge`"), "{e}");
        assert!(check_budget(0).is_err() && check_budget(1).is_ok());
    }

    #[tokio::test]
    async fn every_window_fits_its_budget_in_real_tokens_and_debates_keep_the_latest() {
        let e = debate(30);
        for budget in [1, 40, 200, 900, 5000] {
            for choice in [
                LevelChoice::Auto,
                LevelChoice::Fixed(Level::Full),
                LevelChoice::Fixed(Level::Summary),
            ] {
                let w = e
                    .context("d", choice, budget, 0, &crate::progress::NoProgress)
                    .await
                    .unwrap();
                assert!(w.tokens <= budget, "{choice} at {budget}: {}", w.tokens);
                assert_eq!(w.tokens, crate::token::count(&w.text));
            }
        }
        let w = e
            .context(
                "d",
                LevelChoice::Fixed(Level::Full),
                300,
                0,
                &crate::progress::NoProgress,
            )
            .await
            .unwrap();
        assert!(w.text.contains("round 30"), "{}", w.text);
        assert!(!w.text.contains("round 1 "), "{}", w.text);
    }
}
