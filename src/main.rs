//! The `strata` binary: parses the command line, sets up logging, calls the library, prints
//! the result (human text, or JSON with `--json`) and maps errors to an exit code with a
//! one-line cause. No logic lives here: one function per subcommand below, the command line
//! in `cli::args`, printing in `cli::output`, `strata eval` in `cli::eval`.

mod cli;

use anyhow::{Context as _, Result};
use clap::Parser;
use cli::args::{Cli, Cmd};
use cli::eval::eval;
use cli::output::{Bar, fallback_warning, human_bytes, out, print_json, print_usage};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use strata::{Config, Engine, Level, LevelChoice, PerLevel, ScopeKind, unix_now};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Only strata's own warnings by default: sled and tantivy log through the `log` crate,
    // which tracing-subscriber forwards, and a full disk made sled print a dozen lines per
    // error. `STRATA_LOG=warn` (or any filter) shows them again.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
                .unwrap_or_else(|_| "strata=warn".into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let db = cli.db.clone();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}{}", disk_full_hint(&e, &db));
            ExitCode::FAILURE
        }
    }
}

/// When a command failed on a store whose disk is full, says so: some write paths (the index
/// writer's threads) report a full disk in words that do not name it.
fn disk_full_hint(e: &anyhow::Error, db: &std::path::Path) -> String {
    let named = e
        .chain()
        .any(|c| matches!(c.downcast_ref(), Some(strata::Error::DiskFull(_))));
    match strata::disk::available(db) {
        Ok(free) if !named && free < strata::disk::NEARLY_FULL => format!(
            " (disk full: {free} bytes free on the file system of {})",
            db.display()
        ),
        _ => String::new(),
    }
}

/// Loads the configuration, opens the store and runs one subcommand.
fn run(cli: Cli) -> Result<()> {
    if let Cmd::EmbedDistill { from, out } = &cli.cmd {
        return embed_distill(from, out, cli.json);
    }
    let cfg = config(&cli)?;
    let json = cli.json;
    if let Cmd::Eval(args) = cli.cmd {
        return eval(*args, cfg, json);
    }
    let db_name = match strata::replica::database_url(&cli.db) {
        Some(url) => strata::store::postgres::redact(url),
        None => cli.db.display().to_string(),
    };
    if let Cmd::Repair = cli.cmd {
        if strata::replica::database_url(&cli.db).is_some() {
            anyhow::bail!(
                "`strata repair` mends a directory store; a PostgreSQL database is repaired with PostgreSQL's own tools, and `strata reindex` rebuilds this machine's index"
            );
        }
        return repair(&cli.db, cfg, json);
    }
    // The engine is dropped only on success. sled's `Drop` flushes, and after a write that
    // failed for lack of space that flush can wait forever (see `strata::disk`); a command
    // that fails has acknowledged nothing, and whatever it acknowledged before was flushed
    // before it was acknowledged, so leaving without that flush loses nothing.
    // A command that only reads opens the store read-only: it writes nothing of its own
    // (`Engine::open_read_only`), and, having written nothing, leaves without sled's
    // closing flush (an fsync with nothing to write).
    let read_only = cli.cmd.reads_only();
    if cli.cmd.counts_tokens() {
        // The tokenizer is built while the store and index open (I/O bound: sled's open
        // writes and fsyncs), not after.
        std::thread::spawn(strata::token::warm);
    }
    let opened = match read_only {
        true => Engine::open_read_only(&cli.db, cfg.clone()),
        false => Engine::open(&cli.db, cfg.clone()),
    };
    let engine = std::mem::ManuallyDrop::new(std::sync::Arc::new(
        opened.with_context(|| format!("cannot open the store at {db_name}"))?,
    ));
    let rt = runtime()?;
    let now = unix_now();
    // A read-only store refuses the first write, before it begins (`Engine::writing`): a
    // `context` or `query` that must build missing or expired levels first opens the
    // store writable and runs again (the read-only handle wrote nothing; dropping it
    // releases sled's lock).
    let again = read_only.then(|| cli.cmd.clone());
    let engine = match (run_command(cli.cmd, &engine, &rt, now, json), again) {
        (Err(e), Some(cmd)) if refused_read_only(&e) => {
            tracing::info!("this command must write after all: opening the store writable");
            drop(std::mem::ManuallyDrop::into_inner(engine));
            let engine = std::mem::ManuallyDrop::new(std::sync::Arc::new(
                Engine::open(&cli.db, cfg)
                    .with_context(|| format!("cannot open the store at {db_name}"))?,
            ));
            run_command(cmd, &engine, &rt, now, json)?;
            engine
        }
        (r, _) => {
            r?;
            engine
        }
    };
    if !engine.is_read_only() {
        // A command that wrote leaves a snapshot of sled's log, so that the read-only
        // commands after it (which write none) do not each scan what it wrote. Only a
        // speed-up: what the command acknowledged was flushed before it said so, so a
        // checkpoint that fails (a full disk) is not the command's failure — and the
        // engine is then left undropped, as after a failed command.
        match engine.checkpoint() {
            Ok(()) => drop(std::mem::ManuallyDrop::into_inner(engine)),
            Err(e) => tracing::debug!("no checkpoint of the store at exit: {e}"),
        }
    }
    Ok(())
}

