//! The report's Markdown, and token counts for people (`8k`, `1M`).

use super::{Report, TaskRow};
use strata_core::error::{Error, Result};

pub fn human_tokens(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 1000 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// Parses `8k`, `2M`, `128000`.
pub fn parse_tokens(s: &str) -> Result<usize> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1_000.0),
        Some('m' | 'M') => (&s[..s.len() - 1], 1_000_000.0),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| Error::invalid(format!("`{s}` is not a token count (e.g. 8k, 512k, 2M)")))?;
    if v.is_nan() || v <= 0.0 || v * mul > 1e9 {
        return Err(Error::invalid(format!(
            "`{s}`: a size must be between 1 and 1,000M tokens"
        )));
    }
    Ok((v * mul) as usize)
}

/// The report as Markdown tables.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    if !r.complete {
        s.push_str("**Partial: the run has not finished (or was interrupted).**\n\n");
    }
    s.push_str(&format!(
        "Seed {}, compressor `{}`, navigator `{}`, corpus {} documents / {} tokens, {:.0} s in all.\n\n",
        r.options.seed, r.compressor, r.navigator, r.corpus_documents, r.corpus_tokens, r.wall_s
    ));
    // Needle tasks: accuracy by haystack size at a glance.
    let sized: Vec<&TaskRow> = r
        .tasks
        .iter()
        .filter(|t| t.instance.starts_with("haystack-"))
        .collect();
    if !sized.is_empty() {
        let mut sizes: Vec<(usize, &str)> = sized
            .iter()
            .map(|t| (t.full_tokens, t.instance.as_str()))
            .collect();
        sizes.sort();
        sizes.dedup();
        let mut names: Vec<&str> = sized.iter().map(|t| t.task.as_str()).collect();
        names.sort();
        names.dedup();
        s.push_str("| accuracy |");
        for (_, inst) in &sizes {
            s.push_str(&format!(" {} |", inst.trim_start_matches("haystack-")));
        }
        s.push_str("\n|---|");
        s.push_str(&"--:|".repeat(sizes.len()));
        s.push('\n');
        for n in names {
            s.push_str(&format!("| {n} |"));
            for (_, inst) in &sizes {
                match sized.iter().find(|t| t.task == n && t.instance == *inst) {
                    Some(t) => s.push_str(&format!(
                        " {:.3} ({}/{}) |",
                        t.accuracy, t.correct, t.questions
                    )),
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s.push_str("| task | context | questions | accuracy | citation precision | citation recall | tokens to root (mean) | full context tokens | sub-calls (mean) | model calls (mean) | navigator fallbacks | query ms (mean) |\n");
    s.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for t in &r.tasks {
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.0} | {} | {:.1} | {:.1} | {} | {:.1} |\n",
            t.task,
            t.instance,
            t.questions,
            t.accuracy,
            t.citation_precision,
            t.citation_recall,
            t.tokens_to_root,
            t.full_tokens,
            t.sub_calls,
            t.model_calls,
            t.fell_back,
            t.query_ms
        ));
    }
    if !r.levels.is_empty() {
        s.push_str(
            "\n| level | nodes | size vs source | key facts | kept | random-deletion baseline |\n",
        );
        s.push_str("|---|--:|--:|--:|--:|--:|\n");
        for l in &r.levels {
            s.push_str(&format!(
                "| {} | {} | {:.1} % | {} | {:.1} % | {:.1} % |\n",
                l.level,
                l.nodes,
                100.0 * l.size_ratio,
                l.facts,
                100.0 * l.retention,
                100.0 * l.baseline_retention
            ));
        }
    }
    if !r.retention.is_empty() {
        s.push_str("\n| retention | budget | window tokens | key facts | `auto` keeps | last B tokens | first B/2 + last B/2 | decoys kept (`auto`) | decoys kept (last B) | overview tokens |\n");
        s.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for t in &r.retention {
            let dec = |x: f64| {
                if t.decoys == 0 {
                    "–".to_string()
                } else {
                    format!("{:.1} %", 100.0 * x)
                }
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} % ({}) | {:.1} % | {:.1} % | {} | {} | {} |\n",
                t.instance,
                human_tokens(t.budget),
                t.window_tokens,
                t.facts,
                100.0 * t.retention,
                t.kept,
                100.0 * t.last_b,
                100.0 * t.first_last_b,
                dec(t.decoy_rate),
                dec(t.decoy_rate_last_b),
                t.overview_tokens
            ));
        }
        let kinds: std::collections::BTreeSet<&String> =
            r.retention.iter().flat_map(|t| t.by_kind.keys()).collect();
        if !kinds.is_empty() {
            s.push_str("\n| retention by kind | budget |");
            for k in &kinds {
                s.push_str(&format!(" {k} |"));
            }
            s.push_str("\n|---|--:|");
            s.push_str(&"--:|".repeat(kinds.len()));
            s.push('\n');
            for t in r.retention.iter().filter(|t| !t.by_kind.is_empty()) {
                s.push_str(&format!("| {} | {} |", t.instance, human_tokens(t.budget)));
                for k in &kinds {
                    match t.by_kind.get(*k) {
                        Some((a, b)) => s.push_str(&format!(" {a}/{b} |")),
                        None => s.push_str(" – |"),
                    }
                }
                s.push('\n');
            }
        }
    }
    if !r.builds.is_empty() {
        s.push_str(
            "\n| instance | tokens | ingest s | build s | nodes | model calls | fallbacks |\n",
        );
        s.push_str("|---|--:|--:|--:|--:|--:|--:|\n");
        for b in &r.builds {
            s.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {} | {} | {} |\n",
                b.instance,
                b.tokens,
                b.ingest_ms / 1000.0,
                b.build_ms / 1000.0,
                b.nodes,
                b.model_calls,
                b.fallbacks
            ));
        }
    }
    s
}
