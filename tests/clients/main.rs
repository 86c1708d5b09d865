//! Real clients against a live server: the LangGraph SDKs, browser pages, the agent protocols
//! (A2A, MCP, AG-UI), schemathesis and the CLI.
//!
//! One test binary per area (each links the whole crate): `cargo test --test clients`, or one
//! module with `cargo test --test clients <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod agent_protocols;
mod browser;
mod cli;
mod schemathesis;
mod sdk_compat;
