//! Steps down the tree: scopes, groups, chunks, then the chunks read. The query's
//! strategy decides how groups and chunks are chosen (see [`Strategy`]).

use super::Cues;
use crate::config::Strategy;
use crate::corpus::{Place, Question, Search};
use crate::error::Result;
use crate::level::Level;
use crate::navigate::Explorer;
use crate::node::{Node, NodeId};
use std::collections::HashMap;

/// Read chunks, and how well each matched as a whole (normalised to the best).
pub(super) struct Retrieved {
    pub(super) chunks: Vec<Node>,
    /// FULL node → its retrieval score over the best one's.
    pub(super) chunk_rank: HashMap<NodeId, f64>,
    /// The turns ranked in their conversation ([`ranked_turns`]), best first; empty for
    /// set questions.
    pub(super) turns: Vec<RankedTurn>,
}

/// A turn (FULL chunk) ranked for the question in its conversation.
pub(super) struct RankedTurn {
    pub(super) id: NodeId,
    /// Its score over the best turn's.
    pub(super) share: f64,
    /// Its scores: its own evidence (`TurnScore::direct`, at least `turns::EVIDENCE_FLOOR`
    /// for a turn that is evidence of its own) and the named features (`TurnScore::why`)
    /// the history shows for a cited turn.
    pub(super) scores: crate::corpus::turns::TurnScore,
}

/// Steps 1–4 of a pass: rank scopes, pick groups, pick chunks, read them. Returns the read
/// chunks and how well each matched as a whole (normalised to the best).
pub(super) fn retrieve(
    ex: &mut Explorer<'_>,
    question: &Question,
    cues: &Cues,
    first_pass: bool,
) -> Result<Option<Retrieved>> {
    let cfg = ex.cfg.clone();
    let widen = if cues.earliest || cues.latest { 2 } else { 1 };
    // 1. Start at the top: read the abstracts (several scopes: rank them first).
    ex.working = ex
        .trees
        .plans
        .iter()
        .map(|p| (p.abstract_id, 0.0))
        .collect();
    let abstracts: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
    if ex.trees.plans.len() > 1 {
        let hits = ex.grep(
            question,
            &[Level::Abstract, Level::Metadata],
            None,
            4 * ex.trees.plans.len(),
        )?;
        let mut best: HashMap<NodeId, f32> = HashMap::new();
        for (id, s) in hits {
            let target = ex.corpus.tagged_by(&ex.trees, &id)?.unwrap_or(id);
            if let Some(Place::Abstract(pi)) = ex.place(&target) {
                let a = ex.trees.plans[pi].abstract_id;
                let e = best.entry(a).or_insert(0.0);
                *e = e.max(s);
            }
        }
        // Scopes without a hit stay in play (their detail may still match) but rank last.
        let ranked = abstracts
            .iter()
            .map(|a| (*a, best.get(a).copied().unwrap_or(0.0)))
            .collect();
        ex.narrow_to(
            ranked,
            abstracts.len(),
            "ranked scopes by abstract and metadata",
        );
    }
    let top: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
    if first_pass && cfg.start_level == Level::Abstract && cfg.strategy != Strategy::Grep {
        ex.peek(&top)?;
    }

    // 2-3. Which chunks: the strategy's way down (or none: a flat search when the query
    // starts below the groups).
    let keep = cfg.top_chunks * widen;
    let mut read_cap = keep;
    let found = match (cfg.strategy, cfg.start_level) {
        // A set answer may lie anywhere: gather across the whole scope, whatever the
        // strategy.
        _ if super::wants_set(ex, question) => {
            read_cap = 3 * cfg.max_set_citations;
            gather(ex, question, read_cap)?
        }
        (_, Level::Full) => flat(ex, question, &[Level::Full], keep)?,
        (Strategy::Summarize, Level::Detailed) => flat(ex, question, &[Level::Detailed], keep)?,
        (Strategy::Grep, _) | (_, Level::Detailed) => {
            flat(ex, question, &[Level::Detailed, Level::Full], keep)?
        }
        (Strategy::Peek, _) => {
            read_cap = 4 * keep;
            by_reading(ex, question, &top, cfg.top_groups * widen, read_cap)?
        }
        (Strategy::PartitionMap, _) => per_partition(ex, question, &top, keep)?,
        (Strategy::Summarize, _) => descent(
            ex,
            question,
            &top,
            [&[Level::Summary], &[Level::Detailed]],
            widen,
        )?,
        _ => descent(
            ex,
            question,
            &top,
            [
                &[Level::Summary, Level::Detailed, Level::Full],
                &[Level::Detailed, Level::Full],
            ],
            widen,
        )?,
    };
    if !found {
        return Ok(None);
    }

    // 4. Read the kept chunks (descending any non-FULL nodes left by an early stop).
    let mut fulls: Vec<NodeId> = Vec::new();
    let mut frontier: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for id in frontier {
            match ex.place(&id) {
                Some(Place::Full(..)) => fulls.push(id),
                _ => next.push(id),
            }
        }
        if next.is_empty() {
            break;
        }
        let down = ex.descend(&next);
        ex.working = down.iter().map(|id| (*id, 0.0)).collect();
        frontier = down;
    }
    fulls.truncate(read_cap.max(cfg.min_keep));
    // A question with one answer: the turns ranked in their conversation (what the
    // question-focused window ranks by) are read too, and are how well each chunk matched.
    // Not when the strategy reads without searching (`peek`), searches partition by
    // partition (`partition_map`) or answers from the coarse levels (`summarize`).
    let searches_turns = !matches!(
        cfg.strategy,
        Strategy::Peek | Strategy::PartitionMap | Strategy::Summarize
    );
    let mut turns = Vec::new();
    let chunk_rank: HashMap<NodeId, f64> = if searches_turns && !super::wants_set(ex, question) {
        turns = ranked_turns(ex, question, &cues.named)?;
        for t in turns.iter().take(keep) {
            if !fulls.contains(&t.id) {
                fulls.push(t.id);
            }
        }
        turns.iter().map(|t| (t.id, t.share)).collect()
    } else {
        // How well each chunk as a whole matched (normalised to the best): a sentence
        // inherits some of its chunk's evidence, so the right passage beats a stray short
        // sentence.
        let best = ex
            .working
            .iter()
            .map(|(_, s)| *s)
            .fold(0.0f32, f32::max)
            .max(1e-6);
        ex.working
            .iter()
            .map(|(id, s)| (*id, (*s / best) as f64))
            .collect()
    };
    ex.working = fulls.iter().map(|id| (*id, 0.0)).collect();
    let chunks = ex.peek(&fulls)?;
    Ok(Some(Retrieved {
        chunks,
        chunk_rank,
        turns,
    }))
}

