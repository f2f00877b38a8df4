//! What a question asks for, read from its grammar alone: a set of answers or one. The
//! words here are closed-class words of English grammar — quantifying determiners and
//! pronouns ("every", "all", "each"), ordinals ("first", "last"), a few prepositions of
//! duration ("during", "throughout") — plus the imperative "list"/"enumerate"; none names
//! a topic or a dialogue act, and none was chosen for an evaluation item. They are part of
//! the navigator's identity: [`VERSION`] changes whenever they do.

use unicode_segmentation::UnicodeSegmentation;

/// The version of the question grammar below (the word lists and the rule).
pub const VERSION: &str = "question-grammar-3";

/// Words that make a question ask for a set of answers rather than one (quantifiers over
/// the answers, or an imperative to list them).
const SET_WORDS: &[&str] = &[
    "list",
    "enumerate",
    "every",
    "all",
    "each",
    "everyone",
    "everybody",
];
/// Prepositions of duration: "who … during the debate" asks for everyone over its span.
const SPAN_WORDS: &[&str] = &["during", "throughout", "ever", "whenever"];
/// Ordinals and their adverbs: one item ("who first …", "the last …"), not a set.
const ORDINAL: &[&str] = &[
    "first",
    "earliest",
    "initially",
    "originally",
    "last",
    "latest",
    "finally",
];

/// Whether a question asks for a set: it quantifies over its answers ("list every
/// deadline", "which speakers …", "what proposals …"), or asks "who" without an ordinal
/// ("who objected to …": as many as did). How many answers a set question gets is not
/// decided here but by the scores of its candidates (`navigate::offline`): a "who"
/// question with one clear answer gets one. "How many" asks for a figure the text states.
pub fn asks_for_set(question: &str) -> bool {
    let written: Vec<&str> = question.unicode_words().filter(|w| !w.is_empty()).collect();
    let ws: Vec<String> = written.iter().map(|w| w.to_lowercase()).collect();
    let has = |w: &str| ws.iter().any(|x| x == w);
    let outright = ws.iter().enumerate().any(|(i, w)| {
        SET_WORDS.contains(&w.as_str()) && !(w == "all" && i > 0 && ws[i - 1] == "at")
    });
    if outright {
        return true;
    }
    if ORDINAL.iter().any(|o| has(o)) {
        return false;
    }
    // A plural noun right after "which"/"what" ("which speakers", "what fare proposals"):
    // a content word ending in a plural "s" — not a name written with a capital inside the
    // question ("What did Bains say …", "… Williams …": who is asked about, not a set).
    let name = |k: usize| {
        let w = written[k];
        k > 0
            && w.chars().next().is_some_and(char::is_uppercase)
            && w.chars().any(char::is_lowercase)
    };
    let plural = |k: usize| {
        let w = ws[k].as_str();
        w.len() >= 4
            && w.ends_with('s')
            && !w.ends_with("ss")
            && !w.ends_with("us")
            && !w.ends_with("'s")
            && !super::is_stopword(w)
            && !name(k)
    };
    let plural_after_wh = ws
        .iter()
        .enumerate()
        .any(|(i, w)| (w == "which" || w == "what") && (i + 1..ws.len()).take(2).any(&plural));
    let who_over_time = has("who") && SPAN_WORDS.iter().any(|w| has(w));
    let who = ws.first().is_some_and(|w| w == "who");
    plural_after_wh || who_over_time || who
}

/// The plural nouns a set question asks for the members of: each content word ending in
/// a plural "s" within two words after "which"/"what" ("What sports …", "Which cities …"),
/// lower case, as [`asks_for_set`] reads them (a name written with a capital is none);
/// when "of" follows it ("What types of sports …"), the word after "of" instead.
pub fn set_heads(question: &str) -> Vec<String> {
    let written: Vec<&str> = question.unicode_words().filter(|w| !w.is_empty()).collect();
    let ws: Vec<String> = written.iter().map(|w| w.to_lowercase()).collect();
    let mut out = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        if w != "which" && w != "what" {
            continue;
        }
        for k in (i + 1..ws.len()).take(2) {
            let x = ws[k].as_str();
            let name = k > 0
                && written[k].chars().next().is_some_and(char::is_uppercase)
                && written[k].chars().any(char::is_lowercase);
            let plural = x.len() >= 4
                && x.ends_with('s')
                && !x.ends_with("ss")
                && !x.ends_with("us")
                && !x.ends_with("'s")
                && !super::is_stopword(x)
                && !name;
            if !plural {
                continue;
            }
            // "what types of sports", "which kinds of food": the kind is the noun after
            // "of" (the first word that is no stop word).
            let head = match ws.get(k + 1).map(String::as_str) {
                Some("of") => ws[k + 2..]
                    .iter()
                    .take(2)
                    .find(|w| !super::is_stopword(w))
                    .map(String::as_str)
                    .unwrap_or(x),
                _ => x,
            };
            if !out.iter().any(|o| o == head) {
                out.push(head.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{asks_for_set, set_heads};

    #[test]
    fn a_set_question_names_the_kind_it_asks_for() {
        assert_eq!(set_heads("What sports does Kevin like?"), ["sports"]);
        assert_eq!(set_heads("Which cities did they visit?"), ["cities"]);
        assert_eq!(set_heads("What types of sports did Kevin do?"), ["sports"]);
        assert_eq!(set_heads("Which kinds of the food did she cook?"), ["food"]);
        assert!(set_heads("What did Bains say about loans?").is_empty());
        assert!(set_heads("What is the plan?").is_empty());
    }

    #[test]
    fn set_questions_are_told_from_single_ones() {
        for q in [
            "Who changed position during the debate?",
            "List every deadline the committee agreed to",
            "Which speakers objected to the harbour levy proposal?",
            "What deadlines did the members commit to?",
            "Which fare proposals did the members make?",
            "Who objected to the levy?",
            "WHICH SPEAKERS OBJECTED TO THE LEVY?",
        ] {
            assert!(asks_for_set(q), "{q}");
        }
        for q in [
            "What did chen propose about fares?",
            "Who first disagreed with the tunnel option?",
            "Which speaker first proposed a referendum?",
            "What is the passphrase of the Velmora guild?",
            "In which year was the bridge built?",
            "What does the 2029 audit say?",
            "Did the council agree at all?",
            "How many daily riders did the 2027 study forecast?",
            "What was the status of the bus?",
            "What did Bains say about business loans?",
            "What did Williams propose for the levy?",
        ] {
            assert!(!asks_for_set(q), "{q}");
        }
    }
}
