//! Set answers with a model: the offline policy gathers the candidates across the whole
//! scope (one per chunk, see `offline::set_candidates`), the helper model judges them in
//! bounded batches (`partition_map`: one sub-call per batch, concurrent under the shared
//! limiter, deciding which passages answer the question on their own), and the answers of
//! every batch are cited together. The model only picks among verified sentences, so the
//! answer is still source text with byte-exact citations. A batch whose call fails or
//! whose reply is invalid keeps the offline decision for its passages; when every call
//! fails, the offline policy answers (a counted fallback).

use super::Nav;
use super::reply::parse_json;
use crate::error::Result;
use crate::model::usage::{self, Outcome};
use crate::model::{ChatModel, prompts};
use crate::navigate::QueryResult;
use crate::navigate::offline::{SetItem, set_candidates};
use serde_json::Value;

/// Passages judged by one sub-call: small enough for any model's context (a few hundred
/// tokens of quotes), large enough that a set over a long debate takes a few calls.
const SET_BATCH: usize = 8;

/// The numbers (1-based) a `set_support` reply names, checked against the batch size.
fn parse_support(text: &str, n: usize) -> std::result::Result<Vec<usize>, String> {
    let v = parse_json(text)?;
    let list = v
        .get("support")
        .and_then(Value::as_array)
        .ok_or("the reply has no `support` list")?;
    let mut out = Vec::new();
    for x in list {
        match x.as_u64() {
            Some(k) if (1..=n as u64).contains(&k) => out.push(k as usize - 1),
            _ => return Err(format!("`support` names {x}, not a passage number 1–{n}")),
        }
    }
    Ok(out)
}

impl Nav<'_, '_> {
    /// Answers a set question by fanning the candidates out to `helper` in batches.
    pub(super) async fn answer_set(mut self, helper: &dyn ChatModel) -> Result<QueryResult> {
        let cap = self.ex.cfg.max_set_citations.max(1);
        let question = self.question;
        let ex = &mut self.ex;
        let Some(set) = crate::navigate::off_executor(|| set_candidates(ex, question))? else {
            return self.fall_back("a set question: no passage to judge".into());
        };
        let offered: Vec<SetItem> = set.offered(2 * cap);
        let offline = set.supported(usize::MAX);
        let left = self.ex.cfg.max_sub_calls.saturating_sub(self.ex.sub_calls) as usize;
        let batches: Vec<&[SetItem]> = offered.chunks(SET_BATCH).take(left).collect();
        if batches.is_empty() {
            return self.fall_back("a set question: no helper calls left".into());
        }
        let question = self.question;
        let calls = batches.iter().map(|b| {
            let passages: Vec<(String, String)> = b
                .iter()
                .map(|i| (i.label.clone(), i.quote.clone()))
                .collect();
            helper.chat(prompts::set_support(question, &passages))
        });
        // Concurrent; the shared limiter caps how many are in flight.
        let replies = futures::future::join_all(calls).await;
        self.ex.sub_calls += batches.len() as u32;
        let judged = batches.iter().map(|b| b.len()).sum::<usize>();
        let (mut failed, mut invalid) = (0usize, 0usize);
        let mut chosen: Vec<usize> = Vec::new();
        let mut first_error = String::new();
        for (k, (batch, reply)) in batches.iter().zip(replies).enumerate() {
            let base = k * SET_BATCH;
            let range = base..base + batch.len();
            let parsed = match reply {
                Ok(r) => parse_support(&r.text, batch.len()).inspect_err(|_| {
                    invalid += 1;
                    usage::note(Outcome::Invalid);
                }),
                Err(e) => {
                    failed += 1;
                    Err(e.to_string())
                }
            };
            match parsed {
                Ok(picked) => chosen.extend(picked.into_iter().map(|i| base + i)),
                Err(e) => {
                    if first_error.is_empty() {
                        first_error = e;
                    }
                    // This batch keeps the offline decision.
                    chosen.extend(offline.iter().copied().filter(|i| range.contains(i)));
                }
            }
        }
        if failed == batches.len() {
            return self.fall_back(format!(
                "a set question: every helper call failed ({first_error})"
            ));
        }
        // Candidates no batch reached keep the offline decision.
        chosen.extend(offline.iter().copied().filter(|&i| i >= judged));
        chosen.sort_unstable();
        chosen.dedup();
        let helper_found = chosen.len();
        if chosen.is_empty() {
            self.ex.history.push(
                "a set question: the helper found no passage that answers it; the offline decision stands"
                    .into(),
            );
            chosen = offline.clone();
        }
        chosen.truncate(cap);
        self.ex.step(
            "partition_map",
            format!(
                "a set question: {judged} of {} candidate(s) judged in {} batch(es) of at most {SET_BATCH}: {helper_found} answer(s){}",
                set.len(),
                batches.len(),
                if failed + invalid > 0 {
                    format!(
                        ", {failed} failed and {invalid} invalid batch(es) kept the offline decision ({first_error})"
                    )
                } else {
                    String::new()
                }
            ),
        );
        self.ex.history.push(format!(
            "a set question: the helper judged {judged} candidate(s); cited {}",
            chosen.len()
        ));
        let (cited, confidence) = set.cite(&chosen);
        self.finish(cited, confidence)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_support;

    #[test]
    fn set_replies_are_validated() {
        assert_eq!(parse_support(r#"{"support": [1, 3]}"#, 3), Ok(vec![0, 2]));
        assert_eq!(parse_support(r#"ok: {"support": []}"#, 3), Ok(vec![]));
        assert!(parse_support(r#"{"support": [4]}"#, 3).is_err());
        assert!(parse_support(r#"{"support": [0]}"#, 3).is_err());
        assert!(parse_support(r#"{"answers": [1]}"#, 3).is_err());
        assert!(parse_support("none", 3).is_err());
    }
}
