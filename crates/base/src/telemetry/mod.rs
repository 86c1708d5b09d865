//! How the service reports on itself: log lines (text or JSON), OpenTelemetry traces over
//! OTLP/HTTP when an endpoint is configured, and Prometheus metrics for `/metrics`.
//!
//! Spans are plain `tracing` spans; the OpenTelemetry layer turns them into trace spans. A run is
//! one trace (its root span is opened by the worker, not by the request that created it, because
//! runs outlive requests); nodes, model calls (GenAI semantic conventions) and searches are its
//! children. Metric names are listed in `metrics.rs` next to the code that records them.

pub mod metrics;

use async_trait::async_trait;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::io::IsTerminal;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Log lines as text (colours only on a terminal) or as one JSON object each.
#[derive(Clone, Copy, Debug, Default, serde::Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// How the service reports on itself (`[telemetry]` in the configuration).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TelemetryConfig {
    pub log_format: LogFormat,
    /// OTLP/HTTP traces endpoint (`http://collector:4318`); `None` exports no traces.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported traces.
    pub service_name: String,
    /// Serve Prometheus metrics at `/metrics`, to anyone (`metrics_public`) or to callers with
    /// credentials.
    pub metrics: bool,
    pub metrics_public: bool,
    /// Serve `/metrics` on this address of its own instead of the API's port.
    pub metrics_address: Option<String>,
}

/// The filter when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "deep_research=info,tower_http=warn";

/// Keeps the trace exporter alive; `shutdown` flushes what it still holds.
#[must_use = "traces are flushed when the guard shuts down"]
pub struct TelemetryGuard {
    tracer: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Sends the spans still buffered and stops the exporter. The exporter's thread sends
    /// through the Tokio runtime, so the blocking shutdown runs off the runtime's workers.
    pub async fn shutdown(self) {
        let Some(provider) = self.tracer else {
            return;
        };
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("could not flush traces: {error}"),
            Err(error) => eprintln!("could not flush traces: {error}"),
        }
    }
}

/// Installs logging, the trace exporter (when configured) and the metrics recorder.
pub fn init(cfg: &TelemetryConfig) -> anyhow::Result<TelemetryGuard> {
    let tracer = match &cfg.otlp_endpoint {
        Some(endpoint) => Some(tracer_provider(endpoint, &cfg.service_name)?),
        None => None,
    };
    let otel = tracer.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("deep-research"))
            .with_filter(EnvFilter::new("deep_research=info"))
    });
    let registry = tracing_subscriber::registry().with(otel);
    // `try_init` fails only when a subscriber is already set (tests); keep that one.
    let _ = match cfg.log_format {
        LogFormat::Json => registry.with(json_logs()).try_init(),
        LogFormat::Text => registry.with(text_logs()).try_init(),
    };
    if cfg.metrics {
        metrics::install();
    }
    Ok(TelemetryGuard { tracer })
}

/// Logging alone (the `research` command).
pub fn init_logs(format: LogFormat) {
    let registry = tracing_subscriber::registry();
    let _ = match format {
        LogFormat::Json => registry.with(json_logs()).try_init(),
        LogFormat::Text => registry.with(text_logs()).try_init(),
    };
}

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
}

/// Human-readable lines on stderr; colour codes only when stderr is a terminal.
fn text_logs<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter())
}

/// One JSON object per line on stderr, with the fields of the enclosing spans (route, run id).
fn json_logs<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .with_filter(filter())
}

/// An OTLP/HTTP (protobuf) exporter to `endpoint`, batching spans.
fn tracer_provider(endpoint: &str, service: &str) -> anyhow::Result<SdkTracerProvider> {
    let url = if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    };
    let client = OtlpHttp {
        client: crate::outbound::client_builder()
            .timeout(Duration::from_secs(10))
            .build()?,
        runtime: tokio::runtime::Handle::try_current()?,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(url)
        .with_timeout(Duration::from_secs(10))
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service.to_owned())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The exporter's HTTP client: our reqwest, run on the service's Tokio runtime (the batch
/// processor exports from a thread of its own, where no runtime is entered).
#[derive(Debug)]
struct OtlpHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let send = async move {
            let response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            let headers = response.headers().clone();
            let bytes = response.bytes().await?;
            let mut out = Response::builder().status(status).body(bytes)?;
            *out.headers_mut() = headers;
            Ok::<_, HttpError>(out)
        };
        self.runtime.spawn(send).await?
    }
}
