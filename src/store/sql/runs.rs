//! Runs in SQL: insert with the multitask strategy, claim and lease, cancel, finish.

use super::codec::*;
use super::query::*;
use super::tx::*;
use super::*;
use crate::store::{
    CancelAction, Lease, LeaseState, Run, RunEnd, RunInsert, RunStatus, StoreError, StoreResult,
    ThreadStatus, ThreadSummary,
};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;
use std::time::Duration;
use uuid::Uuid;

#[async_trait]
impl crate::store::RunStore for SqlStore {
    async fn insert_run(&self, ins: &RunInsert) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("insert_run");
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
        let _timer = StoreTimer::start("get_run");
        let sql = format!("SELECT {RUN_COLS} FROM runs WHERE run_id = $1");
        one(&self.pool, q(sql).bind(run_id.to_string()), run_row).await
    }

    async fn run_statuses(&self, run_ids: &[Uuid]) -> StoreResult<Vec<(Uuid, RunStatus)>> {
        let _timer = StoreTimer::start("run_statuses");
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

    async fn inflight_runs(&self, thread_id: Uuid) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("inflight_runs");
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs WHERE thread_id = $1 AND {INFLIGHT} \
             ORDER BY created_at, run_id"
        );
        all(&self.pool, q(sql).bind(thread_id.to_string()), run_row).await
    }

    async fn delete_run(&self, run_id: Uuid) -> StoreResult<bool> {
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

    async fn cancel_runs(&self, run_ids: &[Uuid], action: CancelAction) -> StoreResult<Vec<Run>> {
        let _timer = StoreTimer::start("cancel_runs");
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
        let _timer = StoreTimer::start("claim_run");
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
        let _timer = StoreTimer::start("renew_lease");
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
        let _timer = StoreTimer::start("finish_run");
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
        let _timer = StoreTimer::start("fail_expired_runs");
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

    async fn count_runs(&self, status: RunStatus) -> StoreResult<u64> {
        let _timer = StoreTimer::start("count_runs");
        let sql = Sql::new("SELECT COUNT(*) FROM runs WHERE status = $1");
        let mut sql = sql;
        sql.arg(status.as_str());
        Ok(count(&self.pool, sql.query()).await?.max(0) as u64)
    }
}
