//! Deterministic graphs registered by the test harness through the library's public API, with
//! the same ids and observable behaviour as the reference compatibility graphs.

use deep_research::graph::messages::ai_message;
use deep_research::graph::{Command, Graph, NodeContext, NodeError, Reducer, Registry, Schemas};
use deep_research::store::JsonMap;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// The reply of the fake model.
pub const REPLY: &str = "Hello there, I am a fake model.";

fn messages_graph(id: &str) -> deep_research::graph::GraphBuilder {
    Graph::builder(id)
        .channel("messages", Reducer::Messages, json!([]))
        .schemas(Schemas {
            input: json!({"type": "object", "properties": {"messages": {"type": "array"}}, "required": ["messages"]}),
            output: json!({"type": "object", "properties": {"messages": {"type": "array"}}}),
            state: json!({"type": "object", "properties": {"messages": {"type": "array"}}}),
            config: json!({"type": "object", "properties": {}}),
        })
}

fn update(message: Value) -> Command {
    let mut map = JsonMap::new();
    map.insert("messages".into(), json!([message]));
    Command::update(map)
}

/// Streams `REPLY` word by word as token chunks, then returns it as one message.
async fn fake_model(_state: Arc<JsonMap>, ctx: NodeContext) -> Result<Command, NodeError> {
    let id = format!("lc_run--{}", Uuid::now_v7());
    ctx.emit_custom(json!({"type": "progress", "note": "thinking"}));
    let words: Vec<&str> = REPLY.split_inclusive(' ').collect();
    for (i, word) in words.iter().enumerate() {
        let last = i + 1 == words.len();
        ctx.emit_chunk(json!({
            "content": word, "additional_kwargs": {}, "response_metadata": {},
            "type": "AIMessageChunk", "name": null, "id": id, "tool_calls": [],
            "invalid_tool_calls": [], "usage_metadata": null, "tool_call_chunks": [],
            "chunk_position": if last { json!("last") } else { Value::Null },
        }));
        tokio::task::yield_now().await;
    }
    Ok(update(ai_message(&id, REPLY)))
}

async fn slow(_state: Arc<JsonMap>, ctx: NodeContext) -> Result<Command, NodeError> {
    let secs = ctx.config()["configurable"]["sleep_secs"]
        .as_f64()
        .unwrap_or(3.0);
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs_f64(secs)) => {}
        () = ctx.cancelled().cancelled() => return Err(NodeError::Cancelled),
    }
    Ok(update(ai_message(&Uuid::new_v4().to_string(), "slow done")))
}

/// Fails; with `configurable.panic: true` it panics instead, as a node with a bug would.
async fn fail(_state: Arc<JsonMap>, ctx: NodeContext) -> Result<Command, NodeError> {
    if ctx.config()["configurable"]["panic"] == json!(true) {
        panic!("a bug in a node");
    }
    Err(NodeError::new("ValueError", "kaboom"))
}

fn child_graph() -> Graph {
    messages_graph("child")
        .node("inner", |_s, _c| async {
            Ok(update(ai_message(
                &Uuid::new_v4().to_string(),
                "from child",
            )))
        })
        .start("inner")
        .build()
}

async fn run_child(state: Arc<JsonMap>, ctx: NodeContext) -> Result<Command, NodeError> {
    let child = child_graph();
    let out = ctx
        .subgraph(
            &child,
            json!({"messages": state.get("messages").cloned().unwrap_or(json!([]))}),
        )
        .await?;
    let last = out["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    Ok(update(last))
}

/// Asks for approval with LangGraph's example interrupt, then reports the answer.
async fn ask(_state: Arc<JsonMap>, ctx: NodeContext) -> Result<Command, NodeError> {
    let answer = ctx.interrupt(json!({"question": "Approve?", "options": ["yes", "no"]}))?;
    let text = format!(
        "answer: {}",
        answer.as_str().map_or(answer.to_string(), str::to_owned)
    );
    Ok(update(ai_message(&Uuid::new_v4().to_string(), &text)))
}

/// `agent`, `slow`, `err`, `parent` and `hitl`.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register(
        messages_graph("agent")
            .node("agent", fake_model)
            .start("agent")
            .build(),
    );
    registry.register(
        messages_graph("slow")
            .node("slow", slow)
            .start("slow")
            .build(),
    );
    registry.register(
        messages_graph("err")
            .node("fail", fail)
            .start("fail")
            .build(),
    );
    registry.register(
        messages_graph("parent")
            .node("child", run_child)
            .node("agent", fake_model)
            .start("child")
            .edge("child", "agent")
            .build(),
    );
    // `hitl`: `ask` interrupts, then `agent` replies; `interrupt_before: ["agent"]` pauses
    // after the answer.
    registry.register(
        messages_graph("hitl")
            .node("ask", ask)
            .node("agent", fake_model)
            .start("ask")
            .edge("ask", "agent")
            .build(),
    );
    registry
}
