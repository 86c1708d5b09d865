//! Rows to values and back: every column is a portable type (TEXT ids, JSON, timestamps).

use super::query::*;
use super::*;
use crate::ids::{AssistantId, CheckpointId, RunId, ThreadId};
use crate::store::crypt::{self, Column};
use crate::store::pages;
use crate::store::{
    Assistant, CancelAction, Checkpoint, JsonMap, Owner, Run, StoreError, StoreResult, StoredEvent,
    Thread,
};
use crate::time::Timestamp;
use serde::Serialize;
use serde_json::Value;
use sqlx::any::AnyRow;
use std::str::FromStr;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Encoding and decoding.

pub(super) fn corrupt(what: &'static str, detail: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what,
        detail: detail.to_string(),
    }
}

pub(super) fn to_json<T: Serialize + ?Sized>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| corrupt("json", e))
}

/// `None` and JSON `null` are both stored as SQL NULL, so filters never match a missing value.
pub(super) fn opt_json(value: &Option<Value>) -> StoreResult<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => to_json(v).map(Some),
    }
}

/// `opt_json`, sealed for `column` of the row `at` (SQL NULL stays NULL).
pub(super) fn opt_sealed_json(
    column: Column,
    at: &str,
    value: &Option<Value>,
) -> StoreResult<Option<String>> {
    opt_json(value)?
        .map(|text| sealed(column, at, text))
        .transpose()
}

/// `opt_json_col`, of a column that may be sealed, of the row `at`.
pub(super) fn opt_sealed_json_col(
    row: &AnyRow,
    col: &'static str,
    column: Column,
    at: &str,
) -> StoreResult<Option<Value>> {
    let Some(stored) = opt_text(row, col)? else {
        return Ok(None);
    };
    let plain = crypt::open(column, at, &stored).map_err(|e| corrupt(col, e))?;
    let v: Value = serde_json::from_str(&plain).map_err(|e| corrupt(col, e))?;
    Ok((!v.is_null()).then_some(v))
}

pub(super) fn text(row: &AnyRow, col: &'static str) -> StoreResult<String> {
    Ok(row.try_get::<String, _>(col)?)
}

pub(super) fn opt_text(row: &AnyRow, col: &'static str) -> StoreResult<Option<String>> {
    Ok(row.try_get::<Option<String>, _>(col)?)
}

pub(super) fn int(row: &AnyRow, col: &'static str) -> StoreResult<i64> {
    Ok(row.try_get::<i64, _>(col)?)
}

/// Any of the id types (they are all a UUID underneath), from its stored text.
pub(super) fn parse_uuid<T: From<Uuid>>(col: &'static str, s: &str) -> StoreResult<T> {
    Uuid::parse_str(s)
        .map(T::from)
        .map_err(|e| corrupt(col, format!("{s}: {e}")))
}

pub(super) fn uuid<T: From<Uuid>>(row: &AnyRow, col: &'static str) -> StoreResult<T> {
    parse_uuid(col, &text(row, col)?)
}

pub(super) fn opt_uuid<T: From<Uuid>>(row: &AnyRow, col: &'static str) -> StoreResult<Option<T>> {
    opt_text(row, col)?.map(|s| parse_uuid(col, &s)).transpose()
}

pub(super) fn ts(row: &AnyRow, col: &'static str) -> StoreResult<Timestamp> {
    let s = text(row, col)?;
    Timestamp::parse(&s).ok_or_else(|| corrupt(col, s))
}

pub(super) fn json<T: serde::de::DeserializeOwned>(
    row: &AnyRow,
    col: &'static str,
) -> StoreResult<T> {
    serde_json::from_str(&text(row, col)?).map_err(|e| corrupt(col, e))
}

/// A JSON value sealed for `column` of the row `at` (`crypt::row_of` of its key) when
/// encryption at rest is on (`store::crypt`).
pub(super) fn sealed(column: Column, at: &str, text: String) -> StoreResult<String> {
    crypt::seal(column, at, text).map_err(|e| corrupt("sealed value", e))
}

