//! `Store` over `sqlx::AnyPool`: one implementation for Postgres and SQLite.
//!
//! Everything is stored as portable types (TEXT ids, JSON and timestamps; BIGINT numbers) so the
//! same statements run on both backends. `Dialect` covers the few places that differ: row locks,
//! how a write transaction starts, and JSON containment filters.
//!
//! Concurrency: on Postgres, write transactions lock the thread row before touching its runs
//! (always thread → runs, threads in id order) so status bookkeeping cannot interleave; claiming
//! uses `FOR UPDATE SKIP LOCKED` plus a partial unique index (one running run per thread). On
//! SQLite every write transaction starts with `BEGIN IMMEDIATE`, which serializes writers.

use super::{
    Assistant, AssistantPatch, AssistantQuery, CancelAction, Checkpoint, CheckpointQuery, EventId,
    IfExists, JsonMap, Lease, LeaseState, Page, Run, RunEnd, RunInsert, RunStatus, SortOrder,
    Store, StoreError, StoreResult, StoredEvent, Thread, ThreadQuery, ThreadStatus, ThreadSummary,
};
use super::{blobs, pages};
use crate::time::Timestamp;
use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use sqlx::any::{AnyArguments, AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyConnection, AnyPool, AssertSqlSafe, Executor, Row, Transaction};
use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::time::Duration;
use uuid::Uuid;

type AnyQuery = sqlx::query::Query<'static, Any, AnyArguments>;
type Tx = Transaction<'static, Any>;
type Decode<T> = fn(&AnyRow) -> StoreResult<T>;

/// How often `claim_run` retries after losing a race for a thread (Postgres unique violation).
const CLAIM_ATTEMPTS: usize = 3;

const ASSISTANT_COLS: &str = "assistant_id, graph_id, config, context, metadata, name, \
    description, version, created_at, updated_at";
const THREAD_COLS: &str = "thread_id, created_at, updated_at, state_updated_at, metadata, \
    status, config, state_values, error, interrupts";
const RUN_COLS: &str = "run_id, thread_id, assistant_id, created_at, updated_at, status, \
    metadata, multitask_strategy, kwargs";
const CHECKPOINT_COLS: &str = "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, \
    run_id, step, source, metadata, writes, next_nodes, tasks, created_at";
const INFLIGHT: &str = "status IN ('pending', 'running')";

/// The SQL flavours this store speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    fn of_url(url: &str) -> StoreResult<Self> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "sqlite" => Ok(Self::Sqlite),
            // Only the scheme goes into the message: the URL may carry a password.
            other => Err(StoreError::Database(sqlx::Error::Configuration(
                format!("unsupported database url scheme '{other}'").into(),
            ))),
        }
    }

    /// Row lock for reads inside write transactions; SQLite serializes writers instead.
    fn for_update(self) -> &'static str {
        match self {
            Self::Postgres => " FOR UPDATE",
            Self::Sqlite => "",
        }
    }

    /// Lets concurrent claimers pass over each other's candidate rows instead of queueing.
    fn skip_locked(self) -> &'static str {
        match self {
            Self::Postgres => " FOR UPDATE SKIP LOCKED",
            Self::Sqlite => "",
        }
    }
}

/// The Postgres/SQLite store.
#[derive(Clone, Debug)]
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
}

/// How long a SQLite commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SqliteSync {
    /// A commit is in the write-ahead log when it returns, not yet on the disk: a power cut or
    /// an OS crash (not a crash of this process) may lose the last commits, never the file's
    /// consistency. The same trade as Postgres's `synchronous_commit = off`; it took a quarter
    /// of the SQLite thread's time (an fsync per commit) under load.
    #[default]
    Normal,
    /// Every commit waits for fsync.
    Full,
}

impl SqliteSync {
    fn pragma(self) -> &'static str {
        match self {
            Self::Normal => "PRAGMA synchronous = NORMAL;",
            Self::Full => "PRAGMA synchronous = FULL;",
        }
    }
}

impl SqlStore {
    /// Opens a pool for `url` (`postgres://…`, `sqlite://path`, `sqlite:path`,
    /// `sqlite::memory:`) and runs the migrations.
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<SqlStore> {
        Self::connect_with(url, max_connections, SqliteSync::default()).await
    }

    /// Like `connect`, choosing how SQLite commits wait for the disk (ignored for Postgres).
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        sync: SqliteSync,
    ) -> StoreResult<SqlStore> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let pool = match dialect {
            Dialect::Postgres => {
                AnyPoolOptions::new()
                    .max_connections(max_connections.max(1))
                    // No ping before every checkout: it doubled the round trips of each
                    // statement. A broken connection fails its statement and is dropped.
                    .test_before_acquire(false)
                    .connect(url)
                    .await?
            }
            Dialect::Sqlite => connect_sqlite(url, max_connections, sync).await?,
        };
        match dialect {
            Dialect::Postgres => sqlx::migrate!("./migrations/postgres").run(&pool).await?,
            Dialect::Sqlite => sqlx::migrate!("./migrations/sqlite").run(&pool).await?,
        }
        Ok(SqlStore { pool, dialect })
    }

    /// Closes the pool; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that may write. SQLite takes the write lock up front: a deferred
    /// transaction that later upgrades can fail with SQLITE_BUSY without waiting.
    async fn write_tx(&self) -> StoreResult<Tx> {
        Ok(match self.dialect {
            Dialect::Postgres => self.pool.begin().await?,
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
        })
    }

    fn lock(&self) -> &'static str {
        self.dialect.for_update()
    }
}

async fn connect_sqlite(url: &str, max_connections: u32, sync: SqliteSync) -> StoreResult<AnyPool> {
    let memory = url.contains(":memory:") || url.contains("mode=memory");
    let options = AnyPoolOptions::new()
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                // WAL lets readers run beside the single writer; the busy timeout makes writers
                // queue for the lock instead of failing at once.
                sqlx::raw_sql(
                    "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; \
                 PRAGMA foreign_keys = ON;",
                )
                .execute(&mut *conn)
                .await?;
                sqlx::raw_sql(sync.pragma()).execute(conn).await?;
                Ok(())
            })
        });
    if memory {
        // Every connection to `:memory:` is its own database: keep exactly one, forever.
        let options = options
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None);
        return Ok(options.connect(url).await?);
    }
    let url = if url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    Ok(options
        .max_connections(max_connections.max(1))
        .connect(&url)
        .await?)
}

// ---------------------------------------------------------------------------------------------
// Dynamic SQL with numbered placeholders (`$n` works on both backends through the Any driver).

#[derive(Clone, Debug)]
enum Arg {
    Text(String),
    Int(i64),
}

impl From<String> for Arg {
    fn from(v: String) -> Self {
        Arg::Text(v)
    }
}
impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Text(v.to_string())
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}
impl From<Uuid> for Arg {
    fn from(v: Uuid) -> Self {
        Arg::Text(v.to_string())
    }
}
impl From<Timestamp> for Arg {
    fn from(v: Timestamp) -> Self {
        Arg::Text(v.to_string())
    }
}

/// SQL text plus its arguments; `arg` hands out the placeholder to splice in.
#[derive(Clone, Debug, Default)]
struct Sql {
    text: String,
    args: Vec<Arg>,
    aliases: usize,
}

impl Sql {
    fn new(text: &str) -> Self {
        Sql {
            text: text.to_string(),
            ..Sql::default()
        }
    }

    fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    fn arg(&mut self, value: impl Into<Arg>) -> String {
        self.args.push(value.into());
        format!("${}", self.args.len())
    }

