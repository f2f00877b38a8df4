//! The `strata` binary: parses the command line, sets up logging, calls the library, prints
//! the result (human text, or JSON with `--json`) and maps errors to an exit code with a
//! one-line cause. No logic lives here.

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use strata::{Config, Engine, Level, LevelChoice, PerLevel, Progress, ScopeKind, unix_now};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Hierarchical compression engine: long context at five abstraction levels, answers with citations to exact source spans."
)]
struct Cli {
    /// Where the store and index live.
    #[arg(long, global = true, env = "STRATA_DB", default_value = "strata-data")]
    db: PathBuf,
    /// A TOML configuration file (every option is also a STRATA_SECTION_FIELD variable).
    #[arg(long, global = true, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Compression (sub) model: `offline` or `openai:MODEL` (sets model.sub).
    #[arg(long, global = true, value_name = "MODEL")]
    model: Option<String>,
    /// Navigating (root) model: `openai:MODEL`, or `offline` (sets model.root).
    #[arg(long, global = true, value_name = "MODEL")]
    root_model: Option<String>,
    /// An OpenAI-compatible API, e.g. http://127.0.0.1:8080/v1 (sets model.base_url).
    #[arg(long, global = true, value_name = "URL")]
    base_url: Option<String>,
    /// Embedding model for hybrid (dense + BM25) retrieval: `openai:MODEL`, or `off`
    /// (sets embed.model).
    #[arg(long, global = true, value_name = "MODEL")]
    embed_model: Option<String>,
    /// The OpenAI-compatible API serving /v1/embeddings (sets embed.base_url; default:
    /// the --base-url one).
    #[arg(long, global = true, value_name = "URL")]
    embed_base_url: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Add documents (.txt, .md) or a debate (JSON Lines turns) to a scope.
    Ingest {
        #[arg(long)]
        scope: String,
        /// doc or debate (default: .jsonl files are debates, anything else documents).
        #[arg(long)]
        kind: Option<String>,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Build or refresh every level of a scope (cached nodes cost nothing).
    Compress {
        #[arg(long)]
        scope: String,
    },
    /// Print a scope at a level within a token budget.
    Context {
        #[arg(long)]
        scope: String,
        /// full, detailed, summary, abstract, metadata or auto.
        #[arg(long, default_value = "auto")]
        level: String,
        /// Maximum tokens (cl100k).
        #[arg(long)]
        budget: usize,
    },
    /// Answer a question with citations to exact source spans.
    Query {
        /// The scope to search (or --all).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        scope: Option<String>,
        /// Search every scope.
        #[arg(long)]
        all: bool,
        question: String,
    },
    /// BM25 search of the levels (what the navigator's `grep` sees).
    Grep {
        /// Scopes to search (default: all).
        #[arg(long)]
        scope: Vec<String>,
        /// Levels to search (default: all); repeat or comma-separate.
        #[arg(long, value_delimiter = ',')]
        level: Vec<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        pattern: String,
    },
    /// Serve the HTTP API (debates, documents, jobs, /metrics, /healthz) until SIGINT/SIGTERM.
    Serve {
        /// Address to listen on (default: server.addr, 127.0.0.1:7878).
        #[arg(long)]
        addr: Option<String>,
    },
    /// Scopes, levels, nodes, index and disk usage.
    Stats,
    /// Remove expired and unreachable nodes.
    Gc,
    /// Rebuild the full-text index from the store.
    Reindex,
    /// Measure answer quality on generated tasks over real text (needles in haystacks,
    /// multi-hop, debate recall, per-level fidelity); writes report.json, report.md and
    /// eval.svg. Uses its own stores under --out, never --db.
    Eval(EvalArgs),
}

#[derive(clap::Args)]
struct EvalArgs {
    /// Directories of .txt files to cut haystacks from (e.g. from scripts/fetch-essays.sh
    /// and scripts/fetch-sotu.sh); the first makes the small haystacks.
    #[arg(long, required = true)]
    corpus: Vec<PathBuf>,
    /// Haystack sizes in tokens, comma-separated (8k, 512k, 2M...).
    #[arg(long, value_delimiter = ',', default_value = "8k,32k,128k,512k,1M,2M")]
    sizes: Vec<String>,
    /// Single needles per haystack.
    #[arg(long, default_value_t = 20)]
    needles: usize,
    /// Needles about real places, asked in other words, per haystack (at most 40).
    #[arg(long, default_value_t = 10)]
    paraphrases: usize,
    /// Multi-needle questions (three facts each) per haystack.
    #[arg(long, default_value_t = 4)]
    multi: usize,
    /// Multi-hop questions per haystack.
    #[arg(long, default_value_t = 4)]
    hops: usize,
    /// Rounds of the generated debate (0 = skip the debate task).
    #[arg(long, default_value_t = 200)]
    debate_rounds: usize,
    #[arg(long, default_value_t = 5)]
    debate_speakers: usize,
    #[arg(long, default_value_t = 12)]
    debate_topics: usize,
    /// Tokens of text for the per-level fidelity task (0 = skip).
    #[arg(long, default_value = "100k")]
    fidelity_tokens: String,
    /// Hand-written questions over given files (data/questions.json for the samples).
    #[arg(long, value_name = "FILE")]
    questions: Option<PathBuf>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where the report, the table and the plot are written.
    #[arg(long, default_value = "eval-out")]
    out: PathBuf,
    /// Keep the stores built for each task (under OUT/work).
    #[arg(long)]
    keep: bool,
    /// Fail (exit 1) when a task's accuracy over all sizes is below a floor:
    /// TASK=MIN, e.g. single_needle=0.95 or debate=0.9; repeatable.
    #[arg(long, value_name = "TASK=MIN")]
    floor: Vec<String>,
}

/// `println!` that treats a closed stdout (`strata query ... | head`) as the reader being
/// done, not as a crash.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(e.into());
        }
    }};
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the configuration, opens the store and runs one subcommand.
fn run(cli: Cli) -> Result<()> {
    let cfg = config(&cli)?;
    let json = cli.json;
    if let Cmd::Eval(args) = cli.cmd {
        return eval(args, cfg, json);
    }
    let engine = Engine::open(&cli.db, cfg)
        .with_context(|| format!("cannot open the store at {}", cli.db.display()))?;
    let rt = runtime()?;
    let now = unix_now();
    match cli.cmd {
        Cmd::Ingest { scope, kind, files } => ingest(&engine, &scope, kind, &files, now, json),
        Cmd::Compress { scope } => compress(&engine, &rt, &scope, now, json),
        Cmd::Context {
            scope,
            level,
            budget,
        } => context(&engine, &rt, &scope, &level, budget, now, json),
        Cmd::Query {
            scope,
            all,
            question,
        } => {
            let scopes: Vec<String> = if all {
                Vec::new()
            } else {
                scope.into_iter().collect()
            };
            query(&engine, &rt, &scopes, &question, now, json)
        }
        Cmd::Grep {
            scope,
            level,
            limit,
            pattern,
        } => grep(&engine, &scope, &level, limit, &pattern, now, json),
        Cmd::Serve { addr } => serve(engine, &rt, addr),
        Cmd::Stats => stats(&engine, now, json),
        Cmd::Gc => gc(&engine, now, json),
        Cmd::Reindex => reindex(&engine, json),
        Cmd::Eval(_) => unreachable!("handled before the store is opened"),
    }
}

