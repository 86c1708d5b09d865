//! Pages built on the official React packages, in headless Chromium against the service:
//! `@langchain/react` 1.1.0 (thread-centric protocol) for clarify → reply → report, a plan
//! review approved from the page and an interrupt answered with `respond`; the classic
//! `@langchain/langgraph-sdk/react` useStream (runs API) for an interrupt resumed with a
//! command. The pages and the driver live in tests/browser (`npm ci && node build.mjs` there,
//! done by scripts/test.sh, which also installs Debian's chromium). With node alone, the research
//! page's Markdown renderer against hostile reports (tests/browser/markdown_fuzz.mjs).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::fake_llm::FakeReply;
use support::research::{ResearchApp, Script, scripted, start_beside, start_with_settings};
use support::{Backend, graphs};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Whether the pages are built and a Chromium is there; without them the tests skip, unless
/// `DR_REQUIRE_BROWSER=1` (the test command sets it after installing them).
fn ready() -> bool {
    let chromium = std::env::var("DR_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let built = browser_dir().join("dist/react.js").exists()
        && browser_dir().join("node_modules/playwright-core").exists();
    let present = built && Path::new(&chromium).exists();
    assert!(
        present || std::env::var("DR_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "DR_REQUIRE_BROWSER=1 but the pages are not built or {chromium} is missing: run scripts/test.sh"
    );
    if !present {
        eprintln!("skipping the browser tests: run scripts/test.sh to build the pages");
    }
    present
}

/// Whether node runs; without it the renderer's fuzz test skips, unless `DR_REQUIRE_BROWSER=1`
/// (the test command sets it after installing node).
fn node_present() -> bool {
    let present = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        present || std::env::var("DR_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "DR_REQUIRE_BROWSER=1 but node is missing: run scripts/test.sh"
    );
    if !present {
        eprintln!("skipping the Markdown fuzz test: run scripts/test.sh to install node");
    }
    present
}

async fn app() -> ResearchApp {
    start_beside(
        Backend::Sqlite,
        scripted(Script::default()),
        "",
        graphs::registry(),
    )
    .await
    .expect("app")
}

async fn play(app: &ResearchApp, scenario: &str) {
    play_with(app, scenario, &[]).await;
}

async fn play_with(app: &ResearchApp, scenario: &str, extra: &[&str]) {
    let api = app.app.address.clone();
    let scenario = scenario.to_owned();
    let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("run.mjs")
            .args(["--api", &api, "--scenario", &scenario])
            .args(&extra)
            .current_dir(browser_dir())
            .output()
    })
    .await
    .expect("join")
    .expect("run node");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{out}\n{err}");
}

/// The service's own research app at `/`: ask a vague question, answer the clarification,
/// watch the progress, read the report, follow a citation, see the sources, download the
/// Markdown, reload, reopen it from the history; no console errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_researches_from_question_to_cited_report() {
    if ready() {
        play(&app().await, "app-research").await;
    }
}

/// A question asked under the report is answered there from the report's sources (the model
/// answers from what it is shown), and the exchange is still there after a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_answers_a_question_on_its_report() {
    if !ready() {
        return;
    }
    let script = scripted(Script::default());
    let responder = move |req: &serde_json::Value| match support::workload::role(req) {
        support::workload::Role::FollowUp => support::workload::follow_up_answer(req),
        _ => script(req),
    };
    let app = start_beside(Backend::Sqlite, responder, "", graphs::registry())
        .await
        .expect("app");
    play(&app, "app-follow-up").await;
}

/// The same on a server that wants a key: the page asks for it first and keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_works_on_a_keyed_server() {
    if !ready() {
        return;
    }
    let settings = deep_research::config::Settings {
        api_key: Some("k-app-test".into()),
        auth: deep_research::config::AuthSettings {
            disabled: false,
            ..support::test_settings().auth
        },
        ..support::test_settings()
    };
    let app = start_with_settings(
        Backend::Sqlite,
        scripted(Script::default()),
        "",
        graphs::registry(),
        settings,
    )
    .await
    .expect("app");
    play_with(&app, "app-research-keyed", &["--key", "k-app-test"]).await;
}

/// A reload while the report is written rejoins the run and draws its progress again; the
/// research is then deleted from the history; on a phone-sized screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_rejoins_a_run_after_a_reload() {
    if !ready() {
        return;
    }
    let script = scripted(Script::default());
    // The report is held back long enough to reload the page while it is being written.
    let responder = move |req: &serde_json::Value| match support::workload::role(req) {
        support::workload::Role::Report => {
            FakeReply::Delay(std::time::Duration::from_secs(4), Box::new(script(req)))
        }
        _ => script(req),
    };
    let app = start_beside(Backend::Sqlite, responder, "", graphs::registry())
        .await
        .expect("app");
    play(&app, "app-rejoin").await;
}

/// Plan review from the app: switched on in its settings, one topic removed, approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_reviews_the_research_plan() {
    if ready() {
        play(&app().await, "app-plan-review").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_page_clarifies_then_researches_to_a_report() {
    if ready() {
        play(&app().await, "react-research").await;
    }
}

/// The same over `useStream`'s WebSocket transport: commands and events on one socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_page_researches_over_a_websocket() {
    if ready() {
        play(&app().await, "react-research-ws").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_page_approves_the_research_plan() {
    if ready() {
        play(&app().await, "react-plan-review").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_page_answers_an_interrupt() {
    if ready() {
        play(&app().await, "react-hitl").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_use_stream_page_resumes_an_interrupt() {
    if ready() {
        play(&app().await, "classic-hitl").await;
    }
}

/// The page's Markdown renderer (src/api/web/markdown.js) on what a model might write: the
/// inputs that once froze or crashed the tab (a table row without its separator line, 3,000
/// `>`, 20,000 `[`) and many generated ones, each rendered in time, without throwing, to HTML
/// with only the renderer's own tags and safe links. Node's standard library only.
#[test]
fn the_pages_markdown_renderer_survives_hostile_input() {
    if !node_present() {
        return;
    }
    let output = Command::new("node")
        .arg("markdown_fuzz.mjs")
        .current_dir(browser_dir())
        .output()
        .expect("run node");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{out}\n{err}");
    println!("{out}");
}
