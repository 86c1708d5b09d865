//! Service settings, one story with later layers winning:
//! `config/default.toml` (compiled in) → a `--config FILE` → `DR__SECTION__KEY` environment
//! variables → command-line flags (each with its conventional variable: `HOST`, `PORT`,
//! `DATABASE_URL`, `DR_API_KEY`, …) → a run's `config.configurable` (research keys only).
//! `file` reads and merges the layers; `Settings` is what the server runs with.

pub mod file;

use crate::telemetry::TelemetryConfig;
use file::{ConfigError, FileConfig};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};
use std::time::Duration;

/// Where and how the service runs. Its fields down to `ag_ui` are the `[server]` section,
/// each declared here once, with the name and unit the file uses (`run_lease_ms` is read into
/// `run_lease`); the rest come from the other sections (`from_file`). Secrets are
/// `SecretString`s: `Debug` prints `[REDACTED]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    /// `postgres://…` or `sqlite://…`; empty (`None`) uses `sqlite_path`.
    #[serde(deserialize_with = "blank_is_none")]
    pub database_url: Option<SecretString>,
    /// The embedded store's file when no database URL is set.
    pub sqlite_path: String,
    /// Database connections in the pool.
    pub db_max_connections: u32,
    /// How long a SQLite commit waits for the disk.
    #[serde(deserialize_with = "sqlite_sync")]
    pub sqlite_sync: crate::store::SqliteSync,
    /// Process-wide bound on concurrently executing runs (the worker count).
    pub max_concurrent_runs: usize,
    /// How long a claimed run stays ours without a renewal.
    #[serde(rename = "run_lease_ms", deserialize_with = "millis")]
    pub run_lease: Duration,
    /// Interval of SSE `: heartbeat` comments and `/wait` keep-alive newlines.
    #[serde(rename = "heartbeat_ms", deserialize_with = "millis")]
    pub heartbeat: Duration,
    /// How often one idle worker looks for runs nothing woke it for (delayed runs, runs created
    /// by other replicas).
    #[serde(rename = "poll_interval_ms", deserialize_with = "millis")]
    pub poll_interval: Duration,
    /// Claims of a run whose worker died before it is given up.
    pub max_attempts: u32,
    /// How long a shutdown lets runs reach their next checkpoint before handing them back.
    #[serde(rename = "drain_timeout_ms", deserialize_with = "millis")]
    pub drain_timeout: Duration,
    /// How long runs retry writes while the database is unreachable or busy.
    #[serde(rename = "store_patience_ms", deserialize_with = "millis")]
    pub store_patience: Duration,
    /// Postgres `statement_timeout` (zero: none).
    #[serde(rename = "statement_timeout_ms", deserialize_with = "millis")]
    pub statement_timeout: Duration,
    /// How long finished runs keep their stored events (zero: forever).
    #[serde(rename = "run_events_retention_hours", deserialize_with = "hours")]
    pub run_events_retention: Duration,
    /// Interval of the thread-ttl and event-retention sweep.
    #[serde(rename = "sweep_interval_ms", deserialize_with = "millis")]
    pub sweep_interval: Duration,
    /// When set, every route but `/ok`, `/info`, `/docs`, `/metrics` and preflights needs
    /// `x-api-key`.
    #[serde(deserialize_with = "blank_is_none")]
    pub api_key: Option<SecretString>,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's headers, and its body.
    #[serde(rename = "header_read_timeout_ms", deserialize_with = "millis")]
    pub header_read_timeout: Duration,
    #[serde(rename = "body_read_timeout_ms", deserialize_with = "millis")]
    pub body_read_timeout: Duration,
    /// A new connection's deadline for its first request, and any connection's for its next.
    #[serde(rename = "first_request_timeout_ms", deserialize_with = "millis")]
    pub first_request_timeout: Duration,
    #[serde(rename = "idle_timeout_ms", deserialize_with = "millis")]
    pub idle_timeout: Duration,
    /// Connections served at once, in total and from one address (0: no cap of its own).
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub http2_max_concurrent_streams: u32,
    /// Accepted `Host` names (any port, any case); `*` accepts any.
    #[serde(deserialize_with = "lowercase")]
    pub allowed_hosts: Vec<String>,
    /// Origins allowed by CORS (`*`: any); empty sends no CORS headers.
    pub cors_origins: Vec<String>,
    pub cors_private_network: bool,
    /// The research app at `/` (a page that uses this API; off: `/` is a 404).
    pub web_app: bool,
    /// A2A at `/a2a/{assistant_id}` and the agent cards (off: 404).
    pub a2a: bool,
    /// The MCP server at `/mcp` (off: 404).
    pub mcp: bool,
    /// AG-UI at `/ag-ui/{assistant_id}` (off: 404).
    pub ag_ui: bool,
    /// Who may call the API, as which owner (`[auth]`).
    #[serde(skip)]
    pub auth: AuthSettings,
    /// Admission limits on runs (`[limits]`).
    #[serde(skip)]
    pub run_limits: RunLimits,
    /// Runs may bring provider keys in `configurable.apiKeys` (held in memory, never stored;
    /// `[operator]`).
    #[serde(skip)]
    pub allow_run_keys: bool,
    /// Logs, traces and metrics (`[telemetry]`).
    #[serde(skip)]
    pub telemetry: TelemetryConfig,
    /// Run-completion webhooks (`[webhooks]`).
    #[serde(skip)]
    pub webhooks: WebhookSettings,
}

fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

fn hours<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let hours = u64::deserialize(d)?;
    hours
        .checked_mul(3600)
        .map(Duration::from_secs)
        .ok_or_else(|| serde::de::Error::custom("too many hours"))
}

/// An empty or blank secret is none.
fn blank_is_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
    SecretString::deserialize(d).map(|s| non_empty(&s))
}

fn sqlite_sync<'de, D: Deserializer<'de>>(d: D) -> Result<crate::store::SqliteSync, D::Error> {
    file::SqliteSyncChoice::deserialize(d).map(Into::into)
}

fn lowercase<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Vec::<String>::deserialize(d).map(|l| l.iter().map(|h| h.to_ascii_lowercase()).collect())
}

/// The `[auth]` settings (see `api::auth`).
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    /// Local use: every caller is the one local owner.
    pub disabled: bool,
    /// With `disabled`, also listen on an address that is not loopback.
    pub open_beyond_loopback: bool,
    pub keys_file: Option<std::path::PathBuf>,
    pub jwt_secret: Option<SecretString>,
    pub jwks_url: Option<String>,
    pub jwt_issuer: Option<String>,
    pub jwt_audience: Option<String>,
    pub owner_claim: String,
    /// With both a keys file and JWTs: whether token owners are their own or the keys file's.
    pub jwt_owners: JwtOwners,
    /// Per owner (0: unlimited).
    pub requests_per_minute: u32,
    /// Per client address, for requests that fail authentication.
    pub failed_auth_per_minute: u32,
    /// Per client address, every request (0: unlimited).
    pub requests_per_minute_per_address: u32,
}

/// How the owners JWTs name relate to the keys file's (`[auth] jwt_owners`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JwtOwners {
    /// Not said: with both a keys file and JWTs configured, the server does not start.
    #[default]
    Unset,
    /// A token's owner is `jwt:<claim>`: never a keys-file owner.
    Separate,
    /// A token's claim names the keys-file owner of that name.
    Shared,
}

impl JwtOwners {
    fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "" => Some(Self::Unset),
            "separate" => Some(Self::Separate),
            "shared" => Some(Self::Shared),
            _ => None,
        }
    }
}

impl AuthSettings {
    /// Whether any way to authenticate is configured besides the shared `server.api_key`.
    pub fn has_identities(&self) -> bool {
        self.keys_file.is_some() || self.jwt_secret.is_some() || self.jwks_url.is_some()
    }
}

/// Admission limits on runs (`[limits]`); zero means unlimited.
#[derive(Clone, Debug, Default)]
pub struct RunLimits {
    pub max_pending_runs: u64,
    pub owner_max_inflight_runs: u64,
    pub owner_runs_per_minute: u64,
    /// Per owner (zero: unlimited): responses held open at once, and crons.
    pub owner_max_streams: u64,
    pub owner_max_crons: u64,
    /// Bytes each owner may keep stored (zero: unlimited).
    pub owner_storage_bytes: u64,
    /// A run still going after this long is stopped with an error.
    pub run_deadline: Option<Duration>,
    /// Per owner over a rolling day (zero: unlimited).
    pub owner_daily_tokens: u64,
    pub owner_daily_usd: f64,
}