/// The configuration file and environment, with the command-line overrides on top.
fn config(cli: &Cli) -> Result<Config> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let mut cfg = Config::load(cli.config.as_deref(), env)?;
    if let Some(m) = &cli.model {
        cfg.model.sub = m.clone();
    }
    if let Some(m) = &cli.root_model {
        cfg.model.root = m.clone();
    }
    if let Some(u) = &cli.base_url {
        cfg.model.base_url = u.clone();
    }
    if let Some(m) = &cli.embed_model {
        cfg.embed.model = m.clone();
    }
    if let Some(u) = &cli.embed_base_url {
        cfg.embed.base_url = u.clone();
    }
    cfg.validate()?;
    Ok(cfg)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// `strata ingest`: add files to a scope.
fn ingest(
    engine: &Engine,
    scope: &str,
    kind: Option<String>,
    files: &[PathBuf],
    now: u64,
    json: bool,
) -> Result<()> {
    let kind = kind.map(|k| k.parse::<ScopeKind>()).transpose()?;
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok().map(|m| m.len()))
        .sum();
    let spinner = Bar::spinner(format!(
        "ingesting {} file(s), {}",
        files.len(),
        human_bytes(total)
    ));
    let r = engine.ingest_files(scope, kind, files, now);
    spinner.finish();
    let r = r?;
    if json {
        return print_json(&r);
    }
    out!(
        "{}: {} added, {} replaced, {} unchanged, {} removed; {} chunks written ({})",
        r.scope,
        r.added,
        r.replaced,
        r.unchanged,
        r.removed,
        r.chunks_written,
        human_bytes(r.bytes)
    );
    Ok(())
}

