//! Which MCP servers exist (the operator's `[mcp]` section) and which a run asks for
//! (`config.configurable.mcp_config`), checked against the operator's policy before the run is
//! created, so a bad request is a 422 instead of a researcher without its tools.

use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// How to reach one server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A program the service starts and speaks to over stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Variables the program gets besides `PATH` and `HOME` (the service's own environment,
        /// provider keys included, is not passed on).
        env: BTreeMap<String, String>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One server as the operator configured it (or a run brought it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerSpec {
    pub transport: Transport,
    /// The tools offered to researchers; `None` offers every tool the server lists.
    pub tools: Option<Vec<String>>,
}

/// `[mcp.servers.<name>]` in the config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Header name → environment variable holding its value (for tokens kept out of files).
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Offered to every run, whether it asks for MCP or not.
    #[serde(default)]
    pub always: bool,
}

/// The `[mcp]` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    pub allow_run_servers: bool,
    pub allow_private_urls: bool,
    pub connect_timeout_secs: u64,
    pub call_timeout_secs: u64,
    pub max_result_chars: usize,
    pub max_servers_per_run: usize,
    #[serde(default)]
    pub servers: BTreeMap<String, ServerEntry>,
}

/// The operator's servers and rules, resolved (headers read from the environment).
#[derive(Clone, Debug, Default)]
pub struct McpPolicy {
    pub servers: BTreeMap<String, ServerSpec>,
    /// Servers offered to every run.
    pub always: Vec<String>,
    /// Runs may name servers of their own (streamable HTTP only).
    pub allow_run_servers: bool,
    /// Servers runs bring may be on loopback, private or link-local addresses.
    pub allow_private_urls: bool,
    pub max_servers_per_run: usize,
}

impl McpSection {
    /// The policy, or what is wrong with the section.
    pub fn policy(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<McpPolicy, String> {
        let mut servers = BTreeMap::new();
        let mut always = Vec::new();
        for (name, entry) in &self.servers {
            check_name(name).map_err(|e| format!("mcp.servers.{name}: {e}"))?;
            let spec = entry
                .spec(env)
                .map_err(|e| format!("mcp.servers.{name}: {e}"))?;
            if entry.always {
                always.push(name.clone());
            }
            servers.insert(name.clone(), spec);
        }
        Ok(McpPolicy {
            servers,
            always,
            allow_run_servers: self.allow_run_servers,
            allow_private_urls: self.allow_private_urls,
            max_servers_per_run: self.max_servers_per_run.max(1),
        })
    }
}

impl ServerEntry {
    fn spec(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ServerSpec, String> {
        let transport = match (&self.command, &self.url) {
            (Some(command), None) if !command.trim().is_empty() => Transport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
            },
            (None, Some(url)) => {
                let mut headers = self.headers.clone();
                for (header, var) in &self.headers_env {
                    let value = env(var).ok_or_else(|| format!("headers_env: {var} is not set"))?;
                    headers.insert(header.clone(), value);
                }
                check_url(url)?;
                check_headers(&headers)?;
                Transport::Http {
                    url: url.clone(),
                    headers,
                }
            }
            _ => return Err("give either `command` (stdio) or `url` (streamable HTTP)".into()),
        };
        Ok(ServerSpec {
            transport,
            tools: self.tools.clone(),
        })
    }
}

/// One server a run will use: the operator's by name, or its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requested {
    pub name: String,
    pub spec: ServerSpec,
    /// Whether the run brought it (its connection is not the operator's).
    pub from_run: bool,
}

const FIELD: &str = "config.configurable.mcp_config";

