//! Sentence scoring: every sentence (and adjacent pair) of the chunks read, as a candidate.

use super::{Cand, Cues};
use crate::corpus::Place;
use crate::navigate::Explorer;
use crate::node::{Node, NodeId, context_label};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Scores every sentence (and adjacent pair) of the read chunks: BM25 over the candidate
/// sentences (so a long sentence does not win by sheer length), plus credit for question
/// terms that name the chunk's speaker, round or document. A sentence sharing no word with
/// the question is no candidate, unless the question's only words name who speaks and the
/// sentence is theirs; nor is one whose only question words name whom the question asks
/// about (a greeting naming them), unless those are the question's only words.
pub(super) fn candidates(
    ex: &Explorer<'_>,
    chunks: &[Node],
    idf: &BTreeMap<String, f64>,
    chunk_rank: &HashMap<NodeId, f64>,
    cues: &Cues,
) -> Vec<Cand> {
    let index = ex.corpus;
    let total: f64 = idf.values().sum::<f64>().max(1e-9);
    // A question that asks only what someone said ("What did Caroline say?", or with a
    // time: "… in June?", the date read as the range) has no word but their name, which their
    // turns hold in their label: each sentence of their turns is a candidate then.
    let only_who = !cues.subjects.is_empty() && idf.keys().all(|t| cues.subjects.contains(t));
    let mut cands = Vec::new();
    for (rank, n) in chunks.iter().enumerate() {
        let base = n.citations[0].start;
        // A speaker spoken about is not credited for being the turn's speaker.
        let ctx: BTreeSet<String> = index
            .analyze(&context_label(n))
            .into_iter()
            .filter(|t| idf.contains_key(t) && !cues.objects.contains(t))
            .collect();
        let round = match ex.place(&n.id) {
            Some(Place::Full(pi, ci)) => {
                let p = &ex.trees.plans[pi];
                p.sources[p.chunks[ci].source].round
            }
            _ => None,
        };
        for s in index.sentences_of(n).iter() {
            let (trimmed_start, trimmed_end) = s.trimmed;
            let len = s.terms.len().max(1);
            let mut tf: BTreeMap<String, u32> = BTreeMap::new();
            for t in &s.terms {
                if idf.contains_key(t) {
                    *tf.entry(t.clone()).or_insert(0) += 1;
                }
            }
            // A sentence holding no question word but the names of whom the question asks
            // about ("Hey Caroline!" in another's turn) says nothing of what it asks —
            // unless the question asks nothing else and the sentence is theirs.
            let names_only = tf.keys().all(|t| cues.subjects.contains(t));
            let theirs = only_who && !ctx.is_empty();
            if names_only && !theirs {
                continue;
            }
            cands.push(Cand {
                node: n.id,
                start: base + trimmed_start as u64,
                end: base + trimmed_end as u64,
                quote: n.text[trimmed_start..trimmed_end].to_string(),
                tf,
                ctx: ctx.clone(),
                len,
                own: 0.0,
                score: 0.0,
                rank,
                round,
            });
        }
    }
    // Two adjacent sentences of one chunk may answer together what neither does alone
    // ("...four essential human freedoms. The first is freedom of speech..."): add each
    // such pair as one candidate span; length normalisation keeps pairs from winning by size.
    let singles = cands.len();
    for i in 1..singles {
        let (a, b) = (&cands[i - 1], &cands[i]);
        if a.node != b.node {
            continue;
        }
        let adds = b.tf.keys().any(|t| !a.tf.contains_key(t));
        let adds_back = a.tf.keys().any(|t| !b.tf.contains_key(t));
        if !(adds && adds_back) {
            continue;
        }
        let mut tf = a.tf.clone();
        for (t, f) in &b.tf {
            *tf.entry(t.clone()).or_insert(0) += f;
        }
        let n = chunks.iter().find(|n| n.id == a.node).expect("own chunk");
        let base = n.citations[0].start;
        let quote = n.text[(a.start - base) as usize..(b.end - base) as usize].to_string();
        cands.push(Cand {
            node: a.node,
            start: a.start,
            end: b.end,
            quote,
            tf,
            ctx: a.ctx.clone(),
            len: a.len + b.len,
            own: 0.0,
            score: 0.0,
            rank: a.rank,
            round: a.round,
        });
    }
    // A question that names a speaker as the speaker asks what that speaker said: their
    // turns get full credit for the name, and other speakers merely mentioning them none.
    let speaker_terms = &cues.subjects;
    let avg = cands.iter().map(|c| c.len).sum::<usize>() as f64 / cands.len().max(1) as f64;
    let (k1, b) = (1.2, 0.75);
    for c in &mut cands {
        let norm = k1 * (1.0 - b + b * c.len as f64 / avg.max(1.0));
        let mut s = 0.0;
        for (t, &f) in &c.tf {
            if speaker_terms.contains(t) && !c.ctx.contains(t) {
                continue;
            }
            s += idf[t] * (f as f64 * (k1 + 1.0)) / (f as f64 + norm);
        }
        for t in c.ctx.iter().filter(|t| !c.tf.contains_key(*t)) {
            s += if speaker_terms.contains(t) { 1.0 } else { 0.5 } * idf[t];
        }
        let chunk = chunk_rank.get(&c.node).copied().unwrap_or(0.0);
        c.own = s / total;
        c.score = 0.7 * c.own + 0.3 * chunk - 0.01 * c.rank as f64;
        // "What did chen …" is about chen's turns: another speaker's sentence is a weaker
        // answer however well its words match.
        if !speaker_terms.is_empty() && !c.ctx.iter().any(|t| speaker_terms.contains(t)) {
            c.score *= 0.5;
        }
    }
    cands
}
