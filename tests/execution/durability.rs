//! The fault suite: research runs on the real binary, killed (SIGKILL), stopped (SIGTERM) with
//! a second replica taking over, and with Postgres stopped under them. Every run must end in a
//! report — resumed from its checkpoints, not redone — and the API must answer 503, never 500,
//! while the database is away. Provider calls are counted at the fakes.

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::service::*;
use support::{Backend, parse_sse, pg};
use tempfile::TempDir;

// ---- SIGKILL ---------------------------------------------------------------------------------

/// Killed with SIGKILL after 60% of its model calls, restarted on the same store: the run
/// keeps its id, resumes from its checkpoints (finished researchers and searches are not
/// redone), its stream continues after `Last-Event-ID`, and it ends with a report.
///
/// Before the kill, new model calls are held and the run left to settle, so the calls without
/// an answer are exactly those in flight at the model. Left to chance, a kill also catches calls
/// the server started after they were counted, or answered calls whose records it had not
/// written yet (slow store writes on a loaded machine), and the count of what may be redone is
/// a guess.
async fn sigkill_mid_research_then_restart(backend: Backend) {
    let (fakes, hold) = Fakes::holdable(Duration::from_millis(60)).await;
    let Some(db) = Db::fresh(backend, fakes.dir.path()).await else {
        return;
    };
    let (base_llm, base_search) = baseline(&fakes, backend).await;
    let client = deep_research::outbound::client_builder().build().unwrap();
    let mut svc = Service::start(&fakes.config, &db, FAST).await;
    let before = fakes.calls();
    let (t, r) = start_research(&client, &svc, "Batteries").await;
    let seen = follow(
        &client,
        svc.url(&format!("/threads/{t}/runs/{r}/stream")),
        None,
    );
    let cut = base_llm * 3 / 5;
    wait_until(Duration::from_secs(120), "60% of the model calls", || {
        fakes.llm.calls() - before.0 >= cut
    })
    .await;
    hold.store(true, Ordering::SeqCst);
    fakes
        .settle(Duration::from_secs(2), Duration::from_secs(60))
        .await;
    let in_flight = fakes.llm.in_flight();
    svc.kill();
    hold.store(false, Ordering::SeqCst);
    let killed = Instant::now();
    let at_kill = fakes.llm.calls() - before.0;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let last_seen = last_id(&seen);

    let svc = Service::start(&fakes.config, &db, FAST).await;
    let rest = follow(
        &client,
        svc.url(&format!("/threads/{t}/runs/{r}/stream")),
        Some(last_seen.clone()),
    );
    wait_until(Duration::from_secs(60), "the run to be resumed", || {
        fakes.llm.calls() - before.0 > at_kill
    })
    .await;
    let resumed_after = killed.elapsed();
    let values = join(&client, &svc, &t, &r).await;
    assert!(!report_of(&values).is_empty(), "no report: {values}");
    assert_eq!(run_status(&client, &svc, &t, &r).await, "success");

    // Nothing finished is redone, not even inside the step that was cut: the extra calls are
    // those in flight at the kill — far fewer than a restart from scratch (`at_kill`).
    let after = fakes.calls();
    let (llm, search) = (after.0 - before.0, after.1 - before.1);
    let redone = llm.saturating_sub(base_llm);
    eprintln!(
        "{backend:?}: baseline {base_llm} calls / {base_search} searches; killed at {at_kill} \
         ({in_flight} in flight); total {llm} / {search}; redone {redone}; resumed after {resumed_after:?}"
    );
    assert!(
        redone <= in_flight,
        "redone {redone} calls ({in_flight} in flight)"
    );
    assert!(
        redone < at_kill / 2,
        "redone {redone} of {at_kill}: not resumed"
    );
    assert!(
        search <= base_search + 3,
        "searches {search} vs {base_search}"
    );

    // One stream: after the last id seen before the kill, ids keep increasing to the end.
    wait_until(Duration::from_secs(10), "the stream's end", || {
        rest.lock()
            .unwrap()
            .iter()
            .any(|f| f.event == "values" && !report_of(&f.data).is_empty())
    })
    .await;
    let rest = rest.lock().unwrap().clone();
    assert_ids_increase_after(&last_seen, &rest);
    assert!(!rest.iter().any(|f| f.event == "error"), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_research_then_restart_sqlite() {
    sigkill_mid_research_then_restart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_research_then_restart_postgres() {
    sigkill_mid_research_then_restart(Backend::Postgres).await;
}

/// A step cut off after some of its calls finished: the next worker redoes the step, replays
/// the finished model calls from their records and makes again only the call that was in
/// flight (and the cut search's engine queries, which are cheap and not recorded). The
/// fourth page summary hangs until the kill; every other call answers at once. Clients see each
/// replayed call as a `replayed` event, and the run's usage still counts every call once.
async fn finished_calls_of_a_cut_step_are_replayed(backend: Backend) {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    let armed = Arc::new(AtomicBool::new(false));
    let summaries = Arc::new(AtomicUsize::new(0));
    use support::fake_llm::FakeReply;
    let script = support::research::scripted(support::research::Script::default());
    let (a, n) = (armed.clone(), summaries.clone());
    let fakes = Fakes::with_replies(move |req: &Value| {
        let reply = script(req);
        let is_summary = support::workload::role(req) == support::workload::Role::Summary;
        if is_summary && a.load(Ordering::SeqCst) && n.fetch_add(1, Ordering::SeqCst) == 3 {
            return FakeReply::delayed(Duration::from_secs(600), reply);
        }
        FakeReply::delayed(Duration::from_millis(20), reply)
    })
    .await;
    let Some(db) = Db::fresh(backend, fakes.dir.path()).await else {
        return;
    };
    let (base_llm, base_search) = baseline(&fakes, backend).await;
    armed.store(true, Ordering::SeqCst);
    let client = deep_research::outbound::client_builder().build().unwrap();
    let mut svc = Service::start(&fakes.config, &db, FAST).await;
    let before = fakes.calls();
    let thread = create_thread(&client, &svc).await;
    let run: Value = client
        .post(svc.url(&format!("/threads/{thread}/runs")))
        .json(
            &json!({"assistant_id": "deep_research", "stream_resumable": true,
                      "stream_mode": ["values", "custom"],
                      "input": {"messages": [{"role": "user", "content": "Batteries"}]}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = run["run_id"].as_str().unwrap().to_owned();
    // The hung summary is the only call left in flight, for a whole second: every other call
    // of its step, and of the researchers beside it, is finished.
    let settled = || summaries.load(Ordering::SeqCst) >= 4 && fakes.llm.in_flight() == 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut since: Option<Instant> = None;
    while since.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
        assert!(
            Instant::now() < deadline,
            "the fourth summary never hung alone"
        );
        since = if settled() {
            since.or(Some(Instant::now()))
        } else {
            None
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    svc.kill();
    let at_kill = fakes.llm.calls() - before.0;
    let svc = Service::start(&fakes.config, &db, FAST).await;
    let values = join(&client, &svc, &thread, &run).await;
    assert!(!report_of(&values).is_empty(), "no report: {values}");
    let after = fakes.calls();
    let (llm, search) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(
        llm,
        base_llm + 1,
        "only the call in flight is made again (killed after {at_kill} calls)"
    );
    // The cut search's queries are made again (their pages are not recorded); the summaries
    // of those pages are replayed all the same, above.
    assert!(
        search <= base_search + 2,
        "searches {search} vs {base_search}"
    );
    let frames = follow(
        &client,
        svc.url(&format!("/threads/{thread}/runs/{run}/stream")),
        Some("-1".into()),
    );
    wait_until(Duration::from_secs(10), "the stored stream", || {
        frames.lock().unwrap().iter().any(|f| f.event == "end")
            || frames
                .lock()
                .unwrap()
                .iter()
                .any(|f| f.event == "values" && !report_of(&f.data).is_empty())
    })
    .await;
    let replayed = frames
        .lock()
        .unwrap()
        .iter()
        .filter(|f| f.event == "custom" && f.data["type"] == "replayed")
        .count();
    assert!(replayed >= 3, "{replayed} replayed events");
    // Every call counted once: the replayed ones' tokens are in the run's total (the meter
    // restarted from the last checkpoint without them), as an uninterrupted run counts them.
    armed.store(false, Ordering::SeqCst);
    let (t, r) = start_research(&client, &svc, "Batteries").await;
    let whole = join(&client, &svc, &t, &r).await;
    for field in ["input_tokens", "output_tokens"] {
        assert_eq!(
            values["usage"][field], whole["usage"][field],
            "{field}: cut {} vs whole {}",
            values["usage"], whole["usage"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_calls_of_a_cut_step_are_replayed_sqlite() {
    finished_calls_of_a_cut_step_are_replayed(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_calls_of_a_cut_step_are_replayed_postgres() {
    finished_calls_of_a_cut_step_are_replayed(Backend::Postgres).await;
}

// ---- SIGTERM with a second replica -----------------------------------------------------------

/// A rolling restart: replica A gets SIGTERM with runs in flight; it stops claiming, lets runs
/// reach a checkpoint, hands their leases back and exits 0; replica B resumes them at once (the
/// lease here is 30 s: waiting for it to lapse would show) and every run succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_the_other_replica_resumes_at_once() {
    let fakes = Fakes::start(Duration::from_millis(40)).await;
    let Some(db) = Db::fresh(Backend::Postgres, fakes.dir.path()).await else {
        return;
    };
    let env = [
        ("DR__SERVER__RUN_LEASE_MS", "30000"),
        ("DR__SERVER__POLL_INTERVAL_MS", "100"),
        ("DR__SERVER__DRAIN_TIMEOUT_MS", "5000"),
        ("DR_MAX_CONCURRENT_RUNS", "10"),
    ];
    let mut a = Service::start(&fakes.config, &db, &env).await;
    let client = deep_research::outbound::client_builder().build().unwrap();
    let mut runs = Vec::new();
    for i in 0..10 {
        runs.push(start_research(&client, &a, &format!("Batteries {i}")).await);
    }
    let b = Service::start(&fakes.config, &db, &env).await;
    for i in 10..20 {
        runs.push(start_research(&client, &b, &format!("Batteries {i}")).await);
    }
    let started = fakes.llm.calls();
    wait_until(Duration::from_secs(120), "runs to be under way", || {
        fakes.llm.calls() - started >= 100
    })
    .await;
    let metrics = client.get(a.url("/metrics")).send().await.expect("metrics");
    let metrics = metrics.text().await.expect("metrics text");
    let running = metrics
        .lines()
        .find_map(|l| l.strip_prefix("dr_runs_running "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_default();
    assert!(
        running >= 1.0,
        "replica A runs nothing to drain:\n{metrics}"
    );
    let status = a.terminate(Duration::from_secs(20)).await;
    assert!(status.success(), "replica A exited with {status}");
    let exited = Instant::now();
    for (t, r) in &runs {
        let values = join(&client, &b, t, r).await;
        assert!(!report_of(&values).is_empty(), "run {r}: {values}");
        assert_eq!(run_status(&client, &b, t, r).await, "success");
    }
    let all_done = exited.elapsed();
    eprintln!("20 runs done {all_done:?} after replica A exited");
    assert!(
        all_done < Duration::from_secs(25),
        "runs waited for their leases to lapse ({all_done:?})"
    );
}

// ---- Postgres goes away ----------------------------------------------------------------------

/// A Postgres cluster of the test's own, so stopping it disturbs nobody else.
struct Cluster {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
}

impl Cluster {
    fn start() -> Option<Cluster> {
        let initdb = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/initdb")))
            .filter(|p| p.exists())
            .max()?;
        let bin = initdb.parent()?.to_path_buf();
        let dir = TempDir::new().ok()?;
        let mut cluster = Cluster {
            dir,
            bin,
            port: free_port(),
        };
        if is_root() {
            let _ = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(cluster.dir.path())
                .status();
        }
        let data = cluster.data();
        assert!(
            cluster
                .as_pg(
                    &initdb,
                    &["-D", &data, "-U", "postgres", "-A", "trust", "--no-sync"]
                )
                .success(),
            "initdb"
        );
        // The port was free when chosen, but a test running alongside may bind it before the
        // server does: then the server is started on another.
        for _ in 0..3 {
            if cluster.try_up() {
                return Some(cluster);
            }
            cluster.port = free_port();
        }
        cluster.up();
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    fn as_pg(&self, program: &Path, args: &[&str]) -> ExitStatus {
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        cmd.args(args)
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run a postgres tool")
    }

    fn up(&self) {
        assert!(self.try_up(), "pg_ctl start: {}", self.log());
    }

    /// The server's log, for a failure's message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pg.log")).unwrap_or_default()
    }

    fn try_up(&self) -> bool {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("pg.log").display().to_string();
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        let started = self.as_pg(
            &pg_ctl,
            &["-D", &data, "-l", &log, "-w", "-o", &opts, "start"],
        );
        started.success()
    }

    fn down(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        assert!(
            self.as_pg(&pg_ctl, &["-D", &data, "-m", "fast", "-w", "stop"])
                .success()
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.data();
        let _ = self.as_pg(&pg_ctl, &["-D", &data, "-m", "immediate", "stop"]);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Postgres stopped for 15 s mid-run: the run pauses and goes on to its report; meanwhile the
/// API answers 503 with `{"detail"}` (never a 500, never a hang), `/ok` stays up and
/// `/ok?check_db=1` says not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_mid_run_pauses_and_continues() {
    if pg::admin_url().is_none() {
        return; // Postgres binaries are there whenever the Postgres tier runs.
    }
    let Some(cluster) = Cluster::start() else {
        panic!("PostgreSQL server binaries not found under /usr/lib/postgresql");
    };
    let fakes = Fakes::start(Duration::from_millis(60)).await;
    let db = Db::Postgres(cluster.url());
    let svc = Service::start(&fakes.config, &db, FAST).await;
    let client = deep_research::outbound::client_builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let before = fakes.llm.calls();
    let (t, r) = start_research(&client, &svc, "Batteries").await;
    wait_until(Duration::from_secs(60), "the run to be under way", || {
        fakes.llm.calls() - before >= 10
    })
    .await;

    cluster.down();
    let outage = Instant::now();
    let mut codes = Vec::new();
    while outage.elapsed() < Duration::from_secs(15) {
        let asked = Instant::now();
        let response = client
            .get(svc.url(&format!("/threads/{t}")))
            .send()
            .await
            .expect("the API answers while the database is down");
        let status = response.status().as_u16();
        let body: Value = response.json().await.expect("a JSON body");
        assert!(
            asked.elapsed() < Duration::from_secs(7),
            "a hang: {:?}",
            asked.elapsed()
        );
        if status == 503 {
            assert!(body["detail"].is_string(), "{body}");
        }
        codes.push(status);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(codes.contains(&503), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 503 || *c == 200), "{codes:?}");
    let live = client.get(svc.url("/ok")).send().await.expect("/ok");
    assert_eq!(live.status(), 200);
    let ready = client
        .get(svc.url("/ok?check_db=1"))
        .send()
        .await
        .expect("/ok?check_db=1");
    assert_eq!(ready.status(), 503);

    cluster.up();
    let values = join(&client, &svc, &t, &r).await;
    assert!(!report_of(&values).is_empty(), "{values}");
    assert_eq!(run_status(&client, &svc, &t, &r).await, "success");
    let ready = client
        .get(svc.url("/ok?check_db=1"))
        .send()
        .await
        .expect("/ok?check_db=1");
    assert_eq!(ready.status(), 200);
}

// ---- a run that cannot be resumed ------------------------------------------------------------

/// A run whose worker died on its last allowed attempt ends `error`, with the reason in its
/// stream's `error` event, in `/join` and on its thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_out_of_attempts_ends_error_with_the_reason() {
    use deep_research::store::{self, RunInsert, RunStatus, Store};
    let dir = TempDir::new().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("given-up.db").display());
    let store: Arc<dyn Store> = Arc::new(
        store::connect(&url, 5, store::SqliteSync::default())
            .await
            .expect("store"),
    );
    // A run a worker claimed and then died with, before the service starts.
    let now = deep_research::time::Timestamp::now();
    let thread_id = deep_research::ids::ThreadId::new();
    let run = deep_research::store::Run {
        run_id: deep_research::ids::RunId::new(),
        thread_id,
        assistant_id: deep_research::ids::AssistantId::new(),
        created_at: now,
        updated_at: now,
        status: RunStatus::Pending,
        metadata: Default::default(),
        multitask_strategy: deep_research::store::MultitaskStrategy::Reject,
        kwargs: json!({"input": {"messages": []}, "stream_mode": ["values"], "resumable": true,
                       "config": {"configurable": {"graph_id": "slow"}}}),
    };
    let insert = RunInsert {
        owner: deep_research::store::Owner::local(),
        run: run.clone(),
        thread_metadata: Default::default(),
        create_thread: true,
        idempotency_key: None,
        cron_tick: None,
    };
    store.insert_run(&insert).await.expect("insert");
    let lease = store
        .claim_run("a-worker-that-dies", Duration::from_millis(1000), 1)
        .await
        .expect("claim")
        .expect("claimable");
    assert_eq!(lease.fence.attempt, 1);

    let settings = deep_research::config::Settings {
        run_lease: Duration::from_millis(1000),
        max_attempts: 1,
        ..support::test_settings()
    };
    let app = support::spawn_on_store(store, settings).await;
    let (t, r) = (thread_id, run.run_id);
    let joined: Value = app
        .client
        .get(app.url(&format!("/threads/{t}/runs/{r}/join")))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("join")
        .json()
        .await
        .expect("join json");
    let error = &joined["__error__"];
    assert_eq!(error["error"], "WorkerLost", "{joined}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("given up after 1 attempt"), "{message}");
    let run = app.get_json(&format!("/threads/{t}/runs/{r}")).await;
    assert_eq!(run["status"], "error");
    let thread = app.get_json(&format!("/threads/{t}")).await;
    assert_eq!(
        (&thread["status"], &thread["error"]),
        (&json!("error"), error)
    );
    let body = support::body_text(
        app.client
            .get(app.url(&format!("/threads/{t}/runs/{r}/stream")))
            .header("Last-Event-ID", "-1"),
    )
    .await;
    let frames = parse_sse(&body);
    let last = frames.last().expect("frames");
    assert_eq!(
        (last.event.as_str(), &last.data),
        ("error", error),
        "{frames:?}"
    );
}

// ---- idempotent creation and retention -------------------------------------------------------

/// A client retrying run creation with the same `Idempotency-Key` starts no second run: the
/// retry gets 409 naming the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_starts_one_run() {
    let app = support::spawn_app().await;
    let thread = support::new_thread(&app).await;
    let body = json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}});
    let post = |path: String, key: &str| {
        app.client
            .post(app.url(&path))
            .header("Idempotency-Key", key)
            .json(&body)
    };
    let first = post(format!("/threads/{thread}/runs"), "retry-me")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let run: Value = first.json().await.unwrap();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    for path in [
        format!("/threads/{thread}/runs"),
        format!("/threads/{thread}/runs/wait"),
        "/runs/stream".to_owned(),
    ] {
        let again = post(path.clone(), "retry-me").send().await.unwrap();
        assert_eq!(again.status(), 409, "{path}");
        let detail: Value = again.json().await.unwrap();
        let text = detail["detail"].as_str().unwrap_or_default();
        assert!(text.contains(&run_id), "{path}: {detail}");
    }
    let runs = app.get_json(&format!("/threads/{thread}/runs")).await;
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    let other = post(format!("/threads/{thread}/runs/wait"), "another-key")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);

    let empty = post(format!("/threads/{thread}/runs"), " ")
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 422);
    let batch = app
        .client
        .post(app.url("/runs/batch"))
        .header("Idempotency-Key", "k")
        .json(&json!([body]))
        .send()
        .await
        .unwrap();
    assert_eq!(batch.status(), 422);
}

/// A thread's `ttl` (create or patch) is honoured by the sweeper; a bad one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_ttl_is_honoured_by_the_sweeper() {
    let settings = deep_research::config::Settings {
        sweep_interval: Duration::from_millis(200),
        ..support::test_settings()
    };
    let app = support::spawn_app_on(Backend::Sqlite, settings)
        .await
        .expect("app");
    let create = |ttl: Value| {
        app.client
            .post(app.url("/threads"))
            .json(&json!({"ttl": ttl}))
            .send()
    };
    let short: Value = create(json!(0.01)).await.unwrap().json().await.unwrap();
    let long: Value = create(json!({"ttl": 60, "strategy": "delete"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let patched = support::new_thread(&app).await;
    let response = app
        .client
        .patch(app.url(&format!("/threads/{patched}")))
        .json(&json!({"ttl": {"ttl": 0.01}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for bad in [
        json!("soon"),
        json!(-1),
        json!({"ttl": 5, "strategy": "keep_latest"}),
    ] {
        let response = create(bad.clone()).await.unwrap();
        assert_eq!(response.status(), 422, "{bad}");
    }

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = |id: Value| {
        let url = app.url(&format!("/threads/{}", id.as_str().unwrap_or_default()));
        let client = app.client.clone();
        async move { client.get(url).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(short["thread_id"].clone()).await, 404);
    assert_eq!(status(json!(patched)).await, 404);
    assert_eq!(status(long["thread_id"].clone()).await, 200);
}

/// `/threads/prune` with `keep_latest` leaves one checkpoint holding the same state, and the
/// thread carries on from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_keep_latest_keeps_the_state_in_one_checkpoint() {
    let app = support::spawn_app().await;
    let thread = support::new_thread(&app).await;
    let say = |text: &str| {
        app.client
            .post(app.url(&format!("/threads/{thread}/runs/wait")))
            .json(&json!({"assistant_id": "parent",
                          "input": {"messages": [{"role": "user", "content": text}]}}))
            .send()
    };
    for text in ["one", "two"] {
        let body = say(text).await.unwrap().text().await.unwrap();
        assert!(body.contains(text), "{body}");
    }
    let history = |limit: u32| {
        app.client
            .post(app.url(&format!("/threads/{thread}/history")))
            .json(&json!({"limit": limit}))
            .send()
    };
    let before: Value = history(100).await.unwrap().json().await.unwrap();
    assert!(before.as_array().map_or(0, Vec::len) > 2, "{before}");
    let state = app.get_json(&format!("/threads/{thread}/state")).await;

    let pruned: Value = app
        .client
        .post(app.url("/threads/prune"))
        .json(&json!({"thread_ids": [thread], "strategy": "keep_latest"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pruned["pruned_count"], 1);
    let after: Value = history(100).await.unwrap().json().await.unwrap();
    assert_eq!(after.as_array().map(Vec::len), Some(1), "{after}");
    let kept = app.get_json(&format!("/threads/{thread}/state")).await;
    assert_eq!(kept["values"], state["values"]);
    assert_eq!(kept["checkpoint"], state["checkpoint"]);

    let body = say("three").await.unwrap().text().await.unwrap();
    assert!(body.contains("three"), "{body}");
    let last = app.get_json(&format!("/threads/{thread}/state")).await;
    let count = |s: &Value| s["values"]["messages"].as_array().map_or(0, Vec::len);
    assert_eq!(count(&last), count(&state) + 3, "{last}");
}

// ---- clocks that disagree --------------------------------------------------------------------

/// libfaketime, to run a replica with its clock off; `None` outside CI when it is missing.
fn faketime_lib() -> Option<String> {
    let lib = std::env::var("DR_FAKETIME_LIB")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
    if Path::new(&lib).exists() {
        return Some(lib);
    }
    assert!(
        std::env::var_os("DR_REQUIRE_POSTGRES").is_none(),
        "libfaketime is missing (scripts/test.sh installs the faketime package)"
    );
    None
}

/// A thread's `created_at` as seen by a replica: its clock.
async fn clock_of(client: &reqwest::Client, svc: &Service) -> chrono::DateTime<chrono::Utc> {
    let thread: Value = client
        .post(svc.url("/threads"))
        .json(&json!({}))
        .send()
        .await
        .expect("create thread")
        .json()
        .await
        .expect("thread");
    let at = thread["created_at"].as_str().expect("created_at");
    chrono::DateTime::parse_from_rfc3339(at)
        .expect("timestamp")
        .with_timezone(&chrono::Utc)
}

/// Leases follow the database's clock, so replicas whose clocks are a minute apart agree: one
/// running ahead does not steal live runs, one running behind takes a dead replica's run over as
/// soon as its lease lapses, and the run's stream ids keep increasing across the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_skewed_clocks_neither_steal_nor_wait() {
    let Some(lib) = faketime_lib() else {
        return;
    };
    let fakes = Fakes::start(Duration::from_millis(60)).await;
    let Some(db) = Db::fresh(Backend::Postgres, fakes.dir.path()).await else {
        return;
    };
    let (base_llm, _) = baseline(&fakes, Backend::Postgres).await;
    let skewed = |offset: &'static str| {
        let mut env: Vec<(&str, &str)> = FAST.to_vec();
        env.extend([
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ]);
        env
    };
    let client = deep_research::outbound::client_builder().build().unwrap();
    let mut a = Service::start(&fakes.config, &db, FAST).await;

    // A replica a minute ahead sees A's leases as long expired by its own clock.
    let before = fakes.llm.calls();
    let (t, r) = start_research(&client, &a, "Batteries").await;
    wait_until(Duration::from_secs(30), "A to start the run", || {
        fakes.llm.calls() > before
    })
    .await;
    let ahead = Service::start(&fakes.config, &db, &skewed("+60s")).await;
    let skew = clock_of(&client, &ahead).await - chrono::Utc::now();
    assert!(skew.num_seconds() >= 55, "the clock is not skewed: {skew}");
    let values = join(&client, &a, &t, &r).await;
    assert!(!report_of(&values).is_empty(), "{values}");
    assert_eq!(
        fakes.llm.calls() - before,
        base_llm,
        "the replica ahead took the live run over (work was redone)"
    );
    drop(ahead);

    // A replica a minute behind takes over as soon as the lease lapses by the database's clock.
    let behind = Service::start(&fakes.config, &db, &skewed("-60s")).await;
    let skew = clock_of(&client, &behind).await - chrono::Utc::now();
    assert!(skew.num_seconds() <= -55, "the clock is not skewed: {skew}");
    let before = fakes.llm.calls();
    let (t, r) = start_research(&client, &a, "Batteries").await;
    let seen = follow(
        &client,
        a.url(&format!("/threads/{t}/runs/{r}/stream")),
        None,
    );
    wait_until(Duration::from_secs(60), "60% of the calls", || {
        fakes.llm.calls() - before >= base_llm * 3 / 5
    })
    .await;
    a.kill();
    let killed = Instant::now();
    let at_kill = fakes.llm.calls();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let last_seen = last_id(&seen);
    let rest = follow(
        &client,
        behind.url(&format!("/threads/{t}/runs/{r}/stream")),
        Some(last_seen.clone()),
    );
    wait_until(
        Duration::from_secs(20),
        "the replica behind to resume",
        || fakes.llm.calls() > at_kill,
    )
    .await;
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "{:?}",
        killed.elapsed()
    );
    let values = join(&client, &behind, &t, &r).await;
    assert!(!report_of(&values).is_empty(), "{values}");
    wait_until(Duration::from_secs(10), "the stream's end", || {
        rest.lock()
            .unwrap()
            .iter()
            .any(|f| f.event == "values" && !report_of(&f.data).is_empty())
    })
    .await;
    assert_ids_increase_after(&last_seen, &rest.lock().unwrap());
}

// ---- SQLite busy -----------------------------------------------------------------------------

/// Another process holding SQLite's write lock for longer than the busy timeout (10 s) makes
/// writes fail with SQLITE_BUSY: the run waits and finishes, and the API answers 503, not 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_busy_never_fails_a_run() {
    use deep_research::store::{self, Store};
    use sqlx::Connection;
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("busy.db");
    let url = format!("sqlite://{}", path.display());
    let store: Arc<dyn Store> = Arc::new(
        store::connect(&url, 5, store::SqliteSync::default())
            .await
            .expect("store"),
    );
    let app = support::spawn_on_store(store, support::test_settings()).await;
    let thread = support::new_thread(&app).await;

    let mut locker = sqlx::sqlite::SqliteConnection::connect(&url)
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut locker)
        .await
        .expect("lock");
    let run: Value = app
        .client
        .post(app.url(&format!("/threads/{thread}/runs")))
        .json(&json!({"assistant_id": "slow", "input": {"messages": []},
                      "config": {"configurable": {"sleep_secs": 0.2}}}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("create run")
        .json()
        .await
        .expect("run json");
    // Run creation waits out the busy timeout too, so it failed with 503 or (if it won the lock
    // first) created the run; either way it is not a 500.
    let run_id = run["run_id"].as_str().map(str::to_owned);
    if run_id.is_none() {
        assert!(
            run["detail"]
                .as_str()
                .is_some_and(|d| d.contains("unavailable")),
            "{run}"
        );
    }
    let write = app
        .client
        .post(app.url("/threads"))
        .json(&json!({}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("create thread");
    assert_eq!(write.status(), 503);
    let read = app
        .client
        .get(app.url(&format!("/threads/{thread}")))
        .send()
        .await
        .expect("read");
    assert_eq!(read.status(), 200, "readers are not blocked (WAL)");
    sqlx::query("COMMIT")
        .execute(&mut locker)
        .await
        .expect("unlock");
    drop(locker);

    // With the lock released, a run goes through (the one above, or a new one).
    let run_id = match run_id {
        Some(id) => id,
        None => {
            let run: Value = app
                .client
                .post(app.url(&format!("/threads/{thread}/runs")))
                .json(&json!({"assistant_id": "slow", "input": {"messages": []},
                      "config": {"configurable": {"sleep_secs": 0.2}}}))
                .send()
                .await
                .expect("create run")
                .json()
                .await
                .expect("run json");
            run["run_id"].as_str().expect("run id").to_owned()
        }
    };
    let joined = app
        .client
        .get(app.url(&format!("/threads/{thread}/runs/{run_id}/join")))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("join")
        .text()
        .await
        .expect("join body");
    let th = app.get_json(&format!("/threads/{thread}")).await;
    let run = app
        .get_json(&format!("/threads/{thread}/runs/{run_id}"))
        .await;
    assert!(joined.contains("slow done"), "{joined} {run} {th}");
    assert_eq!(run["status"], "success");
}

// ---- provider faults -------------------------------------------------------------------------

/// The provider fault matrix: whatever the model provider does — rate limits with Retry-After,
/// 500s, a hung call, a connection reset mid-stream, malformed SSE, a stream that never ends —
/// every run ends in a report or a clean `error` (type and message), and none hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_faults_end_in_a_report_or_a_clean_error() {
    use support::fake_llm::FakeReply;
    use support::research::{Role, Script, on_nth, scripted};
    let reset = FakeReply::ResetMidStream("The findings so far are".into());
    let garbage = FakeReply::RawStream(vec![json!("not a chunk"), json!({"choices": "no"})]);
    let error = |status: u16| FakeReply::Error {
        status,
        body: json!({"error": {"message": "fault", "type": "server_error"}}),
        retry_after: None,
    };
    let rate_limited = FakeReply::rate_limited("1");
    // (name, the role that sees the fault, on which of its calls, the fault, must it succeed)
    let matrix: Vec<(&str, Role, usize, FakeReply, bool)> = vec![
        ("429 + Retry-After", Role::Researcher, 1, rate_limited, true),
        ("500 once", Role::Compress, 1, error(500), true),
        ("reset mid-stream", Role::Report, 1, reset, true),
        ("hung call", Role::Summary, 1, FakeReply::Hang, true),
        ("malformed SSE", Role::Researcher, 2, garbage, false),
        (
            "endless stream",
            Role::Researcher,
            1,
            FakeReply::Endless("loop ".into()),
            false,
        ),
    ];
    type Responder = Box<dyn Fn(&Value) -> FakeReply + Send + Sync>;
    let mut cases: Vec<(&str, Responder, bool)> = matrix
        .into_iter()
        .map(|(name, role, nth, fault, must_succeed)| {
            let responder: Responder =
                Box::new(on_nth(scripted(Script::default()), role, nth, fault));
            (name, responder, must_succeed)
        })
        .collect();
    let down: Responder = Box::new(move |_: &Value| error(500));
    cases.push(("500 on every call", down, false));
    for (name, responder, must_succeed) in cases {
        let responder = move |req: &Value| responder(req);
        let extra = "[research]\nallow_clarification = false\n\
                     [limits]\nmodel_timeout_secs = 3\nsummary_timeout_secs = 2\n";
        let research = support::research::start(responder, extra).await;
        let app = &research.app;
        let thread = support::new_thread(app).await;
        let started = Instant::now();
        let body = app
            .client
            .post(app.url(&format!("/threads/{thread}/runs/wait")))
            .json(&json!({"assistant_id": "deep_research",
                          "input": {"messages": [{"role": "user", "content": "Batteries"}]}}))
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let values: Value =
            serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{name}: {e}: {body}"));
        let report = values["final_report"].as_str().unwrap_or_default();
        let error = &values["__error__"];
        eprintln!(
            "{name}: {} in {:?}",
            if report.is_empty() { "error" } else { "report" },
            started.elapsed()
        );
        if must_succeed || error.is_null() {
            assert!(!report.is_empty(), "{name}: no report: {values}");
        } else {
            assert!(
                error["error"].is_string() && error["message"].is_string(),
                "{name}: not a clean error: {values}"
            );
        }
    }
}

// ---- a paused run across processes -----------------------------------------------------------

/// A research run paused for plan review is checkpointed state, not memory: the process that
/// paused it is killed, another one shows the same question (same interrupt id) and resumes it
/// to a report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_plan_review_survives_a_kill_and_is_answered_elsewhere() {
    let fakes = Fakes::start(Duration::from_millis(5)).await;
    let Some(db) = Db::fresh(Backend::Sqlite, fakes.dir.path()).await else {
        return;
    };
    let client = deep_research::outbound::client_builder().build().unwrap();
    let wait = |svc: &Service, thread: &str, body: Value| {
        let request = client
            .post(svc.url(&format!("/threads/{thread}/runs/wait")))
            .timeout(Duration::from_secs(120))
            .json(&body);
        async move {
            let resp = request.send().await.expect("wait");
            assert_eq!(resp.status(), 200);
            resp.json::<Value>().await.expect("values")
        }
    };
    let mut first = Service::start(&fakes.config, &db, FAST).await;
    let t = create_thread(&client, &first).await;
    let paused = wait(
        &first,
        &t,
        json!({"assistant_id": "deep_research",
               "config": {"configurable": {"review_plan": true}},
               "input": {"messages": [{"role": "user", "content": "Batteries"}]}}),
    )
    .await;
    let asked = paused["__interrupt__"][0].clone();
    assert_eq!(asked["value"]["type"], "plan_review", "{paused}");
    first.kill();

    let second = Service::start(&fakes.config, &db, FAST).await;
    let shown: Value = client
        .get(second.url(&format!("/threads/{t}/state")))
        .send()
        .await
        .expect("state")
        .json()
        .await
        .expect("state json");
    assert_eq!(shown["next"], json!(["review_plan"]));
    assert_eq!(shown["interrupts"][0]["id"], asked["id"]);
    let searches = fakes.tavily.calls();
    assert_eq!(searches, 0, "nothing researched before the answer");
    let done = wait(
        &second,
        &t,
        json!({"assistant_id": "deep_research",
               "command": {"resume": {asked["id"].as_str().expect("id"): "approve"}}}),
    )
    .await;
    assert!(!report_of(&done).is_empty(), "{done}");
    assert!(fakes.tavily.calls() > searches);
}
