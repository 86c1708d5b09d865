//! `deep-research reseal`: every sealed column rewritten under the current key and in the
//! current format (bound to its row), and values stored before encryption was turned on
//! sealed. After it, retired keys can leave `DR_ENCRYPTION_PREVIOUS_KEYS`.
//!
//! Safe beside a running server: each row is written back only if it still holds what was
//! read (a compare-and-set), so a value the server rewrote meanwhile (under the current key
//! already) is left as the server wrote it.

use super::SqlStore;
use super::codec::{corrupt, opt_text};
use crate::store::StoreResult;
use crate::store::crypt::{self, Column};
use sqlx::Row;
use sqlx::any::AnyRow;

/// A column of a row key.
#[derive(Clone, Copy)]
enum Key {
    Text(&'static str),
    Int(&'static str),
}

impl Key {
    fn name(self) -> &'static str {
        match self {
            Key::Text(n) | Key::Int(n) => n,
        }
    }
}

/// A sealed column, and the columns that name its row (joined by `row_of`, as `codec` does).
struct Sealed {
    table: &'static str,
    column: &'static str,
    sealed_as: Column,
    keys: &'static [Key],
}

use Key::{Int, Text};

/// Every sealed column, with its row identity in the order `codec` binds it.
const SEALED: &[Sealed] = &[
    Sealed {
        table: "threads",
        column: "state_values",
        sealed_as: Column::ThreadValues,
        keys: &[Text("thread_id")],
    },
    Sealed {
        table: "threads",
        column: "interrupts",
        sealed_as: Column::ThreadInterrupts,
        keys: &[Text("thread_id")],
    },
    Sealed {
        table: "runs",
        column: "kwargs",
        sealed_as: Column::RunKwargs,
        keys: &[Text("run_id")],
    },
    Sealed {
        table: "checkpoints",
        column: "writes",
        sealed_as: Column::CheckpointWrites,
        keys: &[
            Text("thread_id"),
            Text("checkpoint_ns"),
            Text("checkpoint_id"),
        ],
    },
    Sealed {
        table: "checkpoints",
        column: "tasks",
        sealed_as: Column::CheckpointTasks,
        keys: &[
            Text("thread_id"),
            Text("checkpoint_ns"),
            Text("checkpoint_id"),
        ],
    },
    Sealed {
        table: "checkpoint_blobs",
        column: "data",
        sealed_as: Column::CheckpointChunk,
        keys: &[Text("thread_id"), Text("hash")],
    },
    Sealed {
        table: "run_event_pages",
        column: "frames",
        sealed_as: Column::RunEvents,
        keys: &[Text("run_id"), Int("last_ms"), Int("last_seq")],
    },
    Sealed {
        table: "store_items",
        column: "value",
        sealed_as: Column::ItemValue,
        keys: &[Text("owner"), Text("namespace"), Text("item_key")],
    },
    Sealed {
        table: "task_calls",
        column: "result",
        sealed_as: Column::TaskCallResult,
        keys: &[Text("thread_id"), Text("task_id"), Text("call_key")],
    },
    Sealed {
        table: "crons",
        column: "payload",
        sealed_as: Column::CronPayload,
        keys: &[Text("cron_id")],
    },
    Sealed {
        table: "assistants",
        column: "config",
        sealed_as: Column::AssistantConfig,
        keys: &[Text("assistant_id")],
    },
    Sealed {
        table: "assistants",
        column: "context",
        sealed_as: Column::AssistantContext,
        keys: &[Text("assistant_id")],
    },
    Sealed {
        table: "assistant_versions",
        column: "config",
        sealed_as: Column::VersionConfig,
        keys: &[Text("assistant_id"), Int("version")],
    },
    Sealed {
        table: "assistant_versions",
        column: "context",
        sealed_as: Column::VersionContext,
        keys: &[Text("assistant_id"), Int("version")],
    },
];

/// Rows read at a time.
const BATCH: i64 = 500;

/// What a reseal did, per `table.column`: rows rewritten, and rows left (already current, or
/// changed by the server meanwhile).
#[derive(Debug, Default)]
pub struct Resealed {
    pub columns: Vec<(String, u64, u64)>,
}

/// A key value as read, to bind back.
enum KeyValue {
    Text(String),
    Int(i64),
}

impl KeyValue {
    fn as_text(&self) -> String {
        match self {
            KeyValue::Text(t) => t.clone(),
            KeyValue::Int(n) => n.to_string(),
        }
    }
}

impl SqlStore {
    /// Rewrites every sealed column (see the module's note). Needs the keys installed.
    pub async fn reseal(&self) -> StoreResult<Resealed> {
        let mut done = Resealed::default();
        for target in SEALED {
            let (rewritten, left) = self.reseal_column(target).await?;
            done.columns.push((
                format!("{}.{}", target.table, target.column),
                rewritten,
                left,
            ));
        }
        Ok(done)
    }

    async fn reseal_column(&self, target: &Sealed) -> StoreResult<(u64, u64)> {
        let keys: Vec<&str> = target.keys.iter().map(|k| k.name()).collect();
        let select = format!(
            "SELECT {}, {} FROM {} ORDER BY {} LIMIT $1 OFFSET $2",
            keys.join(", "),
            target.column,
            target.table,
            keys.join(", ")
        );
        let condition: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{k} = ${}", i + 3))
            .collect();
        let update = format!(
            "UPDATE {} SET {col} = $1 WHERE {col} = $2 AND {}",
            target.table,
            condition.join(" AND "),
            col = target.column
        );
        let (mut rewritten, mut left, mut offset) = (0u64, 0u64, 0i64);
        loop {
            let rows = super::query::q(select.clone())
                .bind(BATCH)
                .bind(offset)
                .fetch_all(&self.pool)
                .await?;
            for row in &rows {
                let Some((key, stored)) = read(row, target)? else {
                    left += 1;
                    continue;
                };
                let parts: Vec<String> = key.iter().map(KeyValue::as_text).collect();
                let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
                let at = crypt::row_of(&parts);
                if crypt::is_current(&stored) {
                    left += 1;
                    continue;
                }
                let plain = crypt::open(target.sealed_as, &at, &stored)
                    .map_err(|e| corrupt(target.column, e))?;
                let sealed = crypt::seal(target.sealed_as, &at, plain.into_owned())
                    .map_err(|e| corrupt(target.column, e))?;
                let mut query = super::query::q(update.clone()).bind(sealed).bind(stored);
                for value in key {
                    query = match value {
                        KeyValue::Text(t) => query.bind(t),
                        KeyValue::Int(n) => query.bind(n),
                    };
                }
                if query.execute(&self.pool).await?.rows_affected() > 0 {
                    rewritten += 1;
                } else {
                    left += 1;
                }
            }
            if (rows.len() as i64) < BATCH {
                return Ok((rewritten, left));
            }
            offset += BATCH;
        }
    }
}

/// The row's key and stored text; `None` for SQL NULL (nothing to seal).
fn read(row: &AnyRow, target: &Sealed) -> StoreResult<Option<(Vec<KeyValue>, String)>> {
    let Some(stored) = opt_text(row, target.column)? else {
        return Ok(None);
    };
    let mut key = Vec::with_capacity(target.keys.len());
    for k in target.keys {
        key.push(match k {
            Key::Text(n) => KeyValue::Text(row.try_get::<String, _>(*n)?),
            Key::Int(n) => KeyValue::Int(row.try_get::<i64, _>(*n)?),
        });
    }
    Ok(Some((key, stored)))
}
