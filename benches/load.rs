//! Load benchmark of the deep-research service (benchmarks issue): cost per run, concurrency,
//! storage growth and stream latency.
//!
//! The service runs as a separate process (`deep-research serve`, the release binary), so its CPU
//! time and peak RSS can be read from `/proc/<pid>` without the driver's own work mixed in. The
//! driver (this process) runs the provider fakes in-process, in Rust (the OpenAI chat-completions
//! fake and the Tavily fake of `tests/support`, playing the scripted ODR workload of
//! `tests/support/workload.rs` with the benchmark payload sizes), and the HTTP/SSE clients.
//!
//! ```text
//! cargo bench --bench load -- --help
//! cargo bench --bench load -- --quick
//! BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres \
//!   cargo bench --bench load -- --k 1,10,200 --latency-ms 0,200 --store sqlite,postgres
//! ```

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/support/fake_tavily.rs"]
mod fake_tavily;
#[path = "../tests/support/workload.rs"]
mod workload;

#[path = "../tests/support/pg.rs"]
mod pg;

use deep_research::sse_decoder::{SseDecoder, SseEvent};
use fake_llm::{FakeLlm, FakeReply, Responder};
use fake_tavily::FakeTavily;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use workload::{Script, scripted};

/// The model every role uses; the OpenAI fake answers for any model name.
const MODEL: &str = "openai:fake-model";
/// High enough that no process-wide cap binds.
const NO_CAP: usize = 100_000;
const STREAM_MODES: [&str; 4] = ["values", "updates", "messages-tuple", "custom"];

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    Sqlite,
    Postgres,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

#[derive(Clone, Debug)]
struct Opts {
    ks: Vec<usize>,
    latencies_ms: Vec<u64>,
    stores: Vec<StoreKind>,
    turns: usize,
    subscribers: usize,
    sub_latency_ms: u64,
    /// Pause before each streamed model chunk in the subscriber scenario (0: all at once).
    sub_chunk_ms: Vec<u64>,
    /// The same for the K-runs matrix and the conversation.
    chunk_ms: u64,
    timeout: Duration,
    db_max_connections: Option<u32>,
    pg_admin: Option<String>,
    /// Keep each scenario's store (temp dir, Postgres database) and server log for inspection.
    keep: bool,
    /// Run the K matrix under the shipped process-wide limits instead of lifting them.
    shipped_limits: bool,
}

/// Load benchmark of deep-research (the server runs as a child process).
#[derive(clap::Parser, Debug)]
#[command(name = "load")]
struct Args {
    /// Concurrent runs per scenario, e.g. 1,10,200,1000 (`none` skips the matrix). K=1 is
    /// always measured first: it is the critical path. [default: 1,10,200]
    #[arg(long = "k")]
    k: Option<String>,
    /// Provider latency (every model call and every search), e.g. 0,200 [default: 0,200]
    #[arg(long)]
    latency_ms: Option<String>,
    /// sqlite,postgres (postgres needs BENCH_DATABASE_URL, an admin URL that may CREATE
    /// DATABASE) [default: sqlite, plus postgres when BENCH_DATABASE_URL is set]
    #[arg(long)]
    store: Option<String>,
    /// The conversation scenario: N sequential runs on one thread (0 skips) [default: 10]
    #[arg(long)]
    turns: Option<usize>,
    /// N live subscribers joined to one run (0 skips) [default: 1000]
    #[arg(long)]
    subscribers: Option<usize>,
    /// Pause before each streamed model chunk in the K-runs matrix and the conversation
    /// (0: each answer streams at once)
    #[arg(long, default_value_t = 0)]
    chunk_ms: u64,
    /// Provider latency of the subscriber scenario
    #[arg(long, default_value_t = 200)]
    sub_latency_ms: u64,
    /// Pause before each streamed model chunk in the subscriber scenario, e.g. 0,1 (0: the fake
    /// streams each answer at once, so the 13 KB report's 3,250 chunks arrive as one burst)
    #[arg(long, default_value = "0")]
    sub_chunk_ms: String,
    /// Per-scenario limit in seconds [default: 900]
    #[arg(long)]
    timeout_s: Option<u64>,
    /// Passed to the server (default: the server's own default)
    #[arg(long)]
    db_max_connections: Option<u32>,
    /// Keep each scenario's SQLite file / Postgres database and server log
    #[arg(long)]
    keep: bool,
    /// Process-wide limits of the K matrix: `none` lifts every cap (runs, researchers,
    /// summaries, searches, model calls in flight) so that K runs execute at once; `shipped`
    /// keeps config/default.toml's (64 runs, 32 researchers, 16 summaries, 16 searches and 16
    /// model calls in flight), so that peak memory is set by the settings
    #[arg(long, default_value = "none", value_parser = ["none", "shipped"])]
    limits: String,
    /// Smoke preset: --k 1,5 --latency-ms 0 --turns 3 --subscribers 20 --timeout-s 120 (flags
    /// given too still win)
    #[arg(long)]
    quick: bool,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn parse_list<T: std::str::FromStr>(flag: &str, value: &str) -> Vec<T> {
    if value == "none" || value.is_empty() {
        return Vec::new();
    }
    value
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{flag}: cannot read {v:?}"))
        })
        .collect()
}

fn parse_stores(value: &str) -> Vec<StoreKind> {
    value
        .split(',')
        .map(|s| match s.trim() {
            "sqlite" => StoreKind::Sqlite,
            "postgres" | "pg" => StoreKind::Postgres,
            other => panic!("--store: unknown store {other:?}"),
        })
        .collect()
}

