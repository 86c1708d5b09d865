//! The research graph against the provider fakes: a scripted "model" that plays every ODR role
//! (recognised from the request, as a real model would be prompted), the fake Tavily, and an app
//! whose providers point at both over real HTTP.

use super::fake_llm::{FakeLlm, FakeReply};
use super::fake_tavily::{self, FakeTavily};
use super::{Backend, TestApp, spawn_with, test_settings};
use deep_research::config::file::FileConfig;
use deep_research::graph::Registry;
use deep_research::research::{self, ResearchDeps};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The model all roles use in tests.
pub const MODEL: &str = "openai:fake-model";

/// Which ODR role a request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Clarify,
    Brief,
    Summary,
    Supervisor,
    Researcher,
    Compress,
    Report,
    Other,
}

pub fn role(req: &Value) -> Role {
    match req["response_format"]["json_schema"]["name"].as_str() {
        Some("ClarifyWithUser") => return Role::Clarify,
        Some("ResearchQuestion") => return Role::Brief,
        Some("Summary") => return Role::Summary,
        _ => {}
    }
    let tools: Vec<&str> = req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    if tools.contains(&"ConductResearch") {
        return Role::Supervisor;
    }
    if tools.contains(&"think_tool") {
        return Role::Researcher;
    }
    let text = all_text(req);
    if text.contains("<Findings>") {
        Role::Report
    } else if text.contains("cleaning up the findings") {
        Role::Compress
    } else {
        Role::Other
    }
}

pub fn all_text(req: &Value) -> String {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Assistant turns already in the request: where a looping role is in its script.
pub fn turns(req: &Value) -> usize {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .count()
}

/// URLs shown to the model in the request (`URL: …` lines of search results and sources).
pub fn urls_in(req: &Value) -> Vec<String> {
    let mut urls = Vec::new();
    for line in all_text(req).lines() {
        for word in line.split_whitespace() {
            let w =
                word.trim_matches(|c: char| matches!(c, '(' | ')' | '[' | ']' | ',' | '"' | '\\'));
            if w.starts_with("https://") && !urls.contains(&w.to_owned()) {
                urls.push(w.to_owned());
            }
        }
    }
    urls
}

/// The first human message of a request (a researcher's topic).
pub fn topic(req: &Value) -> String {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("topic")
        .chars()
        .take(40)
        .collect()
}

/// A URL no search returns: the report cites it and the check must remove it.
pub const INVENTED_URL: &str = "https://invented.example/made-up-source";

/// Knobs of the scripted model.
#[derive(Clone, Debug)]
pub struct Script {
    /// ConductResearch calls the supervisor makes in its delegation turn.
    pub topics: usize,
    /// Answer every supervisor turn in prose, with no tool call (a weak model).
    pub supervisor_prose: bool,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            topics: 3,
            supervisor_prose: false,
        }
    }
}

/// The default ODR workload of the benchmark issue: clarification not needed; supervisor:
/// think → N × ConductResearch → think → ResearchComplete; researcher: search (2 queries) →
/// think → search (1 query) → ResearchComplete.
pub fn scripted(script: Script) -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static {
    move |req: &Value| match role(req) {
        Role::Clarify => clarify(req),
        Role::Brief => FakeReply::Json(
            json!({"research_brief": "I want to know everything about the topic, with sources."}),
        ),
        Role::Summary => {
            FakeReply::Json(json!({"summary": "The page explains the topic in detail.",
                                                "key_excerpts": "\"a key quote\""}))
        }
        Role::Supervisor if script.supervisor_prose => {
            FakeReply::Text("I think the answer is obvious.".into())
        }
        Role::Supervisor => supervisor(req, script.topics),
        Role::Researcher => researcher(req),
        Role::Compress => compress(req),
        Role::Report => report(req),
        Role::Other => FakeReply::Text("ok".into()),
    }
}

