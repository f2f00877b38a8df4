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
            abstract_max_tokens: 4000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Lifetime of derived nodes in seconds; 0 = never expire. FULL nodes never expire.
    pub ttl_secs: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig { ttl_secs: 3600 }
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
        }
    }
}

impl Config {
    /// Defaults, then `file` (if given), then `STRATA_*` variables from `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config> {
        let mut value = toml::Value::try_from(Config::default())
            .map_err(|e| Error::Config(format!("cannot serialise defaults: {e}")))?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let from_file: Config = toml::from_str(&text)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            value = toml::Value::try_from(from_file)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        }
        let env: Vec<(String, String)> = env.into_iter().collect();
        let table = value.as_table_mut().expect("config is a table");
        for (section, fields) in table.iter_mut() {
            let Some(fields) = fields.as_table_mut() else {
                continue;
            };
            for (field, slot) in fields.iter_mut() {
                let var = format!("STRATA_{}_{}", section, field).to_ascii_uppercase();
                let Some((_, raw)) = env.iter().find(|(k, _)| *k == var) else {
                    continue;
                };
                *slot = parse_like(slot, raw).ok_or_else(|| {
                    Error::Config(format!("{var}={raw:?}: expected a value like {slot}"))
                })?;
            }
        }
        let cfg: Config = value
            .try_into()
            .map_err(|e| Error::Config(format!("{e}")))?;
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
        if self.build.concurrency == 0 {
            return bad("build.concurrency must be at least 1");
        }
        if self.query.max_iterations == 0 || self.query.min_keep == 0 {
            return bad("query.max_iterations and query.min_keep must be at least 1");
        }
        Ok(())
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
}
