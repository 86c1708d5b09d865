//! Streams the text fields of a structured answer (the clarifying question, the brief) as
//! ordinary message tokens: the model writes JSON, clients see only the words.

use crate::graph::NodeContext;
use crate::llm::Delta;
use serde_json::json;
use std::sync::Mutex;

/// The decoded value of string field `field` in a JSON object that may still be incomplete.
pub fn partial_string_field(json_text: &str, field: &str) -> Option<String> {
    let key = format!("\"{field}\"");
    let after_key = &json_text[json_text.find(&key)? + key.len()..];
    let after_colon = after_key.trim_start().strip_prefix(':')?.trim_start();
    let body = after_colon.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' | 'f' => {}
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    if hex.len() < 4 {
                        break;
                    }
                    if let Some(ch) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        out.push(ch);
                    }
                }
                other => out.push(other),
            },
            other => out.push(other),
        }
    }
    Some(out)
}

/// Turns raw JSON deltas into `AIMessageChunk`s carrying the new text of `fields`.
pub struct FieldStreamer<'a> {
    ctx: &'a NodeContext,
    id: String,
    fields: &'a [&'a str],
    state: Mutex<(String, Vec<usize>)>,
}

impl<'a> FieldStreamer<'a> {
    pub fn new(ctx: &'a NodeContext, id: String, fields: &'a [&'a str]) -> Self {
        Self {
            ctx,
            id,
            fields,
            state: Mutex::new((String::new(), vec![0; fields.len()])),
        }
    }

    /// The id every chunk carries (the final message must use it too).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn push(&self, delta: &Delta) {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (raw, sent) = &mut *guard;
        raw.push_str(&delta.content);
        for (i, field) in self.fields.iter().enumerate() {
            let Some(text) = partial_string_field(raw, field) else {
                continue;
            };
            let count = text.chars().count();
            if count > sent[i] {
                let new: String = text.chars().skip(sent[i]).collect();
                sent[i] = count;
                self.ctx.emit_chunk(
                    json!({"content": new, "additional_kwargs": {}, "response_metadata": {},
                    "type": "AIMessageChunk", "name": null, "id": self.id, "tool_calls": [],
                    "invalid_tool_calls": [], "usage_metadata": null, "tool_call_chunks": [],
                    "chunk_position": null}),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_of_incomplete_json() {
        let partial = r#"{"need_clarification": true, "question": "Which \"kind\" of bat\u00e9"#;
        assert_eq!(
            partial_string_field(partial, "question").as_deref(),
            Some("Which \"kind\" of baté")
        );
        assert_eq!(partial_string_field(partial, "verification"), None);
        assert_eq!(
            partial_string_field(r#"{"question":"a\nb","x":1}"#, "question").as_deref(),
            Some("a\nb")
        );
        assert_eq!(partial_string_field(r#"{"question": "#, "question"), None);
        assert_eq!(
            partial_string_field(r#"{"question": "ab\u00"#, "question").as_deref(),
            Some("ab")
        );
    }
}
