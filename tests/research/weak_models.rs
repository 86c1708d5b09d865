//! The model client against fakes that answer like a small local model: calls written as text,
//! a server whose tool-call parser fails (HTTP 500), a server without `json_schema`, a runaway
//! answer, a context window to ask for. Each fallback of the ladder has a fast test here; the
//! real model is `tests/real_model.rs`.

use crate::support;

use deep_research::llm::{
    ChatMessage, ChatModel, ChatRequest, Fallback, FinishReason, LlmError, ModelName,
    ProviderConfig, ProviderKind, Providers, ResponseSchema, RetryPolicy, ToolCalling, ToolChoice,
    ToolSpec, chat_with_retry, structured,
};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fake_llm::{FakeLlm, FakeReply, responder};
use tokio_util::sync::CancellationToken;

fn providers(base_url: &str, tool_calling: ToolCalling, local: bool) -> Providers {
    let config = ProviderConfig {
        tool_calling,
        local,
        ..ProviderConfig::new(ProviderKind::Openai, base_url, None)
    };
    Providers::new(BTreeMap::from([("local".to_owned(), config)]))
}

fn name() -> ModelName {
    ModelName::parse("local:small").unwrap()
}

fn model(p: &Providers) -> Arc<dyn ChatModel> {
    p.model(&name()).unwrap()
}

fn search_tool() -> ToolSpec {
    ToolSpec {
        name: "tavily_search".into(),
        description: "Search the web.".into(),
        parameters: json!({"type": "object", "properties": {"queries": {"type": "array",
                           "items": {"type": "string"}}}, "required": ["queries"]}),
    }
}

/// A LangChain message dict, as the model is sent it.
fn lc(message: Value) -> ChatMessage {
    ChatMessage::from_langchain(message).unwrap()
}

fn tool_request() -> ChatRequest {
    let mut req = ChatRequest::new(
        name(),
        vec![
            ChatMessage::system("You research."),
            ChatMessage::human("sodium-ion batteries"),
        ],
        256,
    );
    req.tools = vec![search_tool()];
    req
}

async fn call(
    model: &Arc<dyn ChatModel>,
    req: &ChatRequest,
) -> Result<deep_research::llm::ChatResponse, LlmError> {
    let policy = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(50),
    };
    chat_with_retry(model.as_ref(), req, None, policy, &CancellationToken::new()).await
}

const CALL_TEXT: &str =
    r#"{"name": "tavily_search", "arguments": {"queries": ["sodium-ion cost"]}}"#;

/// A llama.cpp-like server: native tools fail in its parser; with the tools in the prompt the
/// model writes its call as bare JSON.
fn parser_fails_on_native_tools() -> support::fake_llm::Responder {
    responder(|req: &Value| {
        if req["tools"].is_array() {
            FakeReply::llama_parse_error()
        } else {
            FakeReply::text(CALL_TEXT)
        }
    })
}

#[tokio::test]
async fn a_call_written_as_text_becomes_a_tool_call() {
    for text in [
        CALL_TEXT.to_owned(),
        format!("I will search.\n```json\n{CALL_TEXT}\n```"),
        format!("<tool_call>\n{CALL_TEXT}\n</tool_call>"),
    ] {
        let fake = FakeLlm::start(responder(move |_| FakeReply::text(&text))).await;
        let p = providers(&fake.base_url(), ToolCalling::Auto, false);
        let answer = call(&model(&p), &tool_request()).await.unwrap();
        assert_eq!(
            answer.message["tool_calls"][0]["args"],
            json!({"queries": ["sodium-ion cost"]})
        );
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
        assert_eq!(answer.fallbacks, vec![Fallback::TextToolCalls]);
        assert_eq!(fake.calls(), 1);
    }
}

