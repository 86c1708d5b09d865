//! The chat-model layer against scripted fake servers over real HTTP: replies, tool calls,
//! structured output, streaming, error classes, retries, timeouts, cancellation, the
//! per-provider cap, and the Anthropic client.

use crate::support::fake_llm;

use deep_research::llm::{
    ChatModel, ChatRequest, ChatResponse, Delta, FinishReason, LlmError, ModelName, NativeTool,
    ProviderConfig, ProviderKind, Providers, ResponseSchema, RetryPolicy, ToolChoice, ToolSpec,
    Usage, chat_with_retry, structured,
};
use fake_llm::{FakeAnthropic, FakeLlm, FakeReply, always, responder, script};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

// ---- helpers ----

fn providers_for(
    kind: ProviderKind,
    base_url: &str,
    key: Option<&str>,
    max_in_flight: usize,
) -> Providers {
    let config = ProviderConfig {
        max_in_flight,
        ..ProviderConfig::new(kind, base_url, key.map(|k| k.to_owned().into()))
    };
    Providers::new(BTreeMap::from([("fake".to_owned(), config)]))
}

fn openai(fake: &FakeLlm) -> Arc<dyn ChatModel> {
    model_of(&providers_for(
        ProviderKind::Openai,
        &fake.base_url(),
        Some("sk-test"),
        8,
    ))
}

fn anthropic(fake: &FakeLlm) -> Arc<dyn ChatModel> {
    model_of(&providers_for(
        ProviderKind::Anthropic,
        &fake.base_url(),
        Some("sk-ant-test"),
        8,
    ))
}

fn model_of(providers: &Providers) -> Arc<dyn ChatModel> {
    providers.model(&name()).unwrap()
}

fn name() -> ModelName {
    ModelName::parse("fake:test-model").unwrap()
}

fn request(messages: Vec<Value>) -> ChatRequest {
    let messages = messages
        .into_iter()
        .map(|m| deep_research::llm::ChatMessage::from_langchain(m).unwrap())
        .collect();
    ChatRequest::new(name(), messages, 256)
}

fn ask(text: &str) -> ChatRequest {
    request(vec![
        json!({"type": "system", "content": "You are terse."}),
        json!({"type": "human", "content": text}),
    ])
}

fn fast(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_secs(3),
    }
}

async fn call(
    model: &Arc<dyn ChatModel>,
    req: &ChatRequest,
    attempts: u32,
) -> Result<ChatResponse, LlmError> {
    chat_with_retry(
        model.as_ref(),
        req,
        None,
        fast(attempts),
        &CancellationToken::new(),
    )
    .await
}

/// Runs a streaming call and returns the answer with every delta received.
async fn stream(model: &Arc<dyn ChatModel>, mut req: ChatRequest) -> (ChatResponse, Vec<Delta>) {
    req.stream = true;
    let deltas = Mutex::new(Vec::new());
    let on_delta = |d: Delta| deltas.lock().unwrap().push(d);
    let answer = model.chat(&req, Some(&on_delta)).await.unwrap();
    (answer, deltas.into_inner().unwrap())
}

fn search_tools() -> Vec<ToolSpec> {
    let tool = |name: &str, param: &str| ToolSpec {
        name: name.to_owned(),
        description: format!("{name} things"),
        parameters: json!({"type": "object", "properties": {param: {"type": "string"}}, "required": [param]}),
    };
    vec![tool("search", "q"), tool("fetch", "url")]
}

#[derive(Debug, Deserialize, PartialEq)]
struct Plan {
    title: String,
    sections: Vec<String>,
}

fn plan_schema() -> ResponseSchema {
    ResponseSchema {
        name: "Plan".into(),
        description: "A report plan".into(),
        schema: json!({"type": "object", "properties": {
            "title": {"type": "string"},
            "sections": {"type": "array", "items": {"type": "string"}}},
            "required": ["title", "sections"]}),
    }
}

fn plan_request() -> ChatRequest {
    let mut req = ask("Plan a report on Rust.");
    req.response_schema = Some(plan_schema());
    req
}

fn good_plan() -> Value {
    json!({"title": "Rust", "sections": ["Intro", "Safety"]})
}

fn joined(deltas: &[Delta]) -> String {
    deltas.iter().map(|d| d.content.as_str()).collect()
}

/// Reassembles streamed tool-call chunks by index into `(id, name, args text)`.
fn reassemble(deltas: &[Delta]) -> BTreeMap<u64, (String, String, String)> {
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for chunk in deltas.iter().flat_map(|d| &d.tool_call_chunks) {
        assert_eq!(chunk["type"], "tool_call_chunk");
        let entry = calls.entry(chunk["index"].as_u64().unwrap()).or_default();
        if let Some(id) = chunk["id"].as_str() {
            entry.0 = id.to_owned();
        }
        if let Some(name) = chunk["name"].as_str() {
            entry.1 = name.to_owned();
        }
        entry.2.push_str(chunk["args"].as_str().unwrap_or_default());
    }
    calls
}

// ---- OpenAI: replies ----

#[tokio::test]
async fn text_reply_becomes_an_ai_message() {
    let fake = FakeLlm::start(always(FakeReply::text("Hello there."))).await;
    let answer = call(&openai(&fake), &ask("Hi"), 1).await.unwrap();

    let m = &answer.message;
    assert_eq!(m["type"], "ai");
    assert_eq!(m["content"], "Hello there.");
    assert_eq!(m["id"], "chatcmpl-1");
    assert_eq!(m["tool_calls"], json!([]));
    assert_eq!(m["invalid_tool_calls"], json!([]));
    assert_eq!(
        m["usage_metadata"],
        json!({"input_tokens": 20, "output_tokens": 7, "total_tokens": 27})
    );
    assert_eq!(m["response_metadata"]["finish_reason"], "stop");
    assert_eq!(m["response_metadata"]["model_name"], "test-model");
    assert_eq!(
        answer.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 7
        }
    );
    assert_eq!(answer.finish_reason, FinishReason::Stop);

    let sent = &fake.requests()[0];
    assert_eq!(sent["model"], "test-model");
    assert_eq!(sent["max_tokens"], 256);
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}])
    );
    assert!(sent.get("tools").is_none() && sent.get("stream").is_none());
    assert!(sent.get("parallel_tool_calls").is_none(), "only with tools");
}

