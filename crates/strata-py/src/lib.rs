//! `strata._strata`: the engine in-process for Python. One `Db` holds an open [`Engine`] and
//! its tokio runtime; every method releases the GIL while strata works and returns its
//! result as the JSON the CLI prints with `--json` (the `strata` package turns it into
//! typed objects). Errors are `strata.StrataError` with strata's one-line message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::path::PathBuf;
use strata::source::{InputFile, Turn};
use strata::{
    Config, Engine, Level, LevelChoice, NoProgress, ScopeKind, Time, TimeRange, unix_now,
};

create_exception!(
    _strata,
    StrataError,
    PyException,
    "A strata error: its message is one line."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    StrataError::new_err(e.to_string())
}

fn json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(err)
}

/// An open store: a directory (sled) or a `postgres://` URL.
#[pyclass(module = "strata._strata")]
struct Db {
    /// The job workers, TTL sweeper, index follower and warmer; dropped (told to stop)
    /// before the runtime they run on.
    _service: strata::service::Service,
    engine: std::sync::Arc<Engine>,
    rt: tokio::runtime::Runtime,
}

impl Drop for Db {
    /// A snapshot of sled's log when the store is let go (what the CLI leaves after a
    /// command that wrote); a failure is not an error — only the next open's speed.
    fn drop(&mut self) {
        if !self.engine.is_read_only() {
            let _ = self.engine.checkpoint();
        }
    }
}

