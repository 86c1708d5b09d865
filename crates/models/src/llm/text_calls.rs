//! Tool calls a model wrote into its text instead of the API's `tool_calls` field. Small local
//! models do this all the time: bare JSON (`{"name": …, "arguments": …}`), a ```json fence,
//! `<tool_call>` tags, or a list of calls. Only calls to tools the request offered count, so a
//! report that merely contains JSON is never mistaken for a call.

use serde_json::{Map, Value};

/// Calls found in a text, and the text without them (the model's preamble, if any).
#[derive(Debug, PartialEq)]
pub struct Recovered {
    /// `(tool name, arguments object)` in the order written.
    pub calls: Vec<(String, Value)>,
    pub rest: String,
}

/// Texts longer than this are not scanned: a tool call is short, and a long answer is prose.
const MAX_SCAN: usize = 64 * 1024;

/// The calls to `known` tools written in `text`, or `None` when it holds none.
pub fn recover(text: &str, known: &[&str]) -> Option<Recovered> {
    if text.len() > MAX_SCAN || !text.contains('{') {
        return None;
    }
    let mut calls = Vec::new();
    let mut kept = String::new();
    let mut rest = text;
    while let Some((start, end, value)) = next_json(rest) {
        let found = calls_in(&value, known);
        if found.is_empty() {
            kept.push_str(&rest[..end]);
        } else {
            kept.push_str(&rest[..start]);
            calls.extend(found);
        }
        rest = &rest[end..];
    }
    kept.push_str(rest);
    if calls.is_empty() {
        return cut_off_call(text, known);
    }
    Some(Recovered {
        calls,
        rest: strip_wrappers(&kept),
    })
}

/// A call whose JSON was cut off (the output cap, or a loop stopped early): the text from its
/// `{"name"` on, with what was left open closed. Only for a text that is nothing else.
fn cut_off_call(text: &str, known: &[&str]) -> Option<Recovered> {
    let start = text.find("{\"name\"")?;
    let rest = strip_wrappers(&text[..start]);
    let value = super::structured::mended(&text[start..])?;
    let calls = calls_in(&value, known);
    (!calls.is_empty()).then_some(Recovered { calls, rest })
}

/// The first JSON object or array in `text` that parses whole: its byte span and value.
fn next_json(text: &str) -> Option<(usize, usize, Value)> {
    let mut from = 0;
    while let Some(offset) = text[from..].find(['{', '[']) {
        let start = from + offset;
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(value)) = values.next()
            && (value.is_object() || value.is_array())
        {
            return Some((start, start + values.byte_offset(), value));
        }
        from = start + 1;
    }
    None
}

/// The calls a JSON value describes: one call object, a list of them, or `{"tool_calls": […]}`.
fn calls_in(value: &Value, known: &[&str]) -> Vec<(String, Value)> {
    match value {
        Value::Array(items) => items.iter().filter_map(|v| one_call(v, known)).collect(),
        Value::Object(map) => match map.get("tool_calls").or_else(|| map.get("calls")) {
            Some(list @ Value::Array(_)) => calls_in(list, known),
            _ => one_call(value, known).into_iter().collect(),
        },
        _ => Vec::new(),
    }
}

/// One call in any of the shapes models write:
/// `{"name", "arguments"|"parameters"|"args"|"input"}`, OpenAI's `{"function": {"name",
/// "arguments"}}`, or `{"<tool name>": {arguments}}`.
fn one_call(value: &Value, known: &[&str]) -> Option<(String, Value)> {
    let map = value.as_object()?;
    if let Some(function) = map.get("function").and_then(Value::as_object) {
        return named_call(function, known);
    }
    if map.contains_key("name") {
        return named_call(map, known);
    }
    match map.iter().next() {
        Some((name, args)) if map.len() == 1 && known.contains(&name.as_str()) => {
            Some((name.clone(), arguments(Some(args))?))
        }
        _ => None,
    }
}

fn named_call(map: &Map<String, Value>, known: &[&str]) -> Option<(String, Value)> {
    let name = map.get("name")?.as_str()?.trim();
    if !known.contains(&name) {
        return None;
    }
    let args = ["arguments", "parameters", "args", "input"]
        .iter()
        .find_map(|key| map.get(*key));
    Some((name.to_owned(), arguments(args)?))
}