#[tokio::test]
async fn langchain_history_is_converted_for_the_wire() {
    let fake = FakeLlm::start(always(FakeReply::text("ok"))).await;
    let req = request(vec![
        json!({"type": "system", "content": "sys"}),
        json!({"type": "human", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}),
        json!({"type": "ai", "content": "", "tool_calls": [{"name": "search", "args": {"q": "rust"}, "id": "call_a", "type": "tool_call"}]}),
        json!({"type": "tool", "content": "results", "tool_call_id": "call_a", "name": "search"}),
    ]);
    call(&openai(&fake), &req, 1).await.unwrap();
    let messages = &fake.requests()[0]["messages"];
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "part one, part two"})
    );
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(
        messages[2]["tool_calls"],
        json!([{"id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"rust\"}"}}])
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "results"})
    );
}

#[tokio::test]
async fn parallel_tool_calls_are_parsed() {
    let reply = FakeReply::tool_calls(&[
        ("search", json!({"q": "rust"})),
        ("fetch", json!({"url": "https://x.dev"})),
    ]);
    let fake = FakeLlm::start(always(reply)).await;
    let mut req = ask("Research Rust");
    req.tools = search_tools();
    let answer = call(&openai(&fake), &req, 1).await.unwrap();

    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        answer.message["tool_calls"],
        json!([
            {"name": "search", "args": {"q": "rust"}, "id": "call_1_0", "type": "tool_call"},
            {"name": "fetch", "args": {"url": "https://x.dev"}, "id": "call_1_1", "type": "tool_call"},
        ])
    );
    let sent = &fake.requests()[0];
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "search");
    assert_eq!(
        sent["tools"][0]["function"]["parameters"]["required"],
        json!(["q"])
    );
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["parallel_tool_calls"], true);
}

#[tokio::test]
async fn tool_choice_is_sent_in_openai_form() {
    let fake = FakeLlm::start(always(FakeReply::tool_calls(&[(
        "fetch",
        json!({"url": "u"}),
    )])))
    .await;
    let model = openai(&fake);
    for (choice, expected) in [
        (
            ToolChoice::Named("fetch".into()),
            json!({"type": "function", "function": {"name": "fetch"}}),
        ),
        (ToolChoice::Required, json!("required")),
        (ToolChoice::None, json!("none")),
    ] {
        let mut req = ask("go");
        req.tools = search_tools();
        req.tool_choice = choice;
        req.parallel_tool_calls = false;
        call(&model, &req, 1).await.unwrap();
        let sent = fake.requests().pop().unwrap();
        assert_eq!(sent["tool_choice"], expected);
        assert_eq!(sent["parallel_tool_calls"], false);
    }
}

#[tokio::test]
async fn malformed_tool_arguments_land_in_invalid_tool_calls() {
    let raw = r#"{"q": "unterminated"#;
    let fake = FakeLlm::start(always(FakeReply::RawToolArgs {
        name: "search".into(),
        args_text: raw.into(),
    }))
    .await;
    let mut req = ask("go");
    req.tools = search_tools();
    let answer = call(&openai(&fake), &req, 1).await.unwrap();

    assert_eq!(answer.message["tool_calls"], json!([]));
    let invalid = &answer.message["invalid_tool_calls"][0];
    assert_eq!(invalid["name"], "search");
    assert_eq!(invalid["args"], raw);
    assert_eq!(invalid["id"], "call_1_0");
    assert_eq!(invalid["type"], "invalid_tool_call");
    assert!(
        invalid["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );

    // The same through a stream.
    let (answer, _) = stream(&openai(&fake), req).await;
    assert_eq!(answer.message["invalid_tool_calls"][0]["args"], raw);
}

#[tokio::test]
async fn native_web_search_goes_through_the_responses_api() {
    let fake = FakeLlm::start_responses(always(FakeReply::text("found it"))).await;
    let mut req = ask("news?");
    req.native_tools = vec![NativeTool::WebSearch { max_uses: 3 }];
    let answer = call(&openai(&fake), &req, 1).await.unwrap();
    assert_eq!(answer.message["content"], "found it");
    let sent = &fake.requests()[0];
    assert!(sent.get("input").is_some(), "sent to /responses: {sent}");
    assert_eq!(sent["tools"], json!([{"type": "web_search"}]));
    // Not through Azure: said before any call.
    let azure = azure(&fake, fake_llm::AZURE_KEY, Some("2024-10-21"));
    let error = call(&azure, &req, 1).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::Config(m) if m.contains("Azure")),
        "{error:?}"
    );
}

// ---- providers ----

