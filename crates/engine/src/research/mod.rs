//! The deep-research graph: Open Deep Research's behaviour (clarify → brief → supervisor with
//! parallel researchers → final report) on the graph runtime, with ODR's defects fixed: errors are
//! reported instead of swallowed, per-run settings beat the environment, rate limits are never
//! taken for context overflow, tokens stream, and reports cite only what searches returned.

pub mod citations;
pub mod config;
mod context_budget;
pub mod cost;
pub mod events;
pub mod fallbacks;
mod main_graph;
mod messages;
mod metering;
mod model;
mod plan_review;
pub mod progress;
pub mod prompts;
mod raw_findings;
mod replay;
mod report;
mod researcher;
pub mod state;
mod stream_fields;
mod supervisor;
pub mod support;

use crate::graph::{ConfigCheck, Registry, Schemas};
use crate::llm::{Providers, RetryPolicy};
use crate::tools::{Engine, SearchConfig, WebSearch};
use config::{ResearchConfig, SearchApi};
use cost::Price;
use prompts::Prompts;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The graph id clients use.
pub const GRAPH_ID: &str = "deep_research";
/// ODR's graph id, so its clients and configs work unchanged.
pub const ODR_GRAPH_ID: &str = "Deep Researcher";

/// Everything the research nodes share across runs.
pub struct ResearchDeps {
    pub defaults: ResearchConfig,
    /// The research settings the operator's own configuration sets (beyond the built-in
    /// defaults): the small-model profile leaves them as set.
    pub operator_set: Vec<String>,
    pub locked: Vec<String>,
    pub allow_api_keys_from_config: bool,
    /// Runs may choose models of providers on internal addresses.
    pub allow_private_model_urls: bool,
    /// What one run may spend before it stops with a partial report.
    pub spend_cap: cost::SpendCap,
    pub providers: Providers,
    pub prompts: Prompts,
    pub prices: BTreeMap<String, Price>,
    /// How to reach each search engine (one per `Engine`).
    pub search_configs: Vec<SearchConfig>,
    /// The operator's document corpora (`search_api: "local"`).
    pub corpora: crate::tools::corpus::Corpora,
    /// The MCP servers runs may use, and the connections to them.
    pub mcp_policy: crate::tools::mcp::McpPolicy,
    pub mcp: Arc<crate::tools::mcp::McpHub>,
    pub http: reqwest::Client,
    /// Process-wide caps.
    pub researcher_slots: Arc<Semaphore>,
    pub summary_slots: Arc<Semaphore>,
    pub search_slots: Arc<Semaphore>,
    pub model_timeout: Duration,
    pub summary_timeout: Duration,
    pub retry: RetryPolicy,
}

impl ResearchDeps {
    /// A client of `engine`, with the run's own key when the operator allows run keys.
    pub fn web_search(&self, engine: Engine, run_key: Option<String>) -> Option<WebSearch> {
        let mut config = self
            .search_configs
            .iter()
            .find(|c| c.engine == engine)?
            .clone();
        if let Some(key) = run_key.filter(|_| self.allow_api_keys_from_config) {
            config.api_key = Some(key.into());
        }
        Some(WebSearch::new(
            config,
            self.http.clone(),
            self.search_slots.clone(),
        ))
    }

    /// Why runs cannot search with `engine` on this server, when that is known before the run
    /// (SearXNG has no public instance to fall back on).
    fn search_unavailable(&self, engine: Engine) -> Option<String> {
        let config = self.search_configs.iter().find(|c| c.engine == engine)?;
        (engine == Engine::Searxng && config.base_url.trim().is_empty()).then(|| {
            "config.configurable.search_api: 'searxng' needs the address of your SearXNG \
             ([search.searxng] base_url, or SEARXNG_URL)"
                .to_owned()
        })
    }
}

/// Registers the research graph under its id and ODR's.
pub fn register(registry: &mut Registry, deps: Arc<ResearchDeps>) {
    let d = &deps.defaults;
    let defaults = [
        &d.research_model,
        &d.summarization_model,
        &d.compression_model,
        &d.final_report_model,
    ];
    crate::telemetry::metrics::name_models(
        deps.providers.names(),
        defaults
            .into_iter()
            .map(String::as_str)
            .chain(deps.prices.keys().map(String::as_str)),
    );
    for id in [GRAPH_ID, ODR_GRAPH_ID] {
        registry.register(main_graph::build(id, deps.clone()));
    }
}

