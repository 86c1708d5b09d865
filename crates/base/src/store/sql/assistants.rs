//! Assistants in SQL.

use super::codec::*;
use super::filters::*;
use super::query::*;
use super::tx::*;
use super::*;
use crate::ids::AssistantId;
use crate::store::crypt::Column;
use crate::store::{
    Assistant, AssistantPatch, AssistantQuery, AssistantVersion, IfExists, JsonMap, Page,
    StoreError, StoreResult,
};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;
use sqlx::Row;

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
        if inserted {
            insert_version(&mut tx, a).await?;
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

    async fn get_assistant(&self, id: AssistantId) -> StoreResult<Option<Assistant>> {
        let _timer = StoreTimer::start("get_assistant");
        let sql = format!("SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1");
        one(&self.pool, q(sql).bind(id.to_string()), assistant_row).await
    }

    async fn update_assistant(
        &self,
        id: AssistantId,
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
        let highest =
            sqlx::query("SELECT MAX(version) AS v FROM assistant_versions WHERE assistant_id = $1")
                .bind(id.to_string())
                .fetch_one(&mut *tx)
                .await?
                .try_get::<Option<i64>, _>("v")?;
        a.version = highest.unwrap_or(a.version).max(a.version) + 1;
        a.updated_at = now;
        insert_version(&mut tx, &a).await?;
        write_current(&mut tx, &a).await?;
        tx.commit().await?;
        Ok(Some(a))
    }

    async fn delete_assistant(&self, id: AssistantId) -> StoreResult<bool> {
        let _timer = StoreTimer::start("delete_assistant");
        let mut tx = self.write_tx().await?;
        sqlx::query("DELETE FROM crons WHERE assistant_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM assistant_versions WHERE assistant_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM assistants WHERE assistant_id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn search_assistants(&self, query: &AssistantQuery) -> StoreResult<Page<Assistant>> {
        let _timer = StoreTimer::start("search_assistants");
        let mut filter = Sql::new(" WHERE 1 = 1");
        let owner = filter.arg(query.owner.as_str());
        filter.push(&format!(" AND (owner = {owner} OR owner IS NULL)"));
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
            query.sort_by.map(|s| s.as_str()),
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

    async fn assistant_versions(
        &self,
        id: AssistantId,
        metadata: &JsonMap,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Option<Vec<AssistantVersion>>> {
        let _timer = StoreTimer::start("assistant_versions");
        if self.get_assistant(id).await?.is_none() {
            return Ok(None);
        }
        let mut sql = Sql::new(&format!(
            "SELECT {VERSION_COLS} FROM assistant_versions WHERE assistant_id = "
        ));
        let p = sql.arg(id.to_string());
        sql.push(&p);
        self.push_contains(&mut sql, "metadata", metadata)?;
        let (l, o) = (sql.arg(limit), sql.arg(offset));
        sql.push(&format!(" ORDER BY version DESC LIMIT {l} OFFSET {o}"));
        let versions = all(&self.pool, sql.query(), version_row).await?;
        Ok(Some(versions))
    }

    async fn set_latest_assistant(
        &self,
        id: AssistantId,
        version: i64,
        now: Timestamp,
    ) -> StoreResult<Assistant> {
        let _timer = StoreTimer::start("set_latest_assistant");
        let mut tx = self.write_tx().await?;
        let sql = format!(
            "SELECT {ASSISTANT_COLS} FROM assistants WHERE assistant_id = $1{}",
            self.lock()
        );
        let Some(mut a) = one(&mut *tx, q(sql).bind(id.to_string()), assistant_row).await? else {
            return Err(StoreError::NotFound("assistant"));
        };
        let sql = format!(
            "SELECT {VERSION_COLS} FROM assistant_versions WHERE assistant_id = $1 AND version = $2"
        );
        let Some(v) = one(
            &mut *tx,
            q(sql).bind(id.to_string()).bind(version),
            version_row,
        )
        .await?
        else {
            return Err(StoreError::NotFound("assistant version"));
        };
        a.graph_id = v.graph_id;
        a.config = v.config;
        a.context = v.context;
        a.metadata = v.metadata;
        a.name = v.name;
        a.description = v.description;
        a.version = v.version;
        a.updated_at = now;
        write_current(&mut tx, &a).await?;
        tx.commit().await?;
        Ok(a)
    }
}

const VERSION_COLS: &str =
    "assistant_id, version, graph_id, config, context, metadata, name, description, created_at";

fn version_row(row: &sqlx::any::AnyRow) -> StoreResult<AssistantVersion> {
    let assistant_id: AssistantId = uuid(row, "assistant_id")?;
    let version = int(row, "version")?;
    let at = version_at(assistant_id, version);
    Ok(AssistantVersion {
        assistant_id,
        version,
        graph_id: text(row, "graph_id")?,
        config: opened_json(row, "config", Column::VersionConfig, &at)?,
        context: opened_json(row, "context", Column::VersionContext, &at)?,
        metadata: json(row, "metadata")?,
        name: text(row, "name")?,
        description: opt_text(row, "description")?,
        created_at: ts(row, "created_at")?,
    })
}

/// Records the assistant as it now is as one of its versions.
async fn insert_version(tx: &mut Tx, a: &Assistant) -> StoreResult<()> {
    let sql = format!(
        "INSERT INTO assistant_versions ({VERSION_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    );
    let at = version_at(a.assistant_id, a.version);
    q(sql)
        .bind(a.assistant_id.to_string())
        .bind(a.version)
        .bind(a.graph_id.clone())
        .bind(sealed_json(Column::VersionConfig, &at, &a.config)?)
        .bind(sealed_json(Column::VersionContext, &at, &a.context)?)
        .bind(to_json(&a.metadata)?)
        .bind(a.name.clone())
        .bind(a.description.clone())
        .bind(a.updated_at.to_string())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Overwrites the assistant's current row with `a`.
async fn write_current(tx: &mut Tx, a: &Assistant) -> StoreResult<()> {
    sqlx::query(
        "UPDATE assistants SET graph_id = $2, config = $3, context = $4, metadata = $5, \
         name = $6, description = $7, version = $8, updated_at = $9 WHERE assistant_id = $1",
    )
    .bind(a.assistant_id.to_string())
    .bind(a.graph_id.clone())
    .bind(sealed_json(
        Column::AssistantConfig,
        &a.assistant_id.to_string(),
        &a.config,
    )?)
    .bind(sealed_json(
        Column::AssistantContext,
        &a.assistant_id.to_string(),
        &a.context,
    )?)
    .bind(to_json(&a.metadata)?)
    .bind(a.name.clone())
    .bind(a.description.clone())
    .bind(a.version)
    .bind(a.updated_at.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The row identity a version's sealed columns are bound to.
fn version_at(assistant: AssistantId, version: i64) -> String {
    crate::store::crypt::row_of(&[&assistant.to_string(), &version.to_string()])
}
