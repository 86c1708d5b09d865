//! What a request body may hold besides bytes: the body limit bounds its size, not what it
//! costs once read. A 9.6 MB run of 300,000 tiny content parts took the process from 36 MB to
//! 1.7 GB (each part is a map in memory, then copied into the state, its checkpoint and its
//! events). So every JSON body is counted before it is parsed (in `guard::read_body_in_time`,
//! on every route and protocol, MCP's included), and the messages a run brings are bounded by
//! number and parts.

use super::error::AppError;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::cell::Cell;

/// The most JSON values (objects, arrays, strings, numbers, …, keys included) a body may hold.
/// A long conversation is a few thousand; a stored vector a few thousand more.
pub const MAX_BODY_VALUES: usize = 100_000;

/// The most messages a run's input (or one AG-UI or A2A call) may bring.
pub const MAX_INPUT_MESSAGES: usize = 1_000;

/// The most content parts (text, images, data) across those messages.
pub const MAX_INPUT_PARTS: usize = 1_000;

/// Refuses (413) a JSON body of more than `MAX_BODY_VALUES` values, counted by a pass that
/// builds nothing; malformed JSON passes here and is refused by the parser after.
pub fn check_values(bytes: &[u8]) -> Result<(), AppError> {
    let left = Cell::new(MAX_BODY_VALUES);
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    match (Counted { left: &left }).deserialize(&mut reader) {
        Err(e) if e.to_string().starts_with(TOO_MANY) => Err(AppError::TooLarge(format!(
            "The body holds more than {MAX_BODY_VALUES} JSON values; send less at once"
        ))),
        _ => Ok(()),
    }
}

const TOO_MANY: &str = "too many values";

/// Counts one value and everything in it against `left`.
struct Counted<'a> {
    left: &'a Cell<usize>,
}

impl Counted<'_> {
    fn take<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get() {
            0 => Err(E::custom(TOO_MANY)),
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.take()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.take()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.take()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.take()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.take()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.take()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.take()?;
        while seq
            .next_element_seed(Counted { left: self.left })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.take()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            self.take()?;
            map.next_value_seed(Counted { left: self.left })?;
        }
        Ok(())
    }
}

/// Refuses (422) messages past `MAX_INPUT_MESSAGES`, or content parts past `MAX_INPUT_PARTS`
/// across them. `what` names the field in the message.
pub fn check_messages(messages: &[Value], what: &str) -> Result<(), AppError> {
    if messages.len() > MAX_INPUT_MESSAGES {
        return Err(AppError::Invalid(format!(
            "{what}: {} messages, the most one request may bring is {MAX_INPUT_MESSAGES}",
            messages.len()
        )));
    }
    let parts: usize = messages
        .iter()
        .map(|m| {
            ["content", "parts"]
                .iter()
                .filter_map(|key| m.get(key).and_then(Value::as_array))
                .map(Vec::len)
                .sum::<usize>()
        })
        .sum();
    if parts > MAX_INPUT_PARTS {
        return Err(AppError::Invalid(format!(
            "{what}: {parts} content parts, the most one request may bring is {MAX_INPUT_PARTS}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_without_building_them() {
        assert!(check_values(br#"{"a": [1, 2, {"b": "c"}], "d": null}"#).is_ok());
        let parts = format!("[{}]", vec![r#"{"t":"x"}"#; 40_000].join(","));
        let refused = check_values(parts.as_bytes()).unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        // Malformed JSON is the parser's to refuse, with its own message.
        assert!(check_values(b"{not json").is_ok());
    }

    #[test]
    fn messages_and_parts_are_bounded() {
        let part = serde_json::json!({"type": "text", "text": "x"});
        let one = serde_json::json!({"role": "user", "content": vec![part.clone(); 10]});
        assert!(check_messages(&vec![one.clone(); 100], "input.messages").is_ok());
        let error = check_messages(&vec![one; 101], "input.messages").unwrap_err();
        assert!(error.to_string().contains("1010 content parts"), "{error}");
        let a2a = serde_json::json!({"parts": vec![part; 1_001]});
        assert!(check_messages(&[a2a], "message").is_err());
        let many = vec![serde_json::json!({"role": "user", "content": "x"}); 1_001];
        assert!(check_messages(&many, "messages").is_err());
    }
}
