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
    /// How long a SQLite commit waits for the disk.
    pub sqlite_sync: crate::store::SqliteSync,
    /// Process-wide bound on concurrently executing runs (the worker count).
    pub max_concurrent_runs: usize,
    /// How long a claimed run stays ours without a renewal.
    pub run_lease: Duration,
    /// Interval of SSE `: heartbeat` comments and `/wait` keep-alive newlines.
    pub heartbeat: Duration,
    /// How often one idle worker looks for runs nothing woke it for (delayed runs, runs created
    /// by other replicas).
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
            sqlite_sync: crate::store::SqliteSync::Normal,
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

/// The layered file configuration (`config/default.toml`, an optional file, `DR__…` env).
pub mod file {
    use crate::llm::{ProviderConfig, ProviderKind, ToolCalling};
    use crate::research::config::ResearchConfig;
    use serde::Deserialize;
    use std::collections::BTreeMap;
    use toml::{Table, Value};

    /// The defaults shipped with the binary.
    pub const DEFAULTS: &str = include_str!("../config/default.toml");

    /// Why the configuration could not be loaded.
    #[derive(Debug, thiserror::Error)]
    pub enum ConfigError {
        #[error("could not read {path}: {source}")]
        Read {
            path: String,
            source: std::io::Error,
        },
        #[error("invalid TOML in {path}: {message}")]
        Parse { path: String, message: String },
        #[error("invalid configuration: {0}")]
        Invalid(String),
    }

    /// Process-wide limits.
    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Limits {
        pub max_concurrent_researchers: usize,
        pub max_concurrent_summaries: usize,
        pub search_max_in_flight: usize,
        pub model_timeout_secs: u64,
        pub summary_timeout_secs: u64,
        pub search_timeout_secs: u64,
    }

    /// What the operator allows runs to do.
    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Operator {
        pub locked: Vec<String>,
        pub allow_api_keys_from_config: bool,
    }

    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Prompts {
        pub dir: String,
    }

    /// An endpoint whose URL and key may come from named environment variables.
    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Endpoint {
        pub base_url: String,
        #[serde(default)]
        pub base_url_env: Option<String>,
        #[serde(default)]
        pub api_key: Option<String>,
        #[serde(default)]
        pub api_key_env: Option<String>,
    }

