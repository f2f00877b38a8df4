//! `strata mcp`: the engine as a Model Context Protocol server over stdio, for agents
//! (Claude, Cursor, any tool-calling loop), on the official Rust SDK (`rmcp`). The same
//! server type answers MCP over Streamable HTTP at `strata serve`'s `/mcp` (one [`Strata`]
//! per MCP session, on the REST API's engine; see `server::mcp`): there a session belongs
//! to the token that opened it ([`Caller`]).
//!
//! The tools: `load_corpus` (a scope's nodes, filtered and paged, kept as a segment),
//! `sub_query` (one prompt template over up to 100 items through the sub model, outputs
//! validated against a JSON schema), `execute_analysis` (a sandboxed script over segments
//! and sub-query results), the engine's own `context`, `query`, `grep` and `peek`, and
//! `forget` (the one tool that writes: it needs a token that may write the scope).
//! Every result carries its provenance: the source spans of what it returns, the time,
//! the model. Arguments that do not parse, or name things that do not exist, are JSON-RPC
//! errors -32602 (invalid params); a tool that fails while running returns a result marked
//! `isError` with a one-line reason. The session (segments, sub-query results) lives in
//! this process ([`session`]).
//!
//! Like `server`, this module holds no engine logic: each tool is an [`Engine`] call plus
//! what the protocol needs (paging, session ids, provenance).

mod analysis;
mod batch;
mod load;
mod read;
mod session;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, OnceLock};
use strata_core::error::{Error, Result};
use strata_core::level::Level;
use strata_engine::access::Access;
use strata_engine::engine::Engine;

/// Serves MCP on this process's stdin and stdout until the client closes stdin. Logs go
/// to stderr: stdout carries only protocol messages.
pub async fn serve_stdio(engine: Arc<Engine>, access: Access) -> Result<()> {
    let service = Strata::new(engine)
        .with_access(access)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Error::Invalid(format!("MCP session did not start: {e}")))?;
    service
        .waiting()
        .await
        .map_err(|e| Error::Internal(format!("MCP session: {e}")))?;
    Ok(())
}

/// Why a tool call failed: the caller's arguments (JSON-RPC -32602), or the work itself
/// (a result marked `isError`).
#[derive(Debug)]
pub(crate) enum ToolError {
    Invalid(String),
    Failed(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::Invalid(e) | ToolError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<Error> for ToolError {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(_) | Error::UnknownScope { .. } | Error::UnknownSource { .. } => {
                ToolError::Invalid(e.to_string())
            }
            e => ToolError::Failed(e.to_string()),
        }
    }
}

/// A tool's answer as MCP wants it: structured content (with its JSON text), a tool error
/// result, or a JSON-RPC error.
fn answer(
    r: std::result::Result<Value, ToolError>,
) -> std::result::Result<CallToolResult, ErrorData> {
    match r {
        Ok(v) => Ok(CallToolResult::structured(v)),
        Err(ToolError::Invalid(e)) => Err(ErrorData::invalid_params(e, None)),
        Err(ToolError::Failed(e)) => Ok(CallToolResult::error(vec![ContentBlock::text(e)])),
    }
}

/// A tool's arguments, parsed. Arguments that do not fit the tool's schema are JSON-RPC
/// -32602 (invalid params), as the issue asks; rmcp's own `Parameters` would make them a
/// tool error result instead (what MCP 2025-11-25 recommends, so a model can correct
/// itself — the message is the same either way).
fn args<T: DeserializeOwned>(a: JsonObject) -> std::result::Result<T, ErrorData> {
    serde_json::from_value(Value::Object(a))
        .map_err(|e| ErrorData::invalid_params(format!("invalid arguments: {e}"), None))
}

/// The JSON schema of a tool's arguments (`tools/list`), from the type they parse into.
fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("the schema of {}: {e}", std::any::type_name::<T>()))
}

/// One of the five levels, by name.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LevelName {
    Full,
    Detailed,
    Summary,
    Abstract,
    Metadata,
}

