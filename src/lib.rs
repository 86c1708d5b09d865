//! deep-research: Open Deep Research served over the LangGraph Server API.
//!
//! Layout (data flows top to bottom; ARCHITECTURE.md maps every file):
//! - `config`: one configuration story (defaults file → `--config` → `DR__…` env → flags → per run).
//! - `api`: axum routes, authentication and owners (`api::auth`), errors as `{"detail": …}`,
//!   OpenAPI; runs under `api::runs`. `serve`: the connection loop (caps and timeouts).
//! - `runs`: the run queue and worker pool (claim, lease, cancel, multitask strategies).
//! - `research`: the deep-research graph (clarify, brief, supervisor, researchers, compress,
//!   report), its settings, cost meter, fallback counts and citation checks.
//! - `graph`: a small graph runtime (nodes, reducers, subgraphs, checkpoints, events).
//! - `llm`: chat models (OpenAI-compatible, Anthropic) behind one trait, wrapped in the adaptive
//!   ladder for weak models and observed (spans, metrics); `tools`: web search (Tavily, Exa, Brave, SearXNG) and MCP.
//! - `store`: persistence, one trait per concern, over Postgres or SQLite; `stream`: per-run
//!   event bus and SSE framing.
//! - `telemetry`: logs, OTLP traces and Prometheus metrics (a leaf every layer records into).

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod eval;
pub mod export;
pub mod graph;
pub mod ids;
pub mod lexical;
pub mod llm;
pub mod outbound;
pub mod research;
pub mod runs;
pub mod serve;
pub mod sse_decoder;
pub mod store;
pub mod stream;
pub mod telemetry;
pub mod time;
pub mod tools;
