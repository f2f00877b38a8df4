//! What a debate runner pays per turn, as the debate grows: `Engine::append` (what `POST
//! …/turns`, `strata append`, MCP and Python call), the index catching up with the turn
//! (`Engine::sync_index`, which the next query or build would run), then the `auto`
//! context window it asks for before the next turn (which builds what the turn changed),
//! and the bytes the store grows by per turn. A store on disk (sled, under
//! `target/`), the offline compressor.
//!
//! ```sh
//! cargo bench --bench appends                                  # 500 rounds, then 400 turns
//! STRATA_BENCH_ROUNDS=25 STRATA_BENCH_APPENDS=10000 STRATA_BENCH_WINDOW=0 \
//!     cargo bench --bench appends                              # appends alone, 10,000 turns
//! ```
//!
//! Every `STRATA_BENCH_EVERY` appends (default: a tenth of them) a row: the turns so far,
//! the median and worst append, index and context times of the turns since the last row,
//! the bytes the process wrote and read per append and wrote per index catch-up
//! (`/proc/self/io` `wchar`/`rchar`: the store's log, the index's segment files and
//! `meta.json`; the window's own are not counted), and the store's bytes on disk per turn
//! appended since. Flat rows mean O(1) per turn.
//! `STRATA_BENCH_WINDOW=0` leaves the window out (appends alone). The same rows go to
//! `target/bench-appends.json`.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use strata::source::{self, InputFile, Turn};
use strata::store::ScopeKind;
use strata::{Config, Engine, LevelChoice, NoProgress, unix_now};

#[path = "common/debate.rs"]
mod debate;
use debate::{Lcg, generate_debate, turn_text};

const SCOPE: &str = "runner";
const SPEAKERS: [&str; 4] = ["alice", "bob", "carol", "dave"];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = match e.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            n += if m.is_dir() {
                dir_bytes(&e.path())
            } else {
                m.len()
            };
        }
    }
    n
}

/// The bytes this process has passed to `write` and `read` calls so far (`/proc/self/io`).
fn io_bytes() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("wchar:"), field("rchar:"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let rounds = env("STRATA_BENCH_ROUNDS", 500) as u32;
    let appends = env("STRATA_BENCH_APPENDS", 400);
    let every = env("STRATA_BENCH_EVERY", (appends / 10).max(1));
    let budget = env("STRATA_BENCH_BUDGET", 4000) as usize;
    let with_window = env("STRATA_BENCH_WINDOW", 1) != 0;

    std::fs::create_dir_all(&target).expect("target dir");
    let tmp = tempfile::tempdir_in(&target).expect("temp dir");
    let db = tmp.path().join("db");
    let engine = Engine::open(&db, Config::default()).expect("open");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let now = unix_now();

    let jsonl = generate_debate(rounds, 0x5eed_2026);
    let sources = source::debate("gen.jsonl", &jsonl).expect("generated debate parses");
    let start_turns = sources.len() as u64;
    engine
        .ingest(
            SCOPE,
            &[InputFile {
                path: PathBuf::from("gen.jsonl"),
                kind: ScopeKind::Debate,
                sources,
                bytes: jsonl.len() as u64,
            }],
            now,
        )
        .expect("ingest");
    rt.block_on(engine.compress(SCOPE, now, &NoProgress))
        .expect("compress");
    let window = |engine: &Engine| {
        rt.block_on(engine.context(SCOPE, LevelChoice::Auto, budget, now, &NoProgress))
            .expect("context")
    };
    window(&engine);
    eprintln!(
        "appends: {start_turns} turns ({rounds} rounds) built; appending {appends}, a row every {every}"
    );

    println!(
        "| turns | append p50 / max | written / read per append | index p50 | written per index | context `auto` {budget} p50 / max | store bytes per turn | store |"
    );
    println!("|--:|--:|--:|--:|--:|--:|--:|--:|");
    let mut rng = Lcg(0x0a99_e4d5);
    let mut rows = Vec::new();
    let (mut append_ms, mut context_ms) = (Vec::new(), Vec::new());
    let mut bytes_before = dir_bytes(&db);
    let (mut written, mut read, mut indexed) = (0u64, 0u64, 0u64);
    let mut index_ms = Vec::new();
    for i in 0..appends {
        let n = start_turns + i;
        let round = rounds + 1 + (i / SPEAKERS.len() as u64) as u32;
        let speaker = SPEAKERS[(i % SPEAKERS.len() as u64) as usize];
        let turn = Turn {
            round,
            speaker: speaker.into(),
            text: turn_text(&mut rng, round, speaker),
            time: None,
        };
        let (w0, r0) = io_bytes();
        let t = Instant::now();
        engine.append(SCOPE, turn, now).expect("append");
        append_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let (w1, r1) = io_bytes();
        written += w1 - w0;
        read += r1 - r0;
        let t = Instant::now();
        engine.sync_index().expect("index");
        index_ms.push(t.elapsed().as_secs_f64() * 1e3);
        indexed += io_bytes().0 - w1;
        if with_window {
            let t = Instant::now();
            let w = window(&engine);
            context_ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(w.tokens <= budget, "over budget");
        }
        if (i + 1) % every == 0 {
            // What sled has not written yet is written before the size is read.
            engine.store().flush().expect("flush");
            let bytes = dir_bytes(&db);
            let per_turn = bytes.saturating_sub(bytes_before) as f64 / append_ms.len() as f64;
            let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            let (amax, cmax) = (max(&append_ms), max(&context_ms));
            let (a50, c50) = (median(&mut append_ms), median(&mut context_ms));
            let i50 = median(&mut index_ms);
            let k = append_ms.len() as u64;
            let (w, r, iw) = (written / k, read / k, indexed / k);
            let context = if with_window {
                format!("{c50:.1} / {cmax:.1} ms")
            } else {
                "-".into()
            };
            println!(
                "| {} | {a50:.1} / {amax:.1} ms | {w} / {r} B | {i50:.1} ms | {iw} B | {context} | {per_turn:.0} | {:.1} MB |",
                n + 1,
                bytes as f64 / 1e6
            );
            rows.push(json!({
                "turns": n + 1, "append_ms_p50": a50, "append_ms_max": amax,
                "context_ms_p50": c50, "context_ms_max": cmax,
                "written_per_append": w, "read_per_append": r,
                "index_ms_p50": i50, "written_per_index": iw,
                "store_bytes_per_turn": per_turn, "store_bytes": bytes,
            }));
            (written, read, indexed) = (0, 0, 0);
            index_ms.clear();
            append_ms.clear();
            context_ms.clear();
            bytes_before = bytes;
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let out = json!({
        "rounds": rounds, "start_turns": start_turns, "appends": appends, "budget": budget,
        "window": with_window,
        "load_average": load.split_whitespace().take(3).collect::<Vec<_>>(),
        "rows": rows,
    });
    let path = target.join("bench-appends.json");
    std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).expect("write json");
    eprintln!(
        "appends: wrote {} (load average {})",
        path.display(),
        load.trim()
    );
}
