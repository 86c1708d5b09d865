//! Query strings read by hand where keys repeat (`select=a&select=b`, `stream_mode=…`).

use super::error::{ApiResult, AppError};

/// Query-string pairs, keeping repeated keys.
pub(super) fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(super) fn query_values(pairs: &[(String, String)], key: &str) -> Vec<String> {
    pairs
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

pub(super) fn query_flag(pairs: &[(String, String)], key: &str) -> ApiResult<bool> {
    match query_values(pairs, key)
        .last()
        .map(|v| v.to_ascii_lowercase())
    {
        None => Ok(false),
        Some(v) if matches!(v.as_str(), "true" | "1" | "yes") => Ok(true),
        Some(v) if matches!(v.as_str(), "false" | "0" | "no" | "") => Ok(false),
        Some(v) => Err(AppError::Invalid(format!(
            "{key}: expected a boolean, got '{v}'"
        ))),
    }
}

pub(super) fn query_int(pairs: &[(String, String)], key: &str, default: i64) -> ApiResult<i64> {
    match query_values(pairs, key).last() {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| AppError::Invalid(format!("{key}: expected an integer, got '{v}'"))),
    }
}