/// Arguments as an object: given as one, as a JSON string of one, or absent (no arguments).
fn arguments(args: Option<&Value>) -> Option<Value> {
    match args {
        None | Some(Value::Null) => Some(Value::Object(Map::new())),
        Some(args @ Value::Object(_)) => Some(args.clone()),
        Some(Value::String(text)) if text.trim().is_empty() => Some(Value::Object(Map::new())),
        Some(Value::String(text)) => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_object),
        Some(_) => None,
    }
}

/// The preamble left once the calls are cut out: without the now-empty fences and tags.
fn strip_wrappers(text: &str) -> String {
    let mut out = text.to_owned();
    for wrapper in ["<tool_call>", "</tool_call>", "```json", "```"] {
        out = out.replace(wrapper, "");
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOOLS: [&str; 2] = ["tavily_search", "think_tool"];

    fn calls(text: &str) -> Vec<(String, Value)> {
        recover(text, &TOOLS).map(|r| r.calls).unwrap_or_default()
    }

    #[test]
    fn the_shapes_small_models_write_are_recovered() {
        let search = ("tavily_search".to_owned(), json!({"queries": ["a", "b"]}));
        for text in [
            r#"{"name": "tavily_search", "arguments": {"queries": ["a", "b"]}}"#,
            "```json\n{\"name\": \"tavily_search\", \"arguments\": {\"queries\": [\"a\", \"b\"]}}\n```",
            "<tool_call>\n{\"name\": \"tavily_search\", \"arguments\": {\"queries\": [\"a\", \"b\"]}}\n</tool_call>",
            r#"{"name": "tavily_search", "parameters": {"queries": ["a", "b"]}}"#,
            r#"{"name": "tavily_search", "arguments": "{\"queries\": [\"a\", \"b\"]}"}"#,
            r#"{"type": "function", "function": {"name": "tavily_search", "arguments": {"queries": ["a", "b"]}}}"#,
            r#"{"tavily_search": {"queries": ["a", "b"]}}"#,
        ] {
            assert_eq!(calls(text), vec![search.clone()], "{text}");
        }
    }

    #[test]
    fn lists_and_several_objects_are_several_calls() {
        let list = r#"[{"name": "think_tool", "arguments": {"reflection": "r"}},
                       {"name": "tavily_search", "arguments": {"queries": ["q"]}}]"#;
        assert_eq!(calls(list).len(), 2);
        let two = "<tool_call>{\"name\": \"think_tool\", \"arguments\": {\"reflection\": \"r\"}}</tool_call>\n<tool_call>{\"name\": \"tavily_search\", \"arguments\": {\"queries\": [\"q\"]}}</tool_call>";
        let found = calls(two);
        assert_eq!(found[0].0, "think_tool");
        assert_eq!(found[1].0, "tavily_search");
    }

    #[test]
    fn the_preamble_is_kept_as_the_text() {
        let text = "I will search now.\n```json\n{\"name\": \"tavily_search\", \"arguments\": {\"queries\": [\"x\"]}}\n```";
        let r = recover(text, &TOOLS).unwrap();
        assert_eq!(r.rest, "I will search now.");
    }

    #[test]
    fn json_that_is_not_a_call_to_an_offered_tool_is_left_alone() {
        assert_eq!(recover("no json here", &TOOLS), None);
        assert_eq!(
            recover(r#"{"name": "delete_everything", "arguments": {}}"#, &TOOLS),
            None
        );
        assert_eq!(
            recover(r#"The result was {"n": 1} and [1, 2]."#, &TOOLS),
            None
        );
        assert_eq!(
            recover(r#"{"name": "tavily_search", "arguments": [1]}"#, &TOOLS),
            None
        );
        assert_eq!(recover(r#"{"name": "tavily_search", "argu"#, &TOOLS), None);
    }

    #[test]
    fn a_call_cut_off_at_the_output_cap_is_closed_and_kept() {
        let cut = r#"{"name":"think_tool","arguments":{"reflection":"I found several sources that"#;
        assert_eq!(
            calls(cut),
            vec![(
                "think_tool".to_owned(),
                json!({"reflection": "I found several sources that"})
            )]
        );
    }
}
