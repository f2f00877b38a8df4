//! A static embedder (feature `static-embed`): one vector per token of a tokenizer's
//! vocabulary, distilled once from a sentence encoder (`strata embed-distill`, see
//! [`super::local::distill`]); a text's vector is the mean of its tokens' vectors,
//! L2-normalised — what model2vec's `StaticModel` does. No transformer runs at inference:
//! the cost is the tokenizer's (a build embedded 1,170 nodes a second on two cores, store
//! included), where all-MiniLM-L6-v2 embeds about 4. The price is word order and context
//! (a token has one vector whatever surrounds it).
//!
//! A table directory holds:
//! - `static.safetensors`: one F32 tensor `embeddings`, `[tokens, dim]`, row `i` for token
//!   id `i` (a zero row for a token that has no vector);
//! - `tokenizer.json`: the tokenizer the ids come from (its truncation and padding are
//!   ignored: a text is read whole);
//! - `static.json`: where the table came from (written by `embed-distill`; not read here).

use super::embed::{Embedder, normalize};
use super::{BoxFuture, ModelError, spawn_cpu, usage};
use crate::error::{Error, Result};
use std::path::Path;
use std::sync::Arc;
use tokenizers::{Encoding, Tokenizer};

/// The table of token vectors.
pub const TABLE_FILE: &str = "static.safetensors";
/// The tensor of [`TABLE_FILE`] that holds it.
pub const TENSOR: &str = "embeddings";
/// The tokenizer, a copy of the source model's.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Provenance: source model, hash of its weights, how the table was made.
pub const META_FILE: &str = "static.json";

/// A token table and its tokenizer: the whole model.
pub(crate) struct Table {
    tokenizer: Tokenizer,
    /// `rows × dim`, row-major.
    vectors: Vec<f32>,
    dim: usize,
    /// The unknown token's id: skipped like a special token (model2vec drops it too), and
    /// the vector of a text none of whose tokens has one (an empty text).
    unk: Option<u32>,
}

/// A static embedder loaded from a directory made by `strata embed-distill`.
pub struct StaticEmbedder {
    table: Arc<Table>,
    /// `static:NAME@HASH`: the directory's name and a hash of the table and the tokenizer,
    /// so moving the files keeps their vectors and another table never shares them.
    identity: String,
    /// The name usage is recorded under.
    name: String,
    batch: usize,
}

fn load_err(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::Config(format!("embed.model static:{}: {what}", dir.display()))
}

impl StaticEmbedder {
    pub fn load(dir: &Path, batch: usize) -> Result<StaticEmbedder> {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| {
                load_err(
                    dir,
                    format!(
                        "cannot read {name} ({e}); `strata embed-distill --from MODEL --out DIR` makes the directory"
                    ),
                )
            })
        };
        let table_bytes = read(TABLE_FILE)?;
        let tokenizer_bytes = read(TOKENIZER_FILE)?;
        let table =
            Table::from_bytes(&table_bytes, &tokenizer_bytes).map_err(|e| load_err(dir, e))?;
        let mut hash = blake3::Hasher::new();
        hash.update(&(table_bytes.len() as u64).to_le_bytes());
        hash.update(&table_bytes);
        hash.update(&tokenizer_bytes);
        let hash = hash.finalize().to_hex();
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("table")
            .to_string();
        Ok(StaticEmbedder {
            table: Arc::new(table),
            identity: format!("static:{name}@{}", &hash[..16]),
            name: format!("static:{name}"),
            batch: batch.max(1),
        })
    }

    /// Dimensions of the vectors.
    pub fn dim(&self) -> usize {
        self.table.dim
    }
}

