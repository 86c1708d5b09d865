//! Service settings: command-line flags with environment fallbacks, validated once at start-up.

use std::time::Duration;

/// Where and how the service runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    /// `postgres://…` or `sqlite://…`; `None` uses `sqlite_path`.
    pub database_url: Option<String>,
    /// The embedded store's file when no database URL is set.
    pub sqlite_path: String,
    /// Database connections in the pool.
    pub db_max_connections: u32,
    /// Process-wide bound on concurrently executing runs (the worker count).
    pub max_concurrent_runs: usize,
    /// How long a claimed run stays ours without a renewal.
    pub run_lease: Duration,
    /// Interval of SSE `: heartbeat` comments and `/wait` keep-alive newlines.
    pub heartbeat: Duration,
    /// How often idle workers look for runs when nothing woke them (delayed runs, other replicas).
    pub poll_interval: Duration,
    /// When set, every route but `/ok`, `/info`, `/docs` and preflights needs `x-api-key`.
    pub api_key: Option<String>,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 2024,
            database_url: None,
            sqlite_path: "deep-research.db".into(),
            db_max_connections: 10,
            max_concurrent_runs: 64,
            run_lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            poll_interval: Duration::from_millis(500),
            api_key: None,
            max_body_bytes: 10 * 1024 * 1024,
        }
    }
}

impl Settings {
    /// The store URL actually used, and a redacted version for logs.
    pub fn store_url(&self) -> String {
        match &self.database_url {
            Some(url) if !url.trim().is_empty() => url.clone(),
            _ => format!("sqlite://{}", self.sqlite_path),
        }
    }

    /// The store URL with any password replaced, for printing.
    pub fn store_description(&self) -> String {
        redact(&self.store_url())
    }
}

/// Replaces the password of a URL (`scheme://user:pass@host`) with `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((creds, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match creds.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact("postgres://odr:secret@db:5432/odr"),
            "postgres://odr:***@db:5432/odr"
        );
        assert_eq!(
            redact("sqlite://deep-research.db"),
            "sqlite://deep-research.db"
        );
    }
}