#[tokio::test]
async fn keys_go_in_the_bearer_header_only_when_there_is_one() {
    let fake = FakeLlm::start(always(FakeReply::text("ok"))).await;
    let with_key = providers_for(
        ProviderKind::Openai,
        &fake.base_url(),
        Some("sk-provider"),
        4,
    );
    let without = providers_for(ProviderKind::Openai, &fake.base_url(), None, 4);

    call(&model_of(&with_key), &ask("a"), 1).await.unwrap();
    let mut own_key = ask("b");
    own_key.api_key = Some("sk-request".into());
    call(&model_of(&with_key), &own_key, 1).await.unwrap();
    call(&model_of(&without), &ask("c"), 1).await.unwrap();

    let auth: Vec<Option<String>> = fake
        .headers()
        .iter()
        .map(|h| {
            h.get("authorization")
                .map(|v| v.to_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(
        auth,
        [
            Some("Bearer sk-provider".into()),
            Some("Bearer sk-request".into()),
            None
        ]
    );
}

#[tokio::test]
async fn unknown_provider_names_the_configured_ones() {
    let providers = providers_for(ProviderKind::Openai, "http://127.0.0.1:9/v1", None, 1);
    let Err(error) = providers.model(&ModelName::parse("nope:x").unwrap()) else {
        panic!("expected an error");
    };
    assert!(
        matches!(&error, LlmError::Config(m) if m.contains("'nope'") && m.contains("fake")),
        "{error:?}"
    );
    assert_eq!(providers.names().collect::<Vec<_>>(), ["fake"]);
}

#[tokio::test]
async fn the_provider_cap_limits_calls_in_flight() {
    let fake = FakeLlm::start(always(FakeReply::delayed(
        Duration::from_millis(100),
        FakeReply::text("ok"),
    )))
    .await;
    let providers = providers_for(ProviderKind::Openai, &fake.base_url(), None, 3);
    let model = model_of(&providers);
    let req = ask("hi");

    let calls = futures::future::join_all((0..20).map(|_| call(&model, &req, 1)));
    let probe = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        providers.in_flight("fake")
    };
    let (results, busy) = tokio::join!(calls, probe);

    assert!(results.iter().all(Result::is_ok));
    assert_eq!(fake.calls(), 20);
    assert_eq!(fake.max_in_flight(), 3);
    assert_eq!(busy, 3);
    assert_eq!(providers.in_flight("fake"), 0);
}

// ---- structured output ----

#[tokio::test]
async fn structured_output_parses_into_the_type() {
    let fake = FakeLlm::start(always(FakeReply::Json(good_plan()))).await;
    let (plan, answer) = structured::<Plan>(
        openai(&fake).as_ref(),
        plan_request(),
        3,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        plan,
        Plan {
            title: "Rust".into(),
            sections: vec!["Intro".into(), "Safety".into()]
        }
    );
    assert_eq!(answer.message["content"], good_plan().to_string());
    let format = &fake.requests()[0]["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "Plan");
    assert_eq!(format["json_schema"]["strict"], false);
    assert_eq!(format["json_schema"]["schema"], plan_schema().schema);
}

#[tokio::test]
async fn structured_output_tolerates_fences_and_prose() {
    let text = format!(
        "Here is the plan:\n```json\n{}\n```\nLet me know!",
        good_plan()
    );
    let fake = FakeLlm::start(always(FakeReply::Text(text))).await;
    let (plan, _) = structured::<Plan>(
        openai(&fake).as_ref(),
        plan_request(),
        1,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(plan.title, "Rust");
}

#[tokio::test]
async fn structured_output_recovers_after_a_mismatch() {
    let fake = FakeLlm::start(script(vec![
        FakeReply::Json(json!({"title": "Rust"})),
        FakeReply::Json(good_plan()),
    ]))
    .await;
    let (plan, _) = structured::<Plan>(
        openai(&fake).as_ref(),
        plan_request(),
        3,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(plan.sections.len(), 2);
    assert_eq!(fake.calls(), 2);

    let second = &fake.requests()[1]["messages"];
    let n = second.as_array().unwrap().len();
    assert_eq!(
        second[n - 2],
        json!({"role": "assistant", "content": "{\"title\":\"Rust\"}"})
    );
    let feedback = second[n - 1]["content"].as_str().unwrap();
    assert_eq!(second[n - 1]["role"], "user");
    assert!(
        feedback.starts_with("Your previous answer did not match the required JSON schema: "),
        "{feedback}"
    );
    assert!(feedback.contains("missing field `sections`"), "{feedback}");
    assert!(feedback.ends_with("Answer again with only a JSON object that matches the schema."));
}

#[tokio::test]
async fn structured_output_gives_up_after_the_last_attempt() {
    let fake = FakeLlm::start(always(FakeReply::Json(json!({"title": 5})))).await;
    let error = structured::<Plan>(
        openai(&fake).as_ref(),
        plan_request(),
        3,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, LlmError::InvalidResponse { message, .. } if message.contains("invalid type")),
        "{error:?}"
    );
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn structured_output_stops_at_once_on_errors_retries_cannot_fix() {
    let fake = FakeLlm::start(always(FakeReply::unauthorized())).await;
    let error = structured::<Plan>(
        openai(&fake).as_ref(),
        plan_request(),
        3,
        fast(3),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(error, LlmError::Auth { .. }), "{error:?}");
    assert_eq!(fake.calls(), 1);
    let mut no_schema = plan_request();
    no_schema.response_schema = None;
    let error = structured::<Plan>(
        openai(&fake).as_ref(),
        no_schema,
        3,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(error, LlmError::Config(_)));
}

// ---- streaming ----

#[tokio::test]
async fn streamed_text_arrives_in_order_and_matches_the_answer() {
    let text = "The quick brown fox jumps over the lazy dog.";
    let fake = FakeLlm::start(always(FakeReply::text(text))).await;
    // Paced like a real model, so every token is its own delta.
    fake.set_chunk_interval(Duration::from_millis(15));
    let (answer, deltas) = stream(&openai(&fake), ask("fox?")).await;

    assert!(deltas.len() >= 10, "{} deltas", deltas.len());
    assert_eq!(joined(&deltas), text);
    assert_eq!(answer.message["content"], text);
    assert!(deltas.iter().all(|d| d.id == "chatcmpl-1"));
    assert_eq!(answer.message["id"], "chatcmpl-1");
    assert_eq!(
        answer.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 7
        }
    );
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    let sent = &fake.requests()[0];
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn tokens_that_arrive_together_are_handed_on_together() {
    // Numbered, so the text does not repeat itself (a repeating tail is a runaway).
    let text: String = (0..40)
        .map(|i| format!("Fox {i} jumps over the lazy dog. "))
        .collect();
    let fake = FakeLlm::start(always(FakeReply::text(&text))).await;
    let (answer, deltas) = stream(&openai(&fake), ask("fox?")).await;

    // The fake sends all 450 chunks in one burst: they are joined into far fewer deltas,
    // and nothing is lost or reordered.
    assert!(deltas.len() < 50, "{} deltas for one burst", deltas.len());
    assert_eq!(joined(&deltas), text);
    assert_eq!(answer.message["content"], text.as_str());

    // Tool-call fragments joined across deltas still reassemble to the same calls.
    let reply = FakeReply::ToolCalls(vec![
        ("search".into(), json!({"q": "rust async"})),
        ("fetch".into(), json!({"url": "https://example.com/a"})),
    ]);
    let fake = FakeLlm::start(always(reply)).await;
    let mut req = ask("go");
    req.tools = search_tools();
    let (_, deltas) = stream(&openai(&fake), req).await;
    let calls = reassemble(&deltas);
    assert_eq!(calls[&0].1, "search");
    assert_eq!(
        calls[&1].2,
        json!({"url": "https://example.com/a"}).to_string()
    );
}

#[tokio::test]
async fn streamed_tool_calls_reassemble() {
    let reply = FakeReply::TextAndToolCalls(
        "Searching.".into(),
        vec![
            ("search".into(), json!({"q": "rust async"})),
            ("fetch".into(), json!({"url": "https://example.com/a"})),
        ],
    );
    let fake = FakeLlm::start(always(reply)).await;
    let mut req = ask("go");
    req.tools = search_tools();
    let (answer, deltas) = stream(&openai(&fake), req).await;

    let calls = reassemble(&deltas);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[&0].1, "search");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[&0].2).unwrap(),
        json!({"q": "rust async"})
    );
    assert_eq!(calls[&1].0, "call_1_1");
    assert_eq!(
        answer.message["tool_calls"],
        json!([
            {"name": "search", "args": {"q": "rust async"}, "id": "call_1_0", "type": "tool_call"},
            {"name": "fetch", "args": {"url": "https://example.com/a"}, "id": "call_1_1", "type": "tool_call"},
        ])
    );
    assert_eq!(answer.message["content"], "Searching.");
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.usage.output_tokens, 7);
}

#[tokio::test]
async fn a_stream_that_ignores_max_tokens_is_cut_off() {
    let fake = FakeLlm::start(always(FakeReply::Endless("la ".into()))).await;
    let mut req = ask("sing");
    req.max_tokens = 10;
    let started = Instant::now();
    let (answer, deltas) = stream(&openai(&fake), req).await;

    assert_eq!(answer.finish_reason, FinishReason::Length);
    let content = answer.message["content"].as_str().unwrap();
    assert!(
        content.len() > 80 && content.len() <= 83,
        "{} chars",
        content.len()
    );
    assert_eq!(joined(&deltas), content);
    assert!(started.elapsed() < Duration::from_secs(2));
}

// ---- errors and retries ----

#[tokio::test]
async fn rate_limits_wait_for_retry_after() {
    let fake = FakeLlm::start(script(vec![
        FakeReply::rate_limited("1"),
        FakeReply::text("ok"),
    ]))
    .await;
    let started = Instant::now();
    let answer = call(&openai(&fake), &ask("hi"), 3).await.unwrap();
    let elapsed = started.elapsed();

    assert_eq!(answer.message["content"], "ok");
    assert_eq!(fake.calls(), 2);
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn a_rate_limit_is_never_a_context_overflow() {
    let fake = FakeLlm::start(always(FakeReply::rate_limited("1"))).await;
    let error = call(&openai(&fake), &ask("hi"), 1).await.unwrap_err();
    let LlmError::RateLimited {
        provider,
        retry_after,
        message,
    } = &error
    else {
        panic!("expected RateLimited, got {error:?}");
    };
    assert_eq!(provider, "fake");
    assert_eq!(*retry_after, Some(Duration::from_secs(1)));
    assert!(
        message.contains("429") && message.contains("Rate limit reached"),
        "{message}"
    );
    assert!(error.is_retryable());
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_as_transient() {
    let fake = FakeLlm::start(always(FakeReply::server_error())).await;
    let error = call(&openai(&fake), &ask("hi"), 3).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::Transient { message, .. } if message.contains("server had an error")),
        "{error:?}"
    );
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn context_overflow_is_not_retried() {
    let fake = FakeLlm::start(always(FakeReply::context_length())).await;
    let error = call(&openai(&fake), &ask("hi"), 3).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::ContextOverflow { model, message } if model == "fake:test-model" && message.contains("maximum context length")),
        "{error:?}"
    );
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn an_error_chunk_in_a_200_stream_is_classified() {
    // OpenRouter reports upstream failures as a chunk inside an already-started stream.
    let chunks = vec![
        json!({"id": "gen-1", "choices": [{"index": 0, "delta": {"content": "Par"}}]}),
        json!({"id": "gen-1", "error": {"message": "Rate limit exceeded upstream", "code": 429}}),
    ];
    let fake = FakeLlm::start(always(FakeReply::RawStream(chunks))).await;
    let mut req = ask("hi");
    req.stream = true;
    let on_delta = |_: Delta| {};
    let error = openai(&fake).chat(&req, Some(&on_delta)).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::RateLimited { message, .. } if message.contains("Rate limit exceeded")),
        "{error:?}"
    );
}

