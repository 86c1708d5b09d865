//! Transaction steps shared by several store methods: thread locks, strategy, claim, summaries.

use super::codec::*;
use super::query::*;
use super::*;
use crate::ids::{RunId, ThreadId};
use crate::store::{
    Assistant, AssistantPatch, CancelAction, Fence, JsonMap, Lease, Page, Run, RunInsert,
    RunStatus, StoreError, StoreResult, Thread, ThreadStatus, ThreadSummary,
};
use crate::time::Timestamp;
use serde_json::Value;
use sqlx::AnyConnection;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Transaction steps shared by several methods.

impl SqlStore {
    /// `insert_run` inside its transaction.
    pub(super) async fn insert_run_in(
        &self,
        conn: &mut AnyConnection,
        ins: &RunInsert,
    ) -> StoreResult<Vec<Run>> {
        let run = &ins.run;
        let now = Timestamp::now();
        if let Some(tick) = &ins.cron_tick {
            self.claim_tick_in(conn, tick).await?;
        }
        if ins.create_thread {
            self.ensure_thread(conn, ins, now).await?;
        }
        // The thread lock serializes run insertion per thread, so two `reject` runs cannot
        // both see an idle thread.
        let sql = format!(
            "SELECT metadata, owner FROM threads WHERE thread_id = $1{}",
            self.lock()
        );
        let locked = one(&mut *conn, q(sql).bind(run.thread_id.to_string()), |row| {
            Ok((metadata_row(row)?, text(row, "owner")?))
        })
        .await?;
        // Checked under the lock: a thread another owner created meanwhile is not ours.
        let Some((mut metadata, _)) = locked.filter(|(_, owner)| owner == ins.owner.as_str())
        else {
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
    pub(super) async fn lock_thread(
        &self,
        conn: &mut AnyConnection,
        id: ThreadId,
    ) -> StoreResult<Option<JsonMap>> {
        let sql = format!(
            "SELECT metadata FROM threads WHERE thread_id = $1{}",
            self.lock()
        );
        one(conn, q(sql).bind(id.to_string()), metadata_row).await
    }

    /// Locks several threads in id order, the one order every transaction uses.
    pub(super) async fn lock_threads(
        &self,
        conn: &mut AnyConnection,
        mut ids: Vec<ThreadId>,
    ) -> StoreResult<()> {
        ids.sort();
        ids.dedup();
        for id in ids {
            self.lock_thread(conn, id).await?;
        }
        Ok(())
    }

    pub(super) async fn inflight_locked(
        &self,
        conn: &mut AnyConnection,
        thread: ThreadId,
    ) -> StoreResult<Vec<Run>> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs WHERE thread_id = $1 AND {INFLIGHT} \
             ORDER BY created_at, run_id{}",
            self.lock()
        );
        all(conn, q(sql).bind(thread.to_string()), run_row).await
    }

    /// Ends a pending run at once or flags a running one; other statuses are left alone.
    pub(super) async fn cancel_one(
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

    pub(super) async fn has_inflight(
        &self,
        conn: &mut AnyConnection,
        thread: ThreadId,
        except: Option<RunId>,
    ) -> StoreResult<bool> {
        let sql = format!(
            "SELECT COUNT(*) FROM runs WHERE thread_id = $1 AND run_id <> $2 AND {INFLIGHT}"
        );
        let n = count(
            conn,
            q(sql)
                .bind(thread.to_string())
                .bind(except.map(|r| r.to_string()).unwrap_or_default()),
        )
        .await?;
        Ok(n > 0)
    }

    /// Creates the thread a stateless / `if_not_exists: create` run needs, unless it exists.
    pub(super) async fn ensure_thread(
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
            ttl_minutes: None,
            owner: ins.owner.clone(),
        };
        insert_thread_query(&thread)?.execute(conn).await?;
        Ok(())
    }

    /// Applies the new run's multitask strategy to the runs already in flight.
    pub(super) async fn apply_strategy(
        &self,
        conn: &mut AnyConnection,
        run: &Run,
        now: Timestamp,
    ) -> StoreResult<Vec<Run>> {
        use crate::store::MultitaskStrategy as M;
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
    pub(super) async fn try_claim(
        &self,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<Option<Lease>> {
        let now = Timestamp::now();
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "UPDATE runs SET status = 'running', lease_owner = $1, lease_expires_at = {}, \
             updated_at = $3, cancel_action = NULL, attempt = attempt + 1 \
             WHERE status = 'pending' AND run_id = (\
               SELECT r.run_id FROM runs r WHERE r.status = 'pending' AND r.created_at <= $3 \
               AND NOT EXISTS (SELECT 1 FROM runs x WHERE x.thread_id = r.thread_id \
                               AND x.status = 'running') \
               AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.thread_id = r.thread_id \
                               AND o.status = 'pending' AND (o.created_at < r.created_at \
                               OR (o.created_at = r.created_at AND o.run_id < r.run_id))) \
               ORDER BY r.created_at, r.run_id LIMIT 1{}) \
             RETURNING {RUN_COLS}, attempt, lease_expires_at",
            self.dialect.clock(Some("$2")),
            self.dialect.skip_locked()
        );
        let query = q(sql)
            .bind(worker.to_string())
            .bind(lease.as_secs_f64())
            .bind(now.to_string());
        let claimed = one(&mut *tx, query, claim_row).await?;
        tx.commit().await?;
        Ok(claimed.map(|c| c.lease_for(worker)))
    }

    /// Claims a running run whose lease lapsed under another worker (one of this worker's own
    /// runs is still executing here and renews its lease), if it has attempts left.
    pub(super) async fn try_take_over(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: i64,
    ) -> StoreResult<Option<Lease>> {
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "UPDATE runs SET lease_owner = $1, lease_expires_at = {ahead}, updated_at = $3, \
             attempt = attempt + 1 \
             WHERE status = 'running' AND run_id = (\
               SELECT r.run_id FROM runs r WHERE r.status = 'running' \
               AND r.lease_expires_at < {now} AND r.attempt < $4 \
               AND (r.lease_owner IS NULL OR r.lease_owner <> $1) \
               ORDER BY r.lease_expires_at, r.run_id LIMIT 1{skip}) \
             RETURNING {RUN_COLS}, attempt, lease_expires_at",
            ahead = self.dialect.clock(Some("$2")),
            now = self.dialect.clock(None),
            skip = self.dialect.skip_locked()
        );
        let query = q(sql)
            .bind(worker.to_string())
            .bind(lease.as_secs_f64())
            .bind(Timestamp::now().to_string())
            .bind(max_attempts);
        let claimed = one(&mut *tx, query, claim_row).await?;
        tx.commit().await?;
        Ok(claimed.map(|c| c.lease_for(worker)))
    }

