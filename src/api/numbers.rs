//! Integers in request bodies. JSON Schema's `integer` includes whole numbers written with a
//! fraction (`10.0`, what some JSON encoders send), which serde's `i64` refuses.

use serde::de::Error;
use serde::{Deserialize, Deserializer};
use serde_json::Number;

fn whole(n: &Number) -> Option<i64> {
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

/// An optional integer field.
pub(crate) fn opt_whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => whole(&n)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("expected an integer, got {n}"))),
    }
}

/// A required integer field.
pub(crate) fn whole_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = Number::deserialize(d)?;
    whole(&n).ok_or_else(|| D::Error::custom(format!("expected an integer, got {n}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Page {
        #[serde(default, deserialize_with = "opt_whole")]
        limit: Option<i64>,
    }

    #[test]
    fn whole_numbers_with_a_fraction_are_integers() {
        let page: Page = serde_json::from_str(r#"{"limit": 10.0}"#).unwrap();
        assert_eq!(page.limit, Some(10));
        let page: Page = serde_json::from_str(r#"{}"#).unwrap();
        assert_eq!(page.limit, None);
        assert!(serde_json::from_str::<Page>(r#"{"limit": 1.5}"#).is_err());
        assert!(serde_json::from_str::<Page>(r#"{"limit": "3"}"#).is_err());
    }
}