#[tokio::test]
async fn auth_failures_are_not_retried_and_hide_the_key() {
    let echo = FakeReply::Error {
        status: 401,
        body: json!({"error": {"message": "Incorrect API key provided: sk-test. Find your key at platform.openai.com.",
                               "type": "invalid_request_error", "code": "invalid_api_key"}}),
        retry_after: None,
    };
    let fake = FakeLlm::start(always(echo)).await;
    let error = call(&openai(&fake), &ask("hi"), 3).await.unwrap_err();
    let LlmError::Auth { message, .. } = &error else {
        panic!("expected Auth, got {error:?}")
    };
    assert!(!message.contains("sk-test"), "{message}");
    assert!(message.contains("Incorrect API key"), "{message}");
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn other_client_errors_are_bad_requests() {
    let reply = FakeReply::Error {
        status: 404,
        body: json!({"error": "model 'x' not found"}),
        retry_after: None,
    };
    let fake = FakeLlm::start(always(reply)).await;
    let error = call(&openai(&fake), &ask("hi"), 3).await.unwrap_err();
    assert!(
        matches!(&error, LlmError::BadRequest { message, .. } if message.contains("not found")),
        "{error:?}"
    );
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn malformed_success_bodies_are_invalid_responses() {
    let fake = FakeLlm::start(always(FakeReply::Raw(json!({"id": "x", "choices": []})))).await;
    let error = call(&openai(&fake), &ask("hi"), 3).await.unwrap_err();
    assert!(
        matches!(error, LlmError::InvalidResponse { .. }),
        "{error:?}"
    );
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_hung_server_times_out_as_transient() {
    let fake = FakeLlm::start(always(FakeReply::Hang)).await;
    let mut req = ask("hi");
    req.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let error = call(&openai(&fake), &req, 1).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(error, LlmError::Transient { .. }), "{error:?}");
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn a_connection_refused_is_transient() {
    let providers = providers_for(ProviderKind::Openai, "http://127.0.0.1:9/v1", None, 1);
    let error = call(&model_of(&providers), &ask("hi"), 1)
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::Transient { .. }), "{error:?}");
}

#[tokio::test]
async fn cancellation_ends_a_hung_call_promptly() {
    let fake = FakeLlm::start(always(FakeReply::Hang)).await;
    let model = openai(&fake);
    let mut req = ask("hi");
    req.timeout = Duration::from_secs(30);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let error = chat_with_retry(model.as_ref(), &req, None, fast(3), &cancel)
        .await
        .unwrap_err();
    assert_eq!(error, LlmError::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn cancellation_also_ends_a_backoff_wait() {
    let fake = FakeLlm::start(always(FakeReply::rate_limited("30"))).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        trigger.cancel();
    });
    let policy = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_secs(60),
    };
    let started = Instant::now();
    let model = openai(&fake);
    let error = chat_with_retry(model.as_ref(), &ask("hi"), None, policy, &cancel)
        .await
        .unwrap_err();
    assert_eq!(error, LlmError::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(fake.calls(), 1);
}

// ---- Anthropic ----

#[tokio::test]
async fn anthropic_text_reply() {
    let fake = FakeAnthropic::start(always(FakeReply::text("Hello from Claude."))).await;
    let answer = call(&anthropic(&fake), &ask("Hi"), 1).await.unwrap();

    assert_eq!(answer.message["content"], "Hello from Claude.");
    assert_eq!(answer.message["id"], "msg_0001");
    assert_eq!(
        answer.usage,
        Usage {
            input_tokens: 10,
            output_tokens: 7
        }
    );
    assert_eq!(answer.finish_reason, FinishReason::Stop);

    let sent = &fake.requests()[0];
    assert_eq!(sent["system"], "You are terse.");
    assert_eq!(sent["max_tokens"], 256);
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    );
    let headers = &fake.headers()[0];
    assert_eq!(headers["x-api-key"], "sk-ant-test");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert!(headers.get("authorization").is_none());
}

