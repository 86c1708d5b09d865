//! Assistants in SQL.

use super::codec::*;
use super::filters::*;
use super::query::*;
use super::tx::*;
use super::*;
use crate::store::{
    Assistant, AssistantPatch, AssistantQuery, IfExists, Page, StoreError, StoreResult,
};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;
use uuid::Uuid;

#[async_trait]
impl crate::store::AssistantStore for SqlStore {
    async fn create_assistant(&self, a: &Assistant, if_exists: IfExists) -> StoreResult<Assistant> {
        let _timer = StoreTimer::start("create_assistant");
        let mut tx = self.write_tx().await?;
        let inserted = insert_assistant_query(a)?
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if !inserted && if_exists == IfExists::Raise {
            return Err(StoreError::Conflict("assistant"));
        }
        let sql = format!("SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1");
        let stored = one(
            &mut *tx,
            q(sql).bind(a.assistant_id.to_string()),
            assistant_row,
        )
        .await?;
        tx.commit().await?;
        stored.ok_or(StoreError::NotFound("assistant"))
    }

    async fn get_assistant(&self, id: Uuid) -> StoreResult<Option<Assistant>> {
        let _timer = StoreTimer::start("get_assistant");
        let sql = format!("SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1");
        one(&self.pool, q(sql).bind(id.to_string()), assistant_row).await
    }

    async fn update_assistant(
        &self,
        id: Uuid,
        patch: &AssistantPatch,
        now: Timestamp,
    ) -> StoreResult<Option<Assistant>> {
        let _timer = StoreTimer::start("update_assistant");
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1{}",
            self.lock()
        );
        let Some(mut a) = one(&mut *tx, q(sql).bind(id.to_string()), assistant_row).await? else {
            return Ok(None);
        };
        apply_patch(&mut a, patch);
        a.version += 1;
        a.updated_at = now;
        sqlx::query(
            "UPDATE assistants SET graph_id = $2, config = $3, context = $4, metadata = $5, \
             name = $6, description = $7, version = $8, updated_at = $9 WHERE assistant_id = $1",
        )
        .bind(id.to_string())
        .bind(a.graph_id.clone())
        .bind(to_json(&a.config)?)
        .bind(to_json(&a.context)?)
        .bind(to_json(&a.metadata)?)
        .bind(a.name.clone())
        .bind(a.description.clone())
        .bind(a.version)
        .bind(now.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(a))
    }

    async fn delete_assistant(&self, id: Uuid) -> StoreResult<bool> {
        let _timer = StoreTimer::start("delete_assistant");
        let done = sqlx::query("DELETE FROM assistants WHERE assistant_id = $1")
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn search_assistants(&self, query: &AssistantQuery) -> StoreResult<Page<Assistant>> {
        let _timer = StoreTimer::start("search_assistants");
        let mut filter = Sql::new(" WHERE 1 = 1");
        if let Some(graph_id) = &query.graph_id {
            let p = filter.arg(graph_id.as_str());
            filter.push(&format!(" AND graph_id = {p}"));
        }
        if let Some(name) = &query.name {
            let p = filter.arg(like_pattern(name));
            filter.push(&format!(" AND LOWER(name) LIKE {p} ESCAPE '\\'"));
        }
        self.push_contains(&mut filter, "metadata", &query.metadata)?;
        let order = order_by(
            query.sort_by.as_deref(),
            query.sort_order,
            &[
                "assistant_id",
                "graph_id",
                "name",
                "created_at",
                "updated_at",
            ],
            "created_at",
            "assistant_id",
        );
        let (limit, offset) = (query.limit, query.offset);
        self.page(
            ASSISTANT_COLS,
            "assistants",
            filter,
            &order,
            limit,
            offset,
            assistant_row,
        )
        .await
    }
}
