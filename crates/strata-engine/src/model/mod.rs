//! The sub-model seam. Every compressor — the offline extractive one, a real LLM — implements
//! [`SubModel`], so the build never knows which one it is talking to.

pub mod embed;
pub mod limit;
#[cfg(feature = "local-embed")]
pub mod local;
pub mod offline;
pub mod openai;
pub mod prompts;
#[cfg(feature = "static-embed")]
pub mod static_embed;
pub mod usage;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::level::Level;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use crate::config::{EmbedSpec, ModelSpec};
pub use crate::error::ModelError;
pub use embed::Embedder;
pub use limit::{LimitConfig, Limiter};
pub use offline::Offline;
pub use openai::{OpenAi, OpenAiEmbedder};
pub use usage::{Meter, ModelUsage, Usage};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One input of a compression: the text of a child node, and who said it (debates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Passage {
    pub text: String,
    /// E.g. `"alice (round 3)"`; kept in the output so who-said-what survives compression.
    pub label: Option<String>,
}

/// Compress `passages` into about `target_tokens` tokens for `level`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompressRequest {
    pub level: Level,
    pub passages: Vec<Passage>,
    pub target_tokens: usize,
    /// What the passages are: text (a chunk, a group's chunks) or summaries of
    /// consecutive parts (an intermediate SUMMARY of a longer span, the ABSTRACT).
    pub inputs: Inputs,
    /// On a retry: what was wrong with the output the model gave to this request (over
    /// budget by N tokens, facts not in the input...). A retry at temperature 0 without it
    /// would get the same output back.
    pub feedback: Option<String>,
    /// Its place in the limiter's queue (higher first, below navigation's): the build sets
    /// the call's depth below the ABSTRACT ([`crate::plan::Plan::call_depths`]); `new`
    /// the level's number.
    pub priority: u8,
}

impl CompressRequest {
    /// A first request (no feedback) over text.
    pub fn new(level: Level, passages: Vec<Passage>, target_tokens: usize) -> CompressRequest {
        CompressRequest {
            level,
            passages,
            target_tokens,
            inputs: Inputs::Text,
            feedback: None,
            priority: level.as_u8(),
        }
    }
}

/// What a compression's passages are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Inputs {
    /// Source text, or the DETAILED nodes of one group.
    #[default]
    Text,
    /// Summaries of consecutive parts, in order (levels above a group's SUMMARY).
    Summaries,
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

    /// Whether the model's calls already pass the engine's shared [`Limiter`] (the
    /// OpenAI-compatible client does, so compression and navigation share one limit). The
    /// build holds a place of the limiter ([`Limiter::hold`]) for each call of a model that does
    /// not, so every model's calls share one limit (`build.concurrency`).
    fn self_limited(&self) -> bool {
        false
    }

    /// The prompt `req` becomes ([`prompts::compress`] for a chat model); `None` for a
    /// compressor that is sent no prompt (the offline one). The build measures every
    /// prompt in real tokens, its reply budget included, before sending it, and sends none
    /// over `model.context_tokens`.
    fn prompt(&self, req: &CompressRequest) -> Option<ChatRequest> {
        Some(prompts::compress(req))
    }
}

/// One prompt for a chat model.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub system: String,
    pub user: String,
    /// A JSON schema the reply must follow (`name`, schema), where the server supports
    /// constrained output. The reply is parsed and validated either way.
    pub schema: Option<(String, serde_json::Value)>,
    /// Upper bound on the reply's length, in the model's tokens.
    pub max_tokens: u32,
}

/// A chat model's reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatReply {
    pub text: String,
    /// The reply stopped at `max_tokens`.
    pub truncated: bool,
}

/// A model that follows instructions: the navigator's *root* model, and the *sub* model
/// when the navigator fans out `partition_map` calls. Output is untrusted.
pub trait ChatModel: Send + Sync {
    fn identity(&self) -> String;
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatReply, ModelError>>;
}

/// The models an engine works with, built from [`Config::model`].
#[derive(Clone)]
pub struct Models {
    /// Compresses (the offline compressor unless configured).
    pub sub: Arc<dyn SubModel>,
    /// The sub model as a chat model, for `partition_map` (none when offline).
    pub helper: Option<Arc<dyn ChatModel>>,
    /// Navigates (none: the offline navigator).
    pub root: Option<Arc<dyn ChatModel>>,
    /// Embeds nodes and questions for hybrid retrieval (none: BM25 only).
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Shared by every client above.
    pub limiter: Arc<Limiter>,
}

