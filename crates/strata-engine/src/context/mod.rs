//! Context windows: a scope at one level, or the best mix of levels (`auto`), within a
//! budget of real tokens.

use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::level::Level;
use crate::node::{Node, NodeId, Span};
use std::collections::BTreeMap;

mod focus;
pub(crate) mod overview;
use crate::plan::Plan;
use crate::store::ScopeKind;
use crate::text::salience;
use crate::token;
pub(crate) use focus::window as focused;
pub(crate) use overview::forget_cached;
use serde::Serialize;

/// A fixed level, or the best mix under the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// Tokens of the node (the whole node, also when only part of it is in the window).
    pub tokens: u32,
    /// `overview` (the whole scope), `history` (older groups) or `recent` (the newest
    /// group at a fine level); fixed levels are `history`.
    pub part: &'static str,
    /// What the node covers: its first and last group (`Round 3`, a document section).
    pub covers: Covers,
    /// Only part of the node is in the window (an overview trimmed to its most salient
    /// sentences, a group cut to the chunks that fit, an excerpt of a turn).
    pub partial: bool,
    /// The exact source spans of what the window shows of the node (FULL text: a whole
    /// chunk, or an excerpt of it); empty for derived levels, which cite through `id`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<Span>,
    /// Why the part was chosen: named features and their values (question-focused
    /// windows: `retrieval`, `neighbour`, `reply_to_question`, `score`, `rank`; the
    /// overview: the salience features of its best sentence and its `rank`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub why: BTreeMap<String, f64>,
}

/// The span of the scope a part of a window covers.
#[derive(Clone, Debug, Serialize)]
pub struct Covers {
    pub from: String,
    pub to: String,
    /// Debates: the first and last round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<(u32, u32)>,
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
    /// Nodes of the requested level that did not fit (question-focused windows: turns
    /// that bore on the question but did not fit).
    pub omitted: usize,
    /// The question or turn a question-focused window was built for.
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
    /// When a question-focused window's question places itself in time ("… in June
    /// 2023?"): what that left to read (`corpus::placed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placed: Option<String>,
}