    /// A fresh table alias for nested `json_each` scans.
    fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("j{}", self.aliases)
    }

    fn query(self) -> AnyQuery {
        let mut q = sqlx::query(AssertSqlSafe(self.text));
        for arg in self.args {
            q = match arg {
                Arg::Text(v) => q.bind(v),
                Arg::Int(v) => q.bind(v),
            };
        }
        q
    }
}

/// A query whose text was assembled at run time from constants (never from values).
fn q(text: String) -> AnyQuery {
    sqlx::query(AssertSqlSafe(text))
}

async fn one<'c, T>(
    ex: impl Executor<'c, Database = Any>,
    query: AnyQuery,
    decode: Decode<T>,
) -> StoreResult<Option<T>> {
    query
        .fetch_optional(ex)
        .await?
        .as_ref()
        .map(decode)
        .transpose()
}

async fn all<'c, T>(
    ex: impl Executor<'c, Database = Any>,
    query: AnyQuery,
    decode: Decode<T>,
) -> StoreResult<Vec<T>> {
    query.fetch_all(ex).await?.iter().map(decode).collect()
}

async fn count<'c>(ex: impl Executor<'c, Database = Any>, query: AnyQuery) -> StoreResult<i64> {
    Ok(query.fetch_one(ex).await?.try_get::<i64, _>(0)?)
}

fn is_unique_violation(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(d)) if d.is_unique_violation())
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding.

fn corrupt(what: &'static str, detail: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what,
        detail: detail.to_string(),
    }
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| corrupt("json", e))
}

/// `None` and JSON `null` are both stored as SQL NULL, so filters never match a missing value.
fn opt_json(value: &Option<Value>) -> StoreResult<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => to_json(v).map(Some),
    }
}

fn text(row: &AnyRow, col: &'static str) -> StoreResult<String> {
    Ok(row.try_get::<String, _>(col)?)
}

fn opt_text(row: &AnyRow, col: &'static str) -> StoreResult<Option<String>> {
    Ok(row.try_get::<Option<String>, _>(col)?)
}

fn int(row: &AnyRow, col: &'static str) -> StoreResult<i64> {
    Ok(row.try_get::<i64, _>(col)?)
}

fn parse_uuid(col: &'static str, s: &str) -> StoreResult<Uuid> {
    Uuid::parse_str(s).map_err(|e| corrupt(col, format!("{s}: {e}")))
}

fn uuid(row: &AnyRow, col: &'static str) -> StoreResult<Uuid> {
    parse_uuid(col, &text(row, col)?)
}

fn opt_uuid(row: &AnyRow, col: &'static str) -> StoreResult<Option<Uuid>> {
    opt_text(row, col)?.map(|s| parse_uuid(col, &s)).transpose()
}

fn ts(row: &AnyRow, col: &'static str) -> StoreResult<Timestamp> {
    let s = text(row, col)?;
    Timestamp::parse(&s).ok_or_else(|| corrupt(col, s))
}

fn json<T: serde::de::DeserializeOwned>(row: &AnyRow, col: &'static str) -> StoreResult<T> {
    serde_json::from_str(&text(row, col)?).map_err(|e| corrupt(col, e))
}

fn opt_json_col(row: &AnyRow, col: &'static str) -> StoreResult<Option<Value>> {
    let Some(s) = opt_text(row, col)? else {
        return Ok(None);
    };
    let v: Value = serde_json::from_str(&s).map_err(|e| corrupt(col, e))?;
    Ok((!v.is_null()).then_some(v))
}

fn parse_enum<T: FromStr<Err = String>>(col: &'static str, s: &str) -> StoreResult<T> {
    s.parse().map_err(|e| corrupt(col, e))
}

fn enum_col<T: FromStr<Err = String>>(row: &AnyRow, col: &'static str) -> StoreResult<T> {
    parse_enum(col, &text(row, col)?)
}

