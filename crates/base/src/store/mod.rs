//! Persistence: one small trait per concern (`AssistantStore`, `ThreadStore`, `RunStore`,
//! `CheckpointStore`, `EventLog`), together the `Store`, implemented once in SQL for both
//! Postgres and SQLite (`sql/`, one file per trait). Knows nothing about HTTP or graphs.

mod blobs;
pub mod crypt;
mod model;
mod pages;
mod sql;

pub mod retry;
pub use blobs::StoredChunks;
pub use model::*;
pub use sql::{Resealed, SqlStore, SqliteSync, StoreOptions};

use crate::time::Timestamp;
use async_trait::async_trait;
use std::time::Duration;

/// Errors from the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A row with this id already exists (create with `if_exists = raise`).
    #[error("{0} already exists")]
    Conflict(&'static str),
    /// The thread has a run in flight and the new run's strategy is `reject`.
    #[error("thread {0} is busy")]
    Busy(ThreadId),
    /// A row the operation depends on does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A stored value could not be decoded (corrupt row or a bug).
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// A run was already created with this idempotency key.
    #[error("a run with this Idempotency-Key already exists: run {run_id} on thread {thread_id}")]
    DuplicateRun { run_id: RunId, thread_id: ThreadId },
    /// A write for a run whose lease this worker no longer holds (fenced off).
    #[error("run {0} is no longer leased to this worker")]
    LeaseLost(RunId),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    /// Errors that say the database could not be reached or was busy, not that the request
    /// was wrong: worth retrying, and a 503 to API clients.
    pub fn is_transient(&self) -> bool {
        let Self::Database(error) = self else {
            return false;
        };
        match error {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(db) => transient_database_error(db.as_ref()),
            _ => false,
        }
    }
}

impl StoreError {
    /// A transaction that lost to a concurrent one (Postgres deadlock victim or serialization
    /// failure): it changed nothing, and running it again at once usually succeeds. (A busy or
    /// unreachable database is transient too, but retrying at once only makes the wait longer.)
    pub fn is_conflict(&self) -> bool {
        let Self::Database(sqlx::Error::Database(db)) = self else {
            return false;
        };
        db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|pg| ["40001", "40P01"].contains(&pg.code()))
    }
}

/// Runs `op` again (up to three more times, after 25, 50 and 75 ms) while it loses to a
/// concurrent transaction: on Postgres a concurrent claim or checkpoint write can make a write a
/// deadlock victim or a serialization failure, which changed nothing and succeeds when retried,
/// and should not reach the client as a 503. A database that is busy or away is not retried here.
pub async fn retrying_conflicts<T, F, Fut>(what: &str, mut op: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut attempt: u32 = 0;
    loop {
        match op().await {
            Err(error) if error.is_conflict() && attempt < 3 => {
                attempt += 1;
                tracing::debug!(%error, attempt, what, "trying again after a conflict");
                tokio::time::sleep(std::time::Duration::from_millis(25 * u64::from(attempt))).await;
            }
            result => return result,
        }
    }
}

/// Postgres: connection, resource, shutdown, timeout and serialization classes. SQLite: busy
/// and locked (any extended code of them), which outlast the busy timeout under heavy writes.
fn transient_database_error(db: &dyn sqlx::error::DatabaseError) -> bool {
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        let code = pg.code();
        return ["08", "53", "57P"]
            .iter()
            .any(|class| code.starts_with(class))
            || ["40001", "40P01", "57014"].contains(&code);
    }
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        let primary = db
            .code()
            .and_then(|c| c.parse::<u32>().ok())
            .map(|c| c & 0xff);
        return matches!(primary, Some(5 | 6));
    }
    false
}

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// What a running run learns when it renews its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Still ours; `cancel` is set when someone asked the run to stop.
    Held { cancel: Option<CancelAction> },
    /// The run is gone or owned by another worker: stop without writing more.
    Lost,
}

