//! How research nodes call models: the run's settings, the right key, retries, token streaming
//! into the run's `messages` stream, and usage recorded in the run's cost meter.

use super::ResearchDeps;
use super::config::ResearchConfig;
use super::cost::{CostMeter, SpentEntry};
use super::events::ResearchEvent;
use super::fallbacks::{self, AgentFallback};
use super::messages::{self as msg, Message};
use super::replay;
use super::stream_fields::FieldStreamer;
use crate::graph::{NodeContext, NodeError, RunScope};
use crate::llm::ChatMessage;
use crate::llm::{
    ChatRequest, ChatResponse, Delta, LlmError, ModelName, NativeTool, ResponseSchema, RetryPolicy,
    ToolChoice, ToolSpec, chat_with_retry, structured,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// The model roles of ODR's configuration.
#[derive(Clone, Copy, Debug)]
pub enum Role {
    Research,
    Summarization,
    Compression,
    FinalReport,
}

/// A structured answer as recorded for a redo: the parsed value and the call it came from.
#[derive(Serialize, Deserialize)]
struct Answered<T> {
    value: T,
    response: ChatResponse,
}

/// One node's handle for model calls.
pub struct Caller<'a> {
    pub deps: &'a ResearchDeps,
    pub ctx: &'a NodeContext,
    pub cfg: &'a ResearchConfig,
}

/// A model error as the run reports it.
pub fn node_error(e: LlmError) -> NodeError {
    match e {
        LlmError::Cancelled => NodeError::Cancelled,
        other => NodeError::new(other.kind(), other.to_string()),
    }
}

impl<'a> Caller<'a> {
    pub fn new(deps: &'a ResearchDeps, ctx: &'a NodeContext, cfg: &'a ResearchConfig) -> Self {
        Self { deps, ctx, cfg }
    }

    fn model_for(&self, role: Role) -> (&str, u32) {
        let c = self.cfg;
        match role {
            Role::Research => (&c.research_model, c.research_model_max_tokens),
            Role::Summarization => (&c.summarization_model, c.summarization_model_max_tokens),
            Role::Compression => (&c.compression_model, c.compression_model_max_tokens),
            Role::FinalReport => (&c.final_report_model, c.final_report_model_max_tokens),
        }
    }

