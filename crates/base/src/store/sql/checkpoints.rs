//! Checkpoints in SQL, with the chunks of their large strings stored once per thread (see `store::blobs`).

use super::codec::*;
use super::query::*;
use super::*;
use crate::ids::{CheckpointId, ThreadId};
use crate::store::blobs;
use crate::store::crypt::Column;
use crate::store::{Checkpoint, CheckpointQuery, Fence, StoreError, StoreResult};
use crate::telemetry::metrics::StoreTimer;
use async_trait::async_trait;
use sqlx::AnyConnection;
use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

/// `UPSERT_CHECKPOINT` that writes only while the run is running under the fence bound at
/// `$first` (run id, worker, attempt; see `bind_fence`): after $1-$12, and $13 (the chunk list)
/// on Postgres. The run row is share-locked, so a claim waits for the write or the write sees
/// the claim. Built once per dialect.
fn fenced_upsert(dialect: Dialect) -> &'static str {
    static POSTGRES: LazyLock<String> =
        LazyLock::new(|| build_fenced_upsert(Dialect::Postgres, 14));
    static SQLITE: LazyLock<String> = LazyLock::new(|| build_fenced_upsert(Dialect::Sqlite, 13));
    match dialect {
        Dialect::Postgres => &POSTGRES,
        Dialect::Sqlite => &SQLITE,
    }
}

fn build_fenced_upsert(dialect: Dialect, first: usize) -> String {
    let (run, worker, attempt) = (first, first + 1, first + 2);
    let guard = format!(
        "SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 WHERE EXISTS (\
         SELECT 1 FROM runs WHERE run_id = ${run} AND status = 'running' \
         AND lease_owner = ${worker} AND attempt = ${attempt}{})",
        dialect.for_share()
    );
    UPSERT_CHECKPOINT.replacen(
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &guard,
        1,
    )
}

/// Binds a fence's run id, worker and attempt after the other parameters (nothing without one).
fn bind_fence(query: AnyQuery, fence: Option<&Fence>) -> AnyQuery {
    match fence {
        Some(f) => query
            .bind(f.run_id.to_string())
            .bind(f.worker.clone())
            .bind(f.attempt),
        None => query,
    }
}

#[async_trait]
impl crate::store::CheckpointStore for SqlStore {
    async fn put_checkpoint(
        &self,
        cp: &Checkpoint,
        stored: Option<&blobs::StoredChunks>,
        fence: Option<&Fence>,
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("put_checkpoint");
        let (writes, mut chunks) =
            blobs::externalize(&cp.writes).map_err(|e| corrupt("checkpoint writes", e))?;
        if let Some(stored) = stored {
            chunks = stored.unsent(cp.thread_id, chunks);
        }
        let chunks = seal_chunks(cp.thread_id, chunks)?;
        let sent: Vec<String> = match stored {
            Some(_) => chunks.iter().map(|c| c.hash.clone()).collect(),
            None => Vec::new(),
        };
        let upsert = match fence {
            Some(_) => fenced_upsert(self.dialect),
            None => UPSERT_CHECKPOINT,
        };
        let written = if self.dialect == Dialect::Postgres {
            // One statement, one round trip, one shape for any number of chunks (a VALUES list
            // per chunk count made Postgres prepare a new statement for most checkpoints). The
            // array is read as jsonb: parsed once, where each `->>` of a json value parses it
            // again (a third less time for the statement on large texts).
            let pairs: Vec<[&str; 2]> = chunks.iter().map(|b| [&*b.hash, &*b.data]).collect();
            let sql = format!(
                "WITH chunks AS (INSERT INTO checkpoint_blobs (thread_id, hash, data) \
                 SELECT $1, c->>0, c->>1 FROM jsonb_array_elements($13::jsonb) AS c \
                 ON CONFLICT (thread_id, hash) DO NOTHING) {upsert}"
            );
            let query = bind_checkpoint(q(sql), cp, writes)?.bind(to_json(&pairs)?);
            bind_fence(query, fence)
                .execute(&self.pool)
                .await?
                .rows_affected()
        } else {
            // Chunks and checkpoint in one write transaction, as the trait promises.
            let mut tx = self.write_tx().await?;
            put_blobs(&mut tx, cp.thread_id, chunks).await?;
            let query = bind_checkpoint(q(upsert.to_owned()), cp, writes)?;
            let written = bind_fence(query, fence)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if written == 0 {
                let _ = tx.rollback().await;
            } else {
                tx.commit().await?;
            }
            written
        };
        if written == 0 {
            return Err(StoreError::LeaseLost(cp.run_id.unwrap_or_default()));
        }
        if let Some(stored) = stored {
            stored.record(cp.thread_id, sent);
        }
        Ok(())
    }

