//! Results of pure functions of a text, remembered by a 128-bit hash of its bytes.
//!
//! Token counts: a build counts the same sentences at every level (an extractive summary
//! is made of its inputs' sentences) and each output twice (to fit it, then for its node),
//! and BPE was a fifth of the offline build. A passage's sentences with their term counts
//! and facts (`text::read_sentences`), shared behind an `Arc`: the compressor reads a FULL
//! chunk for its DETAILED and the tagger reads it again for its METADATA right after.
//! (Remembering them per sentence, cloned out, cost more than it saved, and 100 MB more.)
//! A [`Memo`] is bounded: a shard that fills starts again.

use std::collections::HashMap;
use std::sync::Mutex;

const SHARDS: usize = 16;

/// Texts longer than this are never remembered (hashing them costs more than it saves
/// when nothing is the same twice).
pub const MAX_BYTES: usize = 1 << 16;

pub struct Memo<V> {
    shards: [Mutex<HashMap<u128, V>>; SHARDS],
    /// Entries a shard keeps before it starts again.
    kept: usize,
}

impl<V: Clone> Memo<V> {
    /// A memo of at most about `kept` entries.
    pub fn new(kept: usize) -> Memo<V> {
        Memo {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            kept: (kept / SHARDS).max(1),
        }
    }

    /// `f(text)`, computed at most once while remembered.
    pub fn get(&self, text: &str, f: impl FnOnce(&str) -> V) -> V {
        if text.len() > MAX_BYTES {
            return f(text);
        }
        let hash = blake3::hash(text.as_bytes());
        let key = u128::from_le_bytes(hash.as_bytes()[..16].try_into().expect("16 bytes"));
        let shard = &self.shards[(key as usize) % SHARDS];
        let lock = || shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = lock().get(&key) {
            return v.clone();
        }
        let v = f(text);
        let mut m = lock();
        if m.len() >= self.kept {
            m.clear();
        }
        m.insert(key, v.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_computes_once_and_forgets_when_full() {
        let m: Memo<usize> = Memo::new(SHARDS * 2);
        let calls = std::cell::Cell::new(0);
        let f = |t: &str| {
            calls.set(calls.get() + 1);
            t.len()
        };
        assert_eq!(m.get("abc", f), 3);
        assert_eq!(m.get("abc", f), 3);
        assert_eq!(calls.get(), 1);
        for i in 0..1000 {
            m.get(&i.to_string(), f);
        }
        assert!(m.shards.iter().all(|s| s.lock().unwrap().len() <= 2));
        let long = "x".repeat(MAX_BYTES + 1);
        let before = calls.get();
        m.get(&long, f);
        m.get(&long, f);
        assert_eq!(calls.get(), before + 2);
    }
}
