//! The thread-centric protocol of `@langchain/react` over real HTTP: commands at
//! `/threads/{id}/commands`, events at `/threads/{id}/stream/events`, as the SDK's stream
//! client (1.11) sends and reads them.

use crate::support;

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::graphs::REPLY;
use support::service::{follow_request, wait_until};
use support::{SseFrame, TestApp, spawn_app};
use uuid::Uuid;

/// The channels of `useStream`'s root pump and of its lifecycle watcher.
fn root_pump() -> Value {
    json!({"channels": ["values", "checkpoints", "lifecycle", "input", "messages", "tools"],
           "namespaces": [[]], "depth": 1})
}

fn watcher() -> Value {
    json!({"channels": ["lifecycle", "input"]})
}

async fn command(app: &TestApp, thread: Uuid, id: i64, method: &str, params: Value) -> Value {
    let resp = app
        .client
        .post(app.url(&format!("/threads/{thread}/commands")))
        .json(&json!({"id": id, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(reply["id"], id, "{reply}");
    reply
}

fn open(app: &TestApp, thread: Uuid, body: Value) -> Arc<Mutex<Vec<SseFrame>>> {
    follow_request(
        app.client
            .post(app.url(&format!("/threads/{thread}/stream/events")))
            .json(&body),
    )
}

fn lifecycle(frames: &[SseFrame]) -> Vec<(Value, String)> {
    frames
        .iter()
        .filter(|f| f.data["method"] == "lifecycle")
        .map(|f| {
            (
                f.data["params"]["namespace"].clone(),
                f.data["params"]["data"]["event"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect()
}

/// Root terminal lifecycle events seen so far.
fn terminals(frames: &Mutex<Vec<SseFrame>>) -> usize {
    lifecycle(&frames.lock().unwrap())
        .iter()
        .filter(|(ns, e)| {
            *ns == json!([]) && ["completed", "failed", "interrupted"].contains(&e.as_str())
        })
        .count()
}

async fn until_terminals(frames: &Mutex<Vec<SseFrame>>, n: usize) -> Vec<SseFrame> {
    wait_until(
        Duration::from_secs(30),
        "the run's end on the stream",
        || terminals(frames) >= n,
    )
    .await;
    frames.lock().unwrap().clone()
}

fn of<'a>(frames: &'a [SseFrame], method: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f.data["method"] == method)
        .map(|f| &f.data["params"]["data"])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_minted_thread_runs_and_streams_content_blocks() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let message_id = Uuid::new_v4().to_string();
    let reply = command(
        &app,
        thread,
        1,
        "run.start",
        json!({"assistant_id": "agent", "config": {"configurable": {"thread_id": thread}},
               "input": {"messages": [{"type": "human", "content": "hi", "id": message_id}]}}),
    )
    .await;
    assert_eq!(reply["type"], "success", "{reply}");
    assert!(reply["result"]["run_id"].as_str().is_some());
    assert_eq!(reply["meta"]["applied_through_seq"], 0);

    // both of the client's streams open after run.start answered: the run is replayed
    let pump = open(&app, thread, root_pump());
    let watch = open(&app, thread, watcher());
    let frames = until_terminals(&pump, 1).await;
    let watched = until_terminals(&watch, 1).await;

    let events = lifecycle(&frames);
    assert_eq!(events.first(), Some(&(json!([]), "running".to_owned())));
    assert_eq!(events.last(), Some(&(json!([]), "completed".to_owned())));
    // the same event has the same seq and id on every connection; seqs increase
    for f in &watched {
        let twin = frames
            .iter()
            .find(|g| g.data["event_id"] == f.data["event_id"])
            .expect("the watcher's lifecycle events are on the pump too");
        assert_eq!(twin.data["seq"], f.data["seq"]);
        assert_eq!(twin.id, f.id);
    }
    let seqs: Vec<u64> = frames
        .iter()
        .map(|f| f.data["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    for f in &frames {
        assert_eq!(f.data["type"], "event");
        assert_eq!(f.event, f.data["method"].as_str().unwrap());
        assert_eq!(f.id.as_deref(), Some(f.data["seq"].to_string().as_str()));
    }

    // tokens as content blocks, under the id the final values give the message
    let messages = of(&frames, "messages");
    let start = messages
        .iter()
        .find(|m| m["event"] == "message-start")
        .unwrap();
    let text: String = messages
        .iter()
        .filter(|m| m["event"] == "content-block-delta")
        .map(|m| m["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, REPLY);
    assert_eq!(messages.last().unwrap()["event"], "message-finish");
    let values = of(&frames, "values");
    let last = values.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        last[0]["id"],
        message_id.as_str(),
        "the client's message id is kept"
    );
    assert_eq!(last[1]["id"], start["id"]);
    let checkpoints = of(&frames, "checkpoints");
    assert!(!checkpoints.is_empty());
    assert!(
        checkpoints
            .iter()
            .all(|c| c["id"].is_string() && c["step"].is_i64())
    );

    // the page reloads: the old endpoints it still calls answer
    let state = app.get_json(&format!("/threads/{thread}/state")).await;
    assert_eq!(state["values"]["messages"][1]["content"], REPLY);
    let missing = app
        .client
        .get(app.url(&format!("/threads/{}/state", Uuid::now_v7())))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_is_requested_and_answered_with_input_respond() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    // this stream is open before the thread or its run exist
    let pump = open(&app, thread, root_pump());
    tokio::time::sleep(Duration::from_millis(300)).await;
    command(
        &app,
        thread,
        1,
        "run.start",
        json!({"assistant_id": "hitl", "input": {"messages": [{"type": "human", "content": "hi"}]}}),
    )
    .await;
    let frames = until_terminals(&pump, 1).await;
    let asked = of(&frames, "input.requested");
    assert_eq!(asked.len(), 1, "{frames:?}");
    assert_eq!(asked[0]["payload"]["question"], "Approve?");
    let interrupt_id = asked[0]["interrupt_id"].as_str().unwrap().to_owned();
    assert_eq!(lifecycle(&frames).last().unwrap().1, "interrupted");
    let interrupted = frames
        .iter()
        .position(|f| f.data["method"] == "input.requested")
        .unwrap();
    assert!(
        frames[interrupted + 1..]
            .iter()
            .any(|f| f.data["params"]["data"]["event"] == "interrupted")
    );

    // an unknown interrupt is refused; the right one resumes the thread
    let wrong = command(
        &app,
        thread,
        2,
        "input.respond",
        json!({"interrupt_id": "f".repeat(32), "response": "yes", "namespace": []}),
    )
    .await;
    assert_eq!(wrong["type"], "error");
    assert_eq!(wrong["error"], "no_such_interrupt");
    let answered = command(
        &app,
        thread,
        3,
        "input.respond",
        json!({"interrupt_id": interrupt_id, "response": "yes", "namespace": []}),
    )
    .await;
    assert_eq!(
        answered,
        json!({"type": "success", "id": 3, "result": {}, "meta": {"applied_through_seq": 0}})
    );
    // the same answer again (a second tab, a retry) finds nothing left to answer
    let twice = command(
        &app,
        thread,
        4,
        "input.respond",
        json!({"interrupt_id": interrupt_id, "response": "no"}),
    )
    .await;
    assert_eq!(twice["error"], "no_such_interrupt", "{twice}");
    let frames = until_terminals(&pump, 2).await;
    let events = lifecycle(&frames);
    let roots: Vec<&str> = events
        .iter()
        .filter(|(ns, _)| *ns == json!([]))
        .map(|(_, e)| e.as_str())
        .collect();
    assert_eq!(roots, ["running", "interrupted", "running", "completed"]);
    let last = of(&frames, "values").last().unwrap()["messages"].clone();
    let texts: Vec<&str> = last
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["hi", "answer: yes", REPLY]);

    // a client that reconnects with `since` gets only what came after
    let cut = frames[frames.len() / 2].data["seq"].as_u64().unwrap();
    let mut body = root_pump();
    body["since"] = json!(cut);
    let again = open(&app, thread, body);
    let replay = until_terminals(&again, 1).await;
    assert!(replay.iter().all(|f| f.data["seq"].as_u64().unwrap() > cut));
    let same = frames
        .iter()
        .find(|f| f.data["seq"].as_u64().unwrap() > cut)
        .unwrap();
    assert_eq!(
        replay[0].data, same.data,
        "the same event, numbered the same"
    );

    // a new message while nothing waits is a new run; the state commands read the thread
    let state = command(
        &app,
        thread,
        4,
        "state.get",
        json!({"namespace": [], "keys": ["messages"]}),
    )
    .await;
    assert_eq!(
        state["result"]["values"]["messages"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let list = command(
        &app,
        thread,
        5,
        "state.listCheckpoints",
        json!({"limit": 2}),
    )
    .await;
    assert_eq!(list["result"]["checkpoints"].as_array().unwrap().len(), 2);
    let deeper = command(
        &app,
        thread,
        6,
        "state.get",
        json!({"namespace": ["ask:1"]}),
    )
    .await;
    assert_eq!(deeper["error"], "no_such_namespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_ends_the_stream_state_with_its_error() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    command(
        &app,
        thread,
        1,
        "run.start",
        json!({"assistant_id": "err", "input": {"messages": [{"type": "human", "content": "hi"}]}}),
    )
    .await;
    let frames = until_terminals(&open(&app, thread, watcher()), 1).await;
    let failed = frames
        .iter()
        .rev()
        .find(|f| f.data["method"] == "lifecycle")
        .unwrap();
    assert_eq!(failed.data["params"]["data"]["event"], "failed");
    assert_eq!(failed.data["params"]["data"]["error"], "kaboom");
    // forking the input checkpoint re-runs it (and fails again)
    let first = command(
        &app,
        thread,
        2,
        "state.listCheckpoints",
        json!({"limit": 100}),
    )
    .await;
    let oldest = first["result"]["checkpoints"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["id"]
        .clone();
    let forked = command(
        &app,
        thread,
        3,
        "state.fork",
        json!({"checkpoint_id": oldest}),
    )
    .await;
    assert_eq!(forked["result"]["thread_id"], thread.to_string());
    let unknown = command(
        &app,
        thread,
        4,
        "state.fork",
        json!({"checkpoint_id": Uuid::now_v7()}),
    )
    .await;
    assert_eq!(unknown["error"], "no_such_checkpoint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_commands_and_subscriptions_say_what_is_wrong() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let url = app.url(&format!("/threads/{thread}/commands"));
    let raw = |body: &'static str| {
        app.client
            .post(url.clone())
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let resp = raw("{not json").await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["detail"],
        "Invalid JSON body"
    );
    let resp = raw(r#"{"id": "1", "method": "run.start"}"#).await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "invalid_argument"
    );

    for (method, params, code) in [
        ("run.start", json!({"input": {}}), "invalid_argument"),
        (
            "run.start",
            json!({"assistant_id": "nope"}),
            "unknown_error",
        ),
        (
            "run.start",
            json!({"assistant_id": "agent", "config": {"recursion_limit": 0}}),
            "unknown_error",
        ),
        ("input.respond", json!({"response": 1}), "invalid_argument"),
        (
            "input.respond",
            json!({"interrupt_id": "x", "response": 1}),
            "no_such_run",
        ),
        (
            "input.inject",
            json!({"namespace": [], "message": {"role": "user", "content": "x"}}),
            "not_supported",
        ),
        (
            "subscription.subscribe",
            json!({"channels": ["values"]}),
            "not_supported",
        ),
        ("state.teleport", json!({}), "unknown_command"),
    ] {
        let reply = command(&app, thread, 7, method, params.clone()).await;
        assert_eq!(reply["type"], "error", "{method} {params}: {reply}");
        assert_eq!(reply["error"], code, "{method} {params}: {reply}");
        assert!(!reply["message"].as_str().unwrap().is_empty());
    }
    // nothing was created by the refused commands
    let missing = app
        .client
        .get(app.url(&format!("/threads/{thread}")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let events = app.url(&format!("/threads/{thread}/stream/events"));
    for (body, says) in [
        (json!({}), "channels is required"),
        (json!({"channels": ["values", "debug"]}), "debug"),
    ] {
        let resp = app
            .client
            .post(events.clone())
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let detail = resp.json::<Value>().await.unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(detail.contains(says), "{detail}");
    }
}

/// Two replicas on one database: a connection on either sees the same events, numbered the
/// same, whichever replica created and ran the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_streams_the_same_tape() {
    use deep_research::store::{self, Store};
    let dir = tempfile::TempDir::new().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let shared: Arc<dyn Store> = Arc::new(
        store::connect(&url, 5, store::SqliteSync::default())
            .await
            .unwrap(),
    );
    let a = support::spawn_on_store(shared.clone(), support::test_settings()).await;
    let b = support::spawn_on_store(shared, support::test_settings()).await;
    let thread = Uuid::now_v7();
    let on_b = open(&b, thread, watcher());
    for (i, text) in ["first", "second"].into_iter().enumerate() {
        command(&a, thread, i as i64 + 1, "run.start",
            json!({"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": text}]}})).await;
        until_terminals(&on_b, i + 1).await;
    }
    let on_a = open(&a, thread, watcher());
    let from_a = until_terminals(&on_a, 2).await;
    let from_b = until_terminals(&on_b, 2).await;
    let key = |frames: &[SseFrame]| -> Vec<(Value, Value, Value)> {
        frames
            .iter()
            .map(|f| {
                (
                    f.data["seq"].clone(),
                    f.data["event_id"].clone(),
                    f.data["method"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(key(&from_a), key(&from_b));
    assert_eq!(
        lifecycle(&from_b).len(),
        4,
        "running and completed, twice: {from_b:?}"
    );
}

/// Event numbers come from the frames' times, not from positions on the tape: a connection
/// opened after a run was deleted numbers the later events as one opened before did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbering_holds_when_an_earlier_run_is_deleted() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let before = open(&app, thread, watcher());
    let first = command(&app, thread, 1, "run.start",
        json!({"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": "one"}]}})).await;
    until_terminals(&before, 1).await;
    let first = first["result"]["run_id"].as_str().unwrap().to_owned();
    let deleted = app
        .client
        .delete(app.url(&format!("/threads/{thread}/runs/{first}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    command(&app, thread, 2, "run.start",
        json!({"assistant_id": "agent", "input": {"messages": [{"type": "human", "content": "two"}]}})).await;
    let old = until_terminals(&before, 2).await;
    let new = until_terminals(&open(&app, thread, watcher()), 1).await;
    assert_eq!(
        lifecycle(&new).len(),
        2,
        "only the second run is left: {new:?}"
    );
    for f in &new {
        let twin = old
            .iter()
            .find(|g| g.data["event_id"] == f.data["event_id"])
            .unwrap();
        assert_eq!(twin.data["seq"], f.data["seq"]);
    }
}

/// While a run is in flight, a thread's last pause is history: new input is a new turn, and a
/// resume queued behind it that no longer matches fails alone, leaving the pause standing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_thread_is_not_waiting_for_an_answer() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let pump = open(&app, thread, watcher());
    command(&app, thread, 1, "run.start",
        json!({"assistant_id": "hitl", "input": {"messages": [{"type": "human", "content": "hi"}]}})).await;
    until_terminals(&pump, 1).await;
    // a queued update keeps the thread busy for a moment, and keeps the question pending
    let runs = app.url(&format!("/threads/{thread}/runs"));
    let update = json!({"assistant_id": "hitl", "after_seconds": 1,
        "command": {"update": {"messages": [{"type": "human", "content": "note"}]}}});
    let resp = app
        .client
        .post(runs.clone())
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let stale = json!({"assistant_id": "hitl", "command": {"resume": {"0123456789abcdef0123456789abcdef": "x"}}});
    let stale: Value = app
        .client
        .post(runs)
        .json(&stale)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stale_id = stale["run_id"].as_str().unwrap();
    let joined: Value = app
        .client
        .get(app.url(&format!("/threads/{thread}/runs/{stale_id}/join")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        joined["__error__"]["message"]
            .as_str()
            .unwrap()
            .contains("0123456789abcdef"),
        "{joined}"
    );
    // the failed resume left the pause standing (the queued update keeps the thread busy)
    let meanwhile = app.get_json(&format!("/threads/{thread}")).await;
    let pending = meanwhile["interrupts"].as_object().map(|m| m.len());
    assert_eq!(pending, Some(1), "{meanwhile}");
    let started = command(&app, thread, 2, "run.start",
        json!({"assistant_id": "hitl", "input": {"messages": [{"type": "human", "content": "new turn"}]}})).await;
    let run_id = started["result"]["run_id"].as_str().unwrap();
    let run = app
        .get_json(&format!("/threads/{thread}/runs/{run_id}"))
        .await;
    assert!(run["kwargs"]["command"].is_null(), "{run}");
    assert_eq!(run["kwargs"]["input"]["messages"][0]["content"], "new turn");
    // then the new turn asks again, and the update keeps the question pending
    until_terminals(&pump, 4).await;
    let thread_now = app.get_json(&format!("/threads/{thread}")).await;
    assert_eq!(thread_now["status"], "interrupted", "{thread_now}");
    let texts: Vec<&str> = thread_now["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["hi", "new turn", "note"]);
}

/// A graceful shutdown ends open event streams (they would hold it up forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_event_streams() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let mut resp = app
        .client
        .post(app.url(&format!("/threads/{thread}/stream/events")))
        .json(&watcher())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    drop(app);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = resp.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream is still open after the shutdown");
}
