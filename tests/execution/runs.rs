//! Run semantics through the HTTP API, on both storage backends: multitask strategies,
//! cancellation, joining, forking, history and the thread stream.

use crate::support;

use deep_research::store::{EventId, StoredEvent};
use serde_json::{Value, json};
use std::time::Duration;
use support::{
    Backend, TestApp, body_text, hello, new_thread, parse_sse, spawn_app_on, test_settings,
};

/// Defines one test per backend from an async fn taking the app.
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() {
            let app = super::spawn_app_on(super::Backend::Sqlite, super::test_settings()).await.unwrap();
            super::$name(&app).await;
        } )+ }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() {
            let Some(app) = super::spawn_app_on(super::Backend::Postgres, super::test_settings()).await else { return };
            super::$name(&app).await;
        } )+ }
    };
}

both_backends!(
    reject_answers_409_while_busy,
    enqueue_runs_one_after_another,
    interrupt_cancels_the_running_run,
    rollback_deletes_the_cancelled_run_and_its_checkpoints,
    cancel_with_wait_returns_after_the_run_stopped,
    a_second_client_joins_a_running_stream,
    a_client_of_another_replica_follows_a_running_stream,
    a_stream_whose_run_another_replica_claimed_still_ends_with_it,
    waits_and_joins_end_with_a_run_of_another_replica,
    a_replica_lets_go_of_runs_another_replica_executes,
    a_live_join_of_a_pending_run_that_runs_elsewhere_gets_every_frame,
    forking_an_old_checkpoint_makes_a_branch,
    history_chains_checkpoints_newest_first,
    on_disconnect_cancel_stops_the_run,
    stateless_runs_leave_no_thread,
    thread_stream_reports_runs_and_their_end,
    thread_stream_resumes_after_last_event_id,
    thread_stream_follows_runs_another_replica_executes,
    follow_up_runs_continue_the_conversation,
    a_queued_run_announces_itself_at_once,
    a_paused_run_can_be_resumed_the_moment_wait_returns,
);