/// One block of a window: a header line and the text of one or more nodes.
#[derive(Clone)]
struct Item {
    header: Option<String>,
    body: String,
    nodes: Vec<(NodeId, Level, u32)>,
    /// Position in scope order, for output ordering.
    order: usize,
    /// The groups the block covers (first, last), and whether the body is only part of
    /// its node.
    groups: (usize, usize),
    partial: bool,
    /// The exact spans shown of some of `nodes` (an overview of sentences picked from FULL
    /// chunks); a FULL node without an entry cites its whole chunk.
    excerpts: Vec<(NodeId, Span)>,
    /// Why some of `nodes` were chosen (the overview: the salience features of the node's
    /// best sentence in the window, and its rank among the chosen).
    why: Vec<(NodeId, BTreeMap<String, f64>)>,
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
pub fn check_budget(budget: usize) -> Result<()> {
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
    let last = plan.groups.len().saturating_sub(1);
    let full_at: std::collections::HashMap<NodeId, usize> = if items
        .iter()
        .any(|i| i.nodes.iter().any(|n| n.1 == Level::Full))
    {
        plan.chunks
            .iter()
            .enumerate()
            .map(|(ci, c)| (c.full, ci))
            .collect()
    } else {
        Default::default()
    };
    Ok(ContextWindow {
        scope: plan.scope.clone(),
        level: choice.to_string(),
        budget,
        tokens,
        text,
        nodes: items
            .iter()
            .flat_map(|i| i.nodes.iter().map(move |n| (i, n)))
            .map(|(i, (id, level, tokens))| ContextNode {
                id: id.to_hex(),
                level: *level,
                tokens: *tokens,
                part: if i.order == OVERVIEW {
                    "overview"
                } else if choice == LevelChoice::Auto
                    && plan.kind == ScopeKind::Debate
                    && i.groups.1 == last
                    && *level < Level::Summary
                {
                    "recent"
                } else {
                    "history"
                },
                covers: covers(plan, i.groups),
                partial: i.partial,
                spans: {
                    let own: Vec<Span> = i
                        .excerpts
                        .iter()
                        .filter(|(n, _)| n == id)
                        .map(|(_, sp)| sp.clone())
                        .collect();
                    match level {
                        Level::Full if own.is_empty() => full_spans(plan, full_at.get(id).copied()),
                        _ => own,
                    }
                },
                why: i
                    .why
                    .iter()
                    .find(|(n, _)| n == id)
                    .map(|(_, w)| w.clone())
                    .unwrap_or_default(),
            })
            .collect(),
        omitted: omitted_before + dropped,
        focus: None,
        placed: None,
    })
}

/// What groups `first..=last` of `plan` cover.
fn covers(plan: &Plan, (a, b): (usize, usize)) -> Covers {
    let label = |g: usize| {
        plan.groups
            .get(g)
            .map(|g| g.label.clone())
            .unwrap_or_default()
    };
    Covers {
        from: label(a),
        to: label(b),
        rounds: plan
            .groups
            .get(a)
            .and_then(|g| g.round)
            .zip(plan.groups.get(b).and_then(|g| g.round)),
    }
}

/// The span of chunk `ci` of `plan`.
fn full_spans(plan: &Plan, ci: Option<usize>) -> Vec<Span> {
    ci.map(|ci| {
        let c = &plan.chunks[ci];
        vec![Span {
            source: plan.sources[c.source].id.clone(),
            start: c.start,
            end: c.end,
        }]
    })
    .unwrap_or_default()
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

/// `text` after its label (`alice (round 3): …`), or alone without one.
fn labelled(label: Option<String>, text: &str) -> String {
    match label {
        Some(l) => format!("{l}: {text}"),
        None => text.to_string(),
    }
}

/// One item per group at `level` (FULL and DETAILED concatenate the group's chunks).
fn group_item(corpus: &Corpus<'_>, plan: &Plan, gi: usize, level: Level, now: u64) -> Result<Item> {
    chunks_item(corpus, plan, gi, &plan.groups[gi].chunks, level, now)
}

/// The item of group `gi` at `level`, holding only `chunks` of it at FULL or DETAILED
/// (marked partial when that is not all of them).
fn chunks_item(
    corpus: &Corpus<'_>,
    plan: &Plan,
    gi: usize,
    chunks: &[usize],
    level: Level,
    now: u64,
) -> Result<Item> {
    let g = &plan.groups[gi];
    let header = Some(format!("## {} ({})", g.label, level));
    let order = gi + 1;
    match level {
        Level::Full | Level::Detailed => {
            let mut body = String::new();
            let mut nodes = Vec::new();
            let mut last_source = None;
            for &ci in chunks {
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
                    // The header names the round: a turn of it says who (and when).
                    let src = &plan.sources[c.source];
                    let l = if src.round.is_some() && src.round == g.round {
                        src.label_within_round()
                    } else {
                        src.label()
                    };
                    body.push_str(&labelled(l, n.text.trim_start()));
                }
                last_source = Some(c.source);
                nodes.push((n.id, n.level, n.tokens));
            }
            Ok(Item {
                header,
                body: body.trim_end().to_string(),
                nodes,
                order,
                groups: (gi, gi),
                partial: chunks.len() < g.chunks.len(),
                excerpts: Vec::new(),
                why: Vec::new(),
            })
        }
        _ => {
            let n = corpus.node(&g.summary, now)?;
            Ok(Item {
                header,
                body: n.text.clone(),
                nodes: vec![(n.id, n.level, n.tokens)],
                order,
                groups: (gi, gi),
                partial: false,
                excerpts: Vec::new(),
                why: Vec::new(),
            })
        }
    }
}

fn overview(plan: &Plan, n: &Node) -> Item {
    Item {
        header: Some(format!("## Overview ({})", n.level)),
        body: n.text.clone(),
        nodes: vec![(n.id, n.level, n.tokens)],
        order: OVERVIEW,
        groups: (0, plan.groups.len().saturating_sub(1)),
        partial: false,
        excerpts: Vec::new(),
        why: Vec::new(),
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
        Level::Abstract => vec![overview(plan, &corpus.node(&plan.abstract_id, now)?)],
        Level::Metadata => {
            let mut v = vec![overview(
                plan,
                &corpus.node(&plan.metadata()[&plan.abstract_id], now)?,
            )];
            for (gi, g) in plan.groups.iter().enumerate() {
                let n = corpus.node(&plan.metadata()[&g.summary], now)?;
                v.push(Item {
                    header: Some(format!("## {} (metadata)", g.label)),
                    body: n.text.clone(),
                    nodes: vec![(n.id, n.level, n.tokens)],
                    order: gi + 1,
                    groups: (gi, gi),
                    partial: false,
                    excerpts: Vec::new(),
                    why: Vec::new(),
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
            // The group does not fit whole: at FULL or DETAILED, its newest chunks (a
            // debate) or its first ones (a document) that do, rather than nothing.
            if matches!(level, Level::Full | Level::Detailed)
                && let Some(part) =
                    partial_group(corpus, plan, item.groups.0, level, budget - used, now)?
            {
                picked.push(part);
            }
            break;
        }
        used += c;
        picked.push(item);
    }
    let omitted = total - picked.iter().filter(|i| !i.partial).count();
    Ok((picked, omitted))
}

/// The largest run of group `gi`'s chunks at `level` that fits `room` tokens: its newest
/// chunks in a debate, its first ones in a document. None when not even one fits.
fn partial_group(
    corpus: &Corpus<'_>,
    plan: &Plan,
    gi: usize,
    level: Level,
    room: usize,
    now: u64,
) -> Result<Option<Item>> {
    let all = &plan.groups[gi].chunks;
    let newest_first = plan.kind == ScopeKind::Debate;
    // Costs grow with the run: find the longest run that fits by bisection.
    let run = |k: usize| -> &[usize] {
        if newest_first {
            &all[all.len() - k..]
        } else {
            &all[..k]
        }
    };
    let (mut lo, mut hi) = (0usize, all.len());
    let mut best = None;
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let it = chunks_item(corpus, plan, gi, run(mid), level, now)?;
        if cost(&it) <= room {
            lo = mid;
            best = Some(it);
        } else {
            hi = mid - 1;
        }
    }
    Ok(best)
}

/// The share of an `auto` window the overview may take when the whole ABSTRACT does not
/// fit in [`OVERVIEW_WHOLE`] of it: its most important sentences, up to this share.
/// Chosen on QMSum `val` by what the window keeps of the turns the meetings' queries mark
/// relevant, at 1,000 / 2,000 tokens: 14.2 / 25.4 % of their text at 0.65, 15.9 / 28.1 % at
/// 0.8, 16.8 / 30.9 % at 0.9, 16.9 / 31.3 % at 1 (the recent rounds hold less of it than the
/// overview's sentences do); 0.8 so that the window still holds recent rounds at a fine
/// level, as a debate runner needs (docs/EVAL.md).
const OVERVIEW_SHARE: f64 = 0.8;
/// The whole ABSTRACT goes in when it takes at most this share of the window.
const OVERVIEW_WHOLE: f64 = 0.75;

/// The best mix under the budget. First an overview of the whole scope, at every budget:
/// the ABSTRACT, or — when it takes more than three quarters of the window — its most
/// salient sentences (`text::salience`) up to four fifths of it, in their original
/// order with their round labels. Then, for debates, the latest round in FULL (DETAILED if
/// FULL does not fit in what is left), a SUMMARY of every older round (most recent
/// first if not all fit, as a contiguous run), then more recent rounds upgraded to FULL or
/// DETAILED while the budget allows; when not even the latest round fits at a fine level,
/// no round is placed. Documents: a SUMMARY of every section in order, then sections
/// upgraded in order. Whatever is left goes to the overview.
fn auto(corpus: &Corpus<'_>, plan: &Plan, budget: usize, now: u64) -> Result<(Vec<Item>, usize)> {
    let n = plan.groups.len();
    let mut p = Packer {
        items: (0..=n).map(|_| None).collect(),
        costs: vec![0; n],
        used: 0,
    };
    let abs = overview(plan, &corpus.node(&plan.abstract_id, now)?);
    let mut whole = None;
    let first_limit = (OVERVIEW_SHARE * budget as f64) as usize;
    // The whole ABSTRACT only for scopes too large to rank whole (`overview::salient`). Its
    // cost is counted only there: a count needs the tokenizer, which a command loads on
    // another thread while it reads the store (`token::warm`).
    let whole_cost = (plan.full_tokens > overview::MAX_TOKENS)
        .then(|| cost(&abs))
        .filter(|&c| (c as f64) <= OVERVIEW_WHOLE * budget as f64);
    if let Some(c) = whole_cost {
        p.used += c;
        p.items[OVERVIEW] = Some(abs);
    } else {
        if let Some(trimmed) = summary_of_whole(corpus, plan, &abs, first_limit, now, &[])? {
            p.used += cost(&trimmed);
            p.items[OVERVIEW] = Some(trimmed);
        }
        whole = Some(abs);
    }
    let order: Vec<usize> = match plan.kind {
        ScopeKind::Debate => (0..n).rev().collect(),
        ScopeKind::Doc => (0..n).collect(),
    };
    let fine = [Level::Full, Level::Detailed];
    let mut history = true;
    if plan.kind == ScopeKind::Debate && n > 0 && p.used < budget {
        // Recent rounds come at a fine level, older ones at a coarse one: the latest round
        // may take what the overview left (FULL when it fits, else DETAILED); when not even
        // that fits, the rest of the window is the overview's.
        history = p.place(corpus, plan, now, n - 1, &fine, budget)?;
    }
    for &gi in order.iter().filter(|_| history) {
        // A debate keeps a contiguous run of recent rounds: no gap where a long round
        // did not fit and an older, shorter one did.
        if p.costs[gi] == 0
            && !p.place(corpus, plan, now, gi, &[Level::Summary], budget)?
            && plan.kind == ScopeKind::Debate
        {
            break;
        }
    }
    for &gi in order.iter().filter(|_| history) {
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
    // What the groups left unused goes to a trimmed overview: more of the whole, and no
    // sentence that a round placed below it shows (at any level).
    let shown: Vec<Option<&str>> = (0..n)
        .map(|gi| p.items[gi + 1].as_ref().map(|it| it.body.as_str()))
        .collect();
    let quoted_again = shown.iter().any(Option::is_some);
    if let Some(abs) = whole
        && (p.used < budget || quoted_again)
    {
        let had = p.items[OVERVIEW].as_ref().map_or(0, cost);
        let room = had + (budget - p.used);
        // Chosen again without what the rounds show, the overview first gets the limit it
        // was given plus what is left — it counts its parts' tokens one by one, more than
        // its text takes (a label's ": " and a line break often merge with the words
        // beside them), so the room of what it drops would otherwise not be filled again;
        // its exact count decides — and then what its text measured plus what is left.
        let mut limits = vec![room];
        if quoted_again {
            limits.insert(0, first_limit.max(had) + (budget - p.used));
            limits.dedup();
        }
        let repeats = p.items[OVERVIEW].as_ref().is_some_and(|o| {
            o.body.lines().all(|l| {
                let said = l.split_once(": ").map_or(l, |(_, s)| s).trim();
                said.is_empty() || shown.iter().flatten().any(|b| b.contains(said))
            })
        });
        let mut chosen = false;
        for limit in limits {
            let Some(trimmed) = summary_of_whole(corpus, plan, &abs, limit, now, &shown)? else {
                continue;
            };
            let c = cost(&trimmed);
            if p.used - had + c > budget {
                continue;
            }
            if c > had || quoted_again {
                p.used = p.used - had + c;
                p.items[OVERVIEW] = Some(trimmed);
            }
            chosen = true;
            break;
        }
        // No overview without what the rounds show could be chosen, and every line of the
        // one there is shown below (a window of a few rounds, a time range): it would only
        // repeat them.
        if quoted_again && !chosen && repeats {
            p.items[OVERVIEW] = None;
            p.used -= had;
        }
    }
    let omitted = p.items.iter().skip(1).filter(|i| i.is_none()).count();
    Ok((p.items.into_iter().flatten().collect(), omitted))
}

/// The overview in `limit` tokens when the ABSTRACT does not fit: the most salient
/// sentences of the whole scope (`overview::salient`), or — for scopes too large to rank
/// whole within a request — the ABSTRACT trimmed by salience.
fn summary_of_whole(
    corpus: &Corpus<'_>,
    plan: &Plan,
    abs: &Item,
    limit: usize,
    now: u64,
    shown: &[Option<&str>],
) -> Result<Option<Item>> {
    if let Some(item) = overview::salient(corpus, plan, limit, now, shown)? {
        return Ok(Some(item));
    }
    Ok(trim_overview(abs.clone(), limit))
}

/// The overview cut to `limit` tokens: its sentences ranked by salience
/// (`text::salience`, each line a passage), kept greedily while they fit with a redundancy
/// penalty, rendered in their original order. A kept sentence that does not open its line
/// gets its line's label (`Round 12:`), so every kept sentence still says where it comes
/// from. None when not even one fits.
fn trim_overview(item: Item, limit: usize) -> Option<Item> {
    let text = &item.body;
    let header_cost = item.header.as_deref().map_or(0, token::count) + 2;
    if limit <= header_cost {
        return None;
    }
    // (line start, label) for each line.
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let label = line
            .find(": ")
            .filter(|&k| k <= 40 && !line[..k].contains(['.', '!', '?']))
            .map_or("", |k| &line[..k + 2]);
        lines.push((at, label));
        at += line.len();
    }
    struct S {
        start: usize,
        end: usize,
        line: usize,
        tokens: usize,
    }
    let mut sents: Vec<S> = Vec::new();
    for sp in crate::text::sentences(text) {
        let raw = text[sp.start..sp.end].trim();
        if raw.is_empty() {
            continue;
        }
        let line = lines.partition_point(|l| l.0 <= sp.start).saturating_sub(1);
        sents.push(S {
            start: sp.start,
            end: sp.end,
            line,
            tokens: token::count(raw),
        });
    }
    let units: Vec<salience::Unit<'_>> = sents
        .iter()
        .map(|s| salience::Unit {
            text: strip_label(text[s.start..s.end].trim(), lines[s.line].1),
            passage: s.line,
        })
        .collect();
    let scores: Vec<f64> = salience::features(&units)
        .iter()
        .map(salience::Features::score)
        .collect();
    let bags: Vec<_> = units
        .iter()
        .map(|u| crate::text::term_counts(u.text))
        .collect();
    let mut keep = vec![false; sents.len()];
    let mut redundancy = vec![0.0f64; sents.len()];
    let mut used = header_cost;
    loop {
        let cost = |i: usize| {
            let s = &sents[i];
            let label = lines[s.line].1;
            let extra = if label.is_empty() || lines[s.line].0 == s.start {
                0
            } else {
                token::count(label)
            };
            s.tokens + extra + 1
        };
        let value = |i: usize| scores[i] - OVERVIEW_REDUNDANCY * redundancy[i];
        let density =
            |i: usize| value(i) / (sents[i].tokens.max(1) as f64).powf(salience::COST_POWER);
        let pick = (0..sents.len())
            .filter(|&i| !keep[i] && used + cost(i) <= limit && value(i) > 0.0)
            .max_by(|&a, &b| density(a).total_cmp(&density(b)).then(b.cmp(&a)));
        let Some(i) = pick else { break };
        used += cost(i);
        keep[i] = true;
        for j in 0..sents.len() {
            if !keep[j] {
                redundancy[j] = redundancy[j].max(salience::similarity(&bags[i], &bags[j]));
            }
        }
    }
    let mut body = String::new();
    let mut last_line = None;
    for s in sents.iter().zip(&keep).filter(|(_, k)| **k).map(|(s, _)| s) {
        let raw = text[s.start..s.end].trim();
        if last_line == Some(s.line) {
            body.push(' ');
        } else {
            if !body.is_empty() {
                body.push('\n');
            }
            let (start, label) = lines[s.line];
            if start != s.start && !raw.starts_with(label.trim_end()) {
                body.push_str(label);
            }
        }
        body.push_str(raw);
        last_line = Some(s.line);
    }
    if body.is_empty() {
        return None;
    }
    Some(Item {
        body,
        partial: true,
        ..item
    })
}

/// How much similarity to an overview sentence already kept takes off another's salience.
const OVERVIEW_REDUNDANCY: f64 = 0.7;

/// A sentence without its line's label (`Round 12: `), when it opens with it.
fn strip_label<'t>(sentence: &'t str, label: &str) -> &'t str {
    if label.is_empty() {
        return sentence;
    }
    sentence.strip_prefix(label).unwrap_or(sentence)
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
        debate_of(rounds, &["ana", "ben"], |r, _, sp| {
            format!(
                "In round {r} {sp} argued that the levy should rise by {r} percent. \
                 The committee heard the objection and moved on to other business."
            )
        })
    }

