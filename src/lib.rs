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
pub mod runs;
pub mod serve;

// The layers below the service, each a crate of its own (crates/), under their old names.
pub use deep_research_engine::{
    graph, ids, lexical, llm, outbound, research, sse_decoder, store, stream, telemetry, time,
    tools,
};