fn parse_opts() -> Opts {
    let args = <Args as clap::Parser>::parse();
    let pg_admin = std::env::var("BENCH_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let quick = args.quick;
    let default_stores = if pg_admin.is_some() {
        vec![StoreKind::Sqlite, StoreKind::Postgres]
    } else {
        vec![StoreKind::Sqlite]
    };
    let opts = Opts {
        ks: match &args.k {
            Some(v) => parse_list("--k", v),
            None if quick => vec![1, 5],
            None => vec![1, 10, 200],
        },
        latencies_ms: match &args.latency_ms {
            Some(v) => parse_list("--latency-ms", v),
            None if quick => vec![0],
            None => vec![0, 200],
        },
        stores: args.store.as_deref().map_or(default_stores, parse_stores),
        turns: args.turns.unwrap_or(if quick { 3 } else { 10 }),
        subscribers: args.subscribers.unwrap_or(if quick { 20 } else { 1000 }),
        sub_latency_ms: args.sub_latency_ms,
        sub_chunk_ms: parse_list("--sub-chunk-ms", &args.sub_chunk_ms),
        chunk_ms: args.chunk_ms,
        timeout: Duration::from_secs(args.timeout_s.unwrap_or(if quick { 120 } else { 900 })),
        db_max_connections: args.db_max_connections,
        pg_admin,
        keep: args.keep,
        shipped_limits: args.limits == "shipped",
    };
    assert!(
        !opts.stores.contains(&StoreKind::Postgres) || opts.pg_admin.is_some(),
        "--store postgres needs BENCH_DATABASE_URL (an admin URL that may CREATE DATABASE)"
    );
    opts
}

// ---------------------------------------------------------------------------------------------
// /proc measurements

/// Clock ticks per second (`getconf CLK_TCK`), 100 if it cannot be read.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `/proc/<pid>/status` value in kB (`VmHWM`, `VmRSS`).
fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU ticks of every Postgres backend serving database `db` (its process title names it).
fn pg_backend_ticks(db: &str) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let title = String::from_utf8_lossy(&cmdline);
        if title.starts_with("postgres:")
            && title.contains(db)
            && let Some(t) = cpu_ticks(&pid.to_string())
        {
            out.insert(pid, t);
        }
    }
    out
}

fn ticks_delta(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after
        .iter()
        .map(|(pid, t)| t.saturating_sub(before.get(pid).copied().unwrap_or(0)))
        .sum()
}

/// The soft open-file limit of this process (the server inherits it).
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

// ---------------------------------------------------------------------------------------------
// Fakes and the server process

struct Fakes {
    llm: FakeLlm,
    tavily: FakeTavily,
}

/// The OpenAI and Tavily fakes playing the benchmark workload, every reply after `latency`,
/// streamed answers with `chunk` before each chunk.
async fn start_fakes(latency: Duration, chunk: Duration) -> Fakes {
    let play = scripted(Script::benchmark());
    let responder: Responder = if latency.is_zero() {
        Arc::new(play)
    } else {
        Arc::new(move |req: &Value| FakeReply::Delay(latency, Box::new(play(req))))
    };
    let llm = FakeLlm::start(responder).await;
    llm.set_recording(false);
    llm.set_chunk_interval(chunk);
    let tavily = FakeTavily::start().await;
    tavily.set_latency(latency);
    Fakes { llm, tavily }
}

/// Providers pointed at the fakes; every process-wide cap set so high it does not bind,
/// unless `shipped` keeps the defaults of config/default.toml.
fn config_toml(fakes: &Fakes, shipped: bool) -> String {
    let (limits, provider_cap) = if shipped {
        (String::new(), String::new())
    } else {
        (
            format!(
                "max_concurrent_researchers = {NO_CAP}\nmax_concurrent_summaries = {NO_CAP}\n\
                 search_max_in_flight = {NO_CAP}\n"
            ),
            format!("max_in_flight = {NO_CAP}\n"),
        )
    };
    format!(
        r#"
[server]
# Every client of the benchmark is on loopback: one address, up to a thousand streams.
max_connections = 4096
max_connections_per_address = 0

[research]
research_model = "{MODEL}"
summarization_model = "{MODEL}"
compression_model = "{MODEL}"
final_report_model = "{MODEL}"
allow_clarification = true

[limits]
{limits}
[providers.openai]
base_url = "{llm}"
api_key = "sk-bench"
{provider_cap}

[search.tavily]
base_url = "{tavily}"
api_key = "{key}"

[prices."{MODEL}"]
input = 1.0
output = 2.0
"#,
        llm = fakes.llm.base_url(),
        tavily = fakes.tavily.base_url(),
        key = fake_tavily::API_KEY,
    )
}

enum Db {
    Sqlite(PathBuf),
    Postgres {
        admin: String,
        name: String,
        url: String,
    },
}

/// `deep-research serve` as a child process over a fresh store.
struct Server {
    child: Child,
    pid: u32,
    base: String,
    db: Db,
    dir: tempfile::TempDir,
    keep: bool,
    /// Started under `BENCH_SERVER_WRAPPER`: `child` is the wrapper, leading a process group.
    wrapped: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The process of process group `group` whose executable is `bin` (the server under a wrapper).
fn server_in_group(group: u32, bin: &str) -> Option<u32> {
    let bin = std::fs::canonicalize(bin).ok()?;
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Field 5 (the 3rd after the command name) is the process group.
            let pgrp: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(2)?
                .parse()
                .ok()?;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (pgrp == group && exe == bin).then_some(pid)
        })
}

