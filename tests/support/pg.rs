//! Throwaway Postgres databases for tests and the load driver: one helper, included by
//! `tests/support`, `tests/execution/store_contract.rs` and `benches/load.rs` (with `#[path]`).
#![allow(dead_code)]

use sqlx::Connection;

/// The admin URL from `TEST_DATABASE_URL`, or `None` (skip) when it is unset and
/// `DR_REQUIRE_POSTGRES=1` does not demand it.
pub fn admin_url() -> Option<String> {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("DR_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "DR_REQUIRE_POSTGRES=1 but TEST_DATABASE_URL is not set"
            );
            eprintln!("skipping postgres: TEST_DATABASE_URL not set");
            None
        }
    }
}

/// `url` with its database (path) replaced by `db`, keeping any query string.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let host_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[host_start..]
        .find('/')
        .map_or(base.len(), |i| host_start + i);
    format!("{}/{db}{query}", &base[..path_start])
}

/// Creates an empty database named `<prefix>_<uuid>` on the admin URL's server; returns its
/// name and URL.
pub async fn create_database(admin: &str, prefix: &str) -> (String, String) {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connect to the Postgres admin URL");
    // The name is generated above from a uuid, never from input.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await
        .expect("create a throwaway database");
    let _ = conn.close().await;
    let url = with_database(admin, &name);
    (name, url)
}

/// Drops a database made by `create_database`, closing its connections.
pub async fn drop_database(admin: &str, name: &str) {
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .expect("connect to the Postgres admin URL");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .expect("drop the throwaway database");
    let _ = conn.close().await;
}
