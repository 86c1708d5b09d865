//! The `deep-research` command: serve the API, print the OpenAPI document, or check health.

use anyhow::Context;
use clap::{Parser, Subcommand};
use deep_research::app::Application;
use deep_research::config::file::{FileConfig, SqliteSyncChoice};
use deep_research::config::{Settings, non_empty};
use deep_research::graph::Registry;
use deep_research::telemetry::{self, LogFormat};
use secrecy::SecretString;
use std::sync::Arc;
use std::time::Duration;

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
    /// Run a question set against a corpus and a model and score each run (or compare two
    /// result files with --compare).
    Eval(EvalCmd),
    /// Search a corpus as the researchers do and print the ranked sections.
    Search(SearchCmd),
    /// Print a new API key for an owner, and the entry for the [auth] keys_file that accepts
    /// it (only its SHA-256 is stored).
    NewKey {
        /// Whose key: the owner its threads, runs, crons and store items belong to.
        #[arg(long)]
        owner: String,
    },
    /// Seal every stored value again under DR_ENCRYPTION_KEY, in the current format (bound to
    /// its row), including values stored before encryption was on; then retired keys can
    /// leave DR_ENCRYPTION_PREVIOUS_KEYS. Safe while the server runs.
    Reseal {
        /// A TOML file layered over config/default.toml (for the store).
        #[arg(long, env = "DR_CONFIG")]
        config: Option<std::path::PathBuf>,
        /// The Postgres store, as `serve` takes it.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        /// The SQLite file, when no database URL is given.
        #[arg(long, env = "DR_SQLITE_PATH")]
        sqlite_path: Option<String>,
    },
    /// Exit 0 when the server on PORT answers /ok (for container health checks).
    Healthcheck {
        #[arg(long, env = "PORT", default_value_t = 2024)]
        port: u16,
    },
}

/// Flags of `serve`. Each one left out keeps the value from the config layers (`[server]` in
/// config/default.toml, a `--config` file, `DR__SERVER__*` variables).
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on [server.host].
    #[arg(long, env = "HOST")]
    host: Option<String>,
    /// Port to listen on, 0 picks a free one [server.port].
    #[arg(long, env = "PORT")]
    port: Option<u16>,
    /// Postgres URL (postgres://user:pass@host/db); without it a SQLite file is used.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The SQLite file used when no DATABASE_URL is set [server.sqlite_path].
    #[arg(long, env = "DR_SQLITE_PATH")]
    sqlite_path: Option<String>,
    /// SQLite commits: `normal` returns once a commit is in the write-ahead log (a power cut
    /// may lose the last ones), `full` waits for fsync on every commit.
    #[arg(long, env = "DR_SQLITE_SYNC", value_enum)]
    sqlite_sync: Option<SqliteSyncChoice>,
    /// Runs executing at once in this process [server.max_concurrent_runs].
    #[arg(long, env = "DR_MAX_CONCURRENT_RUNS")]
    max_concurrent_runs: Option<usize>,
    /// Database connections in the pool [server.db_max_connections].
    #[arg(long, env = "DR_DB_MAX_CONNECTIONS")]
    db_max_connections: Option<u32>,
    /// Serve without authentication: whoever reaches the port is the one local owner. For
    /// local use only [auth.disabled].
    #[arg(long, env = "DR_NO_AUTH", value_parser = clap::builder::FalseyValueParser::new())]
    no_auth: bool,
    /// One key every caller shares (x-api-key or Authorization: Bearer) [server.api_key].
    #[arg(long, env = "DR_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest accepted request body, in bytes [server.max_body_bytes].
    #[arg(long, env = "DR_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Log lines as `text` or `json` [telemetry.log_format].
    #[arg(long, env = "DR_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// A TOML file layered over config/default.toml (server, research knobs, providers, limits,
    /// prices, telemetry).
    #[arg(long, env = "DR_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// A directory of documents runs may search (search_api "local", corpus NAME), as
    /// NAME=DIR; repeatable [corpora.NAME].
    #[arg(long = "corpus", value_name = "NAME=DIR")]
    corpora: Vec<String>,
}

