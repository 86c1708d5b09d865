//! Observability: Prometheus metrics at `/metrics`, and traces exported over OTLP/HTTP to a
//! receiver in this test that decodes the protobuf the way a collector does. One test per
//! binary-wide subscriber: the trace test installs the global one.

use crate::support;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use support::research::{self as r, Script, scripted};
use support::{new_thread, spawn_app};

/// A research question answered without a clarifying question, to the end.
async fn research_to_the_end(ra: &r::ResearchApp) -> Value {
    let tid = new_thread(&ra.app).await;
    let body = json!({
        "assistant_id": "deep_research",
        "input": {"messages": [{"role": "user", "content": "Compare solar and wind power costs"}]},
        "config": {"configurable": {"allow_clarification": false}},
    });
    let response = deep_research::outbound::client_builder()
        .build()
        .unwrap()
        .post(ra.app.url(&format!("/threads/{tid}/runs/wait")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_runs_nodes_model_calls_and_searches() {
    let ra = r::start(scripted(Script::default()), "").await;
    let values = research_to_the_end(&ra).await;
    assert!(values["final_report"].is_string(), "{values}");

    let response = reqwest::get(ra.app.url("/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await.unwrap();
    for expected in [
        r#"dr_http_requests_total{method="POST",route="/threads/{thread_id}/runs/wait",status="200"}"#,
        r#"dr_runs_finished_total{graph_id="deep_research",status="success"} "#,
        r#"dr_run_duration_seconds_bucket{graph_id="deep_research",status="success",le="#,
        r#"dr_run_queue_wait_seconds_count{graph_id="deep_research"}"#,
        r#"dr_node_duration_seconds_count{graph_id="deep_research",node="write_research_brief"}"#,
        r#"dr_model_calls_total{provider="openai",model="#,
        r#"dr_model_tokens_total{provider="openai",model="#,
        r#"dr_model_cost_usd_total{provider="openai",model="#,
        r#"dr_search_calls_total{api="tavily",outcome="ok"}"#,
        r#"dr_store_operation_duration_seconds_count{operation="put_checkpoint"}"#,
        "dr_runs_pending 0",
        "dr_runs_running ",
    ] {
        assert!(text.contains(expected), "missing {expected} in:\n{text}");
    }
    // Routes are templates, never raw paths with ids in them.
    assert!(!text.contains("route=\"/threads/0") && !text.contains("route=\"/threads/1"));
}

#[tokio::test]
async fn metrics_are_open_without_the_api_key_and_can_be_turned_off() {
    let app = spawn_app().await;
    assert_eq!(
        reqwest::get(app.url("/metrics")).await.unwrap().status(),
        200
    );
    let mut settings = support::test_settings();
    settings.telemetry.metrics = false;
    settings.api_key = Some("k-1".into());
    let off = support::spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .unwrap();
    let response = reqwest::get(off.url("/metrics")).await.unwrap();
    assert_eq!(response.status(), 404, "off means not served, key or not");
    let body: Value = response.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("metrics = false"));
}

/// An OTLP/HTTP receiver: every export request's spans, decoded.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    async fn start(&self) -> String {
        let spans = self.spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: Bytes| {
                let spans = spans.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("protobuf");
                    let mut all = spans.lock().unwrap();
                    for resource in request.resource_spans {
                        for scope in resource.scope_spans {
                            all.extend(scope.spans);
                        }
                    }
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        AnyValue::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_one_trace_with_node_model_and_search_spans_exported_over_otlp() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let cfg = deep_research::telemetry::TelemetryConfig {
        log_format: deep_research::telemetry::LogFormat::Json,
        otlp_endpoint: Some(endpoint),
        service_name: "deep-research-test".into(),
        metrics: true,
        metrics_public: true,
        metrics_address: None,
    };
    let guard = deep_research::telemetry::init(&cfg).unwrap();
    let ra = r::start(scripted(Script::default()), "").await;
    let values = research_to_the_end(&ra).await;
    assert!(values["final_report"].is_string(), "{values}");
    guard.shutdown().await;

    let spans = receiver.spans();
    let runs: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "run deep_research")
        .collect();
    assert_eq!(runs.len(), 1, "one run span: {:?}", names(&spans));
    let run = runs[0];
    assert!(run.parent_span_id.is_empty(), "the run is a trace's root");
    assert_eq!(attr(run, "status").as_deref(), Some("success"));
    let in_run: Vec<&Span> = spans
        .iter()
        .filter(|s| s.trace_id == run.trace_id)
        .collect();
    let in_run_names = names(&in_run.iter().map(|s| (*s).clone()).collect::<Vec<_>>());
    for node in [
        "write_research_brief",
        "research_supervisor",
        "final_report_generation",
    ] {
        assert!(
            in_run_names.contains(&node.to_owned()),
            "node {node}: {in_run_names:?}"
        );
    }
    let chat = in_run
        .iter()
        .find(|s| s.name.starts_with("chat "))
        .expect("a model call span in the run's trace");
    assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(
        attr(chat, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert!(attr(chat, "gen_ai.request.model").is_some());
    assert!(attr(chat, "gen_ai.usage.input_tokens").is_some());
    assert!(attr(chat, "gen_ai.usage.output_tokens").is_some());
    assert!(attr(chat, "gen_ai.response.finish_reasons").is_some());
    assert!(
        in_run.iter().any(|s| s.name == "search tavily"),
        "search spans in the run's trace: {in_run_names:?}"
    );
    // Requests are traced on their own, named by route.
    assert!(
        spans
            .iter()
            .any(|s| s.name == "POST /threads/{thread_id}/runs/wait"),
        "{:?}",
        names(&spans)
    );
}

fn names(spans: &[Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}