/// Whether `e` is a read-only store refusing a write ([`strata::Error::ReadOnly`]).
fn refused_read_only(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref(), Some(strata::Error::ReadOnly)))
}

/// Runs one subcommand on an open engine.
fn run_command(
    cmd: Cmd,
    engine: &std::sync::Arc<Engine>,
    rt: &tokio::runtime::Runtime,
    now: u64,
    json: bool,
) -> Result<()> {
    let (engine, rt) = (engine, rt);
    match cmd {
        Cmd::Ingest {
            scope,
            kind,
            time,
            files,
        } => ingest(engine, &scope, kind, time, &files, now, json),
        Cmd::Compress { scope } => compress(engine, rt, &scope, now, json),
        Cmd::Context {
            scope,
            level,
            budget,
            focus,
            during,
        } => {
            let ask = Window {
                scope: &scope,
                level: &level,
                focus: focus.as_deref(),
                budget,
                during: during.range()?,
            };
            context(engine, rt, &ask, now, json)
        }
        Cmd::Query {
            scope,
            all,
            trace,
            time_limit_ms,
            during,
            question,
        } => {
            let scopes: Vec<String> = if all {
                Vec::new()
            } else {
                scope.into_iter().collect()
            };
            let ask = Ask {
                scopes: &scopes,
                question: &question,
                time_limit_ms,
                during: during.range()?,
                trace: trace.as_deref(),
            };
            query(engine, rt, &ask, now, json)
        }
        Cmd::Trace { file, out } => trace(engine, &file, out),
        Cmd::Grep {
            scope,
            level,
            limit,
            pattern,
        } => {
            let levels = level
                .iter()
                .map(|l| l.parse::<Level>())
                .collect::<strata::Result<Vec<_>>>()?;
            let hits = rt.block_on(engine.grep(&scope, &pattern, &levels, limit, now))?;
            print_grep(&hits, json)
        }
        Cmd::Serve { addr } => serve(engine.clone(), rt, addr),
        Cmd::Mcp => mcp(engine.clone(), rt),
        Cmd::Stats { bytes } => stats(engine, now, bytes, json),
        Cmd::Forget { scope, sources } => forget(engine, &scope, &sources, now, json),
        Cmd::Gc => gc(engine, now, json),
        Cmd::Reindex => reindex(engine, json),
        Cmd::Eval(_) | Cmd::Repair | Cmd::EmbedDistill { .. } => {
            unreachable!("handled before the store is opened")
        }
    }
}

/// `strata embed-distill`: the static embedder's table, from a local model.
#[cfg(feature = "local-embed")]
fn embed_distill(from: &std::path::Path, out: &std::path::Path, json: bool) -> Result<()> {
    // Progress on a terminal only, as the build's bars: in a log a carriage return
    // joins every update into one line.
    let tty = std::io::stderr().is_terminal();
    let d = strata::model::local::distill(from, out, &|done, total| {
        if !tty {
            return;
        }
        eprint!("\rembed-distill: {done} / {total} tokens");
        if done == total {
            eprintln!();
        }
    })?;
    if json {
        return print_json(&d);
    }
    out!(
        "distilled {} token vectors ({} dimensions, {} unused left zero) from {} into {} in {:.1} s",
        d.tokens,
        d.dim,
        d.unused,
        d.source,
        d.out.display(),
        d.elapsed_ms as f64 / 1000.0
    );
    out!("use it with --embed-model static:{}", d.out.display());
    Ok(())
}