/// How a new run is inserted.
#[derive(Clone, Debug)]
pub struct RunInsert {
    pub run: Run,
    /// Who creates the run: the thread must be theirs (or is created as theirs).
    pub owner: model::Owner,
    /// Merged into the thread's metadata (`graph_id`, `assistant_id`, …).
    pub thread_metadata: model::JsonMap,
    /// Create the thread when it does not exist (`if_not_exists: create`, stateless runs).
    pub create_thread: bool,
    /// The client's `Idempotency-Key`: a second insert with it changes nothing and fails with
    /// `DuplicateRun` naming the first run.
    pub idempotency_key: Option<String>,
    /// The cron tick this run is for: claimed in the same transaction, or nothing is inserted
    /// (`Conflict("cron tick")`: another replica started it).
    pub cron_tick: Option<CronTick>,
}

/// Assistants: the graph plus its saved config.
#[async_trait]
pub trait AssistantStore: Send + Sync {
    /// Inserts an assistant. With `IfExists::Raise` an existing id is `Conflict`; with
    /// `DoNothing` the existing row is returned unchanged.
    async fn create_assistant(&self, a: &Assistant, if_exists: IfExists) -> StoreResult<Assistant>;
    async fn get_assistant(&self, id: AssistantId) -> StoreResult<Option<Assistant>>;
    /// Applies `patch` (metadata merged) as a new version, one past the highest the assistant
    /// ever had (so a patch after `/latest` pointed back never reuses a number).
    async fn update_assistant(
        &self,
        id: AssistantId,
        patch: &AssistantPatch,
        now: Timestamp,
    ) -> StoreResult<Option<Assistant>>;
    /// Returns whether a row was deleted (its versions and crons go with it).
    async fn delete_assistant(&self, id: AssistantId) -> StoreResult<bool>;
    async fn search_assistants(&self, q: &AssistantQuery) -> StoreResult<Page<Assistant>>;
    /// The assistant's versions whose metadata contains `metadata`, newest version first.
    /// `None` when the assistant does not exist.
    async fn assistant_versions(
        &self,
        id: AssistantId,
        metadata: &JsonMap,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Option<Vec<AssistantVersion>>>;
    /// Makes `version` the assistant's current one (its graph, config, context, metadata, name
    /// and description), bumping `updated_at`. `NotFound` names what is missing.
    async fn set_latest_assistant(
        &self,
        id: AssistantId,
        version: i64,
        now: Timestamp,
    ) -> StoreResult<Assistant>;
}

/// Threads: metadata, status summary and their lifetime (copy, delete with everything on them).
#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// Inserts a thread; `IfExists` as for assistants.
    async fn create_thread(&self, t: &Thread, if_exists: IfExists) -> StoreResult<Thread>;
    async fn get_thread(&self, id: ThreadId) -> StoreResult<Option<Thread>>;
    /// Merges `metadata` into the thread's metadata and bumps `updated_at`.
    /// Merges metadata into the thread and, with `ttl_minutes`, replaces its time-to-live.
    async fn patch_thread(
        &self,
        id: ThreadId,
        metadata: &JsonMap,
        ttl_minutes: Option<f64>,
        now: Timestamp,
    ) -> StoreResult<Option<Thread>>;
    /// Deletes threads whose `ttl` ran out (minutes since their last update) and that have no
    /// run in flight, with everything on them, each in a transaction of its own; returns their
    /// ids.
    async fn delete_expired_threads(&self, now: Timestamp) -> StoreResult<Vec<ThreadId>>;
    /// Deletes the thread with its runs, checkpoints and events.
    async fn delete_thread(&self, id: ThreadId) -> StoreResult<bool>;
    async fn search_threads(&self, q: &ThreadQuery) -> StoreResult<Page<Thread>>;
    /// Copies a thread (metadata, values, checkpoints) under a new id; runs are not copied.
    async fn copy_thread(
        &self,
        from: ThreadId,
        to: ThreadId,
        now: Timestamp,
    ) -> StoreResult<Option<Thread>>;
    /// Sets status, values, error and interrupts, bumping `updated_at` and `state_updated_at`.
    async fn set_thread_summary(
        &self,
        id: ThreadId,
        summary: &ThreadSummary,
        now: Timestamp,
    ) -> StoreResult<()>;
}