#[tokio::test]
async fn anthropic_tool_use() {
    let reply = FakeReply::tool_calls(&[
        ("search", json!({"q": "rust"})),
        ("fetch", json!({"url": "u"})),
    ]);
    let fake = FakeAnthropic::start(always(reply)).await;
    let mut req = ask("go");
    req.tools = search_tools();
    req.parallel_tool_calls = false;
    let answer = call(&anthropic(&fake), &req, 1).await.unwrap();

    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        answer.message["tool_calls"][0],
        json!({"name": "search", "args": {"q": "rust"}, "id": "toolu_msg_0001_0", "type": "tool_call"})
    );
    assert_eq!(answer.message["tool_calls"][1]["name"], "fetch");
    let sent = &fake.requests()[0];
    assert_eq!(sent["tools"][0]["name"], "search");
    assert_eq!(sent["tools"][0]["input_schema"]["required"], json!(["q"]));
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
}

#[tokio::test]
async fn anthropic_history_merges_tool_results() {
    let fake = FakeAnthropic::start(always(FakeReply::text("done"))).await;
    let req = request(vec![
        json!({"type": "human", "content": "go"}),
        json!({"type": "ai", "content": "Looking.", "tool_calls": [
            {"name": "search", "args": {"q": "a"}, "id": "t1", "type": "tool_call"},
            {"name": "search", "args": {"q": "b"}, "id": "t2", "type": "tool_call"}]}),
        json!({"type": "tool", "content": "A", "tool_call_id": "t1"}),
        json!({"type": "tool", "content": "B", "tool_call_id": "t2"}),
    ]);
    call(&anthropic(&fake), &req, 1).await.unwrap();
    let messages = &fake.requests()[0]["messages"];
    assert_eq!(messages.as_array().unwrap().len(), 3);
    assert_eq!(
        messages[1]["content"][1],
        json!({"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "a"}})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "B"}]})
    );
    assert!(fake.requests()[0].get("system").is_none());
}

#[tokio::test]
async fn anthropic_structured_output_uses_a_forced_tool() {
    let fake = FakeAnthropic::start(always(FakeReply::Json(good_plan()))).await;
    let (plan, answer) = structured::<Plan>(
        anthropic(&fake).as_ref(),
        plan_request(),
        2,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(plan.title, "Rust");
    assert_eq!(answer.message["tool_calls"], json!([]));
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    assert_eq!(
        serde_json::from_str::<Value>(answer.message["content"].as_str().unwrap()).unwrap(),
        good_plan()
    );
    let sent = &fake.requests()[0];
    assert_eq!(sent["tool_choice"], json!({"type": "tool", "name": "Plan"}));
    assert_eq!(
        sent["tools"][0],
        json!({"name": "Plan", "description": "A report plan", "input_schema": plan_schema().schema})
    );

    // Streamed, the forced tool's input arrives as content.
    let mut req = plan_request();
    req.max_tokens = 100;
    let (answer, deltas) = stream(&anthropic(&fake), req).await;
    assert_eq!(joined(&deltas), answer.message["content"].as_str().unwrap());
    assert_eq!(
        serde_json::from_str::<Value>(&joined(&deltas)).unwrap(),
        good_plan()
    );
}

#[tokio::test]
async fn anthropic_native_web_search() {
    let body = json!({
        "id": "msg_ws", "type": "message", "role": "assistant", "model": "test-model",
        "content": [
            {"type": "text", "text": "Let me search."},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "rust 2024"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "url": "https://blog.rust-lang.org", "title": "Rust Blog", "encrypted_content": "xyz"}]},
            {"type": "text", "text": " Rust 2024 shipped.", "citations": [{"type": "web_search_result_location", "url": "https://blog.rust-lang.org"}]},
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 20, "server_tool_use": {"web_search_requests": 2}},
    });
    let fake = FakeAnthropic::start(always(FakeReply::Raw(body))).await;
    let mut req = ask("What's new in Rust?");
    req.native_tools = vec![NativeTool::WebSearch { max_uses: 3 }];
    let answer = call(&anthropic(&fake), &req, 1).await.unwrap();

    assert_eq!(
        answer.message["content"],
        "Let me search. Rust 2024 shipped."
    );
    assert_eq!(answer.message["tool_calls"], json!([]));
    assert_eq!(
        answer.message["response_metadata"]["server_tool_use"],
        json!({"web_search_requests": 2})
    );
    let sent = &fake.requests()[0];
    assert_eq!(
        sent["tools"],
        json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}])
    );
    assert!(sent.get("tool_choice").is_none());
}

