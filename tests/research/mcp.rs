//! MCP tools for the researchers, against real MCP servers from npm
//! (`@modelcontextprotocol/server-everything` and `server-filesystem`, installed by
//! scripts/test.sh into tests/mcp-servers), over stdio and streamable HTTP; the model is the
//! scripted fake. Without the npm packages these tests skip, unless `DR_REQUIRE_MCP` is set
//! (CI), when they fail.

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::fake_llm::FakeReply;
use support::research::{self as r, ResearchApp, Role, Script, role, scripted, turns};
use support::{new_thread, parse_sse};

/// The installed npm packages, or `None` (the test skips) when they are not installed.
fn servers() -> Option<PathBuf> {
    let dir = std::env::var_os("DR_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-servers/node_modules")
        });
    let found = dir
        .join("@modelcontextprotocol/server-everything/dist/index.js")
        .exists()
        && dir
            .join("@modelcontextprotocol/server-filesystem/dist/index.js")
            .exists();
    if found {
        return Some(dir);
    }
    assert!(
        std::env::var_os("DR_REQUIRE_MCP").is_none(),
        "DR_REQUIRE_MCP is set but the MCP servers are not installed in {}",
        dir.display()
    );
    eprintln!("skipping: MCP servers not installed (npm ci in tests/mcp-servers)");
    None
}

fn everything(dir: &Path) -> String {
    dir.join("@modelcontextprotocol/server-everything/dist/index.js")
        .display()
        .to_string()
}

fn filesystem(dir: &Path) -> String {
    dir.join("@modelcontextprotocol/server-filesystem/dist/index.js")
        .display()
        .to_string()
}

/// The scripted workload with one topic, whose researcher makes `calls` on its first turn and
/// then completes.
fn researcher_calls(
    calls: Vec<(String, Value)>,
) -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static {
    let base = scripted(Script {
        topics: 1,
        ..Script::default()
    });
    move |req: &Value| match role(req) {
        Role::Researcher if turns(req) == 0 => FakeReply::ToolCalls(calls.clone()),
        Role::Researcher => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
        _ => base(req),
    }
}