    /// A debate scope `d`: `rounds` rounds, a turn of each speaker in each, the text of
    /// round `r`'s `k`-th speaker `sp` given by `text(r, k, sp)`.
    fn debate_of(
        rounds: u32,
        speakers: &[&str],
        text: impl Fn(u32, usize, &str) -> String,
    ) -> Engine {
        let e = Engine::in_memory(Config::default()).unwrap();
        let mut sources = Vec::new();
        for r in 1..=rounds {
            for (k, sp) in speakers.iter().enumerate() {
                let t = Turn {
                    round: r,
                    speaker: sp.to_string(),
                    text: text(r, k, sp),
                    time: None,
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

    /// The overview is chosen again, once the rounds are placed, without the sentences
    /// they show: a sentence is never quoted twice in one window.
    #[tokio::test]
    async fn an_auto_overview_quotes_no_sentence_a_round_below_it_shows() {
        let filler = [
            "The weather in the valley stayed mild for most of the season",
            "Several residents wrote letters about the parking near the market",
            "A report on the old mill was read into the record without comment",
            "The clerk noted that the minutes of the last session were approved",
        ];
        let e = debate_of(12, &["ana", "ben", "cy"], |r, k, sp| {
            let mut text = format!("{} in round {r}.", filler[(r as usize + k) % 4]);
            if [2, 5, 9, 12].contains(&r) && k == (r as usize) % 3 {
                text.push_str(&format!(
                    " The Zuquin bridge toll of {} million dollars was put to the vote by {sp}.",
                    r * 7
                ));
            }
            text
        });
        let mut checked = 0;
        for budget in [150, 200, 250, 300, 400, 500, 600] {
            let w = e
                .context(
                    "d",
                    LevelChoice::Auto,
                    budget,
                    0,
                    &crate::progress::NoProgress,
                )
                .await
                .unwrap();
            assert!(w.tokens <= budget);
            let Some(overview) = w.text.strip_prefix("## Overview (salient sentences)\n") else {
                continue;
            };
            let Some((overview, rounds)) = overview.split_once("\n\n## ") else {
                continue;
            };
            if !rounds.contains("Round 12 (") {
                continue;
            }
            checked += 1;
            for line in overview.lines() {
                let quoted = line.split_once("): ").map_or(line, |(_, q)| q);
                for sentence in quoted.split_inclusive(". ") {
                    assert!(
                        !rounds.contains(sentence.trim()),
                        "{budget}: {sentence:?} is quoted twice:\n{}",
                        w.text
                    );
                }
            }
        }
        assert!(
            checked >= 4,
            "windows with an overview and round 12: {checked}"
        );
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
