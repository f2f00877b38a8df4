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
use std::path::Path;
use std::sync::Arc;
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

impl LocalEmbedder {
    pub fn load(dir: &Path, batch: usize) -> Result<LocalEmbedder> {
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
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| load_err(dir, format!("tokenizer.json: {e}")))?;
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
        let weights = read("model.safetensors")?;
        let hash = blake3::hash(&weights).to_hex();
        let vb = VarBuilder::from_buffered_safetensors(weights, DTYPE, &Device::Cpu)
            .map_err(|e| load_err(dir, format!("model.safetensors: {e}")))?;
        let model = BertModel::load(vb, &config)
            .map_err(|e| load_err(dir, format!("model.safetensors: {e}")))?;
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("model")
            .to_string();
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
            let mut out = Vec::with_capacity(texts.len());
            for batch in texts.chunks(PASS) {
                let _busy = self.busy.lock().await;
                usage::record(&self.name, |u| {
                    u.calls += 1;
                    u.requests += 1;
                });
                let inner = self.inner.clone();
                let batch = batch.to_vec();
                let r = spawn_cpu(move || inner.run(batch))
                    .await
                    .map_err(|p| ModelError::Failed(format!("local embedding panicked: {p}")))?;
                match r {
                    Ok((vectors, pieces)) => {
                        usage::record(&self.name, |u| u.prompt_tokens += pieces);
                        out.extend(vectors);
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
}
