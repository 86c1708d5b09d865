//! The layered file configuration (`config/default.toml`, an optional file, `DR__…` env).

use crate::llm::{ProviderConfig, ProviderKind, ToolCalling};
use crate::research::ResearchDeps;
use crate::research::config::ResearchConfig;
use crate::research::cost::Price;
use crate::telemetry::LogFormat;
use crate::tools::{Engine, SearchConfig};
use secrecy::SecretString;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use toml::{Table, Value};

/// The defaults shipped with the binary.
pub const DEFAULTS: &str = include_str!("../../config/default.toml");

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

/// `normal` or `full` (see `store::SqliteSync`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSyncChoice {
    Normal,
    Full,
}

impl From<SqliteSyncChoice> for crate::store::SqliteSync {
    fn from(c: SqliteSyncChoice) -> Self {
        match c {
            SqliteSyncChoice::Normal => Self::Normal,
            SqliteSyncChoice::Full => Self::Full,
        }
    }
}

/// The `[telemetry]` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    pub log_format: LogFormat,
    pub otlp_endpoint: String,
    pub service_name: String,
    pub metrics: bool,
    pub metrics_public: bool,
    pub metrics_address: String,
}

/// The `[webhooks]` section: how run-completion webhooks are signed and sent.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhooks {
    /// Empty: runs with a `webhook` are refused (every webhook is signed).
    pub signing_secret: SecretString,
    pub allow_private_targets: bool,
    pub timeout_ms: u64,
    pub attempts: u32,
}

/// The `[auth]` section: who may call the API, as which owner.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    pub disabled: bool,
    pub open_beyond_loopback: bool,
    pub keys_file: String,
    pub jwt_secret: SecretString,
    pub jwks_url: String,
    pub jwt_issuer: String,
    pub jwt_audience: String,
    pub owner_claim: String,
    pub jwt_owners: String,
    pub requests_per_minute: u32,
    pub failed_auth_per_minute: u32,
    pub requests_per_minute_per_address: u32,
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
    pub max_pending_runs: u64,
    pub owner_max_inflight_runs: u64,
    pub owner_runs_per_minute: u64,
    pub owner_max_streams: u64,
    pub owner_max_crons: u64,
    pub owner_storage_bytes: u64,
    pub run_deadline_secs: u64,
    pub run_max_tokens: u64,
    pub run_max_usd: f64,
    pub owner_daily_tokens: u64,
    pub owner_daily_usd: f64,
}

/// What the operator allows runs to do.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operator {
    pub locked: Vec<String>,
    pub allow_api_keys_from_config: bool,
    pub allow_private_model_urls: bool,
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
    pub api_key: Option<SecretString>,
    #[serde(default)]
    pub api_key_env: Option<String>,
}

impl Endpoint {
    /// The base URL (its env variable wins when set) and the key (literal, else its env).
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> (String, Option<SecretString>) {
        let url = self
            .base_url_env
            .as_deref()
            .and_then(env)
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| self.base_url.clone());
        let key = self
            .api_key
            .as_ref()
            .and_then(super::non_empty)
            .or_else(|| {
                let value = self.api_key_env.as_deref().and_then(env)?;
                super::non_empty(&SecretString::from(value))
            });
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
    /// Headers sent with every call, and the same read from environment variables (for
    /// tokens kept out of files).
    #[serde(default)]
    pub headers: BTreeMap<String, SecretString>,
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// Query parameters added to every call.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Azure OpenAI's `api-version`.
    #[serde(default)]
    pub api_version: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Search {
    pub tavily: Endpoint,
    pub exa: Endpoint,
    pub brave: Endpoint,
    pub searxng: Endpoint,
    pub local: LocalSearch,
}

/// Where corpora are indexed, and how often their files are looked at again.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSearch {
    pub index_dir: String,
    pub refresh_secs: u64,
    /// A sentence-embedding model's directory: hybrid search when set, words alone when empty.
    pub embedding_model: String,
}

