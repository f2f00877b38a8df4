//! Steps down the tree: scopes, groups, chunks, then the chunks read.

use super::Cues;
use crate::corpus::Place;
use crate::corpus::Question;
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
            let target = ex.trees.tagged_by(&id).unwrap_or(id);
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
    if first_pass && cfg.start_level == Level::Abstract {
        ex.peek(&top)?;
    }

    // 2. Which groups? Evidence from every level beneath, mapped to its group.
    let summaries = ex.descend(&top);
    let hits = ex.grep(
        question,
        &[Level::Summary, Level::Detailed, Level::Full],
        None,
        400,
    )?;
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
        return Ok(None);
    }
    let ranked: Vec<(NodeId, f32)> = summaries
        .iter()
        .filter_map(|s| group_score.get(s).map(|v| (*s, *v)))
        .collect();
    ex.working = summaries.iter().map(|s| (*s, 0.0)).collect();
    ex.narrow_to(
        ranked,
        cfg.top_groups * widen,
        "grep over summary/detailed/full picked groups",
    );

    // 3. Descend into the kept groups; rank their chunks by DETAILED and FULL evidence.
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
        let hits = ex.grep(
            question,
            &[Level::Detailed, Level::Full],
            Some(&within),
            200,
        )?;
        let mut chunk_score: HashMap<NodeId, f32> = HashMap::new();
        for (id, s) in hits {
            let full = match ex.place(&id) {
                Some(Place::Detailed(pi, ci)) | Some(Place::Full(pi, ci)) => {
                    ex.trees.plans[pi].chunks[ci].full
                }
                _ => continue,
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
    fulls.truncate((cfg.top_chunks * widen).max(cfg.min_keep));
    // How well each chunk as a whole matched (normalised to the best): a sentence inherits
    // some of its chunk's evidence, so the right passage beats a stray short sentence.
    let chunk_rank: HashMap<NodeId, f64> = {
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
    Ok(Some(Retrieved { chunks, chunk_rank }))
}
