//! Bad input gets a 4xx with a clear `{"detail"}` and changes nothing.

use crate::support;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::{hello, new_thread, spawn_app, test_settings};

async fn call(
    app: &support::TestApp,
    method: Method,
    path: &str,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = app.client.request(method, app.url(path));
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_owned());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, json)
}

fn detail(v: &Value) -> &str {
    v["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("no detail in {v}"))
}

async fn counts(app: &support::TestApp) -> (i64, usize) {
    let threads: Value = app
        .client
        .post(app.url("/threads/count"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let page = app
        .store
        .search_threads(&deep_research::store::ThreadQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut runs = 0;
    for t in &page.items {
        runs += app
            .store
            .list_runs(t.thread_id, None, 100, 0)
            .await
            .unwrap()
            .len();
    }
    (threads.as_i64().unwrap(), runs)
}

#[tokio::test]
async fn malformed_ids_are_422_with_detail() {
    let app = spawn_app().await;
    for (method, path) in [
        (Method::GET, "/threads/not-a-uuid"),
        (Method::GET, "/threads/not-a-uuid/state"),
        (Method::POST, "/threads/not-a-uuid/history"),
        (Method::POST, "/threads/not-a-uuid/runs/stream"),
        (
            Method::GET,
            "/threads/00000000-0000-0000-0000-000000000000/runs/nope",
        ),
    ] {
        let body = (method == Method::POST).then_some(r#"{"assistant_id":"agent"}"#);
        let (status, v) = call(&app, method, path, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {v}");
        assert!(detail(&v).contains("must be a UUID"), "{path}: {v}");
    }
    // Each id in a path is named by what it is, in the reference's words.
    let nil = "00000000-0000-0000-0000-000000000000";
    for (path, expected) in [
        (
            "/threads/zzz".to_owned(),
            "Invalid thread ID: must be a UUID",
        ),
        (
            format!("/threads/{nil}/runs/zzz"),
            "Invalid run ID: must be a UUID",
        ),
        (
            format!("/threads/{nil}/state/zzz"),
            "Invalid checkpoint ID: must be a UUID",
        ),
        (
            "/runs/crons/zzz".to_owned(),
            "Invalid cron ID: must be a UUID",
        ),
    ] {
        let (status, v) = call(&app, Method::GET, &path, None).await;
        assert_eq!(
            (status, detail(&v)),
            (StatusCode::UNPROCESSABLE_ENTITY, expected),
            "{path}"
        );
    }
}

#[tokio::test]
async fn unknown_things_are_404_with_detail() {
    let app = spawn_app().await;
    let missing = uuid::Uuid::new_v4();
    let (status, v) = call(&app, Method::GET, &format!("/threads/{missing}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(detail(&v), format!("Thread with ID {missing} not found"));
    let (status, v) = call(
        &app,
        Method::POST,
        &format!("/threads/{missing}/runs"),
        Some(r#"{"assistant_id":"agent"}"#),
    )
    .await;
    assert_eq!(
        (status, detail(&v)),
        (StatusCode::NOT_FOUND, "Thread or assistant not found.")
    );
    let (status, v) = call(&app, Method::GET, &format!("/assistants/{missing}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    let tid = new_thread(&app).await;
    let (status, v) = call(
        &app,
        Method::POST,
        &format!("/threads/{tid}/runs"),
        Some(r#"{"assistant_id":"nope"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(detail(&v).starts_with("Invalid assistant: 'nope'"), "{v}");
    assert!(
        detail(&v).contains("agent"),
        "lists the registered graphs: {v}"
    );
}

#[tokio::test]
async fn bad_run_bodies_are_rejected_and_write_nothing() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let before = counts(&app).await;
    let path = format!("/threads/{tid}/runs/stream");
    for (body, needle) in [
        ("{not json", "Invalid request body"),
        (r#"{"input": {}}"#, "assistant_id"),
        (
            r#"{"assistant_id":"agent","stream_mode":"bogus"}"#,
            "Invalid stream_mode 'bogus'",
        ),
        (
            r#"{"assistant_id":"agent","stream_mode":["values","lifecycle"]}"#,
            "lifecycle",
        ),
        (
            r#"{"assistant_id":"agent","multitask_strategy":"sometimes"}"#,
            "multitask_strategy",
        ),
        (
            r#"{"assistant_id":"agent","on_disconnect":"explode"}"#,
            "on_disconnect",
        ),
        (
            r#"{"assistant_id":"agent","config":{"recursion_limit":0}}"#,
            "recursion_limit",
        ),
        (
            r#"{"assistant_id":"agent","checkpoint_id":"xyz"}"#,
            "checkpoint ID",
        ),
        // Each field is read as its type, and the error names the field.
        (
            r#"{"assistant_id":"agent","command":{"resume":1,"jump":"x"}}"#,
            "command.jump: unknown field `jump`",
        ),
        (
            r#"{"assistant_id":"agent","interrupt_before":5}"#,
            "interrupt_before",
        ),
        (
            r#"{"assistant_id":"agent","if_not_exists":"sometimes"}"#,
            "if_not_exists: unknown variant `sometimes`",
        ),
        (r#"{"assistant_id":"agent","context":[1]}"#, "context"),
        (
            r#"{"assistant_id":"agent","config":{"configurable":"x"}}"#,
            "config.configurable",
        ),
        (
            r#"{"assistant_id":"agent","feedback_keys":"x"}"#,
            "feedback_keys",
        ),
    ] {
        let (status, v) = call(&app, Method::POST, &path, Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
        assert!(detail(&v).contains(needle), "{body}: {v}");
    }
    let (status, v) = call(
        &app,
        Method::POST,
        &path,
        Some(r#"{"assistant_id":"agent","config":{"configurable":{"a":1}},"context":{"b":2}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(counts(&app).await, before, "nothing was written");
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let settings = deep_research::config::Settings {
        max_body_bytes: 1024,
        ..test_settings()
    };
    let app = support::spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .unwrap();
    let big = json!({"metadata": {"blob": "x".repeat(4096)}}).to_string();
    let (status, v) = call(&app, Method::POST, "/threads", Some(&big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(detail(&v).contains("too large"));
    assert_eq!(counts(&app).await.0, 0);
}

#[tokio::test]
async fn search_validation_names_the_field() {
    let app = spawn_app().await;
    for (path, body, needle) in [
        ("/threads/search", r#"{"limit": 0}"#, "limit"),
        ("/threads/search", r#"{"status": "sleeping"}"#, "status"),
        ("/threads/search", r#"{"sort_by": "nonsense"}"#, "sort_by"),
        // The column a sort names is one of a list: SQL in it is refused, never run.
        (
            "/assistants/search",
            r#"{"sort_by": "name; DROP TABLE assistants"}"#,
            "sort_by: unknown variant",
        ),
        ("/runs/crons/search", r#"{"sort_by": "created"}"#, "sort_by"),
        (
            "/threads/search",
            r#"{"ids": ["not-a-uuid"]}"#,
            "Invalid thread ID",
        ),
        (
            "/assistants/search",
            r#"{"sort_order": "sideways"}"#,
            "sort_order",
        ),
        ("/threads", r#"{"if_exists": "maybe"}"#, "if_exists"),
    ] {
        let (status, v) = call(&app, Method::POST, path, Some(body)).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path} {body}: {v}"
        );
        assert!(detail(&v).contains(needle), "{v}");
    }
}

#[tokio::test]
async fn api_key_is_enforced_when_configured() {
    let settings = deep_research::config::Settings {
        api_key: Some("s3cret".into()),
        ..test_settings()
    };
    let app = support::spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .unwrap();
    assert_eq!(
        app.client
            .get(app.url("/ok"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        app.client
            .get(app.url("/info"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let denied = app
        .client
        .post(app.url("/threads"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    let ok = app
        .client
        .post(app.url("/threads"))
        .header("x-api-key", "s3cret")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let preflight = app
        .client
        .request(Method::OPTIONS, app.url("/threads"))
        .header("origin", "http://example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,x-api-key,x-auth-scheme",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 200);
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    assert_eq!(
        h["access-control-allow-headers"],
        "content-type,x-api-key,x-auth-scheme"
    );
    let _ = hello();
}

#[tokio::test]
async fn cors_exposes_the_headers_clients_need() {
    let app = spawn_app().await;
    let resp = app
        .client
        .post(app.url("/threads/search"))
        .header("origin", "http://ui.local")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let exposed = resp.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "content-location",
        "location",
        "x-pagination-total",
        "x-pagination-next",
    ] {
        assert!(exposed.contains(h), "{exposed}");
    }
}

#[tokio::test]
async fn webhooks_to_internal_addresses_or_without_a_secret_are_refused() {
    let mut settings = test_settings();
    settings.webhooks.allow_private_targets = false;
    let app = support::spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .expect("app");
    let tid = new_thread(&app).await;
    let before = counts(&app).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:9/",
        "http://10.0.0.7/",
        "http://localhost:9/",
        "http://[fec0::1]:9/",
        "http://[::ffff:0:a00:1]/",
        "http://192.88.99.1/",
        // A name that resolves nowhere gets the same answer (no probing the server's DNS).
        "http://no-such-host.invalid/",
    ] {
        let body = json!({"assistant_id": "agent", "input": hello(), "webhook": url}).to_string();
        let (status, v) = call(
            &app,
            Method::POST,
            &format!("/threads/{tid}/runs"),
            Some(&body),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {v}");
        assert!(
            detail(&v).contains("does not resolve to a public address"),
            "{url}: {v}"
        );
    }
    for url in [
        "ftp://example.com/",
        "/hooks/mine",
        "http://user:pw@example.com/",
    ] {
        let body = json!({"assistant_id": "agent", "input": hello(), "webhook": url}).to_string();
        let (status, v) = call(&app, Method::POST, "/runs", Some(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {v}");
        assert!(detail(&v).starts_with("webhook:"), "{url}: {v}");
    }
    assert_eq!(counts(&app).await, before, "nothing was created");

    let mut settings = test_settings();
    settings.webhooks.secret = None;
    let unsigned = support::spawn_app_on(support::Backend::Sqlite, settings)
        .await
        .expect("app");
    let body = json!({"assistant_id": "agent", "input": hello(), "webhook": "http://127.0.0.1:9/"});
    let (status, v) = call(&unsigned, Method::POST, "/runs", Some(&body.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(detail(&v).contains("signing secret"), "{v}");
}

#[tokio::test]
async fn oversized_id_lists_and_filters_are_422_before_the_database() {
    let app = spawn_app().await;
    let tid = new_thread(&app).await;
    let before = counts(&app).await;
    let many: Vec<String> = (0..1001)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let mut deep = json!("x");
    for _ in 0..30 {
        deep = json!({ "k": deep });
    }
    let wide: serde_json::Map<String, Value> =
        (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
    let cases = [
        ("/threads/search", json!({ "ids": many })),
        ("/threads/count", json!({ "metadata": deep })),
        ("/threads/search", json!({ "values": wide })),
        ("/assistants/search", json!({ "metadata": wide })),
        ("/threads/prune", json!({ "thread_ids": many })),
        ("/runs/cancel", json!({ "thread_id": tid, "run_ids": many })),
        ("/store/items/search", json!({ "filter": deep })),
        ("/runs/crons/search", json!({ "metadata": wide })),
    ];
    for (path, body) in cases {
        let (status, v) = call(&app, Method::POST, path, Some(&body.to_string())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {v}");
        assert!(detail(&v).contains("at most"), "{path}: {v}");
    }
    assert_eq!(counts(&app).await, before, "nothing changed");
    // At the limit they are served.
    let thousand: Vec<String> = many[..1000].to_vec();
    let body = json!({ "ids": thousand }).to_string();
    let (status, _) = call(&app, Method::POST, "/threads/search", Some(&body)).await;
    assert_eq!(status, StatusCode::OK);
}
