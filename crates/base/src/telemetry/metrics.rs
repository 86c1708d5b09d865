//! Prometheus metrics: every name, label and unit in one place, recorded through the `metrics`
//! facade (a no-op until `install` sets the recorder) and rendered by `GET /metrics`.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `dr_runs_finished_total` | counter | `graph_id`, `status` |
//! | `dr_runs_running` | gauge | — |
//! | `dr_runs_pending` | gauge (read at scrape) | — |
//! | `dr_run_queue_wait_seconds` | histogram | `graph_id` |
//! | `dr_run_duration_seconds` | histogram | `graph_id`, `status` |
//! | `dr_node_duration_seconds` | histogram | `graph_id`, `node` |
//! | `dr_model_calls_total` | counter | `provider`, `model`, `outcome` (`ok` or the error class) |
//! | `dr_model_call_duration_seconds` | histogram | `provider`, `model` |
//! | `dr_model_tokens_total` | counter | `provider`, `model`, `direction` (`input`/`output`) |
//! | `dr_model_cost_usd_total` | counter | `provider`, `model` (priced models only) |
//! | `dr_search_calls_total` | counter | `api`, `outcome` |
//! | `dr_search_duration_seconds` | histogram | `api` |
//! | `dr_sse_subscribers` | gauge | — |
//! | `dr_store_operation_duration_seconds` | histogram | `operation` |
//! | `dr_http_requests_total` | counter | `method`, `route`, `status` |
//! | `dr_http_request_duration_seconds` | histogram | `method`, `route` |
//!
//! Every label takes values from a bounded set, since anyone may read `/metrics` and a run may
//! name any model: `provider` and `model` are the operator's (configured providers; default,
//! priced and listed models) or `other`; `method` is a standard method or `other`; `route` is a
//! route template or `unmatched`; graphs, nodes, outcomes and search APIs are the code's own.

use metrics::{Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Seconds, from a fast store write to an hour-long run.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Sets the process-wide recorder once; later calls return the same handle. `None` when another
/// recorder was installed first (the metrics then go there).
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new().set_buckets(BUCKETS).ok()?;
            match builder.install_recorder() {
                Ok(handle) => {
                    upkeep(handle.clone());
                    Some(handle)
                }
                Err(error) => {
                    tracing::warn!(%error, "metrics recorder not installed");
                    None
                }
            }
        })
        .as_ref()
}

/// Histograms keep their raw samples until upkeep folds them into buckets: without it a server
/// nobody scrapes would hold every sample. A plain thread, so no runtime is needed to install.
fn upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(5));
                handle.run_upkeep();
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "metrics upkeep thread not started");
    }
}

/// The Prometheus text exposition of every metric recorded so far.
pub fn render() -> Option<String> {
    let handle = HANDLE.get()?.as_ref()?;
    handle.run_upkeep();
    Some(handle.render())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A run was claimed by a worker after waiting `waited` in the queue.
pub fn run_started(graph_id: &str, waited: Duration) {
    gauge!("dr_runs_running").increment(1.0);
    histogram!("dr_run_queue_wait_seconds", "graph_id" => graph_id.to_owned()).record(secs(waited));
}

/// A run this worker executed ended with `status` after `took`.
pub fn run_finished(graph_id: &str, status: &str, took: Duration) {
    gauge!("dr_runs_running").decrement(1.0);
    let labels = [
        ("graph_id", graph_id.to_owned()),
        ("status", status.to_owned()),
    ];
    counter!("dr_runs_finished_total", &labels).increment(1);
    histogram!("dr_run_duration_seconds", &labels).record(secs(took));
}

/// Runs waiting to start (read from the store when `/metrics` is scraped).
pub fn runs_pending(count: u64) {
    gauge!("dr_runs_pending").set(count as f64);
}

/// One node (or subgraph node) finished.
pub fn node_finished(graph_id: &str, node: &str, took: Duration) {
    histogram!("dr_node_duration_seconds",
        "graph_id" => graph_id.to_owned(), "node" => node.to_owned())
    .record(secs(took));
}

/// The providers and `provider:model` names the operator configured: the only values the
/// `provider` and `model` labels take (anything else is `other`).
static NAMED: RwLock<Option<Named>> = RwLock::new(None);

#[derive(Default)]
struct Named {
    providers: HashSet<String>,
    models: HashSet<String>,
}

/// Adds the operator's providers and models (`provider:model`) to those labels may name.
pub fn name_models<'a>(
    providers: impl IntoIterator<Item = &'a str>,
    models: impl IntoIterator<Item = &'a str>,
) {
    let mut named = NAMED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let named = named.get_or_insert_with(Named::default);
    named
        .providers
        .extend(providers.into_iter().map(str::to_owned));
    named.models.extend(models.into_iter().map(str::to_owned));
}

