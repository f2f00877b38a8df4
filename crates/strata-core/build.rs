//! Writes the cl100k_base tables that `token` loads at run time, in the form that loads
//! fastest: `bpe-openai` ships them as MessagePack and decodes all of its parts (~30 ms,
//! 15 MB) on a process's first count; a CLI command that counts one window waited for it.
//! Here the same tables are re-encoded with bincode (fixed-width integers: a slice copy
//! instead of a number-by-number parse), without the two parts no encoder strata uses
//! reads: the overlapping-match automata (only the appendable/prependable encoders read
//! them) and the bytes-to-token hash (only the table, bitfield and minimal encoders).
//! What is left — the tokens' bytes, the split and pair tables, the longest-match
//! automaton, the prefix links — is all that counting, `encode_via_backtracking` and
//! decoding read (`bpe` 0.2.3, `backtrack_encoder.rs`). ~7 MB, decoded in ~5 ms.
//! `token::tests` holds the result to tiktoken's counts and to `bpe-openai`'s own.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// `bpe::byte_pair_encoding::BytePairEncoding` 0.2.3 field by field, as serde sees it (the
/// automata are byte strings). Its serde layout is fixed by the version pinned in
/// `Cargo.toml`; a layout that does not decode as this fails the build here.
#[derive(Serialize, Deserialize)]
struct Tables {
    all_tokens: Vec<u8>,
    token_starts: Vec<u32>,
    bytes_hash_to_token: HashMap<u32, u32>,
    split_table: Vec<(u32, u32)>,
    pair_lookup: HashMap<(u32, u32), u32>,
    longest_searcher: Vec<u8>,
    overlapping_searcher: Vec<u8>,
    overlapping_searcher_rev: Vec<u8>,
    next_prefix_match: Vec<u32>,
    hash_factor: u64,
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let cfg = bincode::config::standard().with_fixed_int_encoding();
    let full = bincode::serde::encode_to_vec(&bpe_openai::cl100k_base().bpe, cfg)
        .expect("encode cl100k_base");
    let (mut t, read): (Tables, usize) = bincode::serde::decode_from_slice(&full, cfg)
        .expect("bpe's BytePairEncoding no longer has the layout build.rs expects");
    assert_eq!(
        read,
        full.len(),
        "bpe's BytePairEncoding has more fields than expected"
    );
    assert_eq!(
        t.token_starts.len(),
        t.split_table.len() + 1,
        "one start per token, and the end"
    );
    // An automaton of one pattern that never occurs in text: valid, tiny, never read.
    let empty = daachorse::DoubleArrayAhoCorasick::<u32>::new(["\u{0}\u{0}\u{0}\u{0}"])
        .expect("automaton")
        .serialize();
    t.overlapping_searcher = empty.clone();
    t.overlapping_searcher_rev = empty;
    t.bytes_hash_to_token = HashMap::new();
    let slim = bincode::serde::encode_to_vec(&t, cfg).expect("encode tables");
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR"))
        .join("cl100k_base.bincode");
    std::fs::write(&out, slim).expect("write the tables");
}
