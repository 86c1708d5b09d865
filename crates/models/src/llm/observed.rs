//! Every model call seen from outside: a span named after the GenAI semantic conventions
//! (`chat {model}` with `gen_ai.*` attributes: provider, model, token counts, finish reason) and
//! the call, latency, token and error metrics. Wraps each provider model, outside the adaptive
//! ladder, so a call that needed a fallback still counts once.

use super::{ChatModel, ChatRequest, ChatResponse, LlmError, ModelName, OnDelta};
use crate::telemetry::metrics;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Instant;

/// A chat model whose calls are traced and counted.
pub struct Observed {
    inner: Arc<dyn ChatModel>,
    name: ModelName,
}

impl Observed {
    pub fn new(inner: Arc<dyn ChatModel>, name: ModelName) -> Self {
        Self { inner, name }
    }
}

#[async_trait]
impl ChatModel for Observed {
    #[tracing::instrument(name = "chat", skip_all, fields(
        otel.name = %format!("chat {}", self.name.model), otel.kind = "client",
        gen_ai.operation.name = "chat", gen_ai.provider.name = %self.name.provider,
        gen_ai.request.model = %self.name.model, gen_ai.request.max_tokens = req.max_tokens,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        error.type = tracing::field::Empty))]
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let ModelName { provider, model } = &self.name;
        let started = Instant::now();
        let answer = self.inner.chat(req, on_delta).await;
        let span = tracing::Span::current();
        let took = started.elapsed();
        match &answer {
            Ok(response) => {
                let usage = response.usage;
                span.record("gen_ai.usage.input_tokens", usage.input_tokens);
                span.record("gen_ai.usage.output_tokens", usage.output_tokens);
                span.record(
                    "gen_ai.response.finish_reasons",
                    response.finish_reason.as_str(),
                );
                metrics::model_call(provider, model, "ok", took);
                metrics::model_tokens(provider, model, usage.input_tokens, usage.output_tokens);
            }
            Err(error) => {
                span.record("error.type", error.kind());
                metrics::model_call(provider, model, error.kind(), took);
                tracing::debug!(parent: &span, %error, "model call failed");
            }
        }
        answer
    }
}