/// The `provider` and `model` label values for a call: the names themselves when the operator
/// named them, `other` otherwise.
fn model_labels(provider: &str, model: &str) -> (String, String) {
    let named = NAMED
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(named) = named.as_ref() else {
        return ("other".into(), "other".into());
    };
    let provider_label = if named.providers.contains(provider) {
        provider.to_owned()
    } else {
        "other".to_owned()
    };
    let model_label = if named.models.contains(&format!("{provider}:{model}")) {
        model.to_owned()
    } else {
        "other".to_owned()
    };
    (provider_label, model_label)
}

/// One model call: `outcome` is `ok` or the error class.
pub fn model_call(provider: &str, model: &str, outcome: &str, took: Duration) {
    let (provider, model) = model_labels(provider, model);
    let (provider, model) = (provider.as_str(), model.as_str());
    let who = [
        ("provider", provider.to_owned()),
        ("model", model.to_owned()),
    ];
    counter!("dr_model_calls_total",
        "provider" => provider.to_owned(), "model" => model.to_owned(), "outcome" => outcome.to_owned())
    .increment(1);
    histogram!("dr_model_call_duration_seconds", &who).record(secs(took));
}

/// Tokens one call used.
pub fn model_tokens(provider: &str, model: &str, input: u64, output: u64) {
    let (provider, model) = model_labels(provider, model);
    for (direction, n) in [("input", input), ("output", output)] {
        counter!("dr_model_tokens_total",
            "provider" => provider.to_owned(), "model" => model.to_owned(), "direction" => direction)
        .increment(n);
    }
}

/// The estimated cost of one call of a priced model (`provider:model` as the price table
/// names it).
pub fn model_cost(model: &str, usd: f64) {
    let (provider, name) = model.split_once(':').unwrap_or(("", model));
    let (provider, name) = model_labels(provider, name);
    // Counters are integers in the facade; the USD total is a gauge that only grows.
    gauge!("dr_model_cost_usd_total",
        "provider" => provider.to_owned(), "model" => name.to_owned())
    .increment(usd);
}

/// One search request.
pub fn search_call(api: &str, outcome: &str, took: Duration) {
    counter!("dr_search_calls_total", "api" => api.to_owned(), "outcome" => outcome.to_owned())
        .increment(1);
    histogram!("dr_search_duration_seconds", "api" => api.to_owned()).record(secs(took));
}

/// Counts an open SSE stream while it lives.
pub struct SseSubscriber(());

impl SseSubscriber {
    pub fn open() -> Self {
        gauge!("dr_sse_subscribers").increment(1.0);
        Self(())
    }
}

impl Drop for SseSubscriber {
    fn drop(&mut self) {
        gauge!("dr_sse_subscribers").decrement(1.0);
    }
}

/// Times one store operation from creation to drop.
/// A store call this slow is logged.
const SLOW_STORE_CALL: std::time::Duration = std::time::Duration::from_secs(1);

pub struct StoreTimer {
    operation: &'static str,
    started: Instant,
}

impl StoreTimer {
    pub fn start(operation: &'static str) -> Self {
        Self {
            operation,
            started: Instant::now(),
        }
    }
}

impl Drop for StoreTimer {
    fn drop(&mut self) {
        // Store calls are the hottest path recorded (hundreds per run): each thread keeps the
        // handle per operation instead of looking the series up in the registry every time.
        thread_local! {
            static HANDLES: RefCell<HashMap<&'static str, Histogram>> = RefCell::new(HashMap::new());
        }
        let elapsed = self.started.elapsed();
        // Named by operation: sqlx's own slow-statement warning (off, see `store::sql`) printed
        // whole statements, hundreds of kilobytes for a search over many ids.
        if elapsed >= SLOW_STORE_CALL {
            tracing::warn!(
                operation = self.operation,
                ms = elapsed.as_millis() as u64,
                "slow store call"
            );
        }
        let took = secs(elapsed);
        HANDLES.with(|handles| {
            handles
                .borrow_mut()
                .entry(self.operation)
                .or_insert_with(|| {
                    histogram!("dr_store_operation_duration_seconds", "operation" => self.operation)
                })
                .record(took);
        });
    }
}

/// One HTTP request, labelled by its route template (`/threads/{thread_id}/runs`), never by
/// the raw path.
pub fn http_request(method: &str, route: &str, status: u16, took: Duration) {
    // hyper accepts any token as a method; only the standard ones become labels.
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    let method = if STANDARD.contains(&method) {
        method
    } else {
        "other"
    };
    counter!("dr_http_requests_total",
        "method" => method.to_owned(), "route" => route.to_owned(), "status" => status.to_string())
    .increment(1);
    histogram!("dr_http_request_duration_seconds",
        "method" => method.to_owned(), "route" => route.to_owned())
    .record(secs(took));
}
