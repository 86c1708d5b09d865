//! The HTTP API as clients see it: bodies, errors, attacks, owners, the wire protocol and its
//! SSE bytes, crons, the OpenAPI document and telemetry. (Encryption at rest has a binary of
//! its own, `tests/encryption`: its keys are the process's.)
//!
//! One test binary per area (each links the whole crate): `cargo test --test api`, or one
//! module with `cargo test --test api <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod api_smoke;
mod attacks;
mod bad_input;
mod crons;
mod openapi;
mod protocol;
mod socket;
mod sse_bytes;
mod telemetry;
mod tenants;