/// Everything `config/default.toml` describes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The `[server]` section, read as the settings it declares (the rest are the other
    /// sections': `Settings::from_file`).
    pub server: crate::config::Settings,
    pub telemetry: Telemetry,
    pub auth: Auth,
    pub webhooks: Webhooks,
    pub research: ResearchConfig,
    pub limits: Limits,
    pub operator: Operator,
    pub prompts: Prompts,
    pub search: Search,
    pub mcp: crate::tools::mcp::McpSection,
    pub providers: BTreeMap<String, Provider>,
    pub prices: BTreeMap<String, Price>,
    /// Local document collections (`search_api: "local"`), by name.
    #[serde(default)]
    pub corpora: BTreeMap<String, crate::tools::corpus::CorpusConfig>,
    /// The `[research]` keys the layers over the built-in defaults set (a file, or a
    /// `DR__RESEARCH__KEY` variable): what the operator chose, which no profile changes.
    #[serde(skip)]
    pub research_set: Vec<String>,
}

impl FileConfig {
    /// Defaults, then `extra` (a TOML file's text and its name), then `DR__SECTION__KEY`
    /// variables from `env`.
    pub fn load(layers: &[(&str, &str)], env: &[(String, String)]) -> Result<Self, ConfigError> {
        let mut table = parse(DEFAULTS, "config/default.toml")?;
        let mut research_set: Vec<String> = Vec::new();
        for (text, path) in layers {
            let layer = parse(text, path)?;
            if let Some(Value::Table(research)) = layer.get("research") {
                research_set.extend(research.keys().cloned());
            }
            merge(&mut table, layer);
        }
        for (key, value) in env {
            if let Some(path) = key.strip_prefix("DR__") {
                set_path(&mut table, path, value)?;
                if let Some(field) = path.to_ascii_lowercase().strip_prefix("research__") {
                    research_set.push(field.to_owned());
                }
            }
        }
        research_set.sort();
        research_set.dedup();
        let mut cfg: Self = Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.message().to_owned()))?;
        cfg.research.validate().map_err(ConfigError::Invalid)?;
        cfg.research_set = research_set;
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
            Some(p) => Some(
                std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.display().to_string(),
                    source,
                })?,
            ),
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
                let mut headers = p.headers.clone();
                for (header, var) in &p.headers_env {
                    if let Some(value) = env(var).filter(|v| !v.trim().is_empty()) {
                        headers.insert(header.clone(), value.into());
                    }
                }
                let cfg = ProviderConfig {
                    api_key_env: p.endpoint.api_key_env.clone(),
                    headers,
                    query: p.query.clone(),
                    api_version: p.api_version.clone(),
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

impl FileConfig {
    /// What the research nodes share across runs: providers, prompts, search, process caps.
    pub fn research_deps(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<ResearchDeps> {
        let prompts_dir = Some(self.prompts.dir.trim()).filter(|d| !d.is_empty());
        let prompts =
            crate::research::prompts::Prompts::load(prompts_dir.map(std::path::Path::new))?;
        let limits = &self.limits;
        let search = &self.search;
        let engines = [
            (Engine::Tavily, &search.tavily),
            (Engine::Exa, &search.exa),
            (Engine::Brave, &search.brave),
            (Engine::Searxng, &search.searxng),
        ];
        let search_configs = engines
            .into_iter()
            .map(|(engine, endpoint)| {
                let (base_url, api_key) = endpoint.resolve(env);
                SearchConfig {
                    engine,
                    base_url,
                    api_key,
                    api_key_env: endpoint.api_key_env.clone().unwrap_or_default(),
                    timeout: Duration::from_secs(limits.search_timeout_secs),
                    ..SearchConfig::default()
                }
            })
            .collect();
        let slots = |n: usize| Arc::new(Semaphore::new(n.max(1)));
        let http = crate::llm::http_client()?;
        let mcp_policy = self
            .mcp
            .policy(env)
            .map_err(|e| anyhow::anyhow!("[mcp] {e}"))?;
        let mcp_limits = crate::tools::mcp::Limits {
            connect_timeout: Duration::from_secs(self.mcp.connect_timeout_secs.max(1)),
            call_timeout: Duration::from_secs(self.mcp.call_timeout_secs.max(1)),
            max_result_chars: self.mcp.max_result_chars.max(100),
            ..Default::default()
        };
        Ok(ResearchDeps {
            defaults: self.research.clone(),
            operator_set: self.research_set.clone(),
            locked: self.operator.locked.clone(),
            allow_api_keys_from_config: self.operator.allow_api_keys_from_config,
            allow_private_model_urls: self.operator.allow_private_model_urls,
            spend_cap: crate::research::cost::SpendCap {
                tokens: Some(limits.run_max_tokens).filter(|t| *t > 0),
                usd: Some(limits.run_max_usd).filter(|u| *u > 0.0),
            },
            providers: {
                let configs = self.provider_configs(env);
                for (name, cfg) in &configs {
                    cfg.check_headers()
                        .map_err(|e| anyhow::anyhow!("providers.{name}.headers: {e}"))?;
                }
                crate::llm::Providers::new(configs)
            },
            prompts,
            prices: self.prices.clone(),
            search_configs,
            corpora: self.open_corpora()?,
            mcp_policy,
            mcp: Arc::new(crate::tools::mcp::McpHub::new(
                mcp_limits,
                self.mcp.allow_private_urls,
            )?),
            http,
            researcher_slots: slots(limits.max_concurrent_researchers),
            summary_slots: slots(limits.max_concurrent_summaries),
            search_slots: slots(limits.search_max_in_flight),
            model_timeout: Duration::from_secs(limits.model_timeout_secs),
            summary_timeout: Duration::from_secs(limits.summary_timeout_secs),
            retry: crate::llm::RetryPolicy::default(),
        })
    }
}

impl FileConfig {
    /// Adds `NAME=DIR` corpora (the `--corpus` flag) to the configured ones.
    pub fn add_corpora(&mut self, specs: &[String]) -> anyhow::Result<()> {
        for spec in specs {
            let (name, dir) = spec
                .split_once('=')
                .filter(|(n, d)| !n.trim().is_empty() && !d.trim().is_empty())
                .ok_or_else(|| anyhow::anyhow!("--corpus takes NAME=DIR, got '{spec}'"))?;
            let name = name.trim();
            anyhow::ensure!(
                crate::tools::corpus::valid_name(name),
                "--corpus: a corpus name is letters, digits, '-' and '_' (at most 64), got '{name}'"
            );
            self.corpora.insert(
                name.to_owned(),
                crate::tools::corpus::CorpusConfig {
                    path: dir.trim().to_owned(),
                    base_url: String::new(),
                    description: String::new(),
                },
            );
        }
        Ok(())
    }

    /// Where corpora are indexed: `[search.local] index_dir`, or beside the SQLite file.
    pub fn index_root(&self) -> std::path::PathBuf {
        let configured = self.search.local.index_dir.trim();
        if !configured.is_empty() {
            return configured.into();
        }
        let db = std::path::Path::new(self.server.sqlite_path.trim());
        db.parent()
            .unwrap_or_else(|| std::path::Path::new("."))
            .join("deep-research-index")
    }

    pub fn open_corpora(&self) -> anyhow::Result<crate::tools::corpus::Corpora> {
        if self.corpora.is_empty() {
            return Ok(crate::tools::corpus::Corpora::default());
        }
        crate::tools::corpus::Corpora::open(
            &self.corpora,
            &self.index_root(),
            Duration::from_secs(self.search.local.refresh_secs.max(1)),
            self.embedder()?,
        )
        .map_err(|e| anyhow::anyhow!("[corpora] {e}"))
    }

    /// The model `[search.local] embedding_model` names, loaded; none when it names none. It
    /// is `provider:model` when the part before the colon names one of `[providers]` (a model
    /// server's `/embeddings`), else a directory.
    pub fn embedder(&self) -> anyhow::Result<Option<Arc<crate::tools::corpus::Embedder>>> {
        use crate::tools::corpus::Embedder;
        let named = self.search.local.embedding_model.trim();
        if named.is_empty() {
            return Ok(None);
        }
        let context = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!("[search.local] embedding_model = \"{named}\": {e}")
        };
        let served = named
            .split_once(':')
            .filter(|(provider, _)| self.providers.contains_key(*provider));
        let model = match served {
            Some((name, model)) => {
                let env = |k: &str| std::env::var(k).ok();
                let mut configs = self.provider_configs(&env);
                let provider = configs
                    .remove(name)
                    .ok_or_else(|| context(&"no such provider"))?;
                if !matches!(
                    provider.kind,
                    ProviderKind::Openai | ProviderKind::OpenaiResponses
                ) {
                    return Err(context(&format!(
                        "provider '{name}' is of kind {:?}; embeddings are asked of an \
                         OpenAI-compatible /embeddings (kind openai)",
                        provider.kind
                    )));
                }
                if model.trim().is_empty() || provider.base_url.trim().is_empty() {
                    return Err(context(
                        &"name the model (provider:model) and the provider's base_url",
                    ));
                }
                Embedder::served(name, provider, model.trim()).map_err(|e| context(&e))?
            }
            None => Embedder::load(std::path::Path::new(named)).map_err(|e| context(&e))?,
        };
        Ok(Some(Arc::new(model)))
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
    use secrecy::ExposeSecret;

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
        assert!(cfg.providers.contains_key("openai") && cfg.providers.contains_key("anthropic"));
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
        assert_eq!(
            cfg.research_set,
            ["max_concurrent_research_units", "research_model"],
            "what the operator set, not what the defaults say"
        );
    }

    #[test]
    fn bad_values_are_reported() {
        let e = FileConfig::load(&[], &env(&[("DR__RESEARCH__MAX_REACT_TOOL_CALLS", "99")]))
            .unwrap_err();
        assert!(e.to_string().contains("max_react_tool_calls"), "{e}");
        let e = FileConfig::load(&[("[research]\nbogus = 1\n", "x.toml")], &[]).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e =
            FileConfig::load(&[("[operator]\nlocked = [\"nope\"]\n", "x.toml")], &[]).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    /// `provider:model` asks a configured provider's `/embeddings`; a provider that has none
    /// is refused by name, and anything else is read as a directory.
    #[test]
    fn an_embedding_model_is_a_directory_or_a_providers_model() {
        let named = |value: &str| {
            let file = format!("[search.local]\nembedding_model = \"{value}\"\n");
            let cfg = FileConfig::load(&[(&file, "x.toml")], &[]).unwrap();
            cfg.embedder().map(|m| m.map(|m| m.label().to_owned()))
        };
        assert_eq!(
            named("llamacpp:nomic-embed-text").unwrap().as_deref(),
            Some("llamacpp:nomic-embed-text")
        );
        let e = named("anthropic:claude").unwrap_err().to_string();
        assert!(
            e.contains("kind Anthropic") && e.contains("/embeddings"),
            "{e}"
        );
        let e = named("llamacpp:").unwrap_err().to_string();
        assert!(e.contains("name the model"), "{e}");
        let e = named("nowhere:model").unwrap_err().to_string();
        assert!(e.contains("config.json"), "{e}");
        assert!(named("").unwrap().is_none());
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
        assert_eq!(
            providers["openai"]
                .api_key
                .as_ref()
                .map(|k| k.expose_secret()),
            Some("sk-test")
        );
        assert!(providers["ollama"].api_key.is_none());
    }
}