impl Table {
    /// A table from the bytes of [`TABLE_FILE`] and [`TOKENIZER_FILE`]; the error names
    /// the file and what is wrong with it, in one line.
    pub(crate) fn from_bytes(
        table: &[u8],
        tokenizer_json: &[u8],
    ) -> std::result::Result<Table, String> {
        let mut tokenizer =
            Tokenizer::from_bytes(tokenizer_json).map_err(|e| format!("{TOKENIZER_FILE}: {e}"))?;
        tokenizer
            .with_truncation(None)
            .map_err(|e| format!("{TOKENIZER_FILE}: {e}"))?;
        tokenizer.with_padding(None);
        let tensors = safetensors::SafeTensors::deserialize(table)
            .map_err(|e| format!("{TABLE_FILE}: {e}"))?;
        let view = tensors
            .tensor(TENSOR)
            .map_err(|e| format!("{TABLE_FILE}: tensor `{TENSOR}`: {e}"))?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(format!(
                "{TABLE_FILE}: tensor `{TENSOR}` is {:?}, expected F32",
                view.dtype()
            ));
        }
        let (rows, dim) = match *view.shape() {
            [rows, dim] if rows > 0 && dim > 0 => (rows, dim),
            ref s => {
                return Err(format!(
                    "{TABLE_FILE}: tensor `{TENSOR}` has shape {s:?}, expected [tokens, dim]"
                ));
            }
        };
        let tokens = tokenizer.get_vocab_size(true);
        if rows != tokens {
            return Err(format!(
                "{TABLE_FILE} has {rows} rows, {TOKENIZER_FILE} has {tokens} tokens: not the tokenizer the table was made with"
            ));
        }
        let vectors: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if vectors.iter().any(|x| !x.is_finite()) {
            return Err(format!("{TABLE_FILE}: a value is not finite"));
        }
        let unk = unk_token(tokenizer_json).and_then(|t| tokenizer.token_to_id(&t));
        Ok(Table {
            tokenizer,
            vectors,
            dim,
            unk,
        })
    }

    fn row(&self, id: u32) -> Option<&[f32]> {
        let at = id as usize * self.dim;
        self.vectors.get(at..at + self.dim)
    }

    /// Unit vectors of `texts`, and the tokens read.
    pub(crate) fn embed(
        &self,
        texts: Vec<String>,
    ) -> std::result::Result<(Vec<Vec<f32>>, u64), String> {
        let enc = self
            .tokenizer
            .encode_batch(texts, false)
            .map_err(|e| format!("tokenizer: {e}"))?;
        let mut tokens = 0;
        let mut out = Vec::with_capacity(enc.len());
        for (i, e) in enc.iter().enumerate() {
            let (v, n) = self.mean(e)?;
            tokens += n;
            out.push(normalize(v).ok_or_else(|| {
                format!("text {i}: none of its tokens has a vector in {TABLE_FILE}")
            })?);
        }
        Ok((out, tokens))
    }

    /// The mean of the vectors of `e`'s tokens (special and unknown tokens skipped; the
    /// unknown token's vector when nothing is left), and the tokens counted.
    fn mean(&self, e: &Encoding) -> std::result::Result<(Vec<f32>, u64), String> {
        let mut sum = vec![0f64; self.dim];
        let mut n = 0u64;
        for (&id, &special) in e.get_ids().iter().zip(e.get_special_tokens_mask()) {
            if special != 0 || Some(id) == self.unk {
                continue;
            }
            let row = self
                .row(id)
                .ok_or_else(|| format!("token id {id} is past the end of {TABLE_FILE}"))?;
            for (s, x) in sum.iter_mut().zip(row) {
                *s += *x as f64;
            }
            n += 1;
        }
        if n == 0
            && let Some(row) = self.unk.and_then(|u| self.row(u))
        {
            return Ok((row.to_vec(), e.get_ids().len() as u64));
        }
        let d = n.max(1) as f64;
        Ok((
            sum.into_iter().map(|s| (s / d) as f32).collect(),
            e.get_ids().len() as u64,
        ))
    }
}

/// The unknown token of a `tokenizer.json`'s model (WordPiece, BPE, WordLevel: a string;
/// Unigram names an id instead, looked up in its vocabulary).
fn unk_token(tokenizer_json: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(tokenizer_json).ok()?;
    let model = v.get("model")?;
    if let Some(t) = model.get("unk_token").and_then(|t| t.as_str()) {
        return Some(t.to_string());
    }
    let id = model.get("unk_id")?.as_u64()? as usize;
    Some(model.get("vocab")?.get(id)?.get(0)?.as_str()?.to_string())
}

