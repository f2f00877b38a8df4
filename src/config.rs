//! Configuration: defaults, overridden by a TOML file, overridden by environment variables.
//! Every option `section.field` is also the variable `STRATA_SECTION_FIELD`
//! (e.g. `chunk.tokens` ⇔ `STRATA_CHUNK_TOKENS`).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub chunk: ChunkConfig,
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
    /// A running job's claim holds this long unless renewed (its worker renews it every
    /// third of that); on a shared store, another replica takes back the job of a
    /// replica that stopped renewing (it died).
    pub job_lease_ms: u64,
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
            job_lease_ms: 30_000,
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
    /// Confidence at or above which an answer is `ready`.
    pub ready_threshold: f64,
    /// Where navigation starts: `abstract` (read the overview first), `metadata` or
    /// `summary` (go straight to the groups).
    pub start_level: crate::level::Level,
    /// `auto`: the LLM navigator when `model.root` is set, else the offline one;
    /// `offline`: always the offline (BM25) navigator.
    pub strategy: Strategy,
}

/// Which navigator answers a query. Parsed once, from the same strings in the config file,
/// `STRATA_QUERY_STRATEGY` and an HTTP query's `strategy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum Strategy {
    /// The LLM navigator when `model.root` is set, else the offline one.
    #[default]
    Auto,
    /// Always the offline (BM25) navigator.
    Offline,
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy> {
        match s {
            "auto" => Ok(Strategy::Auto),
            "offline" => Ok(Strategy::Offline),
            other => Err(Error::invalid(format!(
                "unknown strategy `{other}`: expected auto (the root model when one is configured, else offline) or offline"
            ))),
        }
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
            ready_threshold: 0.5,
            start_level: crate::level::Level::Abstract,
            strategy: Strategy::Auto,
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
    /// `local-embed`, files from `scripts/fetch-minilm.sh`).
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

impl Config {
    /// Defaults, then `file` (if given), then `STRATA_*` variables from `env`. Every error
    /// is one line naming the file (and line) or the variable, the field and the problem.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config> {
        let mut value = toml::Value::try_from(Config::default())
            .map_err(|e| Error::Config(format!("cannot serialise defaults: {e}")))?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.to_path_buf(),
                err: source,
            })?;
            let from_file: Config =
                toml::from_str(&text).map_err(|e| file_error(path, &text, &e))?;
            value = toml::Value::try_from(from_file)
                .map_err(|e| Error::Config(format!("{}: {}", path.display(), e)))?;
        }
        let env: Vec<(String, String)> = env.into_iter().collect();
        let mut overrides = Vec::new();
        let table = value.as_table().expect("config is a table");
        for (section, fields) in table {
            let Some(fields) = fields.as_table() else {
                continue;
            };
            for field in fields.keys() {
                let var = format!("STRATA_{section}_{field}").to_ascii_uppercase();
                if let Some((_, raw)) = env.iter().find(|(k, _)| *k == var) {
                    overrides.push((section.clone(), field.clone(), var, raw.clone()));
                }
            }
        }
        for (section, field, var, raw) in overrides {
            let slot = &mut value[section.as_str()][field.as_str()];
            let bad = |problem: &str| {
                Error::Config(format!("{var}={raw:?} ({section}.{field}): {problem}"))
            };
            *slot = parse_like(slot, &raw).ok_or_else(|| bad(expected(slot)))?;
            // Checked one variable at a time, so the error names the one that is wrong.
            if let Err(e) = value.clone().try_into::<Config>() {
                // "invalid value: integer `-5`, expected ...": the value is named already.
                let m = friendly(e.message());
                return Err(bad(m.find("expected ").map_or(&m[..], |i| &m[i..])));
            }
        }
        let cfg: Config = value
            .try_into()
            .map_err(|e| Error::Config(friendly(e.message())))?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Config(m.to_string()));
        if self.chunk.tokens < 16 {
            return bad("chunk.tokens must be at least 16");
        }
        if self.chunk.group_size == 0 {
            return bad("chunk.group_size must be at least 1");
        }
        for (name, r) in [
            ("levels.detailed_ratio", self.levels.detailed_ratio),
            ("levels.summary_ratio", self.levels.summary_ratio),
            ("levels.abstract_ratio", self.levels.abstract_ratio),
        ] {
            if !(r > 0.0 && r <= 1.0) {
                return Err(Error::Config(format!("{name} must be in (0, 1], got {r}")));
            }
        }
        if self.store.pool_size < 2 {
            return bad("store.pool_size must be at least 2");
        }
        if self.server.job_lease_ms < 30 {
            return bad("server.job_lease_ms must be at least 30");
        }
        if self.build.concurrency == 0 {
            return bad("build.concurrency must be at least 1");
        }
        if self.query.max_iterations == 0 || self.query.min_keep == 0 {
            return bad("query.max_iterations and query.min_keep must be at least 1");
        }
        crate::model::ModelSpec::parse(&self.model.sub)
            .map_err(|e| Error::Config(format!("model.sub: {e}")))?;
        crate::model::ModelSpec::parse(&self.model.root)
            .map_err(|e| Error::Config(format!("model.root: {e}")))?;
        crate::model::embed::EmbedSpec::parse(&self.embed.model)
            .map_err(|e| Error::Config(format!("embed.model: {e}")))?;
        if self.embed.batch == 0 || self.embed.batch > 2048 {
            return bad("embed.batch must be in 1..=2048");
        }
        if self.embed.levels()?.is_empty() {
            return bad("embed.levels names no level");
        }
        if !(self.embed.dense_weight >= 0.0 && self.embed.dense_weight.is_finite()) {
            return bad("embed.dense_weight must be a non-negative number");
        }
        if !(self.embed.rrf_k >= 0.0 && self.embed.rrf_k.is_finite()) {
            return bad("embed.rrf_k must be a non-negative number");
        }
        if !(-1.0..1.0).contains(&self.embed.min_similarity) {
            return bad("embed.min_similarity must be in [-1, 1)");
        }
        if self.server.workers == 0 {
            return bad("server.workers must be at least 1 (with 0, queued jobs never run)");
        }
        let token = &self.server.token;
        if !token.is_empty() && token.trim() != token {
            return bad(if token.trim().is_empty() {
                "server.token is blank: set a token, or leave it empty for no auth"
            } else {
                "server.token has leading or trailing whitespace, which no HTTP client can send: remove it"
            });
        }
        if token.chars().any(|c| !(c.is_ascii_graphic() || c == ' ')) {
            // The character itself is not shown: it is part of a secret.
            return bad(
                "server.token has a non-ASCII or control character: a bearer token travels in an HTTP header, so use printable ASCII only",
            );
        }
        if self.model.timeout_ms == 0 {
            return bad("model.timeout_ms must be at least 1");
        }
        for (m, p) in &self.prices.0 {
            if !(p.prompt >= 0.0 && p.completion >= 0.0) {
                return Err(Error::Config(format!(
                    "prices.{m}: prices must be non-negative numbers"
                )));
            }
        }
        Ok(())
    }
}

