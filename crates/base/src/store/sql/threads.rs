//! Threads in SQL: create, patch, search, copy, delete and their status summary.

use super::codec::*;
use super::filters::*;
use super::query::*;
use super::*;
use crate::ids::ThreadId;
use crate::store::{
    IfExists, JsonMap, Page, StoreError, StoreResult, Thread, ThreadQuery, ThreadStatus,
    ThreadSummary,
};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;

#[async_trait]
impl crate::store::ThreadStore for SqlStore {
    async fn create_thread(&self, t: &Thread, if_exists: IfExists) -> StoreResult<Thread> {
        let _timer = StoreTimer::start("create_thread");
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

    async fn get_thread(&self, id: ThreadId) -> StoreResult<Option<Thread>> {
        let _timer = StoreTimer::start("get_thread");
        let sql = format!("SELECT {THREAD_COLS} FROM threads WHERE thread_id = $1");
        one(&self.pool, q(sql).bind(id.to_string()), thread_row).await
    }

    async fn patch_thread(
        &self,
        id: ThreadId,
        metadata: &JsonMap,
        ttl_minutes: Option<f64>,
        now: Timestamp,
    ) -> StoreResult<Option<Thread>> {
        let _timer = StoreTimer::start("patch_thread");
        let mut tx = self.write_tx().await?;
        let Some(mut merged) = self.lock_thread(&mut tx, id).await? else {
            return Ok(None);
        };
        merge(&mut merged, metadata);
        sqlx::query(
            "UPDATE threads SET metadata = $2, updated_at = $3, \
             ttl_minutes = COALESCE(CAST($4 AS DOUBLE PRECISION), ttl_minutes) \
             WHERE thread_id = $1",
        )
        .bind(id.to_string())
        .bind(to_json(&merged)?)
        .bind(now.to_string())
        .bind(opt_float(ttl_minutes))
        .execute(&mut *tx)
        .await?;
        let sql = format!("SELECT {THREAD_COLS} FROM threads WHERE thread_id = $1");
        let thread = one(&mut *tx, q(sql).bind(id.to_string()), thread_row).await?;
        tx.commit().await?;
        Ok(thread)
    }

    async fn delete_expired_threads(&self, now: Timestamp) -> StoreResult<Vec<ThreadId>> {
        let _timer = StoreTimer::start("delete_expired_threads");
        // Few threads carry a ttl; their expiry is computed here rather than in two SQL
        // dialects' date arithmetic.
        let sql = "SELECT thread_id, updated_at, ttl_minutes FROM threads \
                   WHERE ttl_minutes IS NOT NULL";
        let rows = all(&self.pool, sqlx::query(sql), |row| {
            let minutes = row.try_get::<f64, _>("ttl_minutes")?;
            Ok((uuid(row, "thread_id")?, ts(row, "updated_at")?, minutes))
        })
        .await?;
        let mut deleted = Vec::new();
        for (id, updated, minutes) in rows {
            if updated.plus_secs(minutes * 60.0) > now {
                continue;
            }
            let mut tx = self.write_tx().await?;
            // Checked under the thread's lock: a run created meanwhile keeps the thread.
            self.lock_thread(&mut tx, id).await?;
            let sql = "SELECT updated_at FROM threads WHERE thread_id = $1";
            let fresh = one(&mut *tx, sqlx::query(sql).bind(id.to_string()), |r| {
                ts(r, "updated_at")
            })
            .await?;
            let expired = fresh.is_some_and(|u| u.plus_secs(minutes * 60.0) <= now);
            if !expired || self.has_inflight(&mut tx, id, None).await? {
                tx.commit().await?;
                continue;
            }
            delete_thread_rows(&mut tx, id).await?;
            tx.commit().await?;
            deleted.push(id);
        }
        Ok(deleted)
    }

    async fn delete_thread(&self, id: ThreadId) -> StoreResult<bool> {
        let _timer = StoreTimer::start("delete_thread");
        // Explicit deletes rather than relying on ON DELETE CASCADE alone, so the outcome does
        // not depend on SQLite's foreign_keys pragma.
        let mut tx = self.write_tx().await?;
        let existed = delete_thread_rows(&mut tx, id).await?;
        tx.commit().await?;
        Ok(existed)
    }

    async fn search_threads(&self, query: &ThreadQuery) -> StoreResult<Page<Thread>> {
        let _timer = StoreTimer::start("search_threads");
        let mut filter = Sql::new(" WHERE 1 = 1");
        let owner = filter.arg(query.owner.as_str());
        filter.push(&format!(" AND owner = {owner}"));
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
            query.sort_by.map(|s| s.as_str()),
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
        from: ThreadId,
        to: ThreadId,
        now: Timestamp,
    ) -> StoreResult<Option<Thread>> {
        let _timer = StoreTimer::start("copy_thread");
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
        if crate::store::crypt::enabled() {
            self.copy_sealed_checkpoints(&mut tx, from, to).await?;
        } else {
            copy_plain_checkpoints(&mut tx, from, to).await?;
        }
        tx.commit().await?;
        Ok(Some(copy))
    }

    async fn set_thread_summary(
        &self,
        id: ThreadId,
        summary: &ThreadSummary,
        now: Timestamp,
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("set_thread_summary");
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
}

/// Deletes a thread with its runs, checkpoints, chunks and events; whether it existed.
async fn delete_thread_rows(conn: &mut sqlx::AnyConnection, id: ThreadId) -> StoreResult<bool> {
    for table in [
        "run_event_pages",
        "checkpoint_blobs",
        "checkpoints",
        "runs",
        "crons",
    ] {
        q(format!("DELETE FROM {table} WHERE thread_id = $1"))
            .bind(id.to_string())
            .execute(&mut *conn)
            .await?;
    }
    let done = sqlx::query("DELETE FROM threads WHERE thread_id = $1")
        .bind(id.to_string())
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// A thread's checkpoints and chunks copied row for row, in the database (nothing sealed:
/// nothing is bound to the thread they belong to).
async fn copy_plain_checkpoints(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    from: ThreadId,
    to: ThreadId,
) -> StoreResult<()> {
    let sql = format!(
        "INSERT INTO checkpoints ({CHECKPOINT_COLS}) SELECT $1, checkpoint_ns, checkpoint_id, \
         parent_checkpoint_id, run_id, step, source, metadata, writes, next_nodes, tasks, \
         created_at FROM checkpoints WHERE thread_id = $2"
    );
    q(sql)
        .bind(to.to_string())
        .bind(from.to_string())
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO checkpoint_blobs (thread_id, hash, data) \
         SELECT $1, hash, data FROM checkpoint_blobs WHERE thread_id = $2",
    )
    .bind(to.to_string())
    .bind(from.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl SqlStore {
    /// A thread's checkpoints and chunks opened and sealed again for the copy: a sealed value
    /// is bound to its row, and the copy's rows are other rows.
    async fn copy_sealed_checkpoints(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        from: ThreadId,
        to: ThreadId,
    ) -> StoreResult<()> {
        let sql = format!("SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE thread_id = $1");
        let checkpoints = all(&mut **tx, q(sql).bind(from.to_string()), checkpoint_row).await?;
        for cp in checkpoints {
            let copy = crate::store::Checkpoint {
                thread_id: to,
                ..cp
            };
            let writes = to_json(&copy.writes)?;
            bind_checkpoint(q(UPSERT_CHECKPOINT.to_owned()), &copy, writes)?
                .execute(&mut **tx)
                .await?;
        }
        let sql = "SELECT hash, data FROM checkpoint_blobs WHERE thread_id = $1";
        let chunks = all(&mut **tx, q(sql.to_owned()).bind(from.to_string()), |row| {
            Ok((text(row, "hash")?, text(row, "data")?))
        })
        .await?;
        for (hash, stored) in chunks {
            let plain = crate::store::crypt::open(
                crate::store::crypt::Column::CheckpointChunk,
                &chunk_at(from, &hash),
                &stored,
            )
            .map_err(|e| corrupt("checkpoint chunk", e))?;
            let sealed = sealed(
                crate::store::crypt::Column::CheckpointChunk,
                &chunk_at(to, &hash),
                plain.into_owned(),
            )?;
            sqlx::query("INSERT INTO checkpoint_blobs (thread_id, hash, data) VALUES ($1, $2, $3)")
                .bind(to.to_string())
                .bind(hash)
                .bind(sealed)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }
}
