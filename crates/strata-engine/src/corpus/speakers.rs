//! The speakers a question names. A turn's label ("Industrial Designer (round 6): ") is
//! indexed with its text so that a question naming a speaker can reach their turns — but
//! a turn whose label is all it shares with the question is not evidence: ranked by
//! words, every "Huh." of the Industrial Designer matched "What did Industrial Designer
//! say about the customers' taste?" better than the turn about taste did. So a search
//! that ranks turns drops the words that name speakers, and the speaker the question asks
//! about decides which of the turns that hold its other words come first.

use super::{Corpus, Question, Trees};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Words after which a named speaker is the one spoken about, not the one speaking
/// ("who disagreed *with* Okafor"): English function words, not tuned to any text.
pub(crate) const OBJECT_MARKERS: &[&str] = &[
    "with", "to", "against", "from", "than", "about", "for", "at", "toward", "towards",
];

/// The speakers a question names.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Named {
    /// Named as the one speaking ("what did Caroline say", "the Marketing's opinion").
    pub(crate) subjects: BTreeSet<String>,
    /// The question's analysed terms that name them, written with a capital (dropped
    /// from a turn search).
    pub(crate) terms: HashSet<String>,
    /// The subjects' analysed name terms.
    pub(crate) subject_terms: HashSet<String>,
    /// The objects' analysed name terms.
    pub(crate) object_terms: HashSet<String>,
    /// Each subject's name terms without what a transcript adds in brackets (a riding, a
    /// portfolio), as [`Named::opens`] compares them.
    pub(crate) subject_names: Vec<BTreeSet<String>>,
}

impl Named {
    /// Whether `sentence` opens with the name of a speaker named as the one speaking, as
    /// its subject — what minutes write in someone else's turn ("Okafor proposes capping
    /// the budget …"): its leading capitalised words begin with a word of that speaker's
    /// name and hold every word the question names them by ("Okafor proposes …", "Navdeep
    /// Bains said …", "Okafor's plan …"), and are not a vocative ("Okafor, you …") or the
    /// whole sentence ("Thank you, Okafor."). Word order and capitals only: no list of
    /// verbs.
    pub(crate) fn opens(&self, corpus: &Corpus<'_>, sentence: &str) -> bool {
        if self.subjects.is_empty() || self.subject_terms.is_empty() {
            return false;
        }
        let text = sentence.trim_start_matches(|c: char| !c.is_alphanumeric());
        let mut lead: Vec<&str> = Vec::new();
        for w in text.split_whitespace() {
            if !w.chars().next().is_some_and(char::is_uppercase) {
                break;
            }
            lead.push(w);
            if w.ends_with([',', ':', ';', '!', '?']) {
                break;
            }
        }
        let (Some(first), Some(last)) = (lead.first(), lead.last()) else {
            return false;
        };
        if last.ends_with([',', '!', '?']) || lead.len() == text.split_whitespace().count() {
            return false;
        }
        let first: BTreeSet<String> = corpus.analyze(first).into_iter().collect();
        let held: BTreeSet<String> = corpus.analyze(&lead.join(" ")).into_iter().collect();
        // The name without what a transcript adds in brackets: "Hon. Bernadette Jordan
        // (Minister of Fisheries, Oceans and the Canadian Coast Guard)" is not reported by
        // "Canadian seniors are …".
        !first.is_empty()
            && self.subject_names.iter().any(|name| {
                // Every word the question names them by that their name holds: a role
                // name's single word is a common one ("Interface concept." is no report
                // of what the User Interface did).
                let naming: Vec<&String> = name
                    .iter()
                    .filter(|t| self.subject_terms.contains(*t))
                    .collect();
                first.is_subset(name)
                    && !naming.is_empty()
                    && naming.iter().all(|t| held.contains(*t))
            })
    }

    /// Whether some sentence of `text` [`opens`](Self::opens) with a named speaker's name.
    pub(crate) fn reported_in(&self, corpus: &Corpus<'_>, text: &str) -> bool {
        !self.subjects.is_empty()
            && crate::text::sentences(text)
                .iter()
                .any(|s| self.opens(corpus, text[s.start..s.end].trim()))
    }
}

