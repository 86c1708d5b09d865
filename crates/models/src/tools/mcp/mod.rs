//! MCP tools for the researchers, on the official Rust SDK (`rmcp`): which servers a run may use
//! (`spec`), the shared connections (`hub`), and here the tools one run offers its model and
//! how a call's result becomes text and sources.

pub mod hub;
pub mod spec;

pub use hub::{Limits, McpError, McpHub};
pub use spec::{McpPolicy, McpSection, Requested, ServerSpec, Transport};

use serde_json::{Map, Value, json};

/// One MCP tool as a run's model sees it.
#[derive(Clone, Debug)]
pub struct OfferedTool {
    /// The name the model calls (the server's own, unless two servers share it).
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub server: String,
    /// The name on the server.
    pub remote: String,
    spec: ServerSpec,
    from_run: bool,
}

/// A server the run asked for that could not be used, and why.
#[derive(Clone, Debug)]
pub struct Unavailable {
    pub server: String,
    pub error: String,
}

/// The MCP tools of one run.
#[derive(Clone, Debug, Default)]
pub struct Toolbox {
    pub tools: Vec<OfferedTool>,
    pub unavailable: Vec<Unavailable>,
}

/// Lists the tools of each server the run uses, keeps those the allow-lists name, and gives
/// each a name no other tool of the run has (`taken` are the built-in tools' names).
pub async fn toolbox(hub: &McpHub, servers: &[Requested], taken: &[&str]) -> Toolbox {
    let mut out = Toolbox::default();
    let listed =
        futures::future::join_all(servers.iter().map(|s| hub.tools(&s.spec, s.from_run))).await;
    for (server, listed) in servers.iter().zip(listed) {
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                out.unavailable.push(Unavailable {
                    server: server.name.clone(),
                    error: e.0,
                });
                continue;
            }
        };
        for tool in listed {
            if let Some(allowed) = &server.spec.tools
                && !allowed.contains(&tool.name)
            {
                continue;
            }
            let mut name = model_name(&tool.name);
            let clashes =
                |n: &str| taken.contains(&n) || out.tools.iter().any(|t: &OfferedTool| t.name == n);
            if clashes(&name) {
                name = model_name(&format!("{}_{}", server.name, tool.name));
            }
            if clashes(&name) {
                tracing::warn!(server = %server.name, tool = %tool.name, "MCP tool name taken twice; skipped");
                continue;
            }
            out.tools.push(OfferedTool {
                name,
                description: tool.description,
                parameters: object_schema(tool.input_schema),
                server: server.name.clone(),
                remote: tool.name,
                spec: server.spec.clone(),
                from_run: server.from_run,
            });
        }
    }
    out
}

impl Toolbox {
    pub fn find(&self, name: &str) -> Option<&OfferedTool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// A tool result for the model, and the sources it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub text: String,
    /// The call itself, then the resources it linked or embedded: kept apart from web pages,
    /// whose URLs the report's citation check verifies.
    pub sources: Vec<McpSource>,
}

/// Something an MCP tool call returned that a report may cite.
#[derive(Clone, Debug, PartialEq)]
pub struct McpSource {
    /// `mcp://server/tool?args` for the call, the resource's URI for a resource.
    pub url: String,
    pub title: String,
    pub server: String,
    pub tool: String,
}

/// Calls `tool` with `args`. Every failure is text for the model (a tool error is a tool
/// result, never a failed run).
pub async fn call(hub: &McpHub, tool: &OfferedTool, args: &Value) -> Result<Outcome, McpError> {
    let args = match args {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(McpError(format!(
                "the arguments must be an object, got {other}"
            )));
        }
    };
    let result = hub
        .call(&tool.spec, tool.from_run, &tool.remote, args.clone())
        .await?;
    let text = result_text(&result);
    if result["isError"] == json!(true) {
        return Err(McpError(cut(&text, 2000)));
    }
    let address = source_address(&tool.server, &tool.remote, &args);
    let mut sources = vec![McpSource {
        url: address.clone(),
        title: format!("{} ({})", tool.remote, tool.server),
        server: tool.server.clone(),
        tool: tool.remote.clone(),
    }];
    sources.extend(linked_resources(&result, tool));
    let body = cut(&text, hub.limits().max_result_chars);
    Ok(Outcome {
        text: format!("Source: {address}\n{body}"),
        sources,
    })
}

