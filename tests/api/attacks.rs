//! Attacks done for real over TCP: silent and idle sockets, one address taking every
//! connection, cross-site writes from a browser page, label values that would grow `/metrics`
//! without bound, and a long thread whose state reads would take the process's memory. Each
//! test performs the attack and checks the guard holds.

use crate::support;

use deep_research::config::Settings;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::research::{self as r, Script, scripted};
use support::{Backend, TestApp, spawn_app_on, test_settings};

/// Counts the bytes the whole process (server included) has allocated, and the peak.
struct Counting;

static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use std::sync::atomic::Ordering::Relaxed;
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
            PEAK.fetch_max(live, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How far above the live bytes at its start the process's allocations peaked during `f`.
async fn peak_during<F: std::future::Future>(f: F) -> (F::Output, usize) {
    use std::sync::atomic::Ordering::Relaxed;
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let out = f.await;
    (out, PEAK.load(Relaxed).saturating_sub(base))
}

fn connect(app: &TestApp) -> TcpStream {
    let addr = app.address.trim_start_matches("http://");
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    stream
}

/// Reads until the server closes the connection (or the read timeout); how long that took.
fn time_until_closed(mut stream: TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

/// `GET /ok` on a new connection; the status line and how long the answer took.
fn ok_over_new_connection(app: &TestApp) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = connect(app);
    stream
        .write_all(b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer.lines().next().unwrap_or_default().to_owned();
    (status, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_at_the_cap_do_not_lock_clients_out() {
    let settings = Settings {
        max_connections: 64,
        first_request_timeout: Duration::from_millis(1500),
        ..test_settings()
    };
    let app = std::sync::Arc::new(spawn_app_on(Backend::Sqlite, settings).await.unwrap());
    let a = app.clone();
    tokio::task::spawn_blocking(move || {
        // Three times the cap: sockets that send nothing, and half an HTTP/2 preface (which
        // used to sit in the HTTP/1-or-2 detection for ever).
        let mut held = Vec::new();
        for i in 0..192 {
            let mut s = connect(&a);
            if i % 2 == 1 {
                s.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
            }
            held.push(s);
        }
        // A client with something to ask gets in at once: an idle socket makes room.
        let (status, took) = ok_over_new_connection(&a);
        assert_eq!(status, "HTTP/1.1 200 OK", "took {took:?}");
        assert!(took < Duration::from_secs(1), "/ok took {took:?}");
        // The ones still held are closed at their first-request deadline.
        let last = held.pop().unwrap();
        let closed_after = time_until_closed(last);
        assert!(
            closed_after < Duration::from_secs(4),
            "a silent socket was held {closed_after:?}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let settings = Settings {
        idle_timeout: Duration::from_millis(800),
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let mut s = connect(&app);
    tokio::task::spawn_blocking(move || {
        s.write_all(b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        // Kept alive, then idle: closed after the idle deadline, not held.
        let closed_after = time_until_closed(s);
        assert!(
            closed_after >= Duration::from_millis(500) && closed_after < Duration::from_secs(4),
            "closed after {closed_after:?}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_connection() {
    let settings = Settings {
        max_connections_per_address: 4,
        body_read_timeout: Duration::from_secs(10),
        ..test_settings()
    };
    let app = std::sync::Arc::new(spawn_app_on(Backend::Sqlite, settings).await.unwrap());
    let a = app.clone();
    tokio::task::spawn_blocking(move || {
        // Four busy connections: each is sending a body it has not finished.
        let mut busy = Vec::new();
        for _ in 0..4 {
            let mut s = connect(&a);
            s.write_all(
                b"POST /threads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
            busy.push(s);
        }
        std::thread::sleep(Duration::from_millis(300));
        // A fifth from the same address is closed without an answer, at once.
        let (status, took) = ok_over_new_connection(&a);
        assert_eq!(status, "", "a fifth connection was served");
        assert!(took < Duration::from_secs(2), "{took:?}");
        // Once one of the four is done, the address has room again.
        drop(busy.pop());
        std::thread::sleep(Duration::from_millis(300));
        let (status, _) = ok_over_new_connection(&a);
        assert_eq!(status, "HTTP/1.1 200 OK");
    })
    .await
    .unwrap();
}

async fn thread_count(app: &TestApp) -> i64 {
    app.client
        .post(app.url("/threads/count"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_pages_of_other_sites_cannot_write() {
    // The embedded default: no credentials, no CORS origins, on loopback.
    let settings = Settings {
        cors_origins: vec![],
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let thread = support::new_thread(&app).await;
    let before = thread_count(&app).await;
    let post = |path: &str| app.client.post(app.url(path));

    // What `fetch(url, {method: "POST", mode: "no-cors", body})` sends: no preflight.
    let cross_site = [
        ("Origin", "https://evil.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    for path in [
        "/threads".to_owned(),
        format!("/threads/{thread}/runs"),
        format!("/threads/{thread}/commands"),
    ] {
        let mut req = post(&path).header("content-type", "application/json");
        for (name, value) in cross_site {
            req = req.header(name, value);
        }
        let resp = req
            .body(r#"{"assistant_id": "agent", "id": 1, "method": "run.start", "params": {}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["detail"].as_str().unwrap().contains("cors_origins"),
            "{body}"
        );
    }
    // Older browsers send only Origin; a different host is cross-site too.
    let resp = post("/threads")
        .header("Origin", "http://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);

    // Bodies not declared JSON (a `no-cors` blob has no type) are refused on every route,
    // including the ones that read raw bytes.
    for path in [
        "/threads".to_owned(),
        format!("/threads/{thread}/commands"),
        format!("/threads/{thread}/stream/events"),
    ] {
        for content_type in [None, Some("text/plain")] {
            let mut req = post(&path);
            if let Some(t) = content_type {
                req = req.header("content-type", t);
            }
            let resp = req
                .body(r#"{"id": 1, "method": "run.start", "params": {"assistant_id": "agent"}, "channels": ["values"]}"#)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 415, "{path} {content_type:?}");
        }
    }
    assert_eq!(
        thread_count(&app).await,
        before,
        "a refused write changed something"
    );
    let runs: Value = app
        .client
        .get(app.url(&format!("/threads/{thread}/runs")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs, json!([]));

    // The page's own origin, and clients that are not browsers, still write.
    let addr = app.address.trim_start_matches("http://").to_owned();
    let resp = post("/threads")
        .header("Origin", format!("http://{addr}"))
        .header("Sec-Fetch-Site", "same-origin")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = post("/threads")
        .header("Origin", format!("http://{addr}"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Bodiless POSTs (the SDKs' cancel, for one) need no content type.
    let resp = post("/threads").send().await.unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_origins_write_and_keyed_servers_refuse_the_rest() {
    let settings = Settings {
        cors_origins: vec!["https://app.example".into()],
        api_key: Some("k-123".into()),
        auth: Settings::default().auth,
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let write = |origin: &'static str| {
        app.client
            .post(app.url("/threads"))
            .header("x-api-key", "k-123")
            .header("Origin", origin)
            .header("Sec-Fetch-Site", "cross-site")
            .json(&json!({}))
            .send()
    };
    assert_eq!(write("https://app.example").await.unwrap().status(), 200);
    // A key does not make another site's page welcome.
    assert_eq!(write("https://evil.example").await.unwrap().status(), 403);
}

/// The research app's page is public, and opens nothing: what it calls still needs the key,
/// it cannot be framed or run another origin's script, and an operator can switch it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_page_opens_nothing_and_can_be_switched_off() {
    let keyed = Settings {
        api_key: Some("k-123".into()),
        auth: Settings::default().auth,
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, keyed.clone()).await.unwrap();
    let page = reqwest::get(app.url("/")).await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    for rule in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(rule), "{csp}");
    }
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(r#"data-auth="required""#)
    );
    for path in ["/ui/markdown.js", "/ui/app.js"] {
        let script = reqwest::get(app.url(path)).await.unwrap();
        assert_eq!(script.status(), 200, "{path}");
        assert!(
            script.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript"),
            "{path}"
        );
    }
    // What the page calls is the API, and the API still wants the key.
    let search = app
        .client
        .post(app.url("/threads/search"))
        .json(&json!({}))
        .send();
    assert_eq!(search.await.unwrap().status(), 401);
    // Nothing else under /ui is public or served.
    let other = reqwest::get(app.url("/ui/../threads")).await.unwrap();
    assert_eq!(other.status(), 401);
    assert_eq!(
        reqwest::get(app.url("/ui/x.js")).await.unwrap().status(),
        401
    );

    let off = Settings {
        web_app: false,
        ..keyed
    };
    let app = spawn_app_on(Backend::Sqlite, off).await.unwrap();
    let page = app
        .client
        .get(app.url("/"))
        .header("x-api-key", "k-123")
        .send();
    assert_eq!(page.await.unwrap().status(), 404);
    assert_eq!(reqwest::get(app.url("/")).await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_labels_stay_bounded_whatever_runs_name() {
    // The fake provider is on loopback: runs may choose models of it here.
    let operator = "[operator]\nallow_private_model_urls = true\n";
    let ra = r::start(scripted(Script::default()), operator).await;
    let app = &ra.app;
    let metrics = || async {
        reqwest::get(app.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let long_model = format!("openai:{}", "m".repeat(200_000));
    let run = |model: String| async move {
        let tid = support::new_thread(app).await;
        let resp = app
            .client
            .post(app.url(&format!("/threads/{tid}/runs/wait")))
            .json(&json!({
                "assistant_id": "deep_research",
                "input": {"messages": [{"role": "user", "content": "Compare solar and wind"}]},
                "config": {"configurable": {"research_model": model, "allow_clarification": false}},
            }))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        if status.is_client_error() {
            let text = resp.text().await.unwrap();
            panic!("{}", &text[..text.len().min(300)]);
        }
        status
    };
    // One round of the attack: runs of a model nobody configured, with a 200 kB name, and
    // requests with made-up methods.
    let round = |i: usize| {
        let long_model = long_model.clone();
        async move {
            let status = run(format!("{long_model}{i}")).await;
            assert!(status.is_success(), "{status}");
            for j in 0..10 {
                let method = reqwest::Method::from_bytes(format!("ATTACK{i}x{j}").as_bytes());
                let resp = app.client.request(method.unwrap(), app.url("/ok")).send();
                resp.await.unwrap();
            }
            metrics().await
        }
    };
    let mut sizes = Vec::new();
    for i in 0..4 {
        sizes.push(round(i).await.len());
    }
    let text = metrics().await;
    eprintln!(
        "/metrics bytes after each round: {sizes:?}, then {}",
        text.len()
    );
    assert!(
        !text.contains("mmmmmmmmmm"),
        "a run's model name became a label"
    );
    assert!(!text.contains("ATTACK"), "a request method became a label");
    // Every label value is one of a known few, however many names the attack used.
    for (label, allowed) in [
        ("model", &["fake-model", "other"][..]),
        ("provider", &["openai"][..]),
        (
            "method",
            &[
                "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
                "other",
            ][..],
        ),
    ] {
        let pattern = format!("{label}=\"");
        for value in text.split(&pattern).skip(1) {
            let value = value.split('"').next().unwrap_or_default();
            assert!(allowed.contains(&value), "{label}={value:?} in /metrics");
        }
    }
    // The page stays tens of kilobytes (it was megabytes with the names as labels); other
    // tests of this binary share the process's metrics, so the bound leaves them room.
    assert!(
        text.len() < 250_000,
        "/metrics is {} bytes after {sizes:?}",
        text.len()
    );
    assert!(
        text.contains(r#"dr_model_calls_total{provider="openai",model="other""#),
        "unnamed models are counted as other:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_require_credentials() {
    let mut settings = Settings {
        api_key: Some("k-123".into()),
        auth: Settings::default().auth,
        ..test_settings()
    };
    settings.telemetry.metrics_public = false;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let resp = reqwest::get(app.url("/metrics")).await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = app
        .client
        .get(app.url("/metrics"))
        .header("x-api-key", "k-123")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(reqwest::get(app.url("/ok")).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_long_thread_costs_its_state_not_its_length() {
    let app = spawn_app_on(Backend::Sqlite, test_settings())
        .await
        .unwrap();
    let tid = support::new_thread(&app).await;
    let wait = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/wait")))
        .json(&json!({"assistant_id": "agent", "input": support::hello()}))
        .send()
        .await
        .unwrap();
    assert_eq!(wait.status(), 200);
    let update = |content: String| {
        app.client
            .post(app.url(&format!("/threads/{tid}/state")))
            .json(&json!({"values": {"messages": [{"type": "human", "content": content}]}}))
            .send()
    };
    // A 2 MB message, then 150 small updates: 150 checkpoints that each hold the 2 MB.
    let report = "r".repeat(2_000_000);
    assert_eq!(update(report).await.unwrap().status(), 200);
    let (_, updates_peak) = peak_during(async {
        for i in 0..150 {
            let status = update(format!("note {i}")).await.unwrap().status();
            assert_eq!(status, 200);
        }
    })
    .await;
    let (state, state_peak) = peak_during(async {
        app.client
            .get(app.url(&format!("/threads/{tid}/state")))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(state["values"]["messages"].as_array().unwrap().len(), 153);
    let (history, history_peak) = peak_during(async {
        app.client
            .post(app.url(&format!("/threads/{tid}/history")))
            .json(&json!({"limit": 3}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(history.as_array().unwrap().len(), 3);
    let mb = |b: usize| b as f64 / 1e6;
    eprintln!(
        "peak above live: 150 updates {:.1} MB, state {:.1} MB, history of 3 {:.1} MB",
        mb(updates_peak),
        mb(state_peak),
        mb(history_peak)
    );
    // A copy of the state per checkpoint would be 150 × 2 MB; a few copies of one state is
    // what reading it needs (the stored rows, the rebuilt values, the JSON answer).
    for (what, peak) in [
        ("an update", updates_peak),
        ("the state", state_peak),
        ("the history", history_peak),
    ] {
        assert!(
            peak < 40_000_000,
            "{what} peaked {:.1} MB above live",
            mb(peak)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_never_go_through_a_proxy() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use support::service::{Db, Fakes, Service, create_thread};
    // An egress proxy that counts who connects to it (and answers nothing).
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let proxied = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = proxied.clone();
    std::thread::spawn(move || {
        for conn in proxy.incoming() {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    // The webhook receiver, named `localhost` so NO_PROXY (which lets the provider fakes on
    // 127.0.0.1 be reached) does not cover it.
    let received = std::sync::Arc::new(AtomicUsize::new(0));
    let hits = received.clone();
    let receiver = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            hits.fetch_add(1, Ordering::SeqCst);
            async { "ok" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!(
        "http://localhost:{}/hook",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    let fakes = Fakes::start(Duration::ZERO).await;
    let mut config = std::fs::read_to_string(&fakes.config).unwrap();
    config.push_str("\n[webhooks]\nsigning_secret = \"s\"\nallow_private_targets = true\n");
    std::fs::write(&fakes.config, config).unwrap();
    let db = Db::fresh(Backend::Sqlite, fakes.dir.path()).await.unwrap();
    let env = [
        ("HTTP_PROXY", proxy_url.as_str()),
        ("http_proxy", proxy_url.as_str()),
        ("HTTPS_PROXY", proxy_url.as_str()),
        ("ALL_PROXY", proxy_url.as_str()),
        ("NO_PROXY", "127.0.0.1"),
        ("no_proxy", "127.0.0.1"),
    ];
    let svc = Service::start(&fakes.config, &db, &env).await;
    let client = deep_research::outbound::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    let thread = create_thread(&client, &svc).await;
    let resp = client
        .post(svc.url(&format!("/threads/{thread}/runs/wait")))
        .json(&json!({"assistant_id": "deep_research", "webhook": hook,
                      "input": {"messages": [{"role": "user", "content": "solar vs wind"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        received.load(Ordering::SeqCst),
        1,
        "the webhook did not arrive"
    );
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "the webhook went to the proxy"
    );
}

// ---- one account, or a misconfigured server ----------------------------------------------------

const JWT_SECRET: &str = "a-shared-jwt-secret-for-attacks";

fn hs256(claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_does_not_listen_beyond_loopback_unless_told() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("open.db").display().to_string();
    let open = |beyond: bool| Settings {
        host: "0.0.0.0".into(),
        port: 0,
        sqlite_path: db.clone(),
        auth: deep_research::config::AuthSettings {
            disabled: true,
            open_beyond_loopback: beyond,
            ..Settings::default().auth
        },
        ..test_settings()
    };
    let error = deep_research::app::Application::build(open(false), support::graphs::registry())
        .await
        .err()
        .expect("an open server on 0.0.0.0 must not start");
    assert!(
        error.to_string().contains("open_beyond_loopback"),
        "{error}"
    );
    let app = deep_research::app::Application::build(open(true), support::graphs::registry()).await;
    assert!(app.is_ok(), "told explicitly, it starts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_not_yet_valid_are_refused() {
    let settings = Settings {
        auth: deep_research::config::AuthSettings {
            jwt_secret: Some(JWT_SECRET.into()),
            owner_claim: "sub".into(),
            ..Default::default()
        },
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let call = |token: String| {
        app.client
            .post(app.url("/threads"))
            .bearer_auth(token)
            .json(&json!({}))
            .send()
    };
    let later = hs256(json!({"sub": "ann", "nbf": unix_now() + 3600, "exp": unix_now() + 7200}));
    assert_eq!(call(later).await.unwrap().status(), 401);
    let now = hs256(json!({"sub": "ann", "nbf": unix_now() - 5, "exp": unix_now() + 600}));
    assert_eq!(call(now).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_key_ids_do_not_hammer_a_failing_key_server() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // An identity provider whose JWKS endpoint fails, slowly.
    let fetches = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = fetches.clone();
    let router = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "down")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let settings = Settings {
        auth: deep_research::config::AuthSettings {
            jwks_url: Some(jwks_url),
            jwt_issuer: Some("https://idp.example".into()),
            owner_claim: "sub".into(),
            failed_auth_per_minute: 0,
            ..Default::default()
        },
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    // Forty tokens, each naming a key id nobody published (the signature is never reached).
    let header = |kid: usize| {
        let json = format!(r#"{{"alg":"RS256","typ":"JWT","kid":"made-up-{kid}"}}"#);
        support::base64_url(json.as_bytes())
    };
    let payload = support::base64_url(br#"{"sub":"x","exp":9999999999}"#);
    let started = Instant::now();
    let mut calls = Vec::new();
    for kid in 0..40 {
        let token = format!("{}.{payload}.c2ln", header(kid));
        calls.push(
            app.client
                .get(app.url("/threads/00000000-0000-0000-0000-000000000000"))
                .bearer_auth(token)
                .send(),
        );
    }
    for call in calls {
        assert_eq!(call.await.unwrap().status(), 401);
    }
    let took = started.elapsed();
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "the key server was asked per token"
    );
    // Before, each token waited in line for its own fetch (40 × 300 ms).
    assert!(took < Duration::from_secs(3), "40 refusals took {took:?}");
}

fn keys_file_text(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(owner, key)| {
            format!(
                "[[keys]]\nowner = \"{owner}\"\nsha256 = \"{}\"\n\n",
                deep_research::api::auth::key_digest(key)
            )
        })
        .collect()
}

/// Settings that require keys, with a keys file (in `dir`) for alice and bob.
fn alice_and_bob(dir: &tempfile::TempDir) -> Settings {
    let path = dir.path().join("keys.toml");
    let owners = [
        ("alice", "alice-key-0123456789"),
        ("bob", "bob-key-0123456789"),
    ];
    std::fs::write(&path, keys_file_text(&owners)).unwrap();
    Settings {
        auth: deep_research::config::AuthSettings {
            keys_file: Some(path),
            owner_claim: "sub".into(),
            ..Default::default()
        },
        ..test_settings()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_stops_working_without_a_restart_and_its_crons_stop() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("keys.toml");
    std::fs::write(
        &path,
        keys_file_text(&[
            ("alice", "alice-key-0123456789"),
            ("bob", "bob-key-0123456789"),
        ]),
    )
    .unwrap();
    let settings = Settings {
        auth: deep_research::config::AuthSettings {
            keys_file: Some(path.clone()),
            owner_claim: "sub".into(),
            ..Default::default()
        },
        ..test_settings()
    };
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let as_bob = |method: reqwest::Method, path: &str| {
        app.client
            .request(method, app.url(path))
            .header("x-api-key", "bob-key-0123456789")
    };
    let thread: Value = as_bob(reqwest::Method::POST, "/threads")
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    // A cron every minute on bob's thread.
    let cron = as_bob(reqwest::Method::POST, &format!("/threads/{tid}/runs/crons"))
        .json(&json!({"assistant_id": "agent", "schedule": "* * * * *", "input": support::hello()}))
        .send()
        .await
        .unwrap();
    assert_eq!(cron.status(), 200, "{}", cron.text().await.unwrap());

    // The operator removes bob's key. Within seconds, without a restart, it is refused.
    std::fs::write(&path, keys_file_text(&[("alice", "alice-key-0123456789")])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = as_bob(reqwest::Method::GET, &format!("/threads/{tid}"))
            .send()
            .await
            .unwrap()
            .status();
        if status == 401 {
            break;
        }
        assert!(Instant::now() < deadline, "bob's revoked key still works");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Bob's cron comes due (within a minute) and starts nothing; it moves on to its next tick.
    // A tick that came due before the revocation was seen may have started a run: that one
    // was bob's to start.
    let runs_of_bob = || async {
        let runs = app.store.list_runs(tid.parse().unwrap(), None, 10, 0).await;
        runs.unwrap().len()
    };
    let before = runs_of_bob().await;
    let bob = deep_research::store::Owner::named("bob").unwrap();
    let cron_of_bob = || async {
        let page = app
            .store
            .search_crons(&deep_research::store::CronQuery {
                owner: bob.clone(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.items.len(), 1);
        page.items[0].next_run_date.unwrap()
    };
    let first_tick = cron_of_bob().await;
    let deadline = Instant::now() + Duration::from_secs(75);
    while cron_of_bob().await == first_tick {
        assert!(Instant::now() < deadline, "the cron never came due");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = runs_of_bob().await - before;
    assert_eq!(
        started, 0,
        "a revoked owner's cron started {started} run(s)"
    );
    // A malformed keys file keeps the keys in force.
    std::fs::write(&path, "not toml [[").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let alice = app
        .client
        .post(app.url("/threads"))
        .header("x-api-key", "alice-key-0123456789")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(alice.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_stream_does_not_follow_another_owners_thread_under_the_same_id() {
    let dir = tempfile::TempDir::new().unwrap();
    let settings = alice_and_bob(&dir);
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let call = |key: &'static str, method: reqwest::Method, path: String| {
        app.client
            .request(method, app.url(&path))
            .header("x-api-key", key)
    };
    let (alice, bob) = ("alice-key-0123456789", "bob-key-0123456789");
    let tid = uuid::Uuid::new_v4().to_string();
    let created = call(alice, reqwest::Method::POST, "/threads".into())
        .json(&json!({"thread_id": tid}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    // Alice follows her thread...
    let stream = call(
        alice,
        reqwest::Method::GET,
        format!("/threads/{tid}/stream"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(stream.status(), 200);
    let body = tokio::spawn(async move { stream.text().await.unwrap_or_default() });
    // ...deletes it, and bob creates a thread under the same id and runs on it.
    let deleted = call(alice, reqwest::Method::DELETE, format!("/threads/{tid}"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let created = call(bob, reqwest::Method::POST, "/threads".into())
        .json(&json!({"thread_id": tid}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let run = call(
        bob,
        reqwest::Method::POST,
        format!("/threads/{tid}/runs/wait"),
    )
    .json(&json!({"assistant_id": "agent", "input": {"messages": [
            {"type": "human", "content": "bob's secret plan", "id": "b1"}]}}))
    .send()
    .await
    .unwrap();
    assert_eq!(run.status(), 200);
    // Alice's stream ends without showing any of it.
    let seen = tokio::time::timeout(Duration::from_secs(10), body)
        .await
        .expect("alice's stream kept following the id")
        .unwrap();
    assert!(!seen.contains("secret plan"), "alice saw bob's run: {seen}");
    assert!(
        !seen.contains("run_done"),
        "alice saw bob's run end: {seen}"
    );
}

/// The cases of LangGraph server advisories, tried on this server: conditional thread creation
/// that returned another owner's thread, run creation that found another owner's assistant,
/// and webhooks to loopback allowed by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_langgraph_advisories_do_not_apply_here() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut settings = alice_and_bob(&dir);
    // The shipped default: no private webhook targets.
    settings.webhooks.allow_private_targets = false;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let call = |key: &'static str, method: reqwest::Method, path: &str, body: Value| {
        let req = app
            .client
            .request(method, app.url(path))
            .header("x-api-key", key);
        async move {
            let resp = req.json(&body).send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (alice, bob) = ("alice-key-0123456789", "bob-key-0123456789");
    let post = reqwest::Method::POST;
    let (_, thread) = call(
        alice,
        post.clone(),
        "/threads",
        json!({"metadata": {"secret": "a1"}}),
    )
    .await;
    let tid = thread["thread_id"].as_str().unwrap();
    let (_, assistant) = call(
        alice,
        post.clone(),
        "/assistants",
        json!({"graph_id": "agent"}),
    )
    .await;
    let aid = assistant["assistant_id"].as_str().unwrap();

    // 1. Conditional creation on alice's thread id: no thread comes back, nothing changes.
    for if_exists in ["do_nothing", "raise"] {
        let (status, v) = call(
            bob,
            post.clone(),
            "/threads",
            json!({"thread_id": tid, "if_exists": if_exists, "metadata": {"secret": "b"}}),
        )
        .await;
        assert_eq!(status, 409, "{if_exists}: {v}");
        assert!(!v.to_string().contains("a1"), "{v}");
    }
    let (status, _) = call(
        bob,
        post.clone(),
        &format!("/threads/{tid}/runs/wait"),
        json!({"assistant_id": "agent", "input": support::hello(), "if_not_exists": "create"}),
    )
    .await;
    assert_eq!(status, 404);
    let (_, seen) = call(
        alice,
        reqwest::Method::GET,
        &format!("/threads/{tid}"),
        Value::Null,
    )
    .await;
    assert_eq!(seen["metadata"]["secret"], "a1");

    // 2. Runs naming alice's assistant, on a thread of bob's and stateless: not found.
    let (_, own) = call(bob, post.clone(), "/threads", json!({})).await;
    let own = own["thread_id"].as_str().unwrap();
    for path in [format!("/threads/{own}/runs"), "/runs/wait".to_owned()] {
        let (status, v) = call(
            bob,
            post.clone(),
            &path,
            json!({"assistant_id": aid, "input": support::hello()}),
        )
        .await;
        assert_eq!(status, 404, "{path}: {v}");
    }

    // 3. A webhook to loopback is refused by default, and the refusal names no address.
    for hook in [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://[::1]:9/hook",
        "http://[64:ff9b::7f00:1]:9/hook",
    ] {
        let (status, v) = call(
            bob,
            post.clone(),
            &format!("/threads/{own}/runs"),
            json!({"assistant_id": "agent", "input": support::hello(), "webhook": hook}),
        )
        .await;
        assert_eq!(status, 422, "{hook}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.contains("does not resolve to a public address"),
            "{detail}"
        );
        if hook.contains("localhost") {
            // What the name resolves to stays on the server.
            assert!(
                !detail.contains("127.0.0.1") && !detail.contains("::1"),
                "{detail}"
            );
        }
    }
    let (_, runs) = call(
        bob,
        reqwest::Method::GET,
        &format!("/threads/{own}/runs"),
        Value::Null,
    )
    .await;
    assert_eq!(runs, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_is_recorded_while_a_run_goes_and_survives_deleting_its_thread() {
    use support::fake_llm::FakeReply;
    let script = scripted(Script::default());
    let slow = move |req: &Value| FakeReply::delayed(Duration::from_millis(400), script(req));
    let ra = r::start(slow, "").await;
    let app = &ra.app;
    let owner = deep_research::store::Owner::local();
    let since = deep_research::time::Timestamp::now();
    let spent = || async { app.store.owner_spend_since(&owner, since).await.unwrap().0 };
    let tid = support::new_thread(app).await;
    let run: Value = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs")))
        .json(&json!({"assistant_id": "deep_research",
            "input": {"messages": [{"role": "user", "content": "Compare solar and wind"}]},
            "config": {"configurable": {"allow_clarification": false}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "pending", "{run}");
    // Counted while the run is still going.
    let deadline = Instant::now() + Duration::from_secs(30);
    while spent().await == 0 {
        assert!(
            Instant::now() < deadline,
            "nothing recorded while the run went on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = app
        .client
        .get(app.url(&format!(
            "/threads/{tid}/runs/{}",
            run["run_id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["status"]
        .clone();
    assert_eq!(status, "running", "recorded only at the end");
    // Deleting the thread mid-run does not take the spend with it.
    let before = spent().await;
    let deleted = app
        .client
        .delete(app.url(&format!("/threads/{tid}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(spent().await >= before, "the spend went with the thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_cannot_hold_unbounded_streams_or_crons() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut settings = alice_and_bob(&dir);
    settings.run_limits.owner_max_streams = 3;
    settings.run_limits.owner_max_crons = 2;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let (alice, bob) = ("alice-key-0123456789", "bob-key-0123456789");
    let call = |key: &'static str, method: reqwest::Method, path: String| {
        app.client
            .request(method, app.url(&path))
            .header("x-api-key", key)
    };
    let thread = |key: &'static str| async move {
        let v: Value = call(key, reqwest::Method::POST, "/threads".into())
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["thread_id"].as_str().unwrap().to_owned()
    };
    let tid = thread(alice).await;
    let open = || {
        call(
            alice,
            reqwest::Method::GET,
            format!("/threads/{tid}/stream"),
        )
        .send()
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let resp = open().await.unwrap();
        assert_eq!(resp.status(), 200);
        held.push(resp);
    }
    let refused = open().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("streams or waits open")
    );
    // A refused stream that would start a run starts none.
    let runs_before = app
        .store
        .list_runs(tid.parse().unwrap(), None, 10, 0)
        .await
        .unwrap()
        .len();
    let refused = call(
        alice,
        reqwest::Method::POST,
        format!("/threads/{tid}/runs/stream"),
    )
    .json(&json!({"assistant_id": "agent", "input": support::hello()}))
    .send()
    .await
    .unwrap();
    assert_eq!(refused.status(), 429);
    let runs_after = app
        .store
        .list_runs(tid.parse().unwrap(), None, 10, 0)
        .await
        .unwrap()
        .len();
    assert_eq!(runs_after, runs_before);
    // Bob is not held back by alice, and alice gets a slot back when she closes a stream.
    let bobs = thread(bob).await;
    let resp = call(bob, reqwest::Method::GET, format!("/threads/{bobs}/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let resp = open().await.unwrap();
        if resp.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed stream's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Crons: two, then a clear refusal.
    let cron = || {
        call(alice, reqwest::Method::POST, "/runs/crons".into())
            .json(&json!({"assistant_id": "agent", "schedule": "0 0 1 1 *", "input": support::hello()}))
            .send()
    };
    assert_eq!(cron().await.unwrap().status(), 200);
    assert_eq!(cron().await.unwrap().status(), 200);
    let refused = cron().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.text().await.unwrap().contains("crons"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_cannot_fill_the_disk() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut settings = alice_and_bob(&dir);
    settings.run_limits.owner_storage_bytes = 3_000_000;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let (alice, bob) = ("alice-key-0123456789", "bob-key-0123456789");
    let call = |key: &'static str, method: reqwest::Method, path: String, body: Value| {
        let req = app
            .client
            .request(method, app.url(&path))
            .header("x-api-key", key)
            .json(&body);
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let post = reqwest::Method::POST;
    let big = "x".repeat(1_000_000);
    // A megabyte of metadata per thread: the third fits, the fourth does not.
    let mut made = Vec::new();
    let mut refused = None;
    for _ in 0..6 {
        let (status, v) = call(
            alice,
            post.clone(),
            "/threads".into(),
            json!({"metadata": {"blob": big}}),
        )
        .await;
        if status == 200 {
            made.push(v["thread_id"].as_str().unwrap().to_owned());
        } else {
            refused = Some((status, v));
            break;
        }
        tokio::time::sleep(Duration::from_millis(2100)).await;
    }
    let (status, v) = refused.expect("the quota never refused a write");
    assert_eq!(status, 413, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("Storage quota"),
        "{v}"
    );
    assert_eq!(
        made.len(),
        3,
        "{} threads of 1 MB under a 3 MB quota",
        made.len()
    );
    // Every way to store more is refused: copies, store items, assistants, runs.
    let first = &made[0];
    for (path, body) in [
        (format!("/threads/{first}/copy"), json!({})),
        ("/assistants".into(), json!({"graph_id": "agent"})),
        (
            format!("/threads/{first}/runs"),
            json!({"assistant_id": "agent", "input": support::hello()}),
        ),
    ] {
        let (status, v) = call(alice, post.clone(), path.clone(), body).await;
        assert_eq!(status, 413, "{path}: {v}");
    }
    let (status, _) = call(
        alice,
        reqwest::Method::PUT,
        "/store/items".into(),
        json!({"namespace": ["n"], "key": "k", "value": {"v": 1}}),
    )
    .await;
    assert_eq!(status, 413);
    // Reads and deletes still work, and deleting makes room again.
    let (status, _) = call(alice, post.clone(), "/threads/search".into(), json!({})).await;
    assert_eq!(status, 200);
    let (status, _) = call(
        alice,
        reqwest::Method::DELETE,
        format!("/threads/{first}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 204);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, v) = call(alice, post.clone(), "/threads".into(), json!({})).await;
    assert_eq!(status, 200, "{v}");
    // Bob has his own quota.
    let (status, _) = call(
        bob,
        post.clone(),
        "/threads".into(),
        json!({"metadata": {"blob": big}}),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_subscription_on_a_guessed_id_sees_nothing_of_who_creates_it() {
    let dir = tempfile::TempDir::new().unwrap();
    let settings = alice_and_bob(&dir);
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let tid = uuid::Uuid::new_v4().to_string();
    // Alice subscribes to an id nobody uses yet (allowed: the protocol creates threads on use).
    let stream = app
        .client
        .post(app.url(&format!("/threads/{tid}/stream/events")))
        .header("x-api-key", "alice-key-0123456789")
        .json(&json!({"channels": ["values", "messages", "lifecycle"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let body = tokio::spawn(async move { stream.text().await.unwrap_or_default() });
    // Bob creates a thread under that id and runs on it.
    let bob = |req: reqwest::RequestBuilder| req.header("x-api-key", "bob-key-0123456789");
    let created = bob(app.client.post(app.url("/threads")))
        .json(&json!({"thread_id": tid}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let run = bob(app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/wait"))))
    .json(&json!({"assistant_id": "agent", "input": {"messages": [
            {"type": "human", "content": "bob's secret plan", "id": "b1"}]}}))
    .send()
    .await
    .unwrap();
    assert_eq!(run.status(), 200);
    let seen = tokio::time::timeout(Duration::from_secs(10), body)
        .await
        .expect("alice's subscription kept following bob's thread")
        .unwrap();
    assert!(!seen.contains("secret plan"), "alice saw bob's run: {seen}");
    assert!(
        !seen.contains("lifecycle"),
        "alice saw bob's run start: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_live_on_an_address_of_their_own() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut settings = test_settings();
    settings.sqlite_path = dir.path().join("metrics.db").display().to_string();
    settings.telemetry.metrics_address = Some("127.0.0.1:0".into());
    let app = deep_research::app::Application::build(settings, support::graphs::registry())
        .await
        .unwrap();
    let api = app.local_addr().unwrap();
    let metrics = app.metrics_addr().expect("a metrics address");
    let stop = app.shutdown_token();
    let served = tokio::spawn(app.run_until_stopped());
    let get = |url: String| async move { reqwest::get(url).await.unwrap() };
    let on_api = get(format!("http://{api}/metrics")).await;
    assert_eq!(on_api.status(), 404, "the API's port no longer serves them");
    assert!(on_api.text().await.unwrap().contains("metrics_address"));
    let own = get(format!("http://{metrics}/metrics")).await;
    assert_eq!(own.status(), 200);
    assert!(own.text().await.unwrap().contains("dr_"));
    // Only /metrics is there.
    assert_eq!(
        get(format!("http://{metrics}/threads/search"))
            .await
            .status(),
        404
    );
    stop.cancel();
    served.await.unwrap().unwrap();
}

/// AG-UI: bob resuming alice's interrupted thread learns nothing of it (not that it waits, nor
/// on which interrupt): the owner is checked before the thread is read, as on every route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_ui_tells_no_one_about_another_owners_thread() {
    let dir = tempfile::TempDir::new().unwrap();
    let app = spawn_app_on(Backend::Sqlite, alice_and_bob(&dir))
        .await
        .unwrap();
    let (alice, bob) = ("alice-key-0123456789", "bob-key-0123456789");
    let thread: Value = app
        .client
        .post(app.url("/threads"))
        .header("x-api-key", alice)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let waited = app
        .client
        .post(app.url(&format!("/threads/{tid}/runs/wait")))
        .header("x-api-key", alice)
        .json(&json!({"assistant_id": "hitl", "input": support::hello()}))
        .send()
        .await
        .unwrap();
    assert_eq!(waited.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let thread: Value = app
            .client
            .get(app.url(&format!("/threads/{tid}")))
            .header("x-api-key", alice)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if thread["status"] == "interrupted" {
            break;
        }
        assert!(Instant::now() < deadline, "never interrupted: {thread}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resume = |thread: &str| {
        json!({"threadId": thread, "runId": "r1", "messages": [],
               "resume": [{"interruptId": "guess", "status": "resolved", "payload": "yes"}]})
    };
    let answer = app
        .client
        .post(app.url("/ag-ui/hitl"))
        .header("x-api-key", bob)
        .json(&resume(&tid))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let body = answer.text().await.unwrap();
    assert!(!body.contains("waits"), "{body}");
    // Alice, the owner, is told which interrupt her thread waits on.
    let answer = app
        .client
        .post(app.url("/ag-ui/hitl"))
        .header("x-api-key", alice)
        .json(&resume(&tid))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 422);
    assert!(answer.text().await.unwrap().contains("waits on"));
}

/// The per-owner cap on responses held open counts every protocol: A2A subscriptions and
/// streaming messages, AG-UI runs and thread streams share one count (eight SubscribeToTask
/// calls all streamed before, while a thread stream was refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocols_streams_count_against_the_owners_cap() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut settings = alice_and_bob(&dir);
    settings.run_limits.owner_max_streams = 3;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let alice = "alice-key-0123456789";
    let post = |path: &str, body: Value| {
        app.client
            .post(app.url(path))
            .header("x-api-key", alice)
            .json(&body)
            .send()
    };
    let thread: Value = post("/threads", json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let run: Value = post(
        &format!("/threads/{tid}/runs"),
        json!({"assistant_id": "slow", "input": support::hello(),
               "config": {"configurable": {"sleep_secs": 30}}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let task = run["run_id"].as_str().unwrap().to_owned();
    let subscribe = || {
        post(
            "/a2a/slow",
            json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task}}),
        )
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let resp = subscribe().await.unwrap();
        assert_eq!(resp.status(), 200);
        held.push(resp);
    }
    let refused = subscribe().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("streams or waits open")
    );
    // The same count holds for a thread stream and for AG-UI, which would start a run.
    let stream = app
        .client
        .get(app.url(&format!("/threads/{tid}/stream")))
        .header("x-api-key", alice)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 429);
    let other = uuid::Uuid::now_v7().to_string();
    let ag_ui = post(
        "/ag-ui/agent",
        json!({"threadId": other, "runId": "r", "messages": [{"id": "m", "role": "user", "content": "hi"}]}),
    )
    .await
    .unwrap();
    assert_eq!(ag_ui.status(), 429);
    assert!(
        app.store
            .get_thread(other.parse().unwrap())
            .await
            .unwrap()
            .is_none()
    );
    // A call that answers at once (GetTask) is not held back; closing a stream frees a slot.
    let got: Value = post(
        "/a2a/slow",
        json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert!(got["result"].is_object(), "{got}");
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let resp = subscribe().await.unwrap();
        if resp.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed stream's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A body within the size limit but of many tiny values is refused before it is parsed (a
/// 9.6 MB run of 300,000 content parts took the process to 1.7 GB), and a run, an A2A message
/// or an AG-UI call brings at most 1,000 messages and 1,000 content parts. Nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_many_tiny_parts_are_refused_before_they_cost_memory() {
    let app = spawn_app_on(Backend::Sqlite, test_settings())
        .await
        .unwrap();
    let post = |path: &str, body: String| {
        app.client
            .post(app.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let parts = |n: usize| vec![json!({"type": "text", "text": "x"}); n];
    let run = |n: usize| {
        json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": parts(n)}]}})
            .to_string()
    };
    let refused = post("/runs", run(300_000)).await.unwrap();
    assert_eq!(refused.status(), 413);
    assert!(refused.text().await.unwrap().contains("JSON values"));
    let refused = post("/runs", run(1_001)).await.unwrap();
    assert_eq!(refused.status(), 422);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("input.messages: 1001 content parts")
    );
    let many = vec![json!({"role": "user", "content": "x"}); 1_001];
    let refused = post(
        "/runs",
        json!({"assistant_id": "agent", "input": {"messages": many}}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 422);
    let a2a = |n: usize| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "role": "user", "messageId": "m", "parts": vec![json!({"kind": "text", "text": "x"}); n]}}})
        .to_string()
    };
    assert_eq!(
        post("/a2a/agent", a2a(290_000)).await.unwrap().status(),
        413
    );
    let answer: Value = post("/a2a/agent", a2a(1_001))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // MCP too, before rmcp parses the call.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "agent", "arguments": {"question": "q", "extra": vec![json!({"x": 1}); 200_000]}}});
    let refused = app
        .client
        .post(app.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 413);
    let ag_ui = json!({"threadId": uuid::Uuid::now_v7().to_string(), "runId": "r",
        "messages": vec![json!({"id": "m", "role": "user", "content": "x"}); 1_001]});
    let refused = post("/ag-ui/agent", ag_ui.to_string()).await.unwrap();
    assert_eq!(refused.status(), 422);
    let query = deep_research::store::ThreadQuery {
        owner: deep_research::store::Owner::local(),
        limit: 10,
        ..Default::default()
    };
    let threads = app.store.search_threads(&query).await.unwrap();
    assert!(threads.items.is_empty(), "nothing was created");
}

/// API-key owners and JWT subjects are told apart: a server with both refuses to start until
/// the operator says how they relate; with "separate", a token with `sub: "alice"` (or
/// `" alice "`) does not read what alice's key made; a padded or control-character subject is
/// refused, and the keys file cannot name an owner as a token would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_owners_and_token_subjects_are_not_one_name_space() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut settings = alice_and_bob(&dir);
    settings.auth.jwt_secret = Some(JWT_SECRET.into());
    let error =
        deep_research::app::Application::build(settings.clone(), support::graphs::registry())
            .await
            .err()
            .expect("keys and tokens without jwt_owners must not start");
    assert!(error.to_string().contains("jwt_owners"), "{error}");
    settings.auth.jwt_owners = deep_research::config::JwtOwners::Separate;
    let app = spawn_app_on(Backend::Sqlite, settings).await.unwrap();
    let thread: Value = app
        .client
        .post(app.url("/threads"))
        .header("x-api-key", "alice-key-0123456789")
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let read = |sub: &str| {
        let token = hs256(json!({"sub": sub, "exp": unix_now() + 600}));
        app.client
            .get(app.url(&format!("/threads/{tid}")))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(read("alice").await.unwrap().status(), 404);
    for padded in [" alice ", "alice\n", "\u{0}alice"] {
        assert_eq!(read(padded).await.unwrap().status(), 401, "{padded:?}");
    }
    // A token's thread is its own, and the key cannot see it either.
    let token = hs256(json!({"sub": "alice", "exp": unix_now() + 600}));
    let mine: Value = app
        .client
        .post(app.url("/threads"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let status = app
        .client
        .get(app.url(&format!("/threads/{}", mine["thread_id"].as_str().unwrap())))
        .header("x-api-key", "alice-key-0123456789")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404);
    // The keys file cannot claim a token's name.
    let keys = dir.path().join("jwt-keys.toml");
    std::fs::write(
        &keys,
        keys_file_text(&[("jwt:alice", "taken-key-0123456789")]),
    )
    .unwrap();
    let mut settings = alice_and_bob(&dir);
    settings.auth.keys_file = Some(keys);
    let error = deep_research::app::Application::build(settings, support::graphs::registry())
        .await
        .err()
        .expect("a key owner named as a token's");
    assert!(error.to_string().contains("JWT subjects"), "{error}");
}
