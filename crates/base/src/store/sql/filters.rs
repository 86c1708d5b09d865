//! Search filters (metadata containment on both backends) and ordering.

use super::codec::*;
use super::query::*;
use super::*;
use crate::store::{JsonMap, SortOrder, StoreResult};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Filters and ordering.

/// `ORDER BY` from a whitelisted column (anything else falls back to `default`), with the id as
/// tie-breaker so pages are stable.
pub(super) fn order_by(
    sort_by: Option<&str>,
    order: Option<SortOrder>,
    allowed: &[&'static str],
    default: &'static str,
    id_col: &'static str,
) -> String {
    let col = allowed
        .iter()
        .find(|c| Some(**c) == sort_by)
        .copied()
        .unwrap_or(default);
    let dir = match order.unwrap_or(SortOrder::Desc) {
        SortOrder::Asc => "ASC",
        SortOrder::Desc => "DESC",
    };
    if col == id_col {
        format!(" ORDER BY {col} {dir}")
    } else {
        format!(" ORDER BY {col} {dir}, {id_col} {dir}")
    }
}

/// A `LIKE` pattern matching `needle` anywhere, lower-cased, with wildcards escaped by `\`.
pub(super) fn like_pattern(needle: &str) -> String {
    let mut out = String::from("%");
    for ch in needle.to_lowercase().chars() {
        if matches!(ch, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('%');
    out
}

impl SqlStore {
    /// Appends ` AND <col contains filter>` with Postgres `@>` semantics on both backends.
    pub(super) fn push_contains(
        &self,
        sql: &mut Sql,
        col: &str,
        filter: &JsonMap,
    ) -> StoreResult<()> {
        if filter.is_empty() {
            return Ok(());
        }
        match self.dialect {
            Dialect::Postgres => {
                let p = sql.arg(to_json(filter)?);
                sql.push(&format!(" AND {col}::jsonb @> {p}::jsonb"));
            }
            Dialect::Sqlite => {
                for (key, want) in filter {
                    sql.push(" AND ");
                    sqlite_member_matches(sql, col, key, want);
                }
            }
        }
        Ok(())
    }
}

/// SQLite: the JSON object in `src` has member `key` whose value contains `want`. Keys are bound
/// as values (compared against `json_each.key`), so no key needs escaping into a JSON path.
pub(super) fn sqlite_member_matches(sql: &mut Sql, src: &str, key: &str, want: &Value) {
    let alias = sql.alias();
    let k = sql.arg(key);
    sql.push(&format!(
        "EXISTS (SELECT 1 FROM json_each({src}) AS {alias} WHERE {alias}.key = {k} AND "
    ));
    sqlite_value_matches(sql, &alias, want);
    sql.push(")");
}

/// SQLite: the `json_each` row `alias` holds a value containing `want` (objects: every member
/// contained; arrays: every wanted element found in the array; scalars: equal, JSON null
/// included).
pub(super) fn sqlite_value_matches(sql: &mut Sql, alias: &str, want: &Value) {
    match want {
        Value::Null => {
            sql.push(&format!("{alias}.type = 'null'"));
        }
        Value::Bool(b) => {
            sql.push(&format!("{alias}.type = '{b}'"));
        }
        Value::Number(n) => {
            let p = sql.arg(n.to_string());
            sql.push(&format!(
                "{alias}.type IN ('integer', 'real') AND {alias}.value = json_extract({p}, '$')"
            ));
        }
        Value::String(s) => {
            let p = sql.arg(s.as_str());
            sql.push(&format!("{alias}.type = 'text' AND {alias}.value = {p}"));
        }
        Value::Object(members) => {
            sql.push(&format!("{alias}.type = 'object'"));
            for (key, v) in members {
                sql.push(" AND ");
                sqlite_member_matches(sql, &format!("{alias}.value"), key, v);
            }
        }
        Value::Array(items) => {
            sql.push(&format!("{alias}.type = 'array'"));
            for item in items {
                let inner = sql.alias();
                sql.push(&format!(
                    " AND EXISTS (SELECT 1 FROM json_each({alias}.value) AS {inner} WHERE "
                ));
                sqlite_value_matches(sql, &inner, item);
                sql.push(")");
            }
        }
    }
}
