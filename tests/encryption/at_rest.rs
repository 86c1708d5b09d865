//! Encryption at rest: with a key installed, what users put in (messages, state, run inputs,
//! stored stream events, store items) never reaches the database file in the clear, reads
//! round-trip through the API, searches that would need the plain values are refused, and keys
//! rotate (old ones still read, new writes use the new one). One test: the keys are the
//! process's, so the steps run in order.

use crate::support;

use deep_research::store::crypt::{self, Keys};
use serde_json::{Value, json};
use support::{Backend, TestApp, spawn_app_on, test_settings};

const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const MARKER: &str = "zebra-marker-5d1e";

/// Every byte of the app's SQLite files (database and write-ahead log).
fn file_bytes(app: &TestApp) -> Vec<u8> {
    app.sqlite_files()
        .iter()
        .filter_map(|path| std::fs::read(path).ok())
        .flatten()
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

async fn call(app: &TestApp, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let mut req = app.client.request(method, app.url(path));
    if !body.is_null() {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_sealed_at_rest_and_keys_rotate() {
    let key_a = Keys::parse(KEY_A, "").unwrap();
    let id_a = key_a.current_id().to_owned();
    crypt::install(Some(key_a));
    let app = spawn_app_on(Backend::Sqlite, test_settings())
        .await
        .unwrap();
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;

    // A run whose input (long enough to be stored in chunks) carries the marker, streamed
    // resumably so its events are stored too; a store item with the marker.
    let (_, thread) = call(&app, post.clone(), "/threads", json!({})).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let long = format!("{MARKER} ").repeat(200);
    let input = json!({"messages": [{"type": "human", "content": long, "id": "h1"}]});
    let (status, run) = call(
        &app,
        post.clone(),
        &format!("/threads/{tid}/runs"),
        json!({"assistant_id": "agent", "input": input, "stream_resumable": true}),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    let rid = run["run_id"].as_str().unwrap().to_owned();
    let (status, _) = call(
        &app,
        get.clone(),
        &format!("/threads/{tid}/runs/{rid}/join"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        &app,
        reqwest::Method::PUT,
        "/store/items",
        json!({"namespace": ["notes"], "key": "k1", "value": {"note": MARKER}}),
    )
    .await;
    assert_eq!(status, 204);

    // Everything reads back through the API.
    let (_, state) = call(
        &app,
        get.clone(),
        &format!("/threads/{tid}/state"),
        Value::Null,
    )
    .await;
    assert!(state.to_string().contains(MARKER), "{state}");
    let (_, history) = call(
        &app,
        post.clone(),
        &format!("/threads/{tid}/history"),
        json!({"limit": 5}),
    )
    .await;
    assert!(history.to_string().contains(MARKER));
    let (_, t) = call(&app, get.clone(), &format!("/threads/{tid}"), Value::Null).await;
    assert!(t["values"].to_string().contains(MARKER), "{t}");
    let (_, r) = call(
        &app,
        get.clone(),
        &format!("/threads/{tid}/runs/{rid}"),
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], "success");
    let replay = app
        .client
        .get(app.url(&format!("/threads/{tid}/runs/{rid}/stream")))
        .header("Last-Event-ID", "-1")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        replay.contains(MARKER),
        "stored events replay: {replay:.300}"
    );
    let (_, item) = call(
        &app,
        get.clone(),
        "/store/items?namespace=notes&key=k1",
        Value::Null,
    )
    .await;
    assert_eq!(item["value"]["note"], MARKER);

    // An assistant's config and context, and a cron's payload, are sealed too.
    let (status, assistant) = call(
        &app,
        post.clone(),
        "/assistants",
        json!({"graph_id": "agent", "config": {"configurable": {"note": MARKER}},
               "context": {"note": MARKER}}),
    )
    .await;
    assert_eq!(status, 200, "{assistant}");
    let aid = assistant["assistant_id"].as_str().unwrap().to_owned();
    let (status, cron) = call(
        &app,
        post.clone(),
        &format!("/threads/{tid}/runs/crons"),
        json!({"assistant_id": "agent", "schedule": "0 0 1 1 *",
               "input": {"messages": [{"type": "human", "content": MARKER}]}}),
    )
    .await;
    assert_eq!(status, 200, "{cron}");
    let (_, read) = call(
        &app,
        get.clone(),
        &format!("/assistants/{aid}"),
        Value::Null,
    )
    .await;
    assert_eq!(read["config"]["configurable"]["note"], MARKER, "{read}");
    let (_, versions) = call(
        &app,
        post.clone(),
        &format!("/assistants/{aid}/versions"),
        json!({}),
    )
    .await;
    assert!(versions.to_string().contains(MARKER), "{versions}");
    let (_, crons) = call(&app, post.clone(), "/runs/crons/search", json!({})).await;
    assert!(crons.to_string().contains(MARKER), "{crons}");

    // Nothing of it is in the database files in the clear.
    let bytes = file_bytes(&app);
    assert!(!bytes.is_empty());
    assert!(
        !contains(&bytes, MARKER),
        "the marker is stored in the clear"
    );
    assert!(contains(&bytes, &format!("enc2:{id_a}:")));

    // Searching by what is sealed is refused, not silently empty.
    let (status, v) = call(
        &app,
        post.clone(),
        "/threads/search",
        json!({"values": {"messages": []}}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    let (status, v) = call(
        &app,
        post.clone(),
        "/store/items/search",
        json!({"namespace_prefix": ["notes"], "filter": {"note": MARKER}}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    let (status, _) = call(
        &app,
        post.clone(),
        "/store/items/search",
        json!({"namespace_prefix": ["notes"]}),
    )
    .await;
    assert_eq!(status, 200);

    // The same on Postgres (chunks go in through a JSON array there): values round-trip.
    if let Some(pg) = spawn_app_on(Backend::Postgres, test_settings()).await {
        let (_, thread) = call(&pg, post.clone(), "/threads", json!({})).await;
        let ptid = thread["thread_id"].as_str().unwrap().to_owned();
        let (status, _) = call(
            &pg,
            post.clone(),
            &format!("/threads/{ptid}/runs/wait"),
            json!({"assistant_id": "agent", "input": input}),
        )
        .await;
        assert_eq!(status, 200);
        let (_, state) = call(
            &pg,
            get.clone(),
            &format!("/threads/{ptid}/state"),
            Value::Null,
        )
        .await;
        assert!(state.to_string().contains(MARKER), "{state:.300}");
        let (status, _) = call(
            &pg,
            reqwest::Method::PUT,
            "/store/items",
            json!({"namespace": ["notes"], "key": "k1", "value": {"note": MARKER}}),
        )
        .await;
        assert_eq!(status, 204);
        let (_, item) = call(
            &pg,
            get.clone(),
            "/store/items?namespace=notes&key=k1",
            Value::Null,
        )
        .await;
        assert_eq!(item["value"]["note"], MARKER);
    }

    // Rotation: B is the new key, A is still read.
    let rotated = Keys::parse(KEY_B, KEY_A).unwrap();
    let id_b = rotated.current_id().to_owned();
    crypt::install(Some(rotated));
    let (status, item) = call(
        &app,
        get.clone(),
        "/store/items?namespace=notes&key=k1",
        Value::Null,
    )
    .await;
    assert_eq!(
        (status, item["value"]["note"].clone()),
        (200, json!(MARKER))
    );
    let (status, _) = call(
        &app,
        reqwest::Method::PUT,
        "/store/items",
        json!({"namespace": ["notes"], "key": "k2", "value": {"note": "written with b"}}),
    )
    .await;
    assert_eq!(status, 204);
    let (status, state) = call(
        &app,
        get.clone(),
        &format!("/threads/{tid}/state"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    assert!(state.to_string().contains(MARKER));
    assert!(contains(&file_bytes(&app), &format!("enc2:{id_b}:")));

    // A sealed value is bound to its row: copied onto another row with the database file
    // (no key needed), it does not open there; the API answers an error, not the other
    // row's plaintext.
    for (key, note) in [("k3", "three"), ("k4", "four")] {
        let (status, _) = call(
            &app,
            reqwest::Method::PUT,
            "/store/items",
            json!({"namespace": ["notes"], "key": key, "value": {"note": note}}),
        )
        .await;
        assert_eq!(status, 204);
    }
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", app.sqlite_files()[0].display()))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE store_items SET value = (SELECT value FROM store_items WHERE item_key = 'k3') \
         WHERE item_key = 'k4'",
    )
    .execute(&db)
    .await
    .unwrap();
    db.close().await;
    let (status, v) = call(
        &app,
        get.clone(),
        "/store/items?namespace=notes&key=k4",
        Value::Null,
    )
    .await;
    assert_eq!(status, 500, "the swapped value opened: {v}");
    assert!(!v.to_string().contains("three"), "{v}");

    // A copied thread's checkpoints and chunks are sealed again for the copy's rows.
    let (status, copy) = call(
        &app,
        post.clone(),
        &format!("/threads/{tid}/copy"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{copy}");
    let copy_id = copy["thread_id"].as_str().unwrap();
    let (status, state) = call(
        &app,
        get.clone(),
        &format!("/threads/{copy_id}/state"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{state}");
    assert!(
        state.to_string().contains(MARKER),
        "the copy's state: {state:.300}"
    );

    // A retired key's rows no longer open: an error, never wrong data.
    crypt::install(Some(Keys::parse(KEY_B, "").unwrap()));
    let (status, _) = call(
        &app,
        get.clone(),
        "/store/items?namespace=notes&key=k2",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "B's rows still open");
    let (status, v) = call(
        &app,
        get.clone(),
        "/store/items?namespace=notes&key=k1",
        Value::Null,
    )
    .await;
    assert_eq!(status, 500, "{v}");
    assert_eq!(v["detail"], "internal error");

    // `reseal` (beside the running server) seals every row under B in the current format:
    // then A can go, and A's rows read again.
    let db = app.sqlite_files()[0].clone();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .arg("reseal")
        .arg("--sqlite-path")
        .arg(&db)
        .env("DR_ENCRYPTION_KEY", KEY_B)
        .env("DR_ENCRYPTION_PREVIOUS_KEYS", KEY_A)
        .env_remove("DATABASE_URL")
        .env_remove("DR_CONFIG")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(printed.contains("store_items.value: "), "{printed}");
    let (status, v) = call(
        &app,
        get.clone(),
        "/store/items?namespace=notes&key=k1",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "resealed under B: {v}");
    assert_eq!(v["value"]["note"], MARKER);
    let (status, state) = call(
        &app,
        get.clone(),
        &format!("/threads/{tid}/state"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{state:.300}");
    assert!(state.to_string().contains(MARKER));
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let old: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM store_items WHERE value NOT LIKE '\"enc2:' || $1 || ':%') \
         + (SELECT count(*) FROM checkpoints WHERE writes NOT LIKE '\"enc2:' || $1 || ':%') \
         + (SELECT count(*) FROM runs WHERE kwargs NOT LIKE '\"enc2:' || $1 || ':%')",
    )
    .bind(&id_b)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert_eq!(old, 0, "rows not sealed under B in the current format");
    crypt::install(None);
}

#[test]
fn a_bad_key_stops_the_server_at_start_with_the_reason() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["serve", "--no-auth", "--port", "0"])
        .env("DR_ENCRYPTION_KEY", "too-short")
        .env("DR_SQLITE_PATH", std::env::temp_dir().join("dr-bad-key.db"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DR_ENCRYPTION_KEY"), "{err}");
    assert!(err.contains("base64") || err.contains("32 bytes"), "{err}");
}
