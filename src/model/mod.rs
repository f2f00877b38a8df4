//! The sub-model seam. Every compressor — the offline extractive one, a real LLM — implements
//! [`SubModel`], so the build never knows which one it is talking to.

pub mod offline;

use crate::level::Level;
use std::future::Future;
use std::pin::Pin;

pub use offline::Offline;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One input of a compression: the text of a child node, and who said it (debates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Passage {
    pub text: String,
    /// E.g. `"alice (round 3)"`; kept in the output so who-said-what survives compression.
    pub label: Option<String>,
}

/// Compress `passages` into about `target_tokens` tokens for `level`.
#[derive(Clone, Debug)]
pub struct CompressRequest {
    pub level: Level,
    pub passages: Vec<Passage>,
    pub target_tokens: usize,
}

/// Why a sub-model call failed. The build retries, then falls back to the offline
/// compressor, and reports the failure as data.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    #[error("model server unavailable: {0}")]
    Unavailable(String),
    #[error("rate limited")]
    RateLimited,
    #[error("timed out")]
    Timeout,
    #[error("unusable output: {0}")]
    BadOutput(String),
    #[error("{0}")]
    Failed(String),
}

/// A model that can compress text. Implementations must be cheap to share (`Arc`).
pub trait SubModel: Send + Sync {
    /// Model id and prompt version. Part of every node id the model produces, so changing
    /// either invalidates exactly the nodes it made.
    fn identity(&self) -> String;

    /// Whether the output can be used as is (deterministic and within budget by
    /// construction). Untrusted output is validated, retried and replaced on failure.
    fn trusted(&self) -> bool {
        false
    }

    /// Produces the compressed text. Output is untrusted: the caller validates it.
    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>>;
}

/// Runs CPU-bound work on rayon's pool and awaits it without blocking the async executor.
/// A panic in `f` becomes an error instead of tearing down the caller.
pub async fn spawn_cpu<T, F>(f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    rayon::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(p)) => Err(p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string())),
        Err(_) => Err("worker dropped".to_string()),
    }
}