/// Every turn with evidence for the question, ranked in its conversation as the
/// question-focused window ranks them (`context::focus`): one search over every FULL chunk,
/// each turn's score with what the hits near it and the question it replies to lend it;
/// first the turns that are evidence of their own (a hit, or a reply to one), by their own
/// evidence, then the rest by their score.
fn ranked_turns(
    ex: &mut Explorer<'_>,
    question: &Question,
    named: &crate::corpus::speakers::Named,
) -> Result<Vec<RankedTurn>> {
    use crate::corpus::turns as focus;
    // Ranked by what turns say (without the words naming speakers, which every turn's
    // label holds), the speaker named as the one speaking first (`corpus::speakers`).
    let said = question.without(&named.terms);
    let hits = ex.grep(
        said.as_ref().unwrap_or(question),
        &[Level::Full],
        None,
        ex.cfg.max_nodes,
    )?;
    let mut texts = HashMap::new();
    let scored = focus::turn_scores(&ex.corpus, &ex.trees, &hits, named, ex.now, &mut texts)?;
    let (first, second) = focus::passes(&scored);
    let best = scored.iter().map(|t| t.score()).fold(1e-9, f64::max);
    let mut seen = vec![false; scored.len()];
    Ok(first
        .into_iter()
        .chain(second)
        .filter(|&i| !std::mem::replace(&mut seen[i], true))
        .map(|i| {
            let t = &scored[i];
            RankedTurn {
                id: ex.trees.plans[t.plan].chunks[t.chunk].full,
                share: t.score() / best,
                scores: *t,
            }
        })
        .collect())
}

/// The FULL node of a DETAILED or FULL hit.
fn chunk_of(ex: &Explorer<'_>, id: &NodeId) -> Option<NodeId> {
    match ex.place(id) {
        Some(Place::Detailed(pi, ci)) | Some(Place::Full(pi, ci)) => {
            Some(ex.trees.plans[pi].chunks[ci].full)
        }
        _ => None,
    }
}

/// Every FULL node of the explored trees, in order.
fn all_chunks(ex: &Explorer<'_>) -> Vec<NodeId> {
    ex.trees
        .plans
        .iter()
        .flat_map(|p| p.chunks.iter().map(|c| c.full))
        .collect()
}

