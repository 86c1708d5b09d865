//! Research tools the model can call. Each tool is a plain async function over explicit
//! dependencies (HTTP client, shared concurrency caps, cancellation) so the graph layer decides
//! wiring and the tools stay testable against local fakes.

pub mod mcp;
pub mod tavily;

pub use tavily::{
    PageSummarizer, PageSummary, SearchError, SearchHit, SearchOptions, SearchOutput, Source,
    Tavily, TavilyConfig, tavily_search,
};
