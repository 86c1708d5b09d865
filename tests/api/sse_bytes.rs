//! Byte-level checks of the SSE wire format against the reference captures
//! (langgraph-api.md §4 and Appendix B): framing, headers, event order and JSON key sets.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use support::{body_text, hello, new_thread, parse_sse, spawn_app};

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn stream_head_framing_and_order_match_the_reference() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let resp = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/stream")))
        .json(&json!({"assistant_id": "agent", "input": hello(),
                      "stream_mode": ["values", "updates", "messages-tuple"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let h = resp.headers().clone();
    assert_eq!(h["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(h["x-accel-buffering"], "no");
    let content_location = h["content-location"].to_str().unwrap().to_owned();
    assert!(content_location.starts_with(&format!("/threads/{tid}/runs/")));
    assert_eq!(
        h["location"].to_str().unwrap(),
        format!("{content_location}/stream")
    );
    let body = resp.text().await.unwrap();
    let frames = parse_sse(&body);
    assert!(
        frames.iter().all(|f| f.id.is_none()),
        "ids only on resumable runs"
    );
    assert!(!body.contains("event: end"));

    let names: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();
    let tokens = names.iter().filter(|n| **n == "messages").count();
    assert_eq!(
        tokens,
        support::graphs::REPLY.split(' ').count(),
        "one event per streamed token: {names:?}"
    );
    let mut expected = vec!["metadata", "values"];
    expected.extend(std::iter::repeat_n("messages", tokens));
    expected.extend(["updates", "values"]);
    assert_eq!(names, expected);

    assert_eq!(keys(&frames[0].data), set(&["run_id", "attempt"]));
    assert_eq!(frames[0].data["attempt"], 1);
    assert_eq!(
        content_location,
        format!(
            "/threads/{tid}/runs/{}",
            frames[0].data["run_id"].as_str().unwrap()
        )
    );
    let human = &frames[1].data["messages"][0];
    assert_eq!(
        keys(human),
        set(&[
            "content",
            "additional_kwargs",
            "response_metadata",
            "type",
            "name",
            "id"
        ])
    );
    let chunk = &frames[2].data[0];
    assert_eq!(
        keys(chunk),
        set(&[
            "content",
            "additional_kwargs",
            "response_metadata",
            "type",
            "name",
            "id",
            "tool_calls",
            "invalid_tool_calls",
            "usage_metadata",
            "tool_call_chunks",
            "chunk_position"
        ])
    );
    assert_eq!(chunk["type"], "AIMessageChunk");
    let meta = &frames[2].data[1];
    for key in [
        "langgraph_step",
        "langgraph_node",
        "langgraph_triggers",
        "langgraph_path",
        "langgraph_checkpoint_ns",
        "checkpoint_ns",
        "thread_id",
        "run_id",
    ] {
        assert!(
            meta.get(key).is_some(),
            "message metadata lacks {key}: {meta}"
        );
    }
    assert_eq!(meta["langgraph_node"], "agent");
    let last_chunk = &frames[2 + tokens - 1].data[0];
    assert_eq!(last_chunk["chunk_position"], "last");
    let ai = &frames[frames.len() - 1].data["messages"][1];
    assert_eq!(
        keys(ai),
        set(&[
            "content",
            "additional_kwargs",
            "response_metadata",
            "type",
            "name",
            "id",
            "tool_calls",
            "invalid_tool_calls",
            "usage_metadata"
        ])
    );
    assert_eq!(keys(&frames[2 + tokens].data), set(&["agent"]));
}

#[tokio::test]
async fn resumable_streams_carry_increasing_ids_and_replay_exactly() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let resp = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/stream")))
        .json(
            &json!({"assistant_id": "agent", "input": hello(), "stream_resumable": true,
                      "stream_mode": ["values", "updates"]}),
        )
        .send()
        .await
        .unwrap();
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    let original = parse_sse(&resp.text().await.unwrap());
    let ids: Vec<(i64, i64)> = original
        .iter()
        .map(|f| {
            let id = f.id.as_deref().expect("every frame has an id");
            let (ms, seq) = id.split_once('-').expect("<ms>-<seq>");
            (ms.parse().unwrap(), seq.parse().unwrap())
        })
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids strictly increase: {ids:?}"
    );

    let replay = |last: String| {
        let req = app
            .client
            .get(app.url(&location))
            .header("last-event-id", last);
        async move { parse_sse(&req.send().await.unwrap().text().await.unwrap()) }
    };
    assert_eq!(replay("-1".into()).await, original);
    let first = original[0].id.clone().unwrap();
    assert_eq!(replay(first).await, original[1..].to_vec());
    let empty = app.client.get(app.url(&location)).send().await.unwrap();
    assert_eq!(empty.status(), 200);
    assert_eq!(
        empty.text().await.unwrap(),
        "",
        "joining a finished run without Last-Event-ID is empty"
    );
}

#[tokio::test]
async fn a_failing_graph_ends_with_an_error_event_and_an_error_thread() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let body = body_text(
        app.client
            .post(app.url(&format!("/threads/{tid}/runs/stream")))
            .json(&json!({"assistant_id": "err", "input": {"messages": []}})),
    )
    .await;
    let frames = parse_sse(&body);
    let names: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(names, ["metadata", "values", "error"]);
    assert_eq!(frames[1].data, json!({"messages": []}));
    assert_eq!(
        frames[2].data,
        json!({"error": "ValueError", "message": "kaboom"})
    );
    let thread: Value = app
        .client
        .get(app.url(&format!("/threads/{tid}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(thread["status"], "error");
    assert_eq!(
        thread["error"],
        json!({"error": "ValueError", "message": "kaboom"})
    );
    let wait: Value = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/wait")))
        .json(&json!({"assistant_id": "err", "input": {"messages": []}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        wait,
        json!({"__error__": {"error": "ValueError", "message": "kaboom"}})
    );
}

#[tokio::test]
async fn slow_runs_send_heartbeats_between_frames() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let body = body_text(app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/stream")))
        .json(&json!({"assistant_id": "slow", "input": hello(), "config": {"configurable": {"sleep_secs": 1.3}}}))).await;
    // The test server beats every 500 ms; a 1.3 s node leaves room for at least two.
    assert!(body.matches(": heartbeat\r\n\r\n").count() >= 2, "{body:?}");
    let names: Vec<String> = parse_sse(&body).into_iter().map(|f| f.event).collect();
    assert_eq!(names, ["metadata", "values", "values"]);
}

#[tokio::test]
async fn subgraph_events_are_namespaced_only_when_asked() {
    let app = spawn_app().await;
    let run = |subgraphs: bool| {
        let app = &app;
        async move {
            let tid = new_thread(app).await;
            let body = body_text(app
                .client
                .post(app.url(&format!("/threads/{tid}/runs/stream")))
                .json(&json!({"assistant_id": "parent", "input": hello(), "stream_subgraphs": subgraphs,
                              "stream_mode": ["values", "updates", "messages-tuple"]}))).await;
            parse_sse(&body)
                .into_iter()
                .map(|f| f.event)
                .collect::<Vec<_>>()
        }
    };
    let plain = run(false).await;
    assert!(plain.iter().all(|n| !n.contains('|')), "{plain:?}");
    let nested = run(true).await;
    for mode in ["values", "updates", "messages"] {
        assert!(
            nested
                .iter()
                .any(|n| n.starts_with(&format!("{mode}|child:"))),
            "no {mode}|child:<task> event in {nested:?}"
        );
    }
    // The subgraph's updates come before the parent's update for that node.
    let child_update = nested
        .iter()
        .position(|n| n.starts_with("updates|child:"))
        .unwrap();
    let parent_update = nested.iter().position(|n| n == "updates").unwrap();
    assert!(child_update < parent_update);
}

#[tokio::test]
async fn custom_tasks_checkpoints_and_debug_modes_have_the_reference_shapes() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let body = body_text(
        app.client
            .post(app.url(&format!("/threads/{tid}/runs/stream")))
            .json(&json!({"assistant_id": "agent", "input": hello(),
                      "stream_mode": ["custom", "tasks", "checkpoints", "debug"]})),
    )
    .await;
    let frames = parse_sse(&body);
    let of = |name: &str| {
        frames
            .iter()
            .filter(|f| f.event == name)
            .map(|f| f.data.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of("custom"),
        vec![json!({"type": "progress", "note": "thinking"})]
    );
    let tasks = of("tasks");
    assert_eq!(tasks.len(), 2, "start and result");
    assert_eq!(keys(&tasks[0]), set(&["id", "name", "input", "triggers"]));
    assert_eq!(
        keys(&tasks[1]),
        set(&["id", "name", "error", "result", "interrupts"])
    );
    assert_eq!(tasks[0]["id"], tasks[1]["id"]);
    assert_eq!(tasks[1]["result"]["messages"][0]["type"], "ai");
    let checkpoints = of("checkpoints");
    assert_eq!(checkpoints.len(), 3, "input, input applied, the agent step");
    assert_eq!(
        keys(&checkpoints[0]),
        set(&[
            "config",
            "parent_config",
            "values",
            "metadata",
            "next",
            "tasks"
        ])
    );
    assert_eq!(checkpoints[0]["parent_config"], Value::Null);
    assert_eq!(checkpoints[1]["parent_config"], checkpoints[0]["config"]);
    assert_eq!(checkpoints[2]["parent_config"], checkpoints[1]["config"]);
    assert_eq!(checkpoints[0]["next"], json!(["__start__"]));
    assert_eq!(checkpoints[0]["metadata"]["source"], "input");
    assert_eq!(checkpoints[0]["metadata"]["step"], -1);
    assert_eq!(
        checkpoints[0]["values"],
        json!({"messages": []}),
        "the input checkpoint holds the state before the input"
    );
    assert_eq!(checkpoints[1]["next"], json!(["agent"]));
    assert_eq!(checkpoints[1]["values"]["messages"][0]["id"], "h1");
    let debug = of("debug");
    let kinds: Vec<&str> = debug.iter().map(|d| d["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "checkpoint",
            "checkpoint",
            "task",
            "task_result",
            "checkpoint"
        ]
    );
    assert_eq!(
        keys(&debug[0]),
        set(&["step", "timestamp", "type", "payload"])
    );
    assert!(debug[0]["payload"]["checkpoint"]["checkpoint_id"].is_string());
    let state: Value = app
        .client
        .get(app.url(&format!("/threads/{tid}/state")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        state["checkpoint"]["checkpoint_id"],
        checkpoints[2]["config"]["configurable"]["checkpoint_id"]
    );
}

#[tokio::test]
async fn legacy_messages_mode_sends_metadata_then_accumulating_partials() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let body = body_text(
        app.client
            .post(app.url(&format!("/threads/{tid}/runs/stream")))
            .json(&json!({"assistant_id": "agent", "input": hello(), "stream_mode": "messages"})),
    )
    .await;
    let frames = parse_sse(&body);
    let names: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(
        names[..3],
        ["metadata", "messages/metadata", "messages/partial"]
    );
    let partials: Vec<String> = frames
        .iter()
        .filter(|f| f.event == "messages/partial")
        .map(|f| f.data[0]["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        partials
            .windows(2)
            .all(|w| w[1].starts_with(&w[0]) && w[1].len() > w[0].len())
    );
    assert_eq!(partials.last().unwrap(), support::graphs::REPLY);
    assert!(
        frames
            .iter()
            .filter(|f| f.event == "messages/partial")
            .all(|f| f.data[0]["type"] == "ai")
    );
    assert!(
        !names.contains(&"messages/complete"),
        "token-streamed messages get no complete event"
    );
}
