//! The base layer of deep-research: what every other part stands on.
//!
//! - `ids`, `time`: typed identifiers and the clock.
//! - `outbound`: the policy for outgoing connections (which addresses a fetch may reach).
//! - `telemetry`: logs, OTLP traces and Prometheus metrics.
//! - `store`: persistence, one trait per concern, over Postgres or SQLite.
//! - `stream`: the per-run event bus and SSE framing.
//! - `graph`: the small graph runtime (nodes, reducers, subgraphs, checkpoints, events).
//!
//! A crate of its own so that a change above it (research, the API) does not compile it
//! again; the service (`deep_research`) re-exports every module under the same name.

pub mod graph;
pub mod ids;
pub mod outbound;
pub mod store;
pub mod stream;
pub mod telemetry;
pub mod time;
