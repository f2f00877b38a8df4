//! The prompts strata sends to chat models, in one place and versioned.
//!
//! [`VERSION`] covers the compression prompts. It is part of the OpenAI-compatible
//! client's identity, which is part of every node id it produces: editing a compression
//! prompt without bumping it would serve nodes made by the old prompt as if the new one
//! had made them. The navigation prompts make no nodes; [`NAV_VERSION`] is reported in
//! query trajectories so answers can be traced to the prompt that produced them.
//!
//! METADATA is not made by a model: tags come from the offline tagger
//! (`plan::TAGS_VERSION`), so routing never depends on a model's JSON.

use super::{ChatRequest, CompressRequest, Inputs};
use crate::level::Level;
use crate::token;
use serde_json::json;

/// Version of the compression prompts (part of every node id a chat model makes).
pub const VERSION: &str = "prompts-v2";

/// `max_tokens` of a compression prompt for `target` tokens: room to overshoot a little
/// (the build rejects what is over budget, which beats a reply cut off mid-sentence).
pub fn reply_tokens(target: usize) -> usize {
    target + target / 2 + 32
}

/// The longest output the build accepts for `target` tokens; longer is over budget. A
/// node's text is never longer than this unless the (trusted) offline compressor made it.
pub fn accepted_tokens(target: usize) -> usize {
    target + target / 2 + 16
}

/// Tokens a retry's note on the rejected output may take (it is cut to fit).
pub const FEEDBACK_TOKENS: usize = 96;

/// Chat framing per message (role, separators), counted generously.
const MESSAGE_TOKENS: usize = 8;

/// Tokens of a prompt as a chat model receives it (system and user message with their
/// framing), the reply not included.
pub fn prompt_tokens(p: &ChatRequest) -> usize {
    token::count(&p.system) + token::count(&p.user) + 2 * MESSAGE_TOKENS
}

/// An upper bound of a compression prompt's tokens for `level` and `inputs` besides its
/// passages (see [`passage_tokens`]) and reply: the system prompt, the task, a retry's
/// note and the framing. What the plan sizes its fan-in with ([`FRAMES`]).
pub fn frame_tokens(level: Level, inputs: Inputs) -> usize {
    let i = match inputs {
        Inputs::Text => 0,
        Inputs::Summaries => 1,
    };
    FRAMES[level.as_u8() as usize * 2 + i]
}

/// [`frame_tokens`] of every level (FULL … METADATA) and kind of input (text, summaries),
/// as `count_frames` counts them from the prompts above. Written out so that a process
/// that only reads (every `context` and `query` plans its tree) need not build the BPE
/// tokenizer to size prompts it never sends; the test `frames_match_the_prompts` fails,
/// printing the table to write here, when a prompt changes and this does not.
const FRAMES: [usize; 10] = [304, 304, 304, 304, 295, 322, 306, 306, 306, 306];

/// What [`FRAMES`] holds, counted with the tokenizer.
#[cfg(test)]
fn count_frames() -> Vec<usize> {
    let system = token::count(COMPRESS_SYSTEM);
    Level::ALL
        .into_iter()
        .flat_map(|l| [(l, Inputs::Text), (l, Inputs::Summaries)])
        .map(|(l, i)| {
            let task = [true, false]
                .map(|debate| token::count(&task(l, i, 999_999, debate)))
                .into_iter()
                .max()
                .unwrap_or(0);
            system + task + FEEDBACK_TOKENS + 16 + 2 * MESSAGE_TOKENS
        })
        .collect()
}

/// An upper bound of the tokens one passage adds to a prompt besides its text: its tags
/// and label. The label is bounded by its bytes (a token is at least one byte), so the
/// plan tokenizes no label: it is loaded for every context window and query.
pub fn passage_tokens(label: Option<&str>) -> usize {
    label.map_or(0, str::len) + 12
}

/// Version of the navigation prompts.
pub const NAV_VERSION: &str = "nav-v3";

const COMPRESS_SYSTEM: &str = "You compress text for a retrieval system. Rules:\n\
- Use only what the input states. Never add facts, opinions, commentary or outside knowledge.\n\
- Copy every number, amount, percentage, date and name exactly as written in the input.\n\
- Passages may be labelled with a speaker and a round. Keep who said what and in which round: \
each speaker's position, the evidence and numbers they cited, changes of position, \
agreement and dissent. Never attribute a claim to the wrong speaker.\n\
- Reply with the compressed text only: no preamble, no title, no markdown, no bullet symbols.";

