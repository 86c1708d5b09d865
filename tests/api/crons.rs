//! Crons fire for real: two replicas on one store each run the scheduler, and a one-minute
//! schedule starts exactly one run per tick (on Postgres when `TEST_DATABASE_URL` is set,
//! else SQLite).

use crate::support;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::{Backend, TestApp, hello, new_thread, spawn_app_on, spawn_replica, test_settings};

async fn primary() -> TestApp {
    if let Some(app) = spawn_app_on(Backend::Postgres, test_settings()).await {
        return app;
    }
    spawn_app_on(Backend::Sqlite, test_settings())
        .await
        .expect("sqlite app")
}

async fn post(app: &TestApp, path: &str, body: Value) -> Value {
    let response = app
        .client
        .post(app.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

async fn runs_of(app: &TestApp, thread: &str) -> Vec<Value> {
    let runs = app.get_json(&format!("/threads/{thread}/runs")).await;
    runs.as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_minute_schedule_fires_once_per_tick_across_two_replicas() {
    let app = primary().await;
    let replica = spawn_replica(&app, 2, support::graphs::registry()).await;
    let thread = new_thread(&app).await;
    let on_thread = post(
        &app,
        &format!("/threads/{thread}/runs/crons"),
        json!({"assistant_id": "agent", "schedule": "* * * * *", "input": hello()}),
    )
    .await;
    // A stateless cron on its own assistant, so its kept thread can be found.
    let assistant = post(&app, "/assistants", json!({"graph_id": "agent"})).await;
    let aid = assistant["assistant_id"].as_str().unwrap().to_owned();
    let stateless = post(
        &replica,
        "/runs/crons",
        json!({"assistant_id": aid, "schedule": "* * * * *", "input": hello(),
               "on_run_completed": "keep"}),
    )
    .await;
    let first_tick = on_thread["next_run_date"].as_str().unwrap().to_owned();
    assert_eq!(&first_tick[17..], "00.000000+00:00", "a whole minute");

    // Up to a minute until the tick, then a little for the run to finish.
    let deadline = Instant::now() + Duration::from_secs(75);
    loop {
        let runs = runs_of(&app, &thread).await;
        if runs.iter().any(|r| r["status"] == "success") {
            break;
        }
        assert!(Instant::now() < deadline, "the cron never ran: {runs:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Both replicas polled through the tick (every second); give the loser time to try.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let runs = runs_of(&app, &thread).await;
    assert_eq!(runs.len(), 1, "one run for the tick: {runs:?}");
    let cron_id = on_thread["cron_id"].as_str().unwrap();
    assert_eq!(runs[0]["metadata"]["cron_id"], cron_id);
    let moved = app.get_json(&format!("/runs/crons/{cron_id}")).await;
    assert!(
        moved["next_run_date"].as_str().unwrap() > first_tick.as_str(),
        "the cron moved on to its next tick: {moved}"
    );

    let kept = post(
        &app,
        "/threads/search",
        json!({"metadata": {"assistant_id": aid}}),
    )
    .await;
    let kept = kept.as_array().unwrap();
    assert_eq!(
        kept.len(),
        1,
        "one stateless run, its thread kept: {kept:?}"
    );
    let stateless_runs = runs_of(&app, kept[0]["thread_id"].as_str().unwrap()).await;
    assert_eq!(stateless_runs.len(), 1);
    assert_eq!(
        stateless_runs[0]["metadata"]["cron_id"],
        stateless["cron_id"]
    );

    for cron in [&on_thread, &stateless] {
        let path = format!("/runs/crons/{}", cron["cron_id"].as_str().unwrap());
        let status = app
            .client
            .delete(app.url(&path))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 204);
    }
}
