//! How close the DAG build comes to the ideal when every model call takes real time.
//!
//! A simulated model sleeps `latency ± jitter` per call (tokio time, no CPU) and answers
//! with the first words of its input, so its output passes the build's validation
//! (budget, faithfulness) like a good model's would. The build is then timed against
//!
//! - the ideal `calls × latency / concurrency` (never less than the DAG's depth × latency:
//!   DETAILED → SUMMARY → ABSTRACT), and
//! - a tighter bound that respects the critical path: the ABSTRACT and the last SUMMARY
//!   can overlap nothing, so `(calls − 2) × latency / concurrency + 2 × latency`.
//!
//! A zero-latency run gives the engine's own cost per call (validation, fact check,
//! store writes, METADATA tags, scheduling). Then turns are appended one at a time after a
//! build (`STRATA_LAT_APPENDS`, default 5), each followed by the build of what it changed:
//! its model calls, how many ran one after another, and the wall time until the tree is
//! whole again.
//!
//! ```text
//! cargo bench --bench latency
//! STRATA_LAT_MS=200 STRATA_LAT_JITTER_MS=50 STRATA_LAT_ROUNDS=100 STRATA_LAT_TURNS=10 \
//!     STRATA_LAT_CONCURRENCY=16,32,64,128 cargo bench --bench latency
//! ```
//!
//! Prints a Markdown table; the same numbers go to `target/bench-latency.json`.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use strata::source::{InputFile, Turn};
use strata::store::ScopeKind;
use strata::{Config, Engine, NoProgress};

#[path = "common/mock.rs"]
mod mock;
use mock::{Mock, cpu_seconds, quantile_ms};

const SPEAKERS: [&str; 10] = [
    "alice", "bob", "chen", "dana", "emil", "fatima", "goran", "hana", "ivan", "june",
];
const TOPICS: [&str; 6] = [
    "the Eastgate line",
    "the river crossing",
    "bus rapid transit",
    "the depot expansion",
    "fare integration",
    "the airport link",
];

/// A debate of `rounds × turns` turns of ~100 tokens, with numbers and names to keep.
fn debate(rounds: u32, turns: usize) -> InputFile {
    let mut sources = Vec::new();
    let mut bytes = 0;
    for r in 1..=rounds {
        for (t, speaker) in SPEAKERS.iter().cycle().take(turns).enumerate() {
            let k = r as usize * 31 + t * 7;
            let topic = TOPICS[k % TOPICS.len()];
            let text = format!(
                "In round {r}, I want to return to {topic}. The latest estimate puts it at \
                 ${}.{} million, against {} million in the {} plan. Ridership would reach {} \
                 daily trips by {}, according to the transit office. {} disagreed last round, \
                 but the numbers have moved since. I propose that the council fund a study of \
                 {topic} before committing {} percent of the capital budget.",
                100 + k % 900,
                k % 10,
                90 + k % 500,
                2020 + k % 9,
                1000 * (5 + k % 60),
                2030 + k % 12,
                SPEAKERS[(t + 1) % SPEAKERS.len()],
                5 + k % 30,
            );
            bytes += text.len() as u64;
            let turn = Turn {
                round: r,
                speaker: speaker.to_string(),
                text,
                time: None,
            };
            sources.push(
                strata::source::turn_input(format!("bench#{r}-{t}"), turn).expect("valid turn"),
            );
        }
    }
    InputFile {
        path: PathBuf::from("bench"),
        kind: ScopeKind::Debate,
        sources,
        bytes,
    }
}

struct Run {
    concurrency: usize,
    latency: Duration,
    calls: u64,
    wall: Duration,
    /// Process CPU time (user + system) during the build.
    cpu_s: f64,
    /// Median and 90th percentile of the dispatch gap (see [`Mock::take_gaps`]), ms.
    gap_ms: (f64, f64),
}

/// The benches' clock: every write and build happens at this instant (no TTL expires).
const NOW: u64 = 1_800_000_000;

/// An in-memory engine with `input` ingested as scope `bench`, built by a [`Mock`] of
/// `latency ± jitter` at `concurrency`.
fn ingested(
    input: &InputFile,
    latency: Duration,
    jitter: Duration,
    concurrency: usize,
) -> (Engine, Arc<Mock>) {
    let mut cfg = Config::default();
    cfg.build.concurrency = concurrency;
    cfg.store.ttl_secs = 0;
    let model = Arc::new(Mock::new(latency, jitter));
    let engine = Engine::in_memory(cfg)
        .expect("engine")
        .with_model(model.clone());
    engine
        .ingest("bench", std::slice::from_ref(input), NOW)
        .expect("ingest");
    (engine, model)
}

