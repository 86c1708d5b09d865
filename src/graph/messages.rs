//! LangChain-style chat messages as JSON, and the `add_messages` merge: coercion of client input
//! (roles, bare strings, tuples), default fields, ids, replace-by-id and removal.

use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Message id that clears the whole list when sent as a `remove` message.
pub const REMOVE_ALL: &str = "__remove_all__";

/// Why a value could not be read as a message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid message: {0}")]
pub struct MessageError(pub String);

/// Turns one client-supplied message into the canonical dict, giving it an id if it has none.
pub fn coerce(value: Value) -> Result<Value, MessageError> {
    let mut msg = match value {
        Value::String(text) => obj(&[("type", json!("human")), ("content", json!(text))]),
        Value::Array(pair) if pair.len() == 2 => from_tuple(pair)?,
        Value::Object(map) => map,
        other => return Err(MessageError(format!("expected an object, got {other}"))),
    };
    let kind = message_type(&msg)?;
    msg.remove("role");
    msg.insert("type".into(), json!(kind));
    if !msg.contains_key("content") {
        if kind == "remove" {
            msg.insert("content".into(), json!(""));
        } else {
            return Err(MessageError("a message needs `content`".into()));
        }
    }
    fill_defaults(&mut msg, kind);
    Ok(Value::Object(msg))
}

fn obj(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn from_tuple(pair: Vec<Value>) -> Result<Map<String, Value>, MessageError> {
    match (&pair[0], &pair[1]) {
        (Value::String(role), content) => {
            Ok(obj(&[("role", json!(role)), ("content", content.clone())]))
        }
        _ => Err(MessageError("a message tuple is [role, content]".into())),
    }
}

fn message_type(msg: &Map<String, Value>) -> Result<&'static str, MessageError> {
    let raw = msg
        .get("type")
        .or_else(|| msg.get("role"))
        .and_then(Value::as_str)
        .ok_or_else(|| MessageError("a message needs `type` or `role`".into()))?;
    Ok(match raw {
        "human" | "user" | "HumanMessage" | "HumanMessageChunk" => "human",
        "ai" | "assistant" | "AIMessage" | "AIMessageChunk" => "ai",
        "system" | "developer" | "SystemMessage" => "system",
        "tool" | "ToolMessage" => "tool",
        "function" => "function",
        "chat" => "chat",
        "remove" => "remove",
        other => return Err(MessageError(format!("unknown message type '{other}'"))),
    })
}

fn fill_defaults(msg: &mut Map<String, Value>, kind: &str) {
    let mut default = |key: &str, value: Value| {
        msg.entry(key.to_owned()).or_insert(value);
    };
    default("additional_kwargs", json!({}));
    default("response_metadata", json!({}));
    default("name", Value::Null);
    match kind {
        "ai" => {
            default("tool_calls", json!([]));
            default("invalid_tool_calls", json!([]));
            default("usage_metadata", Value::Null);
        }
        "tool" => {
            default("artifact", Value::Null);
            default("status", json!("success"));
        }
        _ => {}
    }
    let missing_id = !matches!(msg.get("id"), Some(Value::String(s)) if !s.is_empty());
    if missing_id {
        msg.insert("id".into(), json!(Uuid::new_v4().to_string()));
    }
}

