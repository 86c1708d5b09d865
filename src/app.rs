//! Start-up and shutdown: bind, open and migrate the store, register the system assistants,
//! start the workers, serve until the shutdown token fires.

use crate::api::{self, AppState};
use crate::config::Settings;
use crate::graph::Registry;
use crate::runs::Runner;
use crate::store::{self, IfExists, Store};
use crate::stream::Bus;
use crate::time::Timestamp;
use secrecy::ExposeSecret;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A bound, migrated, ready-to-serve service.
pub struct Application {
    listener: TcpListener,
    /// `[telemetry] metrics_address`, when metrics have an address of their own.
    metrics_listener: Option<TcpListener>,
    state: AppState,
    workers: Vec<JoinHandle<()>>,
}

impl Application {
    /// Binds `settings.host:port` (port 0 picks a free one), opens the store and starts workers.
    pub async fn build(settings: Settings, registry: Registry) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((settings.host.as_str(), settings.port)).await?;
        let store: Arc<dyn Store> = Arc::new(
            store::SqlStore::open(
                settings.store_url().expose_secret(),
                &store::StoreOptions {
                    max_connections: settings.db_max_connections,
                    sqlite_sync: settings.sqlite_sync,
                    statement_timeout: settings.statement_timeout,
                },
            )
            .await?,
        );
        Self::with_store(listener, store, settings, registry).await
    }

    /// Like `build`, with a store and listener the caller made (tests).
    pub async fn with_store(
        listener: TcpListener,
        store: Arc<dyn Store>,
        settings: Settings,
        registry: Registry,
    ) -> anyhow::Result<Self> {
        // Before the first store call, so every series is recorded.
        if settings.telemetry.metrics {
            crate::telemetry::metrics::install();
        }
        let now = Timestamp::now();
        for graph_id in registry.ids() {
            let assistant = api::system_assistant(graph_id, now);
            store
                .create_assistant(&assistant, IfExists::DoNothing)
                .await?;
        }
        let auth = Arc::new(api::auth::Authenticator::from_settings(&settings)?);
        let open = settings.api_key.is_none() && !settings.auth.has_identities();
        if open && !is_loopback(&settings.host) {
            if !settings.auth.open_beyond_loopback {
                return Err(api::auth::AuthSetupError::OpenBeyondLoopback {
                    host: settings.host.clone(),
                }
                .into());
            }
            tracing::warn!(host = %settings.host, "authentication is disabled on a non-loopback \
                address: anyone who can reach it acts as the one local owner");
        }
        let admission = Arc::new(api::Admission::new(
            &settings.run_limits,
            auth.separates_owners(),
        ));
        let metrics_listener = match &settings.telemetry.metrics_address {
            Some(address) => Some(TcpListener::bind(address.as_str()).await.map_err(|e| {
                anyhow::anyhow!("could not listen on [telemetry] metrics_address {address}: {e}")
            })?),
            None => None,
        };
        let settings = Arc::new(settings);
        let shutdown = CancellationToken::new();
        let bus = Bus::new();
        let runner = Runner::new(
            store.clone(),
            bus.clone(),
            registry.clone(),
            settings.clone(),
            shutdown.clone(),
        );
        let workers = runner.spawn_workers();
        let state = AppState {
            store,
            bus,
            registry,
            runner,
            settings,
            auth,
            admission,
            shutdown,
        };
        Ok(Self {
            listener,
            metrics_listener,
            state,
            workers,
        })
    }

    /// Where the server listens.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Where `/metrics` is served when it has an address of its own.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The token that stops the server, its streams and its workers.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.state.shutdown.clone()
    }

    /// The shared state (tests reach the store through it).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves (and starts crons' runs) until the shutdown token is cancelled, then waits for
    /// the workers and the cron scheduler to stop.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let token = self.state.shutdown.clone();
        let scheduler = tokio::spawn(api::run_scheduler(self.state.clone()));
        let metrics = self.metrics_listener.map(|listener| {
            let router = api::metrics_router(self.state.clone());
            let stop = token.clone();
            tokio::spawn(async move {
                let served = axum::serve(listener, router)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
                if let Err(error) = served {
                    tracing::error!(%error, "the metrics listener stopped");
                }
            })
        });
        let limits = crate::serve::ConnectionLimits {
            max_connections: self.state.settings.max_connections,
            max_connections_per_address: self.state.settings.max_connections_per_address,
            header_read_timeout: self.state.settings.header_read_timeout,
            first_request_timeout: self.state.settings.first_request_timeout,
            idle_timeout: self.state.settings.idle_timeout,
            http2_max_concurrent_streams: self.state.settings.http2_max_concurrent_streams,
        };
        let app = api::router(self.state);
        crate::serve::serve(self.listener, app, limits, token).await;
        for worker in self.workers.into_iter().chain([scheduler]).chain(metrics) {
            if let Err(error) = worker.await {
                tracing::error!(%error, "a background task ended abnormally");
            }
        }
        Ok(())
    }
}

/// Whether `host` (as configured to bind) is a loopback address or name.
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