/// The task line of a compression prompt, for a debate's passages or a document's.
fn task(level: Level, inputs: Inputs, words: usize, debate: bool) -> String {
    match (level, inputs) {
        (Level::Detailed | Level::Full, _) => format!(
            "Rewrite the passage below in at most {words} words. Keep every fact: numbers, \
             dates, names, amounts, claims and the reasons given for them. Drop only \
             repetition and filler.{}",
            if debate {
                " Start with the speaker's name, as in the label, and keep their stance."
            } else {
                ""
            }
        ),
        (Level::Summary, Inputs::Text) => format!(
            "Summarise the passages below in at most {words} words.{}",
            if debate {
                " For each speaker, in order: the position they took, the evidence and \
                 numbers they cited, and where they agreed or disagreed with the others. \
                 Name the round."
            } else {
                " Give the main points and the key facts in their original order."
            }
        ),
        (Level::Summary, Inputs::Summaries) => format!(
            "The passages below summarise consecutive parts of one body of text, in order. \
             Summarise this stretch as a whole in at most {words} words: the main positions \
             or points and how they developed, the key numbers and dates, {}and any dissent \
             that remains. Say which {} each point comes from.",
            if debate {
                "who proposed, objected to, decided or committed to what, "
            } else {
                ""
            },
            if debate { "rounds" } else { "parts" }
        ),
        (Level::Abstract | Level::Metadata, _) => format!(
            "The passages below summarise the parts of one body of text, in order. Write an \
             abstract of the whole in at most {words} words: what it is about, the main \
             positions or points and how they developed, the key numbers, the outcome, and \
             any dissent that remains."
        ),
    }
}

/// The prompt for compressing `req` to its level's budget. A retry carries a note on
/// what was wrong with the rejected output (`req.feedback`), so it is never the request
/// that produced it.
pub fn compress(req: &CompressRequest) -> ChatRequest {
    // English runs ~0.75 words per token; ask for a little less so the reply fits.
    let words = ((req.target_tokens as f64) * 0.7).floor().max(5.0) as usize;
    let debate = req
        .passages
        .iter()
        .any(|p| p.label.as_deref().is_some_and(|l| !l.is_empty()));
    let mut user = task(req.level, req.inputs, words, debate);
    if let Some(note) = &req.feedback {
        user.push_str("\n\nYour previous reply was rejected: ");
        user.push_str(&token::head(note, FEEDBACK_TOKENS - 16));
    }
    user.push_str("\n\n");
    for p in &req.passages {
        match &p.label {
            Some(l) => user.push_str(&format!("<passage label=\"{}\">\n", l.replace('"', "'"))),
            None => user.push_str("<passage>\n"),
        }
        user.push_str(p.text.trim());
        user.push_str("\n</passage>\n");
    }
    ChatRequest {
        system: COMPRESS_SYSTEM.to_string(),
        user,
        schema: None,
        max_tokens: reply_tokens(req.target_tokens) as u32,
    }
}

const INTENT_SYSTEM: &str = "You turn a question into a search intent. Reply with one JSON \
object: {\"entity\": the person, group, document or thing asked about (\"\" if none), \
\"attribute\": what is asked about it, \"output_type\": one of number, date, name, list, \
yes_no, text, \"keywords\": 2 to 6 search words from the question}.";

/// The one-off prompt that freezes a question into an intent.
pub fn intent(question: &str) -> ChatRequest {
    ChatRequest {
        system: INTENT_SYSTEM.to_string(),
        user: format!("Question: {question}"),
        schema: Some(("intent".into(), intent_schema())),
        max_tokens: 200,
    }
}

fn intent_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "entity": {"type": "string"},
            "attribute": {"type": "string"},
            "output_type": {
                "type": "string",
                "enum": ["number", "date", "name", "list", "yes_no", "text"]
            },
            "keywords": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["entity", "attribute", "output_type", "keywords"],
        "additionalProperties": false
    })
}

const NAVIGATE_SYSTEM: &str = "You answer a question about a large text by exploring a tree \
of its summaries: ABSTRACT (the whole) > SUMMARY (a round or a section) > DETAILED (one \
chunk, condensed) > FULL (one chunk, verbatim). You see a working set of nodes, each with \
an id like n3. Each turn, choose one action:\n\
- peek: read the text of `ids` (from the working set).\n\
- grep: search `pattern` (a few words) at `level` (summary, detailed or full) beneath the \
working set; the hits become the working set.\n\
- descend: the children of `ids` become the working set.\n\
- partition_map: a helper applies `instruction` to each of `ids` separately and reports \
back; use it to scan many nodes at once.\n\
- finish: answer. Put in `quotes` the evidence: for each, the `id` of a node you have read \
and `quote`, one sentence copied exactly from that node's text. Quotes from FULL nodes are \
best. Set `confidence` (0 to 1) and `ready` (false if the evidence is incomplete).\n\
Always update `hypothesis` (your current best answer) and `learned` (what the last result \
told you), one short sentence each. Leave `quotes` empty ([]) unless the action is finish. \
Use only ids you were shown. Reply with one JSON object.";