/// `grep`: one search over every chunk at `levels`, no descent; each chunk scores its best
/// hit. The working set becomes the best `keep` chunks.
fn flat(ex: &mut Explorer<'_>, question: &Question, levels: &[Level], keep: usize) -> Result<bool> {
    let hits = ex.grep(question, levels, None, ex.cfg.max_nodes)?;
    let mut score: HashMap<NodeId, f32> = HashMap::new();
    for (id, s) in hits {
        if let Some(full) = chunk_of(ex, &id) {
            let e = score.entry(full).or_insert(0.0);
            *e = e.max(s);
        }
    }
    if score.is_empty() {
        ex.history.push("no passage matches the question".into());
        return Ok(false);
    }
    ex.working = all_chunks(ex).into_iter().map(|id| (id, 0.0)).collect();
    ex.narrow_to(
        score.into_iter().collect(),
        keep,
        "one flat search over every chunk picked chunks",
    );
    Ok(true)
}

/// A set question: every chunk of the scope competes. One flat search over every DETAILED
/// and FULL node with the question; each chunk is scored by its best hit; `keep` are read.
/// Which of them support the question is decided on their sentences.
fn gather(ex: &mut Explorer<'_>, question: &Question, keep: usize) -> Result<bool> {
    let levels = [Level::Detailed, Level::Full];
    let limit = ex.cfg.max_nodes;
    let hits = ex.grep(question, &levels, None, limit)?;
    let mut score: HashMap<NodeId, f32> = HashMap::new();
    for (id, s) in hits {
        if let Some(full) = chunk_of(ex, &id) {
            let e = score.entry(full).or_insert(0.0);
            *e = e.max(s);
        }
    }
    let mut order: Vec<(NodeId, f32)> = score.into_iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if order.is_empty() {
        ex.history.push("no passage matches the question".into());
        return Ok(false);
    }
    let n = order.len() as f32;
    let ranked: Vec<(NodeId, f32)> = order
        .into_iter()
        .enumerate()
        .map(|(i, (id, _))| (id, 1.0 - i as f32 / n))
        .collect();
    ex.working = all_chunks(ex).into_iter().map(|id| (id, 0.0)).collect();
    ex.narrow_to(
        ranked,
        keep,
        "a set question: searched every chunk, kept the best to read",
    );
    Ok(true)
}

