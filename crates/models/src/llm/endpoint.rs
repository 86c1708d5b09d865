//! One provider's settings and endpoint (address, key, slots, timeout), the HTTP client, and
//! what both wire formats share on the way back: error classification from status and body.

use super::LlmError;
use reqwest::header::HeaderMap;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI chat completions (OpenAI and every compatible endpoint).
    Openai,
    /// Anthropic messages API.
    Anthropic,
    /// OpenAI's Responses API for every call (models served only there). OpenAI chat models
    /// use it anyway for a call that needs OpenAI's web search.
    OpenaiResponses,
    /// Google's Gemini API (`generateContent`), key in `x-goog-api-key`.
    Gemini,
    /// Azure OpenAI: chat completions at `{base}/openai/deployments/{model}/…` with an
    /// `api-version` and an `api-key` header (the model name is the deployment's).
    AzureOpenai,
}

/// How tools are offered to a provider's models.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCalling {
    /// Native `tools` first; what a model needs instead (prompted tools after its server failed
    /// to parse a call) is learned on the first failure and remembered per model.
    #[default]
    Auto,
    /// Always the API's `tools` field (calls written as text are still recovered).
    Native,
    /// Tools described in the system prompt, calls read from the answer's text.
    Prompted,
}

/// One provider's settings.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// e.g. `https://api.openai.com/v1` or `https://api.anthropic.com`.
    pub base_url: String,
    pub api_key: Option<SecretString>,
    /// Calls to this provider in flight at once, across all runs of the process.
    pub max_in_flight: usize,
    pub tool_calling: ToolCalling,
    /// A model server on the operator's own hardware (Ollama, llama.cpp, vLLM, LM Studio): its
    /// calls always stream, so a runaway answer is stopped early, and its context window is
    /// asked of the server.
    pub local: bool,
    /// The context window in tokens, when the operator knows it (else asked of a local server).
    pub context_window: Option<u32>,
    /// A cap on output tokens for every call to this provider, whatever a role asks for.
    pub max_output_tokens: Option<u32>,
    /// The variable the key comes from, named when it is missing.
    pub api_key_env: Option<String>,
    /// Headers sent with every call (a gateway's or an organisation's).
    pub headers: BTreeMap<String, SecretString>,
    /// Query parameters added to every call.
    pub query: BTreeMap<String, String>,
    /// Azure OpenAI's `api-version`.
    pub api_version: Option<String>,
}

impl ProviderConfig {
    /// An endpoint with the defaults of the optional settings.
    pub fn new(kind: ProviderKind, base_url: &str, api_key: Option<SecretString>) -> Self {
        Self {
            kind,
            base_url: base_url.to_owned(),
            api_key,
            max_in_flight: 16,
            tool_calling: ToolCalling::Auto,
            local: false,
            context_window: None,
            max_output_tokens: None,
            api_key_env: None,
            headers: BTreeMap::new(),
            query: BTreeMap::new(),
            api_version: None,
        }
    }

    /// What is wrong with the extra headers, if anything (checked when the config is read).
    pub fn check_headers(&self) -> Result<(), String> {
        for (name, value) in &self.headers {
            reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("'{name}' is not a valid header name"))?;
            reqwest::header::HeaderValue::from_str(value.expose_secret())
                .map_err(|_| format!("the value of header '{name}' is not valid"))?;
        }
        Ok(())
    }
}

