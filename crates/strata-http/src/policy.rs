//! What a web page in the user's browser must not be able to do with the server:
//!
//! - DNS rebinding: a page of `evil.example` whose name now resolves to 127.0.0.1 calls the
//!   server as its own origin. Its requests carry `Host: evil.example`, so a server without a
//!   token answers only hosts that cannot be rebound — IP addresses and `localhost` — and
//!   the names in `server.allowed_hosts` (with a token, only those names when it is set);
//!   any other `Host` gets 421 (`/healthz` and `/metrics` aside). The port is not
//!   compared: a container's port may be mapped, and a rebinding needs a name.
//! - Cross-site writes: a page may post to any address without asking (a "simple"
//!   request: a form, `text/plain`, or no body), and then its browser sends `Origin`. A
//!   request that changes something and comes from an origin that is neither this server's
//!   nor in `server.cors_origins` is refused 403 (JSON bodies must also say
//!   `Content-Type: application/json`, which no page can send without asking: see
//!   `extract`).
//! - Reading answers: CORS stays closed (no `Access-Control-Allow-Origin`) unless the
//!   origin is in `server.cors_origins`; preflights are answered here, before the token
//!   check (a browser sends none with them).

use super::{ApiError, AppState};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use strata_engine::config::ServerConfig;

/// The Host and origin rules of one server.
pub(super) struct Policy {
    /// Whether `Host` is checked: no token is configured, or `allowed_hosts` is set.
    check_host: bool,
    /// Without a token, `localhost` and IP addresses are accepted too.
    local_names: bool,
    allowed_hosts: Vec<String>,
    cors_origins: Vec<String>,
}

impl Policy {
    pub(super) fn new(cfg: &ServerConfig, open: bool) -> Policy {
        Policy {
            check_host: open || !cfg.allowed_hosts.is_empty(),
            local_names: open,
            allowed_hosts: cfg
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            cors_origins: cfg.cors_origins.clone(),
        }
    }

    /// Whether a request for `host` (a `Host` value, with or without its port) is
    /// answered.
    fn host_ok(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let name = host_name(&host);
        if self.local_names && (name == "localhost" || is_ip(name)) {
            return true;
        }
        self.allowed_hosts
            .iter()
            .any(|a| *a == host || (!a.contains(':') && a == name))
    }

    /// Whether `origin` may read answers (CORS) and send writes.
    fn cors_allows(&self, origin: &str) -> bool {
        self.cors_origins.iter().any(|o| o == "*" || o == origin)
    }
}

/// `name` of `name:port`, `[v6]` of `[v6]:port`, without a trailing dot.
fn host_name(host: &str) -> &str {
    let name = match host.rsplit_once(':') {
        Some((n, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !n.ends_with(':') => n,
        _ => host,
    };
    name.strip_suffix('.').unwrap_or(name)
}

fn is_ip(name: &str) -> bool {
    match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().is_ok(),
        None => name.parse::<Ipv4Addr>().is_ok(),
    }
}

/// The `Host` of a request: the URI's authority (absolute form), else the header.
fn host_of(req: &Request) -> Option<String> {
    if let Some(a) = req.uri().authority() {
        return Some(a.as_str().to_string());
    }
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Whether `origin` (`scheme://host[:port]`) names the host the request was sent to.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((rest, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// The middleware: Host, Origin and CORS (see the module).
pub(super) async fn guard(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let p = &s.policy;
    let host = host_of(&req);
    // /healthz and /metrics name no scope and behave as they always have: a probe or a
    // scraper may name the server any way it likes.
    if p.check_host && !matches!(req.uri().path(), "/healthz" | "/metrics") {
        match host.as_deref() {
            Some(h) if p.host_ok(h) => {}
            Some(h) => {
                return ApiError::new(
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "this server does not answer for host {h:?}: call it by IP address or localhost, or list the name in server.allowed_hosts"
                    ),
                )
                .into_response();
            }
            None => {
                return ApiError::new(StatusCode::MISDIRECTED_REQUEST, "a Host header is required")
                    .into_response();
            }
        }
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let allowed = origin.as_deref().filter(|o| p.cors_allows(o));
    if req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        return match allowed {
            Some(o) => preflight(o),
            None => ApiError::new(
                StatusCode::FORBIDDEN,
                "cross-origin requests are not allowed from this origin (server.cors_origins)",
            )
            .into_response(),
        };
    }
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if let Some(o) = &origin
        && !safe
        && allowed.is_none()
        && !same_origin(o, host.as_deref())
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!("a cross-origin request from {o:?} is refused: that origin is not in server.cors_origins"),
        )
        .into_response();
    }
    let allowed = allowed.map(str::to_string);
    let mut resp = next.run(req).await;
    if let Some(o) = allowed {
        allow_origin(resp.headers_mut(), &o);
    }
    resp
}

fn allow_origin(h: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.append(header::VARY, HeaderValue::from_static("origin"));
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("retry-after, www-authenticate, allow, mcp-session-id"),
        );
    }
}

/// The answer to an allowed origin's preflight.
fn preflight(origin: &str) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    allow_origin(h, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        // The MCP ones: `/mcp`'s session, protocol version and stream resumption.
        HeaderValue::from_static(
            "authorization, content-type, mcp-session-id, mcp-protocol-version, last-event-id",
        ),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_cannot_be_rebound_pass() {
        let open = Policy::new(&ServerConfig::default(), true);
        for h in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST",
            "localhost.:80",
            "[::1]:7878",
            "[::1]",
            "10.1.2.3:9000",
        ] {
            assert!(open.host_ok(h), "{h}");
        }
        for h in [
            "evil.example:7878",
            "127.0.0.1.nip.io:7878",
            "localhost.evil.example",
            "[::1",
            "",
        ] {
            assert!(!open.host_ok(h), "{h}");
        }
        let cfg = ServerConfig {
            allowed_hosts: vec!["Strata.Internal".into(), "lb:8080".into()],
            ..Default::default()
        };
        let listed = Policy::new(&cfg, true);
        assert!(listed.host_ok("strata.internal:7878") && listed.host_ok("lb:8080"));
        assert!(!listed.host_ok("lb:8081") && listed.host_ok("127.0.0.1:1"));
        // With a token and a list, only the list.
        let tokened = Policy::new(&cfg, false);
        assert!(tokened.check_host && !tokened.host_ok("127.0.0.1:1"));
        assert!(!Policy::new(&ServerConfig::default(), false).check_host);
    }

    #[test]
    fn same_origin_compares_scheme_less_authority() {
        assert!(same_origin("http://127.0.0.1:7878", Some("127.0.0.1:7878")));
        assert!(!same_origin("http://evil.example", Some("127.0.0.1:7878")));
        assert!(!same_origin("null", Some("127.0.0.1:7878")));
    }
}
