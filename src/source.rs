//! Reading inputs: document files and debate transcripts (JSON Lines), validated before
//! anything is written, so a bad file changes nothing.

use crate::error::{Error, Result};
use crate::store::ScopeKind;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One debate turn as a debate runner sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub round: u32,
    pub speaker: String,
    pub text: String,
}

/// One source ready to ingest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInput {
    /// Documents: the path as given. Debate turns: `path#N`, N the line number.
    pub id: String,
    pub text: String,
    pub round: Option<u32>,
    pub speaker: Option<String>,
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

/// Reads and validates one input file.
pub fn read_file(path: &Path, kind: ScopeKind) -> Result<InputFile> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        err: source,
    };
    let md = std::fs::metadata(path).map_err(io)?;
    if md.is_dir() {
        return Err(Error::invalid(format!(
            "{} is a directory: pass the files in it (e.g. {}/*.md)",
            path.display(),
            path.display()
        )));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let text = decode_utf8(&path.display().to_string(), bytes)?;
    let n = text.len() as u64;
    let sources = match kind {
        ScopeKind::Doc => vec![document(&path.display().to_string(), text)?],
        ScopeKind::Debate => debate(&path.display().to_string(), &text)?,
    };
    Ok(InputFile {
        path: path.to_path_buf(),
        kind,
        sources,
        bytes: n,
    })
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

/// A document source: its text must not be blank.
pub fn document(id: &str, text: String) -> Result<SourceInput> {
    if text.trim().is_empty() {
        return Err(Error::invalid(format!("{id} is empty: nothing to ingest")));
    }
    Ok(SourceInput {
        id: id.to_string(),
        text,
        round: None,
        speaker: None,
    })
}

/// Validates one debate turn.
pub fn turn_input(id: String, t: Turn) -> Result<SourceInput> {
    if t.speaker.trim().is_empty() {
        return Err(Error::invalid(format!("{id}: the speaker is empty")));
    }
    if t.text.trim().is_empty() {
        return Err(Error::invalid(format!("{id}: the text is empty")));
    }
    Ok(SourceInput {
        id,
        text: t.text,
        round: Some(t.round),
        speaker: Some(t.speaker.trim().to_string()),
    })
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
            Error::invalid(format!(
                "{name} line {n}: not a debate turn {{\"round\", \"speaker\", \"text\"}}: {e}"
            ))
        })?;
        out.push(
            turn_input(format!("{name}#{n}"), t)
                .map_err(|e| Error::invalid(format!("{name} line {n}: {e}")))?,
        );
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
    fn invalid_utf8_names_the_offset() {
        let e = decode_utf8("x.txt", b"ok\nbad \xff here".to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("offset 7") && e.contains("line 2"), "{e}");
    }
}
