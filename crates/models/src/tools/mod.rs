//! Research tools the model can call. Each tool is a plain async function over explicit
//! dependencies (HTTP client, shared concurrency caps, cancellation) so the graph layer decides
//! wiring and the tools stay testable against local fakes.

pub mod corpus;
pub mod engines;
pub mod excerpts;
pub mod mcp;
pub mod web_search;

pub use engines::{Engine, Found, QueryFound, QueryOptions};
pub use web_search::{
    LongPages, PageSummarizer, PageSummary, SearchConfig, SearchError, SearchHit, SearchOptions,
    SearchOutput, Searcher, Source, SummaryLedger, WebSearch, web_search,
};
