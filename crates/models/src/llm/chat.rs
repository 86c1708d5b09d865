//! The conversation a model is sent, as types. Graph state keeps LangChain message dicts (the
//! wire shape clients read); a request reads each one once, here, into a `ChatMessage`, and
//! every provider writes its own wire format from that.

use super::history::{Role, content_text, role};
use crate::store::JsonMap;
use serde::Serialize;
use serde_json::{Value, json};

/// One turn of the conversation. (Serialized only to key a recorded call: no provider's
/// format.)
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum ChatMessage {
    /// Instructions; providers that take them apart from the turns get them there.
    System(String),
    Human(String),
    Ai(ModelTurn),
    Tool(ToolResult),
}

/// What the model said earlier, with the calls it made.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ModelTurn {
    pub text: String,
    pub calls: Vec<SentCall>,
}

/// A call the model made earlier. Calls whose arguments did not parse go back too: a tool
/// result may answer them, and its id must match a call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SentCall {
    pub id: String,
    pub name: String,
    pub args: CallArgs,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum CallArgs {
    /// Arguments that parsed as a JSON object.
    Parsed(JsonMap),
    /// What the model wrote that did not.
    Invalid(String),
}

/// A tool's answer to a call.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ToolResult {
    pub call_id: String,
    /// The tool's name, when the message carries it.
    pub name: Option<String>,
    pub text: String,
    /// The tool reported a failure (`status: "error"`).
    pub failed: bool,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self::System(text.into())
    }

    pub fn human(text: impl Into<String>) -> Self {
        Self::Human(text.into())
    }

    /// An earlier answer sent back as text only (no calls).
    pub fn ai_text(text: impl Into<String>) -> Self {
        Self::Ai(ModelTurn {
            text: text.into(),
            calls: Vec::new(),
        })
    }

    /// Reads a LangChain message dict (`type` or OpenAI-style `role`; `content` a string or
    /// text blocks, other blocks dropped). Takes the dict so a long text moves, not copied.
    pub fn from_langchain(mut message: Value) -> Result<Self, String> {
        let role = role(&message)?;
        let text = match message.get_mut("content").map(Value::take) {
            Some(Value::String(text)) => text,
            Some(other) => content_text(&other),
            None => String::new(),
        };
        Ok(match role {
            Role::System => Self::System(text),
            Role::Human => Self::Human(text),
            Role::Ai => Self::Ai(ModelTurn {
                text,
                calls: sent_calls(&message),
            }),
            Role::Tool => Self::Tool(ToolResult {
                call_id: message["tool_call_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                name: message["name"].as_str().map(str::to_owned),
                text,
                failed: message["status"] == "error",
            }),
        })
    }

    /// The text of the turn (an AI turn's without its calls).
    pub fn text(&self) -> &str {
        match self {
            Self::System(text) | Self::Human(text) => text,
            Self::Ai(turn) => &turn.text,
            Self::Tool(result) => &result.text,
        }
    }
}

/// The characters of a prompt (what an abandoned call is charged for).
pub fn prompt_chars(messages: &[ChatMessage]) -> usize {
    messages.iter().map(|m| m.text().chars().count()).sum()
}

fn sent_calls(message: &Value) -> Vec<SentCall> {
    // Read in place: each call's arguments are copied once, into its `CallArgs`.
    let list = |key: &str| message[key].as_array().into_iter().flatten();
    let call = |raw: &Value, args: CallArgs| SentCall {
        id: raw["id"].as_str().unwrap_or_default().to_owned(),
        name: raw["name"].as_str().unwrap_or_default().to_owned(),
        args,
    };
    let valid = list("tool_calls").map(|raw| call(raw, parsed_args(&raw["args"])));
    let invalid = list("invalid_tool_calls").map(|raw| {
        let text = match &raw["args"] {
            Value::String(text) => text.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        call(raw, CallArgs::Invalid(text))
    });
    valid.chain(invalid).collect()
}

/// A valid call's arguments: an object, or (from a client that wrote them as text) JSON text
/// of one; anything else is sent back as the text it is.
fn parsed_args(args: &Value) -> CallArgs {
    match args {
        Value::Object(map) => CallArgs::Parsed(map.clone()),
        Value::Null => CallArgs::Parsed(JsonMap::new()),
        Value::String(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => CallArgs::Parsed(map),
            _ => CallArgs::Invalid(text.clone()),
        },
        other => CallArgs::Invalid(other.to_string()),
    }
}

impl CallArgs {
    /// The arguments as JSON text (what OpenAI's formats carry).
    pub fn as_json_text(&self) -> String {
        match self {
            Self::Parsed(map) => Value::Object(map.clone()).to_string(),
            Self::Invalid(text) => text.clone(),
        }
    }

    /// The arguments as an object; the unparsed ones as `{}` (formats that carry objects).
    pub fn as_object(&self) -> Value {
        match self {
            Self::Parsed(map) => Value::Object(map.clone()),
            Self::Invalid(_) => json!({}),
        }
    }

    /// The arguments as the model would write them: the object, or the raw text.
    pub fn as_written(&self) -> Value {
        match self {
            Self::Parsed(map) => Value::Object(map.clone()),
            Self::Invalid(text) => Value::String(text.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn langchain_dicts_are_read_once_into_turns() {
        let ai = json!({"type": "ai", "content": [{"type": "text", "text": "a"}, "b"],
            "tool_calls": [{"name": "s", "args": {"q": 1}, "id": "c1"},
                           {"name": "s", "args": "{\"q\": 2}", "id": "c2"}],
            "invalid_tool_calls": [{"name": "s", "args": "{bad", "id": "c3"}]});
        let ChatMessage::Ai(turn) = ChatMessage::from_langchain(ai).unwrap() else {
            panic!("an AI turn");
        };
        assert_eq!(turn.text, "ab");
        let args: Vec<String> = turn.calls.iter().map(|c| c.args.as_json_text()).collect();
        assert_eq!(args, [r#"{"q":1}"#, r#"{"q":2}"#, "{bad"]);
        assert_eq!(turn.calls[2].args.as_object(), json!({}));
        let tool = json!({"role": "tool", "content": "x", "tool_call_id": "c1", "status": "error"});
        assert_eq!(
            ChatMessage::from_langchain(tool).unwrap(),
            ChatMessage::Tool(ToolResult {
                call_id: "c1".into(),
                name: None,
                text: "x".into(),
                failed: true,
            })
        );
        let unknown = ChatMessage::from_langchain(json!({"type": "remove", "content": ""}));
        assert!(unknown.is_err());
    }
}