    /// Whether the run is still running under this claim; on Postgres the row stays locked
    /// until the transaction ends, so a claim cannot slip in between the check and the write.
    pub(super) async fn fence_holds(
        &self,
        conn: &mut AnyConnection,
        fence: &Fence,
    ) -> StoreResult<bool> {
        let sql = format!(
            "SELECT run_id FROM runs WHERE run_id = $1 AND status = 'running' \
             AND lease_owner = $2 AND attempt = $3{}",
            self.dialect.for_update()
        );
        let query = q(sql)
            .bind(fence.run_id.to_string())
            .bind(fence.worker.clone())
            .bind(fence.attempt);
        Ok(one(conn, query, |_| Ok(())).await?.is_some())
    }

    /// Sets the thread's status (and, with a summary, its state) after a run ended.
    pub(super) async fn write_thread_after_run(
        &self,
        conn: &mut AnyConnection,
        thread: ThreadId,
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
    pub(super) async fn write_summary(
        &self,
        conn: &mut AnyConnection,
        thread: ThreadId,
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
        .bind(opt_sealed_json(
            crate::store::crypt::Column::ThreadValues,
            &thread.to_string(),
            &s.values,
        )?)
        .bind(s.error.as_ref().map(to_json).transpose()?)
        .bind(sealed_json(
            crate::store::crypt::Column::ThreadInterrupts,
            &thread.to_string(),
            &s.interrupts,
        )?)
        .bind(now.to_string())
        .execute(conn)
        .await?;
        Ok(done.rows_affected())
    }

    /// A search page: total matches plus the requested slice, read in one transaction.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn page<T>(
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

    pub(super) async fn threads_of_runs(
        &self,
        conn: &mut AnyConnection,
        ids: &[RunId],
    ) -> StoreResult<Vec<ThreadId>> {
        let mut threads = Vec::new();
        for id in ids {
            let query =
                sqlx::query("SELECT thread_id FROM runs WHERE run_id = $1").bind(id.to_string());
            threads.extend(one(&mut *conn, query, thread_id_row).await?);
        }
        Ok(threads)
    }

    /// A thread whose last in-flight run was cancelled before it started is idle again.
    pub(super) async fn settle_thread(
        &self,
        conn: &mut AnyConnection,
        thread: ThreadId,
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

    pub(super) async fn mark_worker_lost(
        &self,
        conn: &mut AnyConnection,
        thread: ThreadId,
        attempts: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        let status = if self.has_inflight(conn, thread, None).await? {
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
        .bind(to_json(&crate::store::worker_lost(attempts))?)
        .bind(now.to_string())
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// Deletes a run with the checkpoints it wrote on its thread (any namespace) and its events.
pub(super) async fn delete_run_rows(
    conn: &mut AnyConnection,
    thread: ThreadId,
    run: RunId,
) -> StoreResult<bool> {
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

/// A lease that has lapsed: the epoch sorts before every real expiry.
pub(super) const LAPSED: &str = "1970-01-01T00:00:00.000000+00:00";

/// A claimed run's row: `RUN_COLS`, `attempt`, `lease_expires_at`.
pub(super) struct Claimed {
    run: Run,
    attempt: i64,
    expires_at: Timestamp,
}

impl Claimed {
    fn lease_for(self, worker: &str) -> Lease {
        Lease {
            fence: Fence {
                run_id: self.run.run_id,
                worker: worker.to_owned(),
                attempt: self.attempt,
            },
            expires_at: self.expires_at,
            run: self.run,
        }
    }
}

pub(super) fn claim_row(row: &sqlx::any::AnyRow) -> StoreResult<Claimed> {
    Ok(Claimed {
        run: run_row(row)?,
        attempt: int(row, "attempt")?,
        expires_at: ts(row, "lease_expires_at")?,
    })
}

pub(super) fn apply_patch(a: &mut Assistant, patch: &AssistantPatch) {
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
