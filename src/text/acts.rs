//! What a sentence *does* in a debate: proposes (with figures), objects or agrees, decides
//! or votes, commits to a deadline, changes position — or makes small talk, runs the
//! procedure, or quotes background. `importance` turns these cues into one score: key acts
//! above neutral text (0), small talk and procedure below it. The cues are dialogue-act
//! phrases, not topics, so they carry over to debates about anything; quoted background
//! (third-person narrative) gets no act credit and so stays at 0.

use unicode_segmentation::UnicodeSegmentation;

/// Cue phrases (lower case, matched on word boundaries) and the weight of the act.
const ACTS: &[(&str, f64)] = &[
    // Proposals and motions.
    ("i propose", 1.0),
    ("we propose", 1.0),
    ("my proposal", 1.0),
    ("our proposal", 1.0),
    ("i move that", 1.0),
    ("i move to", 1.0),
    ("i formally propose", 1.0),
    ("i recommend", 0.6),
    ("i suggest", 0.5),
    // Objections, disagreement, agreement.
    ("i object", 1.0),
    ("my objection", 1.0),
    ("formally object", 1.0),
    ("i disagree", 1.0),
    ("i oppose", 1.0),
    ("we oppose", 1.0),
    ("i reject", 0.9),
    ("i cannot support", 0.9),
    ("i support", 0.7),
    ("i agree", 0.7),
    ("i second", 0.8),
    ("i endorse", 0.7),
    ("i back", 0.6),
    ("i now back", 1.0),
    // Decisions and votes.
    ("voted", 0.9),
    ("votes to", 1.0),
    ("the motion carried", 1.0),
    ("carried by", 1.0),
    ("we have decided", 1.0),
    ("it is decided", 1.0),
    ("was adopted", 0.9),
    ("is adopted", 0.9),
    ("was approved", 0.8),
    ("was rejected", 0.8),
    ("unanimously", 0.8),
    ("resolved that", 0.9),
    // Commitments and deadlines.
    ("i commit", 1.0),
    ("we commit", 1.0),
    ("i promise", 0.8),
    ("i pledge", 1.0),
    ("no later than", 0.9),
    ("deadline", 0.7),
    ("will deliver", 0.8),
    // Changes of position.
    ("changed my position", 1.0),
    ("changed my mind", 0.8),
    ("i withdraw", 1.0),
    ("i was wrong", 1.0),
    ("i now propose", 1.0),
    ("i now support", 1.0),
    ("no longer support", 1.0),
    ("i have reconsidered", 1.0),
];

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
        .filter(|(p, _)| has_phrase(&ws, p))
        .map(|(_, w)| *w)
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
    use super::importance;

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