    async fn keep_only_checkpoint(&self, cp: &Checkpoint) -> StoreResult<()> {
        let _timer = StoreTimer::start("keep_only_checkpoint");
        let (writes, chunks) =
            blobs::externalize(&cp.writes).map_err(|e| corrupt("checkpoint writes", e))?;
        let chunks = seal_chunks(cp.thread_id, chunks)?;
        let mut tx = self.write_tx().await?;
        for table in ["checkpoints", "checkpoint_blobs"] {
            q(format!("DELETE FROM {table} WHERE thread_id = $1"))
                .bind(cp.thread_id.to_string())
                .execute(&mut *tx)
                .await?;
        }
        put_blobs(&mut tx, cp.thread_id, chunks).await?;
        bind_checkpoint(q(UPSERT_CHECKPOINT.to_owned()), cp, writes)?
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_checkpoint(
        &self,
        thread_id: ThreadId,
        ns: &str,
        id: CheckpointId,
    ) -> StoreResult<Option<Checkpoint>> {
        let _timer = StoreTimer::start("get_checkpoint");
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
        thread_id: ThreadId,
        ns: &str,
    ) -> StoreResult<Option<Checkpoint>> {
        let _timer = StoreTimer::start("latest_checkpoint");
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
        thread_id: ThreadId,
        query: &CheckpointQuery,
    ) -> StoreResult<Vec<Checkpoint>> {
        let _timer = StoreTimer::start("list_checkpoints");
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

    async fn checkpoint_bytes(&self, thread_id: ThreadId) -> StoreResult<u64> {
        let _timer = StoreTimer::start("checkpoint_bytes");
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

    async fn put_task_calls(
        &self,
        thread_id: ThreadId,
        calls: &[crate::store::TaskCall],
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("put_task_calls");
        if calls.is_empty() {
            return Ok(());
        }
        // One statement for the batch: the rows travel as one JSON array of triples, read as
        // jsonb on Postgres (see `put_checkpoint`).
        let rows = calls
            .iter()
            .map(|c| {
                let at = task_call_at(thread_id, &c.task_id.to_string(), &c.key);
                let sealed = sealed(Column::TaskCallResult, &at, c.result.clone())?;
                Ok([c.task_id.to_string(), c.key.clone(), sealed])
            })
            .collect::<StoreResult<Vec<[String; 3]>>>()?;
        let sql = match self.dialect {
            Dialect::Postgres => {
                "INSERT INTO task_calls (thread_id, task_id, call_key, result) \
                 SELECT $1, c->>0, c->>1, c->>2 FROM jsonb_array_elements($2::jsonb) AS c \
                 ON CONFLICT (task_id, call_key) DO NOTHING"
            }
            Dialect::Sqlite => {
                "INSERT OR IGNORE INTO task_calls (thread_id, task_id, call_key, result) \
                 SELECT $1, json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
                 json_extract(value, '$[2]') FROM json_each($2)"
            }
        };
        q(sql.to_owned())
            .bind(thread_id.to_string())
            .bind(to_json(&rows)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn task_calls(
        &self,
        thread_id: ThreadId,
        task_id: uuid::Uuid,
    ) -> StoreResult<Vec<(String, serde_json::Value)>> {
        let _timer = StoreTimer::start("task_calls");
        let sql = "SELECT call_key, result FROM task_calls WHERE thread_id = $1 AND task_id = $2";
        let query = q(sql.to_owned())
            .bind(thread_id.to_string())
            .bind(task_id.to_string());
        let rows = all(&self.pool, query, |row| {
            Ok((text(row, "call_key")?, text(row, "result")?))
        })
        .await?;
        rows.into_iter()
            .map(|(key, stored)| {
                let at = task_call_at(thread_id, &task_id.to_string(), &key);
                let plain = crate::store::crypt::open(Column::TaskCallResult, &at, &stored)
                    .map_err(|e| corrupt("result", e))?;
                let value = serde_json::from_str(&plain).map_err(|e| corrupt("result", e))?;
                Ok((key, value))
            })
            .collect()
    }

    async fn forget_task_calls(
        &self,
        thread_id: ThreadId,
        task_ids: &[uuid::Uuid],
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("forget_task_calls");
        if task_ids.is_empty() {
            return Ok(());
        }
        // The ids travel as one JSON array, so every call is the same statement.
        let ids: Vec<String> = task_ids.iter().map(uuid::Uuid::to_string).collect();
        let sql = match self.dialect {
            Dialect::Postgres => {
                "DELETE FROM task_calls WHERE thread_id = $1 \
                 AND task_id IN (SELECT json_array_elements_text($2::json))"
            }
            Dialect::Sqlite => {
                "DELETE FROM task_calls WHERE thread_id = $1 \
                 AND task_id IN (SELECT value FROM json_each($2))"
            }
        };
        q(sql.to_owned())
            .bind(thread_id.to_string())
            .bind(to_json(&ids)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn checkpoint_lineage(
        &self,
        thread_id: ThreadId,
        ns: &str,
        id: CheckpointId,
    ) -> StoreResult<Vec<Checkpoint>> {
        let _timer = StoreTimer::start("checkpoint_lineage");
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
}

// ---------------------------------------------------------------------------------------------
// Checkpoint chunks (see `blobs`).

/// Chunks per statement: three parameters each, well under both backends' limits.
pub(super) const BLOB_BATCH: usize = 300;

/// Inserts chunks not yet stored for the thread, in batches, on `conn`.
async fn put_blobs(
    conn: &mut AnyConnection,
    thread_id: ThreadId,
    mut chunks: Vec<blobs::Blob>,
) -> StoreResult<()> {
    {
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
            query.execute(&mut *conn).await?;
        }
    }
    Ok(())
}

impl SqlStore {
    /// Replaces chunk references in the checkpoints' writes by their text.
    pub(super) async fn with_blobs(
        &self,
        thread_id: ThreadId,
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
                let hash = text(&row, "hash")?;
                let data = opened(
                    &row,
                    "data",
                    Column::CheckpointChunk,
                    &chunk_at(thread_id, &hash),
                )?;
                chunks.insert(hash, data);
            }
        }
        for cp in &mut cps {
            blobs::internalize(&mut cp.writes, &chunks).map_err(|e| corrupt("checkpoint", e))?;
        }
        Ok(cps)
    }
}

/// Chunks with their text sealed (encryption at rest); their hashes, of the plain text, stay
/// as they are so equal chunks are still stored once per thread.
fn seal_chunks(thread: ThreadId, chunks: Vec<blobs::Blob>) -> StoreResult<Vec<blobs::Blob>> {
    if !crate::store::crypt::enabled() {
        return Ok(chunks);
    }
    chunks
        .into_iter()
        .map(|b| {
            Ok(blobs::Blob {
                data: sealed(Column::CheckpointChunk, &chunk_at(thread, &b.hash), b.data)?,
                hash: b.hash,
            })
        })
        .collect()
}

/// The row identity a remembered task call's result is bound to.
fn task_call_at(thread: ThreadId, task: &str, key: &str) -> String {
    crate::store::crypt::row_of(&[&thread.to_string(), task, key])
}
