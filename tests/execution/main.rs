//! Runs executed: the queue and workers, durability across kills and replicas, storage growth,
//! migrations, and the store contract both stores must keep.
//!
//! One test binary per area (each links the whole crate): `cargo test --test execution`, or one
//! module with `cargo test --test execution <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod durability;
mod migrations;
mod runs;
mod storage_growth;
mod store_contract;
