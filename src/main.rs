//! The `deep-research` command: serve the API, print the OpenAPI document, or check health.

use anyhow::Context;
use clap::{Parser, Subcommand};
use deep_research::app::Application;
use deep_research::config::Settings;
use deep_research::config::file::FileConfig;
use deep_research::graph::Registry;
use deep_research::research::ResearchDeps;
use deep_research::store::SqliteSync;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "deep-research",
    version,
    about = "Open Deep Research as a LangGraph-compatible service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Serve(ServeArgs),
    /// Print the OpenAPI document (what /openapi.json serves).
    Openapi,
    /// Print the default configuration (config/default.toml) with every knob documented.
    PrintConfig,
    /// Run one research here, showing progress, and write the report to a file.
    Research(ResearchCmd),
    /// Exit 0 when the server on PORT answers /ok (for container health checks).
    Healthcheck {
        #[arg(long, env = "PORT", default_value_t = 2024)]
        port: u16,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "PORT", default_value_t = 2024)]
    port: u16,
    /// Postgres URL (postgres://user:pass@host/db); without it a SQLite file is used.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// The SQLite file used when no DATABASE_URL is set.
    #[arg(long, env = "DR_SQLITE_PATH", default_value = "deep-research.db")]
    sqlite_path: String,
    /// SQLite commits: `normal` returns once a commit is in the write-ahead log (a power cut
    /// may lose the last ones), `full` waits for fsync on every commit.
    #[arg(long, env = "DR_SQLITE_SYNC", default_value = "normal", value_parser = ["normal", "full"])]
    sqlite_sync: String,
    /// Runs executing at once in this process.
    #[arg(long, env = "DR_MAX_CONCURRENT_RUNS", default_value_t = 64)]
    max_concurrent_runs: usize,
    /// Database connections in the pool.
    #[arg(long, env = "DR_DB_MAX_CONNECTIONS", default_value_t = 10)]
    db_max_connections: u32,
    /// Require this key in the x-api-key header.
    #[arg(long, env = "DR_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "DR_MAX_BODY_BYTES", default_value_t = 10 * 1024 * 1024)]
    max_body_bytes: usize,
    /// A TOML file layered over config/default.toml (research knobs, providers, limits, prices).
    #[arg(long, env = "DR_CONFIG")]
    config: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct ResearchCmd {
    /// The research question.
    question: String,
    /// Where to write the report (Markdown).
    #[arg(long, short, default_value = "report.md")]
    output: std::path::PathBuf,
    /// Use this `provider:model` for every model role (research, summaries, compression, report).
    #[arg(long)]
    model: Option<String>,
    /// The SQLite file that keeps the thread (so it can be inspected or continued later).
    #[arg(long, env = "DR_SQLITE_PATH", default_value = "deep-research.db")]
    sqlite_path: String,
    /// A TOML file layered over config/default.toml.
    #[arg(long, env = "DR_CONFIG")]
    config: Option<std::path::PathBuf>,
}

impl ServeArgs {
    fn settings(&self) -> Settings {
        Settings {
            host: self.host.clone(),
            port: self.port,
            database_url: self.database_url.clone().filter(|u| !u.trim().is_empty()),
            sqlite_path: self.sqlite_path.clone(),
            sqlite_sync: if self.sqlite_sync == "full" {
                SqliteSync::Full
            } else {
                SqliteSync::Normal
            },
            db_max_connections: self.db_max_connections,
            max_concurrent_runs: self.max_concurrent_runs,
            api_key: self.api_key.clone().filter(|k| !k.is_empty()),
            max_body_bytes: self.max_body_bytes,
            ..Settings::default()
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("deep_research=info,tower_http=warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    match Cli::parse().command {
        Command::Serve(args) => {
            let registry = research_registry(args.config.as_deref())?;
            serve(args.settings(), registry).await
        }
        Command::Research(cmd) => research(cmd).await,
        Command::PrintConfig => {
            print!("{}", deep_research::config::file::DEFAULTS);
            Ok(())
        }
        Command::Openapi => {
            println!("{}", deep_research::api::openapi::document());
            Ok(())
        }
        Command::Healthcheck { port } => healthcheck(port).await,
    }
}

/// The graphs `serve` offers: the research graph, configured from the layered config files.
fn research_registry(config: Option<&std::path::Path>) -> anyhow::Result<Registry> {
    let cfg = FileConfig::load_from(config)?;
    let env = |k: &str| std::env::var(k).ok();
    let deps =
        ResearchDeps::from_config(&cfg, &env).context("could not set up the research graph")?;
    let mut registry = Registry::new();
    deep_research::research::register(&mut registry, Arc::new(deps));
    Ok(registry)
}

async fn serve(settings: Settings, registry: Registry) -> anyhow::Result<()> {
    let store = settings.store_description();
    let app = Application::build(settings, registry)
        .await
        .context("could not start the service")?;
    let addr = app.local_addr()?;
    println!("deep-research listening on http://{addr} (store: {store})");
    let token = app.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        token.cancel();
    });
    app.run_until_stopped().await
}

async fn research(cmd: ResearchCmd) -> anyhow::Result<()> {
    let registry = research_registry(cmd.config.as_deref())?;
    let settings = Settings {
        port: 0,
        database_url: None,
        sqlite_path: cmd.sqlite_path.clone(),
        ..Settings::default()
    };
    let app = Application::build(settings, registry).await?;
    let base = format!("http://{}", app.local_addr()?);
    let token = app.shutdown_token();
    let server = tokio::spawn(app.run_until_stopped());
    let configurable = match &cmd.model {
        Some(m) => serde_json::json!({"research_model": m, "summarization_model": m,
                                      "compression_model": m, "final_report_model": m}),
        None => serde_json::json!({}),
    };
    let args = deep_research::cli::ResearchArgs {
        question: cmd.question.clone(),
        output: cmd.output.clone(),
        configurable,
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let result = deep_research::cli::research(&base, &args, &mut input, &mut out).await;
    token.cancel();
    let _ = server.await;
    result
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// A minimal HTTP/1.1 GET of /ok, so the runtime image needs no curl.
async fn healthcheck(port: u16) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await??;
    stream
        .write_all(b"GET /ok HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await?;
    anyhow::ensure!(head.starts_with(b"HTTP/1.1 200"), "server is not healthy");
    Ok(())
}
