//! The *context retention* task: how many of a debate's key facts an `auto` context window
//! of B tokens still holds, against two windows cut from the raw transcript (its last B
//! tokens; its first B/2 and last B/2 tokens), and how many trivial decoys it holds.

use super::tasks::{self, Planted, RetentionDebate};
use super::{BuildRow, Options, Report, cleanup, ms, open_fresh};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use strata_core::error::{Error, Result};
use strata_engine::config::Config;
use strata_engine::context::LevelChoice;

/// One instance at one budget.
#[derive(Clone, Debug, Serialize)]
pub struct RetentionRow {
    pub instance: String,
    pub budget: usize,
    /// Real tokens of the `auto` window (never more than the budget).
    pub window_tokens: usize,
    pub facts: usize,
    /// Key facts the `auto` window holds.
    pub kept: usize,
    pub retention: f64,
    /// The same for the last `budget` tokens of the transcript.
    pub last_b: f64,
    /// The same for its first `budget/2` plus last `budget/2` tokens.
    pub first_last_b: f64,
    pub decoys: usize,
    pub decoy_rate: f64,
    pub decoy_rate_last_b: f64,
    /// Kept / planted per kind of key fact.
    pub by_kind: BTreeMap<String, (usize, usize)>,
    /// Tokens of the window's overview part (0 when it has none).
    pub overview_tokens: usize,
}

