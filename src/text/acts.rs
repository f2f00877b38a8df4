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

/// Cue phrases that say what a turn does (kinds of act only).
const MORE_ACTS: &[(&str, Act)] = &[
    ("i vote", Act::Decide),
    ("we vote", Act::Decide),
    ("i will vote for", Act::Decide),
    ("i will vote against", Act::Decide),
    ("votes aye", Act::Decide),
    ("votes yes", Act::Decide),
    ("votes no", Act::Decide),
    ("changes my mind", Act::Change),
    ("changed my view", Act::Change),
    // A stance stated without the classic verbs.
    ("i am against", Act::Object),
    ("i'm against", Act::Object),
    ("i am opposed", Act::Object),
    ("cannot go along", Act::Object),
    ("can't go along", Act::Object),
    ("cannot accept", Act::Object),
    ("is a mistake", Act::Object),
    ("i am in favour", Act::Support),
    ("i am in favor", Act::Support),
    ("i am with", Act::Support),
    ("i'm with", Act::Support),
    ("i will support", Act::Support),
    ("count me in", Act::Support),
    // Motions and amendments, however they are put.
    ("i move", Act::Propose),
    ("an amendment", Act::Propose),
    ("my amendment", Act::Propose),
    ("i want to offer", Act::Propose),
    ("i would like to offer", Act::Propose),
    // A position given up, or a new one taken.
    ("i no longer", Act::Change),
    ("i am now in", Act::Change),
    ("i am now for", Act::Change),
    ("i am now against", Act::Change),
    ("i'm now in", Act::Change),
    ("convinced me", Act::Change),
    ("persuaded me", Act::Change),
    ("i have to revisit", Act::Change),
];

/// A first-person stance in the past ("I argued for", "I came into this ready to"): with
/// a marker of the present in the same sentence ("tonight I support", "but", "no
/// longer"), the sentence reports a change of position.
const PAST_STANCE: &[&str] = &[
    "i argued",
    "i opposed",
    "i have opposed",
    "i supported",
    "i wanted",
    "i came in",
    "i came into",
    "i was against",
    "i was for",
    "i started",
];
const NOW: &[&str] = &[
    "now",
    "tonight",
    "today",
    "but",
    "no longer",
    "any more",
    "anymore",
];

/// A speaker's own promise about the future ("I will bring", "we'll publish"); "the
/// receipts will be …" is a forecast, not a commitment.
const FUTURE: &[&str] = &["i will", "i'll", "i shall", "we will", "we'll", "we shall"];

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
    // A change of position told as then and now.
    if !out.contains(&Act::Change)
        && PAST_STANCE.iter().any(|p| has_phrase(&ws, p))
        && NOW.iter().any(|p| has_phrase(&ws, p))
    {
        out.push(Act::Change);
    }
    // A promise with a date or a deadline: a commitment, whatever its verb.
    if !out.contains(&Act::Commit)
        && FUTURE.iter().any(|p| has_phrase(&ws, p))
        && (!super::facts(sentence).dates.is_empty()
            || has_phrase(&ws, "by the end of")
            || has_phrase(&ws, "deadline"))
    {
        out.push(Act::Commit);
    }
    out
}

/// How a turn answers the turn before it, when it does rather than say something of its
/// own (see [`reply_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// "Aye.", "None from me.", "No objection.": an answer to what the turn before put
    /// to the speakers (a vote, objections); `negative` for "No", "None", "Nay".
    Answer { negative: bool },
    /// "And a third one from me: …", "Also, …": goes on with what the turn before did.
    Continues,
    /// "I am with Wes on this one", "I agree with Alice": takes the stance of the turn it
    /// answers.
    Aligns,
    /// "I vote yes.", "I support it too.", "I second the motion.": an act whose object is
    /// the turn before.
    Bare,
    /// A turn that performs what the turn before called for ("Before the formal vote, I
    /// will take any final amendments." — "I move that …"), whatever its first words.
    Called,
}

/// Whether a turn's first sentence makes it a reply to the turn before, and of which
/// kind ([`Reply::Called`] needs the turn before: see `navigate::offline::replies`).
pub(crate) fn reply_of(first_sentence: &str) -> Option<Reply> {
    let lower: Vec<String> = first_sentence
        .unicode_words()
        .map(|w| w.to_lowercase())
        .collect();
    let first = lower.first()?;
    let negative = NEGATIVE_REPLY.contains(&first.as_str());
    // "No." / "Aye, gladly." / "None from me." — not "No nation can stand alone".
    let set_apart = lower.len() <= 4
        || first_sentence
            .trim_start()
            .get(first.len()..)
            .is_some_and(|rest| rest.starts_with([',', '.', ';', ':', '!', '—', '-']));
    if (negative || ANSWER_OPENERS.contains(&first.as_str())) && set_apart {
        return Some(Reply::Answer { negative });
    }
    let ws = words(first_sentence);
    // "And a third one from me", "And the chair votes aye as well" — but not every
    // sentence that starts with "And".
    if CONTINUE_OPENERS.contains(&first.as_str())
        && CONTINUE_MARKS.iter().any(|m| has_phrase(&ws, m))
    {
        return Some(Reply::Continues);
    }
    if ALIGN.iter().any(|p| has_phrase(&ws, p)) {
        return Some(Reply::Aligns);
    }
    (lower.len() <= BARE_WORDS && !acts_of(first_sentence).is_empty()).then_some(Reply::Bare)
}

