//! A2A through the official Python client (`a2a-sdk` 1.x, in `.venv-compat`): the tests in
//! `tests/a2a/test_a2a.py` against the research graph on the provider fakes, as two owners,
//! once per storage backend. `scripts/test.sh` installs the client; without it the tests skip
//! unless `DR_REQUIRE_COMPAT=1`.

mod support;

use deep_research::api::auth::key_digest;
use std::process::Command;
use support::research::{Script, scripted, start_with_settings};
use support::{Backend, graphs, test_settings};

const KEY_A: &str = "a2a-suite-key-of-owner-a";
const KEY_B: &str = "a2a-suite-key-of-owner-b";

fn python() -> Option<String> {
    let python = std::env::var("DR_COMPAT_PYTHON").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-compat/bin/python").to_owned()
    });
    let has_client = Command::new(&python)
        .args(["-c", "import a2a.client"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_client || std::env::var("DR_REQUIRE_COMPAT").as_deref() != Ok("1"),
        "DR_REQUIRE_COMPAT=1 but {python} has no a2a-sdk: run scripts/test.sh"
    );
    if !has_client {
        eprintln!("skipping the A2A suite: no a2a-sdk in .venv-compat (run scripts/test.sh)");
    }
    has_client.then_some(python)
}

async fn run_suite(backend: Backend) {
    let Some(python) = python() else { return };
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
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a");
    let extra: Vec<String> = std::env::var("DR_A2A_ARGS")
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
            .env("A2A_URL", url)
            .env("A2A_KEY_A", KEY_A)
            .env("A2A_KEY_B", KEY_B)
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
        "A2A suite failed on {backend:?}:\n{stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_clients_get_reports_on_sqlite() {
    run_suite(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_clients_get_reports_on_postgres() {
    run_suite(Backend::Postgres).await;
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