fn build_once(
    rt: &tokio::runtime::Runtime,
    input: &InputFile,
    latency: Duration,
    jitter: Duration,
    concurrency: usize,
) -> Run {
    let (engine, model) = ingested(input, latency, jitter, concurrency);
    model.take_gaps(concurrency);
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let r = rt
        .block_on(engine.compress("bench", NOW, &NoProgress))
        .expect("build");
    let (wall, cpu_s) = (t.elapsed(), cpu_seconds() - cpu);
    let gaps = model.take_gaps(concurrency);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(
        r.fallbacks, 0,
        "the simulated model's output must pass validation"
    );
    assert_eq!(r.model_calls, model.calls.load(Ordering::Relaxed));
    Run {
        concurrency,
        latency,
        calls: r.model_calls,
        wall,
        cpu_s,
        gap_ms: (quantile_ms(&gaps, 0.5), quantile_ms(&gaps, 0.9)),
    }
}

/// One appended turn: how long until its scope's tree is whole again, with how many model
/// calls, and how many of them ran one after another.
struct Appended {
    wall: Duration,
    calls: u64,
    chain: usize,
}

/// Builds `input` at `concurrency`, then appends `appends` turns one at a time, each
/// followed by the build of what it changed (what `POST …/turns` and a debate runner's next
/// `context` call do through the engine): the issue's "one appended turn" row.
fn append_turns(
    rt: &tokio::runtime::Runtime,
    input: &InputFile,
    rounds: u32,
    latency: Duration,
    jitter: Duration,
    concurrency: usize,
    appends: usize,
) -> Vec<Appended> {
    let (engine, model) = ingested(input, latency, jitter, concurrency);
    rt.block_on(engine.compress("bench", NOW, &NoProgress))
        .expect("build");
    model.take_chain();
    (0..appends)
        .map(|i| {
            let turn = Turn {
                round: rounds + 1,
                speaker: SPEAKERS[i % SPEAKERS.len()].to_string(),
                text: format!(
                    "In the closing round I return to {}: the study must report its costs \
                     per rider before the vote, and the {} million estimate must be checked \
                     against the {} plan.",
                    TOPICS[i % TOPICS.len()],
                    300 + 17 * i,
                    2021 + i % 9
                ),
                time: None,
            };
            let t = Instant::now();
            engine.append("bench", turn, NOW).expect("append");
            let before = model.calls.load(Ordering::Relaxed);
            let r = rt
                .block_on(engine.compress("bench", NOW, &NoProgress))
                .expect("build after the append");
            let wall = t.elapsed();
            assert_eq!(r.fallbacks, 0);
            Appended {
                wall,
                calls: model.calls.load(Ordering::Relaxed) - before,
                chain: model.take_chain(),
            }
        })
        .collect()
}