/// Runs: the queue (insert with a multitask strategy, claim, lease, cancel, finish).
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Inserts a pending run and applies its multitask strategy in the same transaction:
    /// `reject` fails with `Busy` when the thread has a pending or running run; `interrupt` and
    /// `rollback` request cancellation of those runs (pending ones end at once: interrupted or
    /// deleted; running ones get their cancel flag) and return them; `enqueue` does nothing else.
    /// The thread becomes `busy` and gains `thread_metadata`. A missing thread is `NotFound`
    /// unless `create_thread`.
    async fn insert_run(&self, ins: &RunInsert) -> StoreResult<Vec<Run>>;
    async fn get_run(&self, run_id: RunId) -> StoreResult<Option<Run>>;
    /// The status of each of these runs that exists, in one statement (for sweeps over many
    /// runs at once). Missing runs are left out; the order is unspecified.
    async fn run_statuses(&self, run_ids: &[RunId]) -> StoreResult<Vec<(RunId, RunStatus)>>;
    /// A thread's runs, newest first.
    async fn list_runs(
        &self,
        thread_id: ThreadId,
        status: Option<RunStatus>,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<Run>>;
    /// Pending and running runs of a thread, oldest first.
    async fn inflight_runs(&self, thread_id: ThreadId) -> StoreResult<Vec<Run>>;
    /// Deletes a run and its events. Returns whether it existed.
    async fn delete_run(&self, run_id: RunId) -> StoreResult<bool>;
    /// Asks runs to stop: pending ones end at once (`interrupted`, or deleted for rollback),
    /// running ones get the cancel flag their worker sees on its next lease renewal.
    /// Returns the runs that were in flight and are now affected.
    async fn cancel_runs(&self, run_ids: &[RunId], action: CancelAction) -> StoreResult<Vec<Run>>;
    /// Claims a run for `worker` until the database's `now + lease`: first a running run whose
    /// lease lapsed (its worker died; another worker's, with fewer than `max_attempts`
    /// attempts), to be resumed from its checkpoints; otherwise the oldest pending run that may
    /// start now and whose thread has no running run. Each claim is a new attempt.
    async fn claim_run(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: i64,
    ) -> StoreResult<Option<Lease>>;
    /// Hands a run back (graceful shutdown): its lease lapses at once so another worker resumes
    /// it without waiting, and the attempt does not count. False when the fence no longer holds.
    async fn release_lease(&self, fence: &Fence) -> StoreResult<bool>;
    /// Extends the lease (by the database's clock) and reports whether cancellation was
    /// requested.
    async fn renew_lease(
        &self,
        run_id: RunId,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<LeaseState>;
    /// Ends a run and updates its thread in one transaction: the thread stays `busy` while other
    /// runs are in flight, otherwise takes `summary.status`; values/error/interrupts come from
    /// `summary` when given. `RolledBack` deletes the run, its checkpoints and its events.
    /// With a fence, the run must still be running under it (else `LeaseLost`, nothing written).
    async fn finish_run(
        &self,
        run_id: RunId,
        fence: Option<&Fence>,
        end: &RunEnd,
        summary: Option<&ThreadSummary>,
    ) -> StoreResult<()>;
    /// Marks running runs whose lease lapsed (by the database's clock) after `max_attempts`
    /// attempts as `error`, with the reason on their thread, and returns them.
    async fn fail_expired_runs(&self, max_attempts: i64) -> StoreResult<Vec<Run>>;
    /// Runs with this status, across all threads (the queue depth for `/metrics`).
    async fn count_runs(&self, status: RunStatus) -> StoreResult<u64>;
    /// Pending and running runs on the owner's threads (per-owner admission limits).
    async fn count_inflight_runs_of(&self, owner: &Owner) -> StoreResult<u64>;
    /// Records (replaces) what a run spent so far, under its owner; the record is the owner's,
    /// not the thread's, and stays when the thread is deleted.
    async fn record_spend(
        &self,
        run_id: RunId,
        owner: &Owner,
        tokens: u64,
        usd: f64,
        now: Timestamp,
    ) -> StoreResult<()>;
    /// Bytes the owner keeps stored: its assistants (and their versions), threads, their
    /// checkpoints, chunks and stored events, and its store items (text lengths; indexes and
    /// row overhead not counted). For per-owner storage quotas.
    async fn owner_storage_bytes(&self, owner: &Owner) -> StoreResult<u64>;
    /// Tokens and estimated USD the owner's runs recorded since `since`.
    async fn owner_spend_since(&self, owner: &Owner, since: Timestamp) -> StoreResult<(u64, f64)>;
    /// Deletes spend records older than `cutoff`; returns how many.
    async fn delete_spend_before(&self, cutoff: Timestamp) -> StoreResult<u64>;
    /// Merges keys into a run's metadata (`stopped_early`, when it ended early).
    async fn merge_run_metadata(&self, run_id: RunId, metadata: &JsonMap) -> StoreResult<()>;
}

/// Checkpoints: one per graph step and namespace, chained by parent ids.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Writes a checkpoint with the chunks of its large strings. With `stored`, chunks it
    /// lists are not sent again and those written are added to it.
    /// With a fence, the checkpoint is written only while the run is still running under it
    /// (else `LeaseLost`): a worker that lost its run cannot fork the run's history.
    async fn put_checkpoint(
        &self,
        cp: &Checkpoint,
        stored: Option<&StoredChunks>,
        fence: Option<&Fence>,
    ) -> StoreResult<()>;
    /// Replaces the thread's whole checkpoint history (every namespace) with `cp`, which must
    /// hold the full state as its writes (`/threads/prune` with `keep_latest`).
    async fn keep_only_checkpoint(&self, cp: &Checkpoint) -> StoreResult<()>;
    async fn get_checkpoint(
        &self,
        thread_id: ThreadId,
        ns: &str,
        id: CheckpointId,
    ) -> StoreResult<Option<Checkpoint>>;
    /// The checkpoint with the greatest id in namespace `ns`.
    async fn latest_checkpoint(
        &self,
        thread_id: ThreadId,
        ns: &str,
    ) -> StoreResult<Option<Checkpoint>>;
    /// Newest first.
    async fn list_checkpoints(
        &self,
        thread_id: ThreadId,
        q: &CheckpointQuery,
    ) -> StoreResult<Vec<Checkpoint>>;
    /// Bytes the thread's checkpoints occupy as stored (their JSON columns plus the shared
    /// chunks of large strings), before any compression the database applies.
    async fn checkpoint_bytes(&self, thread_id: ThreadId) -> StoreResult<u64>;
    /// Records model or tool calls that finished inside tasks, each under a key its task
    /// derives from the call, until `forget_task_calls`. A key already recorded keeps its result.
    async fn put_task_calls(&self, thread_id: ThreadId, calls: &[TaskCall]) -> StoreResult<()>;
    /// The calls recorded for `task_id`, by key.
    async fn task_calls(
        &self,
        thread_id: ThreadId,
        task_id: uuid::Uuid,
    ) -> StoreResult<Vec<(String, serde_json::Value)>>;
    /// Forgets the calls of tasks whose step is checkpointed (their results are in it now).
    async fn forget_task_calls(
        &self,
        thread_id: ThreadId,
        task_ids: &[uuid::Uuid],
    ) -> StoreResult<()>;
    /// The chain from the root to `id` (inclusive) following parent links, oldest first.
    async fn checkpoint_lineage(
        &self,
        thread_id: ThreadId,
        ns: &str,
        id: CheckpointId,
    ) -> StoreResult<Vec<Checkpoint>>;
}

