//! Dynamic SQL with numbered placeholders and the small helpers every statement goes through.

use super::*;
use crate::ids::{AssistantId, CheckpointId, CronId, RunId, ThreadId};
use crate::store::{StoreError, StoreResult};
use crate::time::Timestamp;
use sqlx::{Any, AssertSqlSafe, Executor, Row};

// ---------------------------------------------------------------------------------------------
// Dynamic SQL with numbered placeholders (`$n` works on both backends through the Any driver).

#[derive(Clone, Debug)]
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

impl From<String> for Arg {
    fn from(v: String) -> Self {
        Arg::Text(v)
    }
}
impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Text(v.to_string())
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}
macro_rules! id_arg {
    ($($id:ty),+) => {$(
        impl From<$id> for Arg {
            fn from(v: $id) -> Self {
                Arg::Text(v.to_string())
            }
        }
    )+};
}
id_arg!(AssistantId, CheckpointId, CronId, RunId, ThreadId);
impl From<Timestamp> for Arg {
    fn from(v: Timestamp) -> Self {
        Arg::Text(v.to_string())
    }
}

/// SQL text plus its arguments; `arg` hands out the placeholder to splice in.
#[derive(Clone, Debug, Default)]
pub(super) struct Sql {
    pub(super) text: String,
    pub(super) args: Vec<Arg>,
    aliases: usize,
}

impl Sql {
    pub(super) fn new(text: &str) -> Self {
        Sql {
            text: text.to_string(),
            ..Sql::default()
        }
    }

    pub(super) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub(super) fn arg(&mut self, value: impl Into<Arg>) -> String {
        self.args.push(value.into());
        format!("${}", self.args.len())
    }

    /// A fresh table alias for nested `json_each` scans.
    pub(super) fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("j{}", self.aliases)
    }

    pub(super) fn query(self) -> AnyQuery {
        let mut q = sqlx::query(AssertSqlSafe(self.text));
        for arg in self.args {
            q = match arg {
                Arg::Text(v) => q.bind(v),
                Arg::Int(v) => q.bind(v),
            };
        }
        q
    }
}

/// A query whose text was assembled at run time from constants (never from values).
pub(super) fn q(text: String) -> AnyQuery {
    sqlx::query(AssertSqlSafe(text))
}

pub(super) async fn one<'c, T>(
    ex: impl Executor<'c, Database = Any>,
    query: AnyQuery,
    decode: Decode<T>,
) -> StoreResult<Option<T>> {
    query
        .fetch_optional(ex)
        .await?
        .as_ref()
        .map(decode)
        .transpose()
}

pub(super) async fn all<'c, T>(
    ex: impl Executor<'c, Database = Any>,
    query: AnyQuery,
    decode: Decode<T>,
) -> StoreResult<Vec<T>> {
    query.fetch_all(ex).await?.iter().map(decode).collect()
}

pub(super) async fn count<'c>(
    ex: impl Executor<'c, Database = Any>,
    query: AnyQuery,
) -> StoreResult<i64> {
    Ok(query.fetch_one(ex).await?.try_get::<i64, _>(0)?)
}

pub(super) fn is_unique_violation(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(d)) if d.is_unique_violation())
}
