//! The research graph against the provider fakes: the scripted "model" of `super::workload`
//! that plays every ODR role, the fake Tavily, and an app whose providers point at both over
//! real HTTP.

// Not every test binary uses the workload through this module.
#[allow(unused_imports)]
pub use super::workload::*;

use super::fake_llm::{FakeLlm, FakeReply};
use super::fake_tavily::{self, FakeTavily};
use super::{Backend, TestApp, spawn_with, test_settings};
use deep_research::config::file::FileConfig;
use deep_research::graph::Registry;
use deep_research::research;
use serde_json::Value;
use std::sync::Arc;

/// The model all roles use in tests.
pub const MODEL: &str = "openai:fake-model";

/// A running research service and its fakes.
pub struct ResearchApp {
    pub app: TestApp,
    pub llm: FakeLlm,
    pub tavily: FakeTavily,
}

/// Config text pointing every provider at the fakes.
pub fn config_toml(llm: &FakeLlm, tavily: &FakeTavily) -> String {
    format!(
        r#"
[research]
research_model = "{MODEL}"
summarization_model = "{MODEL}"
compression_model = "{MODEL}"
final_report_model = "{MODEL}"

[providers.openai]
base_url = "{llm}"
api_key = "sk-test"

[search.tavily]
base_url = "{tavily}"
api_key = "{key}"

[prices."{MODEL}"]
input = 1.0
output = 2.0
"#,
        llm = llm.base_url(),
        tavily = tavily.base_url(),
        key = fake_tavily::API_KEY,
    )
}

/// Starts the fakes (with `responder`) and the service with the research graph.
pub async fn start<F>(responder: F, extra_config: &str) -> ResearchApp
where
    F: Fn(&Value) -> FakeReply + Send + Sync + 'static,
{
    start_on(Backend::Sqlite, responder, extra_config)
        .await
        .expect("sqlite")
}

pub async fn start_on<F>(backend: Backend, responder: F, extra_config: &str) -> Option<ResearchApp>
where
    F: Fn(&Value) -> FakeReply + Send + Sync + 'static,
{
    start_beside(backend, responder, extra_config, Registry::new()).await
}

/// `start_on`, with the research graph registered beside the graphs of `registry`.
pub async fn start_beside<F>(
    backend: Backend,
    responder: F,
    extra_config: &str,
    registry: Registry,
) -> Option<ResearchApp>
where
    F: Fn(&Value) -> FakeReply + Send + Sync + 'static,
{
    start_with_settings(backend, responder, extra_config, registry, test_settings()).await
}

/// `start_beside` with the server's own settings (a key, limits).
pub async fn start_with_settings<F>(
    backend: Backend,
    responder: F,
    extra_config: &str,
    mut registry: Registry,
    mut settings: deep_research::config::Settings,
) -> Option<ResearchApp>
where
    F: Fn(&Value) -> FakeReply + Send + Sync + 'static,
{
    let llm = FakeLlm::start(Arc::new(responder)).await;
    let tavily = FakeTavily::start().await;
    let text = config_toml(&llm, &tavily);
    let cfg = FileConfig::load(&[(&text, "test.toml"), (extra_config, "extra.toml")], &[])
        .expect("test config");
    let mut deps = cfg.research_deps(&|_: &str| None).expect("deps");
    // Fast retries in tests: the policy is what matters, not the wall-clock wait.
    deps.retry.base_delay = std::time::Duration::from_millis(20);
    research::register(&mut registry, Arc::new(deps));
    settings.allow_run_keys = cfg.operator.allow_api_keys_from_config;
    let app = spawn_with(backend, settings, registry).await?;
    Some(ResearchApp { app, llm, tavily })
}
