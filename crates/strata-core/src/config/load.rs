//! Loading and validating a configuration: defaults, then a TOML file, then `STRATA_*`
//! variables; every error one line naming the file (and line) or the variable and the field.

use super::{Config, EmbedSpec, ModelSpec};
use crate::error::{Error, Result};
use std::path::Path;

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
            // A variable that holds secrets is named, never shown.
            let shown = if section == "server" && (field == "token" || field == "tokens") {
                "(hidden)".to_string()
            } else {
                format!("{raw:?}")
            };
            let bad = |problem: &str| {
                Error::Config(format!("{var}={shown} ({section}.{field}): {problem}"))
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
        // A DETAILED prompt holds one chunk and asks for up to 0.75× it back, plus the
        // instructions; the reduction above SUMMARY needs room for a few inputs.
        let least = 2 * self.chunk.tokens + 600;
        if self.model.context_tokens < least {
            return Err(Error::Config(format!(
                "model.context_tokens ({}) is too small for chunk.tokens ({}): it must be at least {least} (2 × chunk.tokens + 600)",
                self.model.context_tokens, self.chunk.tokens
            )));
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
        if self.query.max_iterations == 0 || self.query.min_keep == 0 || self.query.max_nodes == 0 {
            return bad(
                "query.max_iterations, query.min_keep and query.max_nodes must be at least 1",
            );
        }
        ModelSpec::parse(&self.model.sub).map_err(|e| Error::Config(format!("model.sub: {e}")))?;
        ModelSpec::parse(&self.model.root)
            .map_err(|e| Error::Config(format!("model.root: {e}")))?;
        EmbedSpec::parse(&self.embed.model)
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
        check_token("server.token", &self.server.token)?;
        self.validate_server()?;
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

impl Config {
    /// The server's scoped tokens, host and origin lists, timeouts and caps.
    fn validate_server(&self) -> Result<()> {
        let sv = &self.server;
        let bad = |m: String| Err(Error::Config(m));
        for (i, g) in sv.tokens.iter().enumerate() {
            let name = format!("server.tokens[{i}]");
            if g.token.is_empty() {
                return bad(format!(
                    "{name}.token is empty: every scoped token needs one"
                ));
            }
            check_token(&format!("{name}.token"), &g.token)?;
            // Which token it repeats is not said: both are secrets.
            if g.token == sv.token || sv.tokens[..i].iter().any(|o| o.token == g.token) {
                return bad(format!(
                    "{name}.token repeats another token: each token must be different"
                ));
            }
            if g.scopes.is_empty() {
                return bad(format!(
                    "{name}.scopes is empty: list the scopes (names, `*` for any characters) it opens"
                ));
            }
            for p in &g.scopes {
                if p.is_empty() || p.trim() != p || p.chars().any(char::is_control) {
                    return bad(format!(
                        "{name}.scopes has {p:?}: a pattern is a scope name, `*` matching any characters, without surrounding whitespace"
                    ));
                }
            }
        }
        for h in &sv.allowed_hosts {
            if h.is_empty() || h.contains(|c: char| c.is_whitespace() || c.is_control() || c == '/')
            {
                return bad(format!(
                    "server.allowed_hosts has {h:?}: write a host name, with or without :port (e.g. strata.internal:7878)"
                ));
            }
        }
        for o in &sv.cors_origins {
            let rest = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"));
            let ok = o == "*"
                || rest.is_some_and(|r| {
                    !r.is_empty() && !r.contains(|c: char| c == '/' || c.is_whitespace())
                });
            if !ok {
                return bad(format!(
                    "server.cors_origins has {o:?}: write an origin as a browser sends it (https://app.example.com, no path), or *"
                ));
            }
        }
        for (name, v) in [
            ("server.idle_timeout_ms", sv.idle_timeout_ms),
            ("server.header_timeout_ms", sv.header_timeout_ms),
            ("server.body_timeout_ms", sv.body_timeout_ms),
            ("server.max_connections", sv.max_connections as u64),
            ("server.max_requests", sv.max_requests as u64),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }
}

/// A bearer token a client can send: empty (none) or printable ASCII without surrounding
/// whitespace. The errors never show the token.
fn check_token(name: &str, token: &str) -> Result<()> {
    let bad = |m: String| Err(Error::Config(m));
    if !token.is_empty() && token.trim() != token {
        return bad(if token.trim().is_empty() {
            format!("{name} is blank: set a token, or leave it empty for no auth")
        } else {
            format!(
                "{name} has leading or trailing whitespace, which no HTTP client can send: remove it"
            )
        });
    }
    if token.chars().any(|c| !(c.is_ascii_graphic() || c == ' ')) {
        // The character itself is not shown: it is part of a secret.
        return bad(format!(
            "{name} has a non-ASCII or control character: a bearer token travels in an HTTP header, so use printable ASCII only"
        ));
    }
    Ok(())
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
        toml::Value::Array(_) => "expected a comma-separated list, or a JSON array",
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
        // `a,b` or a JSON array (the form a list of tables such as server.tokens needs).
        Value::Array(_) if raw.trim_start().starts_with('[') => {
            let json: serde_json::Value = serde_json::from_str(raw).ok()?;
            Value::try_from(json).ok()?
        }
        Value::Array(_) => Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        ),
        _ => Value::String(raw.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AccessLevel;

    #[test]
    fn env_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("strata.toml");
        std::fs::write(
            &p,
            "[chunk]\ntokens = 200\n[store]\nttl_secs = 10\n[ingest]\nmax_source_mb = 5\n",
        )
        .unwrap();
        let env = vec![
            ("STRATA_STORE_TTL_SECS".to_string(), "0".to_string()),
            ("STRATA_INGEST_MAX_SOURCE_MB".to_string(), "3".to_string()),
        ];
        let c = Config::load(Some(&p), env).unwrap();
        assert_eq!(c.chunk.tokens, 200);
        assert_eq!(c.store.ttl_secs, 0);
        assert_eq!(c.chunk.group_size, 8);
        assert_eq!(c.ingest.max_source_bytes(), 3 << 20);
        assert_eq!(Config::default().ingest.max_source_mb, 64);
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
    fn a_context_too_small_for_a_chunk_is_refused() {
        let mut c = Config::default();
        c.model.context_tokens = 1000;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("model.context_tokens (1000) is too small for chunk.tokens (400)"),
            "{e}"
        );
        c.chunk.tokens = 200;
        c.validate().unwrap();
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

    #[test]
    fn server_tokens_lists_and_caps_load_from_file_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("strata.toml");
        std::fs::write(
            &p,
            "[server]\ntoken = \"admin\"\n[[server.tokens]]\ntoken = \"r\"\nscopes = [\"team-a-*\"]\n[[server.tokens]]\ntoken = \"w\"\nscopes = [\"b\"]\naccess = \"write\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&p), Vec::new()).unwrap();
        let t = &c.server.tokens;
        assert_eq!(
            (t.len(), t[0].access, t[1].access),
            (2, AccessLevel::Read, AccessLevel::Write)
        );
        let env = [
            (
                "STRATA_SERVER_TOKENS",
                r#"[{"token": "e", "scopes": ["x-*", "y"], "access": "write"}]"#,
            ),
            ("STRATA_SERVER_ALLOWED_HOSTS", "strata.internal, lb:8080"),
            ("STRATA_SERVER_CORS_ORIGINS", "https://app.example"),
            ("STRATA_SERVER_MAX_CONNECTIONS", "50"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let c = Config::load(None, env).unwrap();
        assert_eq!(c.server.tokens[0].scopes, ["x-*", "y"]);
        assert_eq!(c.server.allowed_hosts, ["strata.internal", "lb:8080"]);
        assert_eq!(c.server.cors_origins, ["https://app.example"]);
        assert_eq!(c.server.max_connections, 50);
    }

    #[test]
    fn bad_server_tokens_lists_and_caps_are_refused_without_showing_secrets() {
        for (env, expect) in [
            (
                (
                    "STRATA_SERVER_TOKENS",
                    r#"[{"token": "s3cret", "scopes": []}]"#,
                ),
                "server.tokens[0].scopes is empty",
            ),
            (
                (
                    "STRATA_SERVER_TOKENS",
                    r#"[{"token": "s3cret", "scopes": ["a"]}, {"token": "s3cret", "scopes": ["b"]}]"#,
                ),
                "server.tokens[1].token repeats another token",
            ),
            (
                (
                    "STRATA_SERVER_TOKENS",
                    r#"[{"token": " s3cret", "scopes": ["a"]}]"#,
                ),
                "server.tokens[0].token has leading or trailing whitespace",
            ),
            (
                (
                    "STRATA_SERVER_TOKENS",
                    r#"[{"token": "s3cret", "scopes": ["a"], "access": "admin"}]"#,
                ),
                "STRATA_SERVER_TOKENS=(hidden) (server.tokens): expected",
            ),
            (
                ("STRATA_SERVER_TOKENS", r#"[{"token": "s3cret""#),
                "STRATA_SERVER_TOKENS=(hidden) (server.tokens): expected a comma-separated list, or a JSON array",
            ),
            (
                ("STRATA_SERVER_CORS_ORIGINS", "https://app.example/"),
                "server.cors_origins has \"https://app.example/\"",
            ),
            (
                ("STRATA_SERVER_ALLOWED_HOSTS", "http://x"),
                "server.allowed_hosts has \"http://x\"",
            ),
            (
                ("STRATA_SERVER_MAX_REQUESTS", "0"),
                "server.max_requests must be at least 1",
            ),
            (
                ("STRATA_SERVER_IDLE_TIMEOUT_MS", "0"),
                "server.idle_timeout_ms must be at least 1",
            ),
        ] {
            let e = load_err(None, &[env]);
            assert!(e.contains(expect), "{env:?}: {e}");
            assert!(!e.contains("s3cret"), "the secret leaked: {e}");
        }
    }
}
