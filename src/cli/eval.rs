//! `strata eval`: the evaluation harness of the library (feature `eval`) run from the command
//! line, or, in a binary built without it, a one-line error naming the build that has it.

use super::args::EvalArgs;
use anyhow::Result;
use strata::Config;
#[cfg(feature = "eval")]
use {
    super::output::{out, print_json},
    anyhow::Context as _,
};

/// `strata eval` in a binary built without the harness: say how to get one.
#[cfg(not(feature = "eval"))]
pub fn eval(_: EvalArgs, _: Config, _: bool) -> Result<()> {
    anyhow::bail!(
        "this strata was built without the evaluation harness: build it with `cargo build --release --features eval` (scripts/eval.sh does)"
    )
}

/// `strata eval`: generate, run, score, write the report; check the floors.
#[cfg(feature = "eval")]
pub fn eval(a: EvalArgs, cfg: Config, json: bool) -> Result<()> {
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
        aggregate_rounds: a.aggregate_rounds,
        aggregate_speakers: a.aggregate_speakers,
        aggregate_topics: a.aggregate_topics,
        fidelity_tokens,
        retention_rounds: a.retention_rounds,
        retention_speakers: a.retention_speakers,
        retention_facts: a.retention_facts,
        retention_budgets: a
            .retention_budgets
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| strata::eval::parse_tokens(s))
            .collect::<strata::Result<Vec<_>>>()?,
        retention_seeds: a.retention_seeds,
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
    let rt = crate::runtime()?;
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
    let mut files = vec!["report.json", "report.md"];
    if !opts.sizes.is_empty() {
        strata::eval::plot::svg(&report, &out.join("eval.svg"))?;
        files.push("eval.svg");
    }
    if !report.retention.is_empty() {
        strata::eval::plot::retention_svg(&report, &out.join("retention.svg"))?;
        files.push("retention.svg");
    }
    if json {
        print_json(&report)?;
    } else {
        out!("{md}");
        out!("(written to {}: {})", out.display(), files.join(", "));
    }
    let mut failed = Vec::new();
    for (task, min) in floors {
        match report.floor_score(&task) {
            Some(a) if a >= min => {}
            Some(a) => failed.push(format!("{task}: {a:.3} < floor {min}")),
            None => failed.push(format!("{task}: no questions of this task were run")),
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("below the floor: {}", failed.join("; "));
    }
    Ok(())
}