fn clarify(req: &Value) -> FakeReply {
    let text = all_text(req);
    let asked_before = text.contains("Which aspect do you mean?");
    if text.contains("vague") && !asked_before {
        FakeReply::Json(
            json!({"need_clarification": true, "question": "Which aspect do you mean?", "verification": ""}),
        )
    } else {
        FakeReply::Json(json!({"need_clarification": false, "question": "",
                               "verification": "I have what I need and am starting the research now."}))
    }
}

fn supervisor(req: &Value, topics: usize) -> FakeReply {
    match turns(req) {
        0 => FakeReply::ToolCalls(vec![(
            "think_tool".into(),
            json!({"reflection": "Plan: split in parts."}),
        )]),
        1 => FakeReply::ToolCalls(
            (0..topics)
                .map(|i| {
                    (
                        "ConductResearch".into(),
                        json!({"research_topic": format!("subtopic number {i} in full detail")}),
                    )
                })
                .collect(),
        ),
        2 => FakeReply::ToolCalls(vec![(
            "think_tool".into(),
            json!({"reflection": "Enough found."}),
        )]),
        _ => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
    }
}

fn researcher(req: &Value) -> FakeReply {
    let t = topic(req);
    match turns(req) {
        0 => FakeReply::ToolCalls(vec![(
            "tavily_search".into(),
            json!({"queries": [format!("{t} overview"), format!("{t} details")]}),
        )]),
        1 => FakeReply::ToolCalls(vec![(
            "think_tool".into(),
            json!({"reflection": "Need one more search."}),
        )]),
        2 => FakeReply::ToolCalls(vec![(
            "tavily_search".into(),
            json!({"queries": [format!("{t} latest")]}),
        )]),
        _ => FakeReply::ToolCalls(vec![("ResearchComplete".into(), json!({}))]),
    }
}

fn compress(req: &Value) -> FakeReply {
    let urls = urls_in(req);
    let sources: Vec<String> = urls
        .iter()
        .enumerate()
        .map(|(i, u)| format!("[{}] Source {}: {u}", i + 1, i + 1))
        .collect();
    FakeReply::Text(format!(
        "**Findings**\nThe topic has several facts [1].\n\n### Sources\n{}",
        sources.join("\n")
    ))
}

fn report(req: &Value) -> FakeReply {
    let urls = urls_in(req);
    let cited: Vec<&String> = urls
        .iter()
        .filter(|u| u.contains("example.com"))
        .take(3)
        .collect();
    let mut lines = vec![
        "# Report\n\n## Findings\n\nA verified fact [1]. An invented claim [4].\n\n### Sources"
            .to_owned(),
    ];
    for (i, u) in cited.iter().enumerate() {
        lines.push(format!("[{}] Source: {u}", i + 1));
    }
    lines.push(format!("[4] Invented: {INVENTED_URL}"));
    FakeReply::Text(lines.join("\n"))
}

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
    let llm = FakeLlm::start(Arc::new(responder)).await;
    let tavily = FakeTavily::start().await;
    let text = config_toml(&llm, &tavily);
    let cfg = FileConfig::load(&[(&text, "test.toml"), (extra_config, "extra.toml")], &[])
        .expect("test config");
    let mut deps = ResearchDeps::from_config(&cfg, &|_: &str| None).expect("deps");
    // Fast retries in tests: the policy is what matters, not the wall-clock wait.
    deps.retry.base_delay = std::time::Duration::from_millis(20);
    let mut registry = Registry::new();
    research::register(&mut registry, Arc::new(deps));
    let app = spawn_with(backend, test_settings(), registry).await?;
    Some(ResearchApp { app, llm, tavily })
}

/// Wraps a responder to change the reply of the `n`-th request (1-based) of a role.
pub fn on_nth<F>(
    inner: F,
    target: Role,
    n: usize,
    reply: FakeReply,
) -> impl Fn(&Value) -> FakeReply + Send + Sync + 'static
where
    F: Fn(&Value) -> FakeReply + Send + Sync + 'static,
{
    let seen = Mutex::new(0usize);
    move |req: &Value| {
        if role(req) == target {
            let mut count = seen.lock().unwrap();
            *count += 1;
            if *count == n {
                return reply.clone();
            }
        }
        inner(req)
    }
}
