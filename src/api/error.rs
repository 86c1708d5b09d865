//! The one HTTP error type: every failure becomes `{"detail": …}` with a fitting status, and
//! server errors are logged in full but shown to clients only as "internal error".

use crate::store::StoreError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    NotFound(String),
    /// A well-formed request the server cannot accept (422).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    /// No credentials, or ones that do not verify (401); the text says which.
    #[error("{0}")]
    Unauthorized(String),
    /// Visible but not the caller's to change (system assistants).
    #[error("{0}")]
    Forbidden(String),
    /// A limit on requests or runs (429, with Retry-After in seconds).
    #[error("{detail}")]
    TooMany { detail: String, retry_after: u64 },
    /// The response cannot be given in any type `Accept` names (406).
    #[error("{0}")]
    NotAcceptable(String),
    /// A body that is not JSON (415).
    #[error("{0}")]
    UnsupportedMedia(String),
    /// The client took too long to send its body (408).
    #[error("{0}")]
    Timeout(String),
    /// Something the request needs is down for now (503, with Retry-After).
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// The message the reference server gives for a busy thread under `reject`.
pub const BUSY: &str = "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.";

impl AppError {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::UnsupportedMedia(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Store(
                StoreError::Busy(_) | StoreError::Conflict(_) | StoreError::DuplicateRun { .. },
            ) => StatusCode::CONFLICT,
            Self::Store(StoreError::NotFound(_)) => StatusCode::NOT_FOUND,
            Self::Store(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What a client of any protocol is told: the detail, except that a server error is only
    /// "internal error" (its text names stored values, keys or paths; the log has it in full).
    pub(super) fn public_detail(&self) -> String {
        let status = self.status();
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            "internal error".to_owned()
        } else {
            self.detail()
        }
    }

    pub(super) fn detail(&self) -> String {
        match self {
            Self::Store(StoreError::Busy(_)) => BUSY.to_owned(),
            Self::Store(e) if e.is_transient() => {
                "The database is unavailable right now; try again shortly.".to_owned()
            }
            other => other.to_string(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let Self::TooMany { retry_after, .. } = &self {
            let retry = [(axum::http::header::RETRY_AFTER, retry_after.to_string())];
            return (status, retry, Json(json!({ "detail": self.detail() }))).into_response();
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = %self, "request refused: a dependency is unavailable");
            let retry = [(axum::http::header::RETRY_AFTER, "5")];
            return (status, retry, Json(json!({ "detail": self.detail() }))).into_response();
        }
        if status.is_server_error() {
            tracing::error!(error = ?self, "request failed");
        }
        (status, Json(json!({ "detail": self.public_detail() }))).into_response()
    }
}

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, AppError>;

/// A JSON body. Unlike axum's `Json` it accepts a missing content type (the SDKs send bodiless
/// POSTs), treats an empty body as `{}`, and reports problems as `{"detail"}` with 422
/// (invalid), 413 (too large), 408 (sent too slowly) or 415 (not JSON: a form or `text/plain`
/// body is what a web page of any origin may send without a preflight, so it is refused even
/// where the reference reads it).
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(&req)?;
        let bytes = read_body(req, state).await?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        // serde would read a struct from an array too (`[1, 2]` as its fields in order).
        if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(AppError::Invalid(
                "Invalid request body: expected a JSON object".into(),
            ));
        }
        parse(text).map(Body)
    }
}

/// Reads a whole body (nothing may follow the value), naming the field an error is about.
fn parse<T: DeserializeOwned>(text: &[u8]) -> Result<T, AppError> {
    let mut json = serde_json::Deserializer::from_slice(text);
    let value = serde_path_to_error::deserialize(&mut json)
        .map_err(|e| AppError::Invalid(format!("Invalid request body: {}", at(&e))))?;
    json.end()
        .map_err(|e| AppError::Invalid(format!("Invalid request body: {e}")))?;
    Ok(value)
}

/// A body's error with the field it is about (`multitask_strategy: unknown variant …`); one
/// about the whole body is given as it is.
pub(crate) fn at(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    match error.path().to_string().as_str() {
        "." => error.inner().to_string(),
        path => format!("{path}: {}", error.inner()),
    }
}

/// Refuses a body declared as anything but JSON (`application/json`, `…+json`); no content
/// type at all is accepted here (a bodiless POST), a non-empty body without one is refused
/// earlier (`guard::read_body_in_time`).
fn check_content_type(req: &Request) -> Result<(), AppError> {
    let Some(value) = req.headers().get(axum::http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let value = value.to_str().unwrap_or_default();
    if is_json(value) {
        return Ok(());
    }
    Err(AppError::UnsupportedMedia(format!(
        "Request bodies must be JSON: send Content-Type: application/json (got '{value}')"
    )))
}

/// Whether a `Content-Type` names JSON (`application/json`, `application/…+json`).
pub(crate) fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The request body, with a 413 when it is over the limit.
async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, AppError> {
    Bytes::from_request(req, state).await.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(inner)
            if inner.status() == StatusCode::PAYLOAD_TOO_LARGE =>
        {
            AppError::TooLarge("Request body is too large".into())
        }
        other => AppError::Invalid(format!("Could not read the request body: {other}")),
    })
}

/// A JSON array body (`/runs/batch`), with `Body`'s errors.
pub struct BodyList<T>(pub Vec<T>);

impl<S, T> FromRequest<S> for BodyList<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(&req)?;
        let bytes = read_body(req, state).await?;
        parse(&bytes).map(BodyList)
    }
}

/// A typed query string. Unlike axum's `Query` a malformed one is a 422 `{"detail"}`.
pub struct Params<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for Params<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let raw = parts.uri.query().unwrap_or_default();
        query_from(raw)
            .map(Params)
            .map_err(|e| AppError::Invalid(format!("Invalid query string: {e}")))
    }
}

fn query_from<T: DeserializeOwned>(raw: &str) -> Result<T, String> {
    axum::extract::Query::<T>::try_from_uri(
        &format!("/?{raw}")
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| e.to_string())?,
    )
    .map(|q| q.0)
    .map_err(|e| e.body_text())
}
