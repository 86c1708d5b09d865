//! The served OpenAPI document tells the truth: Schemathesis (from PyPI, installed by
//! scripts/test.sh) generates requests from it and checks every response against it — no
//! server errors, no undocumented status codes or content types, responses that match their
//! schemas, invalid requests refused and valid ones accepted. What it runs and the few
//! operation-specific exceptions (with their reasons) are in tests/schemathesis/schemathesis.toml.

use crate::support;

use deep_research::api::auth::key_digest;
use std::process::Command;

const KEY: &str = "schemathesis-key-0123456789";
use support::{Backend, spawn_app_on, test_settings};

fn schemathesis() -> Option<String> {
    if let Ok(path) = std::env::var("DR_SCHEMATHESIS") {
        return Some(path);
    }
    let local = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.venv-schemathesis/bin/schemathesis"
    );
    if std::path::Path::new(local).exists() {
        return Some(local.into());
    }
    assert!(
        std::env::var("DR_REQUIRE_SCHEMATHESIS").is_err(),
        "DR_REQUIRE_SCHEMATHESIS=1 but no schemathesis: run scripts/test.sh"
    );
    eprintln!("skipping schemathesis: no .venv-schemathesis (run scripts/test.sh)");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_spec_holds_under_schemathesis() {
    let Some(tool) = schemathesis() else { return };
    // As a deployment with users runs: keys required (schemathesis also checks that requests
    // without one are refused), without the per-owner limits a burst of generated requests
    // would trip.
    let keys = tempfile::TempDir::new().expect("temp dir");
    let keys_file = keys.path().join("keys.toml");
    let entry = format!(
        "[[keys]]\nowner = \"fuzzer\"\nsha256 = \"{}\"\n",
        key_digest(KEY)
    );
    std::fs::write(&keys_file, entry).expect("keys file");
    let mut settings = test_settings();
    settings.auth.keys_file = Some(keys_file);
    settings.auth.requests_per_minute = 0;
    // Its own probes with bad credentials would otherwise be answered 429 once past the budget.
    settings.auth.failed_auth_per_minute = 0;
    settings.run_limits.owner_max_inflight_runs = 0;
    settings.run_limits.owner_runs_per_minute = 0;
    let app = spawn_app_on(Backend::Sqlite, settings)
        .await
        .expect("sqlite app");
    let spec = app.url("/openapi.json");
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/schemathesis/schemathesis.toml"
    );
    let report = tempfile::TempDir::new().expect("temp dir");
    let output = tokio::task::spawn_blocking({
        let report = report.path().to_owned();
        move || {
            Command::new(tool)
                .args(["--config-file", config, "run", &spec, "--header"])
                .arg(format!("x-api-key: {KEY}"))
                .arg("--report-dir")
                .arg(report)
                .env("NO_COLOR", "1")
                .output()
        }
    })
    .await
    .expect("join")
    .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}\n{stderr}");
    assert!(
        output.status.success(),
        "schemathesis found responses that break the spec:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("generated"),
        "schemathesis ran no cases:\n{stdout}"
    );
}
