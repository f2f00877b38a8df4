//! MCP over Streamable HTTP at `/mcp`: rmcp's server-side transport (a tower service)
//! mounted in the router, serving the tools of `strata mcp` ([`strata_mcp::Strata`], one
//! per MCP session) on the REST API's engine, so MCP clients and REST callers share one
//! store (sled or PostgreSQL) and one server.
//!
//! What holds for `/api` holds here: the bearer token (`server.token`, `server.tokens`) is
//! checked on every request (401 without one), and a session reads what the token that
//! opened it may read — a later request of the session with another token is refused; the
//! `Host`/`Origin` guard ([`super::policy`]) runs before it; a POST body must say JSON and
//! arrive within `server.body_timeout_ms` and `server.body_limit_bytes` (read here, before
//! rmcp sees it). rmcp's own `Host` check is off (the guard's is configurable), its body cap
//! is the server's.
//!
//! Streams: rmcp answers a POST with a server-sent-events stream (and a GET with the
//! session's standing stream). The connection's idle timer ([`super::edge`]) counts from
//! the last byte written once the handler has answered, so a stream quiet for
//! `server.idle_timeout_ms` would be closed; rmcp's keep-alive comment is sent at half that
//! time (at most every 15 s, at least every 100 ms), which keeps a live stream's connection
//! open, while a client that stops reading still lets it close. On shutdown the sessions
//! are cancelled, ending their streams, so the grace period is not spent waiting on them.

use super::extract::{body_required, one_line};
use super::{ApiError, AppState, access_of, unauthorized};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use std::time::Duration;
use strata_mcp::{Caller, Strata};

/// The `/mcp` service: rmcp's transport making a [`Strata`] per session.
pub(super) fn service(state: &Arc<AppState>) -> StreamableHttpService<Strata, LocalSessionManager> {
    let engine = state.engine.clone();
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_sse_keep_alive(Some(keep_alive(state.cfg.idle_timeout_ms)))
        .with_max_request_body_bytes(state.cfg.body_limit_bytes)
        .with_cancellation_token(state.mcp_stop.clone());
    StreamableHttpService::new(
        move || Ok(Strata::new(engine.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// How often a quiet event stream gets a keep-alive comment: half the idle timeout, between
/// 100 ms and 15 s.
fn keep_alive(idle_timeout_ms: u64) -> Duration {
    Duration::from_millis((idle_timeout_ms / 2).clamp(100, 15_000))
}

/// The token check (401, as for `/api`), then a POST body read whole within the server's
/// time and size limits; the request goes on to rmcp with the [`Caller`] in its extensions.
pub(super) async fn guard(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(access) = access_of(&s, req.headers()) else {
        return unauthorized();
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    let caller = Caller {
        access,
        key: *blake3::hash(&given).as_bytes(),
    };
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(caller);
    let req = if parts.method == Method::POST {
        match read_body(&s, Request::from_parts(parts, body)).await {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        }
    } else {
        Request::from_parts(parts, body)
    };
    next.run(req).await
}

/// The request with its body read: JSON by its content type (415), at most
/// `server.body_limit_bytes` (413), within `server.body_timeout_ms` (408).
async fn read_body(s: &Arc<AppState>, req: Request) -> Result<Request, ApiError> {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(super::extract::is_json);
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "an MCP message must be JSON sent with Content-Type: application/json",
        ));
    }
    let (parts, body) = req.into_parts();
    let limit = Duration::from_millis(s.cfg.body_timeout_ms);
    let read = Bytes::from_request(Request::from_parts(parts.clone(), body), s);
    let bytes = match tokio::time::timeout(limit, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(r)) => return Err(ApiError::new(r.status(), one_line(&r.body_text()))),
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within server.body_timeout_ms ({} ms)",
                    s.cfg.body_timeout_ms
                ),
            ));
        }
    };
    if bytes.is_empty() {
        return Err(body_required());
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn keep_alive_is_half_the_idle_timeout_within_bounds() {
        assert_eq!(super::keep_alive(30_000).as_millis(), 15_000);
        assert_eq!(super::keep_alive(10_000).as_millis(), 5_000);
        assert_eq!(super::keep_alive(100_000).as_millis(), 15_000);
        assert_eq!(super::keep_alive(50).as_millis(), 100);
    }
}
