//! Reading inputs: document files and debate transcripts (JSON Lines), validated before
//! anything is written, so a bad file changes nothing.

use crate::error::{Error, Result};
use crate::store::ScopeKind;
use crate::time::Time;
use serde::{Deserialize, Deserializer, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};

/// One debate turn as a debate runner sends it: a JSON object with exactly these fields
/// (`time` may be left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Turn {
    pub round: u32,
    pub speaker: String,
    pub text: String,
    /// When it was said: an RFC 3339 timestamp or a date (`2026-03-04`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "2026-03-04T18:02:00Z")]
    pub time: Option<Time>,
}

/// The fields of a turn; an unknown field is an error, not silently dropped (a runner
/// that sends `speeker` must hear about it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnFields {
    round: u32,
    speaker: String,
    text: String,
    #[serde(default)]
    time: Option<Time>,
}

impl<'de> Deserialize<'de> for Turn {
    /// Only a JSON object: the derived impl would also take an array
    /// (`[1, "alice", "..."]`), which no runner means to send.
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Turn, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Turn;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a debate turn object {\"round\", \"speaker\", \"text\"} (and an optional \"time\")",
                )
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<Turn, A::Error> {
                let t = TurnFields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Turn {
                    round: t.round,
                    speaker: t.speaker,
                    text: t.text,
                    time: t.time,
                })
            }
        }
        d.deserialize_map(Object)
    }
}

/// One source ready to ingest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInput {
    /// Documents: the path as given. Debate turns: `path#N`, N the line number.
    pub id: String,
    pub text: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
    /// When it was said or written.
    pub time: Option<Time>,
}

/// A parsed input file.
#[derive(Clone, Debug)]
pub struct InputFile {
    pub path: PathBuf,
    pub kind: ScopeKind,
    pub sources: Vec<SourceInput>,
    pub bytes: u64,
}

impl InputFile {
    /// One source that did not come from a file of its own (an appended turn, a document
    /// posted over HTTP).
    pub fn single(kind: ScopeKind, path: &str, input: SourceInput) -> InputFile {
        InputFile {
            path: PathBuf::from(path),
            kind,
            bytes: input.text.len() as u64,
            sources: vec![input],
        }
    }
}

/// The kind a file is read as when `--kind` is not given: `.jsonl` is a debate.
pub fn guess_kind(path: &Path) -> ScopeKind {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") | Some("ndjson") => ScopeKind::Debate,
        _ => ScopeKind::Doc,
    }
}

/// Reads and validates one input file of at most `max_bytes` bytes (a bigger one is
/// refused before it is read: see [`check_size`]).
pub fn read_file(path: &Path, kind: ScopeKind, max_bytes: u64) -> Result<InputFile> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        err: source,
    };
    let name = path.display().to_string();
    let md = std::fs::metadata(path).map_err(io)?;
    if md.is_dir() {
        return Err(Error::invalid(format!(
            "{} is a directory: pass the files in it (e.g. {}/*.md)",
            path.display(),
            path.display()
        )));
    }
    check_size(&name, md.len(), max_bytes)?;
    // The size is checked again on what is read: the file may grow meanwhile.
    let mut bytes = Vec::with_capacity(usize::try_from(md.len()).unwrap_or(0));
    std::fs::File::open(path)
        .and_then(|f| f.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(io)?;
    check_size(&name, bytes.len() as u64, max_bytes)?;
    let text = decode_utf8(&name, bytes)?;
    let n = text.len() as u64;
    let sources = match kind {
        ScopeKind::Doc => vec![document(&name, text)?],
        ScopeKind::Debate => debate(&name, &text)?,
    };
    Ok(InputFile {
        path: path.to_path_buf(),
        kind,
        sources,
        bytes: n,
    })
}

