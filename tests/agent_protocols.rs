//! The agent protocols through their official clients, against the research graph on the
//! provider fakes, as two owners, once per storage backend: A2A with the Python `a2a-sdk` 1.x
//! (`tests/a2a/test_a2a.py`) and MCP with the Python `mcp` 2.x client (`tests/mcp/test_mcp.py`),
//! both from `.venv-compat`. `scripts/test.sh` installs them; without them the tests skip unless
//! `DR_REQUIRE_COMPAT=1`. `DR_PROTOCOL_ARGS` passes extra pytest arguments (`-k name`).

mod support;

use deep_research::api::auth::key_digest;
use std::process::Command;
use support::research::{Script, scripted, start_with_settings};
use support::{Backend, graphs, test_settings};

const KEY_A: &str = "agent-protocols-key-of-owner-a";
const KEY_B: &str = "agent-protocols-key-of-owner-b";

/// A pytest suite and the module its client comes from.
#[derive(Clone, Copy, Debug)]
enum Suite {
    A2a,
    Mcp,
}

impl Suite {
    fn dir(self) -> &'static str {
        match self {
            Suite::A2a => concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a"),
            Suite::Mcp => concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp"),
        }
    }

    fn client_module(self) -> &'static str {
        match self {
            Suite::A2a => "a2a.client",
            Suite::Mcp => "mcp.client.streamable_http",
        }
    }
}

fn python(suite: Suite) -> Option<String> {
    let python = std::env::var("DR_COMPAT_PYTHON").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-compat/bin/python").to_owned()
    });
    let has_client = Command::new(&python)
        .args(["-c", &format!("import {}", suite.client_module())])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_client || std::env::var("DR_REQUIRE_COMPAT").as_deref() != Ok("1"),
        "DR_REQUIRE_COMPAT=1 but {python} cannot import {}: run scripts/test.sh",
        suite.client_module()
    );
    if !has_client {
        eprintln!(
            "skipping the {suite:?} suite: its client is not in .venv-compat (run scripts/test.sh)"
        );
    }
    has_client.then_some(python)
}

async fn run_suite(suite: Suite, backend: Backend) {
    let Some(python) = python(suite) else { return };
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
    let tests = suite.dir();
    let extra: Vec<String> = std::env::var("DR_PROTOCOL_ARGS")
        .map(|a| a.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args([
                "-m",
                "pytest",
                "-q",
                "--no-header",
                "-p",
                "no:cacheprovider",
            ])
            .arg(tests)
            .args(extra)
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
