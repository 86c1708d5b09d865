//! Runs in SQL: insert with the multitask strategy, claim and lease, cancel, finish.

use super::codec::*;
use super::query::*;
use super::tx::*;
use super::*;
use crate::ids::{RunId, ThreadId};
use crate::store::{
    CancelAction, Fence, JsonMap, Lease, LeaseState, Owner, Run, RunEnd, RunInsert, RunStatus,
    StoreError, StoreResult, ThreadStatus, ThreadSummary,
};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;
use std::time::Duration;

#[async_trait]
impl crate::store::RunStore for SqlStore {
    async fn insert_run(&self, ins: &RunInsert) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("insert_run");
        let mut tx = self.write_tx().await?;
        let inserted = match self.first_with_key(&mut tx, ins).await {
            Ok(()) => self.insert_run_in(&mut tx, ins).await,
            Err(error) => Err(error),
        };
        let inserted = match (inserted, &ins.idempotency_key) {
            (Ok(affected), Some(key)) => {
                sqlx::query("UPDATE runs SET idempotency_key = $2 WHERE run_id = $1")
                    .bind(ins.run.run_id.to_string())
                    .bind(key.clone())
                    .execute(&mut *tx)
                    .await
                    .map(|_| affected)
                    .map_err(StoreError::from)
            }
            (other, _) => other,
        };
        match inserted {
            Ok(affected) => {
                tx.commit().await?;
                Ok(affected)
            }
            Err(error) => {
                // Roll back now rather than when the dropped transaction's connection goes back
                // to the pool: until then it holds the thread's row lock, and a worker claiming
                // the thread's pending run would skip it (a rejected run hid the running one).
                let _ = tx.rollback().await;
                // Two requests with one key raced: the loser names the winner's run.
                if is_unique_violation(&error)
                    && let Some(key) = &ins.idempotency_key
                    && let Some((run_id, thread_id)) = self.run_with_key(&self.pool, key).await?
                {
                    return Err(StoreError::DuplicateRun { run_id, thread_id });
                }
                Err(error)
            }
        }
    }

    async fn get_run(&self, run_id: RunId) -> StoreResult<Option<Run>> {
        let _timer = StoreTimer::start("get_run");
        let sql = format!("SELECT {RUN_COLS} FROM runs WHERE run_id = $1");
        one(&self.pool, q(sql).bind(run_id.to_string()), run_row).await
    }

    async fn run_statuses(&self, run_ids: &[RunId]) -> StoreResult<Vec<(RunId, RunStatus)>> {
        let _timer = StoreTimer::start("run_statuses");
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        // The ids travel as one JSON array, so every call is the same statement.
        let ids: Vec<String> = run_ids.iter().map(RunId::to_string).collect();
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
        thread_id: ThreadId,
        status: Option<RunStatus>,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("list_runs");
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

    async fn inflight_runs(&self, thread_id: ThreadId) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("inflight_runs");
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs WHERE thread_id = $1 AND {INFLIGHT} \
             ORDER BY created_at, run_id"
        );
        all(&self.pool, q(sql).bind(thread_id.to_string()), run_row).await
    }

    async fn delete_run(&self, run_id: RunId) -> StoreResult<bool> {
        let _timer = StoreTimer::start("delete_run");
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

    async fn cancel_runs(&self, run_ids: &[RunId], action: CancelAction) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("cancel_runs");
        let mut ids = run_ids.to_vec();
        ids.sort();
        ids.dedup();
        // A cancel racing the run's own checkpoint writes or its worker's claim can lose a
        // deadlock on Postgres; it changed nothing and is tried again.
        crate::store::retrying_conflicts("cancel runs", || self.cancel_sorted(&ids, action)).await
    }

    async fn claim_run(
        &self,
        worker: &str,
        lease: Duration,
        max_attempts: i64,
    ) -> StoreResult<Option<Lease>> {
        let _timer = StoreTimer::start("claim_run");
        // A run whose worker died has waited longest: resume it before starting new ones.
        if let Some(lease) = self.try_take_over(worker, lease, max_attempts).await? {
            return Ok(Some(lease));
        }
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

    async fn release_lease(&self, fence: &Fence) -> StoreResult<bool> {
        let _timer = StoreTimer::start("release_lease");
        // Lapsed at once (the epoch sorts before any lease), owned by no one, and the attempt
        // given back: a deploy is not a failure.
        let done = sqlx::query(
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = $4, attempt = attempt - 1 \
             WHERE run_id = $1 AND status = 'running' AND lease_owner = $2 AND attempt = $3",
        )
        .bind(fence.run_id.to_string())
        .bind(fence.worker.clone())
        .bind(fence.attempt)
        .bind(LAPSED)
        .execute(&self.lease_pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn renew_lease(
        &self,
        run_id: RunId,
        worker: &str,
        lease: Duration,
    ) -> StoreResult<LeaseState> {
        let _timer = StoreTimer::start("renew_lease");
        let sql = format!(
            "UPDATE runs SET lease_expires_at = {} \
             WHERE run_id = $1 AND status = 'running' AND lease_owner = $2 \
             RETURNING cancel_action",
            self.dialect.clock(Some("$3"))
        );
        let query = q(sql)
            .bind(run_id.to_string())
            .bind(worker.to_string())
            .bind(lease.as_secs_f64());
        Ok(match one(&self.lease_pool, query, cancel_row).await? {
            Some(cancel) => LeaseState::Held { cancel },
            None => LeaseState::Lost,
        })
    }

    async fn finish_run(
        &self,
        run_id: RunId,
        fence: Option<&Fence>,
        end: &RunEnd,
        summary: Option<&ThreadSummary>,
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("finish_run");
        let now = Timestamp::now();
        let mut tx = self.write_tx().await?;
        let query = sqlx::query("SELECT thread_id FROM runs WHERE run_id = $1");
        let Some(thread) = one(&mut *tx, query.bind(run_id.to_string()), thread_id_row).await?
        else {
            return Err(StoreError::NotFound("run"));
        };
        self.lock_thread(&mut tx, thread).await?;
        if let Some(fence) = fence
            && !self.fence_holds(&mut tx, fence).await?
        {
            let _ = tx.rollback().await;
            return Err(StoreError::LeaseLost(run_id));
        }
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
        let status = if self.has_inflight(&mut tx, thread, Some(run_id)).await? {
            ThreadStatus::Busy
        } else {
            summary.map_or(ThreadStatus::Idle, |s| s.status)
        };
        self.write_thread_after_run(&mut tx, thread, status, summary, now)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn fail_expired_runs(&self, max_attempts: i64) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("fail_expired_runs");
        let now = Timestamp::now();
        let clock = self.dialect.clock(None);
        let expired =
            format!("status = 'running' AND lease_expires_at < {clock} AND attempt >= $1");
        let mut tx = self.write_tx().await?;
        let sql = format!("SELECT thread_id FROM runs WHERE {expired}");
        let threads = all(&mut *tx, q(sql).bind(max_attempts), thread_id_row).await?;
        if threads.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        self.lock_threads(&mut tx, threads).await?;
        let sql = format!(
            "UPDATE runs SET status = 'error', updated_at = $2, lease_owner = NULL, \
             lease_expires_at = NULL WHERE {expired} RETURNING {RUN_COLS}"
        );
        let failed = all(
            &mut *tx,
            q(sql).bind(max_attempts).bind(now.to_string()),
            run_row,
        )
        .await?;
        let mut threads: Vec<ThreadId> = failed.iter().map(|r| r.thread_id).collect();
        threads.sort();
        threads.dedup();
        for thread in threads {
            self.mark_worker_lost(&mut tx, thread, max_attempts, now)
                .await?;
        }
        tx.commit().await?;
        Ok(failed)
    }

    async fn count_runs(&self, status: RunStatus) -> StoreResult<u64> {
        let _timer = StoreTimer::start("count_runs");
        // The status is written into the statement (an enum's fixed spelling, never input):
        // with a bound parameter, Postgres's generic plan cannot use the partial index on
        // pending runs, and run admission counts them for every new run.
        let sql = Sql::new(&format!(
            "SELECT COUNT(*) FROM runs WHERE status = '{}'",
            status.as_str()
        ));
        Ok(count(&self.pool, sql.query()).await?.max(0) as u64)
    }

    async fn record_spend(
        &self,
        run_id: RunId,
        owner: &Owner,
        tokens: u64,
        usd: f64,
        now: Timestamp,
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("record_spend");
        sqlx::query(
            "INSERT INTO spend (run_id, owner, tokens, usd, updated_at) \
             VALUES ($1, $2, $3, CAST($4 AS DOUBLE PRECISION), $5) \
             ON CONFLICT (run_id) DO UPDATE SET tokens = excluded.tokens, usd = excluded.usd, \
             updated_at = excluded.updated_at",
        )
        .bind(run_id.to_string())
        .bind(owner.as_str().to_owned())
        .bind(i64::try_from(tokens).unwrap_or(i64::MAX))
        .bind(usd.to_string())
        .bind(now.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn owner_storage_bytes(&self, owner: &Owner) -> StoreResult<u64> {
        let _timer = StoreTimer::start("owner_storage_bytes");
        let mut sql = Sql::new("SELECT CAST(");
        let of_thread = "JOIN threads t ON t.thread_id = x.thread_id WHERE t.owner = ";
        let parts: [(&str, String); 7] = [
            (
                "LENGTH(config) + LENGTH(context) + LENGTH(metadata)",
                "FROM assistants WHERE owner = ".into(),
            ),
            (
                "LENGTH(v.config) + LENGTH(v.context) + LENGTH(v.metadata)",
                "FROM assistant_versions v JOIN assistants a ON a.assistant_id = v.assistant_id \
                 WHERE a.owner = "
                    .into(),
            ),
            (
                "LENGTH(metadata) + LENGTH(config) + COALESCE(LENGTH(state_values), 0) \
                 + LENGTH(interrupts)",
                "FROM threads WHERE owner = ".into(),
            ),
            (
                "LENGTH(x.writes) + LENGTH(x.metadata) + LENGTH(x.tasks)",
                format!("FROM checkpoints x {of_thread}"),
            ),
            (
                "LENGTH(x.data)",
                format!("FROM checkpoint_blobs x {of_thread}"),
            ),
            (
                "LENGTH(x.frames)",
                format!("FROM run_event_pages x {of_thread}"),
            ),
            ("LENGTH(value)", "FROM store_items WHERE owner = ".into()),
        ];
        for (i, (sum, from)) in parts.iter().enumerate() {
            if i > 0 {
                sql.push(" + ");
            }
            sql.push(&format!("(SELECT COALESCE(SUM({sum}), 0) {from}"));
            let p = sql.arg(owner.as_str());
            sql.push(&p);
            sql.push(")");
        }
        sql.push(" AS BIGINT)");
        Ok(count(&self.pool, sql.query()).await?.max(0) as u64)
    }

    async fn owner_spend_since(&self, owner: &Owner, since: Timestamp) -> StoreResult<(u64, f64)> {
        let _timer = StoreTimer::start("owner_spend_since");
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) AS tokens, \
             CAST(COALESCE(SUM(usd), 0) AS DOUBLE PRECISION) AS usd \
             FROM spend WHERE owner = $1 AND updated_at >= $2",
        )
        .bind(owner.as_str().to_owned())
        .bind(since.to_string())
        .fetch_one(&self.pool)
        .await?;
        let tokens = row.try_get::<i64, _>("tokens")?.max(0) as u64;
        Ok((tokens, row.try_get::<f64, _>("usd")?))
    }

    async fn delete_spend_before(&self, cutoff: Timestamp) -> StoreResult<u64> {
        let _timer = StoreTimer::start("delete_spend_before");
        let done = sqlx::query("DELETE FROM spend WHERE updated_at < $1")
            .bind(cutoff.to_string())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn merge_run_metadata(&self, run_id: RunId, metadata: &JsonMap) -> StoreResult<()> {
        let _timer = StoreTimer::start("merge_run_metadata");
        let mut tx = self.write_tx().await?;
        let sql = "SELECT metadata FROM runs WHERE run_id = $1";
        let current = one(
            &mut *tx,
            sqlx::query(sql).bind(run_id.to_string()),
            metadata_row,
        )
        .await?;
        let Some(mut merged) = current else {
            return Err(StoreError::NotFound("run"));
        };
        merge(&mut merged, metadata);
        sqlx::query("UPDATE runs SET metadata = $2 WHERE run_id = $1")
            .bind(run_id.to_string())
            .bind(to_json(&merged)?)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn count_inflight_runs_of(&self, owner: &Owner) -> StoreResult<u64> {
        let _timer = StoreTimer::start("count_inflight_runs_of");
        let mut sql = Sql::new(&format!(
            "SELECT COUNT(*) FROM runs JOIN threads ON threads.thread_id = runs.thread_id \
             WHERE runs.{INFLIGHT} AND threads.owner = "
        ));
        let p = sql.arg(owner.as_str());
        sql.push(&p);
        Ok(count(&self.pool, sql.query()).await?.max(0) as u64)
    }
}

impl SqlStore {
    /// One attempt at `cancel_runs`, the ids sorted and unique (locks taken in one order).
    async fn cancel_sorted(&self, ids: &[RunId], action: CancelAction) -> StoreResult<Vec<Run>> {
        let now = Timestamp::now();
        let mut tx = self.write_tx().await?;
        let threads = self.threads_of_runs(&mut tx, ids).await?;
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

    /// Fails with `DuplicateRun` when a run was created with the insert's idempotency key.
    async fn first_with_key(
        &self,
        conn: &mut sqlx::AnyConnection,
        ins: &RunInsert,
    ) -> StoreResult<()> {
        let Some(key) = &ins.idempotency_key else {
            return Ok(());
        };
        match self.run_with_key(conn, key).await? {
            Some((run_id, thread_id)) => Err(StoreError::DuplicateRun { run_id, thread_id }),
            None => Ok(()),
        }
    }

    async fn run_with_key<'c>(
        &self,
        ex: impl sqlx::Executor<'c, Database = sqlx::Any>,
        key: &str,
    ) -> StoreResult<Option<(RunId, ThreadId)>> {
        let sql = "SELECT run_id, thread_id FROM runs WHERE idempotency_key = $1";
        one(ex, sqlx::query(sql).bind(key.to_owned()), |row| {
            Ok((uuid(row, "run_id")?, uuid(row, "thread_id")?))
        })
        .await
    }
}
