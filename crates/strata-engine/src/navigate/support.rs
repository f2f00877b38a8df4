//! Whether cited text supports a question, measured the same way for any answer: which of
//! the question's terms and names the quotes (and their context labels: speakers, rounds,
//! document names) contain, the weight of those terms, and — when the question asks for a
//! kind of value (a number, a date, an identifier, a person) — whether the quotes give one
//! that the question does not already hold. The LLM policy uses it to hold a model's answer
//! against the offline evidence ([`super::llm`]); it never changes what is cited.

use crate::corpus::{Corpus, Question};
use crate::text;
use std::collections::BTreeSet;
use std::fmt;

/// The kind of value a question asks for, when its wording says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Number,
    Date,
    Identifier,
    Person,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Number => "a number",
            Kind::Date => "a date or time",
            Kind::Identifier => "an identifier",
            Kind::Person => "a person",
        })
    }
}

/// Head nouns that name an identifier ("the access code", "its identifier", "an ID").
/// "<noun> number" / "<noun> no" is one too ("catalogue number", "flight no"), found by
/// its grammar in [`asked_kind`] (a content word before it), not by a list of the nouns.
const ID_HEADS: &[&str] = &["identifier", "identifiers", "id", "ids", "code", "codes"];
/// "what/which <word>" asking for a date or time.
const DATE_AFTER_WH: &[&str] = &[
    "year", "date", "day", "month", "century", "decade", "time", "hour", "season",
];
/// "how <word>" asking for a quantity.
const HOW_QUANTITY: &[&str] = &[
    "many", "much", "old", "far", "tall", "high", "deep", "heavy", "long", "large", "big", "often",
    "wide",
];
/// "what/which <word>" asking for a quantity.
const NUMBER_AFTER_WH: &[&str] = &[
    "percentage",
    "percent",
    "share",
    "proportion",
    "fraction",
    "number",
    "amount",
    "figure",
    "rate",
    "price",
    "cost",
    "sum",
    "total",
    "count",
    "population",
];
const NUMBER_WORDS: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
    "hundred",
    "hundreds",
    "thousand",
    "thousands",
    "million",
    "millions",
    "billion",
    "billions",
    "trillion",
    "dozen",
    "dozens",
    "half",
    "third",
    "quarter",
    "twice",
    "double",
    "triple",
    "percent",
    "none",
];
const TIME_WORDS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "spring",
    "summer",
    "autumn",
    "winter",
    "today",
    "tomorrow",
    "yesterday",
    "tonight",
    "century",
    "centuries",
    "decade",
    "decades",
    "ago",
    "midnight",
    "noon",
    "dawn",
    "dusk",
];