#[pymethods]
impl Db {
    /// Opens (or creates) the store at `path`. `config` is a strata TOML file; `settings`
    /// are `(SECTION_FIELD, value)` pairs applied as `STRATA_SECTION_FIELD` variables would
    /// be (e.g. `("MODEL_SUB", "openai:gpt-4o-mini")`), after the process environment.
    #[new]
    #[pyo3(signature = (path, config=None, settings=Vec::new()))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        config: Option<PathBuf>,
        settings: Vec<(String, String)>,
    ) -> PyResult<Db> {
        py.detach(|| {
            let mut env: Vec<(String, String)> = std::env::vars().collect();
            env.extend(
                settings
                    .into_iter()
                    .map(|(k, v)| (format!("STRATA_{}", k.to_uppercase()), v)),
            );
            let cfg = Config::load(config.as_deref(), env).map_err(err)?;
            cfg.validate().map_err(err)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(err)?;
            let (engine, service) = {
                let _guard = rt.enter();
                let engine = std::sync::Arc::new(Engine::open(&path, cfg).map_err(err)?);
                let service = strata::service::Service::start(engine.clone()).map_err(err)?;
                (engine, service)
            };
            Ok(Db {
                _service: service,
                engine,
                rt,
            })
        })
    }

    /// Ingests files (paths) into `scope`; `kind` is `debate` or `documents` (default: by
    /// the files), `time` when documents were written.
    #[pyo3(signature = (scope, paths, kind=None, time=None))]
    fn ingest_files(
        &self,
        py: Python<'_>,
        scope: String,
        paths: Vec<PathBuf>,
        kind: Option<String>,
        time: Option<String>,
    ) -> PyResult<String> {
        py.detach(|| {
            let kind = kind
                .map(|k| k.parse::<ScopeKind>())
                .transpose()
                .map_err(err)?;
            let time = time.map(|t| Time::parse(&t)).transpose().map_err(err)?;
            let r = self
                .engine
                .ingest_files_at(&scope, kind, &paths, time, unix_now())
                .map_err(err)?;
            json(&r)
        })
    }

    /// Ingests texts as documents of `scope`: `(source_id, text)` pairs.
    #[pyo3(signature = (scope, texts, time=None))]
    fn ingest_texts(
        &self,
        py: Python<'_>,
        scope: String,
        texts: Vec<(String, String)>,
        time: Option<String>,
    ) -> PyResult<String> {
        py.detach(|| {
            if texts.is_empty() {
                return Err(err("no texts given"));
            }
            let time = time.map(|t| Time::parse(&t)).transpose().map_err(err)?;
            let mut files = Vec::with_capacity(texts.len());
            for (id, text) in texts {
                let mut input = strata::source::document(&id, text).map_err(err)?;
                input.time = time;
                files.push(InputFile::single(ScopeKind::Doc, &id, input));
            }
            let r = self
                .engine
                .ingest(&scope, &files, unix_now())
                .map_err(err)?;
            json(&r)
        })
    }

    /// Appends one turn to the debate `scope`; returns the report and the turn's source id.
    #[pyo3(signature = (scope, round, speaker, text, time=None))]
    fn append(
        &self,
        py: Python<'_>,
        scope: String,
        round: u32,
        speaker: String,
        text: String,
        time: Option<String>,
    ) -> PyResult<String> {
        py.detach(|| {
            let time = time.map(|t| Time::parse(&t)).transpose().map_err(err)?;
            let turn = Turn {
                round,
                speaker,
                text,
                time,
            };
            let (r, id) = self.engine.append(&scope, turn, unix_now()).map_err(err)?;
            json(&serde_json::json!({"report": r, "source": id}))
        })
    }

    /// Builds (or refreshes) every level of `scope`.
    fn compress(&self, py: Python<'_>, scope: String) -> PyResult<String> {
        py.detach(|| {
            let r = self
                .rt
                .block_on(self.engine.compress(&scope, unix_now(), &NoProgress))
                .map_err(err)?;
            // As the CLI does after a command that wrote: a snapshot of sled's log, so the
            // read-only opens after a build do not each scan what it wrote. Only a
            // speed-up (the build's writes were flushed before it returned).
            let _ = self.engine.checkpoint();
            json(&r)
        })
    }

    /// A context window of `scope` within `budget` tokens: at `level`, or for `question`.
    #[pyo3(signature = (scope, level="auto".to_string(), budget=2000, question=None, since=None, until=None))]
    #[allow(clippy::too_many_arguments)]
    fn context(
        &self,
        py: Python<'_>,
        scope: String,
        level: String,
        budget: usize,
        question: Option<String>,
        since: Option<String>,
        until: Option<String>,
    ) -> PyResult<String> {
        py.detach(|| {
            let range = TimeRange::parse(since.as_deref(), until.as_deref()).map_err(err)?;
            let now = unix_now();
            let w = match question {
                Some(q) => self.rt.block_on(self.engine.context_for(
                    &scope,
                    &q,
                    budget,
                    &range,
                    now,
                    &NoProgress,
                )),
                None => {
                    let choice = level.parse::<LevelChoice>().map_err(err)?;
                    self.rt.block_on(self.engine.context_during(
                        &scope,
                        choice,
                        budget,
                        &range,
                        now,
                        &NoProgress,
                    ))
                }
            }
            .map_err(err)?;
            json(&w)
        })
    }

    /// Answers `question` over `scopes` (every scope when empty) with citations.
    fn query(&self, py: Python<'_>, scopes: Vec<String>, question: String) -> PyResult<String> {
        py.detach(|| {
            let scopes = if scopes.is_empty() {
                self.engine.scope_names().map_err(err)?
            } else {
                scopes
            };
            let r = self
                .rt
                .block_on(
                    self.engine
                        .query(&strata::Ask::new(&scopes, &question, unix_now())),
                )
                .map_err(err)?;
            json(&r)
        })
    }

    /// BM25 search of `scopes` (all when empty) at `levels` (all when empty).
    #[pyo3(signature = (scopes, pattern, levels=Vec::new(), limit=20))]
    fn grep(
        &self,
        py: Python<'_>,
        scopes: Vec<String>,
        pattern: String,
        levels: Vec<String>,
        limit: usize,
    ) -> PyResult<String> {
        py.detach(|| {
            let levels = levels
                .iter()
                .map(|l| l.parse::<Level>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            let hits = self
                .rt
                .block_on(
                    self.engine
                        .grep(&scopes, &pattern, &levels, limit, unix_now()),
                )
                .map_err(err)?;
            json(&hits)
        })
    }

    /// One node by id (hex), whole.
    fn peek(&self, py: Python<'_>, id: String) -> PyResult<String> {
        py.detach(|| {
            let id = strata::NodeId::from_hex(&id)
                .ok_or_else(|| err(format!("not a node id: {id:?} (64 hex digits)")))?;
            let n = self.engine.node(&id, unix_now()).map_err(err)?;
            json(&n)
        })
    }

    /// Removes `sources` of `scope` (the whole scope when `whole_scope`) and every node
    /// derived from them, durably; returns what was removed.
    #[pyo3(signature = (scope, sources=Vec::new(), whole_scope=false))]
    fn forget(
        &self,
        py: Python<'_>,
        scope: String,
        sources: Vec<String>,
        whole_scope: bool,
    ) -> PyResult<String> {
        py.detach(|| {
            if sources.is_empty() && !whole_scope {
                return Err(err(
                    "forget: name the sources to forget, or whole_scope=True for the whole scope",
                ));
            }
            let r = self
                .engine
                .forget(&scope, &sources, unix_now())
                .map_err(err)?;
            json(&r)
        })
    }

    /// Store-wide numbers.
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| json(&self.engine.stats(unix_now()).map_err(err)?))
    }
}

#[pymodule]
fn _strata(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Db>()?;
    m.add("StrataError", m.py().get_type::<StrataError>())?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