#[cfg(not(feature = "local-embed"))]
fn embed_distill(_: &std::path::Path, _: &std::path::Path, _: bool) -> Result<()> {
    anyhow::bail!(
        "`strata embed-distill` runs the source model with candle: build strata with `--features local-embed`"
    )
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
    time: Option<String>,
    files: &[PathBuf],
    now: u64,
    json: bool,
) -> Result<()> {
    let kind = kind.map(|k| k.parse::<ScopeKind>()).transpose()?;
    let time = time
        .map(|t| strata::Time::parse(&t).map_err(|e| anyhow::anyhow!("--time: {e}")))
        .transpose()?;
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok().map(|m| m.len()))
        .sum();
    let spinner = Bar::spinner(format!(
        "ingesting {} file(s), {}",
        files.len(),
        human_bytes(total)
    ));
    let r = engine.ingest_files_at(scope, kind, files, time, now);
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

/// What `strata context` was asked.
struct Window<'a> {
    scope: &'a str,
    level: &'a str,
    /// `--for`: the question or turn the window is for.
    focus: Option<&'a str>,
    budget: usize,
    /// `--since` / `--until`.
    during: strata::TimeRange,
}

/// `strata context`: a scope at a level within a token budget; the text on stdout, what it
/// is made of on stderr.
fn context(
    engine: &Engine,
    rt: &tokio::runtime::Runtime,
    ask: &Window<'_>,
    now: u64,
    json: bool,
) -> Result<()> {
    let choice: LevelChoice = ask.level.parse()?;
    let bar = Bar::new();
    let w = match ask.focus {
        Some(text) => {
            rt.block_on(engine.context_for(ask.scope, text, ask.budget, &ask.during, now, &bar))?
        }
        None => rt.block_on(engine.context_during(
            ask.scope,
            choice,
            ask.budget,
            &ask.during,
            now,
            &bar,
        ))?,
    };
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
    if let Some(p) = &w.placed {
        eprintln!("-- {p}");
    }
    Ok(())
}

/// `strata query`: an answer with citations (every scope when `scopes` is empty).
/// What `strata query` was asked.
struct Ask<'a> {
    scopes: &'a [String],
    question: &'a str,
    time_limit_ms: Option<u64>,
    /// `--since` / `--until`.
    during: strata::TimeRange,
    trace: Option<&'a std::path::Path>,
}

