//! The evaluation harness (`strata eval`): generates tasks from real text with a seed,
//! runs them through the engine exactly as a user would (ingest, compress, query), scores
//! every answer against its gold spans, and writes a JSON report, a Markdown table and a
//! plot.
//!
//! Tasks: *single needle* (a unique fact planted at a controlled depth of a haystack),
//! *multi needle* (three facts in three documents, all needed), *multi hop* (a fact found only
//! through another), *debate recall* (planted proposals, disagreements, changes of position
//! and same-round questions in a generated debate), and *per-level fidelity* (the share of
//! the source's numbers, dates and names each level keeps, against deleting random sentences
//! down to the same size).

mod fidelity;
mod handwritten;
pub mod plot;
mod report;
mod retention;
pub mod tasks;

pub use handwritten::handwritten;
pub use report::{human_tokens, markdown, parse_tokens};
pub use retention::RetentionRow;

use rand::seq::SliceRandom;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;
use strata_core::error::{Error, Result};
use strata_core::level::Level;
use strata_engine::config::Config;
use strata_engine::engine::Engine;
use strata_engine::navigate::QueryResult;
use tasks::{Doc, Gold, Instance, Question};

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    pub seed: u64,
    /// Haystack sizes in tokens (needle tasks).
    pub sizes: Vec<usize>,
    /// Single needles planted in each haystack.
    pub needles: usize,
    /// Needles about real places asked in other words, per haystack (at most 40).
    pub paraphrases: usize,
    /// Multi-needle questions (three facts each) per haystack.
    pub multi: usize,
    /// Multi-hop questions (two linked facts each) per haystack.
    pub hops: usize,
    /// Rounds of the generated debate (0 = no debate task).
    pub debate_rounds: usize,
    pub debate_speakers: usize,
    pub debate_topics: usize,
    /// Rounds of the aggregate debate, whose questions ask for sets of turns (0 = no
    /// aggregate task).
    pub aggregate_rounds: usize,
    pub aggregate_speakers: usize,
    pub aggregate_topics: usize,
    /// Tokens of text for the fidelity task (0 = no fidelity task).
    pub fidelity_tokens: usize,
    /// Rounds of the context-retention debate (0 = no retention task).
    pub retention_rounds: usize,
    pub retention_speakers: usize,
    /// Key facts planted in it (as many decoys).
    pub retention_facts: usize,
    /// Window budgets measured (also on the hand-written debates).
    pub retention_budgets: Vec<usize>,
    /// More seeds for the retention debate (a check on text the defaults were not tuned on).
    pub retention_seeds: Vec<u64>,
    /// Hand-written questions over given files (e.g. data/questions.json), asked as the
    /// `handwritten` task.
    pub questions: Option<PathBuf>,
    /// Where the stores are made (one per task instance, removed afterwards unless `keep`).
    #[serde(skip)]
    pub work: PathBuf,
    #[serde(skip)]
    pub keep: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 7,
            sizes: vec![8_000, 32_000, 128_000, 512_000, 1_000_000, 2_000_000],
            needles: 20,
            paraphrases: 10,
            multi: 4,
            hops: 4,
            debate_rounds: 200,
            debate_speakers: 5,
            debate_topics: 12,
            aggregate_rounds: 300,
            aggregate_speakers: 5,
            aggregate_topics: 8,
            fidelity_tokens: 100_000,
            retention_rounds: 300,
            retention_speakers: 5,
            retention_facts: 50,
            retention_budgets: vec![1_000, 2_000, 4_000, 8_000],
            retention_seeds: Vec::new(),
            questions: None,
            work: PathBuf::from("eval-work"),
            keep: false,
        }
    }
}

/// The outcome of one question.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub instance: String,
    pub task: &'static str,
    pub question: String,
    pub expected: Vec<String>,
    pub gold: Vec<Gold>,
    pub correct: bool,
    /// The expected strings were all in the answer.
    pub answered: bool,
    pub citation_precision: f64,
    pub citation_recall: f64,
    pub depth: Option<f64>,
    pub answer: String,
    pub cited: Vec<Gold>,
    pub tokens_to_root: u64,
    pub sub_calls: u32,
    /// Model calls the query made (root and sub; 0 offline), and whether the navigator
    /// fell back to the offline one.
    pub model_calls: u64,
    pub fell_back: bool,
    pub ms: f64,
}

