//! In-process sentence embeddings (feature `local-embed`): a BERT sentence encoder such as
//! all-MiniLM-L6-v2 (`scripts/fetch-minilm.sh`), run with candle on the CPU. Texts are
//! tokenised (cut at [`MAX_TOKENS`] word pieces, the model's training length), encoded,
//! mean-pooled over the attention mask and L2-normalised — what sentence-transformers does
//! for this model. Inference runs on rayon, one batch at a time, never on the executor.

use super::embed::{Embedder, check_vectors};
use super::{BoxFuture, ModelError, spawn_cpu, usage};
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Word pieces per text (all-MiniLM-L6-v2's `max_seq_length`); the rest is not read.
pub const MAX_TOKENS: usize = 256;

/// Texts per forward pass, whatever `embed.batch` says: attention memory grows with the
/// batch (64 texts of 256 pieces peaked at 1.3 GB, 8 at 350 MB) and larger passes were
/// no faster on the CPU.
pub const PASS: usize = 8;

struct Inner {
    model: BertModel,
    tokenizer: Tokenizer,
}

/// A BERT sentence encoder loaded from `config.json`, `model.safetensors` and
/// `tokenizer.json` in one directory.
pub struct LocalEmbedder {
    inner: Arc<Inner>,
    /// `local:NAME@HASH`: the directory's name and a hash of the weights, so moving the
    /// files keeps their vectors and other weights never share them.
    identity: String,
    /// The name usage is recorded under.
    name: String,
    batch: usize,
    /// One inference at a time: a batch already uses every core.
    busy: tokio::sync::Mutex<()>,
}

fn load_err(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::Config(format!("embed.model local:{}: {what}", dir.display()))
}

/// What a model directory holds, loaded.
struct Loaded {
    model: BertModel,
    /// As the directory has it (no truncation or padding set yet).
    tokenizer: Tokenizer,
    tokenizer_bytes: Vec<u8>,
    /// blake3 of `model.safetensors`, hex.
    hash: String,
    /// The directory's name.
    name: String,
}

impl Loaded {
    fn read(dir: &Path) -> Result<Loaded> {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| {
                load_err(
                    dir,
                    format!("cannot read {name} ({e}); scripts/fetch-minilm.sh fetches the model"),
                )
            })
        };
        let config: Config = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| load_err(dir, format!("config.json: {e}")))?;
        let tokenizer_bytes = read("tokenizer.json")?;
        let tokenizer = Tokenizer::from_bytes(&tokenizer_bytes)
            .map_err(|e| load_err(dir, format!("tokenizer.json: {e}")))?;
        let weights = read("model.safetensors")?;
        let hash = blake3::hash(&weights).to_hex().to_string();
        let vb = VarBuilder::from_buffered_safetensors(weights, DTYPE, &Device::Cpu)
            .map_err(|e| load_err(dir, format!("model.safetensors: {e}")))?;
        let model = BertModel::load(vb, &config)
            .map_err(|e| load_err(dir, format!("model.safetensors: {e}")))?;
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("model")
            .to_string();
        Ok(Loaded {
            model,
            tokenizer,
            tokenizer_bytes,
            hash,
            name,
        })
    }
}

impl LocalEmbedder {
    pub fn load(dir: &Path, batch: usize) -> Result<LocalEmbedder> {
        let Loaded {
            model,
            mut tokenizer,
            hash,
            name,
            ..
        } = Loaded::read(dir)?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| load_err(dir, format!("tokenizer.json: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        Ok(LocalEmbedder {
            inner: Arc::new(Inner { model, tokenizer }),
            identity: format!("local:{name}@{}", &hash[..16]),
            name: format!("local:{name}"),
            batch: batch.max(1),
            busy: tokio::sync::Mutex::new(()),
        })
    }
}