/// The event log of resumable runs, read back on reconnect (`Last-Event-ID`).
#[async_trait]
pub trait EventLog: Send + Sync {
    async fn append_events(&self, events: &[StoredEvent]) -> StoreResult<()>;
    /// Deletes the stored events of runs that ended before `cutoff`; returns the pages deleted.
    async fn delete_events_ended_before(&self, cutoff: Timestamp) -> StoreResult<u64>;
    /// The id of a run's newest stored event, if any (where a live join on a replica that does
    /// not execute the run starts, without reading the log).
    async fn last_event_id(&self, run_id: RunId) -> StoreResult<Option<EventId>>;
    /// A run's stored events with id greater than `after` (all when `None`), in id order.
    async fn run_events_after(
        &self,
        run_id: RunId,
        after: Option<EventId>,
    ) -> StoreResult<Vec<StoredEvent>>;
}

/// The Store API: JSON documents shared across an owner's threads, by namespace and key.
#[async_trait]
pub trait ItemStore: Send + Sync {
    /// Inserts or replaces the item. With `ttl_minutes` it expires that long after this write
    /// (or after the last read that refreshed it); without, it never does.
    async fn put_item(
        &self,
        owner: &Owner,
        ns: &Namespace,
        key: &str,
        value: &JsonMap,
        ttl_minutes: Option<f64>,
        now: Timestamp,
    ) -> StoreResult<()>;
    /// The item unless missing or expired; `refresh_ttl` restarts its time-to-live.
    async fn get_item(
        &self,
        owner: &Owner,
        ns: &Namespace,
        key: &str,
        refresh_ttl: bool,
        now: Timestamp,
    ) -> StoreResult<Option<Item>>;
    /// Returns whether an item was deleted.
    async fn delete_item(&self, owner: &Owner, ns: &Namespace, key: &str) -> StoreResult<bool>;
    /// Live items under the prefix matching every filter, by namespace then key.
    async fn search_items(&self, q: &ItemQuery, now: Timestamp) -> StoreResult<Vec<Item>>;
    /// Namespaces holding live items, as the query shapes them.
    async fn list_namespaces(
        &self,
        q: &NamespaceQuery,
        now: Timestamp,
    ) -> StoreResult<Vec<Namespace>>;
    /// Deletes items whose time-to-live ran out; returns how many.
    async fn delete_expired_items(&self, now: Timestamp) -> StoreResult<u64>;
}