/// `strata compress`: build or refresh every level of a scope.
fn compress(
    engine: &Engine,
    rt: &tokio::runtime::Runtime,
    scope: &str,
    now: u64,
    json: bool,
) -> Result<()> {
    let bar = Bar::new();
    let r = rt.block_on(engine.compress(scope, now, &bar))?;
    // On stderr in both modes: with --json, stdout stays one JSON document, and a
    // build against a dead model server must not look like a clean one.
    if let Some(w) = fallback_warning(&r) {
        eprintln!("{w}");
    }
    if let Some(e) = &r.embeddings
        && e.failed > 0
    {
        eprintln!(
            "warning: {} node(s) have no embedding ({}); retrieval over them is BM25 only until a later compress",
            e.failed,
            e.error.as_deref().unwrap_or("unknown error")
        );
    }
    if json {
        return print_json(&r);
    }
    let l = r.built_by_level;
    out!(
        "{}: built {} nodes (detailed {}, summary {}, abstract {}, metadata {}), {} cache hits, {} failures, {} model calls, {} fallbacks, in {:.2} s",
        r.scope,
        r.nodes_built,
        l[Level::Detailed],
        l[Level::Summary],
        l[Level::Abstract],
        l[Level::Metadata],
        r.cache_hits,
        r.failures.len(),
        r.model_calls,
        r.fallbacks,
        r.elapsed_ms as f64 / 1000.0
    );
    if r.fallbacks > 0 {
        out!(
            "  model outputs rejected: {} empty, {} over budget, {} unfaithful, {} failed calls",
            r.empty,
            r.over_budget,
            r.unfaithful,
            r.model_errors
        );
    }
    if r.fallback_retried > 0 || r.fallback_nodes > 0 {
        out!(
            "  fallback nodes: {} made again with the model, {} in the tree ({} awaiting the model)",
            r.fallback_retried,
            r.fallback_nodes,
            r.fallback_awaiting_model
        );
    }
    if let Some(e) = &r.embeddings {
        out!(
            "  embeddings ({}): {} embedded, {} reused, {} failed, {} request(s)",
            e.model,
            e.embedded,
            e.reused,
            e.failed,
            e.requests
        );
    }
    print_usage(&r.usage)?;
    for f in &r.failures {
        eprintln!("  failed: {} ({}): {}", f.what, f.level, f.error);
    }
    Ok(())
}