/// An address that names the call, so the model can cite it: `mcp://server/tool?arg=value`.
fn source_address(server: &str, tool: &str, args: &Map<String, Value>) -> String {
    let query: Vec<String> = args
        .iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some(format!(
                "{}={}",
                form_urlencoded::byte_serialize(k.as_bytes()).collect::<String>(),
                form_urlencoded::byte_serialize(cut(&v, 120).as_bytes()).collect::<String>()
            ))
        })
        .collect();
    if query.is_empty() {
        format!("mcp://{server}/{tool}")
    } else {
        format!("mcp://{server}/{tool}?{}", query.join("&"))
    }
}

/// The result's content as text: text blocks as they are, embedded resources' text with their
/// URI, links and binary blocks named.
fn result_text(result: &Value) -> String {
    let mut parts = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_owned()),
            Some("resource") => {
                let r = &block["resource"];
                let uri = r["uri"].as_str().unwrap_or_default();
                match r["text"].as_str() {
                    Some(t) => parts.push(format!("[{uri}]\n{t}")),
                    None => parts.push(format!("[{uri}] (binary content, not shown)")),
                }
            }
            Some("resource_link") => parts.push(format!(
                "[link] {}: {}",
                block["name"].as_str().unwrap_or_default(),
                block["uri"].as_str().unwrap_or_default()
            )),
            Some(kind @ ("image" | "audio")) => parts.push(format!("({kind} content, not shown)")),
            _ => {}
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    parts.join("\n\n")
}

/// Resources a result links to or embeds, as sources of their own.
fn linked_resources(result: &Value, tool: &OfferedTool) -> Vec<McpSource> {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| {
            let (uri, title) = match block["type"].as_str()? {
                "resource_link" => (block["uri"].as_str()?, block["name"].as_str()),
                "resource" => (block["resource"]["uri"].as_str()?, None),
                _ => return None,
            };
            Some(McpSource {
                url: uri.to_owned(),
                title: title.unwrap_or(uri).to_owned(),
                server: tool.server.clone(),
                tool: tool.remote.clone(),
            })
        })
        .collect()
}

/// The first `chars` characters, with a note of how many were left out.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        None => text.to_owned(),
        Some((i, _)) => format!(
            "{}\n[truncated: {} more characters]",
            &text[..i],
            text[i..].chars().count()
        ),
    }
}

/// A tool name providers accept: letters, digits, `_` and `-`, at most 64 characters.
fn model_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// Providers want an object schema; a server that lists none gets an empty one.
fn object_schema(schema: Value) -> Value {
    match schema {
        Value::Object(mut m) => {
            m.entry("type").or_insert(json!("object"));
            m.entry("properties").or_insert(json!({}));
            Value::Object(m)
        }
        _ => json!({"type": "object", "properties": {}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_as_text_and_long_ones_are_cut() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}},
            {"type": "resource_link", "uri": "file:///b.txt", "name": "b.txt"},
            {"type": "image", "data": "xx", "mimeType": "image/png"}]});
        assert_eq!(
            result_text(&r),
            "hello\n\n[file:///a.txt]\nA\n\n[link] b.txt: file:///b.txt\n\n(image content, not shown)"
        );
        assert_eq!(cut("abcdef", 3), "abc\n[truncated: 3 more characters]");
        assert_eq!(cut("abc", 3), "abc");
    }

    #[test]
    fn addresses_name_the_call_and_names_suit_providers() {
        let mut args = Map::new();
        args.insert("path".into(), json!("/docs/a b.md"));
        args.insert("deep".into(), json!({"x": 1}));
        assert_eq!(
            source_address("files", "read_text_file", &args),
            "mcp://files/read_text_file?path=%2Fdocs%2Fa+b.md"
        );
        assert_eq!(model_name("get.weather now"), "get_weather_now");
        assert_eq!(model_name(&"x".repeat(80)).len(), 64);
        assert_eq!(object_schema(Value::Null)["type"], "object");
    }
}
