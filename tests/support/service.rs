//! The service as a child process (`deep-research serve`) on the provider fakes, for the fault
//! suite and the kill benchmark: start, SIGKILL, SIGTERM; a research run, its stream, its end.

use super::Backend;
use super::fake_llm::{FakeLlm, FakeReply};
use super::fake_tavily::FakeTavily;
use super::pg;
use super::research::{Script, config_toml, scripted};
use super::{SseFrame, parse_sse};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

// ---- the service as a process ------------------------------------------------------------------

/// Where a service process keeps its state.
#[derive(Clone)]
pub enum Db {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Db {
    /// A fresh store of `backend`; `None` when Postgres is not available here.
    pub async fn fresh(backend: Backend, dir: &Path) -> Option<Db> {
        match backend {
            Backend::Sqlite => Some(Db::Sqlite(dir.join(format!("{}.db", uuid::Uuid::new_v4())))),
            Backend::Postgres => {
                let admin = pg::admin_url()?;
                Some(Db::Postgres(
                    pg::create_database(&admin, "dr_fault").await.1,
                ))
            }
        }
    }
}

/// A `deep-research serve` child process, killed when dropped.
pub struct Service {
    child: Child,
    pub base: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Settings that make takeovers quick to observe: a 2 s lease, a 100 ms poll.
pub const FAST: &[(&str, &str)] = &[
    ("DR__SERVER__RUN_LEASE_MS", "2000"),
    ("DR__SERVER__HEARTBEAT_MS", "500"),
    ("DR__SERVER__POLL_INTERVAL_MS", "100"),
];

impl Service {
    pub async fn start(config: &Path, db: &Db, env: &[(&str, &str)]) -> Service {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_deep-research"));
        cmd.arg("serve")
            .env("DR_NO_AUTH", "1")
            .env("PORT", port.to_string())
            .env("HOST", "127.0.0.1")
            .env("DR_CONFIG", config)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "deep_research=info")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        match db {
            Db::Sqlite(path) => cmd.env("DR_SQLITE_PATH", path),
            Db::Postgres(url) => cmd.env("DATABASE_URL", url),
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start deep-research serve");
        let mut service = Service {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let client = deep_research::outbound::client_builder().build().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = service.child.try_wait() {
                panic!("the service exited at start: {status}");
            }
            if let Ok(r) = client.get(format!("{}/ok", service.base)).send().await
                && r.status().is_success()
            {
                return service;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the service did not come up on port {port}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// SIGKILL: no drain, no hand-back, nothing flushed.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit status (within `limit`).
    pub async fn terminate(&mut self, limit: Duration) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within {limit:?} of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

// ---- the fakes and the research ----------------------------------------------------------------

/// The provider fakes and a config file pointing the service at them. Every model call takes
/// `delay`, so a run lasts long enough to be cut off midway.
pub struct Fakes {
    pub llm: FakeLlm,
    pub tavily: FakeTavily,
    pub config: PathBuf,
    pub dir: TempDir,
}

impl Fakes {
    pub async fn start(delay: Duration) -> Fakes {
        let script = scripted(Script::default());
        Self::with_replies(move |req: &Value| FakeReply::delayed(delay, script(req))).await
    }

    /// Like `start`, with a switch: while it is on, every new model call hangs (for ten
    /// minutes) instead of being answered. A run held this way settles with its unfinished
    /// calls exactly those in flight at the model, so a kill cuts it at a known point.
    pub async fn holdable(delay: Duration) -> (Fakes, Arc<AtomicBool>) {
        let hold = Arc::new(AtomicBool::new(false));
        let held = hold.clone();
        let script = scripted(Script::default());
        let fakes = Self::with_replies(move |req: &Value| {
            let wait = if held.load(Ordering::SeqCst) {
                Duration::from_secs(600)
            } else {
                delay
            };
            FakeReply::delayed(wait, script(req))
        })
        .await;
        (fakes, hold)
    }

    /// Waits until no model call has started or finished for `quiet`: every answer received
    /// has been handled and the next call is held.
    pub async fn settle(&self, quiet: Duration, limit: Duration) {
        let deadline = Instant::now() + limit;
        let state = || (self.llm.calls(), self.llm.in_flight());
        let (mut last, mut since) = (state(), Instant::now());
        while since.elapsed() < quiet {
            assert!(Instant::now() < deadline, "the model calls never settled");
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = state();
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
    }

    /// The fakes with the model answering through `reply`.
    pub async fn with_replies(
        reply: impl Fn(&Value) -> FakeReply + Send + Sync + 'static,
    ) -> Fakes {
        let llm = FakeLlm::start(Arc::new(reply)).await;
        let tavily = FakeTavily::start().await;
        tavily.set_latency(Duration::from_millis(20));
        let dir = TempDir::new().expect("temp dir");
        let config = dir.path().join("fakes.toml");
        let text = config_toml(&llm, &tavily).replacen(
            "[research]\n",
            "[research]\nallow_clarification = false\n",
            1,
        );
        std::fs::write(&config, text).expect("write config");
        Fakes {
            llm,
            tavily,
            config,
            dir,
        }
    }

    /// Model and search calls so far.
    pub fn calls(&self) -> (usize, usize) {
        (self.llm.calls(), self.tavily.calls())
    }
}

/// Creates a thread and starts a resumable research run on it; returns (thread, run).
pub async fn start_research(
    client: &reqwest::Client,
    svc: &Service,
    topic: &str,
) -> (String, String) {
    let thread_id = create_thread(client, svc).await;
    let run: Value = client
        .post(svc.url(&format!("/threads/{thread_id}/runs")))
        .json(
            &json!({"assistant_id": "deep_research", "stream_resumable": true,
                      "stream_mode": ["values", "updates"],
                      "input": {"messages": [{"role": "user", "content": topic}]}}),
        )
        .send()
        .await
        .expect("create run")
        .json()
        .await
        .expect("run");
    let run_id = run["run_id"].as_str().expect("run id").to_owned();
    (thread_id, run_id)
}

/// Creates an empty thread; returns its id.
pub async fn create_thread(client: &reqwest::Client, svc: &Service) -> String {
    let thread: Value = client
        .post(svc.url("/threads"))
        .json(&json!({}))
        .send()
        .await
        .expect("create thread")
        .json()
        .await
        .expect("thread");
    thread["thread_id"].as_str().expect("thread id").to_owned()
}

pub async fn run_status(
    client: &reqwest::Client,
    svc: &Service,
    thread: &str,
    run: &str,
) -> String {
    let run: Value = client
        .get(svc.url(&format!("/threads/{thread}/runs/{run}")))
        .send()
        .await
        .expect("get run")
        .json()
        .await
        .expect("run json");
    run["status"].as_str().unwrap_or_default().to_owned()
}

/// `/join`: the run's final values once it has ended.
pub async fn join(client: &reqwest::Client, svc: &Service, thread: &str, run: &str) -> Value {
    let text = client
        .get(svc.url(&format!("/threads/{thread}/runs/{run}/join")))
        .timeout(Duration::from_secs(180))
        .send()
        .await
        .expect("join")
        .text()
        .await
        .expect("join body");
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("join body {text:?}: {e}"))
}

pub fn report_of(values: &Value) -> &str {
    values["final_report"].as_str().unwrap_or_default()
}

/// Calls of one uninterrupted research run with these fakes (on a store of its own).
pub async fn baseline(fakes: &Fakes, backend: Backend) -> (usize, usize) {
    let db = Db::fresh(backend, fakes.dir.path()).await.expect("store");
    let svc = Service::start(&fakes.config, &db, FAST).await;
    let client = deep_research::outbound::client_builder().build().unwrap();
    let before = fakes.calls();
    let (t, r) = start_research(&client, &svc, "Batteries").await;
    let values = join(&client, &svc, &t, &r).await;
    assert!(!report_of(&values).is_empty(), "{values}");
    let after = fakes.calls();
    (after.0 - before.0, after.1 - before.1)
}

/// Follows a run's stream in the background, keeping every complete frame received.
pub fn follow(
    client: &reqwest::Client,
    url: String,
    last_event_id: Option<String>,
) -> Arc<Mutex<Vec<SseFrame>>> {
    let mut request = client.get(url);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    follow_request(request)
}

/// Sends `request` and keeps every complete SSE frame of its response, in the background.
pub fn follow_request(request: reqwest::RequestBuilder) -> Arc<Mutex<Vec<SseFrame>>> {
    let frames = Arc::new(Mutex::new(Vec::new()));
    let out = frames.clone();
    tokio::spawn(async move {
        let Ok(mut response) = request.send().await else {
            return;
        };
        let mut text = String::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if let Some(end) = text.rfind("\r\n\r\n") {
                let complete: String = text.drain(..end + 4).collect();
                out.lock().unwrap().extend(parse_sse(&complete));
            }
        }
    });
    frames
}

/// The id of the newest frame a follower received.
pub fn last_id(frames: &Mutex<Vec<SseFrame>>) -> String {
    frames
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find_map(|f| f.id.clone())
        .expect("frames with ids")
}

/// Every frame's id is above `last_seen` and above the one before: one stream across a takeover.
pub fn assert_ids_increase_after(last_seen: &str, frames: &[SseFrame]) {
    let mut previous = event_id(last_seen);
    for frame in frames {
        let id = event_id(frame.id.as_deref().expect("resumable frames carry ids"));
        assert!(id > previous, "{id:?} after {previous:?}");
        previous = id;
    }
}

/// `<ms>-<seq>` as a comparable pair.
pub fn event_id(id: &str) -> (i64, i64) {
    let (ms, seq) = id.split_once('-').expect("ms-seq");
    (ms.parse().expect("ms"), seq.parse().expect("seq"))
}

pub async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