/// The per-iteration navigation prompt; `state` is the rendered question, intent,
/// hypothesis, notes, last observation and working set.
pub fn navigate(state: &str) -> ChatRequest {
    ChatRequest {
        system: NAVIGATE_SYSTEM.to_string(),
        user: state.to_string(),
        schema: Some(("action".into(), action_schema())),
        max_tokens: 600,
    }
}

fn action_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "hypothesis": {"type": "string"},
            "learned": {"type": "string"},
            "action": {
                "type": "string",
                "enum": ["peek", "grep", "descend", "partition_map", "finish"]
            },
            "ids": {"type": "array", "items": {"type": "string"}},
            "pattern": {"type": "string"},
            "level": {"type": "string", "enum": ["summary", "detailed", "full"]},
            "instruction": {"type": "string"},
            "quotes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "quote": {"type": "string"}},
                    "required": ["id", "quote"],
                    "additionalProperties": false
                }
            },
            "confidence": {"type": "number"},
            "ready": {"type": "boolean"}
        },
        "required": [
            "hypothesis", "learned", "action", "ids", "pattern", "level",
            "instruction", "quotes", "confidence", "ready"
        ],
        "additionalProperties": false
    })
}

const CODE_SYSTEM: &str = "You answer a question about a large text by writing one program \
per iteration in Rhai (a small scripting language like JavaScript and Rust: `let x = 1;`, \
`if a { } else { }`, `for n in working { }`, `fn f(x) { }`, arrays `[1, 2]` with push, len, \
filter(|x| ...), map(|x| ...), sort; maps `#{a: 1}` read as `m.a`; strings with contains, \
index_of, sub_string, split, to_lower, len; `+` joins strings). The text is a tree: ABSTRACT \
(the whole) > SUMMARY (a round or a section) > DETAILED (one chunk, condensed) > FULL (one \
chunk, verbatim). Your program sees `question` (a string) and `working`, the working set \
below: an array of maps #{id, level, label, text, read, score}, best first, `text` \
shortened. It may call only these functions (nothing else exists: no files, network, \
printing, eval or import):\n\
- grep(pattern, level, limit): search `level` (\"summary\", \"detailed\" or \"full\") beneath \
the working set; an array of #{id, level, label, score, text}.\n\
- search(query, limit): the same over the whole text (detailed and full).\n\
- peek(id): #{id, level, label, text}, the whole text of one node.\n\
- children(id): the nodes one level below, as maps like peek's.\n\
- llm_query(prompt): a helper model's answer (a string); llm_batch(prompts): many at once, \
an array of strings in order.\n\
- final(answer, ids): ends the program: `answer` is a sentence copied exactly from the \
text of the nodes `ids`.\n\
The program must end with a map: #{selected_ids: [ids to keep exploring, best first], \
extracted: [#{id: \"n4\", quote: \"one sentence copied exactly from node n4's text\"}], \
confidence: 0.0 to 1.0, stop: true when the extracted quotes answer the question}. Ids are \
the `id` fields you were given (n1, n2, ...). Quote FULL nodes where you can. Reply with the \
program only.";

/// The per-iteration prompt of code mode (`strategy = code`): `state` as for
/// [`navigate`]; the reply is one Rhai program (run by `strata::script`).
pub fn code(state: &str) -> ChatRequest {
    ChatRequest {
        system: CODE_SYSTEM.to_string(),
        user: state.to_string(),
        schema: None,
        max_tokens: 1200,
    }
}

const HELPER_SYSTEM: &str = "You are a helper inside a program that answers questions \
about a text. Follow the instruction; use only what it gives you. Answer in at most 80 \
words; copy numbers, dates and names exactly.";

/// One `llm_query` (or one prompt of an `llm_batch`) of a code-mode program.
pub fn helper(prompt: &str) -> ChatRequest {
    ChatRequest {
        system: HELPER_SYSTEM.to_string(),
        user: prompt.to_string(),
        schema: None,
        max_tokens: 200,
    }
}

const PARTITION_SYSTEM: &str = "You read one passage and follow an instruction about it. \
Use only the passage. Answer in at most 60 words; copy numbers, dates and names exactly. If \
the passage does not say, answer exactly: not mentioned.";

/// One `partition_map` sub-call: `instruction` applied to one node's text.
pub fn partition(instruction: &str, label: &str, text: &str) -> ChatRequest {
    ChatRequest {
        system: PARTITION_SYSTEM.to_string(),
        user: format!(
            "Instruction: {instruction}\n\n<passage label=\"{}\">\n{}\n</passage>",
            label.replace('"', "'"),
            text.trim()
        ),
        schema: None,
        max_tokens: 120,
    }
}

