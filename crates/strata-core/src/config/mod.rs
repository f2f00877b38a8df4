//! Configuration: defaults, overridden by a TOML file, overridden by environment variables.
//! Every option `section.field` is also the variable `STRATA_SECTION_FIELD`
//! (e.g. `chunk.tokens` ⇔ `STRATA_CHUNK_TOKENS`).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub chunk: ChunkConfig,
    pub ingest: IngestConfig,
    pub levels: LevelConfig,
    pub store: StoreConfig,
    pub build: BuildConfig,
    pub query: QueryConfig,
    pub server: ServerConfig,
    pub model: ModelConfig,
    pub embed: EmbedConfig,
    pub prices: Prices,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address `strata serve` listens on.
    pub addr: String,
    /// Bearer token every `/api` route requires; empty = no auth.
    pub token: String,
    /// Whether `/metrics` is open without the token.
    pub metrics_public: bool,
    /// Background job workers.
    pub workers: usize,
    /// Largest accepted request body, in bytes.
    pub body_limit_bytes: usize,
    /// Re-warm a scope queried within the last TTL when its levels expire within this
    /// many seconds; 0 = no warming ahead of expiry.
    pub warm_before_secs: u64,
    /// On shutdown, running jobs get this long to finish before they are parked.
    pub shutdown_grace_secs: u64,
    /// Append every served query's trajectory to this JSON Lines file (`strata trace`
    /// renders it); empty = none.
    pub trace_file: String,
    /// A running job's claim holds this long unless renewed (its worker renews it every
    /// third of that); on a shared store, another replica takes back the job of a
    /// replica that stopped renewing (it died).
    pub job_lease_ms: u64,
    /// Tokens limited to scopes (`[[server.tokens]]`), beside `token` (full access).
    pub tokens: Vec<TokenGrant>,
    /// Without a token, the `Host` names (`name` or `name:port`) accepted besides
    /// `localhost` and IP addresses (DNS rebinding); with one, when set, the only ones.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example.com`, or `*`) allowed to call the API from a
    /// browser (CORS); empty = none.
    pub cors_origins: Vec<String>,
    /// A connection with no request in progress and nothing sent is closed after this long.
    pub idle_timeout_ms: u64,
    /// A request's headers must arrive within this long of their first byte.
    pub header_timeout_ms: u64,
    /// A request's body must arrive within this long of the handler starting to read it.
    pub body_timeout_ms: u64,
    /// Open connections at most (also kept below the open-file limit); at the cap the
    /// longest-idle connection is closed for a new one, or the new one is answered 503.
    pub max_connections: usize,
    /// Requests in progress at most (`/healthz` and `/metrics` aside); beyond, 503.
    pub max_requests: usize,
}

/// A bearer token limited to scopes: `[[server.tokens]]` with `token`, `scopes` (names,
/// `*` matching any run of characters) and `access`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenGrant {
    pub token: String,
    pub scopes: Vec<String>,
    #[serde(default)]
    pub access: AccessLevel,
}

/// What a scoped token may do in its scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLevel {
    /// Read: contexts, queries, status, jobs.
    #[default]
    Read,
    /// Read and write: appends, documents, builds.
    Write,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: "127.0.0.1:7878".into(),
            token: String::new(),
            metrics_public: true,
            workers: 2,
            body_limit_bytes: 8 << 20,
            warm_before_secs: 0,
            shutdown_grace_secs: 10,
            trace_file: String::new(),
            job_lease_ms: 30_000,
            tokens: Vec::new(),
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            idle_timeout_ms: 30_000,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            max_connections: 1000,
            max_requests: 256,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChunkConfig {
    /// Token budget of one chunk (cl100k tokens).
    pub tokens: usize,
    /// A document SUMMARY groups at most this many consecutive chunks of one section.
    pub group_size: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
            tokens: 400,
            group_size: 8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest source one ingest accepts, in MB (2^20 bytes): a document, a debate
    /// transcript file, a turn. A bigger one is refused before it is read, so memory stays
    /// bounded by the input (an ingest holds the text, its chunks and their store writes
    /// at once). 0 = no limit.
    pub max_source_mb: u64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig { max_source_mb: 64 }
    }
}

