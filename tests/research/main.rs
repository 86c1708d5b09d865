//! The research graph on scripted fakes: its behaviour node by node, plan review, weak models,
//! the model clients' wire formats, the search engines, MCP tools and the terminal client.
//!
//! One test binary per area (each links the whole crate): `cargo test --test research`, or one
//! module with `cargo test --test research <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod cli_research;
mod export;
mod follow_up;
mod llm;
mod mcp;
mod plan_review;
mod research;
mod search_engines;
mod searx;
mod tavily;
mod weak_models;
mod what_changed;