async fn post(app: &TestApp, path: impl AsRef<str>, body: Value) -> reqwest::Response {
    app.client
        .post(app.url(path.as_ref()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn slow_run(app: &TestApp, tid: &str, secs: f64, strategy: &str) -> reqwest::Response {
    post(
        app,
        &format!("/threads/{tid}/runs"),
        json!({"assistant_id": "slow", "input": hello(), "multitask_strategy": strategy,
               "config": {"configurable": {"sleep_secs": secs}}}),
    )
    .await
}

/// Starts a resumable `slow` run with a stream; returns the response and the run's path.
async fn slow_stream(app: &TestApp, tid: &str, secs: f64) -> (reqwest::Response, String) {
    let resp = post(
        app,
        &format!("/threads/{tid}/runs/stream"),
        json!({"assistant_id": "slow", "input": hello(), "stream_resumable": true,
               "config": {"configurable": {"sleep_secs": secs}}}),
    )
    .await;
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    (resp, location)
}

/// Starts a `slow` run in the background and returns its id.
async fn start_slow(app: &TestApp, tid: &str, secs: f64, strategy: &str) -> String {
    let run: Value = slow_run(app, tid, secs, strategy)
        .await
        .json()
        .await
        .unwrap();
    id(&run, "run_id")
}

async fn run_status(app: &TestApp, tid: &str, rid: &str) -> (u16, Value) {
    let resp = app
        .client
        .get(app.url(&format!("/threads/{tid}/runs/{rid}")))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn wait_for_status(app: &TestApp, tid: &str, rid: &str, want: &str) {
    // Up to 15 s: generous for a loaded machine running both backends' suites at once.
    for _ in 0..600 {
        if run_status(app, tid, rid).await.1["status"] == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "run {rid} never reached {want}: {:?}",
        run_status(app, tid, rid).await
    );
}

/// Waits until the run's input reached the thread state (the node is then running).
async fn wait_for_input_applied(app: &TestApp, tid: &str) {
    for _ in 0..200 {
        let state = app.get_json(&format!("/threads/{tid}/state")).await;
        if state["values"]["messages"][0]["id"] == "h1" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the input never reached the state of thread {tid}");
}

async fn join(app: &TestApp, tid: &str, rid: &str) -> Value {
    app.get_json(&format!("/threads/{tid}/runs/{rid}/join"))
        .await
}

fn id(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .to_owned()
}

async fn reject_answers_409_while_busy(app: &TestApp) {
    let tid = new_thread(app).await;
    let first = start_slow(app, &tid, 1.0, "reject").await;
    wait_for_status(app, &tid, &first, "running").await;
    let second = slow_run(app, &tid, 1.0, "reject").await;
    assert_eq!(second.status(), 409);
    let body: Value = second.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .starts_with("Thread is already running a task")
    );
    let runs: Value = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(
        runs.as_array().unwrap().len(),
        1,
        "the rejected run was not stored"
    );
    let thread = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "busy");
}

async fn enqueue_runs_one_after_another(app: &TestApp) {
    let tid = new_thread(app).await;
    let ra = start_slow(app, &tid, 0.5, "enqueue").await;
    let rb = start_slow(app, &tid, 0.1, "enqueue").await;
    wait_for_status(app, &tid, &ra, "running").await;
    assert_eq!(run_status(app, &tid, &rb).await.1["status"], "pending");
    join(app, &tid, &rb).await;
    assert_eq!(run_status(app, &tid, &ra).await.1["status"], "success");
    assert_eq!(run_status(app, &tid, &rb).await.1["status"], "success");
    let state = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(
        state["values"]["messages"].as_array().unwrap().len(),
        3,
        "h1 merged by id + 2 replies"
    );
}

async fn interrupt_cancels_the_running_run(app: &TestApp) {
    let tid = new_thread(app).await;
    let ra = start_slow(app, &tid, 30.0, "enqueue").await;
    wait_for_status(app, &tid, &ra, "running").await;
    let rb = start_slow(app, &tid, 0.05, "interrupt").await;
    let result = join(app, &tid, &rb).await;
    assert_eq!(
        result["messages"].as_array().unwrap().last().unwrap()["content"],
        "slow done"
    );
    assert_eq!(run_status(app, &tid, &ra).await.1["status"], "interrupted");
    assert_eq!(run_status(app, &tid, &rb).await.1["status"], "success");
}

async fn rollback_deletes_the_cancelled_run_and_its_checkpoints(app: &TestApp) {
    let tid = new_thread(app).await;
    let ra = start_slow(app, &tid, 30.0, "enqueue").await;
    wait_for_status(app, &tid, &ra, "running").await;
    let rb = start_slow(app, &tid, 0.05, "rollback").await;
    join(app, &tid, &rb).await;
    assert_eq!(
        run_status(app, &tid, &ra).await.0,
        404,
        "the rolled-back run is gone"
    );
    let history: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 50}),
    )
    .await
    .json()
    .await
    .unwrap();
    for item in history.as_array().unwrap() {
        assert_ne!(
            item["metadata"]["run_id"].as_str(),
            Some(ra.as_str()),
            "checkpoint of the rolled-back run remains"
        );
    }
}

async fn cancel_with_wait_returns_after_the_run_stopped(app: &TestApp) {
    let tid = new_thread(app).await;
    let ra = start_slow(app, &tid, 30.0, "enqueue").await;
    wait_for_status(app, &tid, &ra, "running").await;
    wait_for_input_applied(app, &tid).await;
    let started = std::time::Instant::now();
    let resp = post(
        app,
        &format!("/threads/{tid}/runs/{ra}/cancel?wait=1"),
        Value::Null,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let values: Value = resp.json().await.unwrap();
    assert_eq!(values["messages"][0]["id"], "h1");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cancel stops the node promptly"
    );
    assert_eq!(run_status(app, &tid, &ra).await.1["status"], "interrupted");
    let thread = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(
        thread["status"], "interrupted",
        "the cancelled run left its node pending"
    );
    let missing = post(
        app,
        &format!("/threads/{tid}/runs/{}/cancel", uuid::Uuid::new_v4()),
        Value::Null,
    )
    .await;
    assert_eq!(missing.status(), 404);
    // Cancel without wait answers 202 with no body.
    let rb = start_slow(app, &tid, 30.0, "enqueue").await;
    let resp = post(
        app,
        &format!("/threads/{tid}/runs/{rb}/cancel"),
        Value::Null,
    )
    .await;
    assert_eq!(resp.status(), 202);
}

