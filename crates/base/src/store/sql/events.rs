//! The run event log in SQL: events stored in pages (see `store::pages`).

use super::codec::*;
use super::query::*;
use super::*;
use crate::ids::RunId;
use crate::store::pages;
use crate::store::{EventId, StoreResult, StoredEvent};
use crate::telemetry::metrics::StoreTimer;
use async_trait::async_trait;

#[async_trait]
impl crate::store::EventLog for SqlStore {
    async fn delete_events_ended_before(&self, cutoff: crate::time::Timestamp) -> StoreResult<u64> {
        let _timer = StoreTimer::start("delete_events_ended_before");
        let done = sqlx::query(
            "DELETE FROM run_event_pages WHERE run_id IN (SELECT run_id FROM runs \
             WHERE status NOT IN ('pending', 'running') AND updated_at < $1)",
        )
        .bind(cutoff.to_string())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn append_events(&self, events: &[StoredEvent]) -> StoreResult<()> {
        let _timer = StoreTimer::start("append_events");
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
            .bind(sealed(
                crate::store::crypt::Column::RunEvents,
                &event_page_at(page.run_id, page.last.ms, page.last.seq),
                page.frames,
            )?)
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    async fn last_event_id(&self, run_id: RunId) -> StoreResult<Option<EventId>> {
        let _timer = StoreTimer::start("last_event_id");
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
        run_id: RunId,
        after: Option<EventId>,
    ) -> StoreResult<Vec<StoredEvent>> {
        let _timer = StoreTimer::start("run_events_after");
        let mut sql = Sql::new(
            "SELECT run_id, thread_id, last_ms, last_seq, frames FROM run_event_pages WHERE run_id = $1",
        );
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