    /// A request for `role` with the run's key (when the operator allows run keys).
    pub fn request(&self, role: Role, messages: Vec<Message>) -> Result<ChatRequest, NodeError> {
        let (model, max_tokens) = self.model_for(role);
        let name = ModelName::parse(model).map_err(|e| NodeError::new("ConfigurationError", e))?;
        let messages = messages
            .into_iter()
            .map(|m| ChatMessage::from_langchain(m.into_value()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| NodeError::new("InvalidMessage", e))?;
        let mut req = ChatRequest::new(name, messages, max_tokens);
        req.timeout = self.deps.model_timeout;
        req.api_key = self.run_key(&req.model.provider);
        Ok(req)
    }

    fn run_key(&self, provider: &str) -> Option<secrecy::SecretString> {
        if !self.deps.allow_api_keys_from_config {
            return None;
        }
        let name = format!("{}_API_KEY", provider.to_ascii_uppercase());
        self.ctx.config()["configurable"]["apiKeys"][&name]
            .as_str()
            .filter(|k| !k.is_empty())
            .map(|k| k.to_owned().into())
    }

    fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.cfg.max_structured_output_retries.max(1),
            ..self.deps.retry
        }
    }

    /// A tool-calling or plain call. With `stream`, tokens go out as `AIMessageChunk`s.
    pub async fn call(
        &self,
        mut req: ChatRequest,
        stream: bool,
    ) -> Result<ChatResponse, NodeError> {
        let model = self.deps.providers.model(&req.model).map_err(node_error)?;
        let key = replay::model_call_key(self.ctx, &req);
        let name = req.model.to_string();
        if let Some(resp) = replay::recall::<ChatResponse>(self.ctx, &key, "model", &name).await {
            self.replayed(&name, &resp);
            return Ok(resp);
        }
        // Token streaming costs parsing work; only pay it when a client is listening.
        let stream = stream && self.ctx.wants_chunks();
        req.stream = stream;
        let ctx = self.ctx;
        let emit = move |d: Delta| {
            ctx.emit_chunk(crate::graph::messages::ai_chunk(
                &d.id,
                &d.content,
                &d.tool_call_chunks,
            ))
        };
        let on_delta: Option<&(dyn Fn(Delta) + Send + Sync)> =
            if stream { Some(&emit) } else { None };
        let pending = Abandoned::new(self, &req);
        let resp = chat_with_retry(&*model, &req, on_delta, self.policy(), self.ctx.cancelled())
            .await
            .map_err(|e| self.fail(e));
        pending.disarm();
        self.record(&name, resp.as_ref().ok());
        if let Ok(resp) = &resp {
            self.keep_spend(&name, resp.usage);
            replay::record(self.ctx, &key, resp);
        }
        resp
    }

    /// A model error as the run reports it, naming the stage of the research it stopped.
    pub fn fail(&self, e: LlmError) -> NodeError {
        match node_error(e) {
            NodeError::Failed { kind, message } => NodeError::Failed {
                kind,
                message: format!("{} stage: {message}", fallbacks::stage(&self.ctx.node)),
            },
            other => other,
        }
    }

    /// A call to an agent that acts only through tools. An answer in prose gets one corrective
    /// turn (a short instruction, and `tool_choice: required` where the endpoint honours it)
    /// before it counts as the agent's last word; that answer is returned either way.
    pub async fn act(&self, req: ChatRequest) -> Result<ChatResponse, NodeError> {
        let first = self.call(req.clone(), false).await?;
        let answer = Message::from_model(first.message.clone());
        if answer.acted() {
            return Ok(first);
        }
        let said = answer.text();
        fallbacks::record(
            self.ctx,
            AgentFallback::CorrectiveTurn.as_str(),
            &format!("answered without a tool call: {}", msg::excerpt(&said, 160)),
        );
        let names: Vec<String> = req.tools.iter().map(|t| format!("`{}`", t.name)).collect();
        let nudge = self
            .deps
            .prompts
            .render("corrective_turn", &[("tools", &names.join(", "))]);
        let mut again = req;
        again.messages.push(ChatMessage::ai_text(said));
        again.messages.push(ChatMessage::human(nudge));
        again.tool_choice = ToolChoice::Required;
        self.call(again, false).await
    }

    /// A structured-output call parsed into `T`. With `fields`, the text of those fields streams
    /// to clients as message tokens while the model writes its JSON.
    pub async fn structured<T: DeserializeOwned + Serialize>(
        &self,
        mut req: ChatRequest,
        schema: ResponseSchema,
        fields: Option<&FieldStreamer<'_>>,
    ) -> Result<T, NodeError> {
        let model = self.deps.providers.model(&req.model).map_err(node_error)?;
        req.response_schema = Some(schema);
        let key = replay::model_call_key(self.ctx, &req);
        let name = req.model.to_string();
        if let Some(done) = replay::recall::<Answered<T>>(self.ctx, &key, "model", &name).await {
            self.replayed(&name, &done.response);
            return Ok(done.value);
        }
        let fields = fields.filter(|_| self.ctx.wants_chunks());
        req.stream = fields.is_some();
        let attempts = self.cfg.max_structured_output_retries.max(1);
        let policy = RetryPolicy {
            max_attempts: 2,
            ..self.deps.retry
        };
        let push = |d: Delta| {
            if let Some(f) = fields {
                f.push(&d);
            }
        };
        let on_delta: Option<&(dyn Fn(Delta) + Send + Sync)> = fields.map(|_| &push as _);
        let model_name = req.model.to_string();
        let pending = Abandoned::new(self, &req);
        let out = structured::<T>(
            &*model,
            req,
            attempts,
            policy,
            self.ctx.cancelled(),
            on_delta,
        )
        .await;
        pending.disarm();
        match out {
            Ok((value, response)) => {
                self.record(&model_name, Some(&response));
                self.keep_spend(&model_name, response.usage);
                let done = Answered { value, response };
                replay::record(self.ctx, &key, &done);
                Ok(done.value)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn record(&self, model: &str, resp: Option<&ChatResponse>) {
        let Some(resp) = resp else { return };
        self.record_usage(model, resp.usage);
        for fallback in &resp.fallbacks {
            fallbacks::record(self.ctx, fallback.as_str(), &format!("model {model}"));
        }
    }

    /// A call replayed from its record: its tokens were counted when it was made (and are
    /// back in the meter from the step's `spend:` records); its workarounds count again.
    fn replayed(&self, model: &str, resp: &ChatResponse) {
        for fallback in &resp.fallbacks {
            fallbacks::record(self.ctx, fallback.as_str(), &format!("model {model}"));
        }
    }

    /// Records a finished call's spend for a redo of the top-level step it belongs to.
    fn keep_spend(&self, model: &str, usage: crate::llm::Usage) {
        self.ctx.record_spend(&self.spent_entry(model, usage));
    }

    fn spent_entry(&self, model: &str, usage: crate::llm::Usage) -> SpentEntry {
        SpentEntry {
            model: model.to_owned(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            usd: self.deps.prices.get(model).map(|p| p.of(usage)),
        }
    }

    /// Counts `usage` in the run's meter and tells clients.
    fn record_usage(&self, model: &str, usage: crate::llm::Usage) {
        let meter = self.ctx.scope.local::<CostMeter>();
        let totals = meter.record(model, usage, self.deps.prices.get(model).copied());
        self.ctx.scope.local::<crate::graph::Spent>().report(
            totals.input_tokens + totals.output_tokens,
            totals.estimated_usd,
        );
        if meter.first_time_over()
            && let Some(reason) = meter.over_cap()
        {
            tracing::info!(%reason, "run reached its spend cap; finishing with what it has");
            ResearchEvent::SpendCap {
                reason,
                run: totals.clone(),
            }
            .send(self.ctx);
        }
        ResearchEvent::Usage {
            node: self.ctx.node.to_string(),
            model: model.to_owned(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            run: totals,
        }
        .send(self.ctx);
    }

    /// Tool specs plus the provider-native search when configured.
    pub fn with_tools(
        &self,
        mut req: ChatRequest,
        tools: Vec<ToolSpec>,
        native: Vec<NativeTool>,
    ) -> ChatRequest {
        req.tools = tools;
        req.native_tools = native;
        req.parallel_tool_calls = true;
        req
    }
}

/// A model call whose future may be dropped before it answers (a summary cut by its timeout, a
/// run cancelled): the provider has read the prompt by then, so the call is counted at an
/// estimate of its input tokens (four characters a token) unless it is disarmed on completion.
struct Abandoned<'a> {
    caller: &'a Caller<'a>,
    model: String,
    prompt_chars: usize,
    armed: bool,
}

impl<'a> Abandoned<'a> {
    fn new(caller: &'a Caller<'a>, req: &ChatRequest) -> Self {
        let prompt_chars = crate::llm::prompt_chars(&req.messages);
        Self {
            caller,
            model: req.model.to_string(),
            prompt_chars,
            armed: true,
        }
    }

    /// The call completed (or failed on its own): it was counted, or cost nothing.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            let usage = crate::llm::Usage {
                input_tokens: (self.prompt_chars / 4) as u64,
                output_tokens: 0,
            };
            tracing::debug!(model = %self.model, input_tokens = usage.input_tokens,
                "model call abandoned; counting its prompt");
            self.caller.record_usage(&self.model, usage);
            self.caller.keep_spend(&self.model, usage);
        }
    }
}