async fn a_second_client_joins_a_running_stream(app: &TestApp) {
    let tid = new_thread(app).await;
    let (resp, location) = slow_stream(app, &tid, 0.6).await;
    // Give the run time to publish its first frames, then join from the start and live.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let joined = app
        .client
        .get(app.url(&location))
        .header("last-event-id", "-1")
        .send()
        .await
        .unwrap();
    let live_only = app.client.get(app.url(&location)).send().await.unwrap();
    let original = parse_sse(&resp.text().await.unwrap());
    let replayed = parse_sse(&joined.text().await.unwrap());
    assert_eq!(
        replayed, original,
        "joining with -1 mid-run sees every frame once"
    );
    let live = parse_sse(&live_only.text().await.unwrap());
    assert_eq!(
        live.last(),
        original.last(),
        "a live joiner gets the final values"
    );
    assert!(live.len() < original.len());
}

/// A second replica whose one worker is busy for `secs` with a run (its id is returned), so
/// `app` claims the runs created through the replica meanwhile.
async fn busy_replica(app: &TestApp, secs: f64) -> (TestApp, String) {
    let replica = support::spawn_replica(app, 1, support::graphs::registry()).await;
    // Both processes claim from one store: under load `app` may take the run first. Only a
    // run the replica's one worker executes makes it busy, so try until it does.
    for _ in 0..10 {
        let busy_thread = new_thread(&replica).await;
        let busy = start_slow(&replica, &busy_thread, secs, "reject").await;
        wait_for_status(&replica, &busy_thread, &busy, "running").await;
        let here = replica
            .bus
            .get(busy.parse().unwrap())
            .is_some_and(|c| c.is_executing_here());
        if here {
            return (replica, busy);
        }
        let cancel = format!("/threads/{busy_thread}/runs/{busy}/cancel");
        replica
            .client
            .post(replica.url(&cancel))
            .send()
            .await
            .unwrap();
    }
    panic!("the replica never executed a run of its own");
}

/// A response body, failing the test if it has not ended within 20 s (a stream that never ends
/// is the bug these tests look for).
async fn body_within(resp: reqwest::Response, what: &str) -> String {
    tokio::time::timeout(Duration::from_secs(20), resp.text())
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .unwrap()
}

/// Every stored frame of a run's stream, replayed through `app`.
async fn stored_frames(app: &TestApp, stream: &str) -> Vec<support::SseFrame> {
    let body = body_text(
        app.client
            .get(app.url(stream))
            .header("last-event-id", "-1"),
    )
    .await;
    parse_sse(&body)
}

async fn a_client_of_another_replica_follows_a_running_stream(app: &TestApp) {
    let replica = support::spawn_replica(app, 8, support::graphs::registry()).await;
    // The replica's workers may claim the run first; start runs until `app` executes one.
    let mut started = None;
    for _ in 0..10 {
        let tid = new_thread(app).await;
        let (resp, location) = slow_stream(app, &tid, 0.6).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let run_id = location.split('/').nth(4).unwrap().parse().unwrap();
        if app.bus.get(run_id).is_some_and(|c| c.is_executing_here()) {
            started = Some((resp, location));
            break;
        }
        resp.text().await.unwrap();
    }
    let (resp, location) = started.expect("app never executed a run of its own");
    // The run is live only in `app`; the replica has nothing of it but the store.
    let join = |last_event_id: Option<&'static str>| {
        let mut request = replica.client.get(replica.url(&location));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send()
    };
    let (from_start, live_only) = tokio::join!(join(Some("-1")), join(None));
    let original = parse_sse(&resp.text().await.unwrap());
    let followed = parse_sse(&from_start.unwrap().text().await.unwrap());
    assert_eq!(
        followed, original,
        "a joiner on another replica sees every frame once, to the end"
    );
    let live = parse_sse(&live_only.unwrap().text().await.unwrap());
    assert_eq!(live.last(), original.last(), "a live joiner gets the end");
    assert!(live.len() < original.len());
}