impl LevelName {
    pub(crate) fn level(self) -> Level {
        match self {
            LevelName::Full => Level::Full,
            LevelName::Detailed => Level::Detailed,
            LevelName::Summary => Level::Summary,
            LevelName::Abstract => Level::Abstract,
            LevelName::Metadata => Level::Metadata,
        }
    }
}

/// When a result was made: unix seconds and RFC 3339.
pub(crate) fn provenance_time(now: u64) -> Value {
    let rfc3339 = i64::try_from(now)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    serde_json::json!({ "unix": now, "rfc3339": rfc3339 })
}

pub(crate) use strata_engine::navigate::off_executor as blocking;

/// Who sent an MCP request over HTTP: the access its bearer token gives and a hash of the
/// token. The HTTP server puts it in the request's extensions; rmcp hands the request's
/// parts to the handler.
#[derive(Clone, Debug)]
pub struct Caller {
    pub access: Access,
    pub key: [u8; 32],
}

/// The [`Caller`] of the request `context` belongs to (none over stdio).
fn caller_of(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> Option<Caller> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
}

/// The MCP server: the engine, this session's state, and the tools.
#[derive(Clone)]
pub struct Strata {
    engine: Arc<Engine>,
    session: Arc<session::Session>,
    /// The scopes this session may read (`strata mcp --token`: a token's grant).
    access: Access,
    /// Over HTTP: the caller that opened the session (its `initialize`). Every later tool
    /// call must come with the same token, and reads what that token may read.
    owner: Arc<OnceLock<Caller>>,
    tool_router: ToolRouter<Strata>,
}

impl Strata {
    pub fn new(engine: Arc<Engine>) -> Strata {
        Strata {
            engine,
            session: Arc::default(),
            access: Access::full(),
            owner: Arc::default(),
            tool_router: Strata::tool_router(),
        }
    }

    /// A session limited to what `access` may read: a scope it may not read is unknown to
    /// it (the same error, naming nothing else), and searches over every scope search the
    /// ones it may read.
    pub fn with_access(mut self, access: Access) -> Strata {
        self.access = access;
        self
    }

    /// Holds a tool's arguments to the session's access: `scope` must be readable,
    /// `scopes` too (none given: the readable ones), and nodes peeked by id must belong to
    /// readable scopes.
    fn admit(&self, a: &mut JsonObject, takes_scopes: bool) -> std::result::Result<(), ErrorData> {
        if self.access.is_full() {
            return Ok(());
        }
        let unknown = |s: &str| ErrorData::invalid_params(format!("unknown scope `{s}`"), None);
        if let Some(Value::String(s)) = a.get("scope")
            && !self.access.can_read(s)
        {
            return Err(unknown(s));
        }
        if let Some(Value::Array(list)) = a.get("scopes") {
            for v in list {
                if let Some(s) = v.as_str()
                    && !self.access.can_read(s)
                {
                    return Err(unknown(s));
                }
            }
        }
        let empty = a
            .get("scopes")
            .is_none_or(|v| v.as_array().is_some_and(|l| l.is_empty()));
        if takes_scopes && empty {
            let names = self
                .engine
                .scope_names()
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            let visible = self.access.visible(names);
            if visible.is_empty() {
                return Err(ErrorData::invalid_params(
                    "no scope is open to this session's token".to_string(),
                    None,
                ));
            }
            a.insert(
                "scopes".into(),
                Value::Array(visible.into_iter().map(Value::String).collect()),
            );
        }
        if let Some(Value::Array(ids)) = a.get("ids") {
            let now = strata_core::clock::unix_now();
            for id in ids.iter().filter_map(Value::as_str) {
                let Some(nid) = strata_engine::node::NodeId::from_hex(id) else {
                    continue;
                };
                let hidden = match self.engine.node(&nid, now) {
                    Ok(n) => !self.access.can_read(&n.scope),
                    Err(_) => false,
                };
                if hidden {
                    return Err(ErrorData::invalid_params(
                        format!("unknown node `{id}`"),
                        None,
                    ));
                }
            }
        }
        Ok(())
    }
}