impl Server {
    /// `max_runs`: the worker count (`None`: the server's default).
    async fn start(opts: &Opts, store: StoreKind, max_runs: Option<usize>, config: &str) -> Self {
        let dir = tempfile::TempDir::new().expect("temp dir");
        let config_path = dir.path().join("bench.toml");
        std::fs::write(&config_path, config).expect("write the config file");
        let bin = env!("CARGO_BIN_EXE_deep-research");
        // `BENCH_SERVER_WRAPPER="heaptrack --record-only -o /tmp/hp"` runs the server under a
        // profiler, in its own process group so that the whole group can be stopped.
        let wrapper: Vec<String> = std::env::var("BENCH_SERVER_WRAPPER")
            .map(|w| w.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(bin).process_group(0);
                cmd
            }
            None => Command::new(bin),
        };
        cmd.arg("serve")
            .args(["--no-auth", "--port", "0", "--config"])
            .arg(&config_path);
        if let Some(n) = max_runs {
            cmd.args(["--max-concurrent-runs", &n.to_string()]);
        }
        if let Some(n) = opts.db_max_connections {
            cmd.args(["--db-max-connections", &n.to_string()]);
        }
        for var in [
            "DATABASE_URL",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            "TAVILY_BASE_URL",
            "TAVILY_API_KEY",
            "DR_CONFIG",
            "DR_MAX_CONCURRENT_RUNS",
            "DR_DB_MAX_CONNECTIONS",
            "DR_API_KEY",
        ] {
            cmd.env_remove(var);
        }
        let db = match store {
            StoreKind::Sqlite => {
                let path = dir.path().join("bench.db");
                cmd.arg("--sqlite-path").arg(&path);
                Db::Sqlite(path)
            }
            StoreKind::Postgres => {
                let admin = opts.pg_admin.clone().expect("BENCH_DATABASE_URL");
                let (name, url) = pg::create_database(&admin, "dr_bench").await;
                cmd.env("DATABASE_URL", &url);
                Db::Postgres { admin, name, url }
            }
        };
        let log_path = dir.path().join("server.log");
        let log = std::fs::File::create(&log_path).expect("create the server log");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(log.try_clone().expect("log file handle"))
            .spawn()
            .expect("start deep-research serve (the bench builds it)");
        let stdout = child.stdout.take().expect("server stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        // The line naming the address goes to `rx`; everything else (logs, a wrapper's output)
        // is drained to the log file so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut log = log;
            let mut tx = Some(tx);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.contains("listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(line.clone());
                } else {
                    let _ = log.write_all(line.as_bytes());
                }
                line.clear();
            }
        });
        let first = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
            .await
            .expect("join the thread reading the server address")
            .unwrap_or_default();
        let Some(addr) = first
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
        else {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("the server did not print its address: {first:?}\n{log}");
        };
        let wrapped = !wrapper.is_empty();
        let pid = if wrapped {
            server_in_group(child.id(), bin).unwrap_or(child.id())
        } else {
            child.id()
        };
        let server = Self {
            base: format!("http://{addr}"),
            child,
            pid,
            db,
            dir,
            keep: opts.keep,
            wrapped,
        };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        let client = deep_research::outbound::client_builder().build().unwrap();
        for _ in 0..200 {
            if let Ok(r) = client.get(format!("{}/ok", self.base)).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server at {} never answered /ok", self.base);
    }

    fn cpu_ticks(&self) -> u64 {
        cpu_ticks(&self.pid.to_string()).expect("read the server's /proc/<pid>/stat")
    }

    fn peak_rss_mb(&self) -> f64 {
        status_kb(self.pid, "VmHWM").expect("read the server's VmHWM") as f64 / 1024.0
    }

    fn pg_ticks(&self) -> HashMap<u32, u64> {
        match &self.db {
            Db::Postgres { name, .. } => pg_backend_ticks(name),
            Db::Sqlite(_) => HashMap::new(),
        }
    }

    /// Statements Postgres has executed in this server's database so far, and their execution
    /// time in ms (`pg_stat_statements`); `None` on SQLite or where the extension is not loaded.
    async fn pg_statements(&self) -> Option<(u64, f64)> {
        let Db::Postgres { admin, name, .. } = &self.db else {
            return None;
        };
        use sqlx::Connection;
        // Through the admin database, so this connection is not one of the scenario's
        // backends whose CPU is counted.
        let mut conn = sqlx::PgConnection::connect(admin).await.ok()?;
        // Creating the extension works without the library preloaded; the query then fails.
        let _ = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&mut conn)
            .await;
        let totals: Option<(i64, f64)> = sqlx::query_as(
            "SELECT coalesce(sum(s.calls), 0)::bigint, coalesce(sum(s.total_exec_time), 0)::float8 \
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1",
        )
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .ok();
        let _ = conn.close().await;
        totals.map(|(calls, ms)| (calls.max(0) as u64, ms))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Per thread: (checkpoint rows, checkpoint bytes), (event rows, event bytes); and the
    /// checkpoints table's size on disk (Postgres only).
    async fn storage(&self) -> Storage {
        match &self.db {
            Db::Postgres { url, .. } => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(url)
                    .await
                    .expect("connect to the benchmark database");
                let ck: Vec<(String, i64, i64)> = sqlx::query_as(
                    "SELECT c.thread_id, c.n, c.bytes + coalesce(b.bytes, 0)::bigint FROM \
                     (SELECT thread_id, count(*)::bigint AS n, coalesce(sum(octet_length(writes) \
                     + octet_length(metadata) + octet_length(tasks) + octet_length(next_nodes)), 0)::bigint \
                     AS bytes FROM checkpoints GROUP BY thread_id) c LEFT JOIN \
                     (SELECT thread_id, sum(octet_length(hash) + octet_length(data))::bigint AS bytes \
                     FROM checkpoint_blobs GROUP BY thread_id) b USING (thread_id)",
                )
                .fetch_all(&pool)
                .await
                .expect("query checkpoints");
                let ev: Vec<(String, i64, i64)> = sqlx::query_as(
                    "SELECT thread_id, coalesce(sum(length(frames) \
                     - length(replace(frames, chr(10), ''))), 0)::bigint, \
                     coalesce(sum(octet_length(frames)), 0)::bigint \
                     FROM run_event_pages GROUP BY thread_id",
                )
                .fetch_all(&pool)
                .await
                .expect("query run_event_pages");
                let (disk,): (i64,) = sqlx::query_as(
                    "SELECT (pg_total_relation_size('checkpoints') \
                                    + pg_total_relation_size('checkpoint_blobs'))::bigint",
                )
                .fetch_one(&pool)
                .await
                .expect("checkpoints size on disk");
                // Every table of the service with its indexes and TOAST (what the issue's
                // "bytes stored per run" counts).
                let all_tables = || async {
                    let (bytes,): (i64,) = sqlx::query_as(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = current_schema() AND c.relkind = 'r'",
                    )
                    .fetch_one(&pool)
                    .await
                    .expect("tables' size on disk");
                    bytes as u64
                };
                let all = all_tables().await;
                // What stays once the space of deleted rows is reclaimed (autovacuum's work,
                // done here at once): the per-step call records are deleted as each step's
                // checkpoint lands, so right after a burst their dead rows are still counted.
                sqlx::raw_sql("VACUUM")
                    .execute(&pool)
                    .await
                    .expect("vacuum the benchmark database");
                let vacuumed = all_tables().await;
                pool.close().await;
                let mut storage = Storage::new(ck, ev, Some(disk as u64));
                storage.all_on_disk = Some(all);
                storage.all_after_vacuum = Some(vacuumed);
                storage
            }
            Db::Sqlite(path) => {
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect(&format!("sqlite://{}?mode=ro", path.display()))
                    .await
                    .expect("open the benchmark SQLite file");
                let ck: Vec<(String, i64, i64)> = sqlx::query_as(
                    "SELECT c.thread_id, c.n, c.bytes + coalesce(b.bytes, 0) FROM \
                     (SELECT thread_id, count(*) AS n, coalesce(sum(length(CAST(writes AS BLOB)) \
                     + length(CAST(metadata AS BLOB)) + length(CAST(tasks AS BLOB)) \
                     + length(CAST(next_nodes AS BLOB))), 0) AS bytes FROM checkpoints GROUP BY thread_id) c \
                     LEFT JOIN (SELECT thread_id, sum(length(CAST(hash AS BLOB)) \
                     + length(CAST(data AS BLOB))) AS bytes FROM checkpoint_blobs GROUP BY thread_id) b \
                     USING (thread_id)",
                )
                .fetch_all(&pool)
                .await
                .expect("query checkpoints");
                let ev: Vec<(String, i64, i64)> = sqlx::query_as(
                    "SELECT thread_id, coalesce(sum(length(frames) \
                     - length(replace(frames, char(10), ''))), 0), \
                     coalesce(sum(length(CAST(frames AS BLOB))), 0) \
                     FROM run_event_pages GROUP BY thread_id",
                )
                .fetch_all(&pool)
                .await
                .expect("query run_event_pages");
                pool.close().await;
                Storage::new(ck, ev, None)
            }
        }
    }

    /// Stops the server (a wrapped one with SIGTERM to its process group, so a profiler can
    /// write its data).
    fn kill(&mut self) {
        if self.wrapped {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            for _ in 0..600 {
                if self.child.try_wait().is_ok_and(|s| s.is_some()) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server and drops its Postgres database (unless `--keep`).
    async fn stop(mut self) {
        self.kill();
        if self.keep {
            let kept = match &self.db {
                Db::Postgres { url, .. } => url.clone(),
                Db::Sqlite(path) => path.display().to_string(),
            };
            let dir = std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("temp dir"));
            println!("    kept: {} (store {kept})", dir.keep().display());
            return;
        }
        if let Db::Postgres { admin, name, .. } = &self.db {
            use sqlx::Connection;
            if let Ok(mut conn) = sqlx::PgConnection::connect(admin).await {
                let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(drop))
                    .execute(&mut conn)
                    .await
                {
                    eprintln!("could not drop {name}: {e}");
                }
                let _ = conn.close().await;
            }
        }
    }
}

