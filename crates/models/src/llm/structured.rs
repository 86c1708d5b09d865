//! Structured output: ask for JSON matching a schema, check it by deserialising into the target
//! type, and on a mismatch tell the model what was wrong and ask again.

use super::history::content_text;
use super::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, Fallback, LlmError, OnDelta, RetryPolicy,
    chat_with_retry,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Asks for `req.response_schema` (which must be set) up to `attempts` times and returns the
/// parsed value with the response that produced it. Each attempt retries transient errors with
/// `policy`; errors that survive those retries, or that no retry can fix, end the whole call.
/// With `req.stream` and `on_delta`, the raw JSON streams as it is written.
pub async fn structured<T: DeserializeOwned>(
    model: &dyn ChatModel,
    mut req: ChatRequest,
    attempts: u32,
    policy: RetryPolicy,
    cancel: &CancellationToken,
    on_delta: Option<OnDelta<'_>>,
) -> Result<(T, ChatResponse), LlmError> {
    let Some(schema) = req.response_schema.clone() else {
        return Err(LlmError::Config(
            "structured output needs a response_schema".into(),
        ));
    };
    let attempts = attempts.max(1);
    let mut last_error = String::new();
    for _ in 0..attempts {
        let answer = match chat_with_retry(model, &req, on_delta, policy, cancel).await {
            Ok(answer) => answer,
            // An unreadable body is a bad answer like any other: ask again.
            Err(LlmError::InvalidResponse { message, .. }) => {
                last_error = message;
                continue;
            }
            Err(e) => return Err(e),
        };
        let text = content_text(&answer.message["content"]);
        let error = match parse::<T>(&text) {
            Ok(value) => return Ok((value, answer)),
            Err(error) => error,
        };
        if let Some(value) = repaired::<T>(&text, &schema.schema) {
            let mut answer = answer;
            answer.fallbacks.push(Fallback::JsonRepaired);
            return Ok((value, answer));
        }
        push_feedback(&mut req.messages, text, &error);
        last_error = error;
    }
    Err(LlmError::InvalidResponse {
        provider: req.model.provider.clone(),
        message: format!(
            "no answer matched the '{}' schema in {attempts} attempts; last error: {last_error}",
            schema.name
        ),
    })
}

/// Appends the bad answer and the correction. The answer goes back as text only: a tool call
/// left without a tool result would make the next request invalid.
fn push_feedback(messages: &mut Vec<ChatMessage>, answer: String, error: &str) {
    messages.push(ChatMessage::ai_text(answer));
    messages.push(ChatMessage::human(format!(
        "Your previous answer did not match the required JSON schema: {error}. \
         Answer again with only a JSON object that matches the schema."
    )));
}

/// Reads `T` from a model's text, tolerating a ```json fence and prose around the object.
fn parse<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let value: Value = json_in(text).ok_or_else(|| {
        if text.trim().is_empty() {
            "the answer was empty".to_owned()
        } else {
            "the answer contained no JSON object".to_owned()
        }
    })?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// The JSON value in `text`: the whole text, else a fenced block, else the outermost `{…}`.
fn json_in(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    let fenced = fenced_block(trimmed);
    let object = match (trimmed.find('{'), trimmed.rfind('}')) {
        (Some(start), Some(end)) if start < end => Some(&trimmed[start..=end]),
        _ => None,
    };
    [Some(trimmed), fenced, object]
        .into_iter()
        .flatten()
        .find_map(|candidate| serde_json::from_str(candidate.trim()).ok())
}

/// What a weak model's answer may still mean when it does not parse as it stands: the object
/// inside a wrapper (`{"ResearchQuestion": {…}}`, `{"name": …, "arguments": {…}}`), JSON cut off
/// or with trailing commas, or, for a schema of one text field, the prose itself as that field.
fn repaired<T: DeserializeOwned>(text: &str, schema: &Value) -> Option<T> {
    let mut candidates: Vec<Value> = Vec::new();
    if let Some(value) = json_in(text).or_else(|| mended(text)) {
        if let Value::Object(map) = &value {
            let inner = ["arguments", "parameters", "properties", "input"]
                .iter()
                .filter_map(|k| map.get(*k))
                .chain(map.values().filter(|_| map.len() == 1));
            candidates.extend(inner.filter(|v| v.is_object()).cloned());
        }
        candidates.push(value);
    }
    if let Some(field) = single_text_field(schema) {
        let prose = text.trim();
        if !prose.is_empty() && !prose.starts_with('{') {
            candidates.push(json!({ field: prose }));
        }
    }
    candidates
        .into_iter()
        .find_map(|v| serde_json::from_value(v).ok())
}