impl Inner {
    /// Mean-pooled, normalised vectors of `texts`, and the word pieces read.
    fn run(&self, texts: Vec<String>) -> std::result::Result<(Vec<Vec<f32>>, u64), String> {
        let n = texts.len();
        let enc = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| format!("tokenizer: {e}"))?;
        let len = enc.first().map_or(0, |e| e.get_ids().len());
        let flat = |f: &dyn Fn(&tokenizers::Encoding) -> &[u32]| -> Vec<u32> {
            enc.iter().flat_map(|e| f(e).iter().copied()).collect()
        };
        let t = |v: Vec<u32>| Tensor::from_vec(v, (n, len), &Device::Cpu);
        let pieces: u64 = enc
            .iter()
            .map(|e| {
                e.get_attention_mask()
                    .iter()
                    .map(|&m| m as u64)
                    .sum::<u64>()
            })
            .sum();
        let go = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = t(flat(&|e| e.get_ids()))?;
            let types = t(flat(&|e| e.get_type_ids()))?;
            let mask = t(flat(&|e| e.get_attention_mask()))?;
            let hidden = self.model.forward(&ids, &types, Some(&mask))?;
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let sum = hidden.broadcast_mul(&mask)?.sum(1)?;
            let count = mask.sum(1)?.clamp(1e-9, f32::MAX)?;
            sum.broadcast_div(&count)?.to_vec2::<f32>()
        };
        let vectors = go().map_err(|e| format!("inference: {e}"))?;
        Ok((check_vectors(n, vectors)?, pieces))
    }
}

impl Embedder for LocalEmbedder {
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
            // Passes of texts of about the same length: a pass is padded to its longest
            // (194 State of the Union nodes: 51.6 s unsorted, 48.6 s sorted, docs/BENCHMARKS.md).
            let mut order: Vec<usize> = (0..texts.len()).collect();
            order.sort_by_key(|&i| texts[i].len());
            let mut out = vec![Vec::new(); texts.len()];
            for pass in order.chunks(PASS) {
                let _busy = self.busy.lock().await;
                usage::record(&self.name, |u| {
                    u.calls += 1;
                    u.requests += 1;
                });
                let inner = self.inner.clone();
                let batch = pass.iter().map(|&i| texts[i].clone()).collect();
                let r = spawn_cpu(move || inner.run(batch))
                    .await
                    .map_err(|p| ModelError::Failed(format!("local embedding panicked: {p}")))?;
                match r {
                    Ok((vectors, pieces)) => {
                        usage::record(&self.name, |u| u.prompt_tokens += pieces);
                        for (&i, v) in pass.iter().zip(vectors) {
                            out[i] = v;
                        }
                    }
                    Err(e) => {
                        usage::record(&self.name, |u| u.failed += 1);
                        return Err(ModelError::BadOutput(e));
                    }
                }
            }
            Ok(out)
        })
    }
}

/// Tokens per forward pass of [`distill`]: each a three-piece sequence, so a pass stays
/// small (a 512-token pass is 1,536 pieces, about six passes of [`PASS`] long texts).
const DISTILL_PASS: usize = 512;

/// model2vec's default SIF coefficient `a`: a token's vector is weighted `a / (a + p)`,
/// `p` its probability under Zipf's law by its rank in the vocabulary (BERT's WordPiece
/// vocabulary is roughly in order of frequency after its special and single-character
/// entries), so frequent tokens weigh little in a text's mean.
pub const SIF_COEFFICIENT: f64 = 1e-4;

/// What [`distill`] made.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Distilled {
    pub out: PathBuf,
    /// The source model's identity, `local:NAME@HASH`.
    pub source: String,
    /// Rows of the table (the tokenizer's vocabulary).
    pub tokens: usize,
    /// Rows left zero: BERT's `[unusedN]` placeholders, never produced by the tokenizer.
    pub unused: usize,
    pub dim: usize,
    pub elapsed_ms: u64,
}