/// Lower case, whitespace collapsed.
fn norm(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The window's sentences, normalised, for the key check.
fn sentences(text: &str) -> Vec<String> {
    strata_core::text::sentences(text)
        .iter()
        .map(|s| norm(&text[s.start..s.end]))
        .collect()
}

/// Whether some sentence holds every key of `p`.
fn present(sents: &[String], p: &Planted) -> bool {
    let keys: Vec<String> = p.keys.iter().map(|k| norm(k)).collect();
    sents
        .iter()
        .any(|s| keys.iter().all(|k| s.contains(k.as_str())))
}

fn share(sents: &[String], ps: &[Planted]) -> (usize, f64) {
    let n = ps.iter().filter(|p| present(sents, p)).count();
    (n, n as f64 / ps.len().max(1) as f64)
}

/// Runs the task on one generated debate: ingest, build, one `auto` window per budget.
pub(super) async fn run(
    cfg: &Config,
    opts: &Options,
    d: RetentionDebate,
    report: &mut Report,
    log: &(dyn Fn(String) + Send + Sync),
) -> Result<()> {
    let name = d.instance.name.clone();
    let (engine, dir) = open_fresh(opts, &name, cfg)?;
    let now = strata_core::clock::unix_now();
    let t = Instant::now();
    engine.ingest(&name, &d.instance.files, now)?;
    let ingest_ms = ms(t);
    let t = Instant::now();
    let b = engine
        .compress(&name, now, &strata_core::progress::NoProgress)
        .await?;
    let build_ms = ms(t);
    if !b.failures.is_empty() {
        return Err(Error::invalid(format!(
            "{name}: {} node(s) could not be built (first: {})",
            b.failures.len(),
            b.failures[0].error
        )));
    }
    report.compressor = engine.model_identity();
    report.builds.push(BuildRow {
        instance: name.clone(),
        tokens: d.instance.tokens,
        ingest_ms,
        build_ms,
        nodes: b.nodes_total,
        model_calls: b.model_calls,
        fallbacks: b.fallbacks,
    });
    let mut line = format!("{name}: {} tokens, retention", d.instance.tokens);
    for &budget in &opts.retention_budgets {
        let w = engine
            .context(
                &name,
                LevelChoice::Auto,
                budget,
                now,
                &strata_core::progress::NoProgress,
            )
            .await?;
        let row = measure(&name, budget, &w, &d.transcript, &d.facts, &d.decoys);
        line.push_str(&format!(
            "; {}: {:.0} % (last-B {:.0} %, decoys {:.0} %)",
            super::human_tokens(budget),
            100.0 * row.retention,
            100.0 * row.last_b,
            100.0 * row.decoy_rate
        ));
        report.retention.push(row);
    }
    log(line);
    cleanup(opts, engine, &dir);
    Ok(())
}

/// Scores one window.
pub(super) fn measure(
    instance: &str,
    budget: usize,
    w: &strata_engine::context::ContextWindow,
    transcript: &str,
    facts: &[Planted],
    decoys: &[Planted],
) -> RetentionRow {
    let win = sentences(&w.text);
    let last = sentences(&strata_engine::token::tail(transcript, budget));
    let mut both = strata_engine::token::head(transcript, budget / 2);
    both.push('\n');
    both.push_str(&strata_engine::token::tail(transcript, budget - budget / 2));
    let both = sentences(&both);
    let (kept, retention) = share(&win, facts);
    let mut by_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for f in facts {
        let e = by_kind.entry(f.kind.to_string()).or_default();
        e.1 += 1;
        e.0 += present(&win, f) as usize;
    }
    RetentionRow {
        instance: instance.to_string(),
        budget,
        window_tokens: w.tokens,
        facts: facts.len(),
        kept,
        retention,
        last_b: share(&last, facts).1,
        first_last_b: share(&both, facts).1,
        decoys: decoys.len(),
        decoy_rate: share(&win, decoys).1,
        decoy_rate_last_b: share(&last, decoys).1,
        by_kind,
        overview_tokens: w
            .text
            .split("\n\n## ")
            .next()
            .filter(|b| b.starts_with("## Overview"))
            .map_or(0, strata_engine::token::count),
    }
}

/// The generated debate of `opts` (None when the task is off).
pub(super) fn generate(
    opts: &Options,
    pool: &[tasks::Doc],
    pool_words: &std::collections::HashSet<String>,
    seed: u64,
) -> Result<Option<RetentionDebate>> {
    if opts.retention_rounds == 0 {
        return Ok(None);
    }
    let mut rng = tasks::rng(seed, "retention");
    let mut names = tasks::Names::new(pool_words.clone());
    let filler = tasks::filler_sentences(pool, 20_000);
    tasks::retention_debate(
        &filler,
        opts.retention_rounds,
        opts.retention_speakers,
        opts.retention_facts,
        &mut rng,
        &mut names,
        &format!("retention-{}r-s{seed}", opts.retention_rounds),
    )
    .map(Some)
}

/// Retention on a hand-written debate (text nobody tuned the compressor on): a question's
/// facts are kept when every expected string of it is somewhere in the window.
pub(super) async fn handwritten(
    engine: &strata_engine::engine::Engine,
    inst: &tasks::Instance,
    opts: &Options,
    now: u64,
    report: &mut Report,
) -> Result<()> {
    let mut transcript = String::new();
    for f in &inst.files {
        for s in &f.sources {
            transcript.push_str(&format!(
                "Round {}, {}: {}\n",
                s.round.unwrap_or(0),
                s.speaker.as_deref().unwrap_or(""),
                s.text
            ));
        }
    }
    // Set questions ask for several turns; their expected strings are speakers, not facts.
    let facts: Vec<Planted> = inst
        .questions
        .iter()
        .filter(|q| q.task == "handwritten")
        .map(|q| Planted {
            kind: "handwritten",
            sentence: q.question.clone(),
            keys: q.answers.clone(),
            round: 0,
            speaker: String::new(),
        })
        .collect();
    // The whole text is one "sentence": the expected strings may be far apart.
    let whole = |t: &str| vec![norm(t)];
    for &budget in &opts.retention_budgets {
        let w = engine
            .context(
                &inst.name,
                LevelChoice::Auto,
                budget,
                now,
                &strata_core::progress::NoProgress,
            )
            .await?;
        let mut row = measure(&inst.name, budget, &w, &transcript, &facts, &[]);
        let mut both = strata_engine::token::head(&transcript, budget / 2);
        both.push('\n');
        both.push_str(&strata_engine::token::tail(
            &transcript,
            budget - budget / 2,
        ));
        let (kept, retention) = share(&whole(&w.text), &facts);
        row.kept = kept;
        row.retention = retention;
        row.last_b = share(
            &whole(&strata_engine::token::tail(&transcript, budget)),
            &facts,
        )
        .1;
        row.first_last_b = share(&whole(&both), &facts).1;
        row.by_kind.clear();
        report.retention.push(row);
    }
    Ok(())
}
