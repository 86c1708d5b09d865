//! Crons in SQL, and the compare-and-set that claims a tick inside its run's insert.

use super::codec::*;
use super::filters::*;
use super::query::*;
use super::*;
use crate::ids::CronId;
use crate::store::crypt::Column;
use crate::store::{Cron, CronQuery, CronTick, Owner, Page, StoreError, StoreResult};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

const CRON_COLS: &str = "cron_id, assistant_id, thread_id, user_id, schedule, timezone, payload, \
    metadata, on_run_completed, enabled, end_time, next_run_date, created_at, updated_at, owner";

fn opt_ts(row: &AnyRow, col: &'static str) -> StoreResult<Option<Timestamp>> {
    opt_text(row, col)?
        .map(|s| Timestamp::parse(&s).ok_or_else(|| corrupt(col, s)))
        .transpose()
}

fn cron_row(row: &AnyRow) -> StoreResult<Cron> {
    let cron_id: CronId = uuid(row, "cron_id")?;
    Ok(Cron {
        cron_id,
        assistant_id: uuid(row, "assistant_id")?,
        thread_id: opt_uuid(row, "thread_id")?,
        user_id: opt_text(row, "user_id")?,
        schedule: text(row, "schedule")?,
        timezone: opt_text(row, "timezone")?,
        payload: opened_json(row, "payload", Column::CronPayload, &cron_id.to_string())?,
        metadata: json(row, "metadata")?,
        on_run_completed: opt_text(row, "on_run_completed")?,
        enabled: int(row, "enabled")? != 0,
        end_time: opt_ts(row, "end_time")?,
        next_run_date: opt_ts(row, "next_run_date")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        owner: Owner::from_stored(text(row, "owner")?),
    })
}

fn bind_cron(query: AnyQuery, c: &Cron) -> StoreResult<AnyQuery> {
    Ok(query
        .bind(c.cron_id.to_string())
        .bind(c.assistant_id.to_string())
        .bind(c.thread_id.map(|t| t.to_string()))
        .bind(c.user_id.clone())
        .bind(c.schedule.clone())
        .bind(c.timezone.clone())
        .bind(sealed_json(
            Column::CronPayload,
            &c.cron_id.to_string(),
            &c.payload,
        )?)
        .bind(to_json(&c.metadata)?)
        .bind(c.on_run_completed.clone())
        .bind(i64::from(c.enabled))
        .bind(c.end_time.map(|t| t.to_string()))
        .bind(c.next_run_date.map(|t| t.to_string()))
        .bind(c.created_at.to_string())
        .bind(c.updated_at.to_string())
        .bind(c.owner.as_str().to_owned()))
}

/// Moves the cron from tick `due` to `next` if `due` is still its next tick: true for the
/// one caller that gets there first.
pub(super) async fn claim_tick(conn: &mut AnyConnection, tick: &CronTick) -> StoreResult<bool> {
    let done = sqlx::query(
        "UPDATE crons SET next_run_date = $3 WHERE cron_id = $1 AND next_run_date = $2",
    )
    .bind(tick.cron_id.to_string())
    .bind(tick.due.to_string())
    .bind(tick.next.map(|t| t.to_string()))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

impl SqlStore {
    /// `insert_run`'s first step when the run is for a cron tick.
    pub(super) async fn claim_tick_in(
        &self,
        conn: &mut AnyConnection,
        tick: &CronTick,
    ) -> StoreResult<()> {
        if claim_tick(conn, tick).await? {
            Ok(())
        } else {
            Err(StoreError::Conflict("cron tick"))
        }
    }
}

#[async_trait]
impl crate::store::CronStore for SqlStore {
    async fn create_cron(&self, cron: &Cron) -> StoreResult<()> {
        let _timer = StoreTimer::start("create_cron");
        let sql = format!(
            "INSERT INTO crons ({CRON_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11, $12, $13, $14, $15)"
        );
        bind_cron(q(sql), cron)?.execute(&self.pool).await?;
        Ok(())
    }

    async fn get_cron(&self, id: CronId) -> StoreResult<Option<Cron>> {
        let _timer = StoreTimer::start("get_cron");
        let sql = format!("SELECT {CRON_COLS} FROM crons WHERE cron_id = $1");
        one(&self.pool, q(sql).bind(id.to_string()), cron_row).await
    }

    async fn update_cron(&self, cron: &Cron) -> StoreResult<bool> {
        let _timer = StoreTimer::start("update_cron");
        let sql = "UPDATE crons SET assistant_id = $2, thread_id = $3, user_id = $4, \
                   schedule = $5, timezone = $6, payload = $7, metadata = $8, \
                   on_run_completed = $9, enabled = $10, end_time = $11, next_run_date = $12, \
                   created_at = $13, updated_at = $14, owner = $15 WHERE cron_id = $1";
        let done = bind_cron(q(sql.to_owned()), cron)?
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_cron(&self, id: CronId) -> StoreResult<bool> {
        let _timer = StoreTimer::start("delete_cron");
        let done = sqlx::query("DELETE FROM crons WHERE cron_id = $1")
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn search_crons(&self, query: &CronQuery) -> StoreResult<Page<Cron>> {
        let _timer = StoreTimer::start("search_crons");
        let mut filter = Sql::new(" WHERE 1 = 1");
        let owner = filter.arg(query.owner.as_str());
        filter.push(&format!(" AND owner = {owner}"));
        if let Some(id) = query.assistant_id {
            let p = filter.arg(id);
            filter.push(&format!(" AND assistant_id = {p}"));
        }
        if let Some(id) = query.thread_id {
            let p = filter.arg(id);
            filter.push(&format!(" AND thread_id = {p}"));
        }
        if let Some(enabled) = query.enabled {
            let p = filter.arg(i64::from(enabled));
            filter.push(&format!(" AND enabled = {p}"));
        }
        self.push_contains(&mut filter, "metadata", &query.metadata)?;
        let order = order_by(
            query.sort_by.map(|s| s.as_str()),
            query.sort_order,
            &[
                "cron_id",
                "assistant_id",
                "thread_id",
                "next_run_date",
                "end_time",
                "created_at",
                "updated_at",
            ],
            "created_at",
            "cron_id",
        );
        self.page(
            CRON_COLS,
            "crons",
            filter,
            &order,
            query.limit,
            query.offset,
            cron_row,
        )
        .await
    }

    async fn due_crons(&self, now: Timestamp, limit: i64) -> StoreResult<Vec<Cron>> {
        let sql = format!(
            "SELECT {CRON_COLS} FROM crons WHERE enabled = 1 AND next_run_date <= $1 \
             AND (end_time IS NULL OR next_run_date <= end_time) \
             ORDER BY next_run_date LIMIT $2"
        );
        all(
            &self.pool,
            q(sql).bind(now.to_string()).bind(limit),
            cron_row,
        )
        .await
    }

    async fn skip_cron_tick(&self, tick: &CronTick) -> StoreResult<bool> {
        let _timer = StoreTimer::start("skip_cron_tick");
        let mut conn = self.pool.acquire().await?;
        claim_tick(&mut conn, tick).await
    }
}