/// Refuses a source of more than `max_bytes` bytes (`ingest.max_source_mb`). An ingest
/// holds a source's text, its chunks and their store writes in memory at once, so the
/// limit is what bounds its memory.
pub fn check_size(name: &str, bytes: u64, max_bytes: u64) -> Result<()> {
    if bytes <= max_bytes {
        return Ok(());
    }
    let mb = |b: u64| b as f64 / f64::from(1 << 20);
    Err(Error::invalid(format!(
        "{name} is {:.1} MB, over the limit of {:.0} MB for one source (ingest.max_source_mb): \
         split it into smaller files, or raise the limit",
        mb(bytes),
        mb(max_bytes)
    )))
}

/// A JSON Lines file given as a document is almost always a debate transcript sent to
/// the wrong kind of scope, where it would be cut into chunks of JSON. It is refused when
/// its name ends in `.jsonl` or `.ndjson`, or when its first line is a JSON object with
/// the fields of a turn (`round`, `speaker`, `text`).
pub fn check_not_debate(id: &str, text: &str) -> Result<()> {
    let how = "ingest it as a debate instead (`strata ingest --scope NAME --kind debate FILE`; \
               over HTTP, POST its turns to /api/v1/debates/NAME/turns)";
    let ext = Path::new(id)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if let Some(ext @ ("jsonl" | "ndjson")) = ext.as_deref() {
        return Err(Error::invalid(format!(
            "{id} is named like a debate transcript (.{ext}), not a document: {how}, \
             or rename it if it really is a document"
        )));
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if looks_like_turn(first) {
        return Err(Error::invalid(format!(
            "{id} looks like a debate transcript (its first line is a turn \
             {{\"round\", \"speaker\", \"text\"}}), not a document: {how}"
        )));
    }
    Ok(())
}

/// Whether `line` is a JSON object with (at least) the fields of a turn. Parsed without
/// building the values, so a huge line costs no memory.
fn looks_like_turn(line: &str) -> bool {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "round")]
        _round: serde::de::IgnoredAny,
        #[serde(rename = "speaker")]
        _speaker: serde::de::IgnoredAny,
        #[serde(rename = "text")]
        _text: serde::de::IgnoredAny,
    }
    line.trim_start().starts_with('{') && serde_json::from_str::<Fields>(line).is_ok()
}

/// Validates bytes as UTF-8, naming the first bad byte.
pub fn decode_utf8(name: &str, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        Error::invalid(format!(
            "{name} is not valid UTF-8: bad byte at offset {at} (line {line}); convert it first, e.g. with iconv"
        ))
    })
}

/// The first control character of `text` other than tab, line feed, carriage return and
/// form feed (a page break in many plain-text files): its byte offset and the character.
/// C1 controls (U+0080..U+009F, usually text decoded as the wrong code page) count too.
fn control_char(text: &str) -> Option<(usize, char)> {
    let b = text.as_bytes();
    // A byte scan: every control character is one byte below 0x20, 0x7F, or 0xC2 followed
    // by 0x80..=0x9F in UTF-8 (a 50 MB document is checked in milliseconds).
    let at = b.iter().enumerate().position(|(i, &c)| {
        (c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r' | 0x0c))
            || c == 0x7f
            || (c == 0xc2 && b.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    })?;
    Some((at, text[at..].chars().next()?))
}

/// Text is ground truth for citations, so it is kept byte for byte: a control character
/// (NUL, escape, a stray C1 code) is refused, not silently stripped.
fn check_text(what: &str, text: &str) -> Result<()> {
    if let Some((at, c)) = control_char(text) {
        let line = text.as_bytes()[..at]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        return Err(Error::invalid(format!(
            "{what} contains the control character U+{:04X} at byte offset {at} (line {line}); \
             citations quote text byte for byte, so remove it first (e.g. with tr -d)",
            c as u32
        )));
    }
    Ok(())
}

/// A document source: its text must not be blank or hold control characters.
pub fn document(id: &str, text: String) -> Result<SourceInput> {
    if text.trim().is_empty() {
        return Err(Error::invalid(format!("{id} is empty: nothing to ingest")));
    }
    check_text(id, &text)?;
    Ok(SourceInput {
        id: id.to_string(),
        text,
        round: None,
        speaker: None,
        time: None,
    })
}

/// Validates one debate turn; errors name it by `id`.
pub fn turn_input(id: String, t: Turn) -> Result<SourceInput> {
    check_turn(&t).map_err(|e| Error::invalid(format!("{id}: {e}")))?;
    Ok(SourceInput {
        id,
        text: t.text,
        round: Some(t.round),
        speaker: Some(t.speaker.trim().to_string()),
        time: t.time,
    })
}

/// What is wrong with a turn, if anything (the caller says which turn).
fn check_turn(t: &Turn) -> Result<()> {
    if t.speaker.trim().is_empty() {
        return Err(Error::invalid("the speaker is empty"));
    }
    if let Some(c) = t.speaker.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "the speaker contains the control character U+{:04X}",
            c as u32
        )));
    }
    if t.text.trim().is_empty() {
        return Err(Error::invalid("the text is empty"));
    }
    check_text("the text", &t.text)
}