/// Distils a static embedder ([`super::static_embed`]) from the BERT sentence encoder in
/// `from` and writes it to `out`, as model2vec does (without a vocabulary of its own):
///
/// 1. every token `t` of the tokenizer's vocabulary is encoded alone, as the sequence
///    `[SEP] t [CLS]` (model2vec puts the ends this way round: "works better on our
///    benchmarks"), and its vector is the mean of the model's three outputs;
/// 2. the vectors are centred (the part of model2vec's PCA that changes cosines; its
///    reduction to 256 dimensions is not done: 384 floats a token are 47 MB in all);
/// 3. each is weighted by [`SIF_COEFFICIENT`] over its Zipf probability, ranks counted
///    in id order without the `[unusedN]` placeholders, whose rows are left zero.
///
/// Deterministic: the same model gives the same table. `progress(done, total)` is called
/// after each pass.
pub fn distill(from: &Path, out: &Path, progress: &dyn Fn(usize, usize)) -> Result<Distilled> {
    let t0 = Instant::now();
    let Loaded {
        model,
        tokenizer,
        tokenizer_bytes,
        hash,
        name,
    } = Loaded::read(from)?;
    // The sequence's two ends: what the tokenizer puts around a text (model2vec reads them
    // off the encoding of one letter).
    let ends = tokenizer
        .encode("a", true)
        .map_err(|e| load_err(from, format!("tokenizer.json: {e}")))?;
    let (first, last) = match ends.get_ids() {
        [first, .., last] if ends.get_ids().len() >= 3 => (*first, *last),
        _ => {
            return Err(load_err(
                from,
                "tokenizer.json puts no [CLS] and [SEP] around a text: not a BERT sentence encoder's tokenizer",
            ));
        }
    };
    let rows = tokenizer.get_vocab_size(true);
    let mut table: Vec<f32> = Vec::new();
    let mut dim = 0;
    for start in (0..rows).step_by(DISTILL_PASS) {
        let end = (start + DISTILL_PASS).min(rows);
        let n = end - start;
        let ids: Vec<u32> = (start..end)
            .flat_map(|id| [last, id as u32, first])
            .collect();
        let go = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, (n, 3), &Device::Cpu)?;
            let types = ids.zeros_like()?;
            let mask = ids.ones_like()?;
            model
                .forward(&ids, &types, Some(&mask))?
                .mean(1)?
                .to_vec2::<f32>()
        };
        let vectors = go().map_err(|e| {
            Error::Model(ModelError::Failed(format!(
                "embed-distill: inference over tokens {start}..{end}: {e}"
            )))
        })?;
        for v in vectors {
            dim = v.len();
            table.extend(v);
        }
        progress(end, rows);
    }
    let unused: Vec<bool> = (0..rows as u32)
        .map(|id| {
            tokenizer
                .id_to_token(id)
                .is_some_and(|t| t.starts_with("[unused") && t.ends_with(']'))
        })
        .collect();
    weigh(&mut table, dim, &unused);
    let source = format!("local:{name}@{}", &hash[..16]);
    let meta = serde_json::json!({
        "format": "strata static embedder 1",
        "source": source,
        "source_dir": name,
        "source_weights_blake3": hash,
        "tokens": rows,
        "dim": dim,
        "pooling": "mean of the outputs of [SEP] token [CLS]",
        "centred": true,
        "sif_coefficient": SIF_COEFFICIENT,
        "zeroed": "[unusedN]",
    });
    super::static_embed::write_table(out, &table, dim, &tokenizer_bytes, &meta)?;
    Ok(Distilled {
        out: out.to_path_buf(),
        source,
        tokens: rows,
        unused: unused.iter().filter(|u| **u).count(),
        dim,
        elapsed_ms: t0.elapsed().as_millis() as u64,
    })
}