/// A sentence with an act and at most this many words says its object only through the
/// turn before ("I support it too.").
const BARE_WORDS: usize = 6;
const NEGATIVE_REPLY: &[&str] = &["no", "none", "nay", "nope", "neither"];
const ANSWER_OPENERS: &[&str] = &[
    "aye", "yes", "yea", "yeah", "agreed", "seconded", "likewise",
];
const CONTINUE_OPENERS: &[&str] = &["and", "also"];
/// What makes an "And …" sentence go on with the turn before: it refers back to it.
const CONTINUE_MARKS: &[&str] = &[
    "one", "another", "too", "as well", "also", "same", "likewise", "from me", "mine", "again",
];
const ALIGN: &[&str] = &[
    "i am with",
    "i'm with",
    "i agree with",
    "me too",
    "so do i",
    "same here",
];

/// Words that put an act to the room: "is there *any* objection", "I will *take* final
/// amendments", "I will *call* the roll", "let me *put* it to the board", a question.
const CALLS: &[&str] = &["any", "take", "call", "put", "now"];

/// The acts a turn calls for from the speakers after it: those named in its questions and
/// in its sentences that put something to the room ([`CALLS`]), as a question would name
/// them ("we *now* come to the *vote*", "is there any *objection*?", "I will *take* any
/// final *amendments*"). An act word in passing ("the board rejected a plan in 2016")
/// calls for nothing.
pub(crate) fn called_acts(turn: &str) -> Vec<Act> {
    let mut out = Vec::new();
    for s in crate::text::sentences(turn) {
        let sentence = &turn[s.start..s.end];
        let ws = words(sentence);
        if sentence.trim_end().ends_with('?') || CALLS.iter().any(|c| has_phrase(&ws, c)) {
            for a in named_acts(sentence) {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

/// The acts a text's words name, in order.
fn named_acts(text: &str) -> Vec<Act> {
    let mut out = Vec::new();
    for w in text.unicode_words().map(|w| w.to_lowercase()) {
        if let Some((_, a)) = ASKED
            .iter()
            .find(|(prefixes, _)| prefixes.iter().any(|p| w.starts_with(p)))
            && !out.contains(a)
        {
            out.push(*a);
        }
    }
    out
}

/// What a turn puts to the speakers after it: the act its last question names first;
/// without a question, when it names several, a vote before all (an "Aye" answers the
/// vote, not the amendments the call lists), then objections, support, proposals,
/// commitments, changes.
pub(crate) fn called_act(turn: &str) -> Option<Act> {
    // A question put to the speakers ("Is there any objection to adopting it?") calls
    // for the act it names first.
    let asked = crate::text::sentences(turn)
        .into_iter()
        .rev()
        .map(|s| &turn[s.start..s.end])
        .find(|s| s.trim_end().ends_with('?'))
        .and_then(|q| named_acts(q).first().copied());
    if asked.is_some() {
        return asked;
    }
    let named = called_acts(turn);
    [
        Act::Decide,
        Act::Object,
        Act::Support,
        Act::Propose,
        Act::Commit,
        Act::Change,
    ]
    .into_iter()
    .find(|a| named.contains(a))
}

/// The acts a whole turn performs, every sentence's.
pub(crate) fn turn_acts(turn: &str) -> Vec<Act> {
    let mut out: Vec<Act> = Vec::new();
    for s in crate::text::sentences(turn) {
        for a in acts_of(&turn[s.start..s.end]) {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

/// The acts a reply performs through the turns before it: an answer performs what its
/// opening put to the speakers (a negative answer to a call for objections agrees, and
/// to a call for support objects); a continuation, what the turn just before did; an
/// aligned reply, the opening's stance (agreeing with an objection objects). `previous`
/// is the turn just before the reply, `opening` the nearest earlier one that is not a
/// reply.
pub(crate) fn acts_through(reply: Reply, previous: &str, opening: &str) -> Vec<Act> {
    match reply {
        Reply::Answer { negative } => called_act(opening)
            .map(|a| match (a, negative) {
                (Act::Object, true) => Act::Support,
                (Act::Support, true) => Act::Object,
                (a, _) => a,
            })
            .into_iter()
            .collect(),
        Reply::Continues => turn_acts(previous),
        Reply::Aligns => turn_acts(opening)
            .into_iter()
            .filter(|a| matches!(a, Act::Object | Act::Support))
            .collect(),
        Reply::Bare | Reply::Called => Vec::new(),
    }
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
    (
        &["propos", "suggest", "moved", "recommend", "amend"],
        Act::Propose,
    ),
];
/// Words that turn the act word after them into its opposite ("had *no* objection").
const NEGATORS: &[&str] = &["no", "not", "never", "without", "didn't", "nobody"];
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
    let (at, (prefixes, act)) = ws.iter().enumerate().find_map(|(i, w)| {
        ASKED
            .iter()
            .find(|(prefixes, _)| prefixes.iter().any(|p| w.starts_with(p)))
            .map(|a| (i, a))
    })?;
    let words = ws
        .iter()
        .filter(|w| prefixes.iter().any(|p| w.starts_with(p)))
        .cloned()
        .collect();
    // "Who had no objection to …" asks who agreed (and "did not support", who objected).
    let negated = ws[at.saturating_sub(2)..at]
        .iter()
        .any(|w| NEGATORS.contains(&w.as_str()));
    let act = match (act, negated) {
        (Act::Object, true) => Act::Support,
        (Act::Support, true) => Act::Object,
        (a, _) => *a,
    };
    Some((act, words))
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
    // "Who objected to …", "who voted for …": an act many may have performed.
    let who_did = has("who") && asked_act(question).is_some();
    plural_after_wh || who_over_time || who_did
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

#[cfg(test)]
mod tests;
