//! Test harness: `spawn_app()` starts the real service on a free loopback port over a fresh
//! store (a SQLite file in a temp dir, or a new Postgres database when `TEST_DATABASE_URL` names
//! a server), with the test graphs registered.

#![allow(dead_code)]

pub mod fake_engines;
pub mod fake_llm;
pub mod fake_tavily;
pub mod graphs;
pub mod pg;
pub mod research;
pub mod service;
pub mod workload;

use deep_research::app::Application;
use deep_research::config::Settings;
use deep_research::store::{self, Store};
use std::sync::Arc;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// Which store a test app uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A running service.
pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub store: Arc<dyn Store>,
    /// The process's live-run channels (to check what it keeps in memory).
    pub bus: deep_research::stream::Bus,
    shutdown: CancellationToken,
    _dir: Option<TempDir>,
}

impl TestApp {
    /// The SQLite database file (and its write-ahead log) of an app on SQLite.
    pub fn sqlite_files(&self) -> Vec<std::path::PathBuf> {
        self._dir
            .as_ref()
            .map(|d| {
                ["test.db", "test.db-wal"]
                    .iter()
                    .map(|f| d.path().join(f))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestApp {
    /// Tells the service to stop, as a SIGTERM would (the app stays in scope).
    pub fn stop(&self) {
        self.shutdown.cancel();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    /// `GET path` and its JSON body (panics on transport or decode errors: tests only).
    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        self.client
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// Sends `request` and reads its whole body as text (panics on transport errors: tests only).
pub async fn body_text(request: reqwest::RequestBuilder) -> String {
    request.send().await.unwrap().text().await.unwrap()
}

/// Starts the service with the test graphs on `backend`; `None` when that backend is not
/// available here (Postgres without TEST_DATABASE_URL).
pub async fn spawn_app_on(backend: Backend, settings: Settings) -> Option<TestApp> {
    spawn_with(backend, settings, graphs::registry()).await
}

/// Starts the service with the given graphs.
pub async fn spawn_with(
    backend: Backend,
    settings: Settings,
    registry: deep_research::graph::Registry,
) -> Option<TestApp> {
    let (url, dir) = match backend {
        Backend::Sqlite => {
            let dir = TempDir::new().expect("temp dir");
            (
                format!("sqlite://{}", dir.path().join("test.db").display()),
                Some(dir),
            )
        }
        Backend::Postgres => (
            pg::create_database(&pg::admin_url()?, "dr_test").await.1,
            None,
        ),
    };
    let store: Arc<dyn Store> = Arc::new(
        store::connect(&url, 5, store::SqliteSync::default())
            .await
            .expect("open store"),
    );
    Some(serve(store, settings, registry, dir).await)
}

/// Starts the service with the test graphs on a store the test prepared.
pub async fn spawn_on_store(store: Arc<dyn Store>, settings: Settings) -> TestApp {
    serve(store, settings, graphs::registry(), None).await
}

/// Starts the service on `store` on a free port.
async fn serve(
    store: Arc<dyn Store>,
    settings: Settings,
    registry: deep_research::graph::Registry,
    dir: Option<TempDir>,
) -> TestApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let app = Application::with_store(listener, store.clone(), settings, registry)
        .await
        .expect("build app");
    let address = format!("http://{}", app.local_addr().expect("addr"));
    let shutdown = app.shutdown_token();
    let bus = app.state().bus.clone();
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        client: deep_research::outbound::client_builder().build().unwrap(),
        store,
        bus,
        shutdown,
        _dir: dir,
    }
}

/// A second replica of `app` with the given settings and graphs.
pub async fn spawn_replica_with(
    app: &TestApp,
    settings: Settings,
    registry: deep_research::graph::Registry,
) -> TestApp {
    serve(app.store.clone(), settings, registry, None).await
}

/// A second replica of `app`: the same store, its own event bus and `workers` workers. Its
/// poller does not look for work, so it only runs what is created through it.
pub async fn spawn_replica(
    app: &TestApp,
    workers: usize,
    registry: deep_research::graph::Registry,
) -> TestApp {
    let settings = Settings {
        poll_interval: std::time::Duration::from_secs(3600),
        max_concurrent_runs: workers,
        ..test_settings()
    };
    serve(app.store.clone(), settings, registry, None).await
}

/// The webhook signing secret of `test_settings`.
pub const WEBHOOK_SECRET: &str = "test-webhook-secret";

/// Test settings: short heartbeats so tests can see them; webhooks signed with
/// `WEBHOOK_SECRET` and allowed to loopback receivers.
pub fn test_settings() -> Settings {
    Settings {
        port: 0,
        max_concurrent_runs: 8,
        heartbeat: std::time::Duration::from_millis(500),
        // Test receivers listen on loopback; the secret is the one the SDK suite verifies with.
        webhooks: deep_research::config::WebhookSettings {
            secret: Some(WEBHOOK_SECRET.into()),
            allow_private_targets: true,
            timeout: std::time::Duration::from_secs(2),
            attempts: 3,
        },
        // One local owner, and browsers of any origin (the useStream page, CORS tests).
        auth: deep_research::config::AuthSettings {
            disabled: true,
            ..Settings::default().auth
        },
        cors_origins: vec!["*".into()],
        cors_private_network: true,
        ..Settings::default()
    }
}

/// The service on SQLite.
pub async fn spawn_app() -> TestApp {
    spawn_app_on(Backend::Sqlite, test_settings())
        .await
        .expect("sqlite app")
}

/// One parsed SSE frame.
#[derive(Clone, Debug, PartialEq)]
pub struct SseFrame {
    pub event: String,
    pub data: serde_json::Value,
    pub id: Option<String>,
}

/// Parses a CRLF-framed SSE body, asserting the byte-level rules on the way: `event`, `data`,
/// optional `id`, in that order, one-line JSON data, CRLF line ends. Comments are skipped.
pub fn parse_sse(body: &str) -> Vec<SseFrame> {
    assert!(
        !body.contains("\n\n") || body.contains("\r\n\r\n"),
        "frames must use CRLF: {body:?}"
    );
    let mut frames = Vec::new();
    for block in body.split("\r\n\r\n").filter(|b| !b.is_empty()) {
        if block.starts_with(':') {
            assert_eq!(block, ": heartbeat", "only heartbeat comments are sent");
            continue;
        }
        let lines: Vec<&str> = block.split("\r\n").collect();
        assert!(
            lines.len() == 2 || lines.len() == 3,
            "unexpected frame {block:?}"
        );
        let event = lines[0].strip_prefix("event: ").expect("event line first");
        let data = lines[1].strip_prefix("data: ").expect("data line second");
        let id = lines
            .get(2)
            .map(|l| l.strip_prefix("id: ").expect("id line third").to_owned());
        let data = serde_json::from_str(data).expect("data is one line of JSON");
        frames.push(SseFrame {
            event: event.to_owned(),
            data,
            id,
        });
    }
    frames
}

/// Creates a thread and returns its id.
pub async fn new_thread(app: &TestApp) -> String {
    let thread: serde_json::Value = app
        .client
        .post(app.url("/threads"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("create thread")
        .json()
        .await
        .expect("thread json");
    thread["thread_id"].as_str().expect("thread id").to_owned()
}

/// The human input the test graphs take.
pub fn hello() -> serde_json::Value {
    serde_json::json!({"messages": [{"type": "human", "content": "hi there", "id": "h1"}]})
}

/// Unpadded URL-safe base64, as JWT segments are written (tests hand-craft tokens with it).
pub fn base64_url(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}
