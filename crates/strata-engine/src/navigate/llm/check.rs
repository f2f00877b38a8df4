//! The evidence check: before a model's verified answer is given, it is held against the
//! question and against what the offline policy would cite for it (run once per query, on
//! a fresh explorer over the same trees). Verified quotes can still be the wrong quotes — a
//! small model that cites the salutation opening every address, marked ready — so:
//!
//! - an answer that shares no name and no key term with the question, or lacks the kind
//!   of value the question asks for (a number, a date, an identifier, a person), is
//!   *unsupported*: never ready; sent back once with the offline evidence shown, then
//!   replaced by the offline answer (unless that is no better supported);
//! - an answer that the offline evidence beats clearly — it gives the asked kind of value
//!   or names a question name the answer lacks (strong), or covers far more of the
//!   question's term weight (weak) — is sent back once with that evidence; if the model
//!   keeps a strongly beaten answer, the offline answer is given, a weakly beaten one
//!   stands but is not ready (a paraphrased answer shares fewer words with its question);
//! - an answer that cites what the offline policy cites, or that nothing beats, stands.
//!
//! Every decision is a line of `refinement_history` and a `check` step of the trajectory.

use super::{Nav, clip_to};
use crate::error::Result;
use crate::navigate::offline::select;
use crate::navigate::support::Support;
use crate::navigate::{Cited, QueryResult};
use crate::node::context_label;
use std::fmt::Write as _;

/// Offline evidence sentences shown to the model when its answer is sent back.
const SHOW: usize = 3;
/// Characters of one shown sentence.
const SHOW_CHARS: usize = 400;

/// What the offline policy cites for the question, measured like the model's answers.
pub(super) struct Evidence {
    cited: Vec<Cited>,
    confidence: f64,
    /// (quote, context label) of each citation.
    quotes: Vec<(String, String)>,
    support: Support,
    /// The offline policy's own history lines (what it read and chose).
    history: Vec<String>,
}

/// What the check decided about an answer.
pub(super) enum Verdict {
    /// The answer stands as the model gave it.
    Accept,
    /// Not ready: sent back once with the offline evidence (why).
    Refine(String),
    /// The answer stands but is not ready (why).
    KeepNotReady(String),
    /// The offline evidence answers instead (why).
    Offline(String),
}