#[tokio::test]
async fn anthropic_streaming() {
    let reply = FakeReply::TextAndToolCalls(
        "Checking now.".into(),
        vec![("search".into(), json!({"q": "tokio"}))],
    );
    let fake = FakeAnthropic::start(always(reply)).await;
    let mut req = ask("go");
    req.tools = search_tools();
    let (answer, deltas) = stream(&anthropic(&fake), req).await;

    assert_eq!(joined(&deltas), "Checking now.");
    assert_eq!(answer.message["content"], "Checking now.");
    assert!(deltas.iter().all(|d| d.id == "msg_0001"));
    let calls = reassemble(&deltas);
    assert_eq!(calls.len(), 1);
    let (id, name, args) = calls.values().next().unwrap();
    assert_eq!((id.as_str(), name.as_str()), ("toolu_msg_0001_0", "search"));
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"q": "tokio"})
    );
    assert_eq!(
        answer.message["tool_calls"][0]["args"],
        json!({"q": "tokio"})
    );
    assert_eq!(
        answer.usage,
        Usage {
            input_tokens: 10,
            output_tokens: 7
        }
    );
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(fake.requests()[0]["stream"], true);
}

#[tokio::test]
async fn anthropic_runaway_stream_is_cut_off() {
    let fake = FakeAnthropic::start(always(FakeReply::Endless("na ".into()))).await;
    let mut req = ask("sing");
    req.max_tokens = 10;
    let (answer, _) = stream(&anthropic(&fake), req).await;
    assert_eq!(answer.finish_reason, FinishReason::Length);
    assert!(answer.message["content"].as_str().unwrap().len() <= 83);
}

#[tokio::test]
async fn anthropic_errors_are_classified() {
    type Expect = fn(&LlmError) -> bool;
    // (reply, attempts allowed, calls expected, expected class)
    let cases: Vec<(FakeReply, u32, usize, Expect)> = vec![
        (FakeReply::overloaded(), 2, 2, |e| {
            matches!(e, LlmError::Transient { .. })
        }),
        (FakeReply::prompt_too_long(), 3, 1, |e| {
            matches!(e, LlmError::ContextOverflow { .. })
        }),
        (
            FakeReply::Error {
                status: 429,
                body: json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}),
                retry_after: Some("7".into()),
            },
            1,
            1,
            |e| matches!(e, LlmError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(7)),
        ),
        (
            FakeReply::Error {
                status: 401,
                body: json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
                retry_after: None,
            },
            3,
            1,
            |e| matches!(e, LlmError::Auth { .. }),
        ),
    ];
    for (reply, attempts, expected_calls, is_expected) in cases {
        let fake = FakeAnthropic::start(always(reply)).await;
        let error = call(&anthropic(&fake), &ask("hi"), attempts)
            .await
            .unwrap_err();
        assert!(is_expected(&error), "{error:?}");
        assert_eq!(fake.calls(), expected_calls, "{error:?}");
    }
}

#[tokio::test]
async fn responders_can_script_by_request() {
    // A responder that answers by what the request offers, as graph tests will.
    let fake = FakeLlm::start(responder(|req| {
        if req["tools"].is_array() {
            FakeReply::tool_calls(&[("search", json!({"q": "x"}))])
        } else {
            FakeReply::text("plain")
        }
    }))
    .await;
    let model = openai(&fake);
    assert_eq!(
        call(&model, &ask("a"), 1).await.unwrap().message["content"],
        "plain"
    );
    let mut req = ask("b");
    req.tools = search_tools();
    assert_eq!(
        call(&model, &req, 1).await.unwrap().message["tool_calls"][0]["name"],
        "search"
    );
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_yields_one_delta() {
    let body = json!({
        "id": "cmpl-9", "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Hm.",
            "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"z\"}"}}]}}],
    });
    let fake = FakeLlm::start(always(FakeReply::Raw(body))).await;
    let (answer, deltas) = stream(&openai(&fake), ask("go")).await;
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0].content, "Hm.");
    assert_eq!(
        reassemble(&deltas)[&0],
        ("c9".into(), "search".into(), "{\"q\":\"z\"}".into())
    );
    assert_eq!(answer.message["tool_calls"][0]["args"], json!({"q": "z"}));
    assert_eq!(answer.message["usage_metadata"], Value::Null);
}

// ---- Azure OpenAI, and headers and query parameters per provider ----