/// A TOML error as one line: the file, the line, the table, and toml's message (whose
/// own rendering spans five lines with a caret under the column).
fn file_error(path: &Path, text: &str, e: &toml::de::Error) -> Error {
    let msg = friendly(e.message());
    let Some(span) = e.span() else {
        return Error::Config(format!("{}: {msg}", path.display()));
    };
    let at = span.start.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..at].matches('\n').count() + 1;
    // The table the error is in: the last `[header]` above the error's line.
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| {
            l.trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim()
        });
    // An error in a value (not in its key) names the key it belongs to.
    let key = text[line_start..at]
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty());
    let field = match (table, key) {
        (Some(t), Some(k)) => format!("{t}.{k}: "),
        (None, Some(k)) => format!("{k}: "),
        _ => String::new(),
    };
    let table = match (table, key) {
        (Some(t), None) => format!(" in [{t}]"),
        _ => String::new(),
    };
    Error::Config(format!(
        "{} line {line}{table}: {field}{msg}",
        path.display()
    ))
}

/// serde's "expected usize" in words, on one line.
fn friendly(msg: &str) -> String {
    let msg = msg.trim().replace('\n', "; ");
    for (ty, words) in [
        ("usize", "a whole number ≥ 0"),
        ("u64", "a whole number ≥ 0"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("i64", "a whole number"),
        ("f64", "a number"),
        ("a boolean", "true or false"),
    ] {
        if let Some(head) = msg.strip_suffix(&format!("expected {ty}")) {
            return format!("{head}expected {words}");
        }
    }
    msg
}

/// What a variable for a field like `example` must hold.
fn expected(example: &toml::Value) -> &'static str {
    match example {
        toml::Value::Integer(_) => "expected a whole number",
        toml::Value::Float(_) => "expected a number",
        toml::Value::Boolean(_) => "expected true or false (or 1/0, yes/no, on/off)",
        _ => "expected a value of another type",
    }
}

