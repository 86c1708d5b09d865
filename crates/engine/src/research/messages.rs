//! The messages the research graphs keep in state. They stay LangChain message dicts on the wire
//! and in checkpoints (clients read them, and the model clients speak them), but the research
//! code reads and builds them only through `Message`, so no node indexes a dict by a string.
//! Here: what the research prompts make of them.

pub use crate::graph::messages::{Kind, Message, ToolCall};

/// The conversation as `Human: …` / `AI: …` lines, as prompts quote it.
pub fn buffer_string(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| {
            let role = match m.kind() {
                Kind::Human => "Human",
                Kind::Ai => "AI",
                Kind::System => "System",
                Kind::Tool => "Tool",
                Kind::Other => m.type_name(),
            };
            format!("{role}: {}", m.text())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a history holds a result of the tool `name`.
pub fn has_result_of(history: &[Message], name: &str) -> bool {
    history.iter().any(|m| m.is_result_of(name))
}

/// At most `max` characters of a text, on one line, for events and error messages.
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// Today's date the way the prompts show it, e.g. `Mon Jan 15, 2024`.
pub fn today() -> String {
    chrono::Utc::now().format("%a %b %-d, %Y").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn buffer_string_renders_roles_and_block_content() {
        let msgs = vec![
            Message::from_model(
                json!({"type": "human", "content": [{"type": "text", "text": "hi"}]}),
            ),
            Message::from_model(json!({"type": "ai", "content": "hello"})),
        ];
        assert_eq!(buffer_string(&msgs), "Human: hi\nAI: hello");
    }

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(excerpt("a\n  b   c", 10), "a b c");
        assert_eq!(excerpt("abcdef", 3), "abc…");
    }

    #[test]
    fn today_has_no_leading_zero() {
        let d = today();
        let day = d.split(' ').nth(2).unwrap().trim_end_matches(',');
        assert!(!day.starts_with('0'), "{d}");
    }
}