fn azure(fake: &FakeLlm, key: &str, version: Option<&str>) -> Arc<dyn ChatModel> {
    let config = ProviderConfig {
        api_version: version.map(str::to_owned),
        ..ProviderConfig::new(
            ProviderKind::AzureOpenai,
            &fake.base_url(),
            Some(key.to_owned().into()),
        )
    };
    model_of(&Providers::new(BTreeMap::from([(
        "fake".to_owned(),
        config,
    )])))
}

#[tokio::test]
async fn azure_deployments_are_called_with_their_version_and_key() {
    let fake = FakeLlm::start_azure(always(FakeReply::text("from azure"))).await;
    let model = azure(&fake, fake_llm::AZURE_KEY, Some("2024-10-21"));
    let answer = call(&model, &ask("hi"), 1).await.unwrap();
    assert_eq!(answer.message["content"], "from azure");
    assert_eq!(fake.queries(), ["api-version=2024-10-21"]);
    let headers = &fake.headers()[0];
    assert_eq!(headers["api-key"], fake_llm::AZURE_KEY);
    assert!(
        headers.get("authorization").is_none(),
        "Azure takes api-key, not a bearer"
    );
    // The deployment is the model part of `azure:<deployment>`.
    assert_eq!(fake.requests()[0]["deployment"], "test-model");
    assert!(fake.requests()[0].get("max_completion_tokens").is_some());
    // Streaming goes the same way.
    let (streamed, deltas) = stream(&model, ask("hi")).await;
    assert_eq!(streamed.message["content"], "from azure");
    assert!(!deltas.is_empty());

    // Azure's own errors are classified: a wrong key is an auth error, not retried.
    let wrong = azure(&fake, "not-the-key", Some("2024-10-21"));
    let err = call(&wrong, &ask("hi"), 3).await.unwrap_err();
    assert!(matches!(err, LlmError::Auth { .. }), "{err:?}");
    assert!(!err.to_string().contains("not-the-key"));
    let asked = fake.queries().len();
    // No api-version: Azure's 404, reported as a bad request with its message.
    let unversioned = azure(&fake, fake_llm::AZURE_KEY, None);
    let err = call(&unversioned, &ask("hi"), 3).await.unwrap_err();
    assert!(err.to_string().contains("Resource not found"), "{err}");
    assert_eq!(fake.queries().len(), asked + 1, "not retried");
}

#[tokio::test]
async fn every_call_carries_the_providers_headers_and_query_parameters() {
    let fake = FakeLlm::start(always(FakeReply::text("ok"))).await;
    let config = ProviderConfig {
        headers: BTreeMap::from([
            ("X-Org".to_owned(), "research-team".to_owned().into()),
            (
                "Helicone-Auth".to_owned(),
                "Bearer gateway-secret".to_owned().into(),
            ),
        ]),
        query: BTreeMap::from([("tenant".to_owned(), "blue".to_owned())]),
        ..ProviderConfig::new(
            ProviderKind::Openai,
            &fake.base_url(),
            Some("sk-test".into()),
        )
    };
    config.check_headers().unwrap();
    let model = model_of(&Providers::new(BTreeMap::from([(
        "fake".to_owned(),
        config,
    )])));
    call(&model, &ask("hi"), 1).await.unwrap();
    let headers = &fake.headers()[0];
    assert_eq!(headers["x-org"], "research-team");
    assert_eq!(headers["helicone-auth"], "Bearer gateway-secret");
    assert_eq!(headers["authorization"], "Bearer sk-test");
    assert_eq!(fake.queries(), ["tenant=blue"]);

    let bad = ProviderConfig {
        headers: BTreeMap::from([("bad header".to_owned(), "v".to_owned().into())]),
        ..ProviderConfig::new(ProviderKind::Openai, "http://x", None)
    };
    assert!(bad.check_headers().unwrap_err().contains("bad header"));
}

// ---- OpenAI's Responses API ----

fn responses_model(fake: &FakeLlm) -> Arc<dyn ChatModel> {
    model_of(&providers_for(
        ProviderKind::OpenaiResponses,
        &fake.base_url(),
        Some("sk-test"),
        8,
    ))
}

#[tokio::test]
async fn the_responses_api_carries_text_tools_structure_and_streams() {
    let fake = FakeLlm::start_responses(script(vec![
        FakeReply::text("plain answer"),
        FakeReply::tool_calls(&[("lookup", json!({"q": "cobalt"}))]),
        FakeReply::text("streamed answer here"),
    ]))
    .await;
    let model = responses_model(&fake);
    let answer = call(&model, &ask("hi"), 1).await.unwrap();
    assert_eq!(answer.message["content"], "plain answer");
    assert_eq!(
        answer.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 7
        }
    );
    let sent = &fake.requests()[0];
    assert_eq!(
        sent["input"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(sent["max_output_tokens"], 256);
    assert_eq!(sent["store"], false);

    let mut req = ask("look it up");
    req.tools = vec![ToolSpec {
        name: "lookup".into(),
        description: "Look up".into(),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }];
    let answer = call(&model, &req, 1).await.unwrap();
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.message["tool_calls"][0]["name"], "lookup");
    assert_eq!(
        answer.message["tool_calls"][0]["args"],
        json!({"q": "cobalt"})
    );
    assert_eq!(fake.requests()[1]["tools"][0]["type"], "function");
    assert_eq!(fake.requests()[1]["tools"][0]["name"], "lookup");

    let (streamed, deltas) = stream(&model, ask("stream it")).await;
    assert_eq!(streamed.message["content"], "streamed answer here");
    let joined: String = deltas.iter().map(|d| d.content.as_str()).collect();
    assert_eq!(joined, "streamed answer here");
}

