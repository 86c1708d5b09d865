//! Request parsing shared by the endpoints: enum fields named in their errors, and the checks a
//! run's `config` gets wherever it is given (an assistant, a run, a cron).

use super::error::{ApiResult, AppError};
use crate::store::JsonMap;

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