#[tool_router]
impl Strata {
    #[tool(
        input_schema = schema::<load::LoadCorpus>(),
        description = "Read a scope's nodes a page at a time, filtered by source, round range, speaker, level (default: full, the source text), date range (when stored) and a search term. Returns a segment id (page through it with `segment` + `page`; sub_query and execute_analysis take it), totals, the page's items with their metadata and source spans, and the provenance (filters applied, time)."
    )]
    async fn load_corpus(
        &self,
        mut a: JsonObject,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        self.admit(&mut a, false)?;
        let a = args(a)?;
        answer(
            load::load_corpus(
                &self.engine,
                &self.session,
                a,
                strata_core::clock::unix_now(),
            )
            .await,
        )
    }

    #[tool(
        input_schema = schema::<batch::SubQuery>(),
        description = "Run one prompt template over up to 100 items (inline, or from a segment): classify, extract, summarize, filter or compare, one sub-model call per item, concurrently. `{{item.FIELD}}` in the prompt is replaced by each item's field. Outputs are validated against `output_schema` (or the task's default), an invalid one retried once with what was wrong, then reported per item. Returns results in input order (each with the item's source spans), a result id for execute_analysis, usage and cost, and the provenance (model, batch size). Needs a model (`strata mcp --model openai:NAME --base-url URL`)."
    )]
    async fn sub_query(&self, a: JsonObject) -> std::result::Result<CallToolResult, ErrorData> {
        let a = args(a)?;
        answer(
            batch::sub_query(
                &self.engine,
                &self.session,
                a,
                strata_core::clock::unix_now(),
            )
            .await,
        )
    }

    #[tool(
        input_schema = schema::<analysis::ExecuteAnalysis>(),
        description = "Run a sandboxed Rhai script over loaded segments and sub-query results (the constants `segments`: id → items, and `sub_queries`: id → result), with operation and time limits. It may call grep(pattern, level, limit), search(query, limit), peek(id), children(id), llm_query(prompt), llm_batch([prompts]) and final(answer, ids), nothing else (no files, network, processes or modules). Returns the script's last expression (or its final answer), operations, calls and time used, and the provenance."
    )]
    async fn execute_analysis(
        &self,
        a: JsonObject,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let a = args(a)?;
        answer(
            analysis::execute_analysis(
                &self.engine,
                &self.session,
                a,
                strata_core::clock::unix_now(),
            )
            .await,
        )
    }

    #[tool(
        input_schema = schema::<read::Context>(),
        description = "A scope as a context window within a token budget, at a level (full, detailed, summary, abstract, metadata) or auto (an overview, older history coarse, recent rounds fine). Returns the text, the nodes used with their source spans, and the tokens."
    )]
    async fn context(&self, mut a: JsonObject) -> std::result::Result<CallToolResult, ErrorData> {
        self.admit(&mut a, false)?;
        let a = args(a)?;
        answer(read::context(&self.engine, a, strata_core::clock::unix_now()).await)
    }

    #[tool(
        input_schema = schema::<read::Query>(),
        description = "Answer a question over scopes (default: all) by navigating the levels; every word of the answer is a quote of a cited source span (source, byte offsets, quote, round, speaker). `time_limit_ms` bounds the wall time: when it runs out the answer is what was gathered so far (`limit_hit`: `time_limit`, `outcome` says so)."
    )]
    async fn query(
        &self,
        mut a: JsonObject,
        ct: tokio_util::sync::CancellationToken,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        self.admit(&mut a, true)?;
        let a = args(a)?;
        let stop = strata_engine::navigate::Stop::new(ct);
        answer(read::query(&self.engine, a, strata_core::clock::unix_now(), stop).await)
    }

    #[tool(
        input_schema = schema::<read::Grep>(),
        description = "BM25 search over the levels of scopes (default: all): hits with node id, level, score, text and source spans."
    )]
    async fn grep(&self, mut a: JsonObject) -> std::result::Result<CallToolResult, ErrorData> {
        self.admit(&mut a, true)?;
        let a = args(a)?;
        let now = strata_core::clock::unix_now();
        answer(read::grep(&self.engine, a, now).await)
    }

    #[tool(
        input_schema = schema::<read::Peek>(),
        description = "Read nodes by id (text, level, children, metadata, source spans), or a byte range of a source as ingested (`scope`, `source`, `start`, `end`)."
    )]
    async fn peek(&self, mut a: JsonObject) -> std::result::Result<CallToolResult, ErrorData> {
        self.admit(&mut a, false)?;
        let a = args(a)?;
        let now = strata_core::clock::unix_now();
        answer(blocking(|| read::peek(&self.engine, a, now)))
    }

    #[tool(
        input_schema = schema::<Forget>(),
        description = "Forget sources of a scope (or, with `whole_scope`, the whole scope): their text and every node derived from them leave the store, the index and every level; the rest of the scope is rebuilt on its next read. Durable when it returns. Returns what was removed: sources, nodes by level, bytes. Needs a token that may write the scope."
    )]
    async fn forget(&self, mut a: JsonObject) -> std::result::Result<CallToolResult, ErrorData> {
        self.admit(&mut a, false)?;
        let a: Forget = args(a)?;
        if !self.access.can_write(&a.scope) {
            return Err(ErrorData::invalid_params(
                format!(
                    "this session's token may read `{}` but not write it",
                    a.scope
                ),
                None,
            ));
        }
        if a.sources.is_empty() && !a.whole_scope {
            return Err(ErrorData::invalid_params(
                "name the sources to forget, or set whole_scope: true to forget the scope"
                    .to_string(),
                None,
            ));
        }
        if !a.sources.is_empty() && a.whole_scope {
            return Err(ErrorData::invalid_params(
                "give either sources or whole_scope, not both".to_string(),
                None,
            ));
        }
        let now = strata_core::clock::unix_now();
        let r = blocking(|| self.engine.forget(&a.scope, &a.sources, now));
        if r.is_ok() {
            self.session.forget(&a.scope);
        }
        answer(
            r.map_err(ToolError::from)
                .and_then(|r| {
                    serde_json::to_value(&r).map_err(|e| ToolError::Failed(e.to_string()))
                })
                .map(|mut v| {
                    v["provenance"] = serde_json::json!({ "time": provenance_time(now) });
                    v
                }),
        )
    }
}

