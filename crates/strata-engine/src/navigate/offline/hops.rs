//! Answers in more than one step: a second hop through a bridge, and "in the round where".

use super::{Cues, Quote, Selection, answer, candidates};
use crate::corpus::Question;
use crate::error::Result;
use crate::navigate::{Cited, Explorer};
use crate::node::NodeId;
use crate::text;
use std::collections::{BTreeSet, HashMap};

/// Names in `quote` the question does not contain, rarest first: what a second hop looks
/// for ("… baked by a chef called Tircaltir." → "Tircaltir").
fn bridges(ex: &Explorer<'_>, quote: &str, question_terms: &[String]) -> Vec<(String, f64)> {
    let index = ex.corpus;
    let scopes = ex.trees.scopes();
    let mut out: Vec<(String, f64)> = Vec::new();
    for e in text::facts(quote).entities {
        let ts = index.analyze(&e);
        if ts.is_empty() || ts.iter().all(|t| question_terms.contains(t)) {
            continue;
        }
        let idf = ts.iter().map(|t| index.idf(t, &scopes)).fold(0.0, f64::max);
        if !out.iter().any(|(x, _)| *x == e) {
            out.push((e, idf));
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// Multi-hop: the first answer names something (a bridge) and leaves question terms
/// uncovered; ask for the bridge together with the uncovered terms and add the best
/// sentence that contains the bridge.
pub(super) fn second_hop(
    ex: &mut Explorer<'_>,
    question: &Question,
    cues: &Cues,
    sel: &mut Selection,
) -> Result<()> {
    let terms: Vec<String> = sel.idf.keys().cloned().collect();
    let uncovered: Vec<String> = terms
        .iter()
        .filter(|t| !sel.covered.contains(*t))
        .cloned()
        .collect();
    let Some(Quote { text: quote, .. }) = sel.cited.first() else {
        return Ok(());
    };
    // The bridge comes from the sentence that matched (a cited pair's other sentence may
    // name unrelated things).
    let index = ex.corpus;
    let matched = text::sentences(quote)
        .into_iter()
        .rev()
        .map(|s| &quote[s.start..s.end])
        .max_by_key(|s| {
            let got = index.analyze(s);
            terms.iter().filter(|t| got.contains(t)).count()
        })
        .unwrap_or(quote);
    let Some((bridge, _)) = bridges(ex, matched, &terms).into_iter().next() else {
        return Ok(());
    };
    // The uncovered words as the question has them (the index's terms are stems).
    let words: Vec<&str> = question
        .text()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| {
            let a = index.analyze(w);
            !a.is_empty() && a.iter().all(|t| uncovered.contains(t))
        })
        .collect();
    let hop_q = format!("{bridge} {}", words.join(" "));
    ex.history
        .push(format!("second hop through {bridge:?}: {hop_q:?}"));
    let bridge_terms = index.analyze(&bridge);
    let hop_cues = Cues {
        subjects: cues.subjects.clone(),
        objects: cues.objects.clone(),
        named: cues.named.clone(),
        ..Default::default()
    };
    let hop_q = ex.question(&hop_q);
    let Some(hop) = answer(ex, &hop_q, &hop_cues, false)? else {
        return Ok(());
    };
    // The best hop sentence that names the bridge and is not cited already.
    let found = hop.cited.iter().find_map(|c| {
        let fresh = !sel.cited.iter().any(|m| m.at.overlaps(&c.at));
        let got = index.analyze(&c.text);
        (fresh && bridge_terms.iter().all(|t| got.contains(t))).then(|| (c.clone(), got))
    });
    let Some((best, got)) = found.filter(|(_, got)| uncovered.iter().any(|t| got.contains(t)))
    else {
        ex.history
            .push("second hop found nothing that links the bridge to the question".into());
        return Ok(());
    };
    let max = ex.cfg.max_citations.max(2);
    if sel.cited.len() >= max {
        sel.cited.truncate(max - 1);
        sel.rounds.truncate(max - 1);
    }
    sel.cited.push(best);
    sel.rounds.push(None);
    sel.covered
        .extend(got.into_iter().filter(|t| sel.idf.contains_key(t)));
    Ok(())
}

/// "What did X propose in the round where Y moved …": find the anchor turn, then answer the
/// main question from X's turns of that round. None when the anchor or the speaker's turn
/// cannot be found (the caller answers the whole question instead).
pub(super) fn same_round(
    ex: &mut Explorer<'_>,
    main: &str,
    anchor: &str,
) -> Result<Option<Selection>> {
    let main = ex.question(main);
    let main_cues = Cues::of(ex, &main);
    if main_cues.subjects.is_empty() {
        return Ok(None);
    }
    let anchor = ex.question(anchor);
    let anchor_cues = Cues::of(ex, &anchor);
    let Some(a) = answer(ex, &anchor, &anchor_cues, true)? else {
        return Ok(None);
    };
    let Some(Some(round)) = a.rounds.first().copied() else {
        return Ok(None);
    };
    // The main speaker's turns in that round.
    let index = ex.corpus;
    let mut turns: Vec<NodeId> = Vec::new();
    for p in &ex.trees.plans {
        for c in &p.chunks {
            let s = &p.sources[c.source];
            if s.round == Some(round)
                && s.speaker.as_ref().is_some_and(|sp| {
                    index
                        .analyze(sp)
                        .iter()
                        .any(|t| main_cues.subjects.contains(t))
                })
            {
                turns.push(c.full);
            }
        }
    }
    if turns.is_empty() {
        ex.history.push(format!(
            "round {round} has no turn by the speaker the question names"
        ));
        return Ok(None);
    }
    ex.history.push(format!(
        "the anchor is in round {round}: reading {} turn(s) of the named speaker",
        turns.len()
    ));
    ex.working = turns.iter().map(|id| (*id, 1.0)).collect();
    let chunks = ex.peek(&turns)?;
    let idf = main.weights().clone();
    let rank: HashMap<NodeId, f64> = turns.iter().map(|id| (*id, 1.0)).collect();
    let mut cands = candidates(ex, &chunks, &idf, &rank, &main_cues);
    cands.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.start.cmp(&b.start)));
    // No sentence shares a word with the main question: the turn's first sentence stands
    // for it (the question asked what this speaker said then).
    let (main_pick, mut covered): (Quote, BTreeSet<String>) = match cands.first() {
        Some(c) => (c.to_quote(), c.tf.keys().cloned().collect()),
        None => {
            let n = &chunks[0];
            let Some(s) = text::sentences(&n.text).into_iter().next() else {
                return Ok(None);
            };
            let quote = Quote {
                at: Cited::in_chunk(n, s.start, s.end),
                text: n.text[s.start..s.end].to_string(),
            };
            (quote, BTreeSet::new())
        }
    };
    covered.extend(
        main_cues
            .subjects
            .iter()
            .filter(|t| idf.contains_key(*t))
            .cloned(),
    );
    let mut cited = vec![main_pick];
    let mut rounds = vec![Some(round)];
    if let Some(first) = a.cited.first() {
        cited.push(first.clone());
        rounds.push(Some(round));
    }
    Ok(Some(Selection {
        cited,
        covered,
        idf,
        rounds,
        subject_cited: None,
        subject_evidence: 1.0,
    }))
}