/// The HTTP client of every provider and search call. Idle connections beyond a few dozen per
/// host are closed: each pooled HTTP/1 connection keeps the read buffer it grew while
/// streaming (up to 400 KB), and a burst of parallel summaries would otherwise leave thousands.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    crate::outbound::client_builder()
        .connect_timeout(Duration::from_secs(15))
        .pool_max_idle_per_host(32)
        .user_agent(concat!("deep-research/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// A request body at its exact size. Serializing grows a buffer by doubling, so up to half of
/// it can be unused, and a body lives for the whole call (reqwest keeps it for redirects):
/// a burst of page summaries holds thousands at once.
pub(super) fn exact_body(mut bytes: Vec<u8>) -> bytes::Bytes {
    bytes.shrink_to_fit();
    bytes::Bytes::from(bytes)
}

/// One provider as the clients see it: address, key, shared HTTP client and its slots.
pub(super) struct Endpoint {
    pub name: String,
    pub kind: ProviderKind,
    base_url: String,
    api_key: Option<SecretString>,
    pub api_key_env: Option<String>,
    pub api_version: Option<String>,
    /// Extra headers (marked sensitive, so they never print) and query parameters.
    headers: HeaderMap,
    query: Vec<(String, String)>,
    client: reqwest::Client,
    slots: Semaphore,
    max_in_flight: usize,
    settings: EndpointSettings,
}

/// The per-provider settings the adaptive client and the context probe read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EndpointSettings {
    pub tool_calling: ToolCalling,
    pub local: bool,
    pub context_window: Option<u32>,
    pub max_output_tokens: Option<u32>,
}

impl Endpoint {
    pub(super) fn new(name: String, cfg: ProviderConfig, client: reqwest::Client) -> Self {
        // A zero cap would block every call forever; treat it as "one at a time".
        let max_in_flight = cfg.max_in_flight.max(1);
        let mut headers = HeaderMap::new();
        for (name, value) in &cfg.headers {
            // Checked when the configuration was read; a bad one is left out here.
            if let (Ok(name), Ok(mut value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(value.expose_secret()),
            ) {
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        Self {
            api_key_env: cfg.api_key_env.clone(),
            api_version: cfg.api_version.clone(),
            headers,
            query: cfg.query.clone().into_iter().collect(),
            name,
            kind: cfg.kind,
            base_url: cfg.base_url.trim_end_matches('/').to_owned(),
            api_key: cfg.api_key,
            client,
            slots: Semaphore::new(max_in_flight),
            max_in_flight,
            settings: EndpointSettings {
                tool_calling: cfg.tool_calling,
                local: cfg.local,
                context_window: cfg.context_window,
                max_output_tokens: cfg.max_output_tokens,
            },
        }
    }

    pub fn settings(&self) -> EndpointSettings {
        self.settings
    }

    pub fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.with_extras(self.client.get(url))
    }

    /// The operator's extra headers and query parameters on a request.
    fn with_extras(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.headers(self.headers.clone());
        if self.query.is_empty() {
            request
        } else {
            request.query(&self.query)
        }
    }

    /// Whether calls can be made without a key from the run: a key is configured, or none is
    /// expected (a local server).
    pub fn has_key(&self) -> bool {
        self.api_key(None).is_some()
    }

    pub(super) fn in_flight(&self) -> usize {
        self.max_in_flight
            .saturating_sub(self.slots.available_permits())
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The request's own key wins over the provider's; empty keys count as none.
    pub fn api_key<'a>(&'a self, request_key: Option<&'a str>) -> Option<&'a str> {
        request_key.filter(|k| !k.trim().is_empty()).or(self
            .api_key
            .as_ref()
            .map(|k| k.expose_secret())
            .filter(|k| !k.trim().is_empty()))
    }

    pub fn post(&self, url: &str) -> reqwest::RequestBuilder {
        self.with_extras(self.client.post(url))
    }

    /// Runs one attempt holding a slot. The timeout starts once the slot is held, so waiting
    /// behind the per-provider cap never turns into a spurious timeout.
    pub async fn attempt<T>(
        &self,
        timeout: Duration,
        work: impl Future<Output = Result<T, LlmError>>,
    ) -> Result<T, LlmError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| LlmError::Config(format!("provider '{}' is closed", self.name)))?;
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(LlmError::Transient {
                    provider: self.name.clone(),
                    message: format!("no complete answer within {} ms", timeout.as_millis()),
                })
            })
    }

    /// Sends the request; a non-2xx answer becomes a classified error.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
        cx: &ErrorContext<'_>,
    ) -> Result<reqwest::Response, LlmError> {
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap_or_default();
        Err(classify(cx, status, &headers, &body))
    }

    /// Reads a whole JSON success body.
    pub async fn read_json(&self, response: reqwest::Response) -> Result<Value, LlmError> {
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| self.invalid(format!("body is not JSON: {e}")))
    }

    pub fn transport_error(&self, e: &reqwest::Error) -> LlmError {
        if e.is_builder() {
            return LlmError::Config(format!(
                "cannot call provider '{}': {}",
                self.name,
                without_url(e)
            ));
        }
        LlmError::Transient {
            provider: self.name.clone(),
            message: format!("request failed: {}", without_url(e)),
        }
    }

    pub fn sse_error(&self, e: reqwest::Error) -> LlmError {
        self.transport_error(&e)
    }

    pub fn invalid(&self, message: String) -> LlmError {
        LlmError::InvalidResponse {
            provider: self.name.clone(),
            message: truncate(&message, MAX_MESSAGE),
        }
    }
}

