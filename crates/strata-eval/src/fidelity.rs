//! Per-level fidelity: the share of a source's numbers, dates and names each level keeps,
//! against deleting random sentences down to the same size.

use super::tasks::{self, Doc};
use super::{LevelRow, Options, cleanup, open_fresh};
use rand::seq::SliceRandom;
use std::collections::{BTreeMap, BTreeSet};
use strata_core::error::Result;
use strata_core::level::Level;
use strata_core::text;
use strata_engine::config::Config;
use strata_engine::node::Node;

/// Key facts of `text` (numbers, dates, named entities), normalised.
fn key_facts(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in text::sentences(text) {
        let f = text::facts(&text[s.start..s.end]);
        for x in f.numbers.iter().chain(&f.dates).chain(&f.entities) {
            let x = x
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            if x.chars().count() >= 2 {
                out.insert(x);
            }
        }
    }
    out
}

fn kept(facts: &BTreeSet<String>, text: &str) -> usize {
    let t = text.to_lowercase();
    facts.iter().filter(|f| t.contains(f.as_str())).count()
}

/// `src` with random sentences deleted until it fits in `tokens`.
fn random_deletion(src: &str, tokens: usize, rng: &mut rand_chacha::ChaCha8Rng) -> String {
    let sents: Vec<(usize, &str, usize)> = text::sentences(src)
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = &src[s.start..s.end];
            (i, t, strata_engine::token::count(t))
        })
        .collect();
    let mut order: Vec<usize> = (0..sents.len()).collect();
    order.shuffle(rng);
    let mut keep = vec![false; sents.len()];
    let mut used = 0;
    for i in order {
        if used + sents[i].2 <= tokens {
            used += sents[i].2;
            keep[i] = true;
        }
    }
    sents
        .iter()
        .filter(|(i, _, _)| keep[*i])
        .map(|(_, t, _)| *t)
        .collect::<Vec<_>>()
        .join("")
}

pub(super) async fn fidelity(
    cfg: &Config,
    opts: &Options,
    pool: &[Doc],
    log: &(dyn Fn(String) + Send + Sync),
) -> Result<Vec<LevelRow>> {
    let mut files = Vec::new();
    let mut have = 0;
    for d in pool {
        if have >= opts.fidelity_tokens {
            break;
        }
        have += d.tokens;
        files.push(strata_engine::source::InputFile::single(
            strata_engine::store::ScopeKind::Doc,
            &d.name,
            strata_engine::source::SourceInput {
                id: d.name.clone(),
                text: d.text.clone(),
                round: None,
                speaker: None,
                time: None,
            },
        ));
    }
    let name = "fidelity";
    let (engine, dir) = open_fresh(opts, name, cfg)?;
    let now = strata_core::clock::unix_now();
    engine.ingest(name, &files, now)?;
    engine
        .compress(name, now, &strata_core::progress::NoProgress)
        .await?;
    let plan = engine.plan(name)?;
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for s in &plan.sources {
        texts.insert(s.id.clone(), engine.source_text(name, &s.id)?);
    }
    let source_of = |n: &Node| -> String {
        n.citations
            .iter()
            .map(|s| &texts[&s.source][s.start as usize..s.end as usize])
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    let mut by_level: BTreeMap<Level, Vec<Node>> = BTreeMap::new();
    for c in &plan.chunks {
        by_level
            .entry(Level::Detailed)
            .or_default()
            .push(engine.node(&c.detailed, now)?);
    }
    for g in &plan.groups {
        by_level
            .entry(Level::Summary)
            .or_default()
            .push(engine.node(&g.summary, now)?);
    }
    by_level
        .entry(Level::Abstract)
        .or_default()
        .push(engine.node(&plan.abstract_id, now)?);
    let mut metas: Vec<_> = plan.metadata().iter().collect();
    metas.sort();
    let mut meta_nodes = Vec::new();
    for (target, meta) in metas {
        let t = engine.node(target, now)?;
        let mut m = engine.node(meta, now)?;
        // A METADATA node cites what its target cites.
        m.citations = t.citations.clone();
        meta_nodes.push(m);
    }
    by_level.insert(Level::Metadata, meta_nodes);
    let mut rows = Vec::new();
    let mut rng = tasks::rng(opts.seed, "fidelity");
    for (level, nodes) in by_level {
        let (mut facts, mut retained, mut base, mut lvl_tok, mut src_tok) = (0, 0, 0.0, 0, 0);
        for n in &nodes {
            let src = source_of(n);
            let f = key_facts(&src);
            facts += f.len();
            retained += kept(&f, &n.text);
            let trials = 3;
            let mut b = 0;
            for _ in 0..trials {
                b += kept(&f, &random_deletion(&src, n.tokens as usize, &mut rng));
            }
            base += b as f64 / trials as f64;
            lvl_tok += n.tokens as usize;
            src_tok += strata_engine::token::count(&src);
        }
        let row = LevelRow {
            level,
            nodes: nodes.len(),
            size_ratio: lvl_tok as f64 / src_tok.max(1) as f64,
            facts,
            retention: retained as f64 / facts.max(1) as f64,
            baseline_retention: base / facts.max(1) as f64,
        };
        log(format!(
            "fidelity {}: {} nodes at {:.1} % of the source size keep {:.1} % of {} facts (random deletion: {:.1} %)",
            level,
            row.nodes,
            100.0 * row.size_ratio,
            100.0 * row.retention,
            row.facts,
            100.0 * row.baseline_retention
        ));
        rows.push(row);
    }
    cleanup(opts, engine, &dir);
    Ok(rows)
}
