//! The agent protocols through their official clients, against the research graph on the
//! provider fakes, as two owners, once per storage backend: A2A with the Python `a2a-sdk` 1.x
//! (`tests/a2a/test_a2a.py`), MCP with the Python `mcp` 2.x client (`tests/mcp/test_mcp.py`),
//! both from `.venv-compat`, and AG-UI with `@ag-ui/client` in Node (`tests/browser/ag_ui.mjs`,
//! installed with the browser pages). `scripts/test.sh` installs them all; without them the
//! tests skip unless `DR_REQUIRE_COMPAT=1` (Python) or `DR_REQUIRE_BROWSER=1` (npm).
//! `DR_PROTOCOL_ARGS` narrows a suite: pytest arguments (`-k name`), or part of a test's name.

use crate::support;

use deep_research::api::auth::key_digest;
use std::process::Command;
use support::research::{Script, scripted, start_with_settings};
use support::{Backend, graphs, test_settings};

const KEY_A: &str = "agent-protocols-key-of-owner-a";
const KEY_B: &str = "agent-protocols-key-of-owner-b";

/// A suite and the official client it drives.
#[derive(Clone, Copy, Debug)]
enum Suite {
    /// `tests/a2a/test_a2a.py` with `a2a-sdk`.
    A2a,
    /// `tests/mcp/test_mcp.py` with `mcp`.
    Mcp,
    /// `tests/browser/ag_ui.mjs` with `@ag-ui/client` (installed with the browser pages).
    AgUi,
}

impl Suite {
    /// The command that runs the suite, or `None` (skip) when its client is not installed.
    fn command(self) -> Option<Command> {
        let root = env!("CARGO_MANIFEST_DIR");
        let (installed, command, hint) = match self {
            Suite::A2a | Suite::Mcp => {
                let python = std::env::var("DR_COMPAT_PYTHON")
                    .unwrap_or_else(|_| format!("{root}/.venv-compat/bin/python"));
                let (module, dir) = match self {
                    Suite::A2a => ("a2a.client", "a2a"),
                    _ => ("mcp.client.streamable_http", "mcp"),
                };
                let installed = Command::new(&python)
                    .args(["-c", &format!("import {module}")])
                    .output()
                    .is_ok_and(|o| o.status.success());
                let mut pytest = Command::new(python);
                pytest.args([
                    "-m",
                    "pytest",
                    "-q",
                    "--no-header",
                    "-p",
                    "no:cacheprovider",
                ]);
                pytest.arg(format!("{root}/tests/{dir}"));
                pytest.args(extra_args());
                (installed, pytest, "DR_REQUIRE_COMPAT")
            }
            Suite::AgUi => {
                let installed = std::path::Path::new(&format!(
                    "{root}/tests/browser/node_modules/@ag-ui/client/package.json"
                ))
                .exists();
                // The script reads DR_PROTOCOL_ARGS itself (inherited).
                let mut node = Command::new("node");
                node.arg(format!("{root}/tests/browser/ag_ui.mjs"));
                (installed, node, "DR_REQUIRE_BROWSER")
            }
        };
        assert!(
            installed || std::env::var(hint).as_deref() != Ok("1"),
            "{hint}=1 but the {self:?} suite's client is not installed: run scripts/test.sh"
        );
        if !installed {
            eprintln!(
                "skipping the {self:?} suite: its client is not installed (run scripts/test.sh)"
            );
            return None;
        }
        Some(command)
    }
}

/// Extra pytest arguments from `DR_PROTOCOL_ARGS` (`-k name`).
fn extra_args() -> Vec<String> {
    std::env::var("DR_PROTOCOL_ARGS")
        .map(|a| a.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

async fn run_suite(suite: Suite, backend: Backend) {
    let Some(mut command) = suite.command() else {
        return;
    };
    let dir = tempfile::TempDir::new().expect("temp dir");
    let keys = dir.path().join("keys.toml");
    let entry = |owner: &str, key: &str| {
        format!(
            "[[keys]]\nowner = \"{owner}\"\nsha256 = \"{}\"\n",
            key_digest(key)
        )
    };
    std::fs::write(&keys, entry("owner-a", KEY_A) + &entry("owner-b", KEY_B)).expect("keys");
    let mut settings = test_settings();
    settings.auth.disabled = false;
    settings.auth.keys_file = Some(keys);
    settings.auth.requests_per_minute = 0;
    settings.run_limits.owner_runs_per_minute = 0;
    let Some(app) = start_with_settings(
        backend,
        scripted(Script::default()),
        "",
        graphs::registry(),
        settings,
    )
    .await
    else {
        return;
    };
    let url = app.app.address.clone();
    let output = tokio::task::spawn_blocking(move || {
        command
            .env("DR_URL", url)
            .env("DR_KEY_A", KEY_A)
            .env("DR_KEY_B", KEY_B)
            .output()
    })
    .await
    .expect("join")
    .expect("run pytest");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}\n{stderr}");
    assert!(
        output.status.success(),
        "{suite:?} suite failed on {backend:?}:\n{stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_clients_get_reports_on_sqlite() {
    run_suite(Suite::A2a, Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_clients_get_reports_on_postgres() {
    run_suite(Suite::A2a, Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_get_reports_on_sqlite() {
    run_suite(Suite::Mcp, Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_get_reports_on_postgres() {
    run_suite(Suite::Mcp, Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_can_switch_a2a_off() {
    let settings = deep_research::config::Settings {
        a2a: false,
        ..test_settings()
    };
    let app = support::spawn_app_on(Backend::Sqlite, settings)
        .await
        .expect("app");
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}});
    let rpc = app.client.post(app.url("/a2a/agent")).json(&body).send();
    assert_eq!(rpc.await.unwrap().status(), 404);
    let card = app
        .client
        .get(app.url("/.well-known/agent-card.json"))
        .send();
    assert_eq!(card.await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_ui_clients_get_reports_on_sqlite() {
    run_suite(Suite::AgUi, Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_ui_clients_get_reports_on_postgres() {
    run_suite(Suite::AgUi, Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_can_switch_mcp_off() {
    let settings = deep_research::config::Settings {
        mcp: false,
        ..test_settings()
    };
    let app = support::spawn_app_on(Backend::Sqlite, settings)
        .await
        .expect("app");
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let rpc = app.client.post(app.url("/mcp")).json(&body).send();
    assert_eq!(rpc.await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_can_switch_ag_ui_off() {
    let settings = deep_research::config::Settings {
        ag_ui: false,
        ..test_settings()
    };
    let app = support::spawn_app_on(Backend::Sqlite, settings)
        .await
        .expect("app");
    let input = serde_json::json!({"threadId": uuid::Uuid::new_v4().to_string(), "runId": "r",
                                   "messages": [{"id": "1", "role": "user", "content": "hi"}]});
    let run = app.client.post(app.url("/ag-ui/agent")).json(&input).send();
    assert_eq!(run.await.unwrap().status(), 404);
}
