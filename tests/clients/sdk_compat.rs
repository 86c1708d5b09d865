//! Runs the Python `langgraph-sdk` compatibility suite (`tests/compat`) against the real
//! service, once per storage backend. The suite needs a Python with the SDK installed:
//! `scripts/test.sh` makes one and sets `DR_COMPAT_PYTHON`.

use crate::support;

use deep_research::api::auth::key_digest;
use std::process::Command;

const KEY_A: &str = "sdk-suite-key-of-owner-a";
const KEY_B: &str = "sdk-suite-key-of-owner-b";
use support::{Backend, spawn_app_on, test_settings};

fn python() -> Option<String> {
    if let Ok(p) = std::env::var("DR_COMPAT_PYTHON") {
        return Some(p);
    }
    let local = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-compat/bin/python");
    if std::path::Path::new(local).exists() {
        return Some(local.to_owned());
    }
    assert!(
        std::env::var("DR_REQUIRE_COMPAT").as_deref() != Ok("1"),
        "DR_REQUIRE_COMPAT=1 but no Python with langgraph-sdk: run scripts/test.sh"
    );
    eprintln!("skipping the SDK suite: no .venv-compat (run scripts/test.sh)");
    None
}

async fn run_suite(backend: Backend) {
    let Some(python) = python() else { return };
    // The suite acts as owner A through a keys file, as a deployment with users would; the
    // tenants test also acts as owner B.
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
    settings.auth.keys_file = Some(keys);
    // One owner runs the whole suite, hundreds of runs a minute: per-owner limits have tests of
    // their own (tests/api/tenants.rs).
    settings.auth.requests_per_minute = 0;
    settings.run_limits.owner_max_inflight_runs = 0;
    settings.run_limits.owner_runs_per_minute = 0;
    let Some(app) = spawn_app_on(backend, settings).await else {
        return;
    };
    let url = app.address.clone();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat");
    // `DR_COMPAT_ARGS` narrows the suite while working on it, e.g. `-k versions`.
    let extra: Vec<String> = std::env::var("DR_COMPAT_ARGS")
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
                dir,
            ])
            .args(extra)
            .env("LG_URL", url)
            .env("LG_API_KEY", KEY_A)
            .env("LG_API_KEY_B", KEY_B)
            .env("LG_WEBHOOK_SECRET", support::WEBHOOK_SECRET)
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
        "SDK compatibility suite failed on {backend:?}:\n{stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_sdk_suite_passes_on_sqlite() {
    run_suite(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_sdk_suite_passes_on_postgres() {
    run_suite(Backend::Postgres).await;
}