fn env<T: std::str::FromStr>(k: &str, default: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful. Either
    // way this harness runs once.
    let latency = Duration::from_millis(env("STRATA_LAT_MS", 200));
    let jitter = Duration::from_millis(env("STRATA_LAT_JITTER_MS", 50));
    let rounds: u32 = env("STRATA_LAT_ROUNDS", 100);
    let turns: usize = env("STRATA_LAT_TURNS", 10);
    let concurrencies: Vec<usize> = std::env::var("STRATA_LAT_CONCURRENCY")
        .unwrap_or_else(|_| "16,32,64,128".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let repeats: usize = env("STRATA_LAT_REPEATS", 3);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let input = debate(rounds, turns);
    eprintln!(
        "latency bench: {} turns in {rounds} rounds, latency {} ms ± {} ms",
        input.sources.len(),
        latency.as_millis(),
        jitter.as_millis()
    );

    // The engine's own cost: the same build with instant model calls.
    let zero: Vec<Run> = (0..repeats)
        .map(|_| build_once(&rt, &input, Duration::ZERO, Duration::ZERO, 32))
        .collect();
    let zero = median(zero);
    let per_call = zero.wall.as_secs_f64() / zero.calls as f64;
    eprintln!(
        "zero latency: {} calls in {:.3} s = {:.3} ms of engine time per call",
        zero.calls,
        zero.wall.as_secs_f64(),
        per_call * 1e3
    );

    let mut rows = Vec::new();
    for &c in &concurrencies {
        // Repeat at the headline concurrency; once elsewhere (the runs are long).
        let n = if c == 32 { repeats } else { 1 };
        let runs: Vec<Run> = (0..n)
            .map(|_| build_once(&rt, &input, latency, jitter, c))
            .collect();
        let r = median(runs);
        let l = r.latency.as_secs_f64();
        let ideal = (r.calls as f64 * l / c as f64).max(3.0 * l);
        let tight = ((r.calls as f64 - 2.0) * l / c as f64 + 2.0 * l).max(3.0 * l);
        let wall = r.wall.as_secs_f64();
        eprintln!(
            "concurrency {c}: {} calls in {wall:.3} s; ideal {ideal:.3} s (efficiency {:.3}), \
             critical-path bound {tight:.3} s (efficiency {:.3}); CPU {:.2} s; dispatch gap \
             median {:.3} ms, p90 {:.3} ms",
            r.calls,
            ideal / wall,
            tight / wall,
            r.cpu_s,
            r.gap_ms.0,
            r.gap_ms.1
        );
        rows.push(json!({
            "concurrency": r.concurrency, "calls": r.calls, "latency_ms": r.latency.as_millis() as u64,
            "jitter_ms": jitter.as_millis() as u64, "wall_s": wall, "ideal_s": ideal,
            "efficiency": ideal / wall, "critical_path_bound_s": tight,
            "efficiency_vs_bound": tight / wall, "runs": n, "cpu_s": r.cpu_s,
            "dispatch_gap_ms": {"p50": r.gap_ms.0, "p90": r.gap_ms.1},
        }));
    }

    println!(
        "| concurrency | calls | wall (s) | ideal calls×L/C (s) | efficiency | critical-path bound (s) | efficiency vs bound | CPU (s) | dispatch gap p50 / p90 (ms) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.3} | {:.2} | {:.3} / {:.3} |",
            r["concurrency"],
            r["calls"],
            r["wall_s"].as_f64().unwrap_or(0.0),
            r["ideal_s"].as_f64().unwrap_or(0.0),
            r["efficiency"].as_f64().unwrap_or(0.0),
            r["critical_path_bound_s"].as_f64().unwrap_or(0.0),
            r["efficiency_vs_bound"].as_f64().unwrap_or(0.0),
            r["cpu_s"].as_f64().unwrap_or(0.0),
            r["dispatch_gap_ms"]["p50"].as_f64().unwrap_or(0.0),
            r["dispatch_gap_ms"]["p90"].as_f64().unwrap_or(0.0),
        );
    }
    println!(
        "\nengine overhead at zero latency: {} calls in {:.3} s = {:.3} ms per call",
        zero.calls,
        zero.wall.as_secs_f64(),
        per_call * 1e3
    );

    // One appended turn at a time after the build, at the headline concurrency.
    let appends: usize = env("STRATA_LAT_APPENDS", 5);
    let appended = append_turns(&rt, &input, rounds, latency, jitter, 32, appends);
    println!(
        "\n| appended turn | model calls | one after another | wall until the tree is whole (s) | wall / latency |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let l = latency.as_secs_f64();
    for (i, a) in appended.iter().enumerate() {
        println!(
            "| {} | {} | {} | {:.3} | {:.1} |",
            i + 1,
            a.calls,
            a.chain,
            a.wall.as_secs_f64(),
            if l > 0.0 {
                a.wall.as_secs_f64() / l
            } else {
                0.0
            }
        );
    }
    let appended_json: Vec<_> = appended
        .iter()
        .map(|a| json!({"calls": a.calls, "chain": a.chain, "wall_s": a.wall.as_secs_f64()}))
        .collect();

    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let out = json!({
        "turns": input.sources.len(), "rounds": rounds,
        "latency_ms": latency.as_millis() as u64, "jitter_ms": jitter.as_millis() as u64,
        "zero_latency": {"calls": zero.calls, "wall_s": zero.wall.as_secs_f64(),
                         "ms_per_call": per_call * 1e3},
        "runs": rows,
        "appended_turns": appended_json,
    });
    let path = target.join("bench-latency.json");
    if std::fs::create_dir_all(&target).is_ok()
        && std::fs::write(&path, serde_json::to_string_pretty(&out).expect("json")).is_ok()
    {
        eprintln!("wrote {}", path.display());
    }
}

/// The run with the median wall time.
fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by_key(|r| r.wall);
    let mid = runs.len() / 2;
    runs.swap_remove(mid)
}