#[derive(Default)]
struct Storage {
    checkpoints: HashMap<String, (u64, u64)>,
    events: HashMap<String, (u64, u64)>,
    checkpoints_on_disk: Option<u64>,
    /// Every table and index of the service (Postgres only).
    all_on_disk: Option<u64>,
    /// The same after `VACUUM`.
    all_after_vacuum: Option<u64>,
}

impl Storage {
    fn new(ck: Vec<(String, i64, i64)>, ev: Vec<(String, i64, i64)>, disk: Option<u64>) -> Self {
        let map = |rows: Vec<(String, i64, i64)>| {
            rows.into_iter()
                .map(|(t, n, b)| (t, (n as u64, b as u64)))
                .collect()
        };
        Self {
            checkpoints: map(ck),
            events: map(ev),
            checkpoints_on_disk: disk,
            all_on_disk: None,
            all_after_vacuum: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clients

fn http_client() -> reqwest::Client {
    deep_research::outbound::client_builder()
        .http1_only()
        .build()
        .expect("build the HTTP client")
}

async fn new_thread(client: &reqwest::Client, base: &str) -> Result<String, String> {
    let resp = client
        .post(format!("{base}/threads"))
        .json(&json!({}))
        .send()
        .await
        .map_err(|e| format!("create thread: {e}"))?;
    let thread: Value = resp.json().await.map_err(|e| format!("thread json: {e}"))?;
    thread["thread_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no thread_id in {thread}"))
}

async fn new_threads(client: &reqwest::Client, base: &str, n: usize) -> Vec<String> {
    futures::stream::iter(0..n)
        .map(|_| new_thread(client, base))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(|r| r.expect("create a thread"))
        .collect()
}

fn run_body(question: &str) -> Value {
    json!({"assistant_id": "deep_research",
           "input": {"messages": [{"role": "user", "content": question}]},
           "stream_mode": STREAM_MODES,
           "stream_resumable": true})
}

/// What one SSE client saw.
#[derive(Default)]
struct StreamStats {
    /// Time from sending the request to the first event, and whether that was `metadata`.
    first_event: Option<Duration>,
    first_is_metadata: bool,
    saw_metadata: bool,
    /// Receive time minus the event id's ms, per event.
    lags: Vec<i64>,
    bytes: u64,
    events: u64,
    error: Option<String>,
    /// The last `values` event carried a non-empty `final_report`.
    final_report: bool,
}

impl StreamStats {
    fn success(&self) -> bool {
        self.error.is_none() && self.saw_metadata && self.final_report
    }

    /// For a client that joined a run already announced: it sees only events published after
    /// it connected, so no `metadata` (the run's first event, sent when it was created).
    fn complete_join(&self) -> bool {
        self.error.is_none() && self.final_report
    }
}

/// Reads an SSE response to its end.
async fn read_sse(resp: reqwest::Response, sent: Instant, stats: &mut StreamStats) {
    let mut last_values: Option<String> = None;
    let mut on_event = |event: SseEvent| {
        let now = epoch_ms();
        if stats.first_event.is_none() {
            stats.first_event = Some(sent.elapsed());
            stats.first_is_metadata = event.event == "metadata";
        }
        stats.events += 1;
        if let Some(ms) = event
            .id
            .split_once('-')
            .and_then(|(ms, _)| ms.parse::<i64>().ok())
        {
            stats.lags.push(now - ms);
        }
        match event.event.as_str() {
            "metadata" => stats.saw_metadata = true,
            "error" => stats.error = Some(event.data),
            "values" => last_values = Some(event.data),
            // A failed researcher or search is reported, not fatal: still not a clean run.
            "custom"
                if event.data.contains("\"researcher_error\"")
                    || event.data.contains("\"search_error\"") =>
            {
                stats.error.get_or_insert(event.data);
            }
            _ => {}
        }
    };
    let mut bytes = 0u64;
    let mut failure = None;
    let mut body = resp.bytes_stream();
    let mut decoder = SseDecoder::default();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => {
                bytes += c.len() as u64;
                decoder.push(&c, &mut on_event);
            }
            Err(e) => {
                failure = Some(format!("stream: {e}"));
                break;
            }
        }
    }
    if failure.is_some() {
        stats.error = failure;
    }
    stats.final_report = last_values
        .as_deref()
        .and_then(|v| serde_json::from_str::<Value>(v).ok())
        .is_some_and(|v| v["final_report"].as_str().is_some_and(|r| !r.is_empty()));
    stats.bytes = bytes;
}