/// `strata context`: a scope at a level within a token budget; the text on stdout, what it
/// is made of on stderr.
fn context(
    engine: &Engine,
    rt: &tokio::runtime::Runtime,
    scope: &str,
    level: &str,
    budget: usize,
    now: u64,
    json: bool,
) -> Result<()> {
    let choice: LevelChoice = level.parse()?;
    let bar = Bar::new();
    let w = rt.block_on(engine.context(scope, choice, budget, now, &bar))?;
    if json {
        return print_json(&w);
    }
    out!("{}", w.text);
    let by_level: PerLevel<usize> = w.nodes.iter().map(|n| n.level).collect();
    let used: Vec<String> = by_level
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(l, n)| format!("{l} {n}"))
        .collect();
    eprintln!(
        "-- {} at {}: {} of {} tokens; nodes: {}; {} omitted",
        w.scope,
        w.level,
        w.tokens,
        w.budget,
        if used.is_empty() {
            "none (budget too small)".into()
        } else {
            used.join(", ")
        },
        w.omitted
    );
    Ok(())
}

/// `strata query`: an answer with citations (every scope when `scopes` is empty).
fn query(
    engine: &Engine,
    rt: &tokio::runtime::Runtime,
    scopes: &[String],
    question: &str,
    now: u64,
    json: bool,
) -> Result<()> {
    let bar = Bar::new();
    let r = rt.block_on(engine.query(scopes, question, now, &bar))?;
    if json {
        return print_json(&r);
    }
    if r.citations.is_empty() {
        out!("No supported answer found (nothing in the scope can be cited for it).");
        for h in &r.refinement_history {
            out!("  {h}");
        }
        return Ok(());
    }
    out!(
        "Answer (confidence {:.2}{}):",
        r.confidence,
        if r.ready { ", ready" } else { ", not ready" }
    );
    for (i, c) in r.citations.iter().enumerate() {
        let who = match (&c.speaker, c.round) {
            (Some(s), Some(rd)) => format!(" — {s}, round {rd}"),
            _ => String::new(),
        };
        out!("  [{}] {}", i + 1, c.quote);
        out!("      {} bytes {}..{}{who}", c.source, c.start, c.end);
    }
    out!(
        "{} iteration(s), {} node(s) examined, {} tokens read, {} sub-call(s)",
        r.iterations,
        r.nodes_examined.len(),
        r.tokens_processed,
        r.sub_calls_made
    );
    print_usage(&r.usage)
}

/// `strata grep`: BM25 hits over the levels.
fn grep(
    engine: &Engine,
    scopes: &[String],
    levels: &[String],
    limit: usize,
    pattern: &str,
    now: u64,
    json: bool,
) -> Result<()> {
    let levels = levels
        .iter()
        .map(|l| l.parse::<Level>())
        .collect::<strata::Result<Vec<_>>>()?;
    let hits = engine.grep(scopes, pattern, &levels, limit, now)?;
    if json {
        return print_json(&hits);
    }
    for h in &hits {
        let span = h
            .first_span
            .as_ref()
            .map(|s| format!("{} {}..{}", s.source, s.start, s.end))
            .unwrap_or_default();
        let text: String = h.text.chars().take(160).collect();
        out!(
            "{:>7.3}  {:<8} {}  {}\n         {}",
            h.score,
            h.level.name(),
            &h.id[..12],
            span,
            text.replace('\n', " ")
        );
    }
    if hits.is_empty() {
        out!("no match");
    }
    Ok(())
}

/// `strata serve`: the HTTP API until SIGINT or SIGTERM.
fn serve(engine: Engine, rt: &tokio::runtime::Runtime, addr: Option<String>) -> Result<()> {
    let addr = addr.unwrap_or_else(|| engine.config().server.addr.clone());
    let engine = std::sync::Arc::new(engine);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        eprintln!(
            "strata serving on http://{} (Ctrl-C to stop)",
            listener.local_addr()?
        );
        strata::server::run(engine, listener, shutdown_signal()).await?;
        eprintln!("strata stopped");
        anyhow::Ok(())
    })
}