/// `to_json`, sealed for `column` of the row `at`.
pub(super) fn sealed_json<T: Serialize + ?Sized>(
    column: Column,
    at: &str,
    value: &T,
) -> StoreResult<String> {
    sealed(column, at, to_json(value)?)
}

/// A column's text of the row `at`, opened if it was sealed.
pub(super) fn opened(
    row: &AnyRow,
    col: &'static str,
    column: Column,
    at: &str,
) -> StoreResult<String> {
    let stored = text(row, col)?;
    match crypt::open(column, at, &stored).map_err(|e| corrupt(col, e))? {
        std::borrow::Cow::Borrowed(_) => Ok(stored),
        std::borrow::Cow::Owned(plain) => Ok(plain),
    }
}

/// `json`, of a column that may be sealed.
pub(super) fn opened_json<T: serde::de::DeserializeOwned>(
    row: &AnyRow,
    col: &'static str,
    column: Column,
    at: &str,
) -> StoreResult<T> {
    serde_json::from_str(&opened(row, col, column, at)?).map_err(|e| corrupt(col, e))
}

pub(super) fn opt_json_col(row: &AnyRow, col: &'static str) -> StoreResult<Option<Value>> {
    let Some(s) = opt_text(row, col)? else {
        return Ok(None);
    };
    let v: Value = serde_json::from_str(&s).map_err(|e| corrupt(col, e))?;
    Ok((!v.is_null()).then_some(v))
}

pub(super) fn parse_enum<T: FromStr<Err = String>>(col: &'static str, s: &str) -> StoreResult<T> {
    s.parse().map_err(|e| corrupt(col, e))
}

pub(super) fn enum_col<T: FromStr<Err = String>>(
    row: &AnyRow,
    col: &'static str,
) -> StoreResult<T> {
    parse_enum(col, &text(row, col)?)
}

pub(super) fn assistant_row(row: &AnyRow) -> StoreResult<Assistant> {
    let assistant_id: AssistantId = uuid(row, "assistant_id")?;
    let at = assistant_id.to_string();
    Ok(Assistant {
        assistant_id,
        graph_id: text(row, "graph_id")?,
        config: opened_json(row, "config", Column::AssistantConfig, &at)?,
        context: opened_json(row, "context", Column::AssistantContext, &at)?,
        metadata: json(row, "metadata")?,
        name: text(row, "name")?,
        description: opt_text(row, "description")?,
        version: int(row, "version")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        owner: opt_text(row, "owner")?.map(Owner::from_stored),
    })
}

pub(super) fn thread_row(row: &AnyRow) -> StoreResult<Thread> {
    let thread_id: ThreadId = uuid(row, "thread_id")?;
    let at = thread_id.to_string();
    Ok(Thread {
        thread_id,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        state_updated_at: ts(row, "state_updated_at")?,
        metadata: json(row, "metadata")?,
        status: enum_col(row, "status")?,
        config: json(row, "config")?,
        values: opt_sealed_json_col(row, "state_values", Column::ThreadValues, &at)?,
        error: opt_json_col(row, "error")?
            .map(|v| serde_json::from_value(v).map_err(|e| corrupt("error", e)))
            .transpose()?,
        interrupts: opened_json(row, "interrupts", Column::ThreadInterrupts, &at)?,
        ttl_minutes: row.try_get::<Option<f64>, _>("ttl_minutes")?,
        owner: Owner::from_stored(text(row, "owner")?),
    })
}

pub(super) fn run_row(row: &AnyRow) -> StoreResult<Run> {
    let run_id: RunId = uuid(row, "run_id")?;
    Ok(Run {
        run_id,
        thread_id: uuid(row, "thread_id")?,
        assistant_id: uuid(row, "assistant_id")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        status: enum_col(row, "status")?,
        metadata: json(row, "metadata")?,
        multitask_strategy: enum_col(row, "multitask_strategy")?,
        kwargs: opened_json(row, "kwargs", Column::RunKwargs, &run_id.to_string())?,
    })
}