#[derive(clap::Args)]
struct ResearchCmd {
    /// The research question.
    question: String,
    /// Where to write the report: Markdown, or by the file's extension `.html`, `.pdf` or
    /// `.docx` the exported file with its evidence appendix; `-` prints it on stdout.
    #[arg(long, short, default_value = "report.md")]
    output: std::path::PathBuf,
    /// Print every stream event as one JSON object a line (for programs) instead of the live
    /// view; the clarifying question is a `clarification` event, answered on stdin.
    #[arg(long)]
    json: bool,
    /// Use this `provider:model` for every model role (research, summaries, compression, report).
    #[arg(long)]
    model: Option<String>,
    /// The SQLite file that keeps the thread (so it can be inspected or continued later).
    #[arg(long, env = "DR_SQLITE_PATH", default_value = "deep-research.db")]
    sqlite_path: String,
    /// A TOML file layered over config/default.toml.
    #[arg(long, env = "DR_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Research these documents instead of the web, as NAME=DIR (or the NAME of a configured
    /// corpus): search_api "local".
    #[arg(long, value_name = "NAME=DIR")]
    corpus: Option<String>,
}

#[derive(clap::Args)]
struct EvalCmd {
    /// The question set (JSON: name, corpus, questions with key facts; see eval/).
    #[arg(long, default_value = "eval/postgresql-15.json")]
    questions: std::path::PathBuf,
    /// The documents, as NAME=DIR (NAME as the set's corpus), unless the config names them.
    #[arg(long, value_name = "NAME=DIR")]
    corpus: Option<String>,
    /// A TOML file layered over config/default.toml (models, providers, limits).
    #[arg(long, env = "DR_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Only these question ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// At most this many questions.
    #[arg(long)]
    limit: Option<usize>,
    /// A research setting for every run, as KEY=VALUE (JSON values parsed); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Where the results go (JSON); the Markdown table is written beside it (.md).
    #[arg(long, short, default_value = "eval-results.json")]
    output: std::path::PathBuf,
    /// A run still going after this many seconds is given up on.
    #[arg(long, default_value_t = 1800)]
    run_limit_secs: u64,
    /// Compare two result files (A then B) instead of running anything.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    compare: Vec<std::path::PathBuf>,
    /// Merge result files that measured parts of one set with the same settings into
    /// `--output` (and its table) instead of running anything.
    #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with = "compare")]
    merge: Vec<std::path::PathBuf>,
    /// Score a result file again with today's checks and the set's facts (from what it kept:
    /// each report and its sources' texts) into `--output`, instead of running anything.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["compare", "merge"])]
    rescore: Option<std::path::PathBuf>,
    /// Measure the corpus search alone instead of running research: each question searched as
    /// asked, recall of its key facts in the first 1, 5 and 10 sections, index time and size,
    /// search latency (a fresh index in a temporary directory).
    #[arg(long, conflicts_with_all = ["compare", "merge", "rescore"])]
    retrieval: bool,
    /// With --retrieval: search again the queries the researchers sent in this result file,
    /// alone and ranked by the question.
    #[arg(long, value_name = "FILE", requires = "retrieval")]
    queries_from: Option<std::path::PathBuf>,
    /// With --retrieval: keep the index and its vectors in DIR and use them again next time
    /// (only what changed is indexed and embedded; index and vector times say so), instead of
    /// a temporary directory.
    #[arg(long, value_name = "DIR", requires = "retrieval")]
    index_dir: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct SearchCmd {
    /// What to search for (as a researcher would write it).
    query: String,
    /// The documents, as NAME=DIR, or the NAME of a configured corpus (the only one when left
    /// out).
    #[arg(long, value_name = "NAME=DIR")]
    corpus: Option<String>,
    /// How many sections to print.
    #[arg(long, default_value_t = 10)]
    max: usize,
    /// Print the hits as one JSON array (rank, title, url, score, passage).
    #[arg(long)]
    json: bool,
    /// A TOML file layered over config/default.toml (corpora, [search.local]).
    #[arg(long, env = "DR_CONFIG")]
    config: Option<std::path::PathBuf>,
}

impl ServeArgs {
    /// The config layers with these flags on top.
    fn settings(&self, cfg: &FileConfig) -> anyhow::Result<Settings> {
        let mut s = Settings::from_file(cfg)?;
        let secret = |v: &Option<String>| v.as_ref().map(|v| SecretString::from(v.clone()));
        if let Some(host) = &self.host {
            s.host = host.clone();
        }
        s.port = self.port.unwrap_or(s.port);
        if let Some(url) = secret(&self.database_url) {
            s.database_url = non_empty(&url);
        }
        if let Some(path) = &self.sqlite_path {
            s.sqlite_path = path.clone();
        }
        if let Some(sync) = self.sqlite_sync {
            s.sqlite_sync = sync.into();
        }
        s.max_concurrent_runs = self.max_concurrent_runs.unwrap_or(s.max_concurrent_runs);
        s.db_max_connections = self.db_max_connections.unwrap_or(s.db_max_connections);
        if let Some(key) = secret(&self.api_key) {
            s.api_key = non_empty(&key);
        }
        s.max_body_bytes = self.max_body_bytes.unwrap_or(s.max_body_bytes);
        if self.no_auth {
            s.auth.disabled = true;
        }
        if let Some(format) = self.log_format {
            s.telemetry.log_format = format;
        }
        if s.telemetry.otlp_endpoint.is_none() {
            s.telemetry.otlp_endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
                .ok()
                .map(|e| e.trim().trim_end_matches('/').to_owned())
                .filter(|e| !e.is_empty());
        }
        s.validate()?;
        Ok(s)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let keys = deep_research::store::crypt::Keys::from_env()
        .context("encryption at rest is misconfigured")?;
    if let Some(keys) = &keys {
        eprintln!(
            "encryption at rest: on (new writes sealed with key {})",
            keys.current_id()
        );
    }
    deep_research::store::crypt::install(keys);
    match Cli::parse().command {
        Command::Serve(args) => {
            let mut cfg = FileConfig::load_from(args.config.as_deref())?;
            cfg.add_corpora(&args.corpora)?;
            let settings = args.settings(&cfg)?;
            let telemetry = telemetry::init(&settings.telemetry)?;
            let registry = research_registry(&cfg)?;
            let result = serve(settings, registry).await;
            telemetry.shutdown().await;
            result
        }
        Command::Research(cmd) => {
            telemetry::init_logs(LogFormat::Text);
            research(cmd).await
        }
        Command::Eval(cmd) => {
            telemetry::init_logs(LogFormat::Text);
            eval(cmd).await
        }
        Command::PrintConfig => {
            print!("{}", deep_research::config::file::DEFAULTS);
            Ok(())
        }
        Command::Openapi => {
            println!(
                "{}",
                deep_research::api::openapi::document(&[
                    deep_research::research::GRAPH_ID,
                    deep_research::research::ODR_GRAPH_ID
                ])
            );
            Ok(())
        }
        Command::Search(cmd) => {
            telemetry::init_logs(LogFormat::Text);
            search(cmd)
        }
        Command::NewKey { owner } => new_key(&owner),
        Command::Healthcheck { port } => healthcheck(port).await,
        Command::Reseal {
            config,
            database_url,
            sqlite_path,
        } => reseal(config.as_deref(), database_url, sqlite_path).await,
    }
}

fn new_key(owner: &str) -> anyhow::Result<()> {
    let owner = owner.trim();
    anyhow::ensure!(!owner.is_empty(), "--owner must not be empty");
    // Two v4 UUIDs: 244 random bits from the operating system's generator.
    let key = format!(
        "dr_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let digest = deep_research::api::auth::key_digest(&key);
    println!("key (give it to {owner}; it is not stored anywhere): {key}");
    println!();
    println!("entry for the keys file:");
    println!(
        "[[keys]]\nowner = {}\nsha256 = \"{digest}\"",
        toml_string(owner)
    );
    Ok(())
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// The graphs `serve` offers: the research graph, configured from the layered config files.
fn research_registry(cfg: &FileConfig) -> anyhow::Result<Registry> {
    let env = |k: &str| std::env::var(k).ok();
    let deps = cfg
        .research_deps(&env)
        .context("could not set up the research graph")?;
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

/// The corpus a `--corpus` flag names: `NAME=DIR` adds it to the config, a bare `NAME` picks a
/// configured one.
fn corpus_named(cfg: &mut FileConfig, spec: Option<&str>) -> anyhow::Result<Option<String>> {
    Ok(match spec {
        Some(spec) if spec.contains('=') => {
            cfg.add_corpora(&[spec.to_owned()])?;
            spec.split_once('=').map(|(name, _)| name.trim().to_owned())
        }
        Some(name) => Some(name.trim().to_owned()),
        None => None,
    })
}

async fn research(cmd: ResearchCmd) -> anyhow::Result<()> {
    let mut cfg = FileConfig::load_from(cmd.config.as_deref())?;
    let corpus = corpus_named(&mut cfg, cmd.corpus.as_deref())?;
    // One person's research on this machine: `--model` may name a local model server.
    cfg.operator.allow_private_model_urls = true;
    let (base, key, token, server) = private_server(&cfg, &cmd.sqlite_path).await?;
    let mut configurable = match &cmd.model {
        Some(m) => serde_json::json!({"research_model": m, "summarization_model": m,
                                      "compression_model": m, "final_report_model": m}),
        None => serde_json::json!({}),
    };
    if let Some(name) = corpus {
        configurable["search_api"] = "local".into();
        configurable["corpus"] = name.into();
    }
    // The tree redrawn in place only on a terminal; plain lines into pipes and files.
    let mode = if cmd.json {
        deep_research::cli::Mode::Json
    } else if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        deep_research::cli::Mode::Live
    } else {
        deep_research::cli::Mode::Plain
    };
    let args = deep_research::cli::ResearchArgs {
        question: cmd.question.clone(),
        output: deep_research::cli::ReportTo::parse(&cmd.output),
        configurable,
        api_key: Some(key),
        mode,
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let result = deep_research::cli::research(&base, &args, &mut input, &mut out).await;
    token.cancel();
    let _ = server.await;
    result
}

/// The research service on an ephemeral loopback port over the SQLite file `sqlite_path`, with a
/// key made for this process only, so no other local process can use it meanwhile: its
/// address, the key, the token that stops it and its task.
async fn private_server(
    cfg: &FileConfig,
    sqlite_path: &str,
) -> anyhow::Result<(
    String,
    String,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
)> {
    let registry = research_registry(cfg)?;
    let key = format!("dr_{}", uuid::Uuid::new_v4().simple());
    let settings = Settings {
        host: "127.0.0.1".into(),
        port: 0,
        database_url: None,
        sqlite_path: sqlite_path.to_owned(),
        api_key: Some(SecretString::from(key.clone())),
        ..Settings::from_file(cfg)?
    };
    let app = Application::build(settings, registry).await?;
    let base = format!("http://{}", app.local_addr()?);
    let token = app.shutdown_token();
    Ok((base, key, token, tokio::spawn(app.run_until_stopped())))
}

async fn eval(cmd: EvalCmd) -> anyhow::Result<()> {
    use deep_research::eval::{self, EvalReport, QuestionSet};
    let read = |p: &std::path::Path| -> anyhow::Result<EvalReport> {
        let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
        serde_json::from_str(&text).with_context(|| p.display().to_string())
    };
    if let [a, b] = cmd.compare.as_slice() {
        print!("{}", eval::compare(&read(a)?, &read(b)?));
        return Ok(());
    }
    if !cmd.merge.is_empty() {
        let parts = cmd
            .merge
            .iter()
            .map(|p| Ok((p.display().to_string(), read(p)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let report = eval::merge(parts)?;
        return write_results(&report, &cmd.output);
    }
    if let Some(path) = &cmd.rescore {
        let set = QuestionSet::load(&cmd.questions)?;
        let report = eval::rescore_all(&set, &read(path)?)?;
        return write_results(&report, &cmd.output);
    }
    let set = QuestionSet::load(&cmd.questions)?;
    let questions = set.select(&cmd.only, cmd.limit);
    anyhow::ensure!(!questions.is_empty(), "no question selected");
    let mut cfg = FileConfig::load_from(cmd.config.as_deref())?;
    cfg.operator.allow_private_model_urls = true;
    if let Some(spec) = &cmd.corpus {
        cfg.add_corpora(std::slice::from_ref(spec))?;
    }
    let corpus = cfg.corpora.get(&set.corpus).cloned().with_context(|| {
        format!(
            "the question set is about corpus '{}': pass --corpus {}=DIR or configure [corpora.{}]",
            set.corpus, set.corpus, set.corpus
        )
    })?;
    if cmd.retrieval {
        let kept = cmd.queries_from.as_deref().map(read).transpose()?;
        let embedder = cfg.embedder()?;
        return eval_retrieval(
            &set,
            &questions,
            &corpus,
            kept.as_ref(),
            embedder,
            cmd.index_dir.as_deref(),
            &cmd.output,
        );
    }
    eval_runs(&cmd, &cfg, &set, &questions, &corpus).await
}

/// Where the corpus's sections are located in reports: under its `base_url`, or its directory
/// as a `file://` URL.
fn corpus_prefix(corpus: &deep_research::tools::corpus::CorpusConfig) -> anyhow::Result<String> {
    if corpus.base_url.trim().is_empty() {
        let root = std::fs::canonicalize(&corpus.path).with_context(|| corpus.path.clone())?;
        Ok(format!("file://{}/", root.display()))
    } else {
        Ok(format!("{}/", corpus.base_url.trim().trim_end_matches('/')))
    }
}

/// `--set KEY=VALUE` as research settings: a value that is not JSON is a string.
fn settings_from(pairs: &[String]) -> anyhow::Result<serde_json::Value> {
    let mut configurable = serde_json::json!({});
    for setting in pairs {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--set takes KEY=VALUE, got '{setting}'"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| value.into());
        configurable[key.trim()] = value;
    }
    Ok(configurable)
}

/// `eval` proper: each question researched by a private server on a throwaway SQLite file,
/// scored, and written as it finishes.
async fn eval_runs(
    cmd: &EvalCmd,
    cfg: &FileConfig,
    set: &deep_research::eval::QuestionSet,
    questions: &[deep_research::eval::Question],
    corpus: &deep_research::tools::corpus::CorpusConfig,
) -> anyhow::Result<()> {
    use deep_research::eval::{self, EvalOptions, EvalReport};
    let db = std::env::temp_dir().join(format!("dr-eval-{}.db", uuid::Uuid::new_v4().simple()));
    let (base, key, token, server) = private_server(cfg, &db.display().to_string()).await?;
    let opts = EvalOptions {
        configurable: settings_from(&cmd.settings)?,
        corpus_prefix: corpus_prefix(corpus)?,
        run_limit: Duration::from_secs(cmd.run_limit_secs.max(1)),
        api_key: Some(key),
    };
    println!(
        "{} question(s) of '{}' on corpus '{}'",
        questions.len(),
        set.name,
        set.corpus
    );
    // Each finished question is written at once, so a long evaluation stopped half-way keeps
    // what it measured.
    let mut done: Vec<eval::QuestionResult> = Vec::new();
    let output = cmd.output.clone();
    let (settings, started_at) = (
        eval::run_settings(set, &opts),
        chrono::Utc::now().to_rfc3339(),
    );
    let mut progress = |r: &eval::QuestionResult| {
        println!(
            "{}: {} in {:.0} s, {} sources, facts {}/{}, cited paragraphs {}/{}, supported {}/{}, invented {}",
            r.id,
            r.status,
            r.wall_secs,
            r.sources,
            r.facts_found.len(),
            r.facts,
            r.cited_paragraphs,
            r.paragraphs,
            r.supported,
            r.citations,
            r.invented
        );
        done.push(r.clone());
        let partial = EvalReport {
            set: set.name.clone(),
            corpus: set.corpus.clone(),
            configurable: settings.clone(),
            started_at: started_at.clone(),
            corpus_prefix: opts.corpus_prefix.clone(),
            summary: eval::summarize(&done),
            results: done.clone(),
        };
        if let Ok(text) = serde_json::to_string_pretty(&partial) {
            let _ = std::fs::write(&output, text);
        }
    };
    let result = eval::run(&base, set, questions, &opts, &mut progress).await;
    token.cancel();
    let _ = server.await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    write_results(&result?, &cmd.output)
}

/// `eval --retrieval`: the search measured alone, written as JSON and a Markdown table.
/// With `kept` (`--queries-from`), its researchers' queries searched again, printed as JSON.
fn eval_retrieval(
    set: &deep_research::eval::QuestionSet,
    questions: &[deep_research::eval::Question],
    corpus: &deep_research::tools::corpus::CorpusConfig,
    kept: Option<&deep_research::eval::EvalReport>,
    embedder: Option<std::sync::Arc<deep_research::tools::corpus::Embedder>>,
    index_dir: Option<&std::path::Path>,
    output: &std::path::Path,
) -> anyhow::Result<()> {
    use deep_research::eval::retrieval;
    let kept_dir = index_dir.is_some();
    let scratch = index_dir
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("dr-retrieval-{}", uuid::Uuid::new_v4().simple()))
        });
    let clean = |dir: &std::path::Path| {
        if !kept_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    };
    if let Some(kept) = kept {
        let report = retrieval::measure_queries(set, kept, corpus, &scratch, 5, embedder);
        clean(&scratch);
        println!("{}", serde_json::to_string_pretty(&report?)?);
        return Ok(());
    }
    let report = retrieval::measure(set, questions, corpus, &scratch, embedder);
    clean(&scratch);
    let report = report?;
    std::fs::write(output, serde_json::to_string_pretty(&report)?)?;
    let table = retrieval::markdown(&report);
    std::fs::write(output.with_extension("md"), &table)?;
    println!("{table}\nResults: {} (and .md)", output.display());
    Ok(())
}

fn search(cmd: SearchCmd) -> anyhow::Result<()> {
    let mut cfg = FileConfig::load_from(cmd.config.as_deref())?;
    let name = corpus_named(&mut cfg, cmd.corpus.as_deref())?;
    let corpora = cfg.open_corpora()?;
    let corpus = corpora
        .pick(name.as_deref().unwrap_or(""))
        .map_err(|why| anyhow::anyhow!("{}", why.replace("config.configurable.", "--")))?;
    // The vectors a first start is making in the background, waited for: the command shows
    // what a search of the whole corpus finds.
    corpus.embed_pending()?;
    let hits = corpus.search_blocking(&cmd.query, "", cmd.max.clamp(1, 100))?;
    deep_research::cli::search::print(&hits, cmd.json, &mut std::io::stdout().lock())?;
    Ok(())
}

/// The results as JSON at `output` and as a Markdown table beside it.
fn write_results(
    report: &deep_research::eval::EvalReport,
    output: &std::path::Path,
) -> anyhow::Result<()> {
    std::fs::write(output, serde_json::to_string_pretty(report)?)?;
    let table = deep_research::eval::markdown(report);
    std::fs::write(output.with_extension("md"), &table)?;
    println!("\n{table}\nResults: {} (and .md)", output.display());
    Ok(())
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

/// `reseal`: every sealed column rewritten under the current key (`SqlStore::reseal`).
async fn reseal(
    config: Option<&std::path::Path>,
    database_url: Option<String>,
    sqlite_path: Option<String>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        deep_research::store::crypt::enabled(),
        "reseal needs the key to seal with: set DR_ENCRYPTION_KEY (and the keys rows were \
         sealed with in DR_ENCRYPTION_PREVIOUS_KEYS)"
    );
    let cfg = FileConfig::load_from(config)?;
    let mut settings = Settings::from_file(&cfg)?;
    if let Some(url) = database_url.filter(|u| !u.trim().is_empty()) {
        settings.database_url = Some(SecretString::from(url));
    }
    if let Some(path) = sqlite_path {
        settings.sqlite_path = path;
    }
    let store = deep_research::store::SqlStore::open(
        secrecy::ExposeSecret::expose_secret(&settings.store_url()),
        &deep_research::store::StoreOptions::default(),
    )
    .await
    .with_context(|| format!("could not open the store {}", settings.store_description()))?;
    let done = store.reseal().await.context("resealing stopped")?;
    for (column, rewritten, left) in &done.columns {
        println!("{column}: {rewritten} sealed again, {left} already current or empty");
    }
    Ok(())
}
