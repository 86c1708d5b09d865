//! Store API items in SQL. Namespaces are stored dot-joined, so a prefix is matched by
//! comparing the leading characters (`substr`), which needs no `LIKE` escaping.

use super::codec::*;
use super::query::*;
use super::*;
use crate::store::{
    Comparison, FieldMatch, Item, ItemQuery, JsonMap, Namespace, NamespaceQuery, Owner, StoreResult,
};
use crate::telemetry::metrics::StoreTimer;
use crate::time::Timestamp;
use async_trait::async_trait;
use serde_json::Value;
use sqlx::any::AnyRow;

const ITEM_COLS: &str = "namespace, item_key, value, created_at, updated_at, ttl_minutes, owner";

/// The document column, qualified: inside `json_each(...)` a bare `value` would name the
/// function's own column.
const VALUE: &str = "store_items.value";

/// An item with the time-to-live it was written with (to refresh it on read).
type Stored = (Item, Option<f64>);

fn item_row(row: &AnyRow) -> StoreResult<Stored> {
    let dotted = text(row, "namespace")?;
    let namespace =
        Namespace::from_dotted(&dotted).map_err(|e| corrupt("store item namespace", e))?;
    let key = text(row, "item_key")?;
    let owner = Owner::from_stored(text(row, "owner")?);
    let at = item_at(&owner, &dotted, &key);
    let item = Item {
        namespace,
        value: opened_json(row, "value", crate::store::crypt::Column::ItemValue, &at)?,
        key,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    };
    Ok((item, row.try_get::<Option<f64>, _>("ttl_minutes")?))
}

fn expiry(now: Timestamp, ttl_minutes: Option<f64>) -> Option<String> {
    ttl_minutes.map(|m| now.plus_secs(m * 60.0).to_string())
}

/// ` AND <item is live at now>`.
fn push_live(sql: &mut Sql, now: Timestamp) {
    let p = sql.arg(now);
    sql.push(&format!(" AND (expires_at IS NULL OR expires_at > {p})"));
}

/// ` AND <namespace is the prefix or under it>`; nothing for the empty prefix.
fn push_prefix(sql: &mut Sql, prefix: &Namespace) {
    if prefix.labels().is_empty() {
        return;
    }
    let exact = sql.arg(prefix.dotted());
    let under = format!("{}.", prefix.dotted());
    let len = sql.arg(under.chars().count() as i64);
    let under = sql.arg(under);
    sql.push(&format!(
        " AND (namespace = {exact} OR substr(namespace, 1, CAST({len} AS INTEGER)) = {under})"
    ));
}

impl SqlStore {
    /// ` AND <value field matches>` for each filter.
    fn push_field(&self, sql: &mut Sql, field: &str, want: &FieldMatch) -> StoreResult<()> {
        match want {
            FieldMatch::Contains(v) => {
                let filter: JsonMap = [(field.to_owned(), v.clone())].into_iter().collect();
                self.push_contains(sql, VALUE, &filter)?;
            }
            FieldMatch::NotContains(v) => {
                let filter: JsonMap = [(field.to_owned(), v.clone())].into_iter().collect();
                let mut inner = Sql::new("");
                inner.args = std::mem::take(&mut sql.args);
                self.push_contains(&mut inner, VALUE, &filter)?;
                sql.args = inner.args;
                // `inner.text` is " AND <condition>".
                let condition = inner.text.trim_start_matches(" AND ");
                sql.push(&format!(" AND NOT ({condition})"));
            }
            FieldMatch::Compare(op, v) => self.push_compare(sql, field, *op, v),
        }
        Ok(())
    }

    fn push_compare(&self, sql: &mut Sql, field: &str, op: Comparison, v: &Value) {
        let op = match op {
            Comparison::Gt => ">",
            Comparison::Gte => ">=",
            Comparison::Lt => "<",
            Comparison::Lte => "<=",
        };
        let (pg_type, sqlite_types) = if v.is_number() {
            ("number", "'integer', 'real'")
        } else {
            ("string", "'text'")
        };
        let k = sql.arg(field);
        let want = sql.arg(v.to_string());
        match self.dialect {
            Dialect::Postgres => sql.push(&format!(
                " AND jsonb_typeof({VALUE}::jsonb -> {k}::text) = '{pg_type}' \
                 AND ({VALUE}::jsonb -> {k}::text) {op} {want}::jsonb"
            )),
            Dialect::Sqlite => {
                let a = sql.alias();
                sql.push(&format!(
                    " AND EXISTS (SELECT 1 FROM json_each({VALUE}) AS {a} WHERE {a}.key = {k} \
                     AND {a}.type IN ({sqlite_types}) AND {a}.value {op} json_extract({want}, '$'))"
                ))
            }
        };
    }