#[tokio::test]
async fn responses_api_errors_and_cut_answers_are_classified() {
    let fake = FakeLlm::start_responses(script(vec![
        FakeReply::Error {
            status: 429,
            body: json!({"error": {"message": "Rate limit reached", "type": "requests",
                                   "param": null, "code": "rate_limit_exceeded"}}),
            retry_after: Some("0".into()),
        },
        FakeReply::Raw(json!({"id": "resp_cut", "object": "response", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}, "model": "m",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                        "content": [{"type": "output_text", "text": "half an ans", "annotations": []}]}],
            "usage": {"input_tokens": 5, "output_tokens": 256}})),
        FakeReply::Raw(json!({"id": "resp_failed", "object": "response", "status": "failed",
            "error": {"code": "server_error", "message": "The server had an error"}, "output": []})),
    ]))
    .await;
    let model = responses_model(&fake);
    // The 429 is retried, and the retry gets the cut answer.
    let answer = call(&model, &ask("hi"), 3).await.unwrap();
    assert_eq!(answer.finish_reason, FinishReason::Length);
    assert_eq!(answer.message["content"], "half an ans");
    let err = call(&model, &ask("hi"), 1).await.unwrap_err();
    assert!(matches!(err, LlmError::Transient { .. }), "{err:?}");
    assert!(err.to_string().contains("The server had an error"), "{err}");
}

// ---- Google Gemini ----

fn gemini(fake: &FakeLlm, key: Option<&str>) -> Arc<dyn ChatModel> {
    model_of(&providers_for(
        ProviderKind::Gemini,
        &fake.base_url(),
        key,
        8,
    ))
}

#[tokio::test]
async fn gemini_speaks_generate_content_with_tools_schema_and_streaming() {
    let fake = FakeLlm::start_gemini(script(vec![
        FakeReply::text("plain answer"),
        FakeReply::tool_calls(&[
            ("lookup", json!({"q": "cobalt"})),
            ("think_tool", json!({"reflection": "r"})),
        ]),
        FakeReply::Json(json!({"answer": "forty-two"})),
        FakeReply::text("streamed gemini answer"),
    ]))
    .await;
    let model = gemini(&fake, Some("gm-test-key"));
    let answer = call(&model, &ask("hi"), 1).await.unwrap();
    assert_eq!(answer.message["content"], "plain answer");
    assert_eq!(
        answer.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 7
        }
    );
    let sent = &fake.requests()[0];
    assert_eq!(
        sent["systemInstruction"]["parts"][0]["text"],
        "You are terse."
    );
    assert_eq!(
        sent["contents"][0],
        json!({"role": "user", "parts": [{"text": "hi"}]})
    );
    assert_eq!(fake.headers()[0]["x-goog-api-key"], "gm-test-key");

    let mut req = ask("look it up");
    req.tools = vec![ToolSpec {
        name: "lookup".into(),
        description: "Look up".into(),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }];
    let answer = call(&model, &req, 1).await.unwrap();
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    let calls = answer.message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "parallel calls");
    assert_eq!(calls[0]["args"], json!({"q": "cobalt"}));
    assert_ne!(calls[0]["id"], calls[1]["id"], "each call gets its own id");
    assert_eq!(
        fake.requests()[1]["tools"][0]["functionDeclarations"][0]["name"],
        "lookup"
    );

    #[derive(Deserialize)]
    struct Answer {
        answer: String,
    }
    let schema = ResponseSchema {
        name: "Answer".into(),
        description: "An answer".into(),
        schema: json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}),
    };
    let mut json_req = ask("json please");
    json_req.response_schema = Some(schema);
    let (parsed, _): (Answer, _) = structured(
        model.as_ref(),
        json_req,
        1,
        fast(1),
        &CancellationToken::new(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(parsed.answer, "forty-two");
    assert_eq!(
        fake.requests()[2]["generationConfig"]["responseMimeType"],
        "application/json"
    );

    let (streamed, deltas) = stream(&model, ask("stream it")).await;
    assert_eq!(streamed.message["content"], "streamed gemini answer");
    let joined: String = deltas.iter().map(|d| d.content.as_str()).collect();
    assert_eq!(joined, "streamed gemini answer");
    assert_eq!(fake.queries().last().unwrap(), "alt=sse");
}

#[tokio::test]
async fn gemini_grounding_errors_and_blocks_are_read() {
    let grounded = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "Cobalt reserves are 11 Mt."}]}, "finishReason": "STOP",
        "groundingMetadata": {"webSearchQueries": ["cobalt reserves"],
            "groundingChunks": [{"web": {"uri": "https://grounded.example/cobalt", "title": "grounded.example"}}]}}],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 8, "totalTokenCount": 17}});
    let fake = FakeLlm::start_gemini(script(vec![
        FakeReply::Raw(grounded),
        FakeReply::Error {
            status: 429,
            body: json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                   "status": "RESOURCE_EXHAUSTED"}}),
            retry_after: None,
        },
        FakeReply::text("after the limit"),
        FakeReply::Raw(json!({"promptFeedback": {"blockReason": "SAFETY"},
                              "usageMetadata": {"promptTokenCount": 3}})),
    ]))
    .await;
    let model = gemini(&fake, Some("gm-test-key"));
    let mut req = ask("news?");
    req.native_tools = vec![NativeTool::WebSearch { max_uses: 3 }];
    let answer = call(&model, &req, 1).await.unwrap();
    assert_eq!(fake.requests()[0]["tools"], json!([{"googleSearch": {}}]));
    let meta = &answer.message["response_metadata"];
    assert_eq!(meta["server_tool_use"]["web_search_requests"], 1);
    assert_eq!(
        meta["web_search_results"][0]["url"],
        "https://grounded.example/cobalt"
    );
    // RESOURCE_EXHAUSTED is a rate limit: retried.
    let answer = call(&model, &ask("again"), 3).await.unwrap();
    assert_eq!(answer.message["content"], "after the limit");
    // A blocked prompt is said as such.
    let err = call(&model, &ask("blocked"), 1).await.unwrap_err();
    assert!(err.to_string().contains("blocked (SAFETY)"), "{err}");
    // Without a key: Google's 403, an authentication error.
    let err = call(&gemini(&fake, None), &ask("hi"), 3).await.unwrap_err();
    assert!(matches!(err, LlmError::Auth { .. }), "{err:?}");
}