/// `strata stats`: the store, the index, and every scope's tree.
fn stats(engine: &Engine, now: u64, json: bool) -> Result<()> {
    let s = engine.stats(now)?;
    if json {
        return print_json(&s);
    }
    let index = if s.unindexed > 0 {
        format!(
            "{} indexed, {} changes pending (applied at the next build or query)",
            s.indexed_docs, s.unindexed
        )
    } else if s.indexed_docs == s.nodes as u64 {
        format!("{} indexed (all)", s.indexed_docs)
    } else {
        format!(
            "{} indexed of {} (run `strata reindex`)",
            s.indexed_docs, s.nodes
        )
    };
    out!(
        "store {} · {} nodes · {} · tokenizer {} · model {}",
        human_bytes(s.disk_bytes),
        s.nodes,
        index,
        s.tokenizer,
        s.model
    );
    if let Some(m) = &s.embed_model {
        out!("  hybrid retrieval: {m}; {} vectors stored", s.embeddings);
    }
    if s.fallbacks.nodes > 0 {
        out!(
            "  {} node(s) made by the offline fallback or over it; {} to be made again by the next compress with the model",
            s.fallbacks.nodes,
            s.fallbacks.awaiting_model
        );
    }
    for sc in &s.scopes {
        let l = sc.live_by_level;
        out!(
            "  {} ({:?}): {} sources, {} chunks, {} groups, {} tokens; live full {} detailed {} summary {} abstract {} metadata {}; {} stale",
            sc.scope,
            sc.kind,
            sc.sources,
            sc.chunks,
            sc.groups,
            sc.full_tokens,
            l[Level::Full],
            l[Level::Detailed],
            l[Level::Summary],
            l[Level::Abstract],
            l[Level::Metadata],
            sc.stale
        );
    }
    if s.scopes.is_empty() {
        out!("  no scopes yet: run `strata ingest --scope NAME FILE...`");
    }
    Ok(())
}

/// `strata gc`: remove expired and unreachable nodes.
fn gc(engine: &Engine, now: u64, json: bool) -> Result<()> {
    let r = engine.gc(now)?;
    if json {
        return print_json(&r);
    }
    out!(
        "removed {} expired and {} unreachable nodes, {} orphaned embeddings; {} nodes remain",
        r.expired,
        r.unreachable,
        r.embeddings_removed,
        r.remaining
    );
    Ok(())
}

/// `strata reindex`: rebuild the full-text index from the store.
fn reindex(engine: &Engine, json: bool) -> Result<()> {
    let n = engine.reindex()?;
    if json {
        return print_json(&serde_json::json!({ "indexed": n }));
    }
    out!("indexed {n} nodes");
    Ok(())
}

