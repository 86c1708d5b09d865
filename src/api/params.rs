//! Request parsing shared by the endpoints: ids in paths and bodies, enum fields named in their
//! errors, and the checks a run's `config` gets wherever it is given (an assistant, a run, a cron).

use super::error::{ApiResult, AppError};
use crate::ids::BadId;
use crate::store::JsonMap;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The ids a path names (`/threads/{thread_id}/runs/{run_id}` is `Ids<(ThreadId, RunId)>`),
/// parsed into their types before the handler runs; a malformed one is the reference's 422
/// (`Invalid thread ID: must be a UUID`).
pub(crate) struct Ids<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Ids<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(ids)) => Ok(Self(ids)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => match e.into_kind() {
                ErrorKind::Message(message) => Err(AppError::Invalid(message)),
                other => Err(AppError::Invalid(other.to_string())),
            },
            Err(other) => Err(AppError::Invalid(other.body_text())),
        }
    }
}

/// Parses an id from a body or a query, with the reference's message for a malformed one.
pub(crate) fn parse_id<T: std::str::FromStr<Err = BadId>>(raw: &str) -> ApiResult<T> {
    raw.parse()
        .map_err(|e: BadId| AppError::Invalid(e.to_string()))
}

/// Parses an optional enum field, naming the field in the error.
pub(crate) fn optional_enum<T: std::str::FromStr<Err = String>>(
    raw: Option<&str>,
    field: &str,
) -> ApiResult<Option<T>> {
    raw.map(|text| {
        text.parse()
            .map_err(|e| AppError::Invalid(format!("{field}: {e}")))
    })
    .transpose()
}

/// Parses an optional enum field with a default, naming the field in the error.
pub(crate) fn parse_enum<T: std::str::FromStr<Err = String>>(
    raw: Option<&str>,
    field: &str,
    default: T,
) -> ApiResult<T> {
    Ok(optional_enum(raw, field)?.unwrap_or(default))
}

/// `recursion_limit`, when set, is a whole number of supersteps in 1..=10000.
pub(crate) fn check_recursion_limit(config: &JsonMap) -> ApiResult<()> {
    match config.get("recursion_limit") {
        Some(limit) if !limit.as_i64().is_some_and(|l| (1..=10_000).contains(&l)) => {
            Err(AppError::Invalid(
                "config.recursion_limit must be an integer between 1 and 10000".into(),
            ))
        }
        _ => Ok(()),
    }
}