#[tokio::test]
async fn a_parser_500_is_asked_again_with_prompted_tools_once_and_remembered() {
    let fake = FakeLlm::start(parser_fails_on_native_tools()).await;
    let p = providers(&fake.base_url(), ToolCalling::Auto, false);
    let answer = call(&model(&p), &tool_request()).await.unwrap();
    assert_eq!(answer.message["tool_calls"][0]["name"], "tavily_search");
    assert_eq!(
        answer.fallbacks,
        vec![
            Fallback::ToolFormatRetry,
            Fallback::PromptedTools,
            Fallback::TextToolCalls
        ]
    );
    let sent = fake.requests();
    assert_eq!(
        sent.len(),
        2,
        "one native attempt, one prompted: not three identical retries"
    );
    assert!(sent[1]["tools"].is_null());
    let system = sent[1]["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You research."), "{system}");
    assert!(
        system.contains("- tavily_search: Search the web."),
        "{system}"
    );
    assert!(system.contains("one tool per reply"), "{system}");

    // The model is remembered: the next call goes straight to prompted tools.
    let again = call(&model(&p), &tool_request()).await.unwrap();
    assert_eq!(
        again.fallbacks,
        vec![Fallback::PromptedTools, Fallback::TextToolCalls]
    );
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn native_mode_retries_once_with_one_call_per_turn_then_names_the_failure() {
    let fake = FakeLlm::start(parser_fails_on_native_tools()).await;
    let p = providers(&fake.base_url(), ToolCalling::Native, false);
    let error = call(&model(&p), &tool_request()).await.unwrap_err();
    assert_eq!(error.kind(), "ToolCallFormatError");
    assert!(error.to_string().contains("peg-native"), "{error}");
    let sent = fake.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["parallel_tool_calls"], true);
    assert_eq!(sent[1]["parallel_tool_calls"], false);
    assert!(
        sent.iter().all(|r| r["tools"].is_array()),
        "native means native"
    );
}

#[tokio::test]
async fn prompted_mode_never_sends_tools_and_replays_history_as_text() {
    let fake = FakeLlm::start(responder(|_| FakeReply::text(CALL_TEXT))).await;
    let p = providers(&fake.base_url(), ToolCalling::Prompted, false);
    let mut req = tool_request();
    req.messages.push(lc(json!({"type": "ai", "content": "", "tool_calls": [
        {"name": "tavily_search", "args": {"queries": ["first"]}, "id": "c1", "type": "tool_call"}]})));
    req.messages.push(lc(
        json!({"type": "tool", "name": "tavily_search", "tool_call_id": "c1", "content": "Result A"}),
    ));
    req.tool_choice = ToolChoice::Required;
    let answer = call(&model(&p), &req).await.unwrap();
    assert_eq!(
        answer.fallbacks,
        vec![Fallback::PromptedTools, Fallback::TextToolCalls]
    );
    let sent = &fake.requests()[0];
    assert!(sent["tools"].is_null() && sent["tool_choice"].is_null());
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(
        sent["messages"][2]["content"]
            .as_str()
            .unwrap()
            .contains("\"first\"")
    );
    assert!(
        sent["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("Result A")
    );
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("you must call a tool")
    );
}

#[derive(Debug, Deserialize, PartialEq)]
struct Brief {
    research_brief: String,
}

fn brief_schema() -> ResponseSchema {
    ResponseSchema {
        name: "ResearchQuestion".into(),
        description: "The brief.".into(),
        schema: json!({"type": "object", "properties": {"research_brief": {"type": "string"}},
                       "required": ["research_brief"]}),
    }
}

async fn ask_brief(p: &Providers) -> Result<(Brief, deep_research::llm::ChatResponse), LlmError> {
    let mut req = ChatRequest::new(name(), vec![ChatMessage::human("Write the brief.")], 256);
    req.response_schema = Some(brief_schema());
    let policy = RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(50),
    };
    structured::<Brief>(
        model(p).as_ref(),
        req,
        3,
        policy,
        &CancellationToken::new(),
        None,
    )
    .await
}