impl IngestConfig {
    /// The limit in bytes; `u64::MAX` when there is none.
    pub fn max_source_bytes(&self) -> u64 {
        match self.max_source_mb {
            0 => u64::MAX,
            mb => mb.saturating_mul(1 << 20),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LevelConfig {
    /// DETAILED target, as a fraction of its chunk's tokens.
    pub detailed_ratio: f64,
    /// SUMMARY target, as a fraction of its group's FULL tokens.
    pub summary_ratio: f64,
    /// ABSTRACT target, as a fraction of the scope's FULL tokens...
    pub abstract_ratio: f64,
    /// ...but never more than this many tokens.
    pub abstract_max_tokens: usize,
}

impl Default for LevelConfig {
    fn default() -> Self {
        LevelConfig {
            detailed_ratio: 0.5,
            summary_ratio: 0.2,
            abstract_ratio: 0.05,
            abstract_max_tokens: 1500,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Lifetime of derived nodes in seconds; 0 = never expire. FULL nodes never expire.
    pub ttl_secs: u64,
    /// Free space (MB) a large write must leave on the store's file system, on top of
    /// 8× its input; a write that would eat into it is refused up front (`disk` module).
    /// 0 turns the check off: a full disk then fails mid-write, losing nothing
    /// acknowledged, but the store may need `strata repair` to open again.
    pub min_free_mb: u64,
    /// PostgreSQL store only: the directory under which this machine keeps its replicas'
    /// full-text indexes (`replica-1/`, `replica-2/`, ... one per process running at
    /// once). Empty: `$XDG_CACHE_HOME/strata/` (or `~/.cache/strata/`) plus a name
    /// derived from the database URL. A directory store keeps its index beside it.
    pub index_dir: String,
    /// PostgreSQL store only: connections in the pool of each process.
    pub pool_size: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            ttl_secs: 3600,
            min_free_mb: 64,
            index_dir: String::new(),
            pool_size: 8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuildConfig {
    /// Global limit on concurrent sub-model calls.
    pub concurrency: usize,
    /// Retries of a failed sub-model call before the offline compressor replaces it.
    pub retries: u32,
}

impl Default for BuildConfig {
    fn default() -> Self {
        BuildConfig {
            concurrency: 32,
            retries: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Iterations of the navigation loop.
    pub max_iterations: u32,
    /// Sub-model calls one query may make.
    pub max_sub_calls: u32,
    /// Tokens one query may read (peeked node text).
    pub max_tokens: u64,
    /// The working set never narrows below this many nodes unless finishing.
    pub min_keep: usize,
    /// Groups kept after the first grep.
    pub top_groups: usize,
    /// Chunks kept after descending into the groups.
    pub top_chunks: usize,
    /// Sentences cited in an offline answer, at most.
    pub max_citations: usize,
    /// Passages cited in the answer to a question that asks for a set ("which speakers
    /// objected", "list every deadline", "how many votes"), at most: each supporting turn
    /// or passage found is cited, not `max_citations`. 0 answers them like any other
    /// question.
    pub max_set_citations: usize,
    /// Confidence at or above which an answer is `ready` (0.25: on QMSum val, 82 % of
    /// answerable queries and 20 % of another meeting's are ready at it; docs/EVAL.md).
    pub ready_threshold: f64,
    /// Where navigation starts: `abstract` (read the overview first), `metadata` or
    /// `summary` (go straight to the groups), `detailed` (rank every chunk, no groups) or
    /// `full` (search the chunks' text only).
    pub start_level: crate::level::Level,
    /// `auto`: the LLM navigator when `model.root` is set, else the offline one;
    /// `offline`: always the offline (BM25) navigator; `peek`, `grep`, `partition_map`,
    /// `summarize`, `hierarchical`, `code`: see [`Strategy`].
    pub strategy: Strategy,
    /// Nodes one search of the navigator may return (aragora's `max_nodes`).
    pub max_nodes: usize,
    /// Wall time of one query in milliseconds (0: none). When it runs out the query
    /// answers from what it gathered (`limit_hit` = `time_limit`): model calls in flight
    /// are dropped, the best answer so far stands, else the offline policy answers.
    pub time_limit_ms: u64,
    /// Only sources said within this range are searched (`query --since/--until`, an HTTP
    /// query's `since`/`until`). Per request only: not a configuration key.
    #[serde(skip)]
    pub during: crate::time::TimeRange,
}

/// How a query explores the tree. Parsed once, from the same strings in the config file,
/// `STRATA_QUERY_STRATEGY` and an HTTP query's `strategy` (aragora's names included).
/// Every strategy but `offline` uses the LLM navigator when `model.root` is set (its first
/// step is the strategy's primitive), else the offline navigator's variant of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Strategy {
    /// The LLM navigator when `model.root` is set, else the offline descent
    /// (`hierarchical`).
    #[default]
    Auto,
    /// Always the offline (BM25) navigator, its hierarchical descent.
    Offline,
    /// Read first: the overview and every group's SUMMARY are read, groups are chosen by
    /// what was read, then their chunks are read whole.
    Peek,
    /// Search first: one flat search over every chunk (DETAILED and FULL), no descent.
    Grep,
    /// Each group is a partition searched on its own (map); the best chunk of each
    /// competes for the answer (reduce), so the evidence comes from many groups.
    PartitionMap,
    /// The compressed levels decide: groups by their SUMMARY, chunks by their DETAILED;
    /// FULL text is read only to cite.
    Summarize,
    /// The tree from the top: ABSTRACT, then groups by evidence at every level beneath,
    /// then chunks within them.
    Hierarchical,
    /// Code mode: each iteration the root model writes one sandboxed Rhai program
    /// (`strata::script`) that evaluates the whole working set and returns
    /// `{selected_ids, extracted, confidence, stop}`. Without a root model, the offline
    /// descent (`hierarchical`).
    Code,
}

impl Strategy {
    pub const ALL: [Strategy; 8] = [
        Strategy::Auto,
        Strategy::Offline,
        Strategy::Peek,
        Strategy::Grep,
        Strategy::PartitionMap,
        Strategy::Summarize,
        Strategy::Hierarchical,
        Strategy::Code,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Offline => "offline",
            Strategy::Peek => "peek",
            Strategy::Grep => "grep",
            Strategy::PartitionMap => "partition_map",
            Strategy::Summarize => "summarize",
            Strategy::Hierarchical => "hierarchical",
            Strategy::Code => "code",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown strategy `{s}`: expected auto, peek, grep, partition_map, summarize, hierarchical, code or offline"
                ))
            })
    }
}

impl TryFrom<String> for Strategy {
    type Error = Error;
    fn try_from(s: String) -> Result<Strategy> {
        s.parse()
    }
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            max_iterations: 6,
            max_sub_calls: 32,
            max_tokens: 200_000,
            min_keep: 2,
            top_groups: 4,
            top_chunks: 6,
            max_citations: 3,
            max_set_citations: 20,
            ready_threshold: 0.25,
            start_level: crate::level::Level::Abstract,
            strategy: Strategy::Auto,
            max_nodes: 400,
            time_limit_ms: 0,
            during: crate::time::TimeRange::ALL,
        }
    }
}

/// Which models strata talks to, and how. Both roles default to offline: nothing is
/// called unless configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// The compression (*sub*) model, also used for `partition_map` fan-out: `offline`, or
    /// `openai:MODEL` for any OpenAI-compatible server.
    pub sub: String,
    /// The navigating (*root*) model: empty (or `offline`) for the heuristic navigator, or
    /// `openai:MODEL`.
    pub root: String,
    /// Base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:8080/v1`. Empty: the
    /// `OPENAI_BASE_URL` variable, else `https://api.openai.com/v1`.
    pub base_url: String,
    /// Base URL for the root model; empty = `base_url`.
    pub root_base_url: String,
    /// The environment variable holding the API key (a local server may need none).
    pub api_key_env: String,
    /// The key variable for the root model; empty = `api_key_env`.
    pub root_api_key_env: String,
    /// Time limit of one HTTP attempt, in milliseconds.
    pub timeout_ms: u64,
    /// Retries of an attempt that failed with 429, 5xx, a timeout or a broken connection.
    pub retries: u32,
    /// First retry delay in milliseconds (doubles each retry, with jitter).
    pub backoff_ms: u64,
    /// Longest retry delay, and longest `Retry-After` honoured, in milliseconds.
    pub backoff_max_ms: u64,
    /// The sub-model's context, in tokens: no compression prompt plus its reply budget may
    /// exceed it. Above SUMMARY the build reduces in steps whose fan-in is chosen so that
    /// every prompt fits (and groups too large for one prompt are split).
    pub context_tokens: usize,
    /// Requests per minute across all model calls; 0 = unlimited.
    pub rpm: u64,
    /// Tokens per minute across all model calls; 0 = unlimited.
    pub tpm: u64,
    pub temperature: f64,
    pub seed: i64,
    /// Ask for JSON-schema constrained replies where structure is needed (navigation).
    /// Turn off for servers that reject `response_format`; replies are then parsed
    /// leniently and validated.
    pub json_schema: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            sub: "offline".into(),
            root: String::new(),
            base_url: String::new(),
            root_base_url: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            root_api_key_env: String::new(),
            timeout_ms: 60_000,
            retries: 4,
            backoff_ms: 500,
            backoff_max_ms: 30_000,
            context_tokens: 16_000,
            rpm: 0,
            tpm: 0,
            temperature: 0.0,
            seed: 42,
            json_schema: true,
        }
    }
}

