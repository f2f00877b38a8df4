//! Questions (the navigator, offline or with a root model) and `grep`.

use super::Engine;
use crate::config::Strategy;
use crate::corpus::placed::{Placed, placed};
use crate::corpus::{Search, Trees};
use crate::error::{Error, Result};
use crate::level::Level;
use crate::model::usage::metered;
use crate::model::{Meter, Usage};
use crate::navigate::{Explorer, QueryResult, Stop, Stoppable, off_executor};
use crate::node::Span;
use crate::plan::Plan;
use crate::progress::Progress;
use crate::time::TimeRange;
use serde::Serialize;
use std::sync::Arc;

/// One `grep` result.
#[derive(Clone, Debug, Serialize)]
pub struct GrepHit {
    pub id: String,
    pub scope: String,
    pub level: Level,
    pub score: f32,
    pub citations: usize,
    pub first_span: Option<Span>,
    pub text: String,
}

/// The parts of `plans` said within `range` (`query.during`): the navigator's candidates.
/// A scope with nothing in the range is left out; none at all is an error.
fn during(plans: Vec<Plan>, range: &TimeRange) -> Result<Vec<Plan>> {
    if range.is_all() {
        return Ok(plans);
    }
    let names: Vec<String> = plans.iter().map(|p| p.scope.clone()).collect();
    let kept: Vec<Plan> = plans.iter().filter_map(|p| p.during(range)).collect();
    if kept.is_empty() {
        return Err(Error::invalid(format!(
            "nothing in {} was said {range} (sources without a time are left out when a time range is given)",
            names.join(", ")
        )));
    }
    Ok(kept)
}

/// A question that asks when ([`crate::text::time::asks_when`]) gets a date when what it
/// cites has a time: the date expression ("last Friday", "two weeks ago", "in March") of
/// the first timed citation that says one, resolved against its source's time, else the
/// first timed citation's date. The date goes first in the answer, on a line of its own
/// (`5 May 2023 (2023-05-05)`), and in [`QueryResult::when`]; the history says how it was
/// found. Every part of it is source
/// data — the source's time and the cited words — so the answer stays cited: the date
/// line is the citation's `time`, read through the quote's own words.
///
/// Runs after whichever policy answered, never inside one.
fn answer_when(question: &str, r: &mut QueryResult) {
    use crate::text::time::{When, asks_when, find};
    if !asks_when(question) {
        return;
    }
    // The first timed citation that says a date ("Last summer, after the parade, I knew."
    // cited after the turn that says why), else the first timed one, by its own time.
    let timed = || r.citations.iter().filter_map(|c| c.time.map(|t| (c, t)));
    let Some((c, t)) = timed()
        .find(|(c, t)| find(&c.quote, t.date()).is_some())
        .or_else(|| timed().next())
    else {
        return;
    };
    let anchor = t.date();
    let (when, how) = match find(&c.quote, anchor) {
        Some(f) => (
            f.when,
            format!(
                "{:?} in {} (said {t}) resolved to {}",
                &c.quote[f.start..f.end],
                c.source,
                f.when.iso()
            ),
        ),
        None => (When::Day(anchor), format!("the time of {} ({t})", c.source)),
    };
    let (words, iso) = (when.words(), when.iso());
    let line = if words == iso {
        iso.clone()
    } else {
        format!("{words} ({iso})")
    };
    r.refinement_history.push(format!(
        "the question asks when: answered with {iso}, {how}"
    ));
    r.answer = format!("{line}\n{}", r.answer);
    r.when = Some(iso);
}

/// One question for [`Engine::query`]: where, what, when, and how (settings, progress,
/// what may stop it). `Ask::new(scopes, question, now)` takes the engine's settings, no
/// progress and no stop.
pub struct Ask<'a> {
    /// The scopes to search; empty: every scope.
    pub scopes: &'a [String],
    pub question: &'a str,
    /// Unix seconds: what is live, and the time questions are asked at.
    pub now: u64,
    /// Per-request navigator settings (iterations, start level, `time_limit_ms`, time
    /// range …); `None`: the engine's `[query]` settings.
    pub settings: Option<&'a crate::config::QueryConfig>,
    pub progress: &'a dyn Progress,
    /// Ends the query early (cancelled, or its time limit); see [`Engine::query`].
    pub stop: Stop,
}

impl<'a> Ask<'a> {
    pub fn new(scopes: &'a [String], question: &'a str, now: u64) -> Ask<'a> {
        Ask {
            scopes,
            question,
            now,
            settings: None,
            progress: &crate::progress::NoProgress,
            stop: Stop::default(),
        }
    }

    pub fn settings(mut self, settings: &'a crate::config::QueryConfig) -> Ask<'a> {
        self.settings = Some(settings);
        self
    }

    pub fn progress(mut self, progress: &'a dyn Progress) -> Ask<'a> {
        self.progress = progress;
        self
    }

    pub fn stop(mut self, stop: Stop) -> Ask<'a> {
        self.stop = stop;
        self
    }
}