pub(super) fn checkpoint_row(row: &AnyRow) -> StoreResult<Checkpoint> {
    let thread_id: ThreadId = uuid(row, "thread_id")?;
    let checkpoint_ns = text(row, "checkpoint_ns")?;
    let checkpoint_id: CheckpointId = uuid(row, "checkpoint_id")?;
    let at = checkpoint_at(thread_id, &checkpoint_ns, checkpoint_id);
    Ok(Checkpoint {
        thread_id,
        checkpoint_ns,
        checkpoint_id,
        parent_checkpoint_id: opt_uuid(row, "parent_checkpoint_id")?,
        run_id: opt_uuid(row, "run_id")?,
        step: int(row, "step")?,
        source: text(row, "source")?,
        metadata: json(row, "metadata")?,
        writes: opened_json(row, "writes", Column::CheckpointWrites, &at)?,
        next: json(row, "next_nodes")?,
        tasks: opened_json(row, "tasks", Column::CheckpointTasks, &at)?,
        created_at: ts(row, "created_at")?,
    })
}

pub(super) fn event_page_row(row: &AnyRow) -> StoreResult<Vec<StoredEvent>> {
    let run_id: RunId = uuid(row, "run_id")?;
    let at = event_page_at(run_id, int(row, "last_ms")?, int(row, "last_seq")?);
    pages::unpack(
        run_id,
        uuid(row, "thread_id")?,
        &opened(row, "frames", Column::RunEvents, &at)?,
    )
}

/// The row identity a checkpoint's sealed columns are bound to.
pub(super) fn checkpoint_at(thread: ThreadId, ns: &str, id: CheckpointId) -> String {
    crypt::row_of(&[&thread.to_string(), ns, &id.to_string()])
}

/// The row identity an event page's frames are bound to.
pub(super) fn event_page_at(run: RunId, last_ms: i64, last_seq: i64) -> String {
    crypt::row_of(&[
        &run.to_string(),
        &last_ms.to_string(),
        &last_seq.to_string(),
    ])
}

/// The row identity a store item's value is bound to: its owner, namespace and key.
pub(super) fn item_at(owner: &Owner, dotted: &str, key: &str) -> String {
    crypt::row_of(&[owner.as_str(), dotted, key])
}

/// The row identity a chunk of a thread's checkpoints is bound to.
pub(super) fn chunk_at(thread: ThreadId, hash: &str) -> String {
    crypt::row_of(&[&thread.to_string(), hash])
}

pub(super) fn thread_id_row(row: &AnyRow) -> StoreResult<ThreadId> {
    uuid(row, "thread_id")
}

pub(super) fn metadata_row(row: &AnyRow) -> StoreResult<JsonMap> {
    json(row, "metadata")
}

pub(super) fn cancel_row(row: &AnyRow) -> StoreResult<Option<CancelAction>> {
    opt_text(row, "cancel_action")?
        .map(|s| parse_enum("cancel_action", &s))
        .transpose()
}

pub(super) fn merge(into: &mut JsonMap, from: &JsonMap) {
    for (k, v) in from {
        into.insert(k.clone(), v.clone());
    }
}

pub(super) fn insert_assistant_query(a: &Assistant) -> StoreResult<AnyQuery> {
    let sql = format!(
        "INSERT INTO assistants ({ASSISTANT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
         $11) ON CONFLICT (assistant_id) DO NOTHING"
    );
    let at = a.assistant_id.to_string();
    Ok(q(sql)
        .bind(a.assistant_id.to_string())
        .bind(a.graph_id.clone())
        .bind(sealed_json(Column::AssistantConfig, &at, &a.config)?)
        .bind(sealed_json(Column::AssistantContext, &at, &a.context)?)
        .bind(to_json(&a.metadata)?)
        .bind(a.name.clone())
        .bind(a.description.clone())
        .bind(a.version)
        .bind(a.created_at.to_string())
        .bind(a.updated_at.to_string())
        .bind(a.owner.as_ref().map(|o| o.as_str().to_owned())))
}