/// The speakers of `trees` that `question` names. A speaker's name is its analysed terms
/// (stop words dropped, stemmed: "Hon. Navdeep Bains" → hon, navdeep, bain); a word the
/// question writes with a capital (not its first) names when its term is one that at
/// most half of the scope's speakers hold (a title every minister holds names
/// no one; "grad" among five grads and two professors names the grads). A question
/// word names the speakers holding its term; of those, a speaker whose name shares more
/// of the question's naming terms than another's wins ("Grad F" over "Grad E" when "f"
/// is a term). A name right after a word such as "with" or "about" is spoken about.
pub(crate) fn named(corpus: &Corpus<'_>, question: &Question, trees: &Trees) -> Named {
    let mut names: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for p in &trees.plans {
        for s in &p.sources {
            if let Some(sp) = &s.speaker
                && !names.contains_key(sp.as_str())
            {
                names.insert(sp, corpus.analyze(sp).into_iter().collect());
            }
        }
    }
    let mut out = Named::default();
    if names.is_empty() {
        return out;
    }
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for terms in names.values() {
        for t in terms {
            *held.entry(t).or_default() += 1;
        }
    }
    let most = (names.len() / 2).max(1);
    let whole: HashSet<String> = names.keys().map(|n| n.to_lowercase()).collect();
    // The question's words in order. A word written with a capital (not the question's
    // first) names; role names are common words ("the Industrial Designer" names a
    // speaker, "functional design" does not). A word that is a whole name ("what did
    // chen propose") names too, but stays in the search: in lower case it may as well be
    // the common word ("their marketing strategy").
    let words: Vec<(String, bool)> = question
        .text()
        .split(|c: char| !c.is_alphanumeric() && c != '\'' && c != '-')
        .filter(|w| !w.is_empty())
        .enumerate()
        .map(|(i, w)| {
            let capital = i > 0 && w.chars().next().is_some_and(char::is_uppercase);
            let w = w
                .trim_end_matches("'s")
                .trim_end_matches('\'')
                .to_lowercase();
            (w, capital)
        })
        .collect();
    // term → (spoken about, written with a capital)
    let mut naming: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    let mut marker = false;
    for (w, capital) in &words {
        let terms = corpus.analyze(w);
        let names_one = (*capital
            && terms
                .iter()
                .any(|t| held.get(t.as_str()).is_some_and(|&n| n <= most)))
            || whole.contains(w);
        if names_one {
            for t in terms {
                if held.get(t.as_str()).is_some_and(|&n| n <= most) || whole.contains(w) {
                    // A term named twice counts as the speaker if once it is, and as
                    // written with a capital if once it is.
                    let e = naming.entry(t).or_insert((marker, *capital));
                    e.0 &= marker;
                    e.1 |= *capital;
                }
            }
            // "the Project Manager": the marker before a name's first word covers it all.
            continue;
        }
        // Stop words ("the") keep what came before them.
        if OBJECT_MARKERS.contains(&w.as_str()) {
            marker = true;
        } else if !terms.is_empty() {
            marker = false;
        }
    }
    // A speaker's whole name written as the transcript writes it ("PhD G", "Kirsty
    // Williams AM") names that speaker and no other: the words it shares with other names
    // ("PhD") do not name them, and a word the analyser drops ("G") still tells them apart.
    let whole_named: Vec<(&str, bool)> = names
        .keys()
        .filter(|sp| sp.split_whitespace().count() > 1)
        .filter_map(|sp| written(question.text(), sp).map(|object| (*sp, object)))
        .collect();
    if naming.is_empty() && whole_named.is_empty() {
        return out;
    }
    let whole_terms: BTreeSet<&String> = whole_named
        .iter()
        .flat_map(|(sp, _)| names[*sp].iter())
        .collect();
    let is_whole = |sp: &str| whole_named.iter().any(|(w, _)| *w == sp);
    let asked: HashSet<String> = if whole_named.is_empty() {
        HashSet::new()
    } else {
        corpus.analyze(question.text()).into_iter().collect()
    };
    let matched: Vec<(&str, BTreeSet<&String>)> = names
        .iter()
        .map(|(sp, terms)| {
            // A whole name's words name its speaker wherever the question holds them.
            let m = if is_whole(sp) {
                terms.iter().filter(|t| asked.contains(*t)).collect()
            } else {
                terms.iter().filter(|t| naming.contains_key(*t)).collect()
            };
            (*sp, m)
        })
        .filter(|(sp, m): &(&str, BTreeSet<&String>)| {
            // Named only through the words of another speaker's whole name: not named.
            is_whole(sp) || (!m.is_empty() && !m.iter().all(|t| whole_terms.contains(*t)))
        })
        .collect();
    for (sp, m) in &matched {
        let beaten = !is_whole(sp)
            && matched
                .iter()
                .any(|(_, o)| o.len() > m.len() && o.is_superset(m));
        if beaten {
            continue;
        }
        let object = match whole_named.iter().find(|(w, _)| w == sp) {
            Some(&(_, object)) => object,
            None => m.iter().all(|t| naming[*t].0),
        };
        for t in m {
            if is_whole(sp) || naming[*t].1 {
                out.terms.insert((*t).clone());
            }
            if object {
                out.object_terms.insert((*t).clone());
            } else {
                out.subject_terms.insert((*t).clone());
            }
        }
        if !object && out.subjects.insert(sp.to_string()) {
            let bare = sp.split('(').next().unwrap_or(sp);
            out.subject_names
                .push(corpus.analyze(bare).into_iter().collect());
        }
    }
    out
}

/// Whether `text` writes the name `name` as a whole (same letters and case, not inside a
/// longer word; "PhD G's" counts, "PhD Gr" does not): `Some(spoken_about)` when it does,
/// `spoken_about` when the word before the name (past "the") is one of
/// [`OBJECT_MARKERS`], at its first place.
fn written(text: &str, name: &str) -> Option<bool> {
    let mut from = 0;
    while let Some(i) = text[from..].find(name).map(|i| i + from) {
        let end = i + name.len();
        let before = text[..i].chars().next_back();
        let after = text[end..].chars().next();
        let bounded = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric());
        if bounded(before) && bounded(after) {
            let mut words = text[..i]
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .rev()
                .map(str::to_lowercase);
            let mut prev = words.next();
            if prev.as_deref() == Some("the") {
                prev = words.next();
            }
            return Some(prev.is_some_and(|w| OBJECT_MARKERS.contains(&w.as_str())));
        }
        from = end;
    }
    None
}
