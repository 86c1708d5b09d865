//! deep-research: Open Deep Research served over the LangGraph Server API.
//!
//! Layout (data flows top to bottom):
//! - `api`: axum routes, errors as `{"detail": …}`, OpenAPI.
//! - `runs`: the run queue and worker pool (claim, lease, cancel, multitask strategies).
//! - `graph`: a small graph runtime (nodes, reducers, subgraphs, checkpoints, events).
//! - `stream`: per-run event bus and SSE framing.
//! - `store`: persistence over Postgres or SQLite.
//! - `config`: settings from file and environment.

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod graph;
pub mod ids;
pub mod llm;
pub mod research;
pub mod runs;
pub mod sse;
pub mod store;
pub mod stream;
pub mod time;
pub mod tools;