/// Lower-cased words (letters, digits, inner apostrophes and hyphens kept).
fn words(t: &str) -> Vec<String> {
    t.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '-'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// What kind of value `question` asks for, from its wording: an identifier ("catalogue
/// number", "code", "ID"), a date ("when", "what year"), a number ("how many", "what
/// share"), a person ("who"); `None` when it does not say (what, where, why, how...).
pub(crate) fn asked_kind(question: &str) -> Option<Kind> {
    let w = words(question);
    let at = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let wh = |s: &str| s == "what" || s == "which";
    let mut kind = None;
    for i in 0..w.len() {
        let (a, b) = (at(i), at(i + 1));
        // "<noun> number": a compound whose modifier is a content word ("serial number",
        // "catalogue no"), not a quantity ("the number of", "what number", "two numbers").
        let compound_number = (b == "number" || b == "no")
            && !text::is_stopword(a)
            && !wh(a)
            && !NUMBER_WORDS.contains(&a)
            && !a.chars().all(|c| c.is_ascii_digit());
        if ID_HEADS.contains(&a) || compound_number {
            return Some(Kind::Identifier);
        }
        let k = if a == "when"
            || (a == "how" && b == "soon")
            || (wh(a) && DATE_AFTER_WH.contains(&b))
        {
            Some(Kind::Date)
        } else if (a == "how" && HOW_QUANTITY.contains(&b))
            || (wh(a) && NUMBER_AFTER_WH.contains(&b))
        {
            Some(Kind::Number)
        } else if matches!(a, "who" | "whom" | "whose") || (wh(a) && b == "person") {
            Some(Kind::Person)
        } else {
            None
        };
        // The first wh-phrase decides ("when and why", "who ... how many times").
        if kind.is_none() {
            kind = k;
        }
    }
    kind
}

/// Whether `quote` (with its context label) gives a value of `kind` that `question` does
/// not already hold. Numbers and identifiers must be in the quote itself; a date may come
/// from the context (a debate's round, a document's year), a person from the speakers.
pub(crate) fn gives(kind: Kind, quote: &str, context: &str, question: &str) -> bool {
    let asked: BTreeSet<String> = words(question).into_iter().collect();
    let new = |v: &str| {
        let ws = words(v);
        !ws.is_empty() && ws.iter().any(|w| !asked.contains(w))
    };
    let f = text::facts(quote);
    let digits = |t: &str| {
        words(t)
            .into_iter()
            .any(|w| w.chars().any(|c| c.is_ascii_digit()) && !asked.contains(&w))
    };
    let listed = |t: &str, list: &[&str]| {
        words(t)
            .iter()
            .any(|w| list.contains(&w.as_str()) && !asked.contains(w))
    };
    match kind {
        Kind::Number => {
            f.numbers.iter().chain(&f.dates).any(|v| new(v)) || listed(quote, NUMBER_WORDS)
        }
        Kind::Date => {
            f.dates.iter().chain(&f.numbers).any(|v| new(v))
                || listed(quote, TIME_WORDS)
                || listed(quote, NUMBER_WORDS)
                || digits(context)
        }
        Kind::Identifier => {
            digits(quote)
                || quote
                    .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '/'))
                    .any(|t| {
                        let letters: Vec<char> = t.chars().filter(|c| c.is_alphabetic()).collect();
                        letters.len() >= 2
                            && letters.iter().all(|c| c.is_uppercase())
                            && !asked.contains(&t.to_lowercase())
                    })
        }
        Kind::Person => {
            f.entities.iter().any(|v| new(v))
                || quote
                    .split_whitespace()
                    .next()
                    .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
                    .is_some_and(|w| {
                        w.chars().next().is_some_and(char::is_uppercase)
                            && !text::is_stopword(&w.to_lowercase())
                            && new(w)
                    })
                || words(context).iter().any(|w| {
                    w != "round" && !w.chars().all(|c| c.is_ascii_digit()) && !asked.contains(w)
                })
        }
    }
}

/// What an answer's citations share with the question.
#[derive(Clone, Debug, Default)]
pub(crate) struct Support {
    /// Question terms found in the quotes or their context labels.
    pub(crate) covered: BTreeSet<String>,
    /// Their share of the question's term weight (idf, names weighing more).
    pub(crate) share: f64,
    /// The question's names (terms) that are covered.
    pub(crate) names_covered: BTreeSet<String>,
    /// The kind of value asked for, and whether the quotes give one.
    pub(crate) kind: Option<Kind>,
    pub(crate) gives_kind: bool,
}

impl Support {
    /// Measures `cited`, a list of (quote, context label), against `question`.
    pub(crate) fn measure(
        corpus: &Corpus<'_>,
        question: &Question,
        cited: &[(String, String)],
    ) -> Support {
        let terms: BTreeSet<&String> = question.terms().iter().collect();
        let mut covered = BTreeSet::new();
        for (quote, context) in cited {
            for t in corpus.analyze(&format!("{quote}\n{context}")) {
                if terms.contains(&t) {
                    covered.insert(t);
                }
            }
        }
        let weights = question.weights();
        let total: f64 = weights.values().sum::<f64>();
        let share = if total > 0.0 && !covered.is_empty() {
            covered.iter().filter_map(|t| weights.get(t)).sum::<f64>() / total
        } else {
            0.0
        };
        let names = question.names();
        let names_covered = covered
            .iter()
            .filter(|t| names.contains(*t))
            .cloned()
            .collect();
        let kind = asked_kind(question.text());
        let gives_kind =
            kind.is_some_and(|k| cited.iter().any(|(q, c)| gives(k, q, c, question.text())));
        Support {
            covered,
            share,
            names_covered,
            kind,
            gives_kind,
        }
    }