/// `forget`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Forget {
    /// The scope.
    scope: String,
    /// Source ids to forget (as ingested: a document's path, a turn's `debate#turn-N`).
    #[serde(default)]
    sources: Vec<String>,
    /// Forget the whole scope (every source); required when `sources` is empty, so that
    /// an empty list never removes a scope by accident.
    #[serde(default)]
    whole_scope: bool,
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Strata {
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> std::result::Result<rmcp::model::InitializeResult, ErrorData> {
        if let Some(c) = caller_of(&context) {
            // The first initialize binds the session; a repeated one cannot rebind it.
            let _ = self.owner.set(c);
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> std::result::Result<rmcp::model::CallToolResponse, ErrorData> {
        use rmcp::handler::server::tool::ToolCallContext;
        match (self.owner.get(), caller_of(&context)) {
            // stdio: the access the process was started with.
            (None, None) => {
                let tcc = ToolCallContext::new(self, request, context);
                self.tool_router.call(tcc).await
            }
            // HTTP, a session: its token, and no other, reads what it may read.
            (Some(owner), Some(c)) if owner.key == c.key => {
                let this = self.clone().with_access(owner.access.clone());
                let tcc = ToolCallContext::new(&this, request, context);
                this.tool_router.call(tcc).await
            }
            // HTTP without a session (a stateless request, protocol 2026-07-28): rmcp made
            // this server for this one request; it reads what the request's token may.
            (None, Some(c)) => {
                let this = self.clone().with_access(c.access);
                let tcc = ToolCallContext::new(&this, request, context);
                this.tool_router.call(tcc).await
            }
            (Some(_), _) => Err(ErrorData::invalid_request(
                "this MCP session was opened with another token",
                None,
            )),
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("strata", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "strata keeps long context (debates, document collections) as a tree of abstraction levels with citations to exact source spans. Start with `grep` or `context`, page through a scope with `load_corpus`, fan a prompt out over its items with `sub_query`, and answer with `query`; every result says which source bytes it stands for.",
            )
    }
}