/// Crons: schedules that create runs.
#[async_trait]
pub trait CronStore: Send + Sync {
    async fn create_cron(&self, cron: &Cron) -> StoreResult<()>;
    async fn get_cron(&self, id: CronId) -> StoreResult<Option<Cron>>;
    /// Replaces the cron's row with `cron` (the API computed it from the patch); false when
    /// it no longer exists.
    async fn update_cron(&self, cron: &Cron) -> StoreResult<bool>;
    async fn delete_cron(&self, id: CronId) -> StoreResult<bool>;
    async fn search_crons(&self, q: &CronQuery) -> StoreResult<Page<Cron>>;
    /// Enabled crons whose tick is due at `now` (and not past their `end_time`), oldest
    /// first, at most `limit`.
    async fn due_crons(&self, now: Timestamp, limit: i64) -> StoreResult<Vec<Cron>>;
    /// Moves a cron past a tick that started no run (its run could not be created), if the
    /// tick is still due; returns whether it moved.
    async fn skip_cron_tick(&self, tick: &CronTick) -> StoreResult<bool>;
}

/// The whole persistence surface: every concern's trait, on one backend. Every method of every
/// trait is one transaction — it happens entirely or not at all — except `append_events` (each
/// page alone) and `delete_expired_threads` (each thread alone).
#[async_trait]
pub trait Store:
    AssistantStore
    + ThreadStore
    + RunStore
    + CheckpointStore
    + EventLog
    + ItemStore
    + CronStore
    + Send
    + Sync
    + 'static
{
    /// `postgres` or `sqlite`.
    fn backend(&self) -> &'static str;
    /// One round trip to the database (readiness checks).
    async fn ping(&self) -> StoreResult<()>;
}

/// Opens the store `url` names (`postgres://…` or `sqlite://…`) and runs its migrations.
pub async fn connect(url: &str, max_connections: u32, sync: SqliteSync) -> StoreResult<SqlStore> {
    SqlStore::connect_with(url, max_connections, sync).await
}