fn parse_like(example: &toml::Value, raw: &str) -> Option<toml::Value> {
    use toml::Value;
    Some(match example {
        Value::Integer(_) => Value::Integer(raw.trim().parse().ok()?),
        Value::Float(_) => Value::Float(raw.trim().parse().ok()?),
        Value::Boolean(_) => Value::Boolean(match raw.trim() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" => false,
            _ => return None,
        }),
        _ => Value::String(raw.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("strata.toml");
        std::fs::write(&p, "[chunk]\ntokens = 200\n[store]\nttl_secs = 10\n").unwrap();
        let env = vec![("STRATA_STORE_TTL_SECS".to_string(), "0".to_string())];
        let c = Config::load(Some(&p), env).unwrap();
        assert_eq!(c.chunk.tokens, 200);
        assert_eq!(c.store.ttl_secs, 0);
        assert_eq!(c.chunk.group_size, 8);
    }

    #[test]
    fn bad_values_are_named() {
        let env = vec![("STRATA_CHUNK_TOKENS".to_string(), "lots".to_string())];
        let e = Config::load(None, env).unwrap_err().to_string();
        assert!(e.contains("STRATA_CHUNK_TOKENS"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[chunk]\ntokenz = 1\n").unwrap();
        let e = Config::load(Some(&p), Vec::new()).unwrap_err().to_string();
        assert!(e.contains("tokenz"), "{e}");
    }

    fn load_err(file: Option<&str>, env: &[(&str, &str)]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("strata.toml");
        if let Some(text) = file {
            std::fs::write(&p, text).unwrap();
        }
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let e = Config::load(file.map(|_| p.as_path()), env)
            .unwrap_err()
            .to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        e.replace(&dir.path().display().to_string(), "DIR")
    }

    #[test]
    fn config_errors_are_one_line_naming_file_line_field_and_problem() {
        for (file, env, expect) in [
            (
                None,
                vec![("STRATA_CHUNK_TOKENS", "-5")],
                "config: STRATA_CHUNK_TOKENS=\"-5\" (chunk.tokens): expected a whole number ≥ 0",
            ),
            (
                None,
                vec![("STRATA_BUILD_RETRIES", "99999999999")],
                "config: STRATA_BUILD_RETRIES=\"99999999999\" (build.retries): expected a whole number from 0 to 4294967295",
            ),
            (
                None,
                vec![("STRATA_CHUNK_TOKENS", "lots")],
                "config: STRATA_CHUNK_TOKENS=\"lots\" (chunk.tokens): expected a whole number",
            ),
            (
                None,
                vec![("STRATA_SERVER_METRICS_PUBLIC", "maybe")],
                "config: STRATA_SERVER_METRICS_PUBLIC=\"maybe\" (server.metrics_public): expected true or false",
            ),
            (
                Some("# comment\n[chunk]\ntokns = 5\n"),
                vec![],
                "config: DIR/strata.toml line 3 in [chunk]: unknown field `tokns`, expected `tokens` or `group_size`",
            ),
            (
                Some("[chunk]\ntokens = -5\n"),
                vec![],
                "config: DIR/strata.toml line 2: chunk.tokens: invalid value: integer `-5`, expected a whole number ≥ 0",
            ),
            (
                Some("[store]\nttl_secs = \"an hour\"\n"),
                vec![],
                "config: DIR/strata.toml line 2: store.ttl_secs: invalid type: string \"an hour\", expected a whole number ≥ 0",
            ),
            (
                Some("[chunk\ntokens = 5\n"),
                vec![],
                "config: DIR/strata.toml line 1: ",
            ),
            (
                Some("[chunk]\ntokens = 200\n"),
                vec![("STRATA_LEVELS_SUMMARY_RATIO", "1.5")],
                "config: levels.summary_ratio must be in (0, 1], got 1.5",
            ),
        ] {
            let e = load_err(file, &env);
            assert!(e.starts_with(expect), "expected {expect:?}, got {e:?}");
        }
    }

    #[test]
    fn zero_workers_and_unusable_tokens_are_refused() {
        let e = load_err(None, &[("STRATA_SERVER_WORKERS", "0")]);
        assert!(e.contains("server.workers must be at least 1"), "{e}");
        for (token, expect) in [
            ("   ", "server.token is blank"),
            (" secret", "leading or trailing whitespace"),
            ("secret\n", "leading or trailing whitespace"),
            ("sécret", "printable ASCII only"),
            ("sec\tret", "printable ASCII only"),
        ] {
            let e = load_err(None, &[("STRATA_SERVER_TOKEN", token)]);
            assert!(e.contains(expect), "{token:?}: {e}");
            assert!(
                !e.contains("sécret") && !e.contains("secret"),
                "the secret leaked: {e}"
            );
        }
        for ok in ["", "s3cr3t-token_with.punctuation~", "two words"] {
            let env = vec![("STRATA_SERVER_TOKEN".to_string(), ok.to_string())];
            assert_eq!(Config::load(None, env).unwrap().server.token, ok);
        }
    }
}
