//! The configured providers: which wire format each speaks, where it lives, its key, and the
//! process-wide cap on calls in flight to it; `Providers::model` builds a model for a
//! `provider:model` name. The plumbing both wire formats share is in `endpoint` and `history`.

use super::adaptive::{Adaptive, ToolMemory};
use super::anthropic::AnthropicModel;
use super::context::ContextWindows;
use super::endpoint::{Endpoint, http_client};
pub use super::endpoint::{ProviderConfig, ProviderKind, ToolCalling};
use super::gemini::GeminiModel;
use super::observed::Observed;
use super::openai::OpenAiModel;
use super::{ChatModel, LlmError, ModelName};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every configured provider, sharing one HTTP client.
#[derive(Clone)]
pub struct Providers {
    endpoints: BTreeMap<String, Arc<Endpoint>>,
    /// What each model was found to need (prompted tools, JSON in text), shared by all runs.
    memory: Arc<ToolMemory>,
    windows: Arc<ContextWindows>,
    /// Set when the HTTP client could not be built; every `model()` call then reports it, so
    /// construction itself stays infallible.
    client_error: Option<String>,
}

impl Providers {
    /// Providers by name (the `provider` part of model strings, matched case-insensitively).
    pub fn new(configs: BTreeMap<String, ProviderConfig>) -> Self {
        match http_client() {
            Ok(client) => Self {
                endpoints: configs
                    .into_iter()
                    .map(|(name, cfg)| {
                        let name = name.trim().to_ascii_lowercase();
                        let endpoint = Endpoint::new(name.clone(), cfg, client.clone());
                        (name, Arc::new(endpoint))
                    })
                    .collect(),
                memory: Arc::default(),
                windows: Arc::default(),
                client_error: None,
            },
            Err(e) => Self {
                endpoints: BTreeMap::new(),
                memory: Arc::default(),
                windows: Arc::default(),
                client_error: Some(format!("cannot build the HTTP client for model calls: {e}")),
            },
        }
    }

    /// The model a `provider:model` string names.
    pub fn model(&self, name: &ModelName) -> Result<Arc<dyn ChatModel>, LlmError> {
        if let Some(e) = &self.client_error {
            return Err(LlmError::Config(e.clone()));
        }
        let endpoint = self.endpoints.get(&name.provider).ok_or_else(|| {
            let known: Vec<&str> = self.names().collect();
            LlmError::Config(format!(
                "unknown model provider '{}' in '{name}'; configured providers: {}",
                name.provider,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        let endpoint = Arc::clone(endpoint);
        let inner: Arc<dyn ChatModel> = match endpoint.kind {
            ProviderKind::Openai | ProviderKind::OpenaiResponses | ProviderKind::AzureOpenai => {
                Arc::new(OpenAiModel::new(endpoint.clone(), &name.model))
            }
            ProviderKind::Anthropic => Arc::new(AnthropicModel::new(endpoint.clone(), &name.model)),
            ProviderKind::Gemini => Arc::new(GeminiModel::new(endpoint.clone(), &name.model)),
        };
        let adaptive = Adaptive::new(
            inner,
            name.clone(),
            endpoint.settings(),
            Arc::clone(&self.memory),
        );
        Ok(Arc::new(Observed::new(Arc::new(adaptive), name.clone())))
    }

    /// Whether `name`'s provider is a model server on the operator's own hardware (`local =
    /// true`): a small model, as a rule, that the small-model research profile suits.
    pub fn is_local(&self, name: &ModelName) -> bool {
        self.endpoints
            .get(&name.provider)
            .is_some_and(|e| e.settings().local)
    }

    /// The context window of `name` in tokens: configured, else asked of a local server once
    /// (llama.cpp `/props`, Ollama `/api/show`), else unknown.
    pub async fn context_window(&self, name: &ModelName) -> Option<u32> {
        let endpoint = self.endpoints.get(&name.provider)?;
        self.windows.get(endpoint, &name.model).await
    }

    /// Why a run could not call `name`, when that is known before it starts: the provider is
    /// not configured, or it expects a key that neither the server nor the run (`run_keys`,
    /// `{PROVIDER}_API_KEY`) has.
    pub fn check_ready(&self, name: &ModelName, run_keys: &Value) -> Result<(), String> {
        let Some(endpoint) = self.endpoints.get(&name.provider) else {
            let known: Vec<&str> = self.names().collect();
            return Err(format!(
                "unknown model provider '{}' in '{name}'; configured providers: {}",
                name.provider,
                known.join(", ")
            ));
        };
        if endpoint.base_url().trim().is_empty() {
            return Err(format!(
                "provider '{}' has no address configured{}",
                name.provider,
                match endpoint.kind {
                    ProviderKind::AzureOpenai => " (set AZURE_OPENAI_ENDPOINT)",
                    _ => "",
                }
            ));
        }
        let run_key = format!("{}_API_KEY", name.provider.to_ascii_uppercase());
        let brought = run_keys[&run_key]
            .as_str()
            .is_some_and(|k| !k.trim().is_empty());
        match &endpoint.api_key_env {
            Some(env) if !endpoint.has_key() && !brought => Err(format!(
                "provider '{}' has no API key: set {env} on the server",
                name.provider
            )),
            _ => Ok(()),
        }
    }

    /// The wire format `provider` speaks, if it is configured.
    pub fn kind(&self, provider: &str) -> Option<ProviderKind> {
        self.endpoints
            .get(&provider.trim().to_ascii_lowercase())
            .map(|e| e.kind)
    }

    /// The configured provider names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.endpoints.keys().map(String::as_str)
    }

    /// Whether `provider` is configured at an internal address (loopback, private network,
    /// link-local), as its base URL is written.
    pub fn is_internal(&self, provider: &str) -> bool {
        self.endpoints
            .get(&provider.trim().to_ascii_lowercase())
            .is_some_and(|e| crate::outbound::names_internal_host(e.base_url()))
    }

    /// HTTP attempts to `provider` running right now (0 for an unknown provider).
    pub fn in_flight(&self, provider: &str) -> usize {
        self.endpoints
            .get(&provider.to_ascii_lowercase())
            .map_or(0, |e| e.in_flight())
    }
}