/// A reqwest error's text with its sources, without the URL: errors reach clients, and the
/// address of a provider (an internal one, say) is the operator's business.
pub fn without_url(e: &reqwest::Error) -> String {
    let text = error_chain(e);
    match e.url() {
        Some(url) => text
            .replace(&format!(" for url ({url})"), "")
            .replace(url.as_str(), "(the provider)"),
        None => text,
    }
}

/// `e` and its sources, since reqwest's top-level text hides the cause ("connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The longest provider error text kept in an `LlmError`.
const MAX_MESSAGE: usize = 500;

/// Who failed, for error messages; `secret` is scrubbed from any text a provider echoes back.
pub(super) struct ErrorContext<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub secret: Option<&'a str>,
}

/// Turns an HTTP error answer into the error class that decides whether to retry.
pub(super) fn classify(
    cx: &ErrorContext<'_>,
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> LlmError {
    let (text, code) = error_details(body);
    let mut message = format!("HTTP {status}: {}", truncate(&text, MAX_MESSAGE));
    if let Some(secret) = cx.secret.filter(|s| s.len() >= 4) {
        message = message.replace(secret, "[REDACTED]");
    }
    let provider = cx.provider.to_owned();
    match status {
        // Rate limits first: their text often mentions tokens, which must not read as overflow.
        429 => LlmError::RateLimited {
            provider,
            retry_after: retry_after(headers),
            message,
        },
        401 | 403 => LlmError::Auth { provider, message },
        400 | 413 | 422 if is_context_overflow(&text, &code) => LlmError::ContextOverflow {
            model: format!("{provider}:{}", cx.model),
            message,
        },
        500 if is_tool_format_failure(&text) => LlmError::ToolFormat { provider, message },
        // 408 is the server giving up on a slow request: worth another try, like a 5xx.
        408 | 500..=599 => LlmError::Transient { provider, message },
        400..=499 => LlmError::BadRequest { provider, message },
        _ => LlmError::InvalidResponse { provider, message },
    }
}

/// The error text and code from the usual body shapes: OpenAI/Anthropic
/// `{"error":{"message","code"|"type"}}`, `{"error":"…"}` (Ollama), `{"message"|"detail":"…"}`.
fn error_details(body: &str) -> (String, String) {
    let raw = || {
        let trimmed = body.trim();
        if trimmed.is_empty() {
            "(empty body)".to_owned()
        } else {
            trimmed.to_owned()
        }
    };
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        return (raw(), String::new());
    };
    let error = &value["error"];
    let text = [
        &error["message"],
        error,
        &value["message"],
        &value["detail"],
    ]
    .into_iter()
    .find_map(|v| v.as_str().map(str::to_owned))
    .unwrap_or_else(raw);
    let code = [&error["code"], &error["type"]]
        .into_iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    (text, code)
}

fn is_context_overflow(text: &str, code: &str) -> bool {
    const SIGNS: [&str; 9] = [
        "context_length_exceeded",
        // llama.cpp: `exceed_context_size_error`, "the request exceeds the available context size"
        "exceed_context_size",
        "exceeds the available context size",
        "maximum context length",
        "prompt is too long",
        "too many tokens",
        "context length",
        "context window",
        "reduce the length of the messages",
    ];
    let haystack = format!("{code} {text}").to_lowercase();
    SIGNS.iter().any(|sign| haystack.contains(sign))
}

