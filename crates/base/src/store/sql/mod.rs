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

mod assistants;
mod checkpoints;
mod codec;
mod crons;
mod events;
mod filters;
mod items;
mod query;
mod reseal;
pub use reseal::Resealed;
mod runs;
mod threads;
mod tx;

use crate::store::{Store, StoreError, StoreResult};
use sqlx::any::{AnyArguments, AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};
use std::time::Duration;

pub(super) type AnyQuery = sqlx::query::Query<'static, Any, AnyArguments>;
pub(super) type Tx = Transaction<'static, Any>;
pub(super) type Decode<T> = fn(&AnyRow) -> StoreResult<T>;

/// How often `claim_run` retries after losing a race for a thread (Postgres unique violation).
pub(super) const CLAIM_ATTEMPTS: usize = 3;

pub(super) const ASSISTANT_COLS: &str = "assistant_id, graph_id, config, context, metadata, name, \
    description, version, created_at, updated_at, owner";
pub(super) const THREAD_COLS: &str = "thread_id, created_at, updated_at, state_updated_at, metadata, \
    status, config, state_values, error, interrupts, ttl_minutes, owner";
pub(super) const RUN_COLS: &str = "run_id, thread_id, assistant_id, created_at, updated_at, status, \
    metadata, multitask_strategy, kwargs";
pub(super) const CHECKPOINT_COLS: &str = "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, \
    run_id, step, source, metadata, writes, next_nodes, tasks, created_at";
pub(super) const INFLIGHT: &str = "status IN ('pending', 'running')";

/// The SQL flavours this store speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    pub(super) fn of_url(url: &str) -> StoreResult<Self> {
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
    pub(super) fn for_update(self) -> &'static str {
        match self {
            Self::Postgres => " FOR UPDATE",
            Self::Sqlite => "",
        }
    }

    /// The database's clock as a `Timestamp` text, optionally `ahead` seconds later (`ahead`
    /// names a parameter holding a float). Leases are measured by it, so replicas whose clocks
    /// disagree still agree on when a lease lapsed.
    pub(super) fn clock(self, ahead: Option<&str>) -> String {
        match (self, ahead) {
            (Self::Postgres, None) => {
                format!("to_char(clock_timestamp() AT TIME ZONE 'UTC', {PG_TS})")
            }
            (Self::Postgres, Some(p)) => format!(
                "to_char((clock_timestamp() + make_interval(secs => CAST({p} AS DOUBLE PRECISION))) \
                 AT TIME ZONE 'UTC', {PG_TS})"
            ),
            (Self::Sqlite, None) => "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00')".into(),
            (Self::Sqlite, Some(p)) => {
                format!("(strftime('%Y-%m-%dT%H:%M:%f', 'now', {p} || ' seconds') || '000+00:00')")
            }
        }
    }

    /// Locks a row against concurrent updates while letting other readers share it.
    pub(super) fn for_share(self) -> &'static str {
        match self {
            Self::Postgres => " FOR SHARE",
            Self::Sqlite => "",
        }
    }

    /// Lets concurrent claimers pass over each other's candidate rows instead of queueing.
    pub(super) fn skip_locked(self) -> &'static str {
        match self {
            Self::Postgres => " FOR UPDATE SKIP LOCKED",
            Self::Sqlite => "",
        }
    }
}

/// `to_char` pattern of the `Timestamp` text format.
const PG_TS: &str = r#"'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'"#;

/// The Postgres/SQLite store.
#[derive(Clone, Debug)]
pub struct SqlStore {
    pool: AnyPool,
    /// Lease renewals and hand-backs only (Postgres): streams following runs and busy API
    /// requests can take every connection of `pool`, and a renewal that waits behind them
    /// past the lease loses the run.
    lease_pool: AnyPool,
    dialect: Dialect,
}

/// How the store connects.
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub sqlite_sync: SqliteSync,
    /// Postgres `statement_timeout` (zero: none): a statement stuck on a lock or a sick
    /// server fails instead of holding a connection and its caller forever.
    pub statement_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 10,
            sqlite_sync: SqliteSync::default(),
            statement_timeout: Duration::from_secs(30),
        }
    }
}

/// How long a request waits for a free connection, or for the server to accept one, before it
/// fails (a 503 to API clients) instead of hanging while the database is away.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

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
        let options = StoreOptions {
            max_connections,
            sqlite_sync: sync,
            ..StoreOptions::default()
        };
        Self::open(url, &options).await
    }

    /// Opens the store with every connection option, and runs the migrations.
    pub async fn open(url: &str, options: &StoreOptions) -> StoreResult<SqlStore> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let (pool, lease_pool) = match dialect {
            Dialect::Postgres => (
                connect_postgres(url, options.max_connections, options.statement_timeout).await?,
                connect_postgres(url, 2, options.statement_timeout).await?,
            ),
            Dialect::Sqlite => {
                let pool =
                    connect_sqlite(url, options.max_connections, options.sqlite_sync).await?;
                (pool.clone(), pool)
            }
        };
        match dialect {
            Dialect::Postgres => {
                sqlx::migrate!("../../migrations/postgres")
                    .run(&pool)
                    .await?
            }
            Dialect::Sqlite => sqlx::migrate!("../../migrations/sqlite").run(&pool).await?,
        }
        Ok(SqlStore {
            pool,
            lease_pool,
            dialect,
        })
    }

    /// Closes the pool; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
        self.lease_pool.close().await;
    }

    /// A transaction that may write. SQLite takes the write lock up front: a deferred
    /// transaction that later upgrades can fail with SQLITE_BUSY without waiting.
    pub(super) async fn write_tx(&self) -> StoreResult<Tx> {
        Ok(match self.dialect {
            Dialect::Postgres => self.pool.begin().await?,
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
        })
    }

    pub(super) fn lock(&self) -> &'static str {
        self.dialect.for_update()
    }
}

async fn connect_postgres(
    url: &str,
    max_connections: u32,
    statement_timeout: Duration,
) -> StoreResult<AnyPool> {
    let timeout_ms = statement_timeout.as_millis();
    Ok(AnyPoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // No ping before every checkout: it doubled the round trips of each statement. A
        // broken connection fails its statement and is dropped.
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if timeout_ms > 0 {
                    let set = format!("SET statement_timeout = {timeout_ms}");
                    sqlx::raw_sql(sqlx::AssertSqlSafe(set))
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(quiet(url)?))
}

/// Connect options that never log statements: sqlx logs each one (and slow ones as warnings)
/// with its whole text and parameters count, lines of hundreds of kilobytes for large
/// searches. Store calls are timed and slow ones logged by name instead (`StoreTimer`).
fn quiet(url: &str) -> StoreResult<AnyConnectOptions> {
    use sqlx::ConnectOptions;
    Ok(url
        .parse::<AnyConnectOptions>()?
        .log_statements(log::LevelFilter::Off)
        .log_slow_statements(log::LevelFilter::Off, Duration::from_secs(3600)))
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
        return Ok(options.connect_with(quiet(url)?).await?);
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
        .connect_with(quiet(&url)?)
        .await?)
}

// ---------------------------------------------------------------------------------------------

#[async_trait::async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
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
