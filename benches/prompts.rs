//! The requests a real model is sent by a build (issue 15): how large the largest prompt
//! is on the 249 State of the Union addresses, and what appending one turn to a
//! 2,000-turn debate sends. Not a criterion benchmark: each phase runs once.
//!
//! ```text
//! cargo bench --bench prompts                        # fetches the SOTU corpus (cached)
//! STRATA_BENCH_CORPUS=/path/to/txt/dir cargo bench --bench prompts
//! ```
//!
//! The model is a recorder: it renders every request into the prompt an
//! OpenAI-compatible server would get (`model::prompts::compress`), counts it in real
//! tokens (prompt + `max_tokens`), and answers like the offline compressor. It is not
//! trusted, so the build measures, validates and retries its outputs exactly as it does a
//! real model's. "Before" (one ABSTRACT call over every SUMMARY) is the prompt the
//! previous build sent: the ABSTRACT request over every group's SUMMARY, rendered from
//! the same SUMMARY nodes (which the reduction does not change).

#[path = "common/debate.rs"]
mod debate;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use strata::model::{BoxFuture, CompressRequest, ModelError, Passage, SubModel, offline, prompts};
use strata::plan::Plan;
use strata::{BuildReport, Config, Engine, Level, NoProgress, unix_now};

/// What one request cost a model's context, by level.
struct Sent {
    level: Level,
    tokens: usize,
}

#[derive(Default)]
struct Recorder {
    sent: Mutex<Vec<Sent>>,
}

impl SubModel for Recorder {
    fn identity(&self) -> String {
        "recorder".into()
    }

    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>> {
        Box::pin(async move {
            let p = prompts::compress(&req);
            let tokens = prompts::prompt_tokens(&p) + p.max_tokens as usize;
            self.sent.lock().unwrap().push(Sent {
                level: req.level,
                tokens,
            });
            Ok(offline::compress(&req))
        })
    }
}

impl Recorder {
    fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

/// The request the build made before the reduction: one ABSTRACT over every group's
/// SUMMARY, in real tokens (prompt + `max_tokens`).
fn one_call_abstract(e: &Engine, plan: &Plan, now: u64) -> usize {
    let passages = plan
        .groups
        .iter()
        .map(|g| Passage {
            text: e.node(&g.summary, now).expect("summary").text,
            label: Some(g.label.clone()),
        })
        .collect();
    let lv = &e.config().levels;
    let target = ((plan.full_tokens as f64 * lv.abstract_ratio).ceil() as usize)
        .min(lv.abstract_max_tokens)
        .max(1);
    let p = prompts::compress(&CompressRequest::new(Level::Abstract, passages, target));
    prompts::prompt_tokens(&p) + p.max_tokens as usize
}

fn summary(what: &str, r: &BuildReport, plan: &Plan, sent: &[Sent]) {
    let max = |l: Option<Level>| {
        sent.iter()
            .filter(|s| l.is_none_or(|l| s.level == l))
            .map(|s| s.tokens)
            .max()
            .unwrap_or(0)
    };
    let layers = plan.reductions.iter().map(|r| r.layer).max().unwrap_or(0);
    println!(
        "| {what} | {} requests | largest {} tokens (DETAILED {}, SUMMARY {}, ABSTRACT {}) | \
         {} groups, {} intermediate SUMMARYs in {layers} layer(s) | over context {} | \
         rejected {} (empty {}, over budget {}, unfaithful {}), identical retries {}, fallbacks {} |",
        sent.len(),
        max(None),
        max(Some(Level::Detailed)),
        max(Some(Level::Summary)),
        max(Some(Level::Abstract)),
        plan.groups.len(),
        plan.reductions.len(),
        r.over_context,
        r.empty + r.over_budget + r.unfaithful,
        r.empty,
        r.over_budget,
        r.unfaithful,
        r.identical_retries,
        r.fallbacks,
    );
    assert_eq!(r.max_request_tokens as usize, max(None));
}

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let now = unix_now();
    let cfg = Config::default();
    let context = cfg.model.context_tokens;
    println!("model.context_tokens = {context}\n");

    // ------------------------------------------------------------ SOTU
    let dir = corpus_dir(manifest);
    let paths = corpus_files(&dir);
    eprintln!("corpus: {} files in {}", paths.len(), dir.display());
    let model = std::sync::Arc::new(Recorder::default());
    let e = Engine::in_memory(cfg.clone())
        .expect("engine")
        .with_model(model.clone());
    e.ingest_files("sotu", None, &paths, now).expect("ingest");
    let r = rt
        .block_on(e.compress("sotu", now, &NoProgress))
        .expect("build");
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    let plan = e.plan("sotu").expect("plan");
    let sent = model.take();
    summary(
        &format!("{} addresses, cold build", paths.len()),
        &r,
        &plan,
        &sent,
    );
    println!(
        "| before: one ABSTRACT over every SUMMARY | | {} tokens | | | |",
        one_call_abstract(&e, &plan, now)
    );
    drop(e);

    // ------------------------------------------------------------ a 2,000-turn debate
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("debate.jsonl");
    std::fs::write(&path, debate::generate_debate(500, 0x5eed_2026)).expect("write");
    let model = std::sync::Arc::new(Recorder::default());
    let e = Engine::in_memory(cfg.clone())
        .expect("engine")
        .with_model(model.clone());
    e.ingest_files("debate", None, &[path], now)
        .expect("ingest");
    let r = rt
        .block_on(e.compress("debate", now, &NoProgress))
        .expect("build");
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    let plan = e.plan("debate").expect("plan");
    summary("2,000-turn debate, cold build", &r, &plan, &model.take());
    let mut rng = debate::Lcg(0xadd7);
    for (round, speaker) in [(500, "erin"), (501, "alice")] {
        let turn = strata::source::Turn {
            round,
            speaker: speaker.into(),
            text: debate::turn_text(&mut rng, round, speaker),
            time: None,
        };
        e.append("debate", turn, now).expect("append");
        let r = rt
            .block_on(e.compress("debate", now, &NoProgress))
            .expect("build");
        let plan = e.plan("debate").expect("plan");
        let sent = model.take();
        summary(
            &format!("append one turn to round {round}"),
            &r,
            &plan,
            &sent,
        );
        // Before: the turn's DETAILED and its round's SUMMARY (as now), then one ABSTRACT
        // over every SUMMARY.
        let fine: Vec<usize> = sent
            .iter()
            .filter(|s| s.level == Level::Detailed || s.level == Level::Summary)
            .map(|s| s.tokens)
            .collect();
        println!(
            "| before: append to round {round} | 3 requests | largest {} tokens (ABSTRACT) | | | |",
            one_call_abstract(&e, &plan, now).max(fine.into_iter().max().unwrap_or(0))
        );
    }
}

fn corpus_dir(manifest: &Path) -> PathBuf {
    if let Some(d) = std::env::var_os("STRATA_BENCH_CORPUS").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let out = Command::new("bash")
        .arg(manifest.join("scripts/fetch-sotu.sh"))
        .current_dir(manifest)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/fetch-sotu.sh");
    assert!(out.status.success(), "scripts/fetch-sotu.sh failed");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 path");
    PathBuf::from(
        stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .expect("a path")
            .trim(),
    )
}

fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "txt" || e == "md"))
        .collect();
    v.sort();
    v
}