/// JSON from the first `{` with trailing commas dropped and what was left open closed (an
/// answer cut off by the output cap).
pub(super) fn mended(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let mut out = String::with_capacity(text.len() - start + 8);
    let mut open: Vec<char> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for c in text[start..].chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => open.push('}'),
            '[' => open.push(']'),
            '}' | ']' => {
                if open.pop() != Some(c) {
                    return None;
                }
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.truncate(trimmed - 1);
                }
            }
            _ => {}
        }
        out.push(c);
        if open.is_empty() {
            break;
        }
    }
    if in_string {
        out.push('"');
    }
    let trimmed = out.trim_end().trim_end_matches(',').len();
    out.truncate(trimmed);
    while let Some(close) = open.pop() {
        out.push(close);
    }
    serde_json::from_str(&out).ok()
}

/// The field of a schema whose only required property is a string.
fn single_text_field(schema: &Value) -> Option<&str> {
    let required = schema["required"].as_array()?;
    let [field] = required.as_slice() else {
        return None;
    };
    let field = field.as_str()?;
    (schema["properties"][field]["type"] == "string").then_some(field)
}

fn fenced_block(text: &str) -> Option<&str> {
    let start = text.find("```")? + 3;
    let rest = &text[start..];
    // Skip the language tag (```json) up to the end of the fence line.
    let body_start = rest.find('\n').map_or(0, |i| i + 1);
    let body = &rest[body_start..];
    let end = body.find("```")?;
    Some(&body[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Answer {
        n: u32,
    }

    #[test]
    fn json_is_found_in_fences_and_prose() {
        assert_eq!(parse::<Answer>(r#"{"n": 1}"#), Ok(Answer { n: 1 }));
        assert_eq!(
            parse::<Answer>("```json\n{\"n\": 2}\n```"),
            Ok(Answer { n: 2 })
        );
        assert_eq!(
            parse::<Answer>("Sure! Here it is: {\"n\": 3} Hope that helps."),
            Ok(Answer { n: 3 })
        );
        assert_eq!(
            parse::<Answer>("Text\n```\n{\"n\": 4}\n```\nmore"),
            Ok(Answer { n: 4 })
        );
        assert!(
            parse::<Answer>(r#"{"m": 1}"#)
                .unwrap_err()
                .contains("missing field `n`")
        );
        assert_eq!(parse::<Answer>("   ").unwrap_err(), "the answer was empty");
        assert_eq!(parse::<Vec<u32>>("[1, 2]"), Ok(vec![1, 2]));
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Brief {
        research_brief: String,
    }

    #[test]
    fn weak_answers_are_repaired() {
        let schema = json!({"type": "object", "properties": {"research_brief": {"type": "string"}},
                            "required": ["research_brief"]});
        let brief = |s: &str| {
            Some(Brief {
                research_brief: s.into(),
            })
        };
        assert_eq!(
            repaired::<Brief>(r#"{"ResearchQuestion": {"research_brief": "b"}}"#, &schema),
            brief("b")
        );
        assert_eq!(
            repaired::<Brief>(
                r#"{"name": "ResearchQuestion", "arguments": {"research_brief": "b"}}"#,
                &schema
            ),
            brief("b")
        );
        assert_eq!(
            repaired::<Brief>(r#"Here: {"research_brief": "cut off"#, &schema),
            brief("cut off")
        );
        assert_eq!(
            repaired::<Brief>(r#"{"research_brief": "b",}"#, &schema),
            brief("b")
        );
        assert_eq!(
            repaired::<Brief>("Compare sodium-ion and LFP cells.", &schema),
            brief("Compare sodium-ion and LFP cells.")
        );
        let two = json!({"type": "object", "required": ["n", "m"]});
        assert_eq!(repaired::<Answer>("just prose", &two), None);
        assert_eq!(mended(r#"{"a": [1, 2"#), Some(json!({"a": [1, 2]})));
        assert_eq!(mended(r#"{"a": "x\"y"#), Some(json!({"a": "x\"y"})));
    }
}