/// Dense retrieval: an embedding model whose vectors are fused with BM25 in every grep of
/// the navigator. Off unless `model` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedConfig {
    /// Empty (or `off`): BM25 only. `openai:MODEL` for any OpenAI-compatible
    /// `/v1/embeddings`; `local:DIR` for all-MiniLM-L6-v2 run in-process (feature
    /// `local-embed`, files from `scripts/fetch-minilm.sh`); `static:DIR` for a static
    /// embedder distilled from it (`strata embed-distill`, feature `static-embed`).
    pub model: String,
    /// Base URL of the embeddings API. Empty: `model.base_url`, then `OPENAI_BASE_URL`,
    /// then `https://api.openai.com/v1`.
    pub base_url: String,
    /// The environment variable holding the API key; empty = `model.api_key_env`.
    pub api_key_env: String,
    /// Texts per embeddings request.
    pub batch: usize,
    /// Levels whose nodes get a vector at build time, comma-separated.
    pub levels: String,
    /// The `k` of reciprocal-rank fusion: score = Σ 1 / (k + rank).
    pub rrf_k: f64,
    /// Weight of the dense ranking in the fusion (BM25's is 1): score = 1/(k + rank_bm25)
    /// + dense_weight/(k + rank_dense).
    pub dense_weight: f64,
    /// Dense hits need a cosine similarity above this.
    pub min_similarity: f64,
}