/// One task at one size.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRow {
    pub task: String,
    pub instance: String,
    /// Tokens of the whole context the questions are asked of.
    pub full_tokens: usize,
    pub questions: usize,
    pub correct: usize,
    pub accuracy: f64,
    pub citation_precision: f64,
    pub citation_recall: f64,
    /// Mean tokens the navigator read (what a root model would be sent) per question.
    pub tokens_to_root: f64,
    pub sub_calls: f64,
    /// Mean model calls per question (root and sub; 0 offline).
    pub model_calls: f64,
    /// Questions where the LLM navigator gave up and the offline one answered.
    pub fell_back: usize,
    /// Mean wall time of one query, milliseconds.
    pub query_ms: f64,
}

/// Building one instance.
#[derive(Clone, Debug, Serialize)]
pub struct BuildRow {
    pub instance: String,
    pub tokens: usize,
    pub ingest_ms: f64,
    pub build_ms: f64,
    pub nodes: usize,
    pub model_calls: u64,
    pub fallbacks: u64,
}

/// What one level keeps of its sources' key facts.
#[derive(Clone, Debug, Serialize)]
pub struct LevelRow {
    pub level: Level,
    pub nodes: usize,
    /// Level tokens / source tokens.
    pub size_ratio: f64,
    pub facts: usize,
    pub retention: f64,
    /// The same, for the sources with random sentences deleted down to the level's size.
    pub baseline_retention: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub strata_version: &'static str,
    pub options: Options,
    pub compressor: String,
    pub navigator: String,
    pub corpus_documents: usize,
    pub corpus_tokens: usize,
    pub tasks: Vec<TaskRow>,
    pub builds: Vec<BuildRow>,
    pub levels: Vec<LevelRow>,
    /// Context retention: key facts in `auto` windows per budget, against baselines.
    pub retention: Vec<RetentionRow>,
    pub questions: Vec<Outcome>,
    pub wall_s: f64,
    /// False in the checkpoints written while a run is going (see [`run`]'s `checkpoint`).
    pub complete: bool,
}

impl Report {
    /// Accuracy over every question of `task` (all sizes), or None when there were none.
    pub fn accuracy(&self, task: &str) -> Option<f64> {
        self.accuracy_where(|t| t == task)
    }

    /// Accuracy over every debate question.
    pub fn debate_accuracy(&self) -> Option<f64> {
        self.accuracy_where(|t| t.starts_with("debate"))
    }

    /// Mean citation recall and precision over every question of `task` (all sizes), or
    /// None when there were none: what set-valued questions are scored on.
    pub fn citation_scores(&self, task: &str) -> Option<(f64, f64)> {
        let qs: Vec<&Outcome> = self.questions.iter().filter(|q| q.task == task).collect();
        let n = qs.len() as f64;
        (!qs.is_empty()).then(|| {
            (
                qs.iter().map(|q| q.citation_recall).sum::<f64>() / n,
                qs.iter().map(|q| q.citation_precision).sum::<f64>() / n,
            )
        })
    }

    /// The score a `--floor NAME=MIN` names: `debate` (every debate question's accuracy),
    /// `TASK_recall` / `TASK_precision` (mean citation recall / precision of a task, e.g.
    /// `aggregate_recall`), else the accuracy of task NAME.
    pub fn floor_score(&self, name: &str) -> Option<f64> {
        if name == "debate" {
            return self.debate_accuracy();
        }
        if let Some(task) = name.strip_suffix("_recall") {
            return self.citation_scores(task).map(|(r, _)| r);
        }
        if let Some(task) = name.strip_suffix("_precision") {
            return self.citation_scores(task).map(|(_, p)| p);
        }
        self.accuracy(name)
    }

    fn accuracy_where(&self, task: impl Fn(&str) -> bool) -> Option<f64> {
        let (n, ok) = self
            .questions
            .iter()
            .filter(|q| task(q.task))
            .fold((0usize, 0usize), |(n, ok), q| {
                (n + 1, ok + q.correct as usize)
            });
        (n > 0).then(|| ok as f64 / n as f64)
    }
}

