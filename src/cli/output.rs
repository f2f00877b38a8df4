//! Printing: stdout that tolerates a closed pipe, JSON, usage lines, sizes, the warning after
//! a build that fell back, and a progress bar on stderr.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use strata::Progress;

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
pub(crate) use out;

/// One summary line when the model failed calls or its outputs were replaced.
pub fn fallback_warning(r: &strata::BuildReport) -> Option<String> {
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
pub fn print_usage(u: &strata::Usage) -> Result<()> {
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

pub fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    out!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A progress bar on stderr when it is a terminal; silent otherwise.
pub struct Bar(ProgressBar);

impl Bar {
    pub fn new() -> Bar {
        let pb = ProgressBar::with_draw_target(None, target());
        Bar(pb)
    }

    pub fn spinner(msg: String) -> Bar {
        let pb = ProgressBar::with_draw_target(None, target());
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"),
        );
        pb.set_message(msg);
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
        Bar(pb)
    }

    pub fn finish(&self) {
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