    impl Endpoint {
        /// The base URL (its env variable wins when set) and the key (literal, else its env).
        pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> (String, Option<String>) {
            let url = self
                .base_url_env
                .as_deref()
                .and_then(env)
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| self.base_url.clone());
            let key = self
                .api_key
                .clone()
                .or_else(|| self.api_key_env.as_deref().and_then(env))
                .filter(|v| !v.trim().is_empty());
            (url.trim_end_matches('/').to_owned(), key)
        }
    }

    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Provider {
        pub kind: ProviderKind,
        #[serde(flatten)]
        pub endpoint: Endpoint,
        pub max_in_flight: usize,
        /// auto | native | prompted
        #[serde(default)]
        pub tool_calling: ToolCalling,
        /// A model server on the operator's own hardware (see `ProviderConfig::local`).
        #[serde(default)]
        pub local: bool,
        #[serde(default)]
        pub context_window: Option<u32>,
        #[serde(default)]
        pub max_output_tokens: Option<u32>,
    }

    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Search {
        pub tavily: Endpoint,
    }

    /// USD per million tokens.
    #[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    pub struct Price {
        pub input: f64,
        pub output: f64,
    }

    /// Everything `config/default.toml` describes.
    #[derive(Clone, Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct FileConfig {
        pub research: ResearchConfig,
        pub limits: Limits,
        pub operator: Operator,
        pub prompts: Prompts,
        pub search: Search,
        pub providers: BTreeMap<String, Provider>,
        pub prices: BTreeMap<String, Price>,
    }

    impl FileConfig {
        /// Defaults, then `extra` (a TOML file's text and its name), then `DR__SECTION__KEY`
        /// variables from `env`.
        pub fn load(
            layers: &[(&str, &str)],
            env: &[(String, String)],
        ) -> Result<Self, ConfigError> {
            let mut table = parse(DEFAULTS, "config/default.toml")?;
            for (text, path) in layers {
                merge(&mut table, parse(text, path)?);
            }
            for (key, value) in env {
                if let Some(path) = key.strip_prefix("DR__") {
                    set_path(&mut table, path, value)?;
                }
            }
            let cfg: Self = Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid(e.message().to_owned()))?;
            cfg.research.validate().map_err(ConfigError::Invalid)?;
            for key in &cfg.operator.locked {
                if serde_json::to_value(&cfg.research)
                    .ok()
                    .and_then(|v| v.get(key).cloned())
                    .is_none()
                {
                    return Err(ConfigError::Invalid(format!(
                        "operator.locked: unknown research key '{key}'"
                    )));
                }
            }
            Ok(cfg)
        }

        /// Reads `path` if given, plus the process environment.
        pub fn load_from(path: Option<&std::path::Path>) -> Result<Self, ConfigError> {
            let text = match path {
                Some(p) => {
                    Some(
                        std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                            path: p.display().to_string(),
                            source,
                        })?,
                    )
                }
                None => None,
            };
            let name = path.map(|p| p.display().to_string()).unwrap_or_default();
            let env: Vec<(String, String)> = std::env::vars().collect();
            let layers: Vec<(&str, &str)> = text
                .as_deref()
                .map(|t| (t, name.as_str()))
                .into_iter()
                .collect();
            Self::load(&layers, &env)
        }

        /// Provider settings with URLs and keys resolved from `env`.
        pub fn provider_configs(
            &self,
            env: &dyn Fn(&str) -> Option<String>,
        ) -> BTreeMap<String, ProviderConfig> {
            self.providers
                .iter()
                .map(|(name, p)| {
                    let (base_url, api_key) = p.endpoint.resolve(env);
                    let cfg = ProviderConfig {
                        max_in_flight: p.max_in_flight.max(1),
                        tool_calling: p.tool_calling,
                        local: p.local,
                        context_window: p.context_window,
                        max_output_tokens: p.max_output_tokens,
                        ..ProviderConfig::new(p.kind, &base_url, api_key)
                    };
                    (name.clone(), cfg)
                })
                .collect()
        }
    }

    fn parse(text: &str, path: &str) -> Result<Table, ConfigError> {
        text.parse::<Table>().map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// Deep-merges `over` into `base` (tables merge, everything else replaces).
    fn merge(base: &mut Table, over: Table) {
        for (key, value) in over {
            match (base.get_mut(&key), value) {
                (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
                (_, v) => {
                    base.insert(key, v);
                }
            }
        }
    }

    /// Sets `SECTION__KEY` (lower-cased) to `raw` read as a TOML value, or as text.
    fn set_path(table: &mut Table, path: &str, raw: &str) -> Result<(), ConfigError> {
        let parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
        let Some((last, sections)) = parts.split_last() else {
            return Ok(());
        };
        let mut node = table;
        for section in sections {
            let entry = node
                .entry(section.clone())
                .or_insert_with(|| Value::Table(Table::new()));
            node = match entry {
                Value::Table(t) => t,
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "DR__{path}: '{section}' is not a section"
                    )));
                }
            };
        }
        let value = format!("v = {raw}")
            .parse::<Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| Value::String(raw.to_owned()));
        node.insert(last.clone(), value);
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }

        #[test]
        fn defaults_load_and_layers_apply_in_order() {
            let cfg = FileConfig::load(&[], &[]).unwrap();
            assert_eq!(cfg.research, ResearchConfig::default());
            assert!(
                cfg.providers.contains_key("openai") && cfg.providers.contains_key("anthropic")
            );
            let file = "[research]\nmax_concurrent_research_units = 2\n[limits]\nmax_concurrent_summaries = 3\n";
            let cfg = FileConfig::load(
                &[(file, "x.toml")],
                &env(&[
                    ("DR__RESEARCH__MAX_CONCURRENT_RESEARCH_UNITS", "4"),
                    ("DR__RESEARCH__RESEARCH_MODEL", "ollama:qwen3"),
                ]),
            )
            .unwrap();
            assert_eq!(
                cfg.research.max_concurrent_research_units, 4,
                "env beats the file"
            );
            assert_eq!(
                cfg.limits.max_concurrent_summaries, 3,
                "the file beats the defaults"
            );
            assert_eq!(cfg.research.research_model, "ollama:qwen3");
        }

        #[test]
        fn bad_values_are_reported() {
            let e = FileConfig::load(&[], &env(&[("DR__RESEARCH__MAX_REACT_TOOL_CALLS", "99")]))
                .unwrap_err();
            assert!(e.to_string().contains("max_react_tool_calls"), "{e}");
            let e = FileConfig::load(&[("[research]\nbogus = 1\n", "x.toml")], &[]).unwrap_err();
            assert!(e.to_string().contains("bogus"), "{e}");
            let e = FileConfig::load(&[("[operator]\nlocked = [\"nope\"]\n", "x.toml")], &[])
                .unwrap_err();
            assert!(e.to_string().contains("nope"), "{e}");
        }

        #[test]
        fn endpoint_env_overrides_url_and_supplies_key() {
            let cfg = FileConfig::load(&[], &[]).unwrap();
            let lookup = |k: &str| match k {
                "OPENAI_BASE_URL" => Some("http://127.0.0.1:9/v1/".to_owned()),
                "OPENAI_API_KEY" => Some("sk-test".to_owned()),
                _ => None,
            };
            let providers = cfg.provider_configs(&lookup);
            assert_eq!(providers["openai"].base_url, "http://127.0.0.1:9/v1");
            assert_eq!(providers["openai"].api_key.as_deref(), Some("sk-test"));
            assert_eq!(providers["ollama"].api_key, None);
        }
    }
}