/// The run's research settings, parsed once when the run starts (`prepare_run`): every node
/// call needs them and the run's config never changes while it runs.
#[derive(Default)]
struct RunSettings(OnceLock<Arc<ResearchConfig>>);

/// Parses the run's settings into its scope and sets its spend cap; run once per run, before
/// its first step. The settings were checked when the run was created; an error here means
/// the operator's configuration changed since.
pub fn prepare_run(deps: &ResearchDeps, scope: &RunScope) -> Result<(), String> {
    let empty = serde_json::Map::new();
    let configurable = scope.config["configurable"].as_object().unwrap_or(&empty);
    let cfg = deps.defaults.with_overrides(configurable, &deps.locked)?;
    let profile = cfg.resolved_profile(|m| deps.providers.is_local(m));
    let given = cfg.clone();
    // Locked settings are chosen: the profile leaves them as the operator has them.
    let chosen: Vec<String> = deps
        .operator_set
        .iter()
        .chain(&deps.locked)
        .cloned()
        .collect();
    let cfg = cfg.with_profile(profile, configurable, &chosen);
    cfg.validate()?;
    let changed = cfg.changed_from(&given);
    tracing::info!(
        profile = ?profile,
        changed = ?changed,
        "research settings for the run"
    );
    if let Ok(data) = serde_json::to_value(ResearchEvent::Settings { profile, changed }) {
        scope.sink.emit(crate::graph::events::GraphEvent::Custom {
            ns: String::new(),
            data,
        });
    }
    scope.local::<CostMeter>().set_cap(deps.spend_cap);
    // A run resumed in the same process keeps the settings it started with.
    let _ = scope.local::<RunSettings>().0.set(Arc::new(cfg));
    Ok(())
}

/// The run's research settings.
pub fn run_config(ctx: &NodeContext) -> Result<Arc<ResearchConfig>, NodeError> {
    ctx.scope
        .local::<RunSettings>()
        .0
        .get()
        .cloned()
        .ok_or_else(|| {
            NodeError::new(
                "ConfigurationError",
                "the run's research settings were not prepared before its first step",
            )
        })
}

/// Shared handle type for node closures.
pub type Deps = Arc<ResearchDeps>;
