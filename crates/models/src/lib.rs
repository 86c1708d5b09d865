//! The model and tool clients of deep-research.
//!
//! - `llm`: chat models (OpenAI-compatible, Anthropic, Gemini, Responses) behind one trait,
//!   the adaptive ladder for weak models, retries and observation.
//! - `tools`: web search (Tavily, Exa, Brave, SearXNG), local document corpora and MCP.
//! - `lexical`: words, stems and identifiers, as the corpus search and the citation check read them.
//! - `sse_decoder`: reads the server-sent events providers stream.
//!
//! The base layer's modules are re-exported here under their own names, so a path such as
//! `crate::store::StoreError` reads the same in every crate of the workspace.

pub use deep_research_base::{graph, ids, outbound, store, stream, telemetry, time};

pub mod lexical;
pub mod llm;
pub mod sse_decoder;
pub mod tools;