/// The default weight of the dense ranking in hybrid fusion (see docs/EVAL.md).
pub const DENSE_WEIGHT: f64 = 1.0;

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig {
            model: String::new(),
            base_url: String::new(),
            api_key_env: String::new(),
            batch: 64,
            levels: "full,detailed,summary,abstract".into(),
            rrf_k: 60.0,
            dense_weight: DENSE_WEIGHT,
            min_similarity: 0.0,
        }
    }
}

impl EmbedConfig {
    /// The levels `levels` names.
    pub fn levels(&self) -> Result<Vec<crate::level::Level>> {
        let mut out = Vec::new();
        for l in self
            .levels
            .split(',')
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            let l: crate::level::Level = l
                .parse()
                .map_err(|e| Error::Config(format!("embed.levels: {e}")))?;
            if !out.contains(&l) {
                out.push(l);
            }
        }
        Ok(out)
    }
}

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub prompt: f64,
    pub completion: f64,
}

/// Prices per model name, for cost estimates. A `[prices]` table in the config file
/// replaces the built-in one (OpenAI list prices); unknown models cost 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Prices(pub std::collections::BTreeMap<String, Price>);

impl Default for Prices {
    fn default() -> Self {
        let list = [
            ("gpt-4o-mini", 0.15, 0.60),
            ("gpt-4o", 2.50, 10.00),
            ("gpt-4.1", 2.00, 8.00),
            ("gpt-4.1-mini", 0.40, 1.60),
            ("gpt-4.1-nano", 0.10, 0.40),
        ];
        Prices(
            list.into_iter()
                .map(|(m, prompt, completion)| (m.to_string(), Price { prompt, completion }))
                .collect(),
        )
    }
}

