//! Connections to MCP servers, shared by every run: each server is started (stdio) or connected
//! (streamable HTTP) on first use and kept; a connection found closed (the program crashed, the
//! session ended) is replaced on the next use. Every wait is bounded.

use super::spec::{ServerSpec, Transport};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// Bounds on every server's use.
#[derive(Clone, Debug)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    /// Characters of one tool result kept for the model.
    pub max_result_chars: usize,
    /// Connections to servers runs brought, kept for reuse (the oldest is closed past this).
    pub max_run_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            max_result_chars: 20_000,
            max_run_connections: 32,
        }
    }
}

/// A tool a server offers, as listed.
#[derive(Clone, Debug)]
pub struct ListedTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// What went wrong talking to a server, in words fit for the model and the run's events (no
/// URLs, no header values).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct McpError(pub String);

/// The largest message read from a server. rmcp's default (16 MiB) drops a bigger message
/// without a word, and the call would wait for its timeout: a 10 MB file read comes back about
/// twice its size (text and structured content). Results are cut to `max_result_chars` anyway.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

struct Connection {
    service: RunningService<RoleClient, ()>,
    tools: Vec<ListedTool>,
    /// A stdio server's program, killed when the connection is dropped.
    _child: Option<tokio::process::Child>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// The shared connections, keyed by server spec (the same server asked for by two runs is one
/// connection; a run's own server with other headers is another).
pub struct McpHub {
    /// For the operator's servers.
    http: reqwest::Client,
    /// For servers runs bring: public addresses only, unless the operator allows private ones.
    run_http: reqwest::Client,
    limits: Limits,
    /// Each server's slot, when it was last used, and whether a run brought it.
    slots: Mutex<HashMap<ServerSpec, (Slot, u64, bool)>>,
    uses: std::sync::atomic::AtomicU64,
}

impl McpHub {
    /// `allow_private` lets servers runs bring be on internal addresses.
    pub fn new(limits: Limits, allow_private: bool) -> Result<Self, reqwest::Error> {
        // No redirects: a server may not send the client (and its headers) elsewhere.
        let base = || {
            crate::outbound::client_builder()
                .connect_timeout(limits.connect_timeout)
                .redirect(reqwest::redirect::Policy::none())
        };
        // Servers a run names are checked where this process resolves them: no proxy, which
        // would resolve and connect on its own.
        let run_http = if allow_private {
            base().build()?
        } else {
            base()
                .no_proxy()
                .dns_resolver(Arc::new(crate::outbound::PublicOnly))
                .build()?
        };
        Ok(Self {
            http: base().build()?,
            run_http,
            limits,
            slots: Mutex::new(HashMap::new()),
            uses: Default::default(),
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The tools `spec`'s server lists (all of them; the caller applies the allow-list).
    pub async fn tools(
        &self,
        spec: &ServerSpec,
        from_run: bool,
    ) -> Result<Vec<ListedTool>, McpError> {
        Ok(self.connection(spec, from_run).await?.tools.clone())
    }

    /// Calls one tool. A server error, an `isError` result, a timeout or a crash is an `Err`
    /// with text for the model; the connection is replaced on the next use if it closed.
    pub async fn call(
        &self,
        spec: &ServerSpec,
        from_run: bool,
        tool: &str,
        args: Map<String, Value>,
    ) -> Result<Value, McpError> {
        let conn = self.connection(spec, from_run).await?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        let timeout = self.limits.call_timeout;
        let result = tokio::time::timeout(timeout, conn.service.call_tool(params)).await;
        match result {
            Err(_) => Err(McpError(format!(
                "the tool did not answer within {} s",
                timeout.as_secs()
            ))),
            Ok(Err(e)) => Err(McpError(scrub(spec, &e.to_string()))),
            Ok(Ok(r)) => serde_json::to_value(&r)
                .map_err(|e| McpError(format!("the tool's result could not be read: {e}"))),
        }
    }

    async fn connection(
        &self,
        spec: &ServerSpec,
        from_run: bool,
    ) -> Result<Arc<Connection>, McpError> {
        let slot = self.slot(spec, from_run);
        let mut held = slot.lock().await;
        // The service loop ends when the program exits or the session is lost.
        if let Some(conn) = held.as_ref()
            && !conn.service.is_closed()
            && !conn.service.is_transport_closed()
        {
            return Ok(conn.clone());
        }
        if held.take().is_some() {
            tracing::warn!(server = %label(spec), "MCP server connection closed; reconnecting");
        }
        let conn = tokio::time::timeout(self.limits.connect_timeout, self.connect(spec, from_run))
            .await
            .map_err(|_| {
                McpError(format!(
                    "the server did not start or answer within {} s",
                    self.limits.connect_timeout.as_secs()
                ))
            })??;
        let conn = Arc::new(conn);
        *held = Some(conn.clone());
        Ok(conn)
    }

    /// The slot of `spec`, made on first use; servers runs brought are kept up to a count.
    fn slot(&self, spec: &ServerSpec, from_run: bool) -> Slot {
        let tick = self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((slot, last, _)) = slots.get_mut(spec) {
            *last = tick;
            return slot.clone();
        }
        if from_run {
            let runs: Vec<(&ServerSpec, u64)> = slots
                .iter()
                .filter(|(_, (_, _, of_run))| *of_run)
                .map(|(k, (_, last, _))| (k, *last))
                .collect();
            if runs.len() >= self.limits.max_run_connections
                && let Some(oldest) = runs
                    .iter()
                    .min_by_key(|(_, last)| *last)
                    .map(|(k, _)| (*k).clone())
            {
                // Dropping the slot closes its connection once no call holds it.
                slots.remove(&oldest);
            }
        }
        let slot: Slot = Arc::default();
        slots.insert(spec.clone(), (slot.clone(), tick, from_run));
        slot
    }

    async fn connect(&self, spec: &ServerSpec, from_run: bool) -> Result<Connection, McpError> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| McpError(scrub(spec, &format!("{what}: {e}")));
        let mut child = None;
        let client = if from_run { &self.run_http } else { &self.http };
        let service = match &spec.transport {
            Transport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear();
                for var in ["PATH", "HOME", "LANG", "TMPDIR"] {
                    if let Ok(v) = std::env::var(var) {
                        cmd.env(var, v);
                    }
                }
                cmd.envs(env)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                let mut program = cmd
                    .spawn()
                    .map_err(|e| fail(&format!("could not start '{command}'"), &e))?;
                if let Some(stderr) = program.stderr.take() {
                    forward_stderr(label(spec), stderr);
                }
                let (Some(stdout), Some(stdin)) = (program.stdout.take(), program.stdin.take())
                else {
                    return Err(McpError(
                        "the server's stdin/stdout are not available".into(),
                    ));
                };
                child = Some(program);
                let transport = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
                    .with_max_line_length(MAX_MESSAGE_BYTES);
                ().serve(transport)
                    .await
                    .map_err(|e| fail("the server did not complete the MCP handshake", &e))?
            }
            Transport::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|_| McpError(format!("invalid header name '{k}'")))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .map_err(|_| McpError(format!("invalid value for header '{k}'")))?;
                    custom.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom)
                    .max_json_response_size(MAX_MESSAGE_BYTES)
                    .max_sse_event_size(MAX_MESSAGE_BYTES);
                let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
                ().serve(transport)
                    .await
                    .map_err(|e| fail("the server did not complete the MCP handshake", &e))?
            }
        };
        let listed = service
            .list_all_tools()
            .await
            .map_err(|e| fail("the server did not list its tools", &e))?;
        let tools = listed
            .into_iter()
            .map(|t| ListedTool {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect();
        Ok(Connection {
            service,
            tools,
            _child: child,
        })
    }
}

/// A server as logs name it: its command, or its URL's host.
pub fn label(spec: &ServerSpec) -> String {
    match &spec.transport {
        Transport::Stdio { command, .. } => command.clone(),
        Transport::Http { url, .. } => reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| "(http server)".into()),
    }
}