/// Rejects bad `configurable` values before a run is created.
fn config_check(deps: &Arc<ResearchDeps>) -> ConfigCheck {
    let deps = deps.clone();
    Arc::new(move |config: &Value| {
        let configurable = config["configurable"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let cfg = deps.defaults.with_overrides(&configurable, &deps.locked)?;
        if cfg.search_api == SearchApi::Local {
            deps.corpora.pick(&cfg.corpus)?;
        }
        if let Some(why) = cfg
            .search_api
            .engine()
            .and_then(|e| deps.search_unavailable(e))
        {
            return Err(why);
        }
        // A run (an assistant is checked without: its runs may bring keys) must be able to
        // call its models and its search engine.
        if configurable.contains_key("run_id") {
            let run_keys = configurable
                .get("apiKeys")
                .filter(|_| deps.allow_api_keys_from_config)
                .cloned()
                .unwrap_or(Value::Null);
            check_ready(&deps, &cfg, &run_keys)?;
        }
        check_private_models(&deps, &cfg)?;
        let mcp_config = configurable.get("mcp_config").unwrap_or(&Value::Null);
        crate::tools::mcp::spec::resolve(&deps.mcp_policy, mcp_config).map(|_| ())
    })
}

/// Each role's model names a configured provider with a key, and the search engine has one.
fn check_ready(deps: &ResearchDeps, cfg: &ResearchConfig, run_keys: &Value) -> Result<(), String> {
    check_native_search(deps, cfg)?;
    for (field, model, _) in cfg.models() {
        let name = crate::llm::ModelName::parse(model)
            .map_err(|e| format!("config.configurable.{field}: {e}"))?;
        deps.providers
            .check_ready(&name, run_keys)
            .map_err(|e| format!("config.configurable.{field}: {e}"))?;
    }
    if let Some(engine) = cfg.search_api.engine()
        && let Some(config) = deps.search_configs.iter().find(|c| c.engine == engine)
        && engine.needs_key()
        && config.api_key.is_none()
        && run_keys[engine.run_key()]
            .as_str()
            .is_none_or(|k| k.trim().is_empty())
    {
        return Err(format!(
            "config.configurable.search_api: {} needs an API key: set {} on the server",
            engine.name(),
            config.api_key_env
        ));
    }
    Ok(())
}

/// A model's own web search exists only on its provider: OpenAI's (Responses API) for
/// `openai`, Anthropic's for `anthropic`.
fn check_native_search(deps: &ResearchDeps, cfg: &ResearchConfig) -> Result<(), String> {
    use crate::llm::ProviderKind;
    let wanted: &[ProviderKind] = match cfg.search_api {
        SearchApi::Openai => &[ProviderKind::Openai, ProviderKind::OpenaiResponses],
        SearchApi::Anthropic => &[ProviderKind::Anthropic],
        SearchApi::Google => &[ProviderKind::Gemini],
        _ => return Ok(()),
    };
    let provider = cfg
        .research_model
        .split_once(':')
        .map_or(cfg.research_model.as_str(), |(p, _)| p);
    match deps.providers.kind(provider) {
        Some(kind) if wanted.contains(&kind) => Ok(()),
        _ => Err(format!(
            "config.configurable.search_api: '{}' is the research model's own web search, \
             which '{}' does not have; use an {} research model, or another search_api",
            serde_json::to_value(cfg.search_api)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            cfg.research_model,
            match cfg.search_api {
                SearchApi::Openai => "OpenAI",
                SearchApi::Google => "Gemini",
                _ => "Anthropic",
            }
        )),
    }
}

/// A run may not choose a model on a provider at a private or loopback address (unless the
/// operator allows it): such a provider is the operator's to pick, as a default.
fn check_private_models(deps: &ResearchDeps, cfg: &ResearchConfig) -> Result<(), String> {
    if deps.allow_private_model_urls {
        return Ok(());
    }
    let defaults = deps.defaults.models();
    for ((role, name, _), (_, default, _)) in cfg.models().into_iter().zip(defaults) {
        if name == default {
            continue;
        }
        let provider = name.split_once(':').map_or(name, |(p, _)| p);
        if deps.providers.is_internal(provider) {
            return Err(format!(
                "{role}: provider '{provider}' is on a private or loopback address, which this \
                 server does not let runs choose ([operator] allow_private_model_urls)"
            ));
        }
    }
    Ok(())
}

/// The arguments of `think_tool`.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // Read as JSON: a small model's arguments are taken leniently.
struct Think {
    /// Your reflection
    reflection: String,
}

/// `ResearchComplete` takes no arguments.
#[derive(schemars::JsonSchema)]
struct NoArguments {}

fn think_tool() -> crate::llm::ToolSpec {
    crate::llm::ToolSpec::of::<Think>(
        "think_tool",
        "Record a reflection on the research so far: what was found, what is missing, what to do next.",
    )
}

fn research_complete_tool() -> crate::llm::ToolSpec {
    crate::llm::ToolSpec::of::<NoArguments>(
        "ResearchComplete",
        "Signal that the research is complete.",
    )
}

/// Each setting with its kind, the operator's default, what it does and the values it takes,
/// so Studio's and other clients' forms are useful.
fn config_properties(deps: &ResearchDeps) -> serde_json::Map<String, Value> {
    let defaults = serde_json::to_value(&deps.defaults).unwrap_or_else(|_| json!({}));
    config::SETTINGS
        .iter()
        .map(|s| {
            let default = defaults.get(s.name).cloned().unwrap_or(Value::Null);
            let kind = match default {
                Value::Bool(_) => "boolean",
                Value::Number(_) => "integer",
                _ => "string",
            };
            let mut prop =
                json!({"type": kind, "default": default, "description": s.description()});
            if let Some(map) = prop.as_object_mut() {
                if let Some((lo, hi)) = s.range {
                    map.insert("minimum".into(), json!(lo));
                    map.insert("maximum".into(), json!(hi));
                }
                if !s.choices.is_empty() {
                    map.insert("enum".into(), json!(s.choices));
                }
                // The corpora are this server's: a form can offer them.
                if s.name == "corpus" {
                    let mut names = vec![""];
                    names.extend(deps.corpora.names());
                    map.insert("enum".into(), json!(names));
                }
                if deps.locked.iter().any(|l| l == s.name) {
                    map.insert("readOnly".into(), json!(true));
                }
            }
            (s.name.to_owned(), prop)
        })
        .collect()
}

/// `mcp_config`: both shapes it takes, and the servers this deployment offers.
fn mcp_config_schema(policy: &crate::tools::mcp::McpPolicy) -> Value {
    let names: Vec<&String> = policy.servers.keys().collect();
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let server = json!({"type": "object", "additionalProperties": false, "properties": {
        "url": {"type": "string", "description": "A streamable-HTTP server of the run's own \
                (only where the operator allows it). Leave out to use the configured server \
                of this name."},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "tools": {"type": "array", "items": {"type": "string"},
                  "description": "The tools to offer (a configured server's allow-list can \
                                  only be narrowed)."},
        "transport": {"type": "string", "enum": ["streamable_http"]}}});
    let mut servers = json!({"type": "object", "additionalProperties": server,
        "description": "Named servers, as MCP clients write them."});
    if !names.is_empty() && !policy.allow_run_servers {
        servers["propertyNames"] = json!({"enum": names});
    }
    json!({
        "type": ["object", "null"],
        "default": null,
        "description": format!(
            "MCP tool servers for the researchers: {{\"mcpServers\": {{name: {{...}}}}}}, or Open \
             Deep Research's {{\"url\", \"tools\"}}. Configured here: {}. Runs {} bring \
             their own streamable-HTTP servers.",
            if names.is_empty() { "none".to_owned() } else {
                names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ") },
            if policy.allow_run_servers { "may" } else { "may not" }
        ),
        "properties": {
            "mcpServers": servers,
            "url": {"type": "string", "description": "Open Deep Research's single server: its \
                    base URL (/mcp is appended)."},
            "tools": strings,
            "auth_required": {"type": "boolean", "description": "Not supported (true is refused): \
                              give credentials as headers."}
        },
        "x_oap_ui_config": {"type": "mcp"}
    })
}

fn schemas(deps: &ResearchDeps) -> Schemas {
    let messages = json!({"type": "array", "items": {"type": "object"}});
    let state = crate::graph::schema_of::<state::AgentState>();
    let mut config_props = config_properties(deps);
    config_props.insert("mcp_config".into(), mcp_config_schema(&deps.mcp_policy));
    Schemas {
        input: json!({"title": "AgentInputState", "type": "object",
                      "properties": {"messages": messages}, "required": ["messages"]}),
        output: state.clone(),
        state,
        config: json!({"title": "Configuration", "type": "object", "properties": config_props}),
    }
}