fn assistant_row(row: &AnyRow) -> StoreResult<Assistant> {
    Ok(Assistant {
        assistant_id: uuid(row, "assistant_id")?,
        graph_id: text(row, "graph_id")?,
        config: json(row, "config")?,
        context: json(row, "context")?,
        metadata: json(row, "metadata")?,
        name: text(row, "name")?,
        description: opt_text(row, "description")?,
        version: int(row, "version")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

fn thread_row(row: &AnyRow) -> StoreResult<Thread> {
    Ok(Thread {
        thread_id: uuid(row, "thread_id")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        state_updated_at: ts(row, "state_updated_at")?,
        metadata: json(row, "metadata")?,
        status: enum_col(row, "status")?,
        config: json(row, "config")?,
        values: opt_json_col(row, "state_values")?,
        error: opt_json_col(row, "error")?,
        interrupts: json(row, "interrupts")?,
    })
}

fn run_row(row: &AnyRow) -> StoreResult<Run> {
    Ok(Run {
        run_id: uuid(row, "run_id")?,
        thread_id: uuid(row, "thread_id")?,
        assistant_id: uuid(row, "assistant_id")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        status: enum_col(row, "status")?,
        metadata: json(row, "metadata")?,
        multitask_strategy: enum_col(row, "multitask_strategy")?,
        kwargs: json(row, "kwargs")?,
    })
}

fn checkpoint_row(row: &AnyRow) -> StoreResult<Checkpoint> {
    Ok(Checkpoint {
        thread_id: uuid(row, "thread_id")?,
        checkpoint_ns: text(row, "checkpoint_ns")?,
        checkpoint_id: uuid(row, "checkpoint_id")?,
        parent_checkpoint_id: opt_uuid(row, "parent_checkpoint_id")?,
        run_id: opt_uuid(row, "run_id")?,
        step: int(row, "step")?,
        source: text(row, "source")?,
        metadata: json(row, "metadata")?,
        writes: json(row, "writes")?,
        next: json(row, "next_nodes")?,
        tasks: json(row, "tasks")?,
        created_at: ts(row, "created_at")?,
    })
}

fn event_page_row(row: &AnyRow) -> StoreResult<Vec<StoredEvent>> {
    pages::unpack(
        uuid(row, "run_id")?,
        uuid(row, "thread_id")?,
        &text(row, "frames")?,
    )
}

fn thread_id_row(row: &AnyRow) -> StoreResult<Uuid> {
    uuid(row, "thread_id")
}

fn metadata_row(row: &AnyRow) -> StoreResult<JsonMap> {
    json(row, "metadata")
}

fn cancel_row(row: &AnyRow) -> StoreResult<Option<CancelAction>> {
    opt_text(row, "cancel_action")?
        .map(|s| parse_enum("cancel_action", &s))
        .transpose()
}

fn merge(into: &mut JsonMap, from: &JsonMap) {
    for (k, v) in from {
        into.insert(k.clone(), v.clone());
    }
}

fn insert_assistant_query(a: &Assistant) -> StoreResult<AnyQuery> {
    let sql = format!(
        "INSERT INTO assistants ({ASSISTANT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (assistant_id) DO NOTHING"
    );
    Ok(q(sql)
        .bind(a.assistant_id.to_string())
        .bind(a.graph_id.clone())
        .bind(to_json(&a.config)?)
        .bind(to_json(&a.context)?)
        .bind(to_json(&a.metadata)?)
        .bind(a.name.clone())
        .bind(a.description.clone())
        .bind(a.version)
        .bind(a.created_at.to_string())
        .bind(a.updated_at.to_string()))
}

fn insert_thread_query(t: &Thread) -> StoreResult<AnyQuery> {
    let sql = format!(
        "INSERT INTO threads ({THREAD_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (thread_id) DO NOTHING"
    );
    Ok(q(sql)
        .bind(t.thread_id.to_string())
        .bind(t.created_at.to_string())
        .bind(t.updated_at.to_string())
        .bind(t.state_updated_at.to_string())
        .bind(to_json(&t.metadata)?)
        .bind(t.status.as_str())
        .bind(to_json(&t.config)?)
        .bind(opt_json(&t.values)?)
        .bind(opt_json(&t.error)?)
        .bind(to_json(&t.interrupts)?))
}

/// Inserts a run ($1–$9, see `bind_run`).
fn insert_run_sql() -> String {
    format!("INSERT INTO runs ({RUN_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")
}

/// Marks a thread busy; the arguments name the parameters holding its id, its merged
/// metadata and the time.
fn mark_thread_busy_sql(id: &str, metadata: &str, now: &str) -> String {
    format!(
        "UPDATE threads SET status = 'busy', metadata = {metadata}, updated_at = {now} \
         WHERE thread_id = {id}"
    )
}

fn bind_run(query: AnyQuery, r: &Run) -> StoreResult<AnyQuery> {
    Ok(query
        .bind(r.run_id.to_string())
        .bind(r.thread_id.to_string())
        .bind(r.assistant_id.to_string())
        .bind(r.created_at.to_string())
        .bind(r.updated_at.to_string())
        .bind(r.status.as_str())
        .bind(to_json(&r.metadata)?)
        .bind(r.multitask_strategy.as_str())
        .bind(to_json(&r.kwargs)?))
}

/// Writes a checkpoint row, replacing one with the same key ($1–$12, see `bind_checkpoint`).
const UPSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (thread_id, checkpoint_ns, \
    checkpoint_id, parent_checkpoint_id, run_id, step, source, metadata, writes, next_nodes, \
    tasks, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET \
    parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, \
    step = excluded.step, source = excluded.source, metadata = excluded.metadata, \
    writes = excluded.writes, next_nodes = excluded.next_nodes, tasks = excluded.tasks, \
    created_at = excluded.created_at";

/// Binds $1–$12 of `UPSERT_CHECKPOINT`; `writes` is the checkpoint's writes as stored JSON
/// (large strings replaced by chunk references).
fn bind_checkpoint(query: AnyQuery, c: &Checkpoint, writes: String) -> StoreResult<AnyQuery> {
    Ok(query
        .bind(c.thread_id.to_string())
        .bind(c.checkpoint_ns.clone())
        .bind(c.checkpoint_id.to_string())
        .bind(c.parent_checkpoint_id.map(|u| u.to_string()))
        .bind(c.run_id.map(|u| u.to_string()))
        .bind(c.step)
        .bind(c.source.clone())
        .bind(to_json(&c.metadata)?)
        .bind(writes)
        .bind(to_json(&c.next)?)
        .bind(to_json(&c.tasks)?)
        .bind(c.created_at.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Filters and ordering.

/// `ORDER BY` from a whitelisted column (anything else falls back to `default`), with the id as
/// tie-breaker so pages are stable.
fn order_by(
    sort_by: Option<&str>,
    order: Option<SortOrder>,
    allowed: &[&'static str],
    default: &'static str,
    id_col: &'static str,
) -> String {
    let col = allowed
        .iter()
        .find(|c| Some(**c) == sort_by)
        .copied()
        .unwrap_or(default);
    let dir = match order.unwrap_or(SortOrder::Desc) {
        SortOrder::Asc => "ASC",
        SortOrder::Desc => "DESC",
    };
    if col == id_col {
        format!(" ORDER BY {col} {dir}")
    } else {
        format!(" ORDER BY {col} {dir}, {id_col} {dir}")
    }
}

/// A `LIKE` pattern matching `needle` anywhere, lower-cased, with wildcards escaped by `\`.
fn like_pattern(needle: &str) -> String {
    let mut out = String::from("%");
    for ch in needle.to_lowercase().chars() {
        if matches!(ch, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('%');
    out
}

impl SqlStore {
    /// Appends ` AND <col contains filter>` with Postgres `@>` semantics on both backends.
    fn push_contains(&self, sql: &mut Sql, col: &str, filter: &JsonMap) -> StoreResult<()> {
        if filter.is_empty() {
            return Ok(());
        }
        match self.dialect {
            Dialect::Postgres => {
                let p = sql.arg(to_json(filter)?);
                sql.push(&format!(" AND {col}::jsonb @> {p}::jsonb"));
            }
            Dialect::Sqlite => {
                for (key, want) in filter {
                    sql.push(" AND ");
                    sqlite_member_matches(sql, col, key, want);
                }
            }
        }
        Ok(())
    }
}

/// SQLite: the JSON object in `src` has member `key` whose value contains `want`. Keys are bound
/// as values (compared against `json_each.key`), so no key needs escaping into a JSON path.
fn sqlite_member_matches(sql: &mut Sql, src: &str, key: &str, want: &Value) {
    let alias = sql.alias();
    let k = sql.arg(key);
    sql.push(&format!(
        "EXISTS (SELECT 1 FROM json_each({src}) AS {alias} WHERE {alias}.key = {k} AND "
    ));
    sqlite_value_matches(sql, &alias, want);
    sql.push(")");
}

/// SQLite: the `json_each` row `alias` holds a value containing `want` (objects: every member
/// contained; arrays: every wanted element found in the array; scalars: equal, JSON null
/// included).
fn sqlite_value_matches(sql: &mut Sql, alias: &str, want: &Value) {
    match want {
        Value::Null => {
            sql.push(&format!("{alias}.type = 'null'"));
        }
        Value::Bool(b) => {
            sql.push(&format!("{alias}.type = '{b}'"));
        }
        Value::Number(n) => {
            let p = sql.arg(n.to_string());
            sql.push(&format!(
                "{alias}.type IN ('integer', 'real') AND {alias}.value = json_extract({p}, '$')"
            ));
        }
        Value::String(s) => {
            let p = sql.arg(s.as_str());
            sql.push(&format!("{alias}.type = 'text' AND {alias}.value = {p}"));
        }
        Value::Object(members) => {
            sql.push(&format!("{alias}.type = 'object'"));
            for (key, v) in members {
                sql.push(" AND ");
                sqlite_member_matches(sql, &format!("{alias}.value"), key, v);
            }
        }
        Value::Array(items) => {
            sql.push(&format!("{alias}.type = 'array'"));
            for item in items {
                let inner = sql.alias();
                sql.push(&format!(
                    " AND EXISTS (SELECT 1 FROM json_each({alias}.value) AS {inner} WHERE "
                ));
                sqlite_value_matches(sql, &inner, item);
                sql.push(")");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoint chunks (see `blobs`).

/// Chunks per statement: three parameters each, well under both backends' limits.
const BLOB_BATCH: usize = 300;

impl SqlStore {
    async fn put_blobs(&self, thread_id: Uuid, mut chunks: Vec<blobs::Blob>) -> StoreResult<()> {
        while !chunks.is_empty() {
            let batch: Vec<blobs::Blob> = chunks.drain(..chunks.len().min(BLOB_BATCH)).collect();
            let rows: Vec<String> = (0..batch.len())
                .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
                .collect();
            let sql = format!(
                "INSERT INTO checkpoint_blobs (thread_id, hash, data) VALUES {} \
                 ON CONFLICT (thread_id, hash) DO NOTHING",
                rows.join(", ")
            );
            let mut query = q(sql);
            for blob in batch {
                query = query
                    .bind(thread_id.to_string())
                    .bind(blob.hash)
                    .bind(blob.data);
            }
            query.execute(&self.pool).await?;
        }
        Ok(())
    }

    /// Replaces chunk references in the checkpoints' writes by their text.
    async fn with_blobs(
        &self,
        thread_id: Uuid,
        mut cps: Vec<Checkpoint>,
    ) -> StoreResult<Vec<Checkpoint>> {
        let mut wanted = BTreeSet::new();
        for cp in &cps {
            blobs::references(&cp.writes, &mut wanted);
        }
        if wanted.is_empty() {
            return Ok(cps);
        }
        let wanted: Vec<String> = wanted.into_iter().collect();
        let mut chunks = HashMap::with_capacity(wanted.len());
        for batch in wanted.chunks(BLOB_BATCH) {
            let mut sql = Sql::new("SELECT hash, data FROM checkpoint_blobs WHERE thread_id = $1");
            sql.arg(thread_id);
            let params: Vec<String> = batch.iter().map(|h| sql.arg(h.as_str())).collect();
            sql.push(&format!(" AND hash IN ({})", params.join(", ")));
            for row in sql.query().fetch_all(&self.pool).await? {
                chunks.insert(text(&row, "hash")?, text(&row, "data")?);
            }
        }
        for cp in &mut cps {
            blobs::internalize(&mut cp.writes, &chunks).map_err(|e| corrupt("checkpoint", e))?;
        }
        Ok(cps)
    }
}

// ---------------------------------------------------------------------------------------------
// Transaction steps shared by several methods.

impl SqlStore {
    /// `insert_run` inside its transaction.
    async fn insert_run_in(
        &self,
        conn: &mut AnyConnection,
        ins: &RunInsert,
    ) -> StoreResult<Vec<Run>> {
        let run = &ins.run;
        let now = Timestamp::now();
        if ins.create_thread {
            self.ensure_thread(conn, ins, now).await?;
        }
        // The thread lock serializes run insertion per thread, so two `reject` runs cannot
        // both see an idle thread.
        let Some(mut metadata) = self.lock_thread(conn, run.thread_id).await? else {
            return Err(StoreError::NotFound("thread"));
        };
        let affected = self.apply_strategy(conn, run, now).await?;
        merge(&mut metadata, &ins.thread_metadata);
        let (metadata, now) = (to_json(&metadata)?, now.to_string());
        if self.dialect == Dialect::Postgres {
            // One round trip for both writes: a burst of creations waits on these. The
            // update's parameters follow the run's ($2 is the thread id).
            let sql = format!(
                "WITH run AS ({}) {}",
                insert_run_sql(),
                mark_thread_busy_sql("$2", "$10", "$11")
            );
            bind_run(q(sql), run)?
                .bind(metadata)
                .bind(now)
                .execute(conn)
                .await?;
            return Ok(affected);
        }
        bind_run(q(insert_run_sql()), run)?
            .execute(&mut *conn)
            .await?;
        q(mark_thread_busy_sql("$1", "$2", "$3"))
            .bind(run.thread_id.to_string())
            .bind(metadata)
            .bind(now)
            .execute(conn)
            .await?;
        Ok(affected)
    }

    /// Locks the thread row (Postgres) and returns its metadata; `None` when it does not exist.
    async fn lock_thread(
        &self,
        conn: &mut AnyConnection,
        id: Uuid,
    ) -> StoreResult<Option<JsonMap>> {
        let sql = format!(
            "SELECT metadata FROM threads WHERE thread_id = $1{}",
            self.lock()
        );
        one(conn, q(sql).bind(id.to_string()), metadata_row).await
    }

    /// Locks several threads in id order, the one order every transaction uses.
    async fn lock_threads(&self, conn: &mut AnyConnection, mut ids: Vec<Uuid>) -> StoreResult<()> {
        ids.sort();
        ids.dedup();
        for id in ids {
            self.lock_thread(conn, id).await?;
        }
        Ok(())
    }

    async fn inflight_locked(
        &self,
        conn: &mut AnyConnection,
        thread: Uuid,
    ) -> StoreResult<Vec<Run>> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs WHERE thread_id = $1 AND {INFLIGHT} \
             ORDER BY created_at, run_id{}",
            self.lock()
        );
        all(conn, q(sql).bind(thread.to_string()), run_row).await
    }

    /// Ends a pending run at once or flags a running one; other statuses are left alone.
    async fn cancel_one(
        &self,
        conn: &mut AnyConnection,
        run: &Run,
        action: CancelAction,
        now: Timestamp,
    ) -> StoreResult<()> {
        match (run.status, action) {
            (RunStatus::Pending, CancelAction::Interrupt) => {
                sqlx::query(
                    "UPDATE runs SET status = 'interrupted', updated_at = $2 WHERE run_id = $1",
                )
                .bind(run.run_id.to_string())
                .bind(now.to_string())
                .execute(conn)
                .await?;
            }
            (RunStatus::Pending, CancelAction::Rollback) => {
                delete_run_rows(conn, run.thread_id, run.run_id).await?;
            }
            (RunStatus::Running, _) => {
                sqlx::query("UPDATE runs SET cancel_action = $2 WHERE run_id = $1")
                    .bind(run.run_id.to_string())
                    .bind(action.as_str())
                    .execute(conn)
                    .await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn has_inflight(
        &self,
        conn: &mut AnyConnection,
        thread: Uuid,
        except: Uuid,
    ) -> StoreResult<bool> {
        let sql = format!(
            "SELECT COUNT(*) FROM runs WHERE thread_id = $1 AND run_id <> $2 AND {INFLIGHT}"
        );
        let n = count(
            conn,
            q(sql).bind(thread.to_string()).bind(except.to_string()),
        )
        .await?;
        Ok(n > 0)
    }

    /// Creates the thread a stateless / `if_not_exists: create` run needs, unless it exists.
    async fn ensure_thread(
        &self,
        conn: &mut AnyConnection,
        ins: &RunInsert,
        now: Timestamp,
    ) -> StoreResult<()> {
        let thread = Thread {
            thread_id: ins.run.thread_id,
            created_at: now,
            updated_at: now,
            state_updated_at: now,
            metadata: ins.thread_metadata.clone(),
            status: ThreadStatus::Busy,
            config: Value::Object(JsonMap::new()),
            values: None,
            error: None,
            interrupts: Value::Object(JsonMap::new()),
        };
        insert_thread_query(&thread)?.execute(conn).await?;
        Ok(())
    }

    /// Applies the new run's multitask strategy to the runs already in flight.
    async fn apply_strategy(
        &self,
        conn: &mut AnyConnection,
        run: &Run,
        now: Timestamp,
    ) -> StoreResult<Vec<Run>> {
        use super::MultitaskStrategy as M;
        let action = match run.multitask_strategy {
            // A queued run leaves the others alone: no need to read them (the thread lock
            // already orders this insert after any other), which saves a round trip.
            M::Enqueue => return Ok(Vec::new()),
            M::Reject => {
                let inflight = self.inflight_locked(conn, run.thread_id).await?;
                return if inflight.is_empty() {
                    Ok(Vec::new())
                } else {
                    Err(StoreError::Busy(run.thread_id))
                };
            }
            M::Interrupt => CancelAction::Interrupt,
            M::Rollback => CancelAction::Rollback,
        };
        let inflight = self.inflight_locked(conn, run.thread_id).await?;
        for other in &inflight {
            self.cancel_one(conn, other, action, now).await?;
        }
        Ok(inflight)
    }

    /// Only a thread's oldest pending run is a candidate: a claimer that skips a run locked by
    /// another claimer must not take the same thread's next run and break FIFO order.
    async fn try_claim(&self, worker: &str, lease: Duration) -> StoreResult<Option<Lease>> {
        let now = Timestamp::now();
        let expires_at = now.plus_secs(lease.as_secs_f64());
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "UPDATE runs SET status = 'running', lease_owner = $1, lease_expires_at = $2, \
             updated_at = $3, cancel_action = NULL \
             WHERE status = 'pending' AND run_id = (\
               SELECT r.run_id FROM runs r WHERE r.status = 'pending' AND r.created_at <= $3 \
               AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.thread_id = r.thread_id \
                               AND x.status = 'running') \
               AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.thread_id = r.thread_id \
                               AND o.status = 'pending' AND (o.created_at < r.created_at \
                               OR (o.created_at = r.created_at AND o.run_id < r.run_id))) \
               ORDER BY r.created_at, r.run_id LIMIT 1{}) \
             RETURNING {RUN_COLS}",
            self.dialect.skip_locked()
        );
        let query = q(sql)
            .bind(worker.to_string())
            .bind(expires_at.to_string())
            .bind(now.to_string());
        let run = one(&mut *tx, query, run_row).await?;
        tx.commit().await?;
        Ok(run.map(|run| Lease {
            run,
            worker: worker.to_string(),
            expires_at,
        }))
    }

    /// Sets the thread's status (and, with a summary, its state) after a run ended.
    async fn write_thread_after_run(
        &self,
        conn: &mut AnyConnection,
        thread: Uuid,
        status: ThreadStatus,
        summary: Option<&ThreadSummary>,
        now: Timestamp,
    ) -> StoreResult<()> {
        let Some(s) = summary else {
            sqlx::query(
                "UPDATE threads SET status = $2, updated_at = $3, state_updated_at = $3 \
                 WHERE thread_id = $1",
            )
            .bind(thread.to_string())
            .bind(status.as_str())
            .bind(now.to_string())
            .execute(conn)
            .await?;
            return Ok(());
        };
        self.write_summary(conn, thread, status, s, now).await?;
        Ok(())
    }

    /// Writes status, values, error and interrupts; returns the number of rows changed.
    async fn write_summary(
        &self,
        conn: &mut AnyConnection,
        thread: Uuid,
        status: ThreadStatus,
        s: &ThreadSummary,
        now: Timestamp,
    ) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE threads SET status = $2, state_values = $3, error = $4, interrupts = $5, \
             updated_at = $6, state_updated_at = $6 WHERE thread_id = $1",
        )
        .bind(thread.to_string())
        .bind(status.as_str())
        .bind(opt_json(&s.values)?)
        .bind(opt_json(&s.error)?)
        .bind(to_json(&s.interrupts)?)
        .bind(now.to_string())
        .execute(conn)
        .await?;
        Ok(done.rows_affected())
    }

    /// A search page: total matches plus the requested slice, read in one transaction.
    #[allow(clippy::too_many_arguments)]
    async fn page<T>(
        &self,
        cols: &str,
        table: &str,
        filter: Sql,
        order: &str,
        limit: i64,
        offset: i64,
        decode: Decode<T>,
    ) -> StoreResult<Page<T>> {
        let mut total_sql = Sql::new(&format!("SELECT COUNT(*) FROM {table}"));
        total_sql.push(&filter.text);
        total_sql.args = filter.args.clone();
        let mut items_sql = Sql::new(&format!("SELECT {cols} FROM {table}"));
        items_sql.push(&filter.text);
        items_sql.args = filter.args;
        let l = items_sql.arg(limit.max(0));
        let o = items_sql.arg(offset.max(0));
        items_sql.push(&format!("{order} LIMIT {l} OFFSET {o}"));
        let mut tx = self.pool.begin().await?;
        let total = count(&mut *tx, total_sql.query()).await?;
        let items = all(&mut *tx, items_sql.query(), decode).await?;
        tx.commit().await?;
        Ok(Page { items, total })
    }

    async fn threads_of_runs(
        &self,
        conn: &mut AnyConnection,
        ids: &[Uuid],
    ) -> StoreResult<Vec<Uuid>> {
        let mut threads = Vec::new();
        for id in ids {
            let query =
                sqlx::query("SELECT thread_id FROM runs WHERE run_id = $1").bind(id.to_string());
            threads.extend(one(&mut *conn, query, thread_id_row).await?);
        }
        Ok(threads)
    }

    /// A thread whose last in-flight run was cancelled before it started is idle again.
    async fn settle_thread(
        &self,
        conn: &mut AnyConnection,
        thread: Uuid,
        now: Timestamp,
    ) -> StoreResult<()> {
        let sql = format!(
            "UPDATE threads SET status = 'idle', updated_at = $2 \
             WHERE thread_id = $1 AND status = 'busy' \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.thread_id = $1 AND {INFLIGHT})"
        );
        q(sql)
            .bind(thread.to_string())
            .bind(now.to_string())
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn mark_worker_lost(
        &self,
        conn: &mut AnyConnection,
        thread: Uuid,
        now: Timestamp,
    ) -> StoreResult<()> {
        let status = if self.has_inflight(conn, thread, Uuid::nil()).await? {
            ThreadStatus::Busy
        } else {
            ThreadStatus::Error
        };
        sqlx::query(
            "UPDATE threads SET status = $2, error = $3, updated_at = $4, state_updated_at = $4 \
             WHERE thread_id = $1",
        )
        .bind(thread.to_string())
        .bind(status.as_str())
        .bind(to_json(&worker_lost())?)
        .bind(now.to_string())
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// Deletes a run with the checkpoints it wrote on its thread (any namespace) and its events.
async fn delete_run_rows(conn: &mut AnyConnection, thread: Uuid, run: Uuid) -> StoreResult<bool> {
    sqlx::query("DELETE FROM checkpoints WHERE thread_id = $1 AND run_id = $2")
        .bind(thread.to_string())
        .bind(run.to_string())
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM run_event_pages WHERE run_id = $1")
        .bind(run.to_string())
        .execute(&mut *conn)
        .await?;
    let done = sqlx::query("DELETE FROM runs WHERE run_id = $1")
        .bind(run.to_string())
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected() > 0)
}

fn worker_lost() -> Value {
    serde_json::json!({
        "error": "WorkerLost",
        "message": "the worker running this run stopped before it finished",
    })
}

fn apply_patch(a: &mut Assistant, patch: &AssistantPatch) {
    if let Some(v) = &patch.graph_id {
        a.graph_id = v.clone();
    }
    if let Some(v) = &patch.config {
        a.config = v.clone();
    }
    if let Some(v) = &patch.context {
        a.context = v.clone();
    }
    if let Some(v) = &patch.metadata {
        merge(&mut a.metadata, v);
    }
    if let Some(v) = &patch.name {
        a.name = v.clone();
    }
    if let Some(v) = &patch.description {
        a.description = Some(v.clone());
    }
}

// ---------------------------------------------------------------------------------------------

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        }
    }

    // ---- assistants ----

    async fn create_assistant(&self, a: &Assistant, if_exists: IfExists) -> StoreResult<Assistant> {
        let mut tx = self.write_tx().await?;
        let inserted = insert_assistant_query(a)?
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if !inserted && if_exists == IfExists::Raise {
            return Err(StoreError::Conflict("assistant"));
        }
        let sql = format!("SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1");
        let stored = one(
            &mut *tx,
            q(sql).bind(a.assistant_id.to_string()),
            assistant_row,
        )
        .await?;
        tx.commit().await?;
        stored.ok_or(StoreError::NotFound("assistant"))
    }

    async fn get_assistant(&self, id: Uuid) -> StoreResult<Option<Assistant>> {
        let sql = format!("SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1");
        one(&self.pool, q(sql).bind(id.to_string()), assistant_row).await
    }

    async fn update_assistant(
        &self,
        id: Uuid,
        patch: &AssistantPatch,
        now: Timestamp,
    ) -> StoreResult<Option<Assistant>> {
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1{}",
            self.lock()
        );
        let Some(mut a) = one(&mut *tx, q(sql).bind(id.to_string()), assistant_row).await? else {
            return Ok(None);
        };
        apply_patch(&mut a, patch);
        a.version += 1;
        a.updated_at = now;
        sqlx::query(
            "UPDATE assistants SET graph_id = $2, config = $3, context = $4, metadata = $5, \
             name = $6, description = $7, version = $8, updated_at = $9 WHERE assistant_id = $1",
        )
        .bind(id.to_string())
        .bind(a.graph_id.clone())
        .bind(to_json(&a.config)?)
        .bind(to_json(&a.context)?)
        .bind(to_json(&a.metadata)?)
        .bind(a.name.clone())
        .bind(a.description.clone())
        .bind(a.version)
        .bind(now.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(a))
    }

    async fn delete_assistant(&self, id: Uuid) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM assistants WHERE assistant_id = $1")
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn search_assistants(&self, query: &AssistantQuery) -> StoreResult<Page<Assistant>> {
        let mut filter = Sql::new(" WHERE 1 = 1");
        if let Some(graph_id) = &query.graph_id {
            let p = filter.arg(graph_id.as_str());
            filter.push(&format!(" AND graph_id = {p}"));
        }
        if let Some(name) = &query.name {
            let p = filter.arg(like_pattern(name));
            filter.push(&format!(" AND LOWER(name) LIKE {p} ESCAPE '\\'"));
        }
        self.push_contains(&mut filter, "metadata", &query.metadata)?;
        let order = order_by(
            query.sort_by.as_deref(),
            query.sort_order,
            &[
                "assistant_id",
                "graph_id",
                "name",
                "created_at",
                "updated_at",
            ],
            "created_at",
            "assistant_id",
        );
        let (limit, offset) = (query.limit, query.offset);
        self.page(
            ASSISTANT_COLS,
            "assistants",
            filter,
            &order,
            limit,
            offset,
            assistant_row,
        )
        .await
    }

    // ---- threads ----

    async fn create_thread(&self, t: &Thread, if_exists: IfExists) -> StoreResult<Thread> {
        let mut tx = self.write_tx().await?;
        let inserted = insert_thread_query(t)?
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if !inserted && if_exists == IfExists::Raise {
            return Err(StoreError::Conflict("thread"));
        }
        let sql = format!("SELECT {THREAD_COLS} FROM threads WHERE thread_id = $1");
        let stored = one(&mut *tx, q(sql).bind(t.thread_id.to_string()), thread_row).await?;
        tx.commit().await?;
        stored.ok_or(StoreError::NotFound("thread"))
    }

    async fn get_thread(&self, id: Uuid) -> StoreResult<Option<Thread>> {
        let sql = format!("SELECT {THREAD_COLS} FROM threads WHERE thread_id = $1");
        one(&self.pool, q(sql).bind(id.to_string()), thread_row).await
    }

    async fn patch_thread(
        &self,
        id: Uuid,
        metadata: &JsonMap,
        now: Timestamp,
    ) -> StoreResult<Option<Thread>> {
        let mut tx = self.write_tx().await?;
        let Some(mut merged) = self.lock_thread(&mut tx, id).await? else {
            return Ok(None);
        };
        merge(&mut merged, metadata);
        sqlx::query("UPDATE threads SET metadata = $2, updated_at = $3 WHERE thread_id = $1")
            .bind(id.to_string())
            .bind(to_json(&merged)?)
            .bind(now.to_string())
            .execute(&mut *tx)
            .await?;
        let sql = format!("SELECT {THREAD_COLS} FROM threads WHERE thread_id = $1");
        let thread = one(&mut *tx, q(sql).bind(id.to_string()), thread_row).await?;
        tx.commit().await?;
        Ok(thread)
    }

    async fn delete_thread(&self, id: Uuid) -> StoreResult<bool> {
        // Explicit deletes rather than relying on ON DELETE CASCADE alone, so the outcome does
        // not depend on SQLite's foreign_keys pragma.
        let mut tx = self.write_tx().await?;
        for table in ["run_event_pages", "checkpoint_blobs", "checkpoints", "runs"] {
            q(format!("DELETE FROM {table} WHERE thread_id = $1"))
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?;
        }
        let done = sqlx::query("DELETE FROM threads WHERE thread_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn search_threads(&self, query: &ThreadQuery) -> StoreResult<Page<Thread>> {
        let mut filter = Sql::new(" WHERE 1 = 1");
        if !query.ids.is_empty() {
            let params: Vec<String> = query.ids.iter().map(|id| filter.arg(*id)).collect();
            filter.push(&format!(" AND thread_id IN ({})", params.join(", ")));
        }
        if let Some(status) = query.status {
            let p = filter.arg(status.as_str());
            filter.push(&format!(" AND status = {p}"));
        }
        self.push_contains(&mut filter, "metadata", &query.metadata)?;
        self.push_contains(&mut filter, "state_values", &query.values)?;
        let order = order_by(
            query.sort_by.as_deref(),
            query.sort_order,
            &[
                "thread_id",
                "status",
                "created_at",
                "updated_at",
                "state_updated_at",
            ],
            "updated_at",
            "thread_id",
        );
        let (limit, offset) = (query.limit, query.offset);
        self.page(
            THREAD_COLS,
            "threads",
            filter,
            &order,
            limit,
            offset,
            thread_row,
        )
        .await
    }

    async fn copy_thread(
        &self,
        from: Uuid,
        to: Uuid,
        now: Timestamp,
    ) -> StoreResult<Option<Thread>> {
        let mut tx = self.write_tx().await?;
        let sql = format!("SELECT {THREAD_COLS} FROM threads WHERE thread_id = $1");
        let Some(source) = one(&mut *tx, q(sql).bind(from.to_string()), thread_row).await? else {
            return Ok(None);
        };
        let copy = Thread {
            thread_id: to,
            created_at: now,
            updated_at: now,
            state_updated_at: now,
            // Runs are not copied, so the copy cannot be busy.
            status: match source.status {
                ThreadStatus::Busy => ThreadStatus::Idle,
                other => other,
            },
            ..source
        };
        if insert_thread_query(&copy)?
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 0
        {
            return Err(StoreError::Conflict("thread"));
        }
        let sql = format!(
            "INSERT INTO checkpoints ({CHECKPOINT_COLS}) SELECT $1, checkpoint_ns, checkpoint_id, \
             parent_checkpoint_id, run_id, step, source, metadata, writes, next_nodes, tasks, \
             created_at FROM checkpoints WHERE thread_id = $2"
        );
        q(sql)
            .bind(to.to_string())
            .bind(from.to_string())
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO checkpoint_blobs (thread_id, hash, data) \
             SELECT $1, hash, data FROM checkpoint_blobs WHERE thread_id = $2",
        )
        .bind(to.to_string())
        .bind(from.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(copy))
    }

    async fn set_thread_summary(
        &self,
        id: Uuid,
        summary: &ThreadSummary,
        now: Timestamp,
    ) -> StoreResult<()> {
        let mut tx = self.write_tx().await?;
        let changed = self
            .write_summary(&mut tx, id, summary.status, summary, now)
            .await?;
        if changed == 0 {
            return Err(StoreError::NotFound("thread"));
        }
        tx.commit().await?;
        Ok(())
    }

    // ---- runs ----

    async fn insert_run(&self, ins: &RunInsert) -> StoreResult<Vec<Run>> {
        let mut tx = self.write_tx().await?;
        match self.insert_run_in(&mut tx, ins).await {
            Ok(affected) => {
                tx.commit().await?;
                Ok(affected)
            }
            Err(error) => {
                // Roll back now rather than when the dropped transaction's connection goes back
                // to the pool: until then it holds the thread's row lock, and a worker claiming
                // the thread's pending run would skip it (a rejected run hid the running one).
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<Run>> {
        let sql = format!("SELECT {RUN_COLS} FROM runs WHERE run_id = $1");
        one(&self.pool, q(sql).bind(run_id.to_string()), run_row).await
    }

    async fn run_statuses(&self, run_ids: &[Uuid]) -> StoreResult<Vec<(Uuid, RunStatus)>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        // The ids travel as one JSON array, so every call is the same statement.
        let ids: Vec<String> = run_ids.iter().map(Uuid::to_string).collect();
        let ids = serde_json::Value::from(ids).to_string();
        let sql = match self.dialect {
            Dialect::Postgres => {
                "SELECT run_id, status FROM runs \
                 WHERE run_id IN (SELECT json_array_elements_text($1::json))"
            }
            Dialect::Sqlite => {
                "SELECT run_id, status FROM runs WHERE run_id IN (SELECT value FROM json_each($1))"
            }
        };
        all(&self.pool, q(sql.to_owned()).bind(ids), |row| {
            Ok((uuid(row, "run_id")?, enum_col(row, "status")?))
        })
        .await
    }

    async fn list_runs(
        &self,
        thread_id: Uuid,
        status: Option<RunStatus>,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<Run>> {
        let mut sql = Sql::new(&format!("SELECT {RUN_COLS} FROM runs WHERE thread_id = $1"));
        sql.arg(thread_id);
        if let Some(status) = status {
            let p = sql.arg(status.as_str());
            sql.push(&format!(" AND status = {p}"));
        }
        let l = sql.arg(limit.max(0));
        let o = sql.arg(offset.max(0));
        sql.push(&format!(
            " ORDER BY created_at DESC, run_id DESC LIMIT {l} OFFSET {o}"
        ));
        all(&self.pool, sql.query(), run_row).await
    }

    async fn inflight_runs(&self, thread_id: Uuid) -> StoreResult<Vec<Run>> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs WHERE thread_id = $1 AND {INFLIGHT} \
             ORDER BY created_at, run_id"
        );
        all(&self.pool, q(sql).bind(thread_id.to_string()), run_row).await
    }

    async fn delete_run(&self, run_id: Uuid) -> StoreResult<bool> {
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM run_event_pages WHERE run_id = $1")
            .bind(run_id.to_string())
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM runs WHERE run_id = $1")
            .bind(run_id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn cancel_runs(&self, run_ids: &[Uuid], action: CancelAction) -> StoreResult<Vec<Run>> {
        let mut ids = run_ids.to_vec();
        ids.sort();
        ids.dedup();
        let now = Timestamp::now();
        let mut tx = self.write_tx().await?;
        let threads = self.threads_of_runs(&mut tx, &ids).await?;
        self.lock_threads(&mut tx, threads.clone()).await?;
        let mut affected = Vec::new();
        for id in ids {
            let sql = format!(
                "SELECT {RUN_COLS} FROM runs WHERE run_id = $1 AND {INFLIGHT}{}",
                self.lock()
            );
            if let Some(run) = one(&mut *tx, q(sql).bind(id.to_string()), run_row).await? {
                self.cancel_one(&mut tx, &run, action, now).await?;
                affected.push(run);
            }
        }
        for thread in threads {
            self.settle_thread(&mut tx, thread, now).await?;
        }
        tx.commit().await?;
        Ok(affected)
    }

    async fn claim_run(&self, worker: &str, lease: Duration) -> StoreResult<Option<Lease>> {
        // Two claimers can pick different pending runs of the same idle thread; the unique
        // index lets only one become `running`, and the loser simply tries again.
        for _ in 0..CLAIM_ATTEMPTS {
            match self.try_claim(worker, lease).await {
                Err(e) if is_unique_violation(&e) => continue,
                other => return other,
            }
        }
        Ok(None)
    }

    async fn renew_lease(
        &self,
        run_id: Uuid,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<LeaseState> {
        let expires_at = Timestamp::now().plus_secs(lease.as_secs_f64());
        let query = sqlx::query(
            "UPDATE runs SET lease_expires_at = $3 \
             WHERE run_id = $1 AND status = 'running' AND lease_owner = $2 \
             RETURNING cancel_action",
        )
        .bind(run_id.to_string())
        .bind(worker.to_string())
        .bind(expires_at.to_string());
        Ok(match one(&self.pool, query, cancel_row).await? {
            Some(cancel) => LeaseState::Held { cancel },
            None => LeaseState::Lost,
        })
    }

    async fn finish_run(
        &self,
        run_id: Uuid,
        end: &RunEnd,
        summary: Option<&ThreadSummary>,
    ) -> StoreResult<()> {
        let now = Timestamp::now();
        let mut tx = self.write_tx().await?;
        let query = sqlx::query("SELECT thread_id FROM runs WHERE run_id = $1");
        let Some(thread) = one(&mut *tx, query.bind(run_id.to_string()), thread_id_row).await?
        else {
            return Err(StoreError::NotFound("run"));
        };
        self.lock_thread(&mut tx, thread).await?;
        match end {
            RunEnd::Finished(status) => {
                sqlx::query(
                    "UPDATE runs SET status = $2, updated_at = $3, lease_owner = NULL, \
                     lease_expires_at = NULL WHERE run_id = $1",
                )
                .bind(run_id.to_string())
                .bind(status.as_str())
                .bind(now.to_string())
                .execute(&mut *tx)
                .await?;
            }
            RunEnd::RolledBack => {
                delete_run_rows(&mut tx, thread, run_id).await?;
            }
        }
        let status = if self.has_inflight(&mut tx, thread, run_id).await? {
            ThreadStatus::Busy
        } else {
            summary.map_or(ThreadStatus::Idle, |s| s.status)
        };
        self.write_thread_after_run(&mut tx, thread, status, summary, now)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn fail_expired_runs(&self, now: Timestamp) -> StoreResult<Vec<Run>> {
        let mut tx = self.write_tx().await?;
        let sql = "SELECT thread_id FROM runs WHERE status = 'running' AND lease_expires_at < $1";
        let threads = all(
            &mut *tx,
            sqlx::query(sql).bind(now.to_string()),
            thread_id_row,
        )
        .await?;
        self.lock_threads(&mut tx, threads).await?;
        let sql = format!(
            "UPDATE runs SET status = 'error', updated_at = $1, lease_owner = NULL, \
             lease_expires_at = NULL WHERE status = 'running' AND lease_expires_at < $1 \
             RETURNING {RUN_COLS}"
        );
        let failed = all(&mut *tx, q(sql).bind(now.to_string()), run_row).await?;
        let mut threads: Vec<Uuid> = failed.iter().map(|r| r.thread_id).collect();
        threads.sort();
        threads.dedup();
        for thread in threads {
            self.mark_worker_lost(&mut tx, thread, now).await?;
        }
        tx.commit().await?;
        Ok(failed)
    }

    // ---- checkpoints ----

    async fn put_checkpoint(
        &self,
        cp: &Checkpoint,
        stored: Option<&blobs::StoredChunks>,
    ) -> StoreResult<()> {
        let (writes, mut chunks) =
            blobs::externalize(&cp.writes).map_err(|e| corrupt("checkpoint writes", e))?;
        if let Some(stored) = stored {
            chunks = stored.unsent(cp.thread_id, chunks);
        }
        let sent: Vec<String> = match stored {
            Some(_) => chunks.iter().map(|c| c.hash.clone()).collect(),
            None => Vec::new(),
        };
        if self.dialect == Dialect::Postgres {
            // One statement, one round trip, one shape for any number of chunks (a VALUES list
            // per chunk count made Postgres prepare a new statement for most checkpoints).
            let pairs: Vec<[&str; 2]> = chunks.iter().map(|b| [&*b.hash, &*b.data]).collect();
            let sql = format!(
                "WITH chunks AS (INSERT INTO checkpoint_blobs (thread_id, hash, data) \
                 SELECT $1, c->>0, c->>1 FROM json_array_elements($13::json) AS c \
                 ON CONFLICT (thread_id, hash) DO NOTHING) {UPSERT_CHECKPOINT}"
            );
            bind_checkpoint(q(sql), cp, writes)?
                .bind(to_json(&pairs)?)
                .execute(&self.pool)
                .await?;
        } else {
            // Chunks first, without a transaction: a checkpoint is never visible before the
            // chunks it refers to, and chunks left by a failed write are just unused rows of
            // the thread.
            self.put_blobs(cp.thread_id, chunks).await?;
            bind_checkpoint(q(UPSERT_CHECKPOINT.to_owned()), cp, writes)?
                .execute(&self.pool)
                .await?;
        }
        if let Some(stored) = stored {
            stored.record(cp.thread_id, sent);
        }
        Ok(())
    }

    async fn get_checkpoint(
        &self,
        thread_id: Uuid,
        ns: &str,
        id: Uuid,
    ) -> StoreResult<Option<Checkpoint>> {
        let sql = format!(
            "SELECT {CHECKPOINT_COLS} FROM checkpoints \
             WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3"
        );
        let query = q(sql)
            .bind(thread_id.to_string())
            .bind(ns.to_string())
            .bind(id.to_string());
        let found = one(&self.pool, query, checkpoint_row).await?;
        Ok(self
            .with_blobs(thread_id, found.into_iter().collect())
            .await?
            .pop())
    }

    async fn latest_checkpoint(
        &self,
        thread_id: Uuid,
        ns: &str,
    ) -> StoreResult<Option<Checkpoint>> {
        let sql = format!(
            "SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 \
             ORDER BY checkpoint_id DESC LIMIT 1"
        );
        let query = q(sql).bind(thread_id.to_string()).bind(ns.to_string());
        let found = one(&self.pool, query, checkpoint_row).await?;
        Ok(self
            .with_blobs(thread_id, found.into_iter().collect())
            .await?
            .pop())
    }

    async fn list_checkpoints(
        &self,
        thread_id: Uuid,
        query: &CheckpointQuery,
    ) -> StoreResult<Vec<Checkpoint>> {
        let mut sql = Sql::new(&format!(
            "SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2"
        ));
        sql.arg(thread_id);
        sql.arg(query.checkpoint_ns.as_str());
        if let Some(before) = query.before {
            // Hyphenated UUIDv7 text sorts in creation order.
            let p = sql.arg(before);
            sql.push(&format!(" AND checkpoint_id < {p}"));
        }
        self.push_contains(&mut sql, "metadata", &query.metadata)?;
        sql.push(" ORDER BY checkpoint_id DESC");
        // A zero limit (the `Default`) means "all", unlike searches, where it means "count only".
        if query.limit > 0 {
            let l = sql.arg(query.limit);
            sql.push(&format!(" LIMIT {l}"));
        }
        let found = all(&self.pool, sql.query(), checkpoint_row).await?;
        self.with_blobs(thread_id, found).await
    }

    async fn checkpoint_bytes(&self, thread_id: Uuid) -> StoreResult<u64> {
        let len = |col: &str| match self.dialect {
            Dialect::Postgres => format!("octet_length({col})"),
            Dialect::Sqlite => format!("length(CAST({col} AS BLOB))"),
        };
        let sql = format!(
            "SELECT CAST(coalesce((SELECT sum({} + {} + {} + {}) FROM checkpoints WHERE thread_id = $1), 0) \
             + coalesce((SELECT sum({} + {}) FROM checkpoint_blobs WHERE thread_id = $1), 0) AS BIGINT)",
            len("writes"),
            len("metadata"),
            len("tasks"),
            len("next_nodes"),
            len("hash"),
            len("data"),
        );
        let bytes = count(&self.pool, q(sql).bind(thread_id.to_string())).await?;
        Ok(u64::try_from(bytes).unwrap_or_default())
    }

    async fn checkpoint_lineage(
        &self,
        thread_id: Uuid,
        ns: &str,
        id: Uuid,
    ) -> StoreResult<Vec<Checkpoint>> {
        // The depth bound guards against a corrupt parent cycle.
        let sql = format!(
            "WITH RECURSIVE chain (cid, depth) AS (\
               SELECT checkpoint_id, 0 FROM checkpoints \
               WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3 \
               UNION ALL \
               SELECT c.parent_checkpoint_id, chain.depth + 1 FROM checkpoints c \
               JOIN chain ON c.checkpoint_id = chain.cid \
               WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 \
               AND c.parent_checkpoint_id IS NOT NULL AND chain.depth < 100000) \
             SELECT {CHECKPOINT_COLS} FROM checkpoints JOIN chain ON checkpoint_id = chain.cid \
             WHERE thread_id = $1 AND checkpoint_ns = $2 ORDER BY chain.depth DESC"
        );
        let query = q(sql)
            .bind(thread_id.to_string())
            .bind(ns.to_string())
            .bind(id.to_string());
        let found = all(&self.pool, query, checkpoint_row).await?;
        self.with_blobs(thread_id, found).await
    }

    // ---- run events ----

    async fn append_events(&self, events: &[StoredEvent]) -> StoreResult<()> {
        // No transaction: each page stands alone and writing it twice is harmless. A flush
        // interrupted after a page was stored is retried with the same frames (the page exists)
        // or with more (the reader drops the repeated ones).
        for page in pages::pack(events) {
            sqlx::query(
                "INSERT INTO run_event_pages (run_id, thread_id, last_ms, last_seq, frames) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, last_ms, last_seq) DO NOTHING",
            )
            .bind(page.run_id.to_string())
            .bind(page.thread_id.to_string())
            .bind(page.last.ms)
            .bind(page.last.seq)
            .bind(page.frames)
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    async fn last_event_id(&self, run_id: Uuid) -> StoreResult<Option<EventId>> {
        // A page is keyed by its largest frame id, so the largest key is the newest frame.
        let sql = "SELECT last_ms, last_seq FROM run_event_pages WHERE run_id = $1 \
                   ORDER BY last_ms DESC, last_seq DESC LIMIT 1";
        one(
            &self.pool,
            q(sql.to_owned()).bind(run_id.to_string()),
            |row| {
                Ok(EventId {
                    ms: int(row, "last_ms")?,
                    seq: int(row, "last_seq")?,
                })
            },
        )
        .await
    }

    async fn run_events_after(
        &self,
        run_id: Uuid,
        after: Option<EventId>,
    ) -> StoreResult<Vec<StoredEvent>> {
        let mut sql =
            Sql::new("SELECT run_id, thread_id, frames FROM run_event_pages WHERE run_id = $1");
        sql.arg(run_id);
        if let Some(after) = after {
            let ms = sql.arg(after.ms);
            let seq = sql.arg(after.seq);
            sql.push(&format!(
                " AND (last_ms > {ms} OR (last_ms = {ms} AND last_seq > {seq}))"
            ));
        }
        sql.push(" ORDER BY last_ms, last_seq");
        let pages = all(&self.pool, sql.query(), event_page_row).await?;
        Ok(pages::merge(pages, after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn synchronous(store: &SqlStore) -> i64 {
        let row = sqlx::query("PRAGMA synchronous")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        row.try_get::<i64, _>(0).unwrap()
    }

    #[tokio::test]
    async fn sqlite_commits_wait_for_the_disk_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("sync.db").display());
        let default = SqlStore::connect(&url, 2).await.unwrap();
        assert_eq!(synchronous(&default).await, 1, "NORMAL by default");
        default.close().await;
        let full = SqlStore::connect_with(&url, 2, SqliteSync::Full)
            .await
            .unwrap();
        assert_eq!(synchronous(&full).await, 2, "FULL when configured");
    }
}