/// Steps 2 and 3 of [`distill`] on `table` (`rows × dim`): centre the rows not `skip`ped,
/// weight them by SIF over Zipf ranks, zero the others.
fn weigh(table: &mut [f32], dim: usize, skip: &[bool]) {
    let kept = skip.iter().filter(|s| !**s).count();
    if dim == 0 || kept == 0 {
        return;
    }
    let mut mean = vec![0f64; dim];
    for (row, _) in table.chunks(dim).zip(skip).filter(|(_, s)| !**s) {
        for (m, x) in mean.iter_mut().zip(row) {
            *m += *x as f64;
        }
    }
    mean.iter_mut().for_each(|m| *m /= kept as f64);
    let zipf_total: f64 = (0..kept).map(|r| 1.0 / (r as f64 + 2.0)).sum();
    let mut rank = 0usize;
    for (row, skip) in table.chunks_mut(dim).zip(skip) {
        if *skip {
            row.fill(0.0);
            continue;
        }
        let p = 1.0 / (rank as f64 + 2.0) / zipf_total;
        let w = SIF_COEFFICIENT / (SIF_COEFFICIENT + p);
        for (x, m) in row.iter_mut().zip(&mean) {
            *x = ((*x as f64 - m) * w) as f32;
        }
        rank += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs when `STRATA_MINILM_DIR` names the directory `scripts/fetch-minilm.sh` prints.
    #[test]
    fn minilm_ranks_a_paraphrase_above_an_unrelated_sentence() {
        let Ok(dir) = std::env::var("STRATA_MINILM_DIR") else {
            eprintln!("skipped: STRATA_MINILM_DIR is not set");
            return;
        };
        let e = LocalEmbedder::load(Path::new(&dir), 8).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let texts = [
            "How much did the harbour boat cost?",
            "The port authority paid 12 million euros for the new ferry.",
            "The old lighthouse still stands on the cliff.",
        ];
        let v = rt
            .block_on(e.embed(texts.iter().map(|s| s.to_string()).collect(), 0))
            .unwrap();
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|x| x.len() == 384));
        let cos = |a: &[f32], b: &[f32]| crate::model::embed::cosine(a, b).unwrap();
        assert!((cos(&v[0], &v[0]) - 1.0).abs() < 1e-5);
        assert!(cos(&v[0], &v[1]) > cos(&v[0], &v[2]) + 0.1, "{v:?}");
        // One text alone embeds as in a batch (padding does not leak into the mean).
        let one = rt.block_on(e.embed(vec![texts[1].to_string()], 0)).unwrap();
        assert!(cos(&one[0], &v[1]) > 0.9999);
    }

    /// Runs when `STRATA_MINILM_DIR` is set: distils the model (a minute or two on two
    /// cores) and asks the static embedder the question above.
    #[test]
    fn distilled_table_ranks_a_paraphrase_above_an_unrelated_sentence() {
        let Ok(dir) = std::env::var("STRATA_MINILM_DIR") else {
            eprintln!("skipped: STRATA_MINILM_DIR is not set");
            return;
        };
        let out = tempfile::tempdir().unwrap();
        let d = distill(Path::new(&dir), out.path(), &|_, _| ()).unwrap();
        assert_eq!((d.tokens, d.dim), (30522, 384));
        assert_eq!(d.unused, 994);
        let e = crate::model::static_embed::StaticEmbedder::load(out.path(), 64).unwrap();
        assert!(e.identity().starts_with("static:"));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let texts = [
            "How much did the harbour boat cost?",
            "The port authority paid 12 million euros for the new ferry.",
            "The old lighthouse still stands on the cliff.",
        ];
        let v = rt
            .block_on(e.embed(texts.iter().map(|s| s.to_string()).collect(), 0))
            .unwrap();
        let cos = |a: &[f32], b: &[f32]| crate::model::embed::cosine(a, b).unwrap();
        eprintln!(
            "static: paraphrase {:.3}, unrelated {:.3}",
            cos(&v[0], &v[1]),
            cos(&v[0], &v[2])
        );
        assert!(cos(&v[0], &v[1]) > cos(&v[0], &v[2]), "{v:?}");
    }

    #[test]
    fn weighing_centres_weights_by_rank_and_zeroes_the_skipped() {
        // Three rows of two dimensions; the middle one skipped.
        let mut t = vec![1.0, 2.0, 7.0, 7.0, 3.0, 2.0];
        weigh(&mut t, 2, &[false, true, false]);
        // Mean of the kept rows (2, 2); Zipf over ranks 0 and 1: p = (1/2, 1/3) / (5/6).
        let w = |p: f64| (SIF_COEFFICIENT / (SIF_COEFFICIENT + p)) as f32;
        let (w0, w1) = (w(0.6), w(0.4));
        let want = [-w0, 0.0, 0.0, 0.0, w1, 0.0];
        assert!(
            t.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9),
            "{t:?}"
        );
        assert!(w0 < w1, "the more frequent token weighs less");
    }
}