#[tokio::test]
async fn a_server_without_json_schema_gets_the_schema_in_the_prompt() {
    let fake = FakeLlm::start(responder(|req: &Value| {
        if req["response_format"].is_object() {
            FakeReply::Error {
                status: 400,
                body: json!({"error": {"message": "response_format json_schema is not supported"}}),
                retry_after: None,
            }
        } else {
            FakeReply::text("```json\n{\"research_brief\": \"Compare the cells.\"}\n```")
        }
    }))
    .await;
    let p = providers(&fake.base_url(), ToolCalling::Auto, false);
    let (brief, answer) = ask_brief(&p).await.unwrap();
    assert_eq!(brief.research_brief, "Compare the cells.");
    assert_eq!(answer.fallbacks, vec![Fallback::JsonInText]);
    let sent = fake.requests();
    assert_eq!(sent.len(), 2);
    let asked = sent[1]["messages"][0]["content"].as_str().unwrap();
    assert!(
        asked.starts_with("Write the brief.") && asked.contains("\"research_brief\""),
        "{asked}"
    );
    // Remembered: one request next time.
    ask_brief(&p).await.unwrap();
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn json_in_a_wrapper_is_repaired_without_asking_again() {
    let fake = FakeLlm::start(responder(|_| {
        FakeReply::text(r#"{"name": "ResearchQuestion", "arguments": {"research_brief": "B"}}"#)
    }))
    .await;
    let p = providers(&fake.base_url(), ToolCalling::Auto, false);
    let (brief, answer) = ask_brief(&p).await.unwrap();
    assert_eq!(brief.research_brief, "B");
    assert_eq!(answer.fallbacks, vec![Fallback::JsonRepaired]);
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_runaway_answer_is_stopped_early_and_what_came_before_is_kept() {
    let fake = FakeLlm::start(responder(|_| FakeReply::Runaway {
        text: "Sodium-ion cells are cheaper. ".into(),
        piece: "They are cheaper. ".into(),
    }))
    .await;
    // A local server: even a call nobody streams is streamed, so the loop can be cut.
    let p = providers(&fake.base_url(), ToolCalling::Auto, true);
    let mut req = tool_request();
    req.tools.clear();
    req.max_tokens = 100_000;
    let started = Instant::now();
    let answer = call(&model(&p), &req).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fake.requests()[0]["stream"], true);
    assert_eq!(
        answer.message["content"],
        "Sodium-ion cells are cheaper. They are cheaper. "
    );
    assert_eq!(answer.finish_reason, FinishReason::Length);
    assert_eq!(answer.fallbacks, vec![Fallback::RunawayStopped]);
}

#[tokio::test]
async fn output_caps_and_context_windows_come_from_the_provider() {
    let fake = FakeLlm::start_llama_cpp(responder(|_| FakeReply::text("ok")), 32_768).await;
    let local = ProviderConfig {
        local: true,
        max_output_tokens: Some(512),
        ..ProviderConfig::new(ProviderKind::Openai, &fake.base_url(), None)
    };
    let remote = ProviderConfig::new(ProviderKind::Openai, &fake.base_url(), None);
    let configured = ProviderConfig {
        context_window: Some(8_192),
        ..ProviderConfig::new(ProviderKind::Openai, &fake.base_url(), None)
    };
    let p = Providers::new(BTreeMap::from([
        ("local".to_owned(), local),
        ("remote".to_owned(), remote),
        ("configured".to_owned(), configured),
    ]));
    let window = |n: &str| {
        let p = p.clone();
        let n = ModelName::parse(n).unwrap();
        async move { p.context_window(&n).await }
    };
    assert_eq!(
        window("local:small").await,
        Some(32_768),
        "asked of llama.cpp's /props"
    );
    assert_eq!(
        window("remote:big").await,
        None,
        "only local servers are asked"
    );
    assert_eq!(window("configured:x").await, Some(8_192));

    let mut req = tool_request();
    req.tools.clear();
    req.max_tokens = 10_000;
    call(&model(&p), &req).await.unwrap();
    assert_eq!(fake.requests()[0]["max_tokens"], 512);
}

#[tokio::test]
async fn a_history_the_server_cannot_render_is_sent_again_as_text() {
    // llama.cpp parses the arguments of every earlier call, even in a request without tools.
    let fake = FakeLlm::start(responder(|req: &Value| {
        let calls_in_history = req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["tool_calls"].is_array());
        if calls_in_history {
            FakeReply::llama_parse_error()
        } else {
            FakeReply::text("The findings, cleaned up.")
        }
    }))
    .await;
    let p = providers(&fake.base_url(), ToolCalling::Auto, false);
    let mut req = tool_request();
    req.tools.clear();
    req.messages.push(lc(
        json!({"type": "ai", "content": "", "invalid_tool_calls": [
        {"name": "tavily_search", "args": "{\"queries\": [\"cut", "id": "c1",
         "error": "bad", "type": "invalid_tool_call"}]}),
    ));
    req.messages.push(lc(
        json!({"type": "tool", "name": "tavily_search", "tool_call_id": "c1",
        "content": "Error: bad arguments"}),
    ));
    let answer = call(&model(&p), &req).await.unwrap();
    assert_eq!(answer.message["content"], "The findings, cleaned up.");
    assert_eq!(answer.fallbacks, vec![Fallback::ToolFormatRetry]);
    let sent = fake.requests();
    assert_eq!(sent.len(), 2);
    let replayed = sent[1]["messages"][2]["content"].as_str().unwrap();
    assert!(replayed.contains("tavily_search"), "{replayed}");
}
