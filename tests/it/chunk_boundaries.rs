//! Chunk boundaries of ordinary text are frozen: node ids derive from them and the
//! evaluation floors depend on them. The bundled data (`data/debate.jsonl` turns and
//! `data/docs/*.txt`, as given and rewritten as Markdown) is chunked at budgets from 16 to
//! 1,200 tokens, and a hash of every chunk (span, tokens, section, headings) is compared
//! with the one the chunker produced before it was made linear-time (issue 9).

use crate::support::{debate_path, doc_paths};
use strata::chunk::{Structure, chunk};

/// Computed with the chunker of commit aa47480 (before the linear-time rewrite), by this
/// very test. Change it only when a change of chunk boundaries is intended — and then say
/// so in the commit: every stored FULL node id changes with it.
const BOUNDARIES_BLAKE3: &str = "a6fef87f4753b603514f5c88eec57090c2b2efbcb7e20f2160b88689d07222aa";

const BUDGETS: &[usize] = &[16, 24, 32, 48, 64, 100, 150, 200, 300, 400, 512, 800, 1200];

/// The bundled texts: `(name, text, structures to chunk it with)`.
fn corpus() -> Vec<(String, String, Vec<Structure>)> {
    let both = vec![Structure::Document, Structure::Turn];
    let mut out = Vec::new();
    let jsonl = std::fs::read_to_string(debate_path()).unwrap();
    let mut turns = Vec::new();
    for (i, line) in jsonl.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = v["text"].as_str().unwrap().to_string();
        out.push((format!("debate#{}", i + 1), text.clone(), both.clone()));
        turns.push(text);
    }
    out.push(("debate-joined".into(), turns.join("\n\n"), both.clone()));
    for p in doc_paths() {
        let text = std::fs::read_to_string(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        out.push((
            format!("{name}.md"),
            markdown(&text),
            vec![Structure::Document],
        ));
        out.push((name, text, both.clone()));
    }
    out
}

/// The same prose as a Markdown document: leading blank lines, `#`/`##`/`###` headings
/// between paragraphs and a fenced block with a `#` line inside.
fn markdown(text: &str) -> String {
    let mut md = String::from("\n\n");
    for (i, para) in text.split("\n\n").enumerate() {
        if i % 9 == 0 {
            md.push_str(&format!("# Chapter {}\n\n", i / 9 + 1));
        } else if i % 3 == 0 {
            md.push_str(&format!("## Part {i}\n\n"));
        } else if i % 7 == 0 {
            md.push_str(&format!("### Note {i} ###\n"));
        }
        if i % 11 == 5 {
            md.push_str("```\n# not a heading\n\nquoted text\n```\n\n");
        }
        md.push_str(para);
        md.push_str("\n\n");
    }
    md
}

#[test]
fn chunk_boundaries_of_the_bundled_data_are_unchanged() {
    let mut h = blake3::Hasher::new();
    let mut n = 0usize;
    for (name, text, structures) in corpus() {
        for structure in structures {
            for &budget in BUDGETS {
                h.update(format!("{name} {structure:?} {budget}\n").as_bytes());
                for c in chunk(&text, structure, budget) {
                    h.update(
                        format!(
                            "{} {} {} {} {:?}\n",
                            c.start, c.end, c.tokens, c.section, c.headings
                        )
                        .as_bytes(),
                    );
                    n += 1;
                }
            }
        }
    }
    let got = h.finalize().to_hex().to_string();
    assert_eq!(
        got, BOUNDARIES_BLAKE3,
        "chunk boundaries of the bundled data changed ({n} chunks hashed)"
    );
}
