//! Runs, executed: the `Runner` of one process and its parts, one file each.
//!
//! - `kwargs.rs`: what a run is to do (`RunKwargs`), parsed once by the API and stored with it;
//! - `pool.rs`: the workers that claim runs, and cancellation of the runs executing here;
//! - `executor.rs`: one run, from its start point through the graph, under a renewed lease;
//! - `ending.rs`: how it ended, recorded with the thread's new summary;
//! - `sweeper.rs`: the loops beside the workers (leases, retention, foreign channels);
//! - `keys.rs`: provider keys runs brought, held in memory only;
//! - `webhook.rs`: delivering a finished run to its webhook.

mod ending;
mod executor;
pub mod keys;
pub mod kwargs;
pub mod options;
mod pool;
mod sweeper;
pub mod webhook;

use crate::config::Settings;
use crate::graph::Registry;
use crate::ids::RunId;
use crate::store::Store;
use crate::stream::Bus;
use keys::KeyVault;
pub use kwargs::RunKwargs;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Owns the worker pool of one process.
pub struct Runner {
    store: Arc<dyn Store>,
    bus: Bus,
    registry: Registry,
    settings: Arc<Settings>,
    worker_id: String,
    wake: Notify,
    active: Mutex<HashMap<RunId, pool::Active>>,
    /// Provider keys runs brought, by run, until the run ends here.
    pub keys: KeyVault,
    shutdown: CancellationToken,
}

impl Runner {
    pub fn new(
        store: Arc<dyn Store>,
        bus: Bus,
        registry: Registry,
        settings: Arc<Settings>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            bus,
            registry,
            settings,
            worker_id: format!("worker-{}", Uuid::new_v4().simple()),
            wake: Notify::new(),
            active: Mutex::new(HashMap::new()),
            keys: KeyVault::default(),
            shutdown,
        })
    }
}