const SET_SUPPORT_SYSTEM: &str = "A question asks for a set of answers (every speaker who \
did something, every deadline, every vote). You see numbered passages, each found by a search \
for the question. Decide for each passage on its own whether it is itself one of the answers: \
it must state what the question asks about (the same act, the same subject), not merely \
mention the words. Use only the passages. Reply with JSON: {\"support\": [numbers of the \
passages that are answers]}; an empty list when none is.";

/// One sub-call of a set answer's fan-out: which of `passages` (label, text), numbered
/// from 1, answer `question` on their own.
pub fn set_support(question: &str, passages: &[(String, String)]) -> ChatRequest {
    let mut user = format!("Question: {question}\n");
    for (i, (label, text)) in passages.iter().enumerate() {
        user.push_str(&format!(
            "\n<passage n=\"{}\" label=\"{}\">\n{}\n</passage>\n",
            i + 1,
            label.replace('"', "'"),
            text.trim()
        ));
    }
    ChatRequest {
        system: SET_SUPPORT_SYSTEM.to_string(),
        user,
        schema: Some((
            "set_support".into(),
            json!({
                "type": "object",
                "properties": {
                    "support": {"type": "array", "items": {"type": "integer"}}
                },
                "required": ["support"],
                "additionalProperties": false
            }),
        )),
        max_tokens: 60 + 4 * passages.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Passage;

    #[test]
    fn frames_match_the_prompts() {
        let counted = count_frames();
        assert_eq!(
            counted,
            FRAMES.to_vec(),
            "a prompt changed: write `const FRAMES: [usize; 10] = {counted:?};` in prompts.rs"
        );
    }

    #[test]
    fn compression_prompts_carry_labels_budget_and_text() {
        let req = CompressRequest {
            level: Level::Summary,
            passages: vec![
                Passage {
                    text: "The line costs $1.57 billion.".into(),
                    label: Some("bob (round 7)".into()),
                },
                Passage {
                    text: "I disagree.".into(),
                    label: Some("alice (round 7)".into()),
                },
            ],
            target_tokens: 40,
            inputs: Default::default(),
            feedback: None,
            priority: Level::Summary.as_u8(),
        };
        let p = compress(&req);
        assert!(p.user.contains("at most 28 words"), "{}", p.user);
        assert!(p.user.contains(
            "<passage label=\"bob (round 7)\">\nThe line costs $1.57 billion.\n</passage>"
        ));
        assert!(p.user.contains("For each speaker"));
        assert_eq!(p.max_tokens, 40 + 20 + 32);
        assert!(p.schema.is_none());
        let doc = compress(&CompressRequest {
            level: Level::Detailed,
            passages: vec![Passage {
                text: "Text.".into(),
                label: None,
            }],
            target_tokens: 3,
            inputs: Default::default(),
            feedback: None,
            priority: Level::Detailed.as_u8(),
        });
        assert!(doc.user.contains("at most 5 words") && !doc.user.contains("speaker's name"));
    }

    #[test]
    fn a_retry_carries_its_note_and_the_frame_bounds_every_prompt() {
        let long = "Why the audit matters. ".repeat(200);
        for (level, inputs) in [
            (Level::Detailed, Inputs::Text),
            (Level::Summary, Inputs::Text),
            (Level::Summary, Inputs::Summaries),
            (Level::Abstract, Inputs::Summaries),
        ] {
            for label in [None, Some("Rounds 3\u{2013}17".to_string())] {
                let mut req = CompressRequest::new(
                    level,
                    vec![Passage {
                        text: "The bridge costs $61 million.".into(),
                        label: label.clone(),
                    }],
                    120,
                );
                req.inputs = inputs;
                let first = compress(&req);
                req.feedback = Some(format!("(this is attempt 2) it was too long: {long}"));
                let retry = compress(&req);
                assert_ne!(first, retry);
                assert!(
                    retry
                        .user
                        .contains("Your previous reply was rejected: (this is attempt 2)")
                );
                // The frame covers the instructions, the (cut) note and the framing; the
                // passage adds its text and tags.
                let passage = token::count("The bridge costs $61 million.")
                    + passage_tokens(label.as_deref());
                assert!(
                    prompt_tokens(&retry) <= frame_tokens(level, inputs) + passage,
                    "{level:?} {inputs:?}: {} > {} + {passage}",
                    prompt_tokens(&retry),
                    frame_tokens(level, inputs)
                );
            }
        }
        let reduce = compress(&CompressRequest {
            inputs: Inputs::Summaries,
            ..CompressRequest::new(
                Level::Summary,
                vec![Passage {
                    text: "x".into(),
                    label: Some("Rounds 1\u{2013}9".into()),
                }],
                50,
            )
        });
        assert!(reduce.user.contains("consecutive parts") && reduce.user.contains("rounds"));
    }
}