    /// Why this evidence supports nothing the question asks, if it does not: it shares no
    /// name and no term with the question, or it lacks the kind of value asked for.
    pub(crate) fn unsupported(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.covered.is_empty() {
            why.push("it shares no name or key term with the question".to_string());
        }
        if let Some(k) = self.kind
            && !self.gives_kind
        {
            why.push(format!("the question asks for {k} and it gives none"));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// Why `other` (the offline evidence) supports the question clearly better than this,
    /// if it does: `strong` when it names what this does not (a question name, the kind of
    /// value asked for), else only by a wide margin of term coverage.
    pub(crate) fn weaker_than(&self, other: &Support) -> Option<(bool, String)> {
        if let Some(k) = self.kind
            && other.gives_kind
            && !self.gives_kind
        {
            return Some((
                true,
                format!("the offline evidence gives {k} and the answer does not"),
            ));
        }
        let missing: Vec<&String> = other
            .names_covered
            .difference(&self.names_covered)
            .collect();
        if !missing.is_empty() && self.names_covered.is_subset(&other.names_covered) {
            return Some((
                true,
                format!(
                    "the offline evidence contains the question's name(s) {} and the answer does not",
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if other.share >= self.share + WIDE_MARGIN {
            return Some((
                false,
                format!(
                    "the offline evidence covers {:.0} % of the question's term weight, the answer {:.0} %",
                    other.share * 100.0,
                    self.share * 100.0
                ),
            ));
        }
        None
    }
}

/// How much more of the question's term weight the offline evidence must cover to be
/// clearly better on coverage alone (a paraphrased answer shares fewer words).
const WIDE_MARGIN: f64 = 0.34;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_asked_for_comes_from_the_wording() {
        let k = |q: &str| asked_kind(q);
        assert_eq!(
            k("What is the catalogue identifier of the Harwell star chart?"),
            Some(Kind::Identifier)
        );
        assert_eq!(
            k("Which catalogue number does the chart carry?"),
            Some(Kind::Identifier)
        );
        assert_eq!(
            k("What is the access code of the vault?"),
            Some(Kind::Identifier)
        );
        // Any noun before "number" makes an identifier; "the number of" is a quantity.
        assert_eq!(
            k("What was the tracking number of the parcel?"),
            Some(Kind::Identifier)
        );
        assert_eq!(
            k("Which platform number does the night train leave from?"),
            Some(Kind::Identifier)
        );
        assert_eq!(k("What number of pupils was agreed?"), Some(Kind::Number));

        assert_eq!(
            k("When did the Marryn expedition reach the summit?"),
            Some(Kind::Date)
        );
        assert_eq!(k("In what year was it signed?"), Some(Kind::Date));
        assert_eq!(
            k("When and why did bob change his position?"),
            Some(Kind::Date)
        );
        assert_eq!(
            k("How much annual rainfall was recorded?"),
            Some(Kind::Number)
        );
        assert_eq!(
            k("What share of Eastgate households do not own a car?"),
            Some(Kind::Number)
        );
        assert_eq!(k("By how much did dana cut the fund?"), Some(Kind::Number));
        assert_eq!(
            k("Who first disagreed with Okafor about fares?"),
            Some(Kind::Person)
        );
        assert_eq!(
            k("What should a visitor to Porto make sure not to miss?"),
            None
        );
        assert_eq!(k("Where is the town seal stored?"), None);
        assert_eq!(k("What did chen propose about fares?"), None);
        assert_eq!(k("Why did the council delay the vote?"), None);
    }

    #[test]
    fn a_value_counts_only_when_the_question_does_not_already_hold_it() {
        let q = "What is the catalogue identifier of the Harwell star chart?";
        let salutation = "Fellow-Citizens of the Senate and House of Representatives:";
        assert!(!gives(Kind::Identifier, salutation, "1862 lincoln", q));
        assert!(gives(
            Kind::Identifier,
            "The Harwell star chart is filed under catalogue identifier HX-4471-B.",
            "",
            q
        ));
        assert!(gives(
            Kind::Identifier,
            "It is listed as QZR in the index.",
            "",
            q
        ));
        let q = "In his 1862 annual message, before what date would a State have to act?";
        assert!(!gives(Kind::Date, "In 1862 the message was read.", "", q));
        assert!(gives(
            Kind::Date,
            "Before the first day of January, 1900.",
            "",
            q
        ));
        // A debate's round dates a turn; a number must be in the quote itself.
        assert!(gives(
            Kind::Date,
            "I now support the line.",
            "chen round 2",
            "When did chen come round?"
        ));
        assert!(!gives(
            Kind::Number,
            "I now support the line.",
            "chen round 2",
            "How many riders?"
        ));
        assert!(gives(
            Kind::Number,
            "Ridership would reach 38,000 a day.",
            "",
            "How many riders?"
        ));
        assert!(gives(
            Kind::Number,
            "About three thousand came.",
            "",
            "How many riders?"
        ));
        assert!(gives(
            Kind::Person,
            "I disagree.",
            "bob round 3",
            "Who first disagreed with alice?"
        ));
        assert!(!gives(
            Kind::Person,
            "I disagree.",
            "alice round 3",
            "Who first disagreed with alice?"
        ));
        assert!(gives(
            Kind::Person,
            "The guild was founded by Mara Quell in 1704.",
            "",
            "Who founded the Tessel guild of weavers?"
        ));
    }

    fn support(
        covered: &[&str],
        share: f64,
        names: &[&str],
        kind: Option<Kind>,
        gives_kind: bool,
    ) -> Support {
        Support {
            covered: covered.iter().map(|s| s.to_string()).collect(),
            share,
            names_covered: names.iter().map(|s| s.to_string()).collect(),
            kind,
            gives_kind,
        }
    }

    #[test]
    fn unsupported_and_weaker_say_why() {
        let none = support(&[], 0.0, &[], Some(Kind::Identifier), false);
        let why = none.unsupported().unwrap();
        assert!(
            why.contains("no name or key term") && why.contains("an identifier"),
            "{why}"
        );
        let good = support(
            &["harwel", "chart"],
            0.8,
            &["harwel"],
            Some(Kind::Identifier),
            true,
        );
        assert_eq!(good.unsupported(), None);
        assert!(none.weaker_than(&good).unwrap().0);
        assert_eq!(good.weaker_than(&none), None);
        // Names the offline evidence has and the answer lacks: strong.
        let nameless = support(&["chart"], 0.3, &[], None, false);
        let named = support(&["harwel", "chart"], 0.5, &["harwel"], None, false);
        let (strong, why) = nameless.weaker_than(&named).unwrap();
        assert!(strong && why.contains("harwel"), "{why}");
        // Coverage alone: weak, and only by a wide margin.
        let a = support(&["visitor", "porto"], 0.40, &["porto"], None, false);
        let b = support(&["visitor", "porto", "miss"], 0.60, &["porto"], None, false);
        assert_eq!(a.weaker_than(&b), None);
        let c = support(
            &["visitor", "porto", "miss", "sure"],
            0.80,
            &["porto"],
            None,
            false,
        );
        assert!(!a.weaker_than(&c).unwrap().0);
    }
}
