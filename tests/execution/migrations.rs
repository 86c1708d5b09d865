//! Upgrades keep what the previous schema stored: a store written before a migration opens
//! after it with the same data.

use crate::support;

use deep_research::store::EventLog;
use deep_research::store::{EventId, SqlStore, StoredEvent};
use sqlx::migrate::Migrator;
use std::path::Path;

const THREAD: &str = "8f0e2a5c-2b1e-4c55-9a57-2f1d3c4b5a69";
const RUN: &str = "1d6c1a8e-7b0f-4a0e-8d7c-3e2f1a0b9c8d";

/// Applies the migrations before `0003` (copied, so their checksums match the real ones).
async fn migrate_to_0002<'c, A>(dialect: &str, pool: A)
where
    A: sqlx::Acquire<'c>,
    <A::Connection as std::ops::Deref>::Target: sqlx::migrate::Migrate,
{
    let dir = tempfile::TempDir::new().expect("temp dir");
    for file in ["0001_init.sql", "0002_checkpoint_blobs.sql"] {
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(dialect)
            .join(file);
        std::fs::copy(from, dir.path().join(file)).expect("copy migration");
    }
    Migrator::new(dir.path())
        .await
        .expect("read migrations")
        .run(pool)
        .await
        .expect("apply migrations 0001-0002");
}

/// The rows an older version wrote: a thread and two events, one with text that needs care
/// (multi-byte characters, an escaped newline, spaces and digits like a page header).
const OLD_ROWS: [&str; 2] = [
    "INSERT INTO threads (thread_id, created_at, updated_at, state_updated_at, metadata, status, \
     config, interrupts) VALUES ('8f0e2a5c-2b1e-4c55-9a57-2f1d3c4b5a69', \
     '2026-11-01T00:00:00.000000Z', '2026-11-01T00:00:00.000000Z', '2026-11-01T00:00:00.000000Z', \
     '{}', 'idle', '{}', '{}')",
    "INSERT INTO run_events (run_id, thread_id, ms, seq, event, data) VALUES \
     ('1d6c1a8e-7b0f-4a0e-8d7c-3e2f1a0b9c8d', '8f0e2a5c-2b1e-4c55-9a57-2f1d3c4b5a69', 17, 3, \
     'values', '{}'), \
     ('1d6c1a8e-7b0f-4a0e-8d7c-3e2f1a0b9c8d', '8f0e2a5c-2b1e-4c55-9a57-2f1d3c4b5a69', 17, 2, \
     'messages|researcher:1', '[{\"content\":\"é 12 34\\nnaïve\"},{}]')",
];

fn expected() -> Vec<StoredEvent> {
    let event = |seq, event: &str, data: &str| StoredEvent {
        run_id: RUN.parse().unwrap(),
        thread_id: THREAD.parse().unwrap(),
        id: EventId { ms: 17, seq },
        event: event.into(),
        data: data.into(),
    };
    vec![
        event(
            2,
            "messages|researcher:1",
            "[{\"content\":\"é 12 34\\nnaïve\"},{}]",
        ),
        event(3, "values", "{}"),
    ]
}

async fn events_survive(url: &str) {
    let store = SqlStore::connect(url, 2).await.expect("open and migrate");
    let run: deep_research::ids::RunId = RUN.parse().unwrap();
    assert_eq!(store.run_events_after(run, None).await.unwrap(), expected());
    let after = Some(EventId { ms: 17, seq: 2 });
    assert_eq!(
        store.run_events_after(run, after).await.unwrap(),
        expected()[1..]
    );
    // New frames go on after the moved ones.
    let mut next = expected()[1].clone();
    next.id = EventId { ms: 18, seq: 0 };
    store
        .append_events(std::slice::from_ref(&next))
        .await
        .unwrap();
    assert_eq!(store.run_events_after(run, after).await.unwrap().len(), 2);
    store.close().await;
}

#[tokio::test]
async fn sqlite_run_events_move_into_pages() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("old.db").display());
    let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc"))
        .await
        .expect("open sqlite");
    migrate_to_0002("sqlite", &pool).await;
    for sql in OLD_ROWS {
        sqlx::raw_sql(sql).execute(&pool).await.expect("old rows");
    }
    pool.close().await;
    events_survive(&url).await;
}

#[tokio::test]
async fn postgres_run_events_move_into_pages() {
    let Some(admin) = support::pg::admin_url() else {
        return;
    };
    let url = support::pg::create_database(&admin, "dr_test").await.1;
    let pool = sqlx::PgPool::connect(&url).await.expect("open postgres");
    migrate_to_0002("postgres", &pool).await;
    for sql in OLD_ROWS {
        sqlx::raw_sql(sql).execute(&pool).await.expect("old rows");
    }
    pool.close().await;
    events_survive(&url).await;
}