impl Embedder for StaticEmbedder {
    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn batch(&self) -> usize {
        self.batch
    }

    fn embed(
        &self,
        texts: Vec<String>,
        _priority: u8,
    ) -> BoxFuture<'_, std::result::Result<Vec<Vec<f32>>, ModelError>> {
        Box::pin(async move {
            usage::record(&self.name, |u| {
                u.calls += 1;
                u.requests += 1;
            });
            let table = self.table.clone();
            let r = spawn_cpu(move || table.embed(texts))
                .await
                .map_err(|p| ModelError::Failed(format!("static embedding panicked: {p}")))?;
            match r {
                Ok((vectors, tokens)) => {
                    usage::record(&self.name, |u| u.prompt_tokens += tokens);
                    Ok(vectors)
                }
                Err(e) => {
                    usage::record(&self.name, |u| u.failed += 1);
                    Err(ModelError::BadOutput(e))
                }
            }
        })
    }
}

/// Writes a table directory: `vectors` (`rows × dim`, row-major) as [`TABLE_FILE`], the
/// tokenizer as is, and `meta` as [`META_FILE`]. Files are written beside their final
/// names and renamed into place, so a directory is never left with half a table.
#[cfg_attr(not(any(test, feature = "local-embed")), allow(dead_code))]
pub(crate) fn write_table(
    out: &Path,
    vectors: &[f32],
    dim: usize,
    tokenizer_json: &[u8],
    meta: &serde_json::Value,
) -> Result<()> {
    let err = |what: &str, e: &dyn std::fmt::Display| {
        Error::Invalid(format!("embed-distill: {}: {what}: {e}", out.display()))
    };
    std::fs::create_dir_all(out).map_err(|e| err("cannot create the directory", &e))?;
    let bytes: Vec<u8> = vectors.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![vectors.len() / dim.max(1), dim],
        &bytes,
    )
    .map_err(|e| err(TABLE_FILE, &e))?;
    let put = |name: &str, write: &dyn Fn(&Path) -> std::result::Result<(), String>| {
        let tmp = out.join(format!(".{name}.tmp"));
        write(&tmp).map_err(|e| err(name, &e))?;
        std::fs::rename(&tmp, out.join(name)).map_err(|e| err(name, &e))
    };
    put(TABLE_FILE, &|p| {
        safetensors::serialize_to_file([(TENSOR, &view)], None, p).map_err(|e| e.to_string())
    })?;
    put(TOKENIZER_FILE, &|p| {
        std::fs::write(p, tokenizer_json).map_err(|e| e.to_string())
    })?;
    let meta = serde_json::to_vec_pretty(meta).map_err(|e| err(META_FILE, &e))?;
    put(META_FILE, &|p| {
        std::fs::write(p, &meta).map_err(|e| e.to_string())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: [&str; 6] = ["[UNK]", "[CLS]", "[SEP]", "cat", "dog", "sat"];

    /// A directory with a WordPiece tokenizer over [`VOCAB`] and a 2-dimensional table:
    /// `cat` = (1, 0), `dog` = (0, 1), `sat` = (3, 4), `[UNK]` = (-1, 0); specials (9, 9)
    /// so that reading one would show.
    fn table_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let vocab: serde_json::Map<String, serde_json::Value> = VOCAB
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), serde_json::json!(i)))
            .collect();
        let special = |id: usize| {
            serde_json::json!({"id": id, "content": VOCAB[id], "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true})
        };
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [special(1), special(2)],
            "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": null, "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": vocab},
        });
        std::fs::write(
            dir.path().join(TOKENIZER_FILE),
            serde_json::to_vec(&json).unwrap(),
        )
        .unwrap();
        let vectors = [-1.0, 0.0, 9.0, 9.0, 9.0, 9.0, 1.0, 0.0, 0.0, 1.0, 3.0, 4.0];
        let tokenizer = std::fs::read(dir.path().join(TOKENIZER_FILE)).unwrap();
        write_table(
            dir.path(),
            &vectors,
            2,
            &tokenizer,
            &serde_json::json!({"test": true}),
        )
        .unwrap();
        dir
    }

    fn embed(e: &StaticEmbedder, texts: &[&str]) -> Vec<Vec<f32>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(e.embed(texts.iter().map(|s| s.to_string()).collect(), 0))
            .unwrap()
    }

    #[test]
    fn a_text_is_the_normalised_mean_of_its_tokens() {
        let dir = table_dir();
        let e = StaticEmbedder::load(dir.path(), 64).unwrap();
        assert_eq!(e.dim(), 2);
        let v = embed(
            &e,
            &[
                "cat dog",
                "cat",
                "[CLS] cat [SEP] dog",
                "sat sat",
                "zebra cat",
                "",
                "zebra",
            ],
        );
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert_eq!(v[0], vec![h, h], "mean of (1,0) and (0,1), normalised");
        assert_eq!(v[1], vec![1.0, 0.0]);
        assert_eq!(v[2], v[0], "special tokens are skipped");
        assert_eq!(v[3], vec![0.6, 0.8]);
        assert_eq!(v[4], v[1], "an unknown word is skipped");
        assert_eq!(
            v[5],
            vec![-1.0, 0.0],
            "nothing known: the unknown token's vector"
        );
        assert_eq!(v[6], v[5]);
    }

    #[test]
    fn identity_names_the_directory_and_hashes_the_table() {
        let dir = table_dir();
        let a = StaticEmbedder::load(dir.path(), 0).unwrap();
        let name = dir.path().file_name().unwrap().to_str().unwrap();
        assert!(
            a.identity().starts_with(&format!("static:{name}@")),
            "{}",
            a.identity()
        );
        assert_eq!(a.identity().len(), format!("static:{name}@").len() + 16);
        assert_eq!(a.batch(), 1);
        // Moved: same identity. Another table: another one.
        let moved = tempfile::tempdir().unwrap();
        let to = moved.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for f in [TABLE_FILE, TOKENIZER_FILE] {
            std::fs::copy(dir.path().join(f), to.join(f)).unwrap();
        }
        assert_eq!(
            StaticEmbedder::load(&to, 8).unwrap().identity(),
            a.identity()
        );
        let tokenizer = std::fs::read(dir.path().join(TOKENIZER_FILE)).unwrap();
        let mut other = vec![0.5f32; 12];
        other[0] = -0.5;
        write_table(&to, &other, 2, &tokenizer, &serde_json::json!({})).unwrap();
        assert_ne!(
            StaticEmbedder::load(&to, 8).unwrap().identity(),
            a.identity()
        );
    }

    #[test]
    fn bad_directories_fail_in_one_line() {
        let dir = table_dir();
        let check = |want: &str| {
            let e = StaticEmbedder::load(dir.path(), 8)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'), "{e}");
        };
        let tokenizer = std::fs::read(dir.path().join(TOKENIZER_FILE)).unwrap();
        // A table for another vocabulary.
        write_table(
            dir.path(),
            &[1.0; 10],
            2,
            &tokenizer,
            &serde_json::json!({}),
        )
        .unwrap();
        check("static.safetensors has 5 rows, tokenizer.json has 6 tokens");
        // Not a table.
        std::fs::write(dir.path().join(TABLE_FILE), b"not a table").unwrap();
        check("static.safetensors: ");
        // Missing files.
        std::fs::remove_file(dir.path().join(TABLE_FILE)).unwrap();
        check("cannot read static.safetensors (");
        check("embed-distill");
        write_table(
            dir.path(),
            &[1.0; 12],
            2,
            &tokenizer,
            &serde_json::json!({}),
        )
        .unwrap();
        std::fs::remove_file(dir.path().join(TOKENIZER_FILE)).unwrap();
        check("cannot read tokenizer.json (");
    }
}