async fn research(ra: &ResearchApp, configurable: Value) -> (Vec<support::SseFrame>, Value) {
    let tid = new_thread(&ra.app).await;
    let resp = ra
        .app
        .client
        .post(ra.app.url(&format!("/threads/{tid}/runs/stream")))
        .json(&json!({
            "assistant_id": "deep_research",
            "input": {"messages": [{"role": "user", "content": "Research the cobalt reserves in detail"}]},
            "config": {"configurable": configurable},
            "stream_mode": ["values", "custom"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let frames = parse_sse(&resp.text().await.unwrap());
    let state = ra.app.get_json(&format!("/threads/{tid}/state")).await;
    (frames, state["values"].clone())
}

fn custom<'a>(frames: &'a [support::SseFrame], kind: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.event == "custom" && f.data["type"] == kind)
        .map(|f| &f.data)
        .collect()
}

/// The text the compression model was shown: every tool result of the researcher.
fn compressed_input(ra: &ResearchApp) -> String {
    ra.llm
        .requests()
        .iter()
        .filter(|q| role(q) == Role::Compress)
        .map(r::all_text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn offered_tools(ra: &ResearchApp) -> Vec<String> {
    ra.llm
        .requests()
        .iter()
        .find(|q| role(q) == Role::Researcher)
        .map(|q| {
            q["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn mcp_sources(values: &Value) -> Vec<Value> {
    values["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == "mcp")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_are_listed_offered_called_and_kept_apart_as_sources() {
    let Some(dir) = servers() else { return };
    let docs = tempfile::tempdir().unwrap();
    let notes = docs.path().join("notes.md");
    std::fs::write(
        &notes,
        "Internal memo: the cobalt reserve figure is 4,200 tonnes.",
    )
    .unwrap();
    let config = format!(
        r#"
[mcp.servers.files]
command = "node"
args = ["{fs}", "{docs}"]
tools = ["read_text_file", "list_directory"]

[mcp.servers.everything]
command = "node"
args = ["{ev}", "stdio"]
tools = ["echo", "get-env", "get-resource-links"]
"#,
        fs = filesystem(&dir),
        ev = everything(&dir),
        docs = docs.path().display(),
    );
    let path = notes.display().to_string();
    let ra = r::start(
        researcher_calls(vec![
            ("read_text_file".into(), json!({"path": path})),
            (
                "echo".into(),
                json!({"message": "hello from the researcher"}),
            ),
            ("get-env".into(), json!({})),
            ("get-resource-links".into(), json!({"count": 2})),
        ]),
        &config,
    )
    .await;

    let (frames, values) = research(
        &ra,
        json!({"mcp_config": {"mcpServers": {"files": {}, "everything": {}}}}),
    )
    .await;
    assert!(values["final_report"].as_str().is_some(), "{values}");
    assert!(custom(&frames, "mcp_error").is_empty(), "{frames:?}");

    // Offered: the allow-listed tools, beside the built-in ones, and nothing else of theirs.
    let offered = offered_tools(&ra);
    for name in [
        "read_text_file",
        "list_directory",
        "echo",
        "get-env",
        "think_tool",
    ] {
        assert!(
            offered.iter().any(|t| t == name),
            "{name} not in {offered:?}"
        );
    }
    for name in ["write_file", "get-sum", "trigger-long-running-operation"] {
        assert!(
            !offered.iter().any(|t| t == name),
            "{name} offered: {offered:?}"
        );
    }

    // Called, and the results are the researcher's notes.
    let seen = compressed_input(&ra);
    assert!(
        seen.contains("the cobalt reserve figure is 4,200 tonnes"),
        "{seen}"
    );
    assert!(seen.contains("Echo: hello from the researcher"), "{seen}");
    assert!(
        seen.contains("Source: mcp://files/read_text_file?path="),
        "{seen}"
    );
    // The program got PATH, not the service's environment.
    assert!(seen.contains("PATH"), "{seen}");
    assert!(
        !seen.contains("CARGO_PKG_NAME"),
        "the environment leaked: {seen}"
    );

    // Sources: MCP ones carry their kind and server, apart from web pages.
    let mcp = mcp_sources(&values);
    assert!(
        mcp.iter().any(|s| s["server"] == "files"
            && s["url"]
                .as_str()
                .unwrap()
                .starts_with("mcp://files/read_text_file?path=")),
        "{mcp:?}"
    );
    assert!(
        mcp.iter().any(|s| s["tool"] == "get-resource-links"
            && !s["url"].as_str().unwrap().starts_with("mcp://")),
        "resource links are sources: {mcp:?}"
    );
    let citations = custom(&frames, "citations");
    assert_eq!(citations.len(), 1);
    assert!(citations[0]["mcp_cited"].is_u64(), "{citations:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mcp_requests_are_refused_before_the_run() {
    let config = r#"
[mcp.servers.wiki]
url = "https://wiki.example/mcp"
tools = ["lookup"]
"#;
    let ra = r::start(scripted(Script::default()), config).await;
    let tid = new_thread(&ra.app).await;
    for (mcp_config, expect) in [
        (
            json!({"mcpServers": {"nope": {}}}),
            "no MCP server named 'nope'",
        ),
        (
            json!({"mcpServers": {"wiki": {"tools": ["delete_page"]}}}),
            "allowed tools",
        ),
        (
            json!({"mcpServers": {"mine": {"url": "https://mcp.example/mcp"}}}),
            "allow_run_servers",
        ),
        (
            json!({"mcpServers": {"x": {"command": "sh", "args": ["-c", "id"]}}}),
            "cannot start programs",
        ),
        (
            json!({"url": "https://wiki.example", "tools": ["lookup"], "auth_required": true}),
            "auth_required",
        ),
        (json!("everything"), "must be an object"),
    ] {
        let resp = ra
            .app
            .client
            .post(ra.app.url(&format!("/threads/{tid}/runs")))
            .json(
                &json!({"assistant_id": "deep_research", "input": {"messages": []},
                          "config": {"configurable": {"mcp_config": mcp_config}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422, "{mcp_config}");
        let body: Value = resp.json().await.unwrap();
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(expect), "{mcp_config}: {detail}");
    }
    let runs = ra.app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs, json!([]), "no run was created");
    // ODR's own shape names the operator's server at that address.
    let resp = ra
        .app
        .client
        .post(ra.app.url("/assistants"))
        .json(
            &json!({"graph_id": "deep_research", "config": {"configurable": {
            "mcp_config": {"url": "https://wiki.example", "tools": ["lookup"]}}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The everything server over streamable HTTP on `port`, killed when dropped.
struct HttpServer(std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start_http_everything(dir: &Path, port: u16) -> HttpServer {
    let child = std::process::Command::new("node")
        .args([everything(dir), "streamableHttp".into()])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the everything server");
    let server = HttpServer(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the MCP server did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_servers_of_the_operator_and_of_the_run_both_work() {
    let Some(dir) = servers() else { return };
    let port = free_port();
    let _server = start_http_everything(&dir, port).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        r#"
[mcp]
allow_run_servers = true
allow_private_urls = true

[mcp.servers.remote]
url = "{url}"
tools = ["echo", "get-sum"]
"#
    );
    // The same server twice: the run's copy of `echo` is renamed, not dropped.
    let ra = r::start(
        researcher_calls(vec![
            ("echo".into(), json!({"message": "over http"})),
            ("get-sum".into(), json!({"a": 19, "b": 23})),
            (
                "mine_echo".into(),
                json!({"message": "the run's own server"}),
            ),
        ]),
        &config,
    )
    .await;
    let (frames, values) = research(
        &ra,
        json!({"mcp_config": {"mcpServers": {
            "remote": {},
            "mine": {"url": url, "headers": {"X-Team-Token": "team-secret-value"}, "tools": ["echo"]}}}}),
    )
    .await;
    assert!(custom(&frames, "mcp_error").is_empty(), "{frames:?}");
    let offered = offered_tools(&ra);
    assert!(offered.contains(&"mine_echo".to_owned()), "{offered:?}");
    let seen = compressed_input(&ra);
    assert!(seen.contains("Echo: over http"), "{seen}");
    assert!(seen.contains("42"), "{seen}");
    assert!(seen.contains("Echo: the run's own server"), "{seen}");
    let servers: Vec<String> = mcp_sources(&values)
        .iter()
        .map(|s| s["server"].as_str().unwrap().to_owned())
        .collect();
    assert!(servers.contains(&"remote".to_owned()) && servers.contains(&"mine".to_owned()));

    // ODR's single-server shape reaches the same server (`/mcp` is appended to the base URL).
    let base = format!("http://127.0.0.1:{port}");
    let (frames, _) = research(&ra, json!({"mcp_config": {"url": base, "tools": ["echo"]}})).await;
    assert!(custom(&frames, "mcp_error").is_empty(), "{frames:?}");
}

/// The processes whose command line holds `marker` (killed when `kill`).
fn kill_marked(marker: &str, kill: bool) -> usize {
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(marker)
            && let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>()
            && pid as u32 != std::process::id()
        {
            if kill {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
            killed += 1;
        }
    }
    killed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_servers_and_tools_become_results_never_a_hung_or_failed_run() {
    let Some(dir) = servers() else { return };
    let docs = tempfile::tempdir().unwrap();
    let big = docs.path().join("big.txt");
    std::fs::write(&big, "cobalt ".repeat(1_500_000)).unwrap(); // 10.5 MB
    let marker = format!("dr-mcp-crash-{}", uuid::Uuid::new_v4());
    let config = format!(
        r#"
[mcp]
connect_timeout_secs = 5
call_timeout_secs = 8
max_result_chars = 5000

[mcp.servers.files]
command = "node"
args = ["{fs}", "{docs}"]

[mcp.servers.slow]
command = "node"
args = ["{ev}", "stdio", "{marker}"]

[mcp.servers.down]
url = "http://127.0.0.1:{closed}/mcp"
"#,
        fs = filesystem(&dir),
        ev = everything(&dir),
        docs = docs.path().display(),
        closed = free_port(),
    );
    let ra = r::start(
        researcher_calls(vec![
            (
                "read_text_file".into(),
                json!({"path": big.display().to_string()}),
            ),
            (
                "trigger-long-running-operation".into(),
                json!({"duration": 60, "steps": 2}),
            ),
            ("read_text_file".into(), json!({"path": "/etc/passwd"})),
        ]),
        &config,
    )
    .await;
    let all = json!({"mcp_config": {"mcpServers": {"files": {}, "slow": {}, "down": {}}}});
    let started = Instant::now();
    let (frames, values) = research(&ra, all.clone()).await;
    let took = started.elapsed();
    assert!(
        values["final_report"].as_str().is_some(),
        "the run went on: {values}"
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");

    let errors = custom(&frames, "mcp_error");
    assert!(errors.iter().any(|e| e["server"] == "down"), "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e["tool"] == "trigger-long-running-operation"
                && e["error"].as_str().unwrap().contains("within 8 s")),
        "{errors:?}"
    );
    // The server's own refusal (outside its allowed directory) is a result too.
    assert!(
        errors.iter().any(|e| e["tool"] == "read_text_file"),
        "{errors:?}"
    );
    let seen = compressed_input(&ra);
    assert!(seen.contains("[truncated: "), "a 10 MB result is cut");
    assert!(
        seen.len() < 200_000,
        "{} characters reached the model",
        seen.len()
    );
    let prompt = ra
        .llm
        .requests()
        .iter()
        .find(|q| role(q) == Role::Researcher)
        .map(r::all_text)
        .unwrap();
    assert!(
        prompt.contains("the 'down' tool server is unavailable"),
        "{prompt}"
    );

    // A crash mid-call: the call ends at once (well before its timeout) and the run goes on.
    let researcher_turns = |ra: &ResearchApp| {
        ra.llm
            .requests()
            .iter()
            .filter(|q| role(q) == Role::Researcher)
            .count()
    };
    let before = researcher_turns(&ra);
    let working = json!({"mcp_config": {"mcpServers": {"files": {}, "slow": {}}}});
    let run = research(&ra, working.clone());
    let killer = async {
        // Once the researcher has asked for its calls, the long operation is in flight.
        while researcher_turns(&ra) == before {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        kill_marked(&marker, true)
    };
    let ((frames, values), killed) = tokio::join!(run, killer);
    assert!(killed >= 1, "the server was running");
    assert!(values["final_report"].as_str().is_some(), "{values}");
    let errors = custom(&frames, "mcp_error");
    let crashed = errors
        .iter()
        .find(|e| e["tool"] == "trigger-long-running-operation")
        .unwrap_or_else(|| panic!("{errors:?}"));
    assert!(
        !crashed["error"].as_str().unwrap().contains("within 8 s"),
        "the crash was noticed, not waited out: {crashed}"
    );

    // The next run finds the server restarted: its tools are listed again.
    let (frames, _) = research(&ra, working).await;
    let errors = custom(&frames, "mcp_error");
    assert!(
        !errors
            .iter()
            .any(|e| e["server"] == "slow" && e.get("tool").is_none()),
        "{errors:?}"
    );
    assert!(
        kill_marked(&marker, false) >= 1,
        "a new server process runs"
    );
}