/// `strata query`. The first Ctrl-C (or SIGTERM) stops the query, which answers from what
/// it gathered; a second one quits at once (exit 130: nothing is lost, the store is
/// crash-safe).
fn query(
    engine: &Engine,
    rt: &tokio::runtime::Runtime,
    ask: &Ask<'_>,
    now: u64,
    json: bool,
) -> Result<()> {
    let &Ask {
        scopes,
        question,
        time_limit_ms,
        during,
        trace,
    } = ask;
    let bar = Bar::new();
    let mut qcfg = engine.config().query.clone();
    if let Some(ms) = time_limit_ms {
        qcfg.time_limit_ms = ms;
    }
    qcfg.during = during;
    let stop = strata::Stop::default();
    let on_signal = stop.clone();
    let watcher = rt.spawn(async move {
        shutdown_signal().await;
        on_signal.cancel();
        eprintln!("stopping: answering from what was gathered (again to quit now)");
        shutdown_signal().await;
        std::process::exit(130);
    });
    let r = rt.block_on(
        engine.query(
            &strata::Ask::new(scopes, question, now)
                .settings(&qcfg)
                .progress(&bar)
                .stop(stop),
        ),
    );
    watcher.abort();
    let r = r?;
    if let Some(path) = trace {
        strata::trace::append(path, &strata::trace::records(question, scopes, &r, now))
            .with_context(|| format!("writing the trace to {}", path.display()))?;
    }
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
    if r.when.is_some()
        && let Some(date) = r.answer.lines().next()
    {
        out!("  When: {date}");
    }
    for (i, c) in r.citations.iter().enumerate() {
        let mut who = match (&c.speaker, c.round) {
            (Some(s), Some(rd)) => format!(" — {s}, round {rd}"),
            _ => String::new(),
        };
        if let Some(t) = &c.time {
            who.push_str(&format!("{}{t}", if who.is_empty() { " — " } else { ", " }));
        }
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
    if r.limit_hit.is_some() {
        out!("{}", r.outcome);
    }
    print_usage(&r.usage)
}

/// Renders a trace file as HTML next to it (or at `out`).
fn trace(engine: &Engine, file: &std::path::Path, out: Option<std::path::PathBuf>) -> Result<()> {
    let traces = strata::trace::read(file)?;
    let page = strata::trace::html(engine, &traces)?;
    let out = out.unwrap_or_else(|| file.with_extension("html"));
    std::fs::write(&out, page).with_context(|| format!("writing {}", out.display()))?;
    out!(
        "{} quer{} rendered to {}",
        traces.len(),
        if traces.len() == 1 { "y" } else { "ies" },
        out.display()
    );
    Ok(())
}

/// `strata grep`: the hits over the levels (BM25, fused with the dense ranking when an
/// embedder is configured).
fn print_grep(hits: &[strata::GrepHit], json: bool) -> Result<()> {
    if json {
        return print_json(&hits);
    }
    for h in hits {
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
fn serve(
    engine: std::sync::Arc<Engine>,
    rt: &tokio::runtime::Runtime,
    addr: Option<String>,
) -> Result<()> {
    let addr = addr.unwrap_or_else(|| engine.config().server.addr.clone());
    // Each connection takes a descriptor: use what the hard limit allows (the server keeps
    // its connections below it).
    strata::server::raise_open_file_limit();
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

/// `strata mcp`: the Model Context Protocol on stdin/stdout until the client closes stdin.
/// `STRATA_MCP_TOKEN` limits the session to what that token of `server.token` /
/// `server.tokens` may read (an operator starting one `strata mcp` per tenant).
fn mcp(engine: std::sync::Arc<Engine>, rt: &tokio::runtime::Runtime) -> Result<()> {
    let access = match std::env::var("STRATA_MCP_TOKEN") {
        Ok(token) => strata::access::Tokens::new(&engine.config().server)
            .access(Some(&format!("Bearer {token}")))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "STRATA_MCP_TOKEN is none of the configured tokens (server.token, server.tokens)"
                )
            })?,
        Err(_) => strata::access::Access::full(),
    };
    rt.block_on(async {
        // The job workers, sweeper, index follower and warmer run while the session does.
        let service = strata::service::Service::start(engine.clone())?;
        let served = strata::mcp::serve_stdio(engine, access).await;
        service.shutdown().await?;
        served
    })?;
    Ok(())
}

/// `stats --bytes`: where the bytes go, largest parts named.
fn print_bytes(b: &strata::Bytes) -> Result<()> {
    let pct = |x: u64| {
        if b.source_text == 0 {
            String::new()
        } else {
            format!(" ({:.2}x the sources)", x as f64 / b.source_text as f64)
        }
    };
    out!(
        "bytes: store on disk {}{}, index {}{}",
        human_bytes(b.disk),
        pct(b.disk),
        human_bytes(b.index.total),
        pct(b.index.total)
    );
    out!(
        "  source texts        {:>10}  stored, {} of text in {} sources",
        human_bytes(b.source_stored),
        human_bytes(b.source_text),
        b.sources
    );
    for (level, l) in b.levels.iter() {
        if l.nodes > 0 {
            out!(
                "  {:<8} nodes      {:>10}  stored, {} of text in {} nodes",
                level.name(),
                human_bytes(l.encoded),
                human_bytes(l.text),
                l.nodes
            );
        }
    }
    if b.embeddings > 0 {
        out!(
            "  vectors             {:>10}  ({} stored)",
            human_bytes(b.embedding_bytes),
            b.embeddings
        );
    }
    out!(
        "  store overhead      {:>10}  (keys, expiry and pending sets, views, jobs, the storage engine's own)",
        human_bytes(b.store_overhead)
    );
    let i = &b.index;
    out!(
        "  index: terms {}, postings {}, positions {}, fast fields {}, stored fields {}",
        human_bytes(i.terms),
        human_bytes(i.postings),
        human_bytes(i.positions),
        human_bytes(i.fast_fields),
        human_bytes(i.stored)
    );
    Ok(())
}

/// `strata stats`: the store, the index, and every scope's tree.
fn stats(engine: &Engine, now: u64, bytes: bool, json: bool) -> Result<()> {
    let s = engine.stats(now)?;
    let b = if bytes { Some(engine.bytes()?) } else { None };
    if json {
        return match b {
            Some(b) => {
                let mut v = serde_json::to_value(&s)?;
                v["bytes"] = serde_json::to_value(&b)?;
                print_json(&v)
            }
            None => print_json(&s),
        };
    }
    if let Some(b) = &b {
        print_bytes(b)?;
    }
    let index = if s.unindexed > 0 {
        format!(
            "{} indexed, {} changes pending (applied by the next command that writes: ingest, compress, gc, reindex, serve)",
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
    for r in &s.replicas {
        out!(
            "  replica {}{}: {}; seen {} s ago",
            r.name,
            if r.this { " (this process)" } else { "" },
            if r.behind == 0 {
                "index current".to_string()
            } else {
                format!("index {} node change(s) behind", r.behind)
            },
            r.seen_secs_ago
        );
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

/// `strata forget`: remove sources (or a whole scope) and everything derived from them.
fn forget(engine: &Engine, scope: &str, sources: &[String], now: u64, json: bool) -> Result<()> {
    let r = engine.forget(scope, sources, now)?;
    if json {
        return print_json(&r);
    }
    let levels: Vec<String> = r
        .nodes_by_level
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(l, n)| format!("{n} {}", l.name()))
        .collect();
    out!(
        "forgot {} source(s) of {} ({} bytes) and {} nodes ({}; {} bytes of node text){}",
        r.sources.len(),
        r.scope,
        r.bytes,
        r.nodes,
        if levels.is_empty() {
            "none".to_string()
        } else {
            levels.join(", ")
        },
        r.node_bytes,
        if r.scope_removed {
            "; the scope is gone".to_string()
        } else {
            format!(
                "; {} source(s) remain, rebuilt at the next compress or read",
                r.remaining_sources
            )
        }
    );
    for s in &r.sources {
        out!("  {s}");
    }
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

/// `strata repair`: recover what sled can read, then rebuild the index from the store.
fn repair(db: &std::path::Path, cfg: Config, json: bool) -> Result<()> {
    let r = strata::repair::repair(db, &cfg)
        .with_context(|| format!("cannot repair the store at {}", db.display()))?;
    // sled releases a dropped store's file lock from a background thread; wait (bounded)
    // for the repair's own handle to let go rather than report the store in use.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let engine = loop {
        match Engine::open(db, cfg.clone()) {
            Err(strata::Error::InUse(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => {
                break r.with_context(|| {
                    format!("cannot open the repaired store at {}", db.display())
                })?;
            }
        }
    };
    let indexed = engine.reindex()?;
    if json {
        return print_json(&serde_json::json!({ "repair": r, "indexed": indexed }));
    }
    for a in &r.actions {
        out!("{a}");
    }
    for u in &r.undecodable {
        out!("cannot decode: {u}");
    }
    out!(
        "{}: {} entries in {} trees read back{}{}; index rebuilt from the store ({indexed} nodes)",
        db.display(),
        r.entries,
        r.trees,
        if r.actions.is_empty() && !r.salvaged {
            ", nothing to repair"
        } else {
            ""
        },
        if r.undecodable.is_empty() {
            String::new()
        } else {
            format!(", {} record(s) do not decode", r.undecodable.len())
        }
    );
    Ok(())
}
