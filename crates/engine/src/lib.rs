//! The research engine of deep-research: the deep-research graph (clarify, brief, supervisor,
//! researchers, compress, report), its settings, cost meter, fallbacks and citation checks.
//!
//! The layers below are re-exported under their own names, so `crate::llm::…` and
//! `crate::graph::…` read as they do in the service.

pub use deep_research_models::{
    graph, ids, lexical, llm, outbound, sse_decoder, store, stream, telemetry, time, tools,
};

pub mod research;
