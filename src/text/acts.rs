//! What a sentence *does* in a debate: proposes (with figures), objects or agrees, decides
//! or votes, commits to a deadline, changes position — or makes small talk, runs the
//! procedure, or quotes background. `importance` turns these cues into one score: key acts
//! above neutral text (0), small talk and procedure below it. The cues are dialogue-act
//! phrases, not topics, so they carry over to debates about anything; quoted background
//! (third-person narrative) gets no act credit and so stays at 0.

use unicode_segmentation::UnicodeSegmentation;

/// Cue phrases (lower case, matched on word boundaries) and the weight of the act.
const ACTS: &[(&str, f64, Act)] = &[
    // Proposals and motions.
    ("i propose", 1.0, Act::Propose),
    ("we propose", 1.0, Act::Propose),
    ("my proposal", 1.0, Act::Propose),
    ("our proposal", 1.0, Act::Propose),
    ("i move that", 1.0, Act::Propose),
    ("i move to", 1.0, Act::Propose),
    ("i formally propose", 1.0, Act::Propose),
    ("i recommend", 0.6, Act::Propose),
    ("i suggest", 0.5, Act::Propose),
    // Objections, disagreement, agreement.
    ("i object", 1.0, Act::Object),
    ("my objection", 1.0, Act::Object),
    ("formally object", 1.0, Act::Object),
    ("i disagree", 1.0, Act::Object),
    ("i oppose", 1.0, Act::Object),
    ("we oppose", 1.0, Act::Object),
    ("i reject", 0.9, Act::Object),
    ("i cannot support", 0.9, Act::Object),
    ("i support", 0.7, Act::Support),
    ("i agree", 0.7, Act::Support),
    ("i second", 0.8, Act::Support),
    ("i endorse", 0.7, Act::Support),
    ("i back", 0.6, Act::Support),
    ("i now back", 1.0, Act::Change),
    // Decisions and votes.
    ("voted", 0.9, Act::Decide),
    ("votes to", 1.0, Act::Decide),
    ("the motion carried", 1.0, Act::Decide),
    ("carried by", 1.0, Act::Decide),
    ("we have decided", 1.0, Act::Decide),
    ("it is decided", 1.0, Act::Decide),
    ("was adopted", 0.9, Act::Decide),
    ("is adopted", 0.9, Act::Decide),
    ("was approved", 0.8, Act::Decide),
    ("was rejected", 0.8, Act::Decide),
    ("unanimously", 0.8, Act::Decide),
    ("resolved that", 0.9, Act::Decide),
    // Commitments and deadlines.
    ("i commit", 1.0, Act::Commit),
    ("we commit", 1.0, Act::Commit),
    ("i promise", 0.8, Act::Commit),
    ("i pledge", 1.0, Act::Commit),
    ("no later than", 0.9, Act::Commit),
    ("deadline", 0.7, Act::Commit),
    ("will deliver", 0.8, Act::Commit),
    // Changes of position.
    ("changed my position", 1.0, Act::Change),
    ("changed my mind", 0.8, Act::Change),
    ("i withdraw", 1.0, Act::Change),
    ("i was wrong", 1.0, Act::Change),
    ("i now propose", 1.0, Act::Change),
    ("i now support", 1.0, Act::Change),
    ("no longer support", 1.0, Act::Change),
    ("i have reconsidered", 1.0, Act::Change),
];

/// What a sentence does in a debate, or what a question asks about: the kinds of the cue
/// phrases above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Act {
    Propose,
    Object,
    Support,
    Decide,
    Commit,
    Change,
}

impl Act {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Act::Propose => "proposal",
            Act::Object => "objection",
            Act::Support => "support",
            Act::Decide => "decision or vote",
            Act::Commit => "commitment",
            Act::Change => "change of position",
        }
    }
}

/// Cue phrases that say what a turn does but that [`importance`] does not score: adding
/// them there would change every node the offline compressor makes.
const MORE_ACTS: &[(&str, Act)] = &[
    ("i vote", Act::Decide),
    ("we vote", Act::Decide),
    ("i will vote for", Act::Decide),
    ("i will vote against", Act::Decide),
    ("changes my mind", Act::Change),
    ("changed my view", Act::Change),
];

