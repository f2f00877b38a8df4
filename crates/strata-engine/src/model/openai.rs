//! The OpenAI-compatible client: OpenAI, vLLM, Ollama, LM Studio, a llama.cpp server —
//! anything that serves `/v1/chat/completions`. Only this module knows `async-openai`.
//!
//! async-openai's own retry layer is replaced by a plain transport that turns 429 and 5xx
//! responses into errors carrying their `Retry-After`: retries, backoff, the shared 429
//! pause, rate limits and timeouts all belong to the engine's [`Limiter`], which every
//! client shares.

use super::embed::{Embedder, check_vectors};
use super::limit::{Failure, Limiter, PRIORITY_NAVIGATION, Reply};
use super::{
    BoxFuture, ChatModel, ChatReply, ChatRequest, CompressRequest, ModelError, SubModel, prompts,
};
use crate::config::ModelConfig;
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use async_openai::types::chat::{
    ChatCompletionRequestMessage, CreateChatCompletionRequest, CreateChatCompletionResponse,
    FinishReason, ResponseFormat, ResponseFormatJsonSchema,
};
use async_openai::types::embeddings::{CreateEmbeddingRequest, EmbeddingInput, EncodingFormat};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt as _;

/// OpenAI's own endpoint, when neither the config nor `OPENAI_BASE_URL` names another.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach one model.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub model: String,
    pub base_url: String,
    pub api_key: Option<String>,
    pub temperature: f32,
    pub seed: i64,
    /// Send JSON schemas as `response_format` (structured outputs).
    pub json_schema: bool,
}

impl Settings {
    pub fn from_config(
        model: String,
        base_url: String,
        api_key: Option<String>,
        cfg: &ModelConfig,
    ) -> Settings {
        Settings {
            model,
            base_url,
            api_key,
            temperature: cfg.temperature as f32,
            seed: cfg.seed,
            json_schema: cfg.json_schema,
        }
    }
}

/// A chat model behind an OpenAI-compatible API, usable as the sub model (compression,
/// `partition_map`) and as the root model (navigation).
pub struct OpenAi {
    client: Client<OpenAIConfig>,
    s: Settings,
    limiter: Arc<Limiter>,
}

/// A 429 or 5xx response, as the transport saw it (async-openai would drop the headers).
#[derive(Debug)]
struct HttpStatus {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

impl std::fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.body)
    }
}

impl std::error::Error for HttpStatus {}

/// The HTTP response type of the transport (reqwest's, named without depending on it).
type Response = <ReqwestService as tower::Service<HttpRequestFactory>>::Response;