/// Reads every `.txt` file of `dirs` (sorted by name within a directory) as the pool.
/// Files that are not valid UTF-8 or are empty are an error naming the file.
pub fn load_corpus(dirs: &[PathBuf]) -> Result<Vec<Doc>> {
    let mut docs = Vec::new();
    for dir in dirs {
        let io = |source| Error::Io {
            path: dir.clone(),
            err: source,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::invalid(format!(
                "{} has no .txt files to build haystacks from",
                dir.display()
            )));
        }
        let corpus = dir
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("corpus")
            .to_string();
        for f in files {
            let bytes = std::fs::read(&f).map_err(|source| Error::Io {
                path: f.clone(),
                err: source,
            })?;
            let text = String::from_utf8(bytes)
                .map_err(|e| Error::invalid(format!("{} is not UTF-8: {e}", f.display())))?;
            let text = text.replace("\r\n", "\n");
            if text.trim().is_empty() {
                continue;
            }
            let file = f.file_name().and_then(|s| s.to_str()).unwrap_or("doc");
            docs.push(Doc {
                name: format!("{corpus}/{file}"),
                text,
                tokens: 0,
            });
        }
    }
    use rayon::prelude::*;
    docs.par_iter_mut()
        .for_each(|d| d.tokens = strata_engine::token::count(&d.text));
    Ok(docs)
}

/// Runs the tasks. `log` gets one line per finished step; `checkpoint` gets the report so far
/// after every finished instance (so a long run that is interrupted keeps what it did).
pub async fn run(
    cfg: &Config,
    opts: &Options,
    corpus: &[Doc],
    log: &(dyn Fn(String) + Send + Sync),
    checkpoint: &(dyn Fn(&Report) + Send + Sync),
) -> Result<Report> {
    let t0 = Instant::now();
    if corpus.is_empty() {
        return Err(Error::invalid("the corpus is empty"));
    }
    // The pool in a seeded order: each corpus directory shuffled, the directories kept in
    // the order given (so the first — e.g. the essays — makes the small haystacks).
    let mut pool: Vec<Doc> = Vec::new();
    let mut by_dir: BTreeMap<usize, Vec<Doc>> = BTreeMap::new();
    let mut dirs: Vec<String> = Vec::new();
    for d in corpus {
        let dir = d.name.split('/').next().unwrap_or("").to_string();
        let i = match dirs.iter().position(|x| *x == dir) {
            Some(i) => i,
            None => {
                dirs.push(dir);
                dirs.len() - 1
            }
        };
        by_dir.entry(i).or_default().push(d.clone());
    }
    let mut rng = tasks::rng(opts.seed, "pool");
    for (_, mut docs) in by_dir {
        docs.shuffle(&mut rng);
        pool.extend(docs);
    }
    let corpus_tokens = pool.iter().map(|d| d.tokens).sum();
    // Invented names avoid every word of the pool; each instance draws its own, so a
    // size's tasks do not depend on which other sizes run.
    let pool_words = tasks::words_of(&pool);
    let mut report = Report {
        strata_version: env!("CARGO_PKG_VERSION"),
        options: opts.clone(),
        compressor: String::new(),
        navigator: String::new(),
        corpus_documents: pool.len(),
        corpus_tokens,
        tasks: Vec::new(),
        builds: Vec::new(),
        levels: Vec::new(),
        retention: Vec::new(),
        questions: Vec::new(),
        wall_s: 0.0,
        complete: false,
    };
    std::fs::create_dir_all(&opts.work).map_err(|source| Error::Io {
        path: opts.work.clone(),
        err: source,
    })?;

    // Needle haystacks, one per size.
    for &size in &opts.sizes {
        let mut rng = tasks::rng(opts.seed, &format!("haystack/{size}"));
        let mut names = tasks::Names::new(pool_words.clone());
        let mut plants = Vec::new();
        for _ in 0..opts.needles {
            plants.push(tasks::single_fact(&mut rng, &mut names));
        }
        let mut cities = tasks::cities();
        for _ in 0..opts.paraphrases {
            plants.extend(tasks::paraphrase_fact(&mut rng, &mut cities));
        }
        for _ in 0..opts.multi {
            plants.push(tasks::multi_fact(&mut rng, &mut names));
        }
        for _ in 0..opts.hops {
            plants.push(tasks::hop_fact(&mut rng, &mut names));
        }
        let name = format!("haystack-{}", human_tokens(size));
        let inst = tasks::haystack(&pool, size, plants, &mut rng, &name)?;
        run_instance(cfg, opts, inst, &mut report, log).await?;
        report.wall_s = t0.elapsed().as_secs_f64();
        checkpoint(&report);
    }

    // The debate.
    if opts.debate_rounds > 0 {
        let mut rng = tasks::rng(opts.seed, "debate");
        let mut names = tasks::Names::new(pool_words.clone());
        let filler = tasks::filler_sentences(&pool, 20_000);
        let inst = tasks::debate(
            &filler,
            opts.debate_rounds,
            opts.debate_speakers,
            opts.debate_topics,
            &mut rng,
            &mut names,
            &format!("debate-{}r", opts.debate_rounds),
        )?;
        run_instance(cfg, opts, inst, &mut report, log).await?;
        report.wall_s = t0.elapsed().as_secs_f64();
        checkpoint(&report);
    }

    // Set-valued questions over a generated debate.
    if opts.aggregate_rounds > 0 {
        let mut rng = tasks::rng(opts.seed, "aggregate");
        let mut names = tasks::Names::new(pool_words.clone());
        let filler = tasks::filler_sentences(&pool, 20_000);
        let inst = tasks::aggregate_debate(
            &filler,
            opts.aggregate_rounds,
            opts.aggregate_speakers,
            opts.aggregate_topics,
            &mut rng,
            &mut names,
            &format!("aggregate-{}r", opts.aggregate_rounds),
        )?;
        run_instance(cfg, opts, inst, &mut report, log).await?;
        report.wall_s = t0.elapsed().as_secs_f64();
        checkpoint(&report);
    }

    // Context retention: the seed, then any extra seeds.
    for seed in std::iter::once(opts.seed).chain(opts.retention_seeds.iter().copied()) {
        if let Some(d) = retention::generate(opts, &pool, &pool_words, seed)? {
            retention::run(cfg, opts, d, &mut report, log).await?;
            report.wall_s = t0.elapsed().as_secs_f64();
            checkpoint(&report);
        }
    }

    // Hand-written questions.
    if let Some(path) = &opts.questions {
        for inst in handwritten(path)? {
            run_instance(cfg, opts, inst, &mut report, log).await?;
            report.wall_s = t0.elapsed().as_secs_f64();
            checkpoint(&report);
        }
    }

    // Fidelity.
    if opts.fidelity_tokens > 0 {
        report.levels = fidelity::fidelity(cfg, opts, &pool, log).await?;
    }
    report.wall_s = t0.elapsed().as_secs_f64();
    report.complete = true;
    Ok(report)
}