/// An optional float as a parameter: sent as text and cast in SQL. Bound as a float, a `None`
/// and a number sent through one cached Postgres statement disagree on the parameter's type
/// ("incorrect binary data format in bind parameter").
pub(super) fn opt_float(value: Option<f64>) -> Option<String> {
    value.map(|v| v.to_string())
}

pub(super) fn insert_thread_query(t: &Thread) -> StoreResult<AnyQuery> {
    let sql = format!(
        "INSERT INTO threads ({THREAD_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
         CAST($11 AS DOUBLE PRECISION), $12) ON CONFLICT (thread_id) DO NOTHING"
    );
    Ok(q(sql)
        .bind(t.thread_id.to_string())
        .bind(t.created_at.to_string())
        .bind(t.updated_at.to_string())
        .bind(t.state_updated_at.to_string())
        .bind(to_json(&t.metadata)?)
        .bind(t.status.as_str())
        .bind(to_json(&t.config)?)
        .bind(opt_sealed_json(
            Column::ThreadValues,
            &t.thread_id.to_string(),
            &t.values,
        )?)
        .bind(t.error.as_ref().map(to_json).transpose()?)
        .bind(sealed_json(
            Column::ThreadInterrupts,
            &t.thread_id.to_string(),
            &t.interrupts,
        )?)
        .bind(opt_float(t.ttl_minutes))
        .bind(t.owner.as_str().to_owned()))
}

/// Inserts a run ($1–$9, see `bind_run`).
pub(super) fn insert_run_sql() -> String {
    format!("INSERT INTO runs ({RUN_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")
}

/// Marks a thread busy; the arguments name the parameters holding its id, its merged
/// metadata and the time.
pub(super) fn mark_thread_busy_sql(id: &str, metadata: &str, now: &str) -> String {
    format!(
        "UPDATE threads SET status = 'busy', metadata = {metadata}, updated_at = {now} \
         WHERE thread_id = {id}"
    )
}

pub(super) fn bind_run(query: AnyQuery, r: &Run) -> StoreResult<AnyQuery> {
    Ok(query
        .bind(r.run_id.to_string())
        .bind(r.thread_id.to_string())
        .bind(r.assistant_id.to_string())
        .bind(r.created_at.to_string())
        .bind(r.updated_at.to_string())
        .bind(r.status.as_str())
        .bind(to_json(&r.metadata)?)
        .bind(r.multitask_strategy.as_str())
        .bind(sealed_json(
            Column::RunKwargs,
            &r.run_id.to_string(),
            &r.kwargs,
        )?))
}

/// Writes a checkpoint row, replacing one with the same key ($1–$12, see `bind_checkpoint`).
pub(super) const UPSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (thread_id, checkpoint_ns, \
    checkpoint_id, parent_checkpoint_id, run_id, step, source, metadata, writes, next_nodes, \
    tasks, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET \
    parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, \
    step = excluded.step, source = excluded.source, metadata = excluded.metadata, \
    writes = excluded.writes, next_nodes = excluded.next_nodes, tasks = excluded.tasks, \
    created_at = excluded.created_at";

/// Binds $1–$12 of `UPSERT_CHECKPOINT`; `writes` is the checkpoint's writes as stored JSON
/// (large strings replaced by chunk references).
pub(super) fn bind_checkpoint(
    query: AnyQuery,
    c: &Checkpoint,
    writes: String,
) -> StoreResult<AnyQuery> {
    let at = checkpoint_at(c.thread_id, &c.checkpoint_ns, c.checkpoint_id);
    Ok(query
        .bind(c.thread_id.to_string())
        .bind(c.checkpoint_ns.clone())
        .bind(c.checkpoint_id.to_string())
        .bind(c.parent_checkpoint_id.map(|u| u.to_string()))
        .bind(c.run_id.map(|u| u.to_string()))
        .bind(c.step)
        .bind(c.source.clone())
        .bind(to_json(&c.metadata)?)
        .bind(sealed(Column::CheckpointWrites, &at, writes)?)
        .bind(to_json(&c.next)?)
        .bind(sealed_json(Column::CheckpointTasks, &at, &c.tasks)?)
        .bind(c.created_at.to_string()))
}