/// `peek`: reads every group's SUMMARY (within the token budget), keeps the groups whose
/// text matches best, then reads their chunks whole, best group first (each chunk carries
/// its group's score; the sentences decide).
fn by_reading(
    ex: &mut Explorer<'_>,
    question: &Question,
    top: &[NodeId],
    groups: usize,
    cap: usize,
) -> Result<bool> {
    let summaries = ex.descend(top);
    ex.working = summaries.iter().map(|s| (*s, 0.0)).collect();
    let read: Vec<NodeId> = ex.peek(&summaries)?.iter().map(|n| n.id).collect();
    let ranked: Vec<(NodeId, f32)> = ex
        .rank(question, read)?
        .into_iter()
        .filter(|(_, s)| *s > 0.0)
        .collect();
    if ranked.is_empty() {
        ex.history
            .push("no summary that was read matches the question".into());
        return Ok(false);
    }
    ex.narrow_to(
        ranked,
        groups,
        "read the summaries, kept the groups that match",
    );
    let kept: Vec<(NodeId, f32)> = ex.working.clone();
    let mut chunks: Vec<(NodeId, f32)> = Vec::new();
    for (rank, (g, s)) in kept.iter().enumerate() {
        if let Some(Place::Summary(pi, gi)) = ex.place(g) {
            let p = &ex.trees.plans[pi];
            // Best group first, then reading order within it.
            let n = p.groups[gi].chunks.len() as f32;
            for (k, &ci) in p.groups[gi].chunks.iter().enumerate() {
                let order = 1.0 - (k as f32 + 1.0) / (n + 1.0) * 0.01 - rank as f32 * 1e-4;
                chunks.push((p.chunks[ci].full, s * order));
            }
        }
    }
    ex.descend(&kept.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    ex.working = chunks.iter().map(|(id, _)| (*id, 0.0)).collect();
    ex.narrow_to(chunks, cap, "the kept groups' chunks, to be read whole");
    Ok(true)
}

/// `partition_map`: every group is a partition searched on its own (map) for its best
/// chunk; the partitions' best chunks compete (reduce).
fn per_partition(
    ex: &mut Explorer<'_>,
    question: &Question,
    top: &[NodeId],
    keep: usize,
) -> Result<bool> {
    let summaries = ex.descend(top);
    let mut winners: Vec<(NodeId, f32)> = Vec::new();
    for g in &summaries {
        let Some(Place::Summary(pi, gi)) = ex.place(g) else {
            continue;
        };
        let p = &ex.trees.plans[pi];
        let within: Vec<NodeId> = p.groups[gi]
            .chunks
            .iter()
            .flat_map(|&ci| [p.chunks[ci].detailed, p.chunks[ci].full])
            .collect();
        let s = Search {
            question,
            levels: &[Level::Detailed, Level::Full],
            within: Some(&within),
            limit: 2,
        };
        let found = ex.corpus.search(&ex.trees, &s, ex.dense.as_mut())?;
        if let Some((id, score)) = found.hits.first()
            && let Some(full) = chunk_of(ex, id)
        {
            winners.push((full, *score));
        }
    }
    ex.step(
        "partition_map",
        format!(
            "{} partition(s) (groups) searched one by one: {} with evidence",
            summaries.len(),
            winners.len()
        ),
    );
    if winners.is_empty() {
        ex.history.push("no partition matches the question".into());
        return Ok(false);
    }
    ex.working = all_chunks(ex).into_iter().map(|id| (id, 0.0)).collect();
    ex.narrow_to(
        winners,
        keep,
        "partition_map kept the best chunk of each group",
    );
    Ok(true)
}

/// `hierarchical` (and `summarize`): down the tree. Groups are chosen by their best hit at
/// `levels[0]` (mapped to its group), then chunks within them by their best hit at
/// `levels[1]`.
fn descent(
    ex: &mut Explorer<'_>,
    question: &Question,
    top: &[NodeId],
    levels: [&[Level]; 2],
    widen: usize,
) -> Result<bool> {
    let cfg = ex.cfg.clone();
    // Which groups? Evidence from the levels beneath, mapped to its group.
    let summaries = ex.descend(top);
    let hits = ex.grep(question, levels[0], None, cfg.max_nodes)?;
    let mut group_score: HashMap<NodeId, f32> = HashMap::new();
    for (id, s) in &hits {
        let summary = match ex.place(id) {
            Some(Place::Summary(pi, gi)) => ex.trees.plans[pi].groups[gi].summary,
            Some(Place::Detailed(pi, ci)) | Some(Place::Full(pi, ci)) => {
                let p = &ex.trees.plans[pi];
                p.groups[p.chunks[ci].group].summary
            }
            _ => continue,
        };
        // The best hit decides.
        let e = group_score.entry(summary).or_insert(0.0);
        *e = e.max(*s);
    }
    if group_score.is_empty() {
        ex.history.push("no passage matches the question".into());
        return Ok(false);
    }
    let ranked: Vec<(NodeId, f32)> = summaries
        .iter()
        .filter_map(|s| group_score.get(s).map(|v| (*s, *v)))
        .collect();
    ex.working = summaries.iter().map(|s| (*s, 0.0)).collect();
    let names: Vec<&str> = levels[0].iter().map(|l| l.name()).collect();
    ex.narrow_to(
        ranked,
        cfg.top_groups * widen,
        &format!("grep over {} picked groups", names.join("/")),
    );

    // Descend into the kept groups; rank their chunks by their own evidence.
    if !ex.exhausted() {
        let groups: Vec<NodeId> = ex.working.iter().map(|(id, _)| *id).collect();
        let group_rank: HashMap<NodeId, f32> = ex.working.iter().copied().collect();
        let detailed = ex.descend(&groups);
        let mut within: Vec<NodeId> = detailed.clone();
        for d in &detailed {
            if let Some(Place::Detailed(pi, ci)) = ex.place(d) {
                within.push(ex.trees.plans[pi].chunks[ci].full);
            }
        }
        let hits = ex.grep(question, levels[1], Some(&within), cfg.max_nodes.min(200))?;
        let mut chunk_score: HashMap<NodeId, f32> = HashMap::new();
        for (id, s) in hits {
            let Some(full) = chunk_of(ex, &id) else {
                continue;
            };
            let e = chunk_score.entry(full).or_insert(0.0);
            *e = e.max(s);
        }
        // Chunks with no hit of their own inherit a fraction of their group's score.
        let mut ranked = Vec::new();
        for d in &detailed {
            if let Some(Place::Detailed(pi, ci)) = ex.place(d) {
                let p = &ex.trees.plans[pi];
                let full = p.chunks[ci].full;
                let g = p.groups[p.chunks[ci].group].summary;
                let inherited = 0.1 * group_rank.get(&g).copied().unwrap_or(0.0);
                ranked.push((
                    full,
                    chunk_score.get(&full).copied().unwrap_or(0.0) + inherited,
                ));
            }
        }
        ex.working = within.iter().map(|id| (*id, 0.0)).collect();
        // FULL ids are what the next step reads.
        ex.working
            .retain(|(id, _)| matches!(ex.trees.place(id), Some(Place::Full(..))));
        ex.narrow_to(
            ranked,
            cfg.top_chunks * widen,
            "grep within the groups picked chunks",
        );
    }
    Ok(true)
}
