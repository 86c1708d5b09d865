//! The thread protocol over a WebSocket (`GET /threads/{id}/stream/events`), over real TCP, as
//! `@langchain/langgraph-sdk`'s WebSocket transport speaks it: commands in text frames, one
//! answer each, events of every subscription on the one socket. (The official clients drive it
//! in `tests/clients`: `useStream` in Chromium, and the Python SDK.)

use crate::support;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;
use support::graphs::REPLY;
use support::{TestApp, spawn_app, spawn_app_on, test_settings};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::StatusCode;
use uuid::Uuid;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn socket_url(app: &TestApp, thread: Uuid) -> String {
    format!(
        "{}/threads/{thread}/stream/events",
        app.address.replacen("http", "ws", 1)
    )
}

async fn connect(app: &TestApp, thread: Uuid, headers: &[(&'static str, &str)]) -> Socket {
    try_connect(app, thread, headers)
        .await
        .unwrap_or_else(|(status, body)| panic!("the socket was refused: {status} {body}"))
}

/// The socket, or the handshake's refusal: its status and body.
async fn try_connect(
    app: &TestApp,
    thread: Uuid,
    headers: &[(&'static str, &str)],
) -> Result<Socket, (StatusCode, String)> {
    let mut request = socket_url(app, thread).into_client_request().unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = response
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            Err((response.status(), body))
        }
        Err(other) => panic!("the handshake failed: {other}"),
    }
}

/// What arrived on a socket: command answers by id, and events in order.
#[derive(Default)]
struct Received {
    answers: Vec<Value>,
    events: Vec<Value>,
}

impl Received {
    fn answer(&self, id: i64) -> Option<&Value> {
        self.answers.iter().find(|a| a["id"] == id)
    }

    fn root_ends(&self) -> usize {
        self.events
            .iter()
            .filter(|e| {
                e["method"] == "lifecycle"
                    && e["params"]["namespace"] == json!([])
                    && ["completed", "failed", "interrupted"]
                        .contains(&e["params"]["data"]["event"].as_str().unwrap_or(""))
            })
            .count()
    }
}

async fn send(socket: &mut Socket, id: i64, method: &str, params: Value) {
    let command = json!({"id": id, "method": method, "params": params});
    socket
        .send(Message::Text(command.to_string().into()))
        .await
        .unwrap();
}

/// Reads frames until `done` holds (30 s at most).
async fn read_until(socket: &mut Socket, got: &mut Received, done: impl Fn(&Received) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(got) {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the socket went quiet before the test saw what it waits for")
            .expect("the socket closed")
            .unwrap();
        let Message::Text(text) = frame else { continue };
        let value: Value = serde_json::from_str(text.as_str()).unwrap();
        if value["type"] == "event" {
            got.events.push(value);
        } else {
            got.answers.push(value);
        }
    }
}

async fn ask(
    socket: &mut Socket,
    got: &mut Received,
    id: i64,
    method: &str,
    params: Value,
) -> Value {
    send(socket, id, method, params).await;
    read_until(socket, got, |r| r.answer(id).is_some()).await;
    got.answer(id).unwrap().clone()
}

fn run_start(thread: Uuid) -> Value {
    json!({"assistant_id": "agent", "config": {"configurable": {"thread_id": thread}},
           "input": {"messages": [{"type": "human", "content": "hi"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_subscribes_runs_and_streams_each_event_once() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let mut socket = connect(&app, thread, &[]).await;
    let mut got = Received::default();
    // as useStream does: the lifecycle watcher, then the root pump, then run.start
    let watcher = ask(
        &mut socket,
        &mut got,
        1,
        "subscription.subscribe",
        json!({"channels": ["lifecycle", "input"]}),
    )
    .await;
    let pump = ask(
        &mut socket,
        &mut got,
        2,
        "subscription.subscribe",
        json!({"channels": ["values", "lifecycle", "input", "messages"], "namespaces": [[]],
               "depth": 1}),
    )
    .await;
    assert_eq!(watcher["type"], "success", "{watcher}");
    let (w, p) = (
        &watcher["result"]["subscription_id"],
        &pump["result"]["subscription_id"],
    );
    assert!(w.is_string() && p.is_string() && w != p, "{watcher} {pump}");
    let started = ask(&mut socket, &mut got, 3, "run.start", run_start(thread)).await;
    assert_eq!(started["type"], "success", "{started}");
    assert!(started["result"]["run_id"].is_string());
    read_until(&mut socket, &mut got, |r| r.root_ends() >= 1).await;

    // both subscriptions pass the lifecycle events: each went out once
    let ids: Vec<&str> = got
        .events
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    let distinct: HashSet<&&str> = ids.iter().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "an event went out twice: {ids:?}"
    );
    let seqs: Vec<u64> = got
        .events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let text: String = got
        .events
        .iter()
        .filter(|e| {
            e["method"] == "messages" && e["params"]["data"]["event"] == "content-block-delta"
        })
        .map(|e| e["params"]["data"]["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, REPLY);
    let values = got
        .events
        .iter()
        .rev()
        .find(|e| e["method"] == "values")
        .unwrap();
    assert_eq!(values["params"]["data"]["messages"][1]["content"], REPLY);

    // a subscription made after the run gets its replay, though the socket sent it before
    let before = got.events.len();
    let late = ask(
        &mut socket,
        &mut got,
        4,
        "subscription.subscribe",
        json!({"channels": ["lifecycle"]}),
    )
    .await;
    assert_eq!(late["type"], "success");
    read_until(&mut socket, &mut got, |r| r.root_ends() >= 2).await;
    let replayed: Vec<&Value> = got.events[before..].iter().collect();
    assert!(
        replayed.iter().all(|e| e["method"] == "lifecycle"),
        "{replayed:?}"
    );

    // the state commands answer on the socket too; a subscription ends once
    let state = ask(&mut socket, &mut got, 5, "state.get", json!({})).await;
    assert_eq!(state["type"], "success", "{state}");
    let gone = ask(
        &mut socket,
        &mut got,
        6,
        "subscription.unsubscribe",
        json!({"subscription_id": w}),
    )
    .await;
    assert_eq!(gone["type"], "success", "{gone}");
    let again = ask(
        &mut socket,
        &mut got,
        7,
        "subscription.unsubscribe",
        json!({"subscription_id": w}),
    )
    .await;
    assert_eq!(again["error"], "no_such_subscription", "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_are_answered_with_the_reason_and_the_socket_stays_open() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let mut socket = connect(&app, thread, &[]).await;
    let mut got = Received::default();
    for (frame, code, says) in [
        (
            Message::Text("{not json".into()),
            "invalid_argument",
            "valid JSON",
        ),
        (
            Message::Text(r#"{"method": "run.start"}"#.into()),
            "invalid_argument",
            "integer id",
        ),
        (
            Message::Binary(vec![1, 2, 3].into()),
            "invalid_argument",
            "text frames",
        ),
        // 150,000 tiny values in 300 kB: counted before they are built, as HTTP bodies are
        (
            Message::Text(
                format!(
                    r#"{{"id": 9, "method": "run.start", "params": {{"input": [{}0]}}}}"#,
                    "0,".repeat(150_000)
                )
                .into(),
            ),
            "invalid_argument",
            "JSON values",
        ),
    ] {
        socket.send(frame).await.unwrap();
        let count = got.answers.len();
        read_until(&mut socket, &mut got, |r| r.answers.len() > count).await;
        let answer = got.answers.last().unwrap();
        assert_eq!(answer["type"], "error", "{answer}");
        assert_eq!(answer["error"], code, "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(says),
            "{answer}"
        );
    }
    for (id, method, params, code) in [
        (
            10,
            "subscription.subscribe",
            json!({"channels": []}),
            "invalid_argument",
        ),
        (
            11,
            "subscription.subscribe",
            json!({"channels": ["debug"]}),
            "invalid_argument",
        ),
        (
            12,
            "subscription.reconnect",
            json!({"channels": ["values"]}),
            "invalid_argument",
        ),
        (
            13,
            "subscription.unsubscribe",
            json!({}),
            "invalid_argument",
        ),
        (14, "state.teleport", json!({}), "unknown_command"),
        (15, "run.start", json!({"input": {}}), "invalid_argument"),
        (16, "agent.getTree", json!({}), "not_supported"),
    ] {
        let answer = ask(&mut socket, &mut got, id, method, params).await;
        assert_eq!(answer["type"], "error", "{method}: {answer}");
        assert_eq!(answer["error"], code, "{method}: {answer}");
    }
    // nothing was created, and the socket still works
    let missing = app
        .client
        .get(app.url(&format!("/threads/{thread}")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let resumed = ask(
        &mut socket,
        &mut got,
        20,
        "subscription.reconnect",
        json!({"channels": ["lifecycle"], "since": 0, "subscription_id": "mine"}),
    )
    .await;
    assert_eq!(resumed["result"]["subscription_id"], "mine", "{resumed}");
    // one socket's subscriptions are capped
    for id in 21..40 {
        let answer = ask(
            &mut socket,
            &mut got,
            id,
            "subscription.subscribe",
            json!({"channels": ["values"]}),
        )
        .await;
        if answer["type"] == "error" {
            assert!(
                answer["message"].as_str().unwrap().contains("at most 16"),
                "{answer}"
            );
            return;
        }
    }
    panic!("a socket took more than 16 subscriptions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_site_cannot_open_a_socket() {
    let settings = deep_research::config::Settings {
        cors_origins: vec!["https://app.example".into()],
        ..test_settings()
    };
    let app = spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .unwrap();
    let thread = Uuid::now_v7();
    let refused = try_connect(&app, thread, &[("origin", "https://evil.example")]).await;
    let (status, body) = refused.expect_err("a cross-site socket was opened");
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("cors_origins"), "{body}");
    let (status, _) = try_connect(&app, thread, &[("sec-fetch-site", "cross-site")])
        .await
        .expect_err("a cross-site socket was opened");
    assert_eq!(status, StatusCode::FORBIDDEN);
    // the listed origin, and clients that are not browsers, get their socket
    connect(&app, thread, &[("origin", "https://app.example")]).await;
    connect(&app, thread, &[]).await;
    // a GET that is not an upgrade is told what the path is
    let plain = app
        .client
        .get(socket_url(&app, thread).replacen("ws", "http", 1))
        .send()
        .await
        .unwrap();
    assert!(plain.status().is_client_error(), "{}", plain.status());
    let detail: Value = plain.json().await.unwrap();
    assert!(
        detail["detail"].as_str().unwrap().contains("WebSocket"),
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_is_closed_as_going_away_when_the_server_stops() {
    let app = spawn_app().await;
    let thread = Uuid::now_v7();
    let mut socket = connect(&app, thread, &[]).await;
    let mut got = Received::default();
    ask(
        &mut socket,
        &mut got,
        1,
        "subscription.subscribe",
        json!({"channels": ["lifecycle"]}),
    )
    .await;
    app.stop();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(frame) = socket.next().await {
            if let Ok(Message::Close(frame)) = frame {
                return frame.map(|f| u16::from(f.code));
            }
        }
        None
    })
    .await
    .expect("the socket stayed open after shutdown");
    assert_eq!(closed, Some(1001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_cannot_open_a_socket_on_a_thread() {
    use crate::tenants::{ALICE, BOB, keyed_settings};
    let dir = tempfile::TempDir::new().unwrap();
    let Some(app) = spawn_app_on(support::Backend::Sqlite, keyed_settings(&dir)).await else {
        return;
    };
    let created: Value = app
        .client
        .post(app.url("/threads"))
        .header("x-api-key", ALICE)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let thread: Uuid = created["thread_id"].as_str().unwrap().parse().unwrap();
    let (status, body) = try_connect(&app, thread, &[]).await.err().unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // bob learns nothing: the thread is not found, as on every other path
    let (status, body) = try_connect(&app, thread, &[("x-api-key", BOB)])
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("detail"), "{body}");
    let mut socket = connect(&app, thread, &[("x-api-key", ALICE)]).await;
    let mut got = Received::default();
    let state = ask(&mut socket, &mut got, 1, "state.get", json!({})).await;
    assert_eq!(state["type"], "success", "{state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_larger_than_a_request_body_closes_that_socket_only() {
    let settings = deep_research::config::Settings {
        max_body_bytes: 4096,
        ..test_settings()
    };
    let app = spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .unwrap();
    let thread = Uuid::now_v7();
    let mut socket = connect(&app, thread, &[]).await;
    let big = format!(
        r#"{{"id":1,"method":"run.start","params":{{"input":"{}"}}}}"#,
        "x".repeat(10_000)
    );
    // the server may close before the whole frame is written: a failed send is fine
    let _ = socket.send(Message::Text(big.into())).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => panic!("a too-large frame was answered: {text}"),
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the socket stayed open after a too-large frame"
    );
    // the service still serves other sockets
    let mut other = connect(&app, thread, &[]).await;
    let mut got = Received::default();
    let watcher = ask(
        &mut other,
        &mut got,
        1,
        "subscription.subscribe",
        json!({"channels": ["lifecycle"]}),
    )
    .await;
    assert_eq!(watcher["type"], "success", "{watcher}");
}