fn open_fresh(opts: &Options, name: &str, cfg: &Config) -> Result<(Engine, PathBuf)> {
    let dir = opts.work.join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            err: source,
        })?;
    }
    let engine = Engine::open(&dir, cfg.clone())?;
    Ok((engine, dir))
}

fn cleanup(opts: &Options, engine: Engine, dir: &Path) {
    drop(engine);
    if !opts.keep {
        let _ = std::fs::remove_dir_all(dir);
    }
}

async fn run_instance(
    cfg: &Config,
    opts: &Options,
    inst: Instance,
    report: &mut Report,
    log: &(dyn Fn(String) + Send + Sync),
) -> Result<()> {
    let (engine, dir) = open_fresh(opts, &inst.name, cfg)?;
    report.compressor = engine.model_identity();
    report.navigator = if cfg.model.root.is_empty() || cfg.model.root == "offline" {
        "offline".into()
    } else {
        cfg.model.root.clone()
    };
    let now = strata_core::clock::unix_now();
    let t = Instant::now();
    engine.ingest(&inst.name, &inst.files, now)?;
    let ingest_ms = ms(t);
    let t = Instant::now();
    let b = engine
        .compress(&inst.name, now, &strata_core::progress::NoProgress)
        .await?;
    let build_ms = ms(t);
    if !b.failures.is_empty() {
        return Err(Error::invalid(format!(
            "{}: {} node(s) could not be built (first: {})",
            inst.name,
            b.failures.len(),
            b.failures[0].error
        )));
    }
    report.builds.push(BuildRow {
        instance: inst.name.clone(),
        tokens: inst.tokens,
        ingest_ms,
        build_ms,
        nodes: b.nodes_total,
        model_calls: b.model_calls,
        fallbacks: b.fallbacks,
    });
    let mut outcomes = Vec::new();
    for q in &inst.questions {
        let t = Instant::now();
        let r = engine
            .query(&strata_engine::Ask::new(
                std::slice::from_ref(&inst.name),
                &q.question,
                now,
            ))
            .await?;
        outcomes.push(score(&inst.name, q, &r, ms(t)));
    }
    let tasks: BTreeSet<&'static str> = outcomes.iter().map(|o| o.task).collect();
    let mut line = format!(
        "{}: {} tokens, ingest {:.1} s, build {:.1} s ({} nodes, {} model calls)",
        inst.name,
        inst.tokens,
        ingest_ms / 1000.0,
        build_ms / 1000.0,
        b.nodes_total,
        b.model_calls
    );
    for task in tasks {
        let row = summarise(task, &inst.name, inst.tokens, &outcomes);
        line.push_str(&format!("; {task} {}/{}", row.correct, row.questions));
        report.tasks.push(row);
    }
    log(line);
    report.questions.extend(outcomes);
    if inst.kind == strata_engine::store::ScopeKind::Debate && inst.name.starts_with("handwritten")
    {
        retention::handwritten(&engine, &inst, opts, now, report).await?;
    }
    cleanup(opts, engine, &dir);
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn norm(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// A citation hits a gold span when one contains the other (a cited sentence inside the
/// gold turn, or a cited sentence pair around the gold sentence).
fn hits(c: &Gold, g: &Gold) -> bool {
    c.source == g.source
        && ((c.start <= g.start && c.end >= g.end) || (g.start <= c.start && c.end <= g.end))
}

/// Scores one answer: correct = every expected string in the answer (plus, for debates,
/// the cited speakers) AND every gold span cited (the first citation, for "who first").
pub fn score(instance: &str, q: &Question, r: &QueryResult, ms: f64) -> Outcome {
    let cited: Vec<Gold> = r
        .citations
        .iter()
        .map(|c| Gold {
            source: c.source.clone(),
            start: c.start,
            end: c.end,
        })
        .collect();
    let mut answer = r.answer.clone();
    for c in &r.citations {
        if let Some(s) = &c.speaker {
            answer.push_str(&format!(" [{s}]"));
        }
    }
    let hay = norm(&answer);
    let answered = q.answers.iter().all(|a| hay.contains(&norm(a)));
    let gold_hit: Vec<bool> = q
        .gold
        .iter()
        .map(|g| {
            if q.first_only {
                cited.first().is_some_and(|c| hits(c, g))
            } else {
                cited.iter().any(|c| hits(c, g))
            }
        })
        .collect();
    let recall = gold_hit.iter().filter(|h| **h).count() as f64 / q.gold.len().max(1) as f64;
    let precision = if cited.is_empty() {
        0.0
    } else {
        cited
            .iter()
            .filter(|c| q.gold.iter().any(|g| hits(c, g)))
            .count() as f64
            / cited.len() as f64
    };
    let correct = answered && gold_hit.iter().all(|h| *h);
    Outcome {
        instance: instance.to_string(),
        task: q.task,
        question: q.question.clone(),
        expected: q.answers.clone(),
        gold: q.gold.clone(),
        correct,
        answered,
        citation_precision: precision,
        citation_recall: recall,
        depth: q.depth,
        answer: answer.chars().take(400).collect(),
        cited,
        tokens_to_root: r.tokens_processed,
        sub_calls: r.sub_calls_made,
        model_calls: r.usage.calls,
        fell_back: r.usage.fallbacks > 0,
        ms,
    }
}

fn summarise(task: &str, instance: &str, full_tokens: usize, all: &[Outcome]) -> TaskRow {
    let qs: Vec<&Outcome> = all.iter().filter(|o| o.task == task).collect();
    let n = qs.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Outcome) -> f64| qs.iter().map(|o| f(o)).sum::<f64>() / n;
    let correct = qs.iter().filter(|o| o.correct).count();
    TaskRow {
        task: task.to_string(),
        instance: instance.to_string(),
        full_tokens,
        questions: qs.len(),
        correct,
        accuracy: correct as f64 / n,
        citation_precision: mean(&|o| o.citation_precision),
        citation_recall: mean(&|o| o.citation_recall),
        tokens_to_root: mean(&|o| o.tokens_to_root as f64),
        sub_calls: mean(&|o| o.sub_calls as f64),
        model_calls: mean(&|o| o.model_calls as f64),
        fell_back: qs.iter().filter(|o| o.fell_back).count(),
        query_ms: mean(&|o| o.ms),
    }
}
