//! Embedding models: text → unit vectors, the dense half of hybrid retrieval.
//!
//! An [`Embedder`] is named by its identity (model and endpoint): every stored vector is
//! keyed by a hash of it, so another model or server never reads vectors it did not make.
//! Vectors are L2-normalised on the way out, so cosine similarity is a dot product.

use super::{BoxFuture, ModelError};
pub use crate::config::EmbedSpec;

/// A model that turns texts into vectors. Implementations must be cheap to share (`Arc`).
pub trait Embedder: Send + Sync {
    /// Model and endpoint, e.g. `openai:text-embedding-3-small@https://api.openai.com/v1`.
    /// Part of every stored vector's key.
    fn identity(&self) -> String;

    /// Texts per request; callers that want per-batch results (the build) split by this.
    fn batch(&self) -> usize;

    /// One unit vector per text, in order. `priority` orders the call in the shared
    /// limiter (navigation first, build work last). All or nothing: any failed batch fails
    /// the call.
    fn embed(
        &self,
        texts: Vec<String>,
        priority: u8,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, ModelError>>;
}

/// `v` scaled to length 1; `None` for an empty, zero or non-finite vector.
pub fn normalize(mut v: Vec<f32>) -> Option<Vec<f32>> {
    if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let norm = v
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt();
    if !(norm > 0.0 && norm.is_finite()) {
        return None;
    }
    for x in &mut v {
        *x = (*x as f64 / norm) as f32;
    }
    Some(v)
}

/// Validates a server's vectors for `n` inputs (count, equal dimensions, usable values)
/// and normalises them. The error says what was wrong, in one line.
pub fn check_vectors(n: usize, vectors: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, String> {
    if vectors.len() != n {
        return Err(format!("{} vector(s) for {n} input(s)", vectors.len()));
    }
    let dim = vectors.first().map_or(0, Vec::len);
    let mut out = Vec::with_capacity(n);
    for (i, v) in vectors.into_iter().enumerate() {
        if v.len() != dim {
            return Err(format!(
                "vector {i} has {} dimensions, vector 0 has {dim}",
                v.len()
            ));
        }
        out.push(normalize(v).ok_or_else(|| format!("vector {i} is empty, zero or not finite"))?);
    }
    Ok(out)
}

/// Cosine similarity of two unit vectors (their dot product); `None` when their
/// dimensions differ.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    (a.len() == b.len()).then(|| a.iter().zip(b).map(|(x, y)| x * y).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(EmbedSpec::parse(""), Ok(EmbedSpec::Off));
        assert_eq!(EmbedSpec::parse("off"), Ok(EmbedSpec::Off));
        assert_eq!(
            EmbedSpec::parse("openai:text-embedding-3-small"),
            Ok(EmbedSpec::OpenAi("text-embedding-3-small".into()))
        );
        assert_eq!(
            EmbedSpec::parse("local:/m/minilm"),
            Ok(EmbedSpec::Local("/m/minilm".into()))
        );
        assert!(EmbedSpec::parse("openai:").is_err());
        assert_eq!(
            EmbedSpec::parse("static:/m/minilm-static"),
            Ok(EmbedSpec::Static("/m/minilm-static".into()))
        );
        assert!(EmbedSpec::parse("local:").is_err());
        assert!(EmbedSpec::parse("static: ").is_err());
        assert!(EmbedSpec::parse("bert").is_err());
    }

    #[test]
    fn vectors_are_checked_and_normalised() {
        let v = check_vectors(2, vec![vec![3.0, 4.0], vec![0.0, 2.0]]).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert_eq!(cosine(&v[0], &v[1]), Some(0.8));
        assert!(
            check_vectors(3, v.clone())
                .unwrap_err()
                .contains("2 vector(s) for 3")
        );
        let e = check_vectors(2, vec![vec![1.0, 0.0], vec![1.0]]).unwrap_err();
        assert!(e.contains("vector 1 has 1 dimensions"), "{e}");
        assert!(check_vectors(1, vec![vec![0.0, 0.0]]).is_err());
        assert!(check_vectors(1, vec![vec![f32::NAN, 1.0]]).is_err());
        assert!(check_vectors(1, vec![vec![]]).is_err());
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
    }
}