/// Parses a debate transcript: one JSON turn per line; blank lines are skipped.
pub fn debate(name: &str, text: &str) -> Result<Vec<SourceInput>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let t: Turn = serde_json::from_str(line).map_err(|e| {
            // serde_json ends its message with "at line 1 column C": the line is ours.
            let msg = e.to_string();
            let msg = msg.rsplit_once(" at line ").map_or(msg.as_str(), |(m, _)| m);
            Error::invalid(format!(
                "{name} line {n}, column {}: not a debate turn {{\"round\", \"speaker\", \"text\"[, \"time\"]}}: {msg}",
                e.column().max(1)
            ))
        })?;
        check_turn(&t).map_err(|e| Error::invalid(format!("{name} line {n}: {e}")))?;
        out.push(turn_input(format!("{name}#{n}"), t)?);
    }
    if out.is_empty() {
        return Err(Error::invalid(format!(
            "{name} is empty: no debate turns in it"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debate_errors_name_the_line() {
        let t = "{\"round\":1,\"speaker\":\"a\",\"text\":\"hi\"}\n\n{\"round\":2,\"text\":\"x\"}\n";
        let e = debate("d.jsonl", t).unwrap_err().to_string();
        assert!(e.contains("d.jsonl line 3"), "{e}");
        assert!(e.contains("speaker"), "{e}");
        let ok = debate("d.jsonl", t.lines().next().unwrap()).unwrap();
        assert_eq!(ok[0].id, "d.jsonl#1");
    }

    #[test]
    fn debate_transcripts_are_not_documents() {
        let turn = "{\"round\":1,\"speaker\":\"a\",\"text\":\"hi\"}\n";
        for (id, text, why) in [
            (
                "d.jsonl",
                "plain words",
                "named like a debate transcript (.jsonl)",
            ),
            (
                "D.NDJSON",
                "plain words",
                "named like a debate transcript (.ndjson)",
            ),
            ("d.txt", turn, "looks like a debate transcript"),
            (
                "d",
                &format!("\n  \n {turn}"),
                "looks like a debate transcript",
            ),
            (
                "d.md",
                "{\"text\":\"x\",\"speaker\":\"b\",\"round\":2,\"mood\":1}",
                "looks like",
            ),
        ] {
            let e = check_not_debate(id, text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{id} ")) && e.contains(why), "{e}");
            assert!(e.contains("--kind debate") && !e.contains('\n'), "{e}");
        }
        // JSON that is no turn, a turn that is not first, and prose are documents.
        for text in [
            "{\"round\":1,\"text\":\"no speaker\"}",
            "[1, \"a\", \"t\"]",
            &format!("# Notes\n{turn}"),
            "round speaker text",
        ] {
            check_not_debate("notes.md", text).unwrap();
        }
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.txt");
        std::fs::write(&p, "word ".repeat(1000)).unwrap();
        let e = read_file(&p, ScopeKind::Doc, 4999).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "big.txt is 0.0 MB, over the limit of 0 MB for one source (ingest.max_source_mb): \
                 split it into smaller files, or raise the limit"
            ),
            "{e}"
        );
        assert_eq!(read_file(&p, ScopeKind::Doc, 5000).unwrap().bytes, 5000);
        let e = check_size("x.md", 100 << 20, 64 << 20)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "x.md is 100.0 MB, over the limit of 64 MB for one source (ingest.max_source_mb): \
             split it into smaller files, or raise the limit"
        );
    }

    #[test]
    fn invalid_utf8_names_the_offset() {
        let e = decode_utf8("x.txt", b"ok\nbad \xff here".to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("offset 7") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn control_characters_are_refused_with_their_offset() {
        let e = document("a.md", "ok\nbad\0here".into())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("a.md contains the control character U+0000 at byte offset 6 (line 2)"),
            "{e}"
        );
        for (text, code, at) in [
            ("esc \u{1b}[31m", "U+001B", 4),
            ("del \u{7f}", "U+007F", 4),
            ("cp1252 quote \u{92}s", "U+0092", 13),
            ("vertical \u{b} tab", "U+000B", 9),
        ] {
            let e = document("x", text.into()).unwrap_err().to_string();
            assert!(
                e.contains(code) && e.contains(&format!("byte offset {at} ")),
                "{text:?}: {e}"
            );
        }
        // Tab, line ends, form feed and other non-ASCII text are text.
        for ok in ["a\tb\r\nc\n", "page one\u{c}page two", "café ¢ — \u{a0}"] {
            document("x", ok.into()).unwrap();
        }

        let turn = |speaker: &str, text: &str| Turn {
            round: 1,
            speaker: speaker.into(),
            text: text.into(),
            time: None,
        };
        let e = turn_input("d#turn-3".into(), turn("alice", "hi\0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "d#turn-3: the text contains the control character U+0000 at byte offset 2"
            ),
            "{e}"
        );
        let e = turn_input("d#turn-3".into(), turn("al\0ice", "hi"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the speaker contains the control character U+0000"),
            "{e}"
        );
        // In a transcript the JSON escape is decoded first; the line is named once.
        let e = debate(
            "d.jsonl",
            "{\"round\":1,\"speaker\":\"a\",\"text\":\"x\\u0000y\"}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with(
                "d.jsonl line 1: the text contains the control character U+0000 at byte offset 1"
            ),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn a_turn_is_an_object_with_known_fields_only() {
        let ok: Turn = serde_json::from_str(r#"{"round":1,"speaker":"a","text":"t"}"#).unwrap();
        assert_eq!(ok.text, "t");
        let e = serde_json::from_str::<Turn>(r#"[1, "a", "t"]"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid type: sequence, expected a debate turn object"),
            "{e}"
        );
        let e = serde_json::from_str::<Turn>(r#""round 1""#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a debate turn object"), "{e}");
        let e = serde_json::from_str::<Turn>(r#"{"round":1,"speaker":"a","text":"t","mood":"x"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `mood`"), "{e}");

        let t = "{\"round\":1,\"speaker\":\"a\",\"text\":\"hi\"}\n[2, \"b\", \"x\"]\n";
        let e = debate("d.jsonl", t).unwrap_err().to_string();
        assert!(
            e.starts_with("d.jsonl line 2, column 1: not a debate turn")
                && e.contains("invalid type: sequence"),
            "{e}"
        );
        let t = "{\"round\":1,\"speaker\":\"a\",\"text\":\"hi\",\"speeker\":\"b\"}\n";
        let e = debate("d.jsonl", t).unwrap_err().to_string();
        assert!(
            e.starts_with("d.jsonl line 1, column ") && e.contains("unknown field `speeker`"),
            "{e}"
        );
        assert!(!e.contains("at line"), "{e}");
    }
}
