//! Extractors whose rejections are problem details like every other error: a path segment
//! that is not UTF-8 (`%FF`), a query string that does not parse, a body that is not JSON.
//! A body is read only when it says `Content-Type: application/json` (any parameters; also
//! `application/*+json`): a web page cannot send that to another site without the
//! browser asking first (CORS), while a form or `text/plain` post it can — so those, and a
//! body with no content type at all, are refused 415 before anything is written. An empty
//! body is `{}` where the route allows it, and a body must arrive within
//! `server.body_timeout_ms` (408).

use super::{ApiError, AppState};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// `Path<T>` with a problem-details rejection.
pub(super) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(r) => Err(ApiError::new(r.status(), one_line(&r.body_text()))),
        }
    }
}

/// `Query<T>` with a problem-details rejection.
pub(super) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(r) => Err(ApiError::new(r.status(), one_line(&r.body_text()))),
        }
    }
}

/// Whether a `Content-Type` value says JSON: `application/json` or `application/*+json`,
/// any case, with any parameters (`; charset=utf-8`).
pub(super) fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json") && !sub.contains('/'))
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "a request body must be JSON sent with Content-Type: application/json (curl: -H 'content-type: application/json')",
    )
}

/// A JSON body; `None` when the body is empty. A body whose content type is not JSON is
/// refused unread; one with no content type is read (bounded by the body limit) only to
/// see whether it is empty.
pub(super) async fn json_body<T: DeserializeOwned>(
    req: Request,
    state: &Arc<AppState>,
) -> Result<Option<T>, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().is_ok_and(is_json));
    if declared == Some(false) {
        return Err(not_json());
    }
    let limit = Duration::from_millis(state.cfg.body_timeout_ms);
    let bytes = match tokio::time::timeout(limit, Bytes::from_request(req, state)).await {
        Ok(r) => r.map_err(|r| ApiError::new(r.status(), one_line(&r.body_text())))?,
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within server.body_timeout_ms ({} ms)",
                    state.cfg.body_timeout_ms
                ),
            ));
        }
    };
    // No body, or a JSON `null` (what a client serialising "nothing" sends), is no body.
    let empty = bytes.iter().all(u8::is_ascii_whitespace);
    if declared.is_none() && !empty {
        return Err(not_json());
    }
    if empty || bytes.trim_ascii() == b"null" {
        return Ok(None);
    }
    match Json::<T>::from_bytes(&bytes) {
        Ok(Json(v)) => Ok(Some(v)),
        Err(r) => {
            // axum says "Failed to deserialize the JSON body into the target type: {why}";
            // the why (an unknown field, a wrong type, with its line and column) is what
            // the client needs.
            let text = r.body_text();
            let why = text.split_once(": ").map_or(text.as_str(), |(_, w)| w);
            let msg = match &r {
                JsonRejection::JsonDataError(_) => format!("invalid request body: {why}"),
                JsonRejection::JsonSyntaxError(_) => {
                    format!("the request body is not valid JSON: {why}")
                }
                _ => text.clone(),
            };
            Err(ApiError::new(r.status(), one_line(&msg)))
        }
    }
}

/// A JSON body that may be left out (aragora's SDK posts some routes without one): an
/// empty body is `T::default()`.
pub(super) struct OptJson<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<Arc<AppState>> for OptJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        Ok(OptJson(json_body(req, state).await?.unwrap_or_default()))
    }
}

/// An optional whole number written as a JSON number or as a string of digits (`3` or
/// `"3"`): aragora's server takes both where it converts with `int(...)` or falls back to a
/// default (`max_iterations`, `max_nodes`, `chunk_size`). Anything else is refused as a
/// wrong type.
pub(super) fn lenient_int<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::Error;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Int {
        N(i64),
        S(String),
    }
    let n = match Option::<Int>::deserialize(d)? {
        None => return Ok(None),
        Some(Int::N(n)) => n,
        Some(Int::S(s)) => s.trim().parse::<i64>().map_err(|_| {
            D::Error::custom(format!("expected a whole number, found the string {s:?}"))
        })?,
    };
    T::try_from(n)
        .map(Some)
        .map_err(|_| D::Error::custom(format!("{n} is out of range")))
}

/// Errors are one line.
pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An empty body where one is required.
pub(super) fn body_required() -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "a JSON request body is required")
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn only_json_content_types_are_json() {
        for ct in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/problem+json",
        ] {
            assert!(is_json(ct), "{ct}");
        }
        for ct in [
            "text/plain",
            "text/plain; charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "text/json",
            "",
        ] {
            assert!(!is_json(ct), "{ct}");
        }
    }
}