async fn a_stream_whose_run_another_replica_claimed_still_ends_with_it(app: &TestApp) {
    let (replica, _) = busy_replica(app, 2.0).await;
    let tid = new_thread(&replica).await;
    let (resp, location) = slow_stream(&replica, &tid, 0.3).await;
    // A frame stamped by a replica whose clock is 10 s behind the one that announced the run.
    let run_id = location.split('/').nth(4).unwrap().parse().unwrap();
    let behind = deep_research::time::Timestamp::now().millis() - 10_000;
    app.store
        .append_events(&[StoredEvent {
            run_id,
            thread_id: tid.parse().unwrap(),
            id: EventId { ms: behind, seq: 0 },
            event: "values".into(),
            data: r#"{"from":"a slow clock"}"#.into(),
        }])
        .await
        .unwrap();
    let body = body_within(resp, "the stream ends when the run does, not never").await;
    let announced = parse_sse(&body);
    // Where it ran, the whole stream is stored, its own `metadata` included; the replica's
    // announcement of the run was not stored, and the client gets one `metadata`, not two.
    let (metadata, frames): (Vec<_>, Vec<_>) = stored_frames(app, &location)
        .await
        .into_iter()
        .partition(|f| f.event == "metadata");
    assert_eq!(
        (announced[0].event.as_str(), &announced[0].data),
        ("metadata", &metadata[0].data)
    );
    assert_eq!(
        &announced[1..],
        &frames[..],
        "every frame of the run once, to its end, whatever clock stamped it"
    );
    assert_eq!(frames[0].data["from"], "a slow clock");
    assert_eq!(frames.last().map(|f| f.event.as_str()), Some("values"));
}

async fn a_replica_lets_go_of_runs_another_replica_executes(app: &TestApp) {
    let (replica, busy) = busy_replica(app, 3.0).await;
    let tid = new_thread(&replica).await;
    let background = start_slow(&replica, &tid, 0.2, "reject").await;
    let other = new_thread(&replica).await;
    let (resp, _) = slow_stream(&replica, &other, 0.2).await;
    let streamed = parse_sse(&body_within(resp, "the stream ends with its run").await);
    wait_for_status(app, &tid, &background, "success").await;
    // Nobody here executes or waits for them: the replica keeps no channel for either.
    let mut kept = Vec::new();
    for _ in 0..100 {
        kept = [&background, &id(&streamed[0].data, "run_id")]
            .into_iter()
            .filter(|rid| replica.bus.get(rid.parse().unwrap()).is_some())
            .cloned()
            .collect();
        if kept.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        kept.is_empty(),
        "channels kept for runs run elsewhere: {kept:?}"
    );
    assert!(
        replica.bus.get(busy.parse().unwrap()).is_some(),
        "the run executing on the replica keeps its channel"
    );
}

async fn a_live_join_of_a_pending_run_that_runs_elsewhere_gets_every_frame(app: &TestApp) {
    let (replica, _) = busy_replica(app, 3.0).await;
    let tid = new_thread(&replica).await;
    let run: Value = post(
        &replica,
        &format!("/threads/{tid}/runs"),
        // Held back a moment, so the join below really comes before the run starts (a
        // worker of the other replica could otherwise store its first frames first).
        json!({"assistant_id": "slow", "input": hello(), "stream_resumable": true,
               "after_seconds": 0.5, "config": {"configurable": {"sleep_secs": 1.5}}}),
    )
    .await
    .json()
    .await
    .unwrap();
    let stream = format!("/threads/{tid}/runs/{}/stream", id(&run, "run_id"));
    // Joined while the run is still pending: everything it does is after the join.
    let joined = replica
        .client
        .get(replica.url(&stream))
        .send()
        .await
        .unwrap();
    let body = body_within(joined, "the join ends with the run").await;
    assert_eq!(
        parse_sse(&body),
        stored_frames(app, &stream).await,
        "every frame, from the first"
    );
}

