//! Names that key the store: scopes (a debate id is a scope name) and source ids. Every entry
//! point — CLI, HTTP, library — validates them here and nowhere else, so a name the store
//! accepts is the same whichever way it arrived.
//!
//! The rules: not empty, bounded length, no control characters (NUL, newlines, escapes),
//! no leading or trailing whitespace (`" kb"` and `"kb"` would look alike in every listing).
//! The store's composite keys are length-prefixed (see `store::source_key`), so no name can
//! make two keys collide whatever characters it holds.

use crate::error::{Error, Result};

/// Longest scope name (bytes): a debate id or a collection name, not a document.
pub(crate) const MAX_SCOPE_BYTES: usize = 200;

/// Longest source id (bytes): a file path as given, or `scope#turn-N`.
pub(crate) const MAX_SOURCE_BYTES: usize = 1024;

/// Longest speaker name (bytes).
pub(crate) const MAX_SPEAKER_BYTES: usize = 200;

/// Checks a scope name (also a debate id).
pub fn scope(name: &str) -> Result<()> {
    check("scope name", name, MAX_SCOPE_BYTES)
}

/// Checks a source id (a document's path as given, a debate turn's id).
pub fn source(id: &str) -> Result<()> {
    check("source id", id, MAX_SOURCE_BYTES)
}

/// Checks a speaker's name.
pub fn speaker(name: &str) -> Result<()> {
    check("speaker", name, MAX_SPEAKER_BYTES)
}

fn check(what: &str, s: &str, max: usize) -> Result<()> {
    if s.trim().is_empty() {
        return Err(Error::invalid(format!("the {what} is empty")));
    }
    if s.len() > max {
        return Err(Error::invalid(format!(
            "the {what} is {} bytes long; at most {max} are allowed",
            s.len()
        )));
    }
    if let Some((at, c)) = s.char_indices().find(|(_, c)| c.is_control()) {
        return Err(Error::invalid(format!(
            "the {what} {} has a control character ({}) at byte {at}",
            printable(s),
            c.escape_unicode()
        )));
    }
    if s.trim() != s {
        return Err(Error::invalid(format!(
            "the {what} {} begins or ends with whitespace",
            printable(s)
        )));
    }
    Ok(())
}

/// The name quoted for an error message, control characters escaped and cut to a readable
/// length, so that the message stays one line.
fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(60).flat_map(char::escape_debug).collect();
    if s.chars().count() > 60 {
        out.push('…');
    }
    format!("\"{out}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(scope("kb").is_ok());
        assert!(scope("débat-2026_01").is_ok());
        assert!(source("data/docs/1961-Kennedy.txt").is_ok());
        for bad in [
            "",
            "   ",
            "kb\0x",
            "a\nb",
            "tab\there",
            " kb",
            "kb ",
            "\u{1b}[31m",
        ] {
            let e = scope(bad).unwrap_err().to_string();
            assert!(!e.contains('\n') && !e.contains('\0'), "{e:?}");
        }
        assert!(scope(&"x".repeat(MAX_SCOPE_BYTES)).is_ok());
        let e = scope(&"x".repeat(10_000)).unwrap_err().to_string();
        assert!(e.contains("10000 bytes"), "{e}");
        assert!(source(&"x".repeat(MAX_SOURCE_BYTES + 1)).is_err());
        let e = source("x\0a.md").unwrap_err().to_string();
        assert!(e.contains("\\0") && e.contains("byte 1"), "{e}");
    }
}