    /// Restarts the time-to-live of these items (those that have one).
    async fn refresh(&self, owner: &Owner, rows: &[Stored], now: Timestamp) -> StoreResult<()> {
        let with_ttl: Vec<_> = rows.iter().filter(|(_, ttl)| ttl.is_some()).collect();
        if with_ttl.is_empty() {
            return Ok(());
        }
        let mut tx = self.write_tx().await?;
        for (item, ttl) in with_ttl {
            sqlx::query(
                "UPDATE store_items SET expires_at = $3 \
                 WHERE owner = $4 AND namespace = $1 AND item_key = $2",
            )
            .bind(item.namespace.dotted())
            .bind(item.key.clone())
            .bind(expiry(now, *ttl))
            .bind(owner.as_str().to_owned())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

#[async_trait]
impl crate::store::ItemStore for SqlStore {
    async fn put_item(
        &self,
        owner: &Owner,
        ns: &Namespace,
        key: &str,
        value: &JsonMap,
        ttl_minutes: Option<f64>,
        now: Timestamp,
    ) -> StoreResult<()> {
        let _timer = StoreTimer::start("put_item");
        sqlx::query(
            "INSERT INTO store_items (namespace, item_key, value, created_at, updated_at, \
             ttl_minutes, expires_at, owner) \
             VALUES ($1, $2, $3, $4, $4, CAST($5 AS DOUBLE PRECISION), $6, $7) \
             ON CONFLICT (owner, namespace, item_key) DO UPDATE SET value = excluded.value, \
             updated_at = excluded.updated_at, ttl_minutes = excluded.ttl_minutes, \
             expires_at = excluded.expires_at, \
             created_at = CASE WHEN store_items.expires_at IS NOT NULL \
                 AND store_items.expires_at <= excluded.updated_at \
                 THEN excluded.created_at ELSE store_items.created_at END",
        )
        .bind(ns.dotted())
        .bind(key.to_owned())
        .bind(sealed_json(
            crate::store::crypt::Column::ItemValue,
            &item_at(owner, &ns.dotted(), key),
            value,
        )?)
        .bind(now.to_string())
        .bind(opt_float(ttl_minutes))
        .bind(expiry(now, ttl_minutes))
        .bind(owner.as_str().to_owned())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn get_item(
        &self,
        owner: &Owner,
        ns: &Namespace,
        key: &str,
        refresh_ttl: bool,
        now: Timestamp,
    ) -> StoreResult<Option<Item>> {
        let _timer = StoreTimer::start("get_item");
        let mut sql = Sql::new(&format!(
            "SELECT {ITEM_COLS} FROM store_items WHERE owner = "
        ));
        let o = sql.arg(owner.as_str());
        sql.push(&o);
        let p = sql.arg(ns.dotted());
        sql.push(&format!(" AND namespace = {p}"));
        let k = sql.arg(key);
        sql.push(&format!(" AND item_key = {k}"));
        push_live(&mut sql, now);
        let Some(row) = one(&self.pool, sql.query(), item_row).await? else {
            return Ok(None);
        };
        if refresh_ttl {
            self.refresh(owner, std::slice::from_ref(&row), now).await?;
        }
        Ok(Some(row.0))
    }

    async fn delete_item(&self, owner: &Owner, ns: &Namespace, key: &str) -> StoreResult<bool> {
        let _timer = StoreTimer::start("delete_item");
        let done = sqlx::query(
            "DELETE FROM store_items WHERE owner = $3 AND namespace = $1 AND item_key = $2",
        )
        .bind(ns.dotted())
        .bind(key.to_owned())
        .bind(owner.as_str().to_owned())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn search_items(&self, query: &ItemQuery, now: Timestamp) -> StoreResult<Vec<Item>> {
        let _timer = StoreTimer::start("search_items");
        let mut sql = Sql::new(&format!("SELECT {ITEM_COLS} FROM store_items WHERE 1 = 1"));
        let o = sql.arg(query.owner.as_str());
        sql.push(&format!(" AND owner = {o}"));
        push_prefix(&mut sql, &query.prefix);
        push_live(&mut sql, now);
        for (field, want) in &query.filter {
            self.push_field(&mut sql, field, want)?;
        }
        let (l, o) = (sql.arg(query.limit), sql.arg(query.offset));
        sql.push(&format!(
            " ORDER BY namespace, item_key LIMIT {l} OFFSET {o}"
        ));
        let rows = all(&self.pool, sql.query(), item_row).await?;
        if query.refresh_ttl {
            self.refresh(&query.owner, &rows, now).await?;
        }
        Ok(rows.into_iter().map(|(item, _)| item).collect())
    }

    async fn list_namespaces(
        &self,
        query: &NamespaceQuery,
        now: Timestamp,
    ) -> StoreResult<Vec<Namespace>> {
        let _timer = StoreTimer::start("list_namespaces");
        let mut sql = Sql::new("SELECT DISTINCT namespace FROM store_items WHERE 1 = 1");
        let o = sql.arg(query.owner.as_str());
        sql.push(&format!(" AND owner = {o}"));
        push_prefix(&mut sql, &query.prefix);
        push_live(&mut sql, now);
        sql.push(" ORDER BY namespace");
        let names = all(&self.pool, sql.query(), |row| text(row, "namespace")).await?;
        let depth = query.max_depth.unwrap_or(usize::MAX);
        let mut shaped = std::collections::BTreeSet::new();
        for dotted in names {
            let ns = Namespace::from_dotted(&dotted).map_err(|e| corrupt("namespace", e))?;
            if !ns.labels().ends_with(&query.suffix) {
                continue;
            }
            let cut = ns.labels().iter().take(depth).cloned().collect();
            shaped.insert(Namespace::new(cut).map_err(|e| corrupt("namespace", e))?);
        }
        Ok(shaped
            .into_iter()
            .skip(query.offset)
            .take(query.limit)
            .collect())
    }

    async fn delete_expired_items(&self, now: Timestamp) -> StoreResult<u64> {
        let _timer = StoreTimer::start("delete_expired_items");
        let done = sqlx::query(
            "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= $1",
        )
        .bind(now.to_string())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