impl Prices {
    /// The price of `model`: its own entry, else the longest entry it extends with a
    /// dash (`gpt-4o-mini-2024-07-18` → `gpt-4o-mini`).
    pub fn get(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.0.get(model) {
            return Some(*p);
        }
        self.0
            .iter()
            .filter(|(k, _)| {
                model
                    .strip_prefix(k.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| *p)
    }

    /// Estimated cost in USD.
    pub fn cost(&self, model: &str, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        self.get(model).map_or(0.0, |p| {
            (prompt_tokens as f64 * p.prompt + completion_tokens as f64 * p.completion) / 1e6
        })
    }
}

/// A model named in the configuration: `offline`, or `openai:NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSpec {
    Offline,
    OpenAi(String),
}

impl ModelSpec {
    /// Parses a spec; empty means offline.
    pub fn parse(s: &str) -> Result<ModelSpec, String> {
        let s = s.trim();
        if s.is_empty() || s == "offline" {
            return Ok(ModelSpec::Offline);
        }
        match s.split_once(':') {
            Some(("openai", name)) if !name.trim().is_empty() => {
                Ok(ModelSpec::OpenAi(name.trim().to_string()))
            }
            _ => Err(format!(
                "unknown model `{s}`: expected `offline` or `openai:MODEL` (any OpenAI-compatible server)"
            )),
        }
    }
}

/// The embedding model named in the configuration (`embed.model`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmbedSpec {
    /// No dense retrieval (the default).
    Off,
    /// `openai:MODEL`: any server with an OpenAI-compatible `/v1/embeddings`.
    OpenAi(String),
    /// `local:DIR`: a BERT sentence encoder (all-MiniLM-L6-v2) from `config.json`,
    /// `model.safetensors` and `tokenizer.json` in DIR, run in-process (feature
    /// `local-embed`; `scripts/fetch-minilm.sh` fetches the files).
    Local(String),
    /// `static:DIR`: a static embedder (a vector per token, averaged) distilled from a
    /// `local:` model by `strata embed-distill` (feature `static-embed`, implied by
    /// `local-embed`).
    Static(String),
}

impl EmbedSpec {
    pub fn parse(s: &str) -> Result<EmbedSpec, String> {
        let s = s.trim();
        if s.is_empty() || s == "off" || s == "none" {
            return Ok(EmbedSpec::Off);
        }
        match s.split_once(':') {
            Some(("openai", name)) if !name.trim().is_empty() => {
                Ok(EmbedSpec::OpenAi(name.trim().to_string()))
            }
            Some(("local", dir)) if !dir.trim().is_empty() => {
                Ok(EmbedSpec::Local(dir.trim().to_string()))
            }
            Some(("static", dir)) if !dir.trim().is_empty() => {
                Ok(EmbedSpec::Static(dir.trim().to_string()))
            }
            _ => Err(format!(
                "unknown embedding model `{s}`: expected `off`, `openai:MODEL` (an OpenAI-compatible /v1/embeddings), `local:DIR` (feature local-embed) or `static:DIR` (feature static-embed)"
            )),
        }
    }
}

mod load;
