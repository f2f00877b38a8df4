//! Extractors whose rejections are problem details like every other error: a path segment
//! that is not UTF-8 (`%FF`), a query string that does not parse, a body that is not JSON.
//! Bodies are read whatever their content type says (aragora's own `curl -d` example sends
//! a form content type), and an empty body is `{}` where the route allows it.

use super::ApiError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

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

/// A JSON body, whatever the content type; `None` when the body is empty.
pub(super) async fn json_body<S: Send + Sync, T: DeserializeOwned>(
    req: Request,
    state: &S,
) -> Result<Option<T>, ApiError> {
    let bytes = Bytes::from_request(req, state)
        .await
        .map_err(|r| ApiError::new(r.status(), one_line(&r.body_text())))?;
    // No body, or a JSON `null` (what a client serialising "nothing" sends), is no body.
    if bytes.iter().all(u8::is_ascii_whitespace) || bytes.trim_ascii() == b"null" {
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

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Ok(OptJson(json_body(req, state).await?.unwrap_or_default()))
    }
}

/// Errors are one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An empty body where one is required.
pub(super) fn body_required() -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "a JSON request body is required")
}