/// The acts a sentence performs (none for small talk, whatever act words it holds: "I
/// object to how cold it is").
pub(crate) fn acts_of(sentence: &str) -> Vec<Act> {
    let ws = words(sentence);
    if SMALL_TALK.iter().any(|w| has_phrase(&ws, w)) {
        return Vec::new();
    }
    let mut out: Vec<Act> = Vec::new();
    let found = ACTS
        .iter()
        .map(|(p, _, a)| (*p, *a))
        .chain(MORE_ACTS.iter().copied())
        .filter(|(p, _)| has_phrase(&ws, p))
        .map(|(_, a)| a);
    for a in found {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The cue phrases of `act`, for finding sentences that perform it.
pub(crate) fn act_phrases(act: Act) -> Vec<&'static str> {
    ACTS.iter()
        .map(|(p, _, a)| (*p, *a))
        .chain(MORE_ACTS.iter().copied())
        .filter(|(_, a)| *a == act)
        .map(|(p, _)| p)
        .collect()
}

/// Words of a question that name an act (prefixes of lower-case words). A change of
/// position needs both a form of "change" and what changed ("position", "mind", ...).
const ASKED: &[(&[&str], Act)] = &[
    (
        &["reversed", "reconsider", "withdrew", "switched", "u-turn"],
        Act::Change,
    ),
    (&["deadline", "commit", "promis", "pledg"], Act::Commit),
    (
        &[
            "vote",
            "voting",
            "motion",
            "decid",
            "decision",
            "adopt",
            "carried",
            "resolution",
        ],
        Act::Decide,
    ),
    (
        &["object", "oppos", "disagre", "reject", "dissent"],
        Act::Object,
    ),
    (
        &[
            "support", "agree", "endors", "backed", "backing", "seconded",
        ],
        Act::Support,
    ),
    (&["propos", "suggest", "moved", "recommend"], Act::Propose),
];
const CHANGED: &[&str] = &["position", "mind", "view", "stance", "heart"];

/// The act a question asks about, and the question's words that name it (every word of
/// that act): the first act word of the question decides ("which amendments were *moved* before the formal vote"
/// asks for motions, not votes), except that a change of position ("who changed their
/// mind about the vote") always does.
pub(crate) fn asked_act(question: &str) -> Option<(Act, Vec<String>)> {
    let ws: Vec<String> = question
        .unicode_words()
        .map(|w| w.to_lowercase().trim_end_matches("'s").to_string())
        .collect();
    let changed = ws.iter().position(|w| w.starts_with("chang"));
    let what = ws
        .iter()
        .position(|w| CHANGED.iter().any(|c| w.starts_with(c)));
    if let (Some(c), Some(w)) = (changed, what) {
        return Some((Act::Change, vec![ws[c].clone(), ws[w].clone()]));
    }
    let first = ws.iter().find_map(|w| {
        ASKED
            .iter()
            .find(|(prefixes, _)| prefixes.iter().any(|p| w.starts_with(p)))
    })?;
    let (prefixes, act) = first;
    let words = ws
        .iter()
        .filter(|w| prefixes.iter().any(|p| w.starts_with(p)))
        .cloned()
        .collect();
    Some((*act, words))
}

/// Words that make a question ask for a set of answers rather than one.
const SET_WORDS: &[&str] = &[
    "list",
    "every",
    "all",
    "each",
    "enumerate",
    "everyone",
    "everybody",
];
/// After "who": the question spans the debate ("who objected *during* the debate").
const SPAN_WORDS: &[&str] = &["during", "throughout", "ever", "whenever"];
/// Words that end in "s" without being plural nouns.
const NOT_PLURAL: &[&str] = &[
    "does", "was", "has", "is", "his", "its", "this", "thus", "us", "yes", "was", "always",
    "whose", "perhaps", "across", "unless", "less", "news", "status", "bus", "campus",
];
/// "First", "last": one item, not a set.
const ORDINAL: &[&str] = &[
    "first",
    "earliest",
    "initially",
    "originally",
    "last",
    "latest",
    "finally",
];

/// Whether a question asks for a set ("which speakers", "list every deadline", "who ...
/// during the debate", "how many votes" — "how many" only of acts: "how many riders" asks
/// for a figure): every supporting passage is then an answer. A
/// question about the first or last of something asks for one item, unless it says
/// "every", "all", "list" or "how many" outright.
pub(crate) fn asks_for_set(question: &str) -> bool {
    let ws: Vec<String> = question
        .unicode_words()
        .map(|w| w.to_lowercase())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| ws.iter().any(|x| x == w);
    // "How many votes were held" counts acts; "how many riders did the study forecast"
    // asks for a quantity the text states.
    let how_many =
        ws.windows(2).any(|p| p[0] == "how" && p[1] == "many") && asked_act(question).is_some();
    let outright = how_many
        || ws.iter().enumerate().any(|(i, w)| {
            SET_WORDS.contains(&w.as_str()) && !(w == "all" && i > 0 && ws[i - 1] == "at")
        });
    if outright {
        return true;
    }
    if ORDINAL.iter().any(|o| has(o)) {
        return false;
    }
    let plural = |w: &str| {
        w.len() >= 4
            && w.ends_with('s')
            && !w.ends_with("ss")
            && !w.ends_with("'s")
            && !NOT_PLURAL.contains(&w)
    };
    let plural_after_wh = ws.iter().enumerate().any(|(i, w)| {
        (w == "which" || w == "what") && ws[i + 1..].iter().take(2).any(|x| plural(x))
    });
    let who_over_time = has("who") && SPAN_WORDS.iter().any(|w| has(w));
    plural_after_wh || who_over_time
}

/// Small talk: private life, food, weather, leisure. A sentence about them is not what a
/// debate decided, whatever figures or act words it holds.
const SMALL_TALK: &[&str] = &[
    "lunch",
    "breakfast",
    "dinner",
    "coffee",
    "coffees",
    "tea",
    "sandwich",
    "sandwiches",
    "bakery",
    "bread",
    "cafe",
    "restaurant",
    "pizza",
    "weekend",
    "holiday",
    "vacation",
    "birthday",
    "weather",
    "daughter",
    "son",
    "cousin",
    "family",
    "wife",
    "husband",
    "concert",
    "cold",
    "morning",
    "traffic",
    "jokes",
];

/// Procedure: the running of the meeting, not its substance.
const PROCEDURE: &[&str] = &[
    "point of order",
    "next speaker",
    "the floor",
    "short break",
    "microphone",
    "thank you, chair",
    "thank you chair",
    "the minutes",
];

/// Words whose figures are a policy's (money, shares, counts of votes).
const MONEY: &[&str] = &[
    "million", "billion", "percent", "%", "$", "€", "£", "dollars", "votes",
];

/// The words of `s`, lower case, with single spaces (word boundaries for phrase matching).
fn words(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(' ');
    for w in s.unicode_words() {
        out.push_str(&w.to_lowercase());
        out.push(' ');
    }
    out
}

fn has_phrase(ws: &str, phrase: &str) -> bool {
    let mut p = String::with_capacity(phrase.len() + 2);
    p.push(' ');
    p.push_str(words(phrase).trim());
    p.push(' ');
    ws.contains(&p)
}

/// The importance of one sentence in a debate: about 1–2 for a key act (more with a
/// figure or a deadline), 0 for neutral text, below 0 for small talk and procedure.
pub(crate) fn importance(sentence: &str) -> f64 {
    let ws = words(sentence);
    let act = ACTS
        .iter()
        .filter(|(p, _, _)| has_phrase(&ws, p))
        .map(|(_, w, _)| *w)
        .fold(0.0, f64::max);
    let lower = sentence.to_lowercase();
    let mut score = act;
    if act > 0.0 {
        let f = super::facts(sentence);
        let figure = !f.numbers.is_empty() && MONEY.iter().any(|m| lower.contains(m));
        if figure {
            score += 0.4;
        }
        if !f.dates.is_empty() {
            score += 0.3;
        }
    }
    let small = SMALL_TALK.iter().filter(|w| has_phrase(&ws, w)).count();
    if small > 0 {
        score -= 1.5 + 0.25 * small as f64;
    }
    if PROCEDURE.iter().any(|p| lower.contains(p)) {
        score -= 0.6;
    }
    score
}

#[cfg(test)]
mod tests {
    use super::{Act, acts_of, asked_act, asks_for_set, importance};

    #[test]
    fn set_questions_are_told_from_single_ones() {
        for q in [
            "Who changed position during the debate?",
            "List every deadline the committee agreed to",
            "Which speakers objected to the harbour levy proposal?",
            "How many votes were held on the tram extension?",
            "What deadlines did the members commit to?",
            "Which fare proposals did the members make?",
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
        ] {
            assert!(!asks_for_set(q), "{q}");
        }
    }

    #[test]
    fn the_first_act_word_of_a_question_names_its_act() {
        let act = |q: &str| asked_act(q).map(|(a, _)| a);
        assert_eq!(
            act("Who changed their mind about the vote?"),
            Some(Act::Change)
        );
        assert_eq!(
            act("List every deadline the committee agreed to"),
            Some(Act::Commit)
        );
        assert_eq!(
            act("Which amendments were moved before the formal vote?"),
            Some(Act::Propose)
        );
        assert_eq!(
            act("Which speakers objected to the proposal?"),
            Some(Act::Object)
        );
        assert_eq!(
            act("How many votes were held on the levy?"),
            Some(Act::Decide)
        );
        assert_eq!(act("What share of households own a car?"), None);
        assert_eq!(
            asked_act("Who changed position during the debate?")
                .unwrap()
                .1,
            vec!["changed".to_string(), "position".to_string()]
        );
        assert_eq!(
            acts_of("I object to the levy, because it is unfair."),
            vec![Act::Object]
        );
        assert!(acts_of("I object to how cold it is in the room this morning.").is_empty());
        assert_eq!(
            acts_of("I have changed my position on the levy: I now propose 9 million."),
            vec![Act::Change]
        );
    }

    #[test]
    fn key_acts_beat_neutral_text_and_small_talk() {
        let prop = importance("I propose that the harbour levy be funded with 12 million dollars.");
        let obj = importance("I object to the harbour levy, because the numbers do not add up.");
        let vote = importance("The committee voted 7 to 2 to adopt the harbour levy.");
        let commit = importance("I commit to publishing the tender by March 3, 2027.");
        let change = importance("I have changed my position on the levy: I now back 9 million.");
        let neutral = importance("The railways carried 40 million passengers in 1902.");
        let small = importance("I paid 12 dollars for lunch at the cafe this morning.");
        let procedural = importance("We will take a short break before the next speaker.");
        for k in [prop, obj, vote, commit, change] {
            assert!(k > neutral, "{k} vs {neutral}");
        }
        assert!(
            prop > obj,
            "a proposal with a figure outranks a bare objection"
        );
        assert!(small < neutral && procedural < neutral);
        assert_eq!(neutral, 0.0);
    }
}
