//! The HTTP API as clients see it: bodies, errors, attacks, owners, the wire protocol and its
//! SSE bytes, crons, encryption at rest, the OpenAPI document and telemetry.
//!
//! One test binary per area (each links the whole crate): `cargo test --test api`, or one
//! module with `cargo test --test api <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod api_smoke;
mod attacks;
mod bad_input;
mod crons;
mod encryption;
mod openapi;
mod protocol;
mod sse_bytes;
mod telemetry;
mod tenants;