/// The servers a run's `mcp_config` names, resolved against the operator's policy (plus the
/// operator's `always` servers). Errors name the field and say what to do.
///
/// Two shapes are accepted: Open Deep Research's single server (`{"url", "tools",
/// "auth_required"}`, the URL getting `/mcp` appended as ODR does), and a map of named servers
/// (`{"mcpServers": {"name": {...}}}`) as MCP clients write them. A named entry that is empty or
/// only narrows `tools` refers to the operator's server of that name.
pub fn resolve(policy: &McpPolicy, mcp_config: &Value) -> Result<Vec<Requested>, String> {
    let mut out: Vec<Requested> = Vec::new();
    match mcp_config {
        Value::Null => {}
        Value::Object(map) if map.contains_key("mcpServers") => {
            only_keys(map, &["mcpServers"], FIELD)?;
            let Some(servers) = map["mcpServers"].as_object() else {
                return Err(format!(
                    "{FIELD}.mcpServers: must be an object of named servers"
                ));
            };
            for (name, entry) in servers {
                out.push(named(policy, name, entry)?);
            }
        }
        Value::Object(map) => {
            if let Some(r) = odr_shape(policy, map)? {
                out.push(r);
            }
        }
        _ => return Err(format!("{FIELD}: must be an object or null")),
    }
    for name in &policy.always {
        if !out.iter().any(|r| &r.name == name)
            && let Some(spec) = policy.servers.get(name)
        {
            out.push(Requested {
                name: name.clone(),
                spec: spec.clone(),
                from_run: false,
            });
        }
    }
    if out.len() > policy.max_servers_per_run {
        return Err(format!(
            "{FIELD}: {} servers asked for; this server allows {} per run",
            out.len(),
            policy.max_servers_per_run
        ));
    }
    Ok(out)
}

/// ODR's `{url, tools, auth_required}`. No tools (or an empty list) loads no tools, as in ODR.
fn odr_shape(policy: &McpPolicy, map: &Map<String, Value>) -> Result<Option<Requested>, String> {
    only_keys(map, &["url", "tools", "auth_required"], FIELD)?;
    if map.get("auth_required").and_then(Value::as_bool) == Some(true) {
        return Err(format!(
            "{FIELD}.auth_required: the Supabase token exchange of Open Deep Research is not \
             supported; give the server's credentials as headers in the mcpServers shape, or \
             have the operator configure the server"
        ));
    }
    let tools = tool_list(map.get("tools"), &format!("{FIELD}.tools"))?;
    let url = match map.get("url") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(u)) => u.trim_end_matches('/').to_owned(),
        Some(_) => return Err(format!("{FIELD}.url: must be a string")),
    };
    let Some(tools) = tools.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let url = if url.ends_with("/mcp") {
        url
    } else {
        format!("{url}/mcp")
    };
    // The operator's server at this address is used as the operator configured it.
    if let Some((name, spec)) = policy.servers.iter().find(|(_, s)| {
        matches!(&s.transport, Transport::Http { url: u, .. } if u.trim_end_matches('/') == url)
    }) {
        return Ok(Some(Requested {
            name: name.clone(),
            spec: narrowed(spec, Some(tools), &format!("{FIELD}.tools"))?,
            from_run: false,
        }));
    }
    let spec = ServerSpec {
        transport: Transport::Http {
            url,
            headers: BTreeMap::new(),
        },
        tools: Some(tools),
    };
    run_server(policy, "server_1", spec, FIELD).map(Some)
}

