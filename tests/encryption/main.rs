//! Encryption at rest, in a test binary of its own: the keys are the process's (installed
//! once, like the metrics recorder), so no other test may run beside it and find its rows
//! sealed under a key it no longer has.
//!
//! `cargo test --test encryption`.

#[path = "../support/mod.rs"]
mod support;

mod at_rest;