/// Error text without the server's URL or header values (either may carry a secret).
fn scrub(spec: &ServerSpec, text: &str) -> String {
    let mut text = text.to_owned();
    if let Transport::Http { url, headers } = &spec.transport {
        text = text.replace(url.as_str(), "(the server)");
        for value in headers.values().filter(|v| v.len() >= 4) {
            text = text.replace(value.as_str(), "(redacted)");
        }
    }
    text
}

/// A stdio server's diagnostics go to the service's log, a line at a time.
fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %server, "mcp stderr: {}", line.chars().take(500).collect::<String>());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn http(url: &str) -> ServerSpec {
        ServerSpec {
            transport: Transport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            tools: None,
        }
    }

    #[test]
    fn servers_runs_bring_are_kept_up_to_a_count_and_the_operators_always() {
        let limits = Limits {
            max_run_connections: 2,
            ..Limits::default()
        };
        let hub = McpHub::new(limits, false).unwrap();
        hub.slot(&http("https://operator.example/mcp"), false);
        for n in 0..3 {
            hub.slot(&http(&format!("https://run{n}.example/mcp")), true);
        }
        let slots = hub.slots.lock().unwrap();
        assert_eq!(slots.len(), 3);
        assert!(slots.contains_key(&http("https://operator.example/mcp")));
        assert!(
            !slots.contains_key(&http("https://run0.example/mcp")),
            "the oldest went"
        );
    }

    #[test]
    fn errors_never_carry_the_url_or_header_values() {
        let mut spec = http("https://mcp.example/mcp?key=abc123");
        if let Transport::Http { headers, .. } = &mut spec.transport {
            headers.insert("Authorization".into(), "Bearer s3cret-token".into());
        }
        let text = scrub(
            &spec,
            "error sending request for https://mcp.example/mcp?key=abc123 with Bearer s3cret-token",
        );
        assert!(
            !text.contains("abc123") && !text.contains("s3cret"),
            "{text}"
        );
    }
}