impl Engine {
    /// Answers `ask.question` over `ask.scopes` (all scopes when empty) with cited source
    /// spans. `ask.stop` may end it early (its time limit, else the settings'
    /// `time_limit_ms`, counts from this call). A stopped query still answers, from what
    /// it gathered: the best answer the root model gave so far, else the offline policy's
    /// (milliseconds); `limit_hit` is `cancelled` or `time_limit`. A build the query
    /// needs first is finished, not abandoned (what it builds is kept): the navigation
    /// then starts stopped.
    pub async fn query(&self, ask: &Ask<'_>) -> Result<QueryResult> {
        let (scopes, question, now, progress) = (ask.scopes, ask.question, ask.now, ask.progress);
        let qcfg = ask.settings.unwrap_or(&self.cfg.query);
        let stop = ask.stop.clone();
        let stop = if stop.time_limit_ms() == 0 {
            stop.with_time_limit(qcfg.time_limit_ms)
        } else {
            stop
        };
        if question.trim().is_empty() {
            return Err(Error::invalid("the question is empty"));
        }
        let t0 = std::time::Instant::now();
        let meter = Arc::new(Meter::default());
        let mut r = metered(meter.clone(), async {
            let names = if scopes.is_empty() {
                let all = self.scope_names()?;
                if all.is_empty() {
                    return Err(Error::invalid("no scopes yet: run `strata ingest` first"));
                }
                all
            } else {
                scopes.to_vec()
            };
            self.note_queried(&names, now);
            let mut plans = Vec::with_capacity(names.len());
            for s in &names {
                plans.push(self.ensure_built(s, now, progress).await?.0);
            }
            let plans = during(plans, &qcfg.during)?;
            let corpus = self.corpus();
            let Placed { cut, note } =
                off_executor(|| placed(&corpus, question, &plans, &qcfg.during))?;
            // A question whose date leaves nothing that answers it is read against
            // everything, without its date words (below; BM25 only when an embedder is
            // configured: the question's vector is the one of what was said then).
            let offline = self.root.is_none() || qcfg.strategy == Strategy::Offline;
            let whole = (offline && cut.is_some()).then(|| plans.clone());
            let (plans, asked) = cut.unwrap_or_else(|| (plans, question.to_string()));
            // Appends leave their chunks pending; a query searches everything stored.
            off_executor(|| self.sync_index())?;
            let mut explorer = Explorer::new(self.corpus(), plans, qcfg.clone(), now);
            explorer.set_stop(stop.clone());
            explorer.embed_question(&asked).await;
            match self.root.as_ref().filter(|_| !offline) {
                Some(root) => {
                    let helper = self.helper.as_deref().unwrap_or(root.as_ref());
                    // Every model call ends as soon as the query must stop.
                    let root = Stoppable {
                        inner: root.as_ref(),
                        stop: &stop,
                    };
                    let helper = Stoppable {
                        inner: helper,
                        stop: &stop,
                    };
                    if qcfg.strategy == Strategy::Code {
                        crate::navigate::llm::run_code(explorer, question, &root, &helper).await
                    } else {
                        crate::navigate::llm::run(explorer, question, &root, &helper).await
                    }
                }
                None => off_executor(|| {
                    let r = crate::navigate::offline(explorer, &asked)?;
                    match whole {
                        Some(whole) if r.citations.is_empty() => {
                            let mut ex = Explorer::new(self.corpus(), whole, qcfg.clone(), now);
                            ex.set_stop(stop.clone());
                            let mut again = crate::navigate::offline(ex, &asked)?;
                            again.refinement_history.insert(
                                0,
                                "nothing said then answers it, so everything is read for \
                                 the rest of the question"
                                    .to_string(),
                            );
                            Ok(again)
                        }
                        _ => Ok(r),
                    }
                }),
            }
            .map(|mut r| {
                if let Some(note) = note {
                    r.refinement_history.insert(0, note);
                }
                r
            })
        })
        .await?;
        answer_when(question, &mut r);
        r.usage = Usage::from_meter(&meter, &self.cfg.prices, t0.elapsed());
        Ok(r)
    }

    /// BM25 search over the current trees of `scopes` (all when empty) at `levels` (all
    /// when empty): the `grep` primitive, exposed for people and agents.
    pub async fn grep(
        &self,
        scopes: &[String],
        pattern: &str,
        levels: &[Level],
        limit: usize,
        now: u64,
    ) -> Result<Vec<GrepHit>> {
        let names = if scopes.is_empty() {
            self.scope_names()?
        } else {
            for s in scopes {
                self.scope(s)?;
            }
            scopes.to_vec()
        };
        let mut plans = Vec::with_capacity(names.len());
        for s in &names {
            plans.push(self.plan(s)?);
        }
        // The navigator's one retrieval seam: BM25 over the current trees, fused with the
        // dense ranking when an embedder is configured (a failed embedding: BM25 only).
        let corpus = self.corpus();
        let mut dense = corpus.dense();
        if let Some(d) = dense.as_mut()
            && let Some(e) = d.embed_query(pattern, true).await
        {
            tracing::warn!(error = %e, "grep: embedding the pattern failed, BM25 only");
        }
        off_executor(|| {
            self.sync_index()?;
            let trees = Trees::new(plans);
            let question = corpus.question(pattern, &trees.scopes());
            let found = corpus.search(
                &trees,
                &Search {
                    question: &question,
                    levels,
                    within: None,
                    limit: limit.saturating_mul(2).max(limit),
                },
                dense.as_mut(),
            )?;
            let mut out = Vec::new();
            for (id, score) in found.hits {
                if out.len() >= limit {
                    break;
                }
                if let Some(n) = self.store.get_live(&id, now)? {
                    out.push(GrepHit {
                        id: n.id.to_hex(),
                        scope: n.scope,
                        level: n.level,
                        score,
                        citations: n.citations.len(),
                        first_span: n.citations.first().cloned(),
                        text: n.text,
                    });
                }
            }
            Ok(out)
        })
    }
}