/// One research run streamed with `POST /threads/{tid}/runs/stream`.
async fn stream_run(
    client: reqwest::Client,
    base: String,
    tid: String,
    question: String,
) -> StreamStats {
    let mut stats = StreamStats::default();
    let sent = Instant::now();
    let resp = client
        .post(format!("{base}/threads/{tid}/runs/stream"))
        .json(&run_body(&question))
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => read_sse(r, sent, &mut stats).await,
        Ok(r) => {
            let status = r.status();
            stats.error = Some(format!("{status}: {}", r.text().await.unwrap_or_default()));
        }
        Err(e) => stats.error = Some(format!("send: {e}")),
    }
    stats
}

/// The bytes of a thread's history as `useStream` loads it (`fetchStateHistory`: limit 1000).
async fn history_bytes(client: &reqwest::Client, base: &str, tid: &str) -> Option<usize> {
    let body = client
        .get(format!("{base}/threads/{tid}/history?limit=1000"))
        .send()
        .await
        .ok()?
        .error_for_status()
        .ok()?
        .bytes()
        .await
        .ok()?;
    Some(body.len())
}

/// The JSON size of a thread's current `values` as stored (the page texts clients are not sent
/// included: what checkpoints are compared with).
async fn state_bytes(client: &reqwest::Client, base: &str, tid: &str) -> Option<usize> {
    let state: Value = client
        .get(format!("{base}/threads/{tid}/state?include_hidden=true"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    Some(serde_json::to_string(&state["values"]).ok()?.len())
}

// ---------------------------------------------------------------------------------------------
// Statistics and output

/// Nearest-rank percentile of sorted values.
fn pct<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

const TABLE_HEADER: &str = "| store | K | latency | server CPU ms/run | PG backends CPU ms/run | \
peak RSS MB | runs/s | wall s | wall ÷ K=1 | first event p50/p99 ms | delivery lag p50/p99 ms | \
ckpt rows/run | ckpt KB/run | final state KB | ckpt ÷ state | SSE KB/run | ok |\n\
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

const SUBSCRIBER_HEADER: &str = "| store | latency | pause per model chunk | subscribers | \
connected before start | complete streams | events/subscriber min–max | delivery lag p50 / p99 / max ms | \
server CPU s | PG backends CPU s | driver CPU s | peak RSS MB | wall s |\n\
|---|---|---|---|---|---|---|---|---|---|---|---|---|";

struct Outcome {
    store: StoreKind,
    k: usize,
    latency_ms: u64,
    server_cpu_s: f64,
    pg_cpu_s: Option<f64>,
    driver_cpu_s: f64,
    peak_rss_mb: f64,
    wall_s: f64,
    crit_s: Option<f64>,
    first_p50: Option<f64>,
    first_p99: Option<f64>,
    lag_p50: Option<i64>,
    lag_p99: Option<i64>,
    lag_max: Option<i64>,
    ckpt_rows: f64,
    ckpt_bytes: f64,
    state_bytes: f64,
    /// One thread's `/history` as `useStream` loads it.
    history_bytes: Option<f64>,
    sse_bytes: f64,
    events: f64,
    event_rows: f64,
    event_bytes: f64,
    ckpt_disk: Option<f64>,
    all_disk: Option<f64>,
    all_vacuumed: Option<f64>,
    /// Postgres statements per run and their execution time in ms per run.
    pg_statements: Option<(f64, f64)>,
    model_calls: f64,
    searches: f64,
    ok: usize,
    /// Runs whose first event was `metadata`.
    first_metadata: usize,
    timed_out: bool,
    first_error: Option<String>,
}

/// The Python reference's figures (the issue's: ODR 0.0.16 on langgraph 1.2, the same workload
/// and fakes, a 2-core machine). Not measured here: printed for the ratios.
mod python {
    /// Process CPU per run at K ≥ 10, ms (low, high).
    pub const CPU_MS: (f64, f64) = (580.0, 700.0);
    /// Peak RSS with K runs in flight at 200 ms latency, MB.
    pub const RSS_MB: [(usize, f64); 3] = [(10, 180.0), (50, 378.0), (200, 939.0)];
    /// POST → first event with 50 runs queued, ms (mean).
    pub const FIRST_EVENT_K50_MS: f64 = 14_500.0;
    /// Checkpoint payload bytes ÷ the final state.
    pub const STORED_RATIO: f64 = 10.8;
}

impl Outcome {
    /// This row's figures as ratios to the Python reference, where the issue gives one.
    fn versus_python(&self) -> String {
        let k = self.k as f64;
        let cpu = self.server_cpu_s * 1000.0 / k + self.pg_cpu_s.map_or(0.0, |s| s * 1000.0 / k);
        let mut parts = vec![format!(
            "CPU per run (server and its Postgres) {:.3}–{:.3}× ({cpu:.1} ms against {:.0}–{:.0})",
            cpu / python::CPU_MS.1,
            cpu / python::CPU_MS.0,
            python::CPU_MS.0,
            python::CPU_MS.1
        )];
        if self.latency_ms == 200
            && let Some(&(_, mb)) = python::RSS_MB.iter().find(|(kk, _)| *kk == self.k)
        {
            parts.push(format!(
                "peak RSS {:.2}× ({:.0} MB against {mb:.0})",
                self.peak_rss_mb / mb,
                self.peak_rss_mb
            ));
        }
        if self.k == 50
            && let Some(p50) = self.first_p50
        {
            parts.push(format!(
                "first event p50 {:.4}× ({p50:.1} ms against {:.1} s)",
                p50 / python::FIRST_EVENT_K50_MS,
                python::FIRST_EVENT_K50_MS / 1000.0
            ));
        }
        let ratio = self.ckpt_bytes / self.state_bytes.max(1.0);
        parts.push(format!(
            "checkpoint bytes ÷ final state {:.2}× ({ratio:.2} against {:.1})",
            ratio / python::STORED_RATIO,
            python::STORED_RATIO
        ));
        format!("    vs Python ODR: {}", parts.join("; "))
    }

    fn row(&self) -> String {
        let k = self.k as f64;
        format!(
            "| {} | {} | {} ms | {:.1} | {} | {:.0} | {:.2} | {:.2} | {} | {} / {} | {} / {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.0} | {}/{}{} |",
            self.store.name(),
            self.k,
            self.latency_ms,
            self.server_cpu_s * 1000.0 / k,
            fmt_opt(self.pg_cpu_s.map(|s| s * 1000.0 / k), 1),
            self.peak_rss_mb,
            k / self.wall_s,
            self.wall_s,
            fmt_opt(self.crit_s.map(|c| self.wall_s / c), 2),
            fmt_opt(self.first_p50, 1),
            fmt_opt(self.first_p99, 1),
            self.lag_p50.map_or("–".into(), |v| v.to_string()),
            self.lag_p99.map_or("–".into(), |v| v.to_string()),
            self.ckpt_rows,
            self.ckpt_bytes / 1024.0,
            self.state_bytes / 1024.0,
            self.ckpt_bytes / self.state_bytes.max(1.0),
            self.sse_bytes / 1024.0,
            self.ok,
            self.k,
            if self.timed_out { " (timed out)" } else { "" },
        )
    }

    fn details(&self) -> String {
        let k = self.k as f64;
        format!(
            "    details: server CPU {:.2} s total; driver+fakes CPU {:.2} s ({:.1} ms/run); \
             model calls/run {:.1}; searches/run {:.1}; SSE events/run {:.0}; one thread's \
             /history?limit=1000 {}; stored events/run \
             {:.0} frames, {:.1} KB of pages; checkpoints on disk/run {}; all tables on disk/run {}; after VACUUM {}; \
             Postgres statements/run {}; \
             delivery lag max {} ms; first event was metadata in {}/{} runs{}",
            self.server_cpu_s,
            self.driver_cpu_s,
            self.driver_cpu_s * 1000.0 / k,
            self.model_calls,
            self.searches,
            self.events,
            self.history_bytes
                .map_or("–".into(), |b| format!("{:.1} KB", b / 1024.0)),
            self.event_rows,
            self.event_bytes / 1024.0,
            self.ckpt_disk
                .map_or("–".into(), |b| format!("{:.1} KB", b / 1024.0)),
            self.all_disk.map_or("–".into(), |b| format!(
                "{:.1} KB ({:.2}× the final state)",
                b / 1024.0,
                b / self.state_bytes.max(1.0)
            )),
            self.all_vacuumed.map_or("–".into(), |b| format!(
                "{:.1} KB ({:.2}×)",
                b / 1024.0,
                b / self.state_bytes.max(1.0)
            )),
            self.pg_statements.map_or("–".into(), |(n, ms)| format!(
                "{n:.1}, executing {ms:.2} ms"
            )),
            self.lag_max.map_or("–".into(), |v| v.to_string()),
            self.first_metadata,
            self.k,
            self.first_error
                .as_deref()
                .map_or(String::new(), |e| format!(
                    "; first error: {}",
                    truncate(e, 300)
                )),
        )
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_owned()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// K concurrent research runs, each on its own thread, each streamed by its creator.
async fn concurrent_runs(
    opts: &Opts,
    store: StoreKind,
    k: usize,
    latency_ms: u64,
    crit_s: Option<f64>,
    hz: f64,
) -> Outcome {
    let chunk = Duration::from_millis(opts.chunk_ms);
    let fakes = start_fakes(Duration::from_millis(latency_ms), chunk).await;
    let workers = (!opts.shipped_limits).then_some(k.max(1));
    let config = config_toml(&fakes, opts.shipped_limits);
    let server = Server::start(opts, store, workers, &config).await;
    let client = http_client();
    let self_pid = std::process::id().to_string();

    let statements0 = server.pg_statements().await;
    let cpu0 = server.cpu_ticks();
    let drv0 = cpu_ticks(&self_pid).unwrap_or(0);
    let pg0 = server.pg_ticks();
    let tids = new_threads(&client, &server.base, k).await;
    let (llm0, tav0) = (fakes.llm.calls(), fakes.tavily.calls());

    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let mut set = JoinSet::new();
    for (i, tid) in tids.iter().enumerate() {
        let question = format!(
            "Compare sodium-ion and LFP batteries for home storage: cost, safety, lifetime (run {i})."
        );
        set.spawn(stream_run(
            client.clone(),
            server.base.clone(),
            tid.clone(),
            question,
        ));
    }
    let (runs, timed_out) = collect_streams(&mut set, deadline, k).await;
    let wall = start.elapsed().as_secs_f64();
    let server_cpu = server.cpu_ticks().saturating_sub(cpu0) as f64 / hz;
    let driver_cpu = cpu_ticks(&self_pid).unwrap_or(0).saturating_sub(drv0) as f64 / hz;
    let pg_cpu = match store {
        StoreKind::Postgres => Some(ticks_delta(&pg0, &server.pg_ticks()) as f64 / hz),
        StoreKind::Sqlite => None,
    };
    let peak = server.peak_rss_mb();
    let (llm1, tav1) = (fakes.llm.calls(), fakes.tavily.calls());
    let statements = match (statements0, server.pg_statements().await) {
        (Some((n0, ms0)), Some((n1, ms1))) => Some((n1.saturating_sub(n0), ms1 - ms0)),
        _ => None,
    };

    let states: Vec<usize> = futures::stream::iter(tids.iter())
        .map(|tid| state_bytes(&client, &server.base, tid))
        .buffer_unordered(16)
        .filter_map(|s| async move { s })
        .collect()
        .await;
    let history = match tids.first() {
        Some(tid) => history_bytes(&client, &server.base, tid).await,
        None => None,
    };
    let storage = server.storage().await;
    let first_error = runs.iter().find_map(|r| r.error.clone());
    if first_error.is_some() || timed_out {
        eprintln!("server log tail:\n{}", server.log_tail());
    }
    server.stop().await;

    let kf = k as f64;
    let mut firsts: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.first_event)
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    firsts.sort_by(f64::total_cmp);
    let mut lags: Vec<i64> = runs.iter().flat_map(|r| r.lags.iter().copied()).collect();
    lags.sort_unstable();
    let sum = |m: &HashMap<String, (u64, u64)>| {
        tids.iter().fold((0u64, 0u64), |acc, t| {
            let (n, b) = m.get(t).copied().unwrap_or_default();
            (acc.0 + n, acc.1 + b)
        })
    };
    let (ck_rows, ck_bytes) = sum(&storage.checkpoints);
    let (ev_rows, ev_bytes) = sum(&storage.events);
    Outcome {
        store,
        k,
        latency_ms,
        server_cpu_s: server_cpu,
        pg_cpu_s: pg_cpu,
        driver_cpu_s: driver_cpu,
        peak_rss_mb: peak,
        wall_s: wall,
        crit_s,
        first_p50: pct(&firsts, 50.0),
        first_p99: pct(&firsts, 99.0),
        lag_p50: pct(&lags, 50.0),
        lag_p99: pct(&lags, 99.0),
        lag_max: lags.last().copied(),
        ckpt_rows: ck_rows as f64 / kf,
        ckpt_bytes: ck_bytes as f64 / kf,
        state_bytes: states.iter().sum::<usize>() as f64 / states.len().max(1) as f64,
        history_bytes: history.map(|b| b as f64),
        sse_bytes: runs.iter().map(|r| r.bytes).sum::<u64>() as f64 / kf,
        events: runs.iter().map(|r| r.events).sum::<u64>() as f64 / kf,
        event_rows: ev_rows as f64 / kf,
        event_bytes: ev_bytes as f64 / kf,
        ckpt_disk: storage.checkpoints_on_disk.map(|b| b as f64 / kf),
        all_disk: storage.all_on_disk.map(|b| b as f64 / kf),
        all_vacuumed: storage.all_after_vacuum.map(|b| b as f64 / kf),
        pg_statements: statements.map(|(n, ms)| (n as f64 / kf, ms / kf)),
        model_calls: (llm1 - llm0) as f64 / kf,
        searches: (tav1 - tav0) as f64 / kf,
        ok: runs.iter().filter(|r| r.success()).count(),
        first_metadata: runs.iter().filter(|r| r.first_is_metadata).count(),
        timed_out,
        first_error,
    }
}

/// `turns` sequential research runs on one thread; stored bytes after each turn.
async fn conversation(opts: &Opts, store: StoreKind, turns: usize) {
    println!(
        "\n### Conversation: {turns} turns on one thread ({}, 0 ms latency)\n",
        store.name()
    );
    println!(
        "| turn | ok | ckpt rows (total) | ckpt KB (total) | ckpt KB this turn | final state KB | ckpt ÷ state | stored events KB (total) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let fakes = start_fakes(Duration::ZERO, Duration::from_millis(opts.chunk_ms)).await;
    let server = Server::start(opts, store, Some(4), &config_toml(&fakes, false)).await;
    let client = http_client();
    let tid = new_thread(&client, &server.base)
        .await
        .expect("create the conversation thread");
    let deadline = Instant::now() + opts.timeout;
    let mut previous = 0u64;
    let mut increments = Vec::new();
    for turn in 1..=turns {
        if Instant::now() > deadline {
            println!("(stopped: scenario timeout)");
            break;
        }
        let question = format!(
            "Turn {turn}: and how do sodium-ion and LFP batteries compare on aspect number {turn}?"
        );
        let stats = stream_run(client.clone(), server.base.clone(), tid.clone(), question).await;
        let storage = server.storage().await;
        let (rows, bytes) = storage.checkpoints.get(&tid).copied().unwrap_or_default();
        let (_, ev_bytes) = storage.events.get(&tid).copied().unwrap_or_default();
        let state = state_bytes(&client, &server.base, &tid).await.unwrap_or(0);
        let inc = bytes - previous;
        previous = bytes;
        increments.push(inc);
        println!(
            "| {turn} | {} | {rows} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} |",
            if stats.success() { "yes" } else { "NO" },
            bytes as f64 / 1024.0,
            inc as f64 / 1024.0,
            state as f64 / 1024.0,
            bytes as f64 / state.max(1) as f64,
            ev_bytes as f64 / 1024.0,
        );
        if let Some(e) = &stats.error {
            println!("    error: {}", truncate(e, 300));
        }
    }
    if increments.len() >= 3 {
        let later = &increments[1..];
        let (min, max) = (
            later.iter().min().copied().unwrap_or(0),
            later.iter().max().copied().unwrap_or(0),
        );
        println!(
            "\nper-turn checkpoint bytes, turns 2..{}: min {:.1} KB, max {:.1} KB (max ÷ min {:.2})",
            increments.len(),
            min as f64 / 1024.0,
            max as f64 / 1024.0,
            max as f64 / min.max(1) as f64
        );
    }
    server.stop().await;
}

/// `n` clients joined live to one run (`GET /threads/{tid}/runs/{rid}/stream`).
async fn subscribers(
    opts: &Opts,
    store: StoreKind,
    n: usize,
    latency_ms: u64,
    chunk_ms: u64,
    hz: f64,
) {
    let fakes = start_fakes(
        Duration::from_millis(latency_ms),
        Duration::from_millis(chunk_ms),
    )
    .await;
    let server = Server::start(opts, store, Some(4), &config_toml(&fakes, false)).await;
    let client = http_client();
    let tid = new_thread(&client, &server.base)
        .await
        .expect("create the subscribers' thread");
    // The run starts after a delay so every subscriber is connected before its first event.
    let delay_s = 2.0 + n as f64 / 250.0;
    let mut body = run_body("Compare sodium-ion and LFP batteries for home storage.");
    body["after_seconds"] = json!(delay_s);
    let self_pid = std::process::id().to_string();
    let cpu0 = server.cpu_ticks();
    let drv0 = cpu_ticks(&self_pid).unwrap_or(0);
    let pg0 = server.pg_ticks();
    let run: Value = client
        .post(format!("{}/threads/{tid}/runs", server.base))
        .json(&body)
        .send()
        .await
        .expect("create the run")
        .json()
        .await
        .expect("run json");
    let rid = run["run_id"].as_str().expect("run_id").to_owned();
    let start = Instant::now();
    let connected = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..n {
        let client = client.clone();
        let url = format!("{}/threads/{tid}/runs/{rid}/stream", server.base);
        let connected = connected.clone();
        set.spawn(async move {
            let mut stats = StreamStats::default();
            let sent = Instant::now();
            match client.get(url).send().await {
                Ok(r) if r.status().is_success() => {
                    connected.fetch_add(1, Ordering::Relaxed);
                    read_sse(r, sent, &mut stats).await;
                }
                Ok(r) => stats.error = Some(format!("status {}", r.status())),
                Err(e) => stats.error = Some(format!("send: {e}")),
            }
            stats
        });
    }
    // Report how many were connected when the run was due to start.
    let connect_deadline = tokio::time::Instant::now() + Duration::from_secs_f64(delay_s);
    while tokio::time::Instant::now() < connect_deadline
        && connected.load(Ordering::Relaxed) < n as u64
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let connected_in_time = connected.load(Ordering::Relaxed);
    let connect_s = start.elapsed().as_secs_f64();
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let (subs, timed_out) = collect_streams(&mut set, deadline, n).await;
    let wall = start.elapsed().as_secs_f64();
    let cpu = server.cpu_ticks().saturating_sub(cpu0) as f64 / hz;
    let driver_cpu = cpu_ticks(&self_pid).unwrap_or(0).saturating_sub(drv0) as f64 / hz;
    let pg_cpu = match store {
        StoreKind::Postgres => format!("{:.2}", ticks_delta(&pg0, &server.pg_ticks()) as f64 / hz),
        StoreKind::Sqlite => "–".to_owned(),
    };
    let peak = server.peak_rss_mb();
    server.stop().await;

    let mut lags: Vec<i64> = subs.iter().flat_map(|s| s.lags.iter().copied()).collect();
    lags.sort_unstable();
    let events: Vec<u64> = subs.iter().map(|s| s.events).collect();
    let complete = subs.iter().filter(|s| s.complete_join()).count();
    println!(
        "| {} | {latency_ms} ms | {chunk_ms} ms | {n} | {connected_in_time} (after {connect_s:.1} s) | {complete}{} | {}–{} | {} / {} / {} | {cpu:.2} | {pg_cpu} | {driver_cpu:.2} | {peak:.0} | {wall:.1} |",
        store.name(),
        if timed_out { " (timed out)" } else { "" },
        events.iter().min().copied().unwrap_or(0),
        events.iter().max().copied().unwrap_or(0),
        pct(&lags, 50.0).map_or("–".into(), |v| v.to_string()),
        pct(&lags, 99.0).map_or("–".into(), |v| v.to_string()),
        lags.last().map_or("–".into(), |v| v.to_string()),
    );
    if let Some(e) = subs.iter().find_map(|s| s.error.as_deref()) {
        println!("    first error: {}", truncate(e, 300));
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it,
    // and a load test has no place in the test suite.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "load benchmark: run it with `cargo bench --bench load -- --help`; skipped under cargo test"
        );
        return;
    }
    let opts = parse_opts();
    let hz = clock_ticks();
    let nofile = open_file_limit();
    let biggest = opts
        .ks
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(opts.subscribers);
    println!(
        "deep-research load benchmark: k={:?} latency_ms={:?} chunk_ms={} stores={:?} turns={} \
         subscribers={} (latency {} ms, chunk_ms {:?}) timeout={}s open-file limit={} \
         clock ticks/s={hz}",
        opts.ks,
        opts.latencies_ms,
        opts.chunk_ms,
        opts.stores.iter().map(|s| s.name()).collect::<Vec<_>>(),
        opts.turns,
        opts.subscribers,
        opts.sub_latency_ms,
        opts.sub_chunk_ms,
        opts.timeout.as_secs(),
        nofile.map_or("?".into(), |n| n.to_string()),
    );
    if let Some(limit) = nofile
        && (limit as usize) < 4 * biggest + 1024
    {
        println!(
            "warning: the open-file limit ({limit}) may be too low for {biggest} concurrent \
             streams plus the server's provider connections; raise it with `ulimit -n`"
        );
    }

    if !opts.ks.is_empty() {
        if opts.shipped_limits {
            println!(
                "\nK matrix under the shipped limits (config/default.toml: 64 runs executing, the \
                 rest queued; 32 researchers, 16 summaries, 16 searches, 16 model calls in flight)"
            );
        }
        println!("\n{TABLE_HEADER}");
        for &store in &opts.stores {
            for &latency in &opts.latencies_ms {
                let mut single = concurrent_runs(&opts, store, 1, latency, None, hz).await;
                let crit = (single.ok == 1).then_some(single.wall_s);
                single.crit_s = crit;
                println!("{}", single.row());
                println!("{}", single.details());
                println!("{}", single.versus_python());
                for &k in opts.ks.iter().filter(|&&k| k > 1) {
                    let outcome = concurrent_runs(&opts, store, k, latency, crit, hz).await;
                    println!("{}", outcome.row());
                    println!("{}", outcome.details());
                    println!("{}", outcome.versus_python());
                }
            }
        }
    }
    for &store in &opts.stores {
        if opts.turns > 0 {
            conversation(&opts, store, opts.turns).await;
        }
    }
    if opts.subscribers > 0 {
        println!("\n### {} live subscribers on one run\n", opts.subscribers);
        println!("{SUBSCRIBER_HEADER}");
        for &store in &opts.stores {
            for &chunk_ms in &opts.sub_chunk_ms {
                let (n, latency) = (opts.subscribers, opts.sub_latency_ms);
                subscribers(&opts, store, n, latency, chunk_ms, hz).await;
            }
        }
    }
}

/// Waits for every client task until `deadline`; a task that panicked counts as a failed stream.
/// Returns the stats and whether the deadline cut the scenario short.
async fn collect_streams(
    set: &mut JoinSet<StreamStats>,
    deadline: tokio::time::Instant,
    expected: usize,
) -> (Vec<StreamStats>, bool) {
    let mut stats = Vec::with_capacity(expected);
    loop {
        match tokio::time::timeout_at(deadline, set.join_next()).await {
            Ok(Some(Ok(s))) => stats.push(s),
            Ok(Some(Err(e))) => stats.push(StreamStats {
                error: Some(format!("task: {e}")),
                ..StreamStats::default()
            }),
            Ok(None) => return (stats, false),
            Err(_) => {
                set.abort_all();
                return (stats, true);
            }
        }
    }
}
