//! How each level's nodes are made — a chunk's DETAILED, a group's SUMMARY, the ABSTRACT,
//! METADATA — which are live already, and what text a node's inputs are.

use super::{Run, priority};
use crate::error::Result;
use crate::level::Level;
use crate::model::offline::{self, TagCounts};
use crate::model::{CompressRequest, Inputs, Passage};
use crate::node::{Meta, Node, NodeId, Span, merge_spans};
use crate::plan::Reduced;
use crate::token;
use futures::future::{join, join_all};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Run<'_> {
    pub(super) fn horizon(&self) -> u64 {
        self.b.refresh_before.unwrap_or(self.b.now).max(self.b.now)
    }

    /// The common warm case: every node of the group is live and none is to be retried.
    /// Checked on the deadline index (and the marks, if any) without decoding a node.
    fn group_is_live(&self, gi: usize) -> Result<bool> {
        let plan = self.b.plan;
        let g = &plan.groups[gi];
        let mut n = 0;
        let mut marked = Vec::new();
        let ids = g
            .chunks
            .iter()
            .map(|&ci| plan.chunks[ci].detailed)
            .chain(std::iter::once(g.summary));
        let xs: Vec<NodeId> = ids
            .flat_map(|id| std::iter::once(id).chain(plan.metadata().get(&id).copied()))
            .collect();
        // One look-up for the whole group (one round trip on a shared store).
        if !self.b.store.all_live(&xs, self.horizon())? {
            return Ok(false);
        }
        for x in xs {
            if let Some(m) = self.stored_mark(&x)? {
                if m.is_retried() {
                    return Ok(false);
                }
                marked.push((x, m));
            }
            n += 1;
        }
        self.marks.lock().expect("poisoned").extend(marked);
        self.hits.fetch_add(n, Ordering::Relaxed);
        self.b.progress.inc(n);
        Ok(true)
    }

    pub(super) async fn group(&self, gi: usize) -> Option<NodeId> {
        let plan = self.b.plan;
        let g = &plan.groups[gi];
        match self.group_is_live(gi) {
            Ok(true) => return Some(g.summary),
            Ok(false) => {}
            Err(e) => {
                self.fail(
                    g.summary,
                    Level::Summary,
                    format!("{} summary", g.label),
                    e.to_string(),
                );
                return None;
            }
        }
        let dets: Vec<Option<Node>> = join_all(
            g.chunks
                .iter()
                .map(|&ci| self.detailed(ci, self.depths.groups[gi] + 1)),
        )
        .await;
        // Each DETAILED's tag counts, kept for the SUMMARY's tags (their sum).
        let metas = join_all(dets.iter().flatten().map(|d| async {
            match self.metadata(d, &[]).await {
                Ok(counts) => counts,
                Err(e) => {
                    self.fail(d.id, Level::Metadata, "metadata".into(), e.to_string());
                    None
                }
            }
        }));
        let summary = async {
            let what = format!("{} summary", g.label);
            if dets.iter().any(Option::is_none) {
                self.fail(
                    g.summary,
                    Level::Summary,
                    what,
                    "an input node failed".into(),
                );
                return None;
            }
            let dets: Vec<&Node> = dets.iter().flatten().collect();
            match self.summary(gi, &dets).await {
                Ok(s) => s,
                Err(e) => {
                    self.fail(g.summary, Level::Summary, what, e.to_string());
                    None
                }
            }
        };
        let (counts, summary) = join(metas, summary).await;
        let s = summary?;
        let parts: Vec<(&Node, Option<Arc<TagCounts>>)> =
            dets.iter().flatten().zip(counts).collect();
        if let Err(e) = self.metadata(&s, &parts).await {
            self.fail(s.id, Level::Metadata, "metadata".into(), e.to_string());
        }
        Some(s.id)
    }

    async fn detailed(&self, ci: usize, depth: u32) -> Option<Node> {
        let c = &self.b.plan.chunks[ci];
        let what = format!(
            "{} [{}..{}) detailed",
            self.b.plan.sources[c.source].id, c.start, c.end
        );
        let r: Result<Option<Node>> = async {
            if let Some(n) = self.cached(&c.detailed)? {
                return Ok(Some(n));
            }
            let full = self.b.store.get_node(&c.full)?.ok_or_else(|| {
                crate::Error::DataCorruption(format!("FULL node {} is missing", c.full))
            })?;
            let target = ((full.tokens as f64) * self.b.cfg.levels.detailed_ratio).ceil() as usize;
            let req = CompressRequest {
                level: Level::Detailed,
                passages: vec![Passage {
                    text: full.text.clone(),
                    // The offline compressor would print the label into the text; a model
                    // needs it to keep who said what in which round.
                    label: if self.b.model.trusted() {
                        None
                    } else {
                        self.b.plan.chunk_label(ci)
                    },
                }],
                target_tokens: target.max(1),
                inputs: Default::default(),
                feedback: None,
                priority: priority(depth),
            };
            match self.compress(req).await {
                Ok((text, mark)) => Ok(Some(
                    self.save(
                        self.derived(
                            c.detailed,
                            Level::Detailed,
                            text,
                            vec![full.id],
                            full.citations.clone(),
                            full.meta.clone(),
                        )
                        .await?,
                        mark,
                    )?,
                )),
                Err(e) => {
                    self.fail(c.detailed, Level::Detailed, what.clone(), e);
                    Ok(None)
                }
            }
        }
        .await;
        r.unwrap_or_else(|e| {
            self.fail(c.detailed, Level::Detailed, what, e.to_string());
            None
        })
    }

    async fn summary(&self, gi: usize, dets: &[&Node]) -> Result<Option<Node>> {
        let plan = self.b.plan;
        let g = &plan.groups[gi];
        if let Some(n) = self.cached(&g.summary)? {
            return Ok(Some(n));
        }
        let passages = g
            .chunks
            .iter()
            .zip(dets)
            .map(|(&ci, d)| Passage {
                text: d.text.clone(),
                label: if self.b.model.trusted() {
                    plan.sources[plan.chunks[ci].source].speaker.clone()
                } else {
                    plan.chunk_label(ci)
                },
            })
            .collect();
        let target = (g.full_tokens as f64 * self.b.cfg.levels.summary_ratio).ceil() as usize;
        let req = CompressRequest {
            level: Level::Summary,
            passages,
            target_tokens: target.max(1),
            inputs: Default::default(),
            feedback: None,
            priority: priority(self.depths.groups[gi]),
        };
        match self.compress(req).await {
            Ok((text, mark)) => {
                let meta = merge_meta(dets.iter().map(|d| &d.meta));
                let spans = merge_spans(dets.iter().flat_map(|d| d.citations.iter().cloned()));
                let children: Vec<NodeId> = dets.iter().map(|d| d.id).collect();
                let mark = self.mark_over(mark, &children);
                Ok(Some(
                    self.save(
                        self.derived(g.summary, Level::Summary, text, children, spans, meta)
                            .await?,
                        mark,
                    )?,
                ))
            }
            Err(e) => {
                self.fail(g.summary, Level::Summary, format!("{} summary", g.label), e);
                Ok(None)
            }
        }
    }

    /// An intermediate SUMMARY of the reduction (`plan.reductions[ri]`) over its inputs'
    /// nodes (`None` where an input failed).
    pub(super) async fn reduction(&self, ri: usize, inputs: Vec<Option<NodeId>>) -> Option<NodeId> {
        let plan = self.b.plan;
        let r = &plan.reductions[ri];
        let what = format!("{} ({}) summary", plan.scope, r.label);
        let made = self
            .reduce_step(
                r.id,
                Level::Summary,
                &r.inputs,
                inputs,
                r.target_tokens,
                &what,
            )
            .await;
        match made {
            Ok(n) => n.map(|n| n.id),
            Err(e) => {
                self.fail(r.id, Level::Summary, what, e.to_string());
                None
            }
        }
    }

    pub(super) async fn abstract_node(&self, inputs: Vec<Option<NodeId>>) -> Result<Option<Node>> {
        let plan = self.b.plan;
        let what = format!("{} abstract", plan.scope);
        self.reduce_step(
            plan.abstract_id,
            Level::Abstract,
            &plan.abstract_inputs,
            inputs,
            plan.abstract_target,
            &what,
        )
        .await
    }

    /// A node made from the summaries `ids` of the reduction's inputs `of`: an
    /// intermediate SUMMARY or the ABSTRACT.
    async fn reduce_step(
        &self,
        id: NodeId,
        level: Level,
        of: &[Reduced],
        ids: Vec<Option<NodeId>>,
        target: usize,
        what: &str,
    ) -> Result<Option<Node>> {
        if let Some(n) = self.cached(&id)? {
            return Ok(Some(n));
        }
        if ids.iter().any(Option::is_none) || ids.is_empty() || ids.len() != of.len() {
            self.fail(id, level, what.to_string(), "an input node failed".into());
            return Ok(None);
        }
        let mut inputs: Vec<Node> = Vec::with_capacity(ids.len());
        for i in ids.into_iter().flatten() {
            inputs.push(self.stored(&i)?.ok_or_else(|| {
                crate::Error::DataCorruption(format!("SUMMARY {i} vanished during the build"))
            })?);
        }
        // One call above its inputs.
        let depth = of.first().map_or(1, |&r| match r {
            Reduced::Group(g) => self.depths.groups[g],
            Reduced::Reduction(ri) => self.depths.reductions[ri],
        }) - 1;
        let req = CompressRequest {
            level,
            passages: self.reduce_passages(of, &inputs),
            target_tokens: target.max(1),
            inputs: Inputs::Summaries,
            feedback: None,
            priority: priority(depth),
        };
        match self.compress(req).await {
            Ok((text, mark)) => {
                let meta = merge_meta(inputs.iter().map(|s| &s.meta));
                let spans = merge_spans(inputs.iter().flat_map(|s| s.citations.iter().cloned()));
                let children: Vec<NodeId> = inputs.iter().map(|s| s.id).collect();
                let mark = self.mark_over(mark, &children);
                Ok(Some(self.save(
                    self.derived(id, level, text, children, spans, meta).await?,
                    mark,
                )?))
            }
            Err(e) => {
                self.fail(id, level, what.to_string(), e);
                Ok(None)
            }
        }
    }

    /// The passages of a reduction step: each input's text under its label (`Round 12`,
    /// `Rounds 3–17`). The offline compressor prints labels into its output, one line per
    /// group it kept (`Round 12: ...`), so an intermediate SUMMARY it made is split back
    /// into those lines, each under its group's label: its ABSTRACT reads like one made
    /// straight from the groups' SUMMARYs.
    fn reduce_passages(&self, of: &[Reduced], inputs: &[Node]) -> Vec<Passage> {
        let plan = self.b.plan;
        let trusted = self.b.model.trusted();
        let mut out: Vec<Passage> = Vec::new();
        for (&r, n) in of.iter().zip(inputs) {
            match r {
                Reduced::Reduction(ri) if trusted => {
                    let (a, b) = plan.reductions[ri].groups;
                    let labels: Vec<String> = plan.groups[a..=b]
                        .iter()
                        .map(|g| format!("{}: ", g.label))
                        .collect();
                    for line in n.text.lines() {
                        match labels.iter().find(|l| line.starts_with(l.as_str())) {
                            Some(l) => out.push(Passage {
                                text: line[l.len()..].to_string(),
                                label: Some(l[..l.len() - 2].to_string()),
                            }),
                            None => match out.last_mut() {
                                Some(p) => {
                                    p.text.push('\n');
                                    p.text.push_str(line);
                                }
                                None => out.push(Passage {
                                    text: line.to_string(),
                                    label: None,
                                }),
                            },
                        }
                    }
                }
                _ => out.push(Passage {
                    text: n.text.clone(),
                    label: Some(plan.reduced_label(r).to_string()),
                }),
            }
        }
        out
    }

    /// The text of each of `target`'s citations (a DETAILED or SUMMARY node), put together
    /// from the FULL chunks beneath it. FULL nodes are content-addressed and immutable, so
    /// a source replaced while the build runs cannot change what is read here (its text in
    /// the store may already be the new one); a chunk that is gone fails this node only.
    fn cited_text(&self, target: &Node) -> Result<Vec<String>> {
        let fulls: Vec<NodeId> = match target.level {
            Level::Detailed => target.children.clone(),
            _ => {
                let mut v = Vec::with_capacity(target.children.len());
                for d in &target.children {
                    let det = self.stored(d)?.ok_or_else(|| {
                        crate::Error::DataCorruption(format!("DETAILED node {d} is missing"))
                    })?;
                    v.extend(det.children);
                }
                v
            }
        };
        let mut pieces: Vec<(Span, String)> = Vec::with_capacity(fulls.len());
        for id in &fulls {
            let n = self.stored(id)?.ok_or_else(|| {
                crate::Error::DataCorruption(format!("FULL node {id} is missing"))
            })?;
            let span = n.citations.first().cloned().ok_or_else(|| {
                crate::Error::DataCorruption(format!("FULL node {id} has no span"))
            })?;
            pieces.push((span, n.text));
        }
        pieces.sort_by(|a, b| (&a.0.source, a.0.start).cmp(&(&b.0.source, b.0.start)));
        target
            .citations
            .iter()
            .map(|span| {
                let mut text = String::new();
                let mut at = span.start;
                for (p, t) in &pieces {
                    if p.source == span.source && p.start == at && p.end <= span.end {
                        text.push_str(t);
                        at = p.end;
                    }
                }
                if at != span.end {
                    return Err(crate::Error::DataCorruption(format!(
                        "the chunks of {} [{}..{}) are not all in the store (the source changed during the build?)",
                        span.source, span.start, span.end
                    )));
                }
                Ok(text)
            })
            .collect()
    }

    /// METADATA of `target`: tags extracted from the FULL text beneath it — for a SUMMARY,
    /// the sum of its DETAILEDs' tag counts (`parts`, in order: those at hand, the others
    /// read again), not a second reading; for the ABSTRACT, the tags that recur across the
    /// groups' SUMMARYs' METADATA (re-reading the whole scope for one node would cost as
    /// much as the rest of the build). Returns a DETAILED's counts when it made its node.
    pub(super) async fn metadata(
        &self,
        target: &Node,
        parts: &[(&Node, Option<Arc<TagCounts>>)],
    ) -> Result<Option<Arc<TagCounts>>> {
        let Some(&id) = self.b.plan.metadata().get(&target.id) else {
            return Ok(None);
        };
        if self.cached(&id)?.is_some() {
            return Ok(None);
        }
        let mut made = None;
        let tags = if target.level == Level::Abstract {
            // Every group's tags (the ABSTRACT's inputs may be intermediate SUMMARYs,
            // which have no METADATA).
            let mut children = Vec::new();
            for g in &self.b.plan.groups {
                let mid = self.b.plan.metadata().get(&g.summary).copied();
                if let Some(n) = mid
                    .map(|m| self.stored_live(&m, self.b.now))
                    .transpose()?
                    .flatten()
                    && let Some(t) = n.meta.tags
                {
                    children.push(t);
                }
            }
            offline::merge_tags(&children, 16)
        } else if target.level == Level::Summary && !parts.is_empty() {
            let mut have: Vec<std::result::Result<Arc<TagCounts>, Vec<String>>> = Vec::new();
            for (d, c) in parts {
                have.push(match c {
                    Some(c) => Ok(c.clone()),
                    None => Err(self.cited_text(d)?),
                });
            }
            crate::model::spawn_cpu(move || {
                let mut sum = TagCounts::default();
                for part in have {
                    match part {
                        Ok(c) => sum.add(&c),
                        Err(texts) => {
                            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                            sum.add(&TagCounts::of(&refs));
                        }
                    }
                }
                sum.tags(12)
            })
            .await
            .map_err(crate::Error::Internal)?
        } else {
            let texts = self.cited_text(target)?;
            let counts = crate::model::spawn_cpu(move || {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                TagCounts::of(&refs)
            })
            .await
            .map_err(crate::Error::Internal)?;
            let tags = counts.tags(12);
            made = Some(Arc::new(counts));
            tags
        };
        let mut meta = target.meta.clone();
        let text = crate::node::tags_text(&meta, &tags);
        meta.tags = Some(tags);
        // Tags come from the FULL text beneath, never from model output: no mark.
        self.save(
            self.derived(
                id,
                Level::Metadata,
                text,
                vec![target.id],
                target.citations.clone(),
                meta,
            )
            .await?,
            None,
        )?;
        Ok(made)
    }

    /// A derived node (its text tokenised on rayon, not on the executor).
    async fn derived(
        &self,
        id: NodeId,
        level: Level,
        text: String,
        children: Vec<NodeId>,
        citations: Vec<Span>,
        meta: Meta,
    ) -> Result<Node> {
        let (text, tokens) = crate::model::spawn_cpu(move || {
            let t = token::count(&text) as u32;
            (text, t)
        })
        .await
        .map_err(crate::Error::Internal)?;
        Ok(Node {
            id,
            scope: self.b.plan.scope.clone(),
            level,
            tokens,
            text,
            children,
            citations,
            meta,
            created_at: self.b.now,
            expires_at: self.expires_at(),
        })
    }
}

pub(crate) fn merge_meta<'a>(metas: impl Iterator<Item = &'a Meta>) -> Meta {
    let mut m = Meta::default();
    for x in metas {
        for r in &x.rounds {
            if !m.rounds.contains(r) {
                m.rounds.push(*r);
            }
        }
        for s in &x.speakers {
            if !m.speakers.contains(s) {
                m.speakers.push(s.clone());
            }
        }
        if m.headings.is_empty() {
            m.headings = x.headings.clone();
        }
        if let Some(t) = x.time {
            m.time = Some(m.time.map_or(t, |s| s.merge(t)));
        }
    }
    m.rounds.sort_unstable();
    m
}