/// Coerces a write to the messages channel: one message or a list of them.
pub fn coerce_list(value: Value) -> Result<Value, MessageError> {
    let items = match value {
        Value::Array(items) if !looks_like_tuple(&items) => items,
        single => vec![single],
    };
    items
        .into_iter()
        .map(coerce)
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn looks_like_tuple(items: &[Value]) -> bool {
    items.len() == 2
        && items[0].as_str().is_some_and(|r| {
            matches!(
                r,
                "user" | "human" | "assistant" | "ai" | "system" | "developer" | "tool"
            )
        })
}

/// The `add_messages` merge of already-coerced messages into `current`.
pub fn merge(current: Value, incoming: &Value) -> Value {
    let mut list = match current {
        Value::Array(list) => list,
        _ => Vec::new(),
    };
    let Some(incoming) = incoming.as_array() else {
        return Value::Array(list);
    };
    for msg in incoming {
        let id = message_id(msg);
        if msg.get("type").and_then(Value::as_str) == Some("remove") {
            if id == Some(REMOVE_ALL) {
                list.clear();
            } else {
                list.retain(|m| message_id(m) != id);
            }
            continue;
        }
        match list
            .iter_mut()
            .find(|m| id.is_some() && message_id(m) == id)
        {
            Some(slot) => *slot = msg.clone(),
            None => list.push(msg.clone()),
        }
    }
    Value::Array(list)
}

/// The message's `id`, if it has a string one.
pub fn message_id(msg: &Value) -> Option<&str> {
    msg.get("id").and_then(Value::as_str)
}

/// Whether a JSON value looks like a serialised message (for emitting node outputs).
pub fn is_message(value: &Value) -> bool {
    let Some(map) = value.as_object() else {
        return false;
    };
    map.contains_key("content")
        && map.contains_key("id")
        && map
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| matches!(t, "human" | "ai" | "system" | "tool" | "function" | "chat"))
}

/// Builds an AI message dict with the canonical defaults.
pub fn ai_message(id: &str, content: &str) -> Value {
    let mut map = obj(&[
        ("content", json!(content)),
        ("type", json!("ai")),
        ("id", json!(id)),
    ]);
    fill_defaults(&mut map, "ai");
    Value::Object(map)
}

/// A streamed delta of a model's answer as the `AIMessageChunk` clients expect.
pub fn ai_chunk(id: &str, content: &str, tool_call_chunks: &[Value]) -> Value {
    json!({"content": content, "additional_kwargs": {}, "response_metadata": {},
           "type": "AIMessageChunk", "name": null, "id": id, "tool_calls": [],
           "invalid_tool_calls": [], "usage_metadata": null, "tool_call_chunks": tool_call_chunks,
           "chunk_position": null})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coerces_roles_strings_and_tuples() {
        let m = coerce(json!({"role": "user", "content": "hi"})).unwrap();
        assert_eq!(m["type"], "human");
        assert!(m.get("role").is_none());
        assert_eq!(m["additional_kwargs"], json!({}));
        assert!(m["id"].as_str().is_some_and(|s| !s.is_empty()));
        assert_eq!(coerce(json!("yo")).unwrap()["type"], "human");
        assert_eq!(coerce(json!(["assistant", "ok"])).unwrap()["type"], "ai");
        let ai = coerce(json!({"type": "ai", "content": "x", "id": "a1"})).unwrap();
        assert_eq!(ai["tool_calls"], json!([]));
        assert_eq!(ai["id"], "a1");
        assert!(coerce(json!({"type": "alien", "content": ""})).is_err());
        assert!(coerce(json!(3)).is_err());
    }

    #[test]
    fn merge_appends_replaces_and_removes() {
        let a = coerce(json!({"type": "human", "content": "a", "id": "1"})).unwrap();
        let b = coerce(json!({"type": "ai", "content": "b", "id": "2"})).unwrap();
        let state = merge(Value::Null, &json!([a, b]));
        let b2 = coerce(json!({"type": "ai", "content": "b2", "id": "2"})).unwrap();
        let state = merge(state, &json!([b2]));
        assert_eq!(state[1]["content"], "b2");
        assert_eq!(state.as_array().map(Vec::len), Some(2));
        let rm = coerce(json!({"type": "remove", "id": "1"})).unwrap();
        let state = merge(state, &json!([rm]));
        assert_eq!(state.as_array().map(Vec::len), Some(1));
        let all = coerce(json!({"type": "remove", "id": REMOVE_ALL})).unwrap();
        assert_eq!(merge(state, &json!([all])), json!([]));
    }
}