/// `strata eval`: generate, run, score, write the report; check the floors.
fn eval(a: EvalArgs, cfg: Config, json: bool) -> Result<()> {
    let floors = a
        .floor
        .iter()
        .map(|f| {
            let (task, min) = f.split_once('=').with_context(|| {
                format!("--floor {f}: expected TASK=MIN, e.g. single_needle=0.95")
            })?;
            let min: f64 = min
                .parse()
                .with_context(|| format!("--floor {f}: `{min}` is not a number"))?;
            Ok((task.to_string(), min))
        })
        .collect::<Result<Vec<_>>>()?;
    let sizes = a
        .sizes
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| strata::eval::parse_tokens(s))
        .collect::<strata::Result<Vec<_>>>()?;
    let fidelity_tokens = if a.fidelity_tokens.trim() == "0" {
        0
    } else {
        strata::eval::parse_tokens(&a.fidelity_tokens)?
    };
    let out = a.out;
    let opts = strata::eval::Options {
        seed: a.seed,
        sizes,
        needles: a.needles,
        paraphrases: a.paraphrases,
        multi: a.multi,
        hops: a.hops,
        debate_rounds: a.debate_rounds,
        debate_speakers: a.debate_speakers,
        debate_topics: a.debate_topics,
        fidelity_tokens,
        questions: a.questions,
        work: out.join("work"),
        keep: a.keep,
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let docs = strata::eval::load_corpus(&a.corpus)?;
    eprintln!(
        "eval: {} documents, {} tokens; seed {}",
        docs.len(),
        docs.iter().map(|d| d.tokens).sum::<usize>(),
        opts.seed
    );
    let rt = runtime()?;
    let write = |name: &str, body: &[u8]| -> Result<()> {
        let p = out.join(name);
        std::fs::write(&p, body).with_context(|| format!("cannot write {}", p.display()))
    };
    let save = |r: &strata::eval::Report| -> Result<()> {
        write("report.json", serde_json::to_string_pretty(r)?.as_bytes())?;
        write("report.md", strata::eval::markdown(r).as_bytes())
    };
    let report = rt.block_on(strata::eval::run(
        &cfg,
        &opts,
        &docs,
        &|line| eprintln!("eval: {line}"),
        &|partial| {
            if let Err(e) = save(partial) {
                eprintln!("eval: warning: cannot write the partial report: {e:#}");
            }
        },
    ))?;
    save(&report)?;
    let md = strata::eval::markdown(&report);
    if !opts.sizes.is_empty() {
        strata::eval::plot::svg(&report, &out.join("eval.svg"))?;
    }
    if json {
        print_json(&report)?;
    } else {
        out!("{md}");
        out!(
            "(written to {}: report.json, report.md{})",
            out.display(),
            if opts.sizes.is_empty() {
                ""
            } else {
                ", eval.svg"
            }
        );
    }
    let mut failed = Vec::new();
    for (task, min) in floors {
        let got = if task == "debate" {
            report.debate_accuracy()
        } else {
            report.accuracy(&task)
        };
        match got {
            Some(a) if a >= min => {}
            Some(a) => failed.push(format!("{task}: accuracy {a:.3} < floor {min}")),
            None => failed.push(format!("{task}: no questions of this task were run")),
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("below the floor: {}", failed.join("; "));
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// One summary line when the model failed calls or its outputs were replaced.
fn fallback_warning(r: &strata::BuildReport) -> Option<String> {
    if r.fallbacks == 0 && r.model_errors == 0 {
        return None;
    }
    let rejected = r.empty + r.over_budget + r.unfaithful;
    let retry = match r.fallback_awaiting_model {
        0 => String::new(),
        n => format!("; the next compress makes {n} node(s) again with the model"),
    };
    Some(format!(
        "warning: {}: {} node(s) made by the offline fallback; {} model call(s) failed (is the model server up?), {} output(s) rejected (empty, over budget or unfaithful){retry}",
        r.scope, r.fallbacks, r.model_errors, rejected
    ))
}

/// One line per model that was called: calls, tokens, estimated cost.
fn print_usage(u: &strata::Usage) -> Result<()> {
    for (name, m) in &u.by_model {
        out!(
            "  {name}: {} call(s) ({} retries), {} prompt + {} completion tokens, ~${:.4}",
            m.calls,
            m.retries,
            m.prompt_tokens,
            m.completion_tokens,
            m.cost_usd
        );
    }
    Ok(())
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    out!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A progress bar on stderr when it is a terminal; silent otherwise.
struct Bar(ProgressBar);

impl Bar {
    fn new() -> Bar {
        let pb = ProgressBar::with_draw_target(None, target());
        Bar(pb)
    }

    fn spinner(msg: String) -> Bar {
        let pb = ProgressBar::with_draw_target(None, target());
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"),
        );
        pb.set_message(msg);
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
        Bar(pb)
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

impl Progress for Bar {
    fn start(&self, total: u64, what: &str) {
        self.0.set_length(total);
        self.0.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {pos}/{len} nodes, {per_sec}, eta {eta}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        self.0.set_message(what.to_string());
    }
    fn inc(&self, n: u64) {
        self.0.inc(n);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