impl Nav<'_, '_> {
    /// (quote, context label) of verified spans.
    fn quotes_of(&self, cited: &[Cited]) -> Result<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(cited.len());
        for c in cited {
            let n = self.ex.corpus.node(&c.node, self.ex.now)?;
            let base = n.citations.first().map_or(0, |s| s.start);
            let (s, e) = ((c.start - base) as usize, (c.end - base) as usize);
            let quote = n.text.get(s..e).unwrap_or_default().to_string();
            out.push((quote, context_label(&n)));
        }
        Ok(out)
    }

    /// How well `cited` supports the question.
    pub(super) fn support_of(&self, cited: &[Cited]) -> Result<Support> {
        let quotes = self.quotes_of(cited)?;
        Ok(Support::measure(&self.ex.corpus, &self.asked, &quotes))
    }

    /// The offline evidence, selected once per query aside from the model's exploration
    /// ([`Explorer::aside`]: its reads are counted in this query's tokens and examined
    /// nodes).
    fn evidence(&mut self) -> Result<&Evidence> {
        if self.evidence.is_none() {
            let question = self.question;
            let ex = &mut self.ex;
            let (selected, history) =
                crate::navigate::off_executor(|| ex.aside(|ex| select(ex, question)));
            let (cited, confidence) = selected?;
            let quotes = self.quotes_of(&cited)?;
            let support = Support::measure(&self.ex.corpus, &self.asked, &quotes);
            self.ex.step(
                "check",
                format!(
                    "offline evidence: {} citation(s), confidence {confidence:.2}, {:.0} % of the question's term weight{}",
                    cited.len(),
                    support.share * 100.0,
                    support
                        .kind
                        .map(|k| format!(
                            ", {} {k}",
                            if support.gives_kind { "gives" } else { "lacks" }
                        ))
                        .unwrap_or_default()
                ),
            );
            self.evidence = Some(Evidence {
                cited,
                confidence,
                quotes,
                support,
                history,
            });
        }
        Ok(self.evidence.as_ref().expect("just set"))
    }

    /// Holds a verified answer against the question and the offline evidence. `last`: no
    /// turn is left to send it back.
    pub(super) fn check(&mut self, cited: &[Cited], last: bool) -> Result<Verdict> {
        let mine = self.support_of(cited)?;
        let can_refine = !last && self.checks_sent_back == 0;
        let ev = self.evidence()?;
        let agrees = cited.iter().any(|c| ev.cited.iter().any(|o| o.overlaps(c)));
        let offline_holds = !ev.cited.is_empty() && ev.support.unsupported().is_none();
        let beaten = mine.weaker_than(&ev.support);
        let detail = format!(
            "answer: {:.0} % of the question's term weight{}{}",
            mine.share * 100.0,
            mine.kind
                .map(|k| format!(", {} {k}", if mine.gives_kind { "gives" } else { "lacks" }))
                .unwrap_or_default(),
            if agrees {
                "; cites what the offline policy cites"
            } else {
                ""
            }
        );
        let verdict = if let Some(why) = mine.unsupported() {
            let why = format!("the answer is not supported by the evidence: {why}");
            if !offline_holds {
                Verdict::KeepNotReady(format!("{why} (nor is the offline evidence)"))
            } else if can_refine {
                Verdict::Refine(why)
            } else {
                Verdict::Offline(why)
            }
        } else if agrees || !offline_holds {
            Verdict::Accept
        } else if let Some((strong, why)) = beaten {
            if can_refine {
                Verdict::Refine(why)
            } else if strong {
                Verdict::Offline(why)
            } else {
                Verdict::KeepNotReady(why)
            }
        } else {
            Verdict::Accept
        };
        let outcome = match &verdict {
            Verdict::Accept => "accepted".to_string(),
            Verdict::Refine(why) => format!("sent back: {why}"),
            Verdict::KeepNotReady(why) => format!("stands, not ready: {why}"),
            Verdict::Offline(why) => format!("replaced by the offline answer: {why}"),
        };
        self.ex.step("check", format!("{detail}: {outcome}"));
        Ok(verdict)
    }

    /// Sends an answer that failed the check back, with the offline evidence shown and put
    /// at the top of the working set.
    pub(super) fn send_back(&mut self, why: &str) -> Result<()> {
        self.checks_sent_back += 1;
        self.refinements += 1;
        self.ex.history.push(format!(
            "refinement {}: not ready, the evidence check failed ({why}): {}",
            self.refinements, self.hypothesis
        ));
        let shown: Vec<(Cited, (String, String))> = {
            let ev = self.evidence()?;
            ev.cited
                .iter()
                .copied()
                .zip(ev.quotes.iter().cloned())
                .take(SHOW)
                .collect()
        };
        let mut obs = format!(
            "Your answer was checked against the question and not accepted: {why}. \
             Keyword retrieval cites this evidence (its nodes are now at the top of the \
             working set):\n"
        );
        let mut top = Vec::new();
        for (c, (quote, label)) in &shown {
            let h = self.handle(c.node);
            self.read.insert(c.node);
            if !top.iter().any(|(id, _)| id == &c.node) {
                top.push((c.node, f32::MAX));
            }
            let _ = writeln!(
                obs,
                "{h} [full] {label}: \"{}\"",
                clip_to(quote, SHOW_CHARS)
            );
        }
        obs.push_str(
            "If one of these answers the question, finish quoting it; otherwise find better \
             evidence, then finish again.",
        );
        let rest: Vec<(crate::node::NodeId, f32)> = self
            .ex
            .working
            .iter()
            .filter(|(id, _)| !top.iter().any(|(t, _)| t == id))
            .copied()
            .collect();
        top.extend(rest);
        self.ex.working = top;
        self.observation = obs;
        self.account(false, "the answer failed the evidence check");
        Ok(())
    }

    /// The offline evidence answers instead of the model (its selection is already made).
    pub(super) fn answer_offline(mut self, why: String) -> Result<QueryResult> {
        let Some(ev) = self.evidence.take() else {
            return self.fall_back(why);
        };
        self.ex
            .step("fallback", format!("{why}; the offline policy answers"));
        self.ex
            .history
            .push(format!("{why}; answered by the offline policy"));
        self.ex.history.extend(ev.history);
        crate::model::usage::note(crate::model::usage::Outcome::Fallback);
        self.ex.finish(ev.cited, ev.confidence)
    }
}