impl Models {
    /// The models `cfg` names. API keys are read from the variables `cfg` names, through
    /// `env` (the process environment in production).
    pub fn from_config(cfg: &Config, env: &dyn Fn(&str) -> Option<String>) -> Result<Models> {
        let m = &cfg.model;
        let limiter = Arc::new(Limiter::new(LimitConfig {
            concurrency: cfg.build.concurrency,
            rpm: m.rpm,
            tpm: m.tpm,
            timeout: std::time::Duration::from_millis(m.timeout_ms),
            retries: m.retries,
            backoff: std::time::Duration::from_millis(m.backoff_ms),
            backoff_max: std::time::Duration::from_millis(m.backoff_max_ms),
        }));
        let key = |key_env: &str| (!key_env.is_empty()).then(|| env(key_env)).flatten();
        let base_url = |base: &str| match base.trim() {
            "" => env("OPENAI_BASE_URL")
                .filter(|b| !b.trim().is_empty())
                .unwrap_or_else(|| openai::DEFAULT_BASE_URL.to_string()),
            b => b.to_string(),
        };
        let client = |name: String, base: &str, key_env: &str| -> Arc<OpenAi> {
            let key = key(key_env);
            let base = base_url(base);
            Arc::new(OpenAi::new(
                openai::Settings::from_config(name, base, key, m),
                limiter.clone(),
            ))
        };
        let spec = |s: &str, what: &str| {
            ModelSpec::parse(s).map_err(|e| Error::Config(format!("model.{what}: {e}")))
        };
        let (sub, helper): (Arc<dyn SubModel>, Option<Arc<dyn ChatModel>>) =
            match spec(&m.sub, "sub")? {
                ModelSpec::Offline => (Arc::new(Offline), None),
                ModelSpec::OpenAi(name) => {
                    let c = client(name, &m.base_url, &m.api_key_env);
                    (c.clone(), Some(c))
                }
            };
        let root: Option<Arc<dyn ChatModel>> = match spec(&m.root, "root")? {
            ModelSpec::Offline => None,
            ModelSpec::OpenAi(name) => {
                let base = if m.root_base_url.is_empty() {
                    &m.base_url
                } else {
                    &m.root_base_url
                };
                let key_env = if m.root_api_key_env.is_empty() {
                    &m.api_key_env
                } else {
                    &m.root_api_key_env
                };
                Some(client(name, base, key_env))
            }
        };
        let e = &cfg.embed;
        let embedder: Option<Arc<dyn Embedder>> = match EmbedSpec::parse(&e.model)
            .map_err(|err| Error::Config(format!("embed.model: {err}")))?
        {
            EmbedSpec::Off => None,
            EmbedSpec::OpenAi(name) => {
                let base = if e.base_url.trim().is_empty() {
                    &m.base_url
                } else {
                    &e.base_url
                };
                let key_env = if e.api_key_env.is_empty() {
                    &m.api_key_env
                } else {
                    &e.api_key_env
                };
                Some(Arc::new(OpenAiEmbedder::new(
                    name,
                    base_url(base),
                    key(key_env),
                    e.batch,
                    limiter.clone(),
                )))
            }
            EmbedSpec::Local(dir) => Some(local_embedder(&dir, e.batch)?),
            EmbedSpec::Static(dir) => Some(static_embedder(&dir, e.batch)?),
        };
        Ok(Models {
            sub,
            helper,
            root,
            embedder,
            limiter,
        })
    }
}

#[cfg(feature = "local-embed")]
fn local_embedder(dir: &str, batch: usize) -> Result<Arc<dyn Embedder>> {
    Ok(Arc::new(local::LocalEmbedder::load(
        std::path::Path::new(dir),
        batch,
    )?))
}

#[cfg(not(feature = "local-embed"))]
fn local_embedder(dir: &str, _batch: usize) -> Result<Arc<dyn Embedder>> {
    Err(Error::Config(format!(
        "embed.model = local:{dir} needs strata built with `--features local-embed`"
    )))
}

#[cfg(feature = "static-embed")]
fn static_embedder(dir: &str, batch: usize) -> Result<Arc<dyn Embedder>> {
    Ok(Arc::new(static_embed::StaticEmbedder::load(
        std::path::Path::new(dir),
        batch,
    )?))
}

#[cfg(not(feature = "static-embed"))]
fn static_embedder(dir: &str, _batch: usize) -> Result<Arc<dyn Embedder>> {
    Err(Error::Config(format!(
        "embed.model = static:{dir} needs strata built with `--features static-embed` (or `local-embed`)"
    )))
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

/// Waits for `f` from synchronous code that may run on a tokio thread (a script's
/// primitive, a question-focused window embedding its question): inside `block_in_place`
/// on a multi-threaded runtime, else on this thread.
pub fn wait_for<F: std::future::Future>(f: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| h.block_on(f))
        }
        _ => futures::executor::block_on(f),
    }
}