async fn waits_and_joins_end_with_a_run_of_another_replica(app: &TestApp) {
    let (replica, _) = busy_replica(app, 2.0).await;
    // Created through the replica, run by `app`: the replica waits on the store.
    let tid = new_thread(&replica).await;
    let path = format!("/threads/{tid}/runs/wait");
    let body = json!({"assistant_id": "slow", "input": hello(),
                      "config": {"configurable": {"sleep_secs": 0.3}}});
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        post(&replica, &path, body).await.text().await.unwrap()
    })
    .await
    .expect("the wait ends when the run does");
    let waited: Value = serde_json::from_str(waited.trim()).unwrap();
    let state = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(waited, state["values"], "the run's final values");
    assert!(waited["messages"].as_array().is_some_and(|m| m.len() >= 2));
    // Run by `app`, joined through the replica while it runs.
    let other = new_thread(app).await;
    let rid = start_slow(app, &other, 0.5, "reject").await;
    let joined = replica
        .client
        .get(replica.url(&format!("/threads/{other}/runs/{rid}/join")))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let (_, run) = run_status(app, &other, &rid).await;
    assert_eq!(
        run["status"], "success",
        "join returned after the run ended"
    );
    let state = app.get_json(&format!("/threads/{other}/state")).await;
    assert_eq!(joined, state["values"]);
}

async fn forking_an_old_checkpoint_makes_a_branch(app: &TestApp) {
    let tid = new_thread(app).await;
    let wait = |body: Value| post(app, format!("/threads/{tid}/runs/wait"), body);
    wait(json!({"assistant_id": "agent", "input": hello()}))
        .await
        .text()
        .await
        .unwrap();
    let history: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 10}),
    )
    .await
    .json()
    .await
    .unwrap();
    let input_cp = history
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["metadata"]["source"] == "input")
        .unwrap_or_else(|| panic!("no input checkpoint in {history:#}"));
    let cid = id(&input_cp["checkpoint"], "checkpoint_id");
    let values: Value = wait(json!({"assistant_id": "agent", "checkpoint_id": cid}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        values["messages"].as_array().unwrap().len(),
        2,
        "regenerated from the input checkpoint"
    );
    let history: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 10}),
    )
    .await
    .json()
    .await
    .unwrap();
    let items = history.as_array().unwrap();
    let fork = items
        .iter()
        .find(|h| h["metadata"]["source"] == "fork")
        .expect("a fork checkpoint");
    assert_eq!(fork["parent_checkpoint"]["checkpoint_id"], json!(cid));
    let children = items
        .iter()
        .filter(|h| h["parent_checkpoint"]["checkpoint_id"] == json!(cid))
        .count();
    assert_eq!(children, 2, "the input checkpoint now has two branches");
    let head = app.get_json(&format!("/threads/{tid}/state")).await;
    assert_eq!(head["checkpoint"], items[0]["checkpoint"]);
}

async fn history_chains_checkpoints_newest_first(app: &TestApp) {
    let tid = new_thread(app).await;
    post(
        app,
        &format!("/threads/{tid}/runs/wait"),
        json!({"assistant_id": "parent", "input": hello()}),
    )
    .await
    .text()
    .await
    .unwrap();
    let history: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 10}),
    )
    .await
    .json()
    .await
    .unwrap();
    let items = history.as_array().unwrap();
    assert_eq!(items.len(), 4, "input, input applied, child, agent");
    for pair in items.windows(2) {
        assert_eq!(pair[0]["parent_checkpoint"], pair[1]["checkpoint"]);
        assert!(id(&pair[0], "checkpoint_id") > id(&pair[1], "checkpoint_id"));
    }
    let oldest = items.last().unwrap();
    assert_eq!(oldest["metadata"]["source"], "input");
    assert_eq!(oldest["metadata"]["step"], -1);
    assert_eq!(oldest["parent_checkpoint"], Value::Null);
    assert_eq!(oldest["next"], json!(["__start__"]));
    assert!(
        oldest["values"]["messages"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "input not applied yet"
    );
    assert_eq!(items[2]["next"], json!(["child"]));
    assert_eq!(items[0]["next"], json!([]));
    let before = id(&items[0], "checkpoint_id");
    let older: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 10, "before": before}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(older.as_array().unwrap().len(), 3);
    let filtered: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 10, "metadata": {"source": "input"}}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(filtered.as_array().unwrap().len(), 1);
    let sub: Value = app
        .get_json(&format!("/threads/{tid}/history?limit=5"))
        .await;
    assert_eq!(sub.as_array().unwrap().len(), 4);
    let at = app
        .get_json(&format!(
            "/threads/{tid}/state/{}",
            id(&items[1], "checkpoint_id")
        ))
        .await;
    assert_eq!(
        at["values"]["messages"].as_array().unwrap().len(),
        2,
        "state at the child step"
    );
}