/// `retry-after-ms` (OpenAI, Azure) or `Retry-After` in seconds. An HTTP-date is not
/// honoured: the backoff applies instead.
fn retry_after(ms: Option<&str>, secs: Option<&str>) -> Option<Duration> {
    let num = |v: Option<&str>| {
        v.and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    match num(ms) {
        Some(ms) => Some(Duration::from_secs_f64(ms / 1000.0)),
        None => num(secs).map(Duration::from_secs_f64),
    }
}

/// An async-openai client for `base_url` whose transport turns 429 and 5xx responses into
/// errors carrying `Retry-After` (async-openai's own retries are not used: the shared
/// [`Limiter`] retries).
fn client(base_url: &str, api_key: Option<&str>) -> Client<OpenAIConfig> {
    // The process's TLS crypto: rustls's `ring` provider, unless one is installed already
    // (an embedding program's own choice stands).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = OpenAIConfig::new()
        .with_api_base(base_url.trim_end_matches('/'))
        .with_api_key(api_key.unwrap_or_default());
    let transport = ReqwestService::default().and_then(|resp: Response| async move {
        let status = resp.status().as_u16();
        if status != 429 && !(500..600).contains(&status) {
            return Ok(resp);
        }
        let header = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after = retry_after(
            header("retry-after-ms").as_deref(),
            header("retry-after").as_deref(),
        );
        let mut body = resp.text().await.unwrap_or_default();
        body.truncate(300);
        Err(OpenAIError::Boxed(Box::new(HttpStatus {
            status,
            retry_after,
            body,
        })))
    });
    Client::with_config(config).with_http_service(transport)
}

impl OpenAi {
    pub fn new(s: Settings, limiter: Arc<Limiter>) -> OpenAi {
        OpenAi {
            client: client(&s.base_url, s.api_key.as_deref()),
            s,
            limiter,
        }
    }

    pub fn model(&self) -> &str {
        &self.s.model
    }

    fn request(&self, req: &ChatRequest) -> CreateChatCompletionRequest {
        let response_format = match (&req.schema, self.s.json_schema) {
            (Some((name, schema)), true) => Some(ResponseFormat::JsonSchema {
                json_schema: ResponseFormatJsonSchema {
                    description: None,
                    name: name.clone(),
                    schema: schema.clone(),
                    strict: Some(true),
                },
            }),
            _ => None,
        };
        // `max_tokens` rather than `max_completion_tokens`: every compatible server
        // (llama.cpp, vLLM, Ollama, LM Studio) and OpenAI's chat models accept it.
        #[allow(deprecated)]
        let r = CreateChatCompletionRequest {
            model: self.s.model.clone(),
            messages: vec![
                ChatCompletionRequestMessage::System(req.system.as_str().into()),
                ChatCompletionRequestMessage::User(req.user.as_str().into()),
            ],
            temperature: Some(self.s.temperature),
            seed: Some(self.s.seed),
            max_tokens: Some(req.max_tokens),
            response_format,
            ..Default::default()
        };
        r
    }

    /// One call through the shared limiter.
    async fn complete(&self, priority: u8, req: ChatRequest) -> Result<ChatReply, ModelError> {
        let body = self.request(&req);
        // For the tokens-per-minute bucket only (refunded with the real counts): bytes / 3
        // errs high, and tokenising every prompt on the executor would not be free.
        let est = ((req.system.len() + req.user.len()) / 3) as u64 + req.max_tokens as u64;
        let req = &req;
        self.limiter
            .run(&self.s.model, priority, est, || {
                let body = body.clone();
                async move {
                    match self.client.chat().create(body).await {
                        Ok(resp) => reply(resp, req).await,
                        Err(e) => Err(classify(e, "a chat completion")),
                    }
                }
            })
            .await
    }
}

async fn reply(
    resp: CreateChatCompletionResponse,
    req: &ChatRequest,
) -> Result<Reply<ChatReply>, Failure> {
    let Some(choice) = resp.choices.into_iter().next() else {
        return Err(Failure::Fatal(ModelError::BadOutput(
            "the response has no choices".into(),
        )));
    };
    let truncated = choice.finish_reason == Some(FinishReason::Length);
    let text = match (choice.message.content, choice.message.refusal) {
        (Some(t), _) => t,
        (None, Some(r)) => {
            return Err(Failure::Fatal(ModelError::BadOutput(format!(
                "the model refused: {r}"
            ))));
        }
        (None, None) => String::new(),
    };
    let (prompt_tokens, completion_tokens) = match resp.usage {
        Some(u) => (u.prompt_tokens as u64, u.completion_tokens as u64),
        // The server did not say: count them ourselves (cl100k), off the executor.
        None => {
            let prompt = format!("{}\n{}", req.system, req.user);
            let out = text.clone();
            super::spawn_cpu(move || {
                (
                    crate::token::count(&prompt) as u64,
                    crate::token::count(&out) as u64,
                )
            })
            .await
            .unwrap_or((0, 0))
        }
    };
    Ok(Reply {
        value: ChatReply { text, truncated },
        prompt_tokens,
        completion_tokens,
    })
}

fn classify(e: OpenAIError, what: &str) -> Failure {
    match e {
        OpenAIError::Boxed(b) => match b.downcast::<HttpStatus>() {
            Ok(h) if h.status == 429 => Failure::RateLimited {
                retry_after: h.retry_after,
            },
            Ok(h) => Failure::Server {
                status: h.status,
                message: h.body,
            },
            Err(other) => Failure::Transport(other.to_string()),
        },
        OpenAIError::Reqwest(e) => Failure::Transport(e.to_string()),
        OpenAIError::ApiError(r) if matches!(r.status_code.as_u16(), 408 | 409) => {
            Failure::Transport(r.to_string())
        }
        OpenAIError::ApiError(r) => Failure::Fatal(ModelError::Failed(r.to_string())),
        OpenAIError::JSONDeserialize(e, _) => Failure::Fatal(ModelError::BadOutput(format!(
            "the response is not {what}: {e}"
        ))),
        other => Failure::Fatal(ModelError::Failed(other.to_string())),
    }
}

/// Strips what chat models wrap text in (code fences, surrounding blank lines).
fn clean(text: &str) -> String {
    let t = text.trim();
    let t = match t.strip_prefix("```") {
        Some(rest) => {
            let rest = rest.split_once('\n').map_or("", |(_, r)| r);
            rest.strip_suffix("```").unwrap_or(rest).trim()
        }
        None => t,
    };
    t.to_string()
}

impl SubModel for OpenAi {
    fn identity(&self) -> String {
        format!("openai:{}|{}", self.s.model, prompts::VERSION)
    }

    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>> {
        Box::pin(async move {
            // The build's calls deepest below the ABSTRACT first: they start the longest
            // chains of calls.
            let r = self.complete(req.priority, prompts::compress(&req)).await?;
            if r.truncated {
                return Err(ModelError::Truncated);
            }
            Ok(clean(&r.text))
        })
    }

    fn self_limited(&self) -> bool {
        true
    }
}

impl ChatModel for OpenAi {
    fn identity(&self) -> String {
        format!("openai:{}", self.s.model)
    }

    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatReply, ModelError>> {
        Box::pin(self.complete(PRIORITY_NAVIGATION, req))
    }
}

/// An embedding model behind an OpenAI-compatible `/v1/embeddings` (OpenAI, vLLM, Ollama,
/// a llama.cpp server started with `--embeddings`). Calls go through the shared
/// [`Limiter`], like chat calls: the same concurrency limit, retries, backoff and 429 pause.
pub struct OpenAiEmbedder {
    client: Client<OpenAIConfig>,
    model: String,
    base_url: String,
    batch: usize,
    limiter: Arc<Limiter>,
}

impl OpenAiEmbedder {
    pub fn new(
        model: String,
        base_url: String,
        api_key: Option<String>,
        batch: usize,
        limiter: Arc<Limiter>,
    ) -> OpenAiEmbedder {
        OpenAiEmbedder {
            client: client(&base_url, api_key.as_deref()),
            model,
            base_url: base_url.trim_end_matches('/').to_string(),
            batch: batch.max(1),
            limiter,
        }
    }

    /// One request for at most `batch` texts.
    async fn request(&self, texts: Vec<String>, priority: u8) -> Result<Vec<Vec<f32>>, ModelError> {
        let n = texts.len();
        // For the tokens-per-minute bucket only (refunded with the server's count).
        let est = texts.iter().map(|t| t.len() / 3 + 1).sum::<usize>() as u64;
        let body = CreateEmbeddingRequest {
            model: self.model.clone(),
            input: EmbeddingInput::StringArray(texts),
            encoding_format: Some(EncodingFormat::Float),
            ..Default::default()
        };
        self.limiter
            .run(&self.model, priority, est, || {
                let body = body.clone();
                async move {
                    let resp = self
                        .client
                        .embeddings()
                        .create(body)
                        .await
                        .map_err(|e| classify(e, "an embedding list"))?;
                    let mut data = resp.data;
                    data.sort_by_key(|d| d.index);
                    if data.iter().enumerate().any(|(i, d)| d.index as usize != i) {
                        return Err(Failure::Fatal(ModelError::BadOutput(
                            "the embedding indices are not 0..n".into(),
                        )));
                    }
                    let vectors = check_vectors(n, data.into_iter().map(|d| d.embedding).collect())
                        .map_err(|e| Failure::Fatal(ModelError::BadOutput(e)))?;
                    Ok(Reply {
                        value: vectors,
                        prompt_tokens: resp.usage.prompt_tokens as u64,
                        completion_tokens: 0,
                    })
                }
            })
            .await
    }
}

impl Embedder for OpenAiEmbedder {
    fn identity(&self) -> String {
        format!("openai:{}@{}", self.model, self.base_url)
    }

    fn batch(&self) -> usize {
        self.batch
    }

    fn embed(
        &self,
        texts: Vec<String>,
        priority: u8,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, ModelError>> {
        Box::pin(async move {
            if texts.is_empty() {
                return Ok(Vec::new());
            }
            let batches: Vec<Vec<String>> =
                texts.chunks(self.batch).map(<[String]>::to_vec).collect();
            let mut out = Vec::with_capacity(texts.len());
            for r in
                futures::future::join_all(batches.into_iter().map(|b| self.request(b, priority)))
                    .await
            {
                out.extend(r?);
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_lose_their_wrapping() {
        assert_eq!(clean("  ```text\nAlice said 3.\n```\n"), "Alice said 3.");
        assert_eq!(clean("\nplain\n"), "plain");
    }

    #[test]
    fn retry_after_prefers_milliseconds() {
        let ms = |v| Some(Duration::from_millis(v));
        assert_eq!(retry_after(Some("40"), Some("2")), ms(40));
        assert_eq!(retry_after(None, Some("2")), ms(2000));
        assert_eq!(retry_after(Some("soon"), Some("1.5")), ms(1500));
        assert_eq!(
            retry_after(None, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
        assert_eq!(retry_after(Some("-1"), None), None);
    }
}