/// One entry of `mcpServers`.
fn named(policy: &McpPolicy, name: &str, entry: &Value) -> Result<Requested, String> {
    let field = format!("{FIELD}.mcpServers.{name}");
    check_name(name).map_err(|e| format!("{field}: {e}"))?;
    let Some(map) = entry.as_object() else {
        return Err(format!("{field}: must be an object"));
    };
    only_keys(
        map,
        &[
            "url",
            "headers",
            "tools",
            "transport",
            "command",
            "args",
            "env",
        ],
        &field,
    )?;
    let tools = tool_list(map.get("tools"), &format!("{field}.tools"))?;
    if ["command", "args", "env"]
        .iter()
        .any(|k| map.contains_key(*k))
    {
        return Err(format!(
            "{field}: runs cannot start programs; stdio servers are configured by the operator \
             ([mcp.servers.{name}] in the config file)"
        ));
    }
    if let Some(t) = map.get("transport")
        && !matches!(
            t.as_str(),
            Some("streamable_http" | "http" | "streamable-http")
        )
    {
        return Err(format!(
            "{field}.transport: only streamable HTTP is supported for servers a run brings \
             (\"streamable_http\"); got {t}"
        ));
    }
    let Some(url) = map.get("url") else {
        let Some(spec) = policy.servers.get(name) else {
            let known: Vec<&str> = policy.servers.keys().map(String::as_str).collect();
            return Err(format!(
                "{field}: no MCP server named '{name}' is configured (configured: {}); to bring \
                 a server of your own, give its url",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        return Ok(Requested {
            name: name.to_owned(),
            spec: narrowed(spec, tools, &format!("{field}.tools"))?,
            from_run: false,
        });
    };
    let Some(url) = url.as_str() else {
        return Err(format!("{field}.url: must be a string"));
    };
    let headers = header_map(map.get("headers"), &field)?;
    let spec = ServerSpec {
        transport: Transport::Http {
            url: url.to_owned(),
            headers,
        },
        tools,
    };
    run_server(policy, name, spec, &field)
}

/// A server's `headers`: an object of strings, each a header a request may carry.
fn header_map(value: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, String> {
    let mut headers = BTreeMap::new();
    if let Some(h) = value {
        let Some(h) = h.as_object() else {
            return Err(format!("{field}.headers: must be an object of strings"));
        };
        for (k, v) in h {
            let Some(v) = v.as_str() else {
                return Err(format!("{field}.headers.{k}: must be a string"));
            };
            headers.insert(k.clone(), v.to_owned());
        }
    }
    check_headers(&headers).map_err(|e| format!("{field}.headers: {e}"))?;
    Ok(headers)
}

/// A server the run brought, if the operator lets runs bring servers and its address is allowed.
fn run_server(
    policy: &McpPolicy,
    name: &str,
    spec: ServerSpec,
    field: &str,
) -> Result<Requested, String> {
    if !policy.allow_run_servers {
        return Err(format!(
            "{field}: this server does not let runs bring their own MCP servers ([mcp] \
             allow_run_servers); use one the operator configured{}",
            if policy.servers.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    policy
                        .servers
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
    }
    if let Transport::Http { url, .. } = &spec.transport {
        check_url(url).map_err(|e| format!("{field}.url: {e}"))?;
        if !policy.allow_private_urls && crate::outbound::names_internal_host(url) {
            return Err(format!(
                "{field}.url: the address is loopback, private or link-local, which this server \
                 does not let runs reach ([mcp] allow_private_urls)"
            ));
        }
    }
    Ok(Requested {
        name: name.to_owned(),
        spec,
        from_run: true,
    })
}

/// The operator's server with the run's narrower tool list: a run may offer fewer of its tools,
/// never more.
fn narrowed(
    spec: &ServerSpec,
    tools: Option<Vec<String>>,
    field: &str,
) -> Result<ServerSpec, String> {
    let Some(tools) = tools else {
        return Ok(spec.clone());
    };
    if let Some(allowed) = &spec.tools
        && let Some(extra) = tools.iter().find(|t| !allowed.contains(t))
    {
        return Err(format!(
            "{field}: '{extra}' is not among this server's allowed tools ({})",
            allowed.join(", ")
        ));
    }
    Ok(ServerSpec {
        transport: spec.transport.clone(),
        tools: Some(tools),
    })
}

fn tool_list(value: Option<&Value>, field: &str) -> Result<Option<Vec<String>>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{field}: must be a list of tool names"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(format!("{field}: must be a list of tool names")),
    }
}

fn only_keys(map: &Map<String, Value>, allowed: &[&str], field: &str) -> Result<(), String> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{field}.{k}: unknown key (expected one of: {})",
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

/// Server names become parts of tool names and source addresses: keep them plain.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err("a server name is 1 to 40 letters, digits, '_' or '-'".into())
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .ok_or_else(|| "not an http(s) URL".to_owned())?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("the URL has no host".into());
    }
    if rest.split('/').next().unwrap_or_default().contains('@') {
        return Err("credentials in the URL are not accepted; send them as a header".into());
    }
    Ok(())
}

fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in headers {
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
            return Err(format!("'{k}' is not a valid header name"));
        }
        if reqwest::header::HeaderValue::from_str(v).is_err() {
            return Err(format!("the value of '{k}' is not a valid header value"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(allow_run: bool) -> McpPolicy {
        let mut servers = BTreeMap::new();
        servers.insert(
            "files".to_owned(),
            ServerSpec {
                transport: Transport::Stdio {
                    command: "npx".into(),
                    args: vec![],
                    env: BTreeMap::new(),
                },
                tools: Some(vec!["read_text_file".into(), "search_files".into()]),
            },
        );
        servers.insert(
            "wiki".to_owned(),
            ServerSpec {
                transport: Transport::Http {
                    url: "https://wiki.example/mcp".into(),
                    headers: BTreeMap::new(),
                },
                tools: None,
            },
        );
        McpPolicy {
            servers,
            always: vec![],
            allow_run_servers: allow_run,
            allow_private_urls: false,
            max_servers_per_run: 3,
        }
    }

    #[test]
    fn named_operator_servers_resolve_and_narrow() {
        let r = resolve(
            &policy(false),
            &json!({"mcpServers": {"files": {"tools": ["search_files"]}, "wiki": {}}}),
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].spec.tools, Some(vec!["search_files".to_owned()]));
        assert!(!r[0].from_run && !r[1].from_run);
        let e = resolve(
            &policy(false),
            &json!({"mcpServers": {"files": {"tools": ["write_file"]}}}),
        )
        .unwrap_err();
        assert!(
            e.contains("write_file") && e.contains("allowed tools"),
            "{e}"
        );
        let e = resolve(&policy(false), &json!({"mcpServers": {"nope": {}}})).unwrap_err();
        assert!(
            e.contains("no MCP server named 'nope'") && e.contains("files, wiki"),
            "{e}"
        );
    }

    #[test]
    fn odr_shape_appends_mcp_and_uses_the_operators_server() {
        let r = resolve(
            &policy(false),
            &json!({"url": "https://wiki.example", "tools": ["lookup"], "auth_required": false}),
        )
        .unwrap();
        assert_eq!(r[0].name, "wiki");
        assert_eq!(r[0].spec.tools, Some(vec!["lookup".to_owned()]));
        // No tools: ODR loads none.
        assert!(
            resolve(
                &policy(false),
                &json!({"url": "https://x.example", "tools": []})
            )
            .unwrap()
            .is_empty()
        );
        let e = resolve(
            &policy(false),
            &json!({"url": "https://x.example", "tools": ["a"], "auth_required": true}),
        )
        .unwrap_err();
        assert!(e.contains("auth_required"), "{e}");
    }

    #[test]
    fn runs_bring_servers_only_when_allowed_and_never_programs() {
        let own = json!({"mcpServers": {"mine": {"url": "https://mcp.example/mcp",
                                                  "headers": {"Authorization": "Bearer t"}}}});
        let e = resolve(&policy(false), &own).unwrap_err();
        assert!(e.contains("allow_run_servers"), "{e}");
        let r = resolve(&policy(true), &own).unwrap();
        assert!(r[0].from_run);
        let e = resolve(
            &policy(true),
            &json!({"mcpServers": {"x": {"command": "sh", "args": ["-c", "id"]}}}),
        )
        .unwrap_err();
        assert!(e.contains("cannot start programs"), "{e}");
        let e = resolve(
            &policy(true),
            &json!({"mcpServers": {"x": {"url": "http://127.0.0.1:9/mcp"}}}),
        )
        .unwrap_err();
        assert!(e.contains("allow_private_urls"), "{e}");
        let e = resolve(
            &policy(true),
            &json!({"mcpServers": {"x": {"url": "file:///etc/passwd"}}}),
        )
        .unwrap_err();
        assert!(e.contains("not an http(s) URL"), "{e}");
        let e = resolve(&policy(true), &json!({"mcpServers": {"x": {"url": "https://a.example", "headers": {"bad header": "v"}}}})).unwrap_err();
        assert!(e.contains("header"), "{e}");
        let e = resolve(&policy(true), &json!({"servers": {}})).unwrap_err();
        assert!(e.contains("servers: unknown key"), "{e}");
    }

    #[test]
    fn always_servers_join_and_the_count_is_capped() {
        let mut p = policy(true);
        p.always = vec!["files".into()];
        assert_eq!(resolve(&p, &Value::Null).unwrap()[0].name, "files");
        let many = json!({"mcpServers": {
            "a": {"url": "https://a.example/mcp"}, "b": {"url": "https://b.example/mcp"},
            "c": {"url": "https://c.example/mcp"}}});
        let e = resolve(&p, &many).unwrap_err();
        assert!(e.contains("4 servers") && e.contains("3 per run"), "{e}");
    }
}