/// A run that pauses for a person has left its thread waiting for the answer by the time
/// `/wait` returns: a client that resumes at once (the default strategy, `reject`) is not told
/// the thread is busy. Ten rounds, since a race would lose only some of them.
async fn a_paused_run_can_be_resumed_the_moment_wait_returns(app: &TestApp) {
    for round in 0..10 {
        let tid = new_thread(app).await;
        let path = format!("/threads/{tid}/runs/wait");
        let paused = post(
            app,
            &path,
            json!({"assistant_id": "hitl", "input": hello()}),
        )
        .await;
        assert_eq!(paused.status(), 200, "round {round}");
        let paused: Value = paused.json().await.unwrap();
        assert!(
            paused["__interrupt__"][0]["id"].is_string(),
            "round {round}: {paused}"
        );
        let thread = app.get_json(&format!("/threads/{tid}")).await;
        assert_eq!(thread["status"], "interrupted", "round {round}: {thread}");
        let resumed = post(
            app,
            &path,
            json!({"assistant_id": "hitl", "command": {"resume": "yes"}}),
        )
        .await;
        let status = resumed.status();
        let done: Value = resumed.json().await.unwrap();
        assert_eq!(status, 200, "round {round}: {done}");
        assert!(done.get("__interrupt__").is_none(), "round {round}: {done}");
        let thread = app.get_json(&format!("/threads/{tid}")).await;
        assert_eq!(thread["status"], "idle", "round {round}: {thread}");
    }
}

async fn on_disconnect_cancel_stops_the_run(app: &TestApp) {
    let tid = new_thread(app).await;
    let resp = post(
        app,
        &format!("/threads/{tid}/runs/stream"),
        json!({"assistant_id": "slow", "input": hello(), "on_disconnect": "cancel",
               "config": {"configurable": {"sleep_secs": 30}}}),
    )
    .await;
    let content_location = resp.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_owned();
    let rid = content_location.rsplit('/').next().unwrap().to_owned();
    wait_for_status(app, &tid, &rid, "running").await;
    drop(resp);
    wait_for_status(app, &tid, &rid, "interrupted").await;
}

async fn stateless_runs_leave_no_thread(app: &TestApp) {
    let values: Value = post(
        app,
        "/runs/wait",
        json!({"assistant_id": "agent", "input": hello()}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(values["messages"][1]["content"], support::graphs::REPLY);
    let count: Value = post(app, "/threads/count", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(count, 0, "the temporary thread was deleted");
    let kept: Value = post(
        app,
        "/runs",
        json!({"assistant_id": "agent", "input": hello(), "on_completion": "keep"}),
    )
    .await
    .json()
    .await
    .unwrap();
    join(app, &id(&kept, "thread_id"), &id(&kept, "run_id")).await;
    let count: Value = post(app, "/threads/count", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(count, 1);
}

async fn thread_stream_reports_runs_and_their_end(app: &TestApp) {
    let tid = new_thread(app).await;
    let stream = app
        .client
        .get(app.url(&format!("/threads/{tid}/stream")))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let reader = tokio::spawn(async move {
        let mut stream = stream;
        let mut text = String::new();
        while let Ok(Some(chunk)) = stream.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if text.contains("run_done") {
                break;
            }
        }
        text
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    post(
        app,
        &format!("/threads/{tid}/runs/wait"),
        json!({"assistant_id": "agent", "input": hello()}),
    )
    .await
    .text()
    .await
    .unwrap();
    let text = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .unwrap()
        .unwrap();
    let frames = parse_sse(&text);
    assert_eq!(frames[0].event, "metadata");
    assert!(
        frames.iter().all(|f| f.id.is_some()),
        "thread streams always carry ids"
    );
    assert_eq!(frames.last().unwrap().data["status"], "run_done");
}

async fn follow_up_runs_continue_the_conversation(app: &TestApp) {
    let tid = new_thread(app).await;
    let wait = |text: &str, mid: &str| {
        post(
            app,
            format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text, "id": mid}]}}),
        )
    };
    wait("first", "m1").await.text().await.unwrap();
    let values: Value = wait("second", "m2").await.json().await.unwrap();
    let contents: Vec<&str> = values["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "first",
            support::graphs::REPLY,
            "second",
            support::graphs::REPLY
        ]
    );
    let thread = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["metadata"]["graph_id"], "agent");
    assert_eq!(
        thread["metadata"]["assistant_id"],
        "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
    );
    assert_eq!(thread["values"], values);
    let history: Value = post(
        app,
        &format!("/threads/{tid}/history"),
        json!({"limit": 10}),
    )
    .await
    .json()
    .await
    .unwrap();
    let steps: Vec<i64> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["metadata"]["step"].as_i64().unwrap())
        .collect();
    assert_eq!(
        steps,
        [4, 3, 2, 1, 0, -1],
        "steps keep counting across runs"
    );
}