/// The `[webhooks]` settings (run-completion webhooks, sent by `runs::webhook`).
#[derive(Clone, Debug, Default)]
pub struct WebhookSettings {
    /// Signs every POST; without it runs with a webhook are refused.
    pub secret: Option<SecretString>,
    pub allow_private_targets: bool,
    pub timeout: Duration,
    pub attempts: u32,
}

impl Default for Settings {
    fn default() -> Self {
        // The compiled-in defaults always parse (a unit test holds them to it).
        match FileConfig::load(&[], &[]).and_then(|cfg| Settings::from_file(&cfg)) {
            Ok(settings) => settings,
            Err(error) => panic!("config/default.toml is invalid: {error}"),
        }
    }
}

impl Settings {
    /// The settings of every section the server reads, checked.
    pub fn from_file(cfg: &FileConfig) -> Result<Self, ConfigError> {
        if JwtOwners::parse(&cfg.auth.jwt_owners).is_none() {
            return Err(ConfigError::Invalid(format!(
                "auth.jwt_owners is \"separate\" or \"shared\", got '{}'",
                cfg.auth.jwt_owners
            )));
        }
        let mut settings = cfg.server.clone();
        settings.auth = auth_settings(&cfg.auth);
        settings.allow_run_keys = cfg.operator.allow_api_keys_from_config;
        settings.run_limits = run_limits(&cfg.limits);
        settings.telemetry = telemetry_config(&cfg.telemetry);
        settings.webhooks = WebhookSettings {
            secret: non_empty(&cfg.webhooks.signing_secret),
            allow_private_targets: cfg.webhooks.allow_private_targets,
            timeout: Duration::from_millis(cfg.webhooks.timeout_ms),
            attempts: cfg.webhooks.attempts,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Rejects settings the service cannot run with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.max_concurrent_runs == 0 {
            return bad("server.max_concurrent_runs must be at least 1");
        }
        if self.db_max_connections == 0 {
            return bad("server.db_max_connections must be at least 1");
        }
        if self.run_lease < Duration::from_secs(1) {
            return bad("server.run_lease_ms must be at least 1000");
        }
        if self.heartbeat < Duration::from_millis(100) || self.heartbeat >= self.run_lease {
            return bad("server.heartbeat_ms must be at least 100 and below run_lease_ms");
        }
        if self.poll_interval < Duration::from_millis(10) {
            return bad("server.poll_interval_ms must be at least 10");
        }
        if self.max_attempts == 0 {
            return bad("server.max_attempts must be at least 1");
        }
        if self.sweep_interval < Duration::from_millis(100) {
            return bad("server.sweep_interval_ms must be at least 100");
        }
        if !(1..=20).contains(&self.webhooks.attempts) {
            return bad("webhooks.attempts must be between 1 and 20");
        }
        if self.webhooks.timeout < Duration::from_millis(100) {
            return bad("webhooks.timeout_ms must be at least 100");
        }
        if self.header_read_timeout < Duration::from_millis(100)
            || self.body_read_timeout < Duration::from_millis(100)
        {
            return bad(
                "server.header_read_timeout_ms and body_read_timeout_ms must be at least 100",
            );
        }
        if self.max_connections == 0 {
            return bad("server.max_connections must be at least 1");
        }
        if self.first_request_timeout < Duration::from_millis(100)
            || self.idle_timeout < Duration::from_millis(100)
        {
            return bad("server.first_request_timeout_ms and idle_timeout_ms must be at least 100");
        }
        if self.http2_max_concurrent_streams == 0 {
            return bad("server.http2_max_concurrent_streams must be at least 1");
        }
        if self
            .cors_origins
            .iter()
            .any(|o| o != "*" && !o.contains("://"))
        {
            return bad(
                "server.cors_origins lists origins like \"https://app.example.com\", or \"*\"",
            );
        }
        if self.auth.owner_claim.trim().is_empty() {
            return bad("auth.owner_claim must name a claim");
        }
        if self.max_body_bytes < 1024 {
            return bad("server.max_body_bytes must be at least 1024");
        }
        Ok(())
    }

    /// The store URL actually used.
    pub fn store_url(&self) -> SecretString {
        match &self.database_url {
            Some(url) => url.clone(),
            None => SecretString::from(format!("sqlite://{}", self.sqlite_path)),
        }
    }

    /// The store URL with any password replaced, for printing.
    pub fn store_description(&self) -> String {
        redact(self.store_url().expose_secret())
    }
}

/// The `[limits]` section: a deadline of 0 is none, a negative spend cap counts as 0.
fn run_limits(l: &file::Limits) -> RunLimits {
    RunLimits {
        max_pending_runs: l.max_pending_runs,
        owner_max_inflight_runs: l.owner_max_inflight_runs,
        owner_runs_per_minute: l.owner_runs_per_minute,
        owner_max_streams: l.owner_max_streams,
        owner_max_crons: l.owner_max_crons,
        owner_storage_bytes: l.owner_storage_bytes,
        run_deadline: Some(Duration::from_secs(l.run_deadline_secs)).filter(|d| !d.is_zero()),
        owner_daily_tokens: l.owner_daily_tokens,
        owner_daily_usd: l.owner_daily_usd.max(0.0),
    }
}

/// The `[telemetry]` section: blank addresses are none, an endpoint without its last `/`.
fn telemetry_config(t: &file::Telemetry) -> TelemetryConfig {
    TelemetryConfig {
        log_format: t.log_format,
        otlp_endpoint: Some(t.otlp_endpoint.trim())
            .filter(|e| !e.is_empty())
            .map(|e| e.trim_end_matches('/').to_owned()),
        service_name: t.service_name.clone(),
        metrics: t.metrics,
        metrics_public: t.metrics_public,
        metrics_address: Some(t.metrics_address.trim().to_owned()).filter(|a| !a.is_empty()),
    }
}

fn auth_settings(a: &file::Auth) -> AuthSettings {
    let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    AuthSettings {
        disabled: a.disabled,
        open_beyond_loopback: a.open_beyond_loopback,
        keys_file: text(&a.keys_file).map(std::path::PathBuf::from),
        jwt_secret: non_empty(&a.jwt_secret),
        jwks_url: text(&a.jwks_url),
        jwt_issuer: text(&a.jwt_issuer),
        jwt_audience: text(&a.jwt_audience),
        owner_claim: a.owner_claim.trim().to_owned(),
        // Validated with the rest of the file (`validate_auth_names`).
        jwt_owners: JwtOwners::parse(&a.jwt_owners).unwrap_or_default(),
        requests_per_minute: a.requests_per_minute,
        failed_auth_per_minute: a.failed_auth_per_minute,
        requests_per_minute_per_address: a.requests_per_minute_per_address,
    }
}

/// `None` for an empty or blank secret.
pub fn non_empty(secret: &SecretString) -> Option<SecretString> {
    let text = secret.expose_secret().trim();
    (!text.is_empty()).then(|| SecretString::from(text.to_owned()))
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

    #[test]
    fn defaults_parse_and_intervals_come_from_the_file() {
        let d = Settings::default();
        assert_eq!(d.port, 2024);
        assert_eq!(d.run_lease, Duration::from_secs(30));
        let env = [
            ("DR__SERVER__RUN_LEASE_MS".to_owned(), "9000".to_owned()),
            ("DR__SERVER__HEARTBEAT_MS".to_owned(), "250".to_owned()),
            ("DR__SERVER__POLL_INTERVAL_MS".to_owned(), "50".to_owned()),
            ("DR__SERVER__API_KEY".to_owned(), "k-123".to_owned()),
        ];
        let cfg = FileConfig::load(&[], &env).unwrap();
        let s = Settings::from_file(&cfg).unwrap();
        assert_eq!(s.run_lease, Duration::from_secs(9));
        assert_eq!(s.heartbeat, Duration::from_millis(250));
        assert_eq!(s.poll_interval, Duration::from_millis(50));
        assert_eq!(s.api_key.as_ref().map(|k| k.expose_secret()), Some("k-123"));
    }

    #[test]
    fn secrets_never_print() {
        let s = Settings {
            api_key: Some(SecretString::from("k-very-secret")),
            database_url: Some(SecretString::from("postgres://u:pw-secret@db/x")),
            ..Settings::default()
        };
        let printed = format!("{s:?}");
        assert!(!printed.contains("very-secret") && !printed.contains("pw-secret"));
        assert_eq!(s.store_description(), "postgres://u:***@db/x");
    }

    #[test]
    fn impossible_intervals_are_refused() {
        let env = [("DR__SERVER__HEARTBEAT_MS".to_owned(), "60000".to_owned())];
        let cfg = FileConfig::load(&[], &env).unwrap();
        let e = Settings::from_file(&cfg).unwrap_err();
        assert!(e.to_string().contains("heartbeat_ms"), "{e}");
    }
}