/// A model server's own parser failing on what the model wrote: llama.cpp ("The model produced
/// output that does not match the expected peg-native format", "Failed to parse tool call"),
/// Ollama ("error parsing tool call"), vLLM's tool parsers.
fn is_tool_format_failure(text: &str) -> bool {
    const SIGNS: [&str; 6] = [
        "does not match the expected",
        "failed to parse tool call",
        "error parsing tool call",
        "tool call parser",
        "failed to parse input",
        "failed to parse grammar",
    ];
    let haystack = text.to_lowercase();
    SIGNS.iter().any(|sign| haystack.contains(sign))
}

/// How long a 429 asks us to wait: `retry-after-ms`, or `Retry-After` in seconds or as an
/// HTTP-date.
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let seconds = |text: &str| {
        text.parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
    };
    if let Some(wait) = header("retry-after-ms").and_then(seconds) {
        return Some(wait / 1000);
    }
    let value = header("retry-after")?;
    if let Some(wait) = seconds(value) {
        return Some(wait);
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        when.signed_duration_since(chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// At most `max` characters of `text`, marked when cut.
pub(super) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn cx() -> ErrorContext<'static> {
        ErrorContext {
            provider: "openai",
            model: "gpt",
            secret: Some("sk-secret-key"),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn statuses_map_to_error_classes() {
        let none = HeaderMap::new();
        let overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            classify(&cx(), 400, &none, overflow),
            LlmError::ContextOverflow { .. }
        ));
        let long = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            classify(&cx(), 400, &none, long),
            LlmError::ContextOverflow { .. }
        ));
        assert!(matches!(
            classify(&cx(), 429, &none, overflow),
            LlmError::RateLimited { .. }
        ));
        assert!(matches!(
            classify(&cx(), 400, &none, "{}"),
            LlmError::BadRequest { .. }
        ));
        assert!(matches!(
            classify(&cx(), 404, &none, "nope"),
            LlmError::BadRequest { .. }
        ));
        assert!(matches!(
            classify(&cx(), 401, &none, ""),
            LlmError::Auth { .. }
        ));
        assert!(matches!(
            classify(&cx(), 403, &none, ""),
            LlmError::Auth { .. }
        ));
        assert!(matches!(
            classify(&cx(), 503, &none, ""),
            LlmError::Transient { .. }
        ));
        assert!(matches!(
            classify(&cx(), 529, &none, ""),
            LlmError::Transient { .. }
        ));
        let llama = r#"{"error":{"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}}"#;
        let e = classify(&cx(), 500, &none, llama);
        assert!(matches!(e, LlmError::ToolFormat { .. }), "{e:?}");
        assert!(
            !e.is_retryable(),
            "the same request would fail the same way"
        );
        let ollama = r#"{"error":"error parsing tool call: raw='I will search'"}"#;
        assert!(matches!(
            classify(&cx(), 500, &none, ollama),
            LlmError::ToolFormat { .. }
        ));
    }

    #[test]
    fn error_text_is_kept_short_and_without_the_key() {
        let body = format!(
            r#"{{"error":"bad key sk-secret-key {}"}}"#,
            "x".repeat(2000)
        );
        let LlmError::Auth { message, .. } = classify(&cx(), 401, &HeaderMap::new(), &body) else {
            panic!("expected Auth");
        };
        assert!(!message.contains("sk-secret-key"), "{message}");
        assert!(message.contains("[REDACTED]"));
        assert!(message.chars().count() < 600);
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "250"), ("retry-after", "9")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(Duration::ZERO)
        );
        let soon = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let wait = retry_after(&headers(&[("retry-after", &soon)])).unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn transport_errors_do_not_show_the_providers_address() {
        // A port nothing listens on: connection refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(9);
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        let Err(e) = crate::outbound::client_builder()
            .build()
            .unwrap()
            .post(&url)
            .send()
            .await
        else {
            panic!("nothing listens there");
        };
        let text = without_url(&e);
        assert!(!text.contains("127.0.0.1"), "{text}");
        assert!(text.contains("error sending request"), "{text}");
    }
}