async fn a_queued_run_announces_itself_at_once(app: &TestApp) {
    let tid = new_thread(app).await;
    let ra = start_slow(app, &tid, 30.0, "enqueue").await;
    wait_for_status(app, &tid, &ra, "running").await;
    let mut queued = post(
        app,
        format!("/threads/{tid}/runs/stream"),
        json!({"assistant_id": "agent", "input": hello(), "multitask_strategy": "enqueue"}),
    )
    .await;
    let first = tokio::time::timeout(Duration::from_secs(2), queued.chunk())
        .await
        .expect("the metadata event arrives while the run waits in the queue")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&first);
    assert!(text.starts_with("event: metadata\r\n"), "{text}");
    let rb = queued.headers()["content-location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    assert!(text.contains(&rb));
    assert_eq!(run_status(app, &tid, &rb).await.1["status"], "pending");
    post(app, format!("/threads/{tid}/runs/{ra}/cancel"), Value::Null).await;
    let rest = queued.text().await.unwrap();
    assert_eq!(rest.matches("event: metadata").count(), 0, "announced once");
    assert!(rest.contains("event: values"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_run_fails_with_the_reason_and_its_worker_goes_on() {
    // One worker: if the panic took it down, the second run would never start.
    let settings = deep_research::config::Settings {
        max_concurrent_runs: 1,
        ..support::test_settings()
    };
    let app = support::spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .unwrap();
    let tid = new_thread(&app).await;
    let client = deep_research::outbound::client_builder().build().unwrap();
    let url = app.url(&format!("/threads/{tid}/runs/wait"));
    let panicking = json!({"assistant_id": "err", "input": {"messages": []},
                           "config": {"configurable": {"panic": true}}});
    let result: Value = client
        .post(&url)
        .json(&panicking)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(result["__error__"]["error"], "InternalError", "{result}");
    let runs = app.get_json(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs[0]["status"], "error", "{runs}");
    let thread = app.get_json(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "error", "{thread}");

    let next: Value = client
        .post(&url)
        .json(&json!({"assistant_id": "agent", "input": {"messages": [
            {"role": "user", "content": "hi"}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        next["messages"].as_array().is_some_and(|m| m.len() == 2),
        "{next}"
    );
}

/// Reads a thread stream until it has seen `runs` `run_done` markers.
async fn read_thread_stream(
    app: &TestApp,
    tid: &str,
    last_event_id: Option<&str>,
    query: &str,
    runs: usize,
) -> Vec<support::SseFrame> {
    let mut request = app
        .client
        .get(app.url(&format!("/threads/{tid}/stream{query}")));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let mut stream = request.send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let read = async {
        let mut text = String::new();
        while let Ok(Some(chunk)) = stream.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if text.matches("run_done").count() >= runs && text.ends_with("\r\n\r\n") {
                break;
            }
        }
        text
    };
    let text = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the thread stream ended its runs");
    parse_sse(&text)
}

fn run_done(frames: &[support::SseFrame]) -> Vec<&support::SseFrame> {
    frames
        .iter()
        .filter(|f| f.data["status"] == "run_done")
        .collect()
}

async fn thread_stream_resumes_after_last_event_id(app: &TestApp) {
    let tid = new_thread(app).await;
    for text in ["one", "two"] {
        post(
            app,
            format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "agent", "stream_resumable": true,
                   "input": {"messages": [{"role": "user", "content": text}]}}),
        )
        .await
        .text()
        .await
        .unwrap();
    }
    // From the start: both runs' frames, each run closed by its marker.
    let all = read_thread_stream(app, &tid, Some("-1"), "", 2).await;
    let done = run_done(&all);
    assert_eq!(done.len(), 2, "{all:?}");
    assert_eq!(all[0].event, "metadata");
    assert!(all.iter().any(|f| f.event == "values"));
    let ids: Vec<EventId> = all
        .iter()
        .map(|f| f.id.as_deref().unwrap().parse().unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids increase across runs: {ids:?}"
    );

    // After the first run's marker: exactly what followed it.
    let first_done = done[0].id.clone().unwrap();
    let at = all
        .iter()
        .position(|f| f.id.as_deref() == Some(first_done.as_str()))
        .unwrap();
    let rest = read_thread_stream(app, &tid, Some(&first_done), "", 1).await;
    assert_eq!(rest, all[at + 1..].to_vec());

    // Narrowed to the lifecycle: each run's start and end.
    let lifecycle = read_thread_stream(app, &tid, Some("-1"), "?stream_mode=lifecycle", 2).await;
    let events: Vec<&str> = lifecycle.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(events, ["metadata"; 4], "{lifecycle:?}");
    let only_values = read_thread_stream(app, &tid, Some("-1"), "?stream_mode=values", 2).await;
    // Run stream modes narrow the frames as on a run's stream (its `metadata` always passes).
    assert!(only_values.iter().any(|f| f.event == "values"));
    assert!(
        only_values
            .iter()
            .all(|f| ["values", "metadata"].contains(&f.event.as_str())),
        "{only_values:?}"
    );

    for (query, header) in [
        ("?stream_mode=state_update", None),
        ("?stream_mode=nope", None),
        ("", Some("x-y")),
    ] {
        let mut request = app
            .client
            .get(app.url(&format!("/threads/{tid}/stream{query}")));
        if let Some(h) = header {
            request = request.header("last-event-id", h);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 422, "{query} {header:?}");
    }
}

async fn thread_stream_follows_runs_another_replica_executes(app: &TestApp) {
    // The replica looks for no work of its own: the run below goes to `app`'s workers, and the
    // replica's stream sees it only through the store.
    let replica = support::spawn_replica(app, 1, support::graphs::registry()).await;
    let tid = new_thread(app).await;
    let stream = tokio::spawn({
        let replica_url = replica.address.clone();
        let tid = tid.clone();
        async move {
            let client = deep_research::outbound::client_builder().build().unwrap();
            let mut stream = client
                .get(format!("{replica_url}/threads/{tid}/stream"))
                .send()
                .await
                .unwrap();
            let mut text = String::new();
            while let Ok(Some(chunk)) = stream.chunk().await {
                text.push_str(&String::from_utf8_lossy(&chunk));
                if text.contains("run_done") && text.ends_with("\r\n\r\n") {
                    break;
                }
            }
            text
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let created = post(
        app,
        format!("/threads/{tid}/runs"),
        json!({"assistant_id": "agent", "stream_resumable": true, "input": hello()}),
    )
    .await
    .json::<Value>()
    .await
    .unwrap();
    join(app, &tid, &id(&created, "run_id")).await;
    let text = tokio::time::timeout(Duration::from_secs(20), stream)
        .await
        .expect("the replica saw the run end")
        .unwrap();
    let frames = parse_sse(&text);
    assert!(frames.iter().any(|f| f.event == "values"), "{frames:?}");
    assert_eq!(frames.last().unwrap().data["run_id"], created["run_id"]);
}
