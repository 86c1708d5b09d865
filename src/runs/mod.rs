//! The run queue and worker pool: workers claim pending runs from the store (a bounded number at
//! a time), execute them with a renewed lease, and stop them promptly when asked to.

mod ending;
mod executor;
pub mod options;
pub mod webhook;

use crate::config::Settings;
use crate::graph::Registry;
use crate::store::{CancelAction, Run, RunStatus, Store, ThreadStatus, ThreadSummary};
use crate::stream::Bus;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

/// A run's parameters as stored in `run.kwargs` (the reference server's key names).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunKwargs {
    pub input: Value,
    pub command: Value,
    /// `configurable` carries run_id, thread_id, graph_id, assistant_id and checkpoint_id.
    pub config: Value,
    pub context: Value,
    pub stream_mode: Vec<String>,
    pub interrupt_before: Value,
    pub interrupt_after: Value,
    pub webhook: Value,
    pub feedback_keys: Value,
    /// Stateless run: its thread is temporary.
    pub temporary: bool,
    /// Stateless only: delete the temporary thread when the run ends.
    pub delete_on_completion: bool,
    pub subgraphs: bool,
    pub resumable: bool,
    pub checkpoint_during: bool,
    pub durability: options::Durability,
    /// The run brought provider keys (`configurable.apiKeys`): they are held in this process's
    /// memory only (`Runner::hold_run_keys`), never stored.
    pub run_keys: bool,
}

impl RunKwargs {
    /// Decodes a stored run's parameters; a row that does not decode is `Corrupt`, never
    /// defaults.
    pub fn decode(kwargs: &Value) -> Result<Self, crate::store::StoreError> {
        serde_json::from_value(kwargs.clone()).map_err(|e| crate::store::StoreError::Corrupt {
            what: "run kwargs",
            detail: e.to_string(),
        })
    }

    fn configurable(&self, key: &str) -> Option<&str> {
        self.config.get("configurable")?.get(key)?.as_str()
    }

    /// The graph this run executes.
    pub fn graph_id(&self) -> Option<&str> {
        self.configurable("graph_id")
    }

    /// The checkpoint to start from, if any.
    pub fn checkpoint_id(&self) -> Option<Uuid> {
        self.configurable("checkpoint_id")?.parse().ok()
    }
}

/// Signals for a run executing in this process.
struct Active {
    cancel: CancellationToken,
    action: Arc<Mutex<Option<CancelAction>>>,
}

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
    active: Mutex<HashMap<Uuid, Active>>,
    /// Provider keys runs brought, by run, until the run ends here.
    run_keys: Mutex<HashMap<Uuid, Value>>,
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
            run_keys: Mutex::new(HashMap::new()),
            shutdown,
        })
    }

    /// Keeps the provider keys a run brought, in memory only, until the run ends here (call
    /// before inserting the run: a worker may claim it at once).
    pub fn hold_run_keys(&self, run_id: Uuid, keys: Value) {
        lock(&self.run_keys).insert(run_id, keys);
    }

    /// Forgets a run's keys (its insert failed, or it ended).
    pub fn drop_run_keys(&self, run_id: Uuid) {
        lock(&self.run_keys).remove(&run_id);
    }

    fn held_run_keys(&self, run_id: Uuid) -> Option<Value> {
        lock(&self.run_keys).get(&run_id).cloned()
    }

    /// Starts `max_concurrent_runs` workers and the lease sweeper; they stop when the shutdown
    /// token fires.
    pub fn spawn_workers(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut tasks: Vec<JoinHandle<()>> = (0..self.settings.max_concurrent_runs.max(1))
            .map(|i| tokio::spawn(self.clone().supervise_worker(i)))
            .collect();
        tasks.push(tokio::spawn(self.clone().sweep_expired_leases()));
        tasks.push(tokio::spawn(self.clone().release_foreign_channels()));
        tasks.push(tokio::spawn(self.clone().poll_for_work()));
        tasks.push(tokio::spawn(self.clone().sweep_retention()));
        tasks
    }

    /// Runs this process was not told about (created by another replica, or scheduled with
    /// `after_seconds`) are found by one periodic look, not by every idle worker polling: with
    /// a thousand workers that was two thousand claim queries a second.
    async fn poll_for_work(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.poll_interval) => self.wake(),
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    /// Runs whose worker died are taken over by the next worker that claims (see `claim_run`);
    /// those that already used up `max_attempts` would hold their thread forever: end them
    /// `error`, with the reason in their stream, join and thread.
    async fn sweep_expired_leases(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.run_lease) => {}
                () = self.shutdown.cancelled() => return,
            }
            // Renew this process's own runs first: on a busy single-writer store a renewal can
            // queue behind other writes, and a run still executing here must not be failed.
            self.renew_local_leases().await;
            let max_attempts = i64::from(self.settings.max_attempts);
            match self.store.fail_expired_runs(max_attempts).await {
                Ok(runs) => {
                    for run in &runs {
                        self.end_abandoned(run).await;
                    }
                }
                Err(error) => tracing::warn!(%error, "sweeping expired leases failed"),
            }
            // Lapsed leases may wait to be taken over.
            self.wake();
        }
    }

    /// Deletes threads and store items whose `ttl` ran out, and the stored events of runs that ended longer ago
    /// than `run_events_retention`. Every replica sweeps; the deletes are idempotent.
    async fn sweep_retention(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.sweep_interval) => {}
                () = self.shutdown.cancelled() => return,
            }
            let now = Timestamp::now();
            match self.store.delete_expired_threads(now).await {
                Ok(ids) if !ids.is_empty() => {
                    tracing::info!(count = ids.len(), "deleted threads past their ttl");
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "sweeping threads past their ttl failed"),
            }
            match self.store.delete_expired_items(now).await {
                Ok(0) => {}
                Ok(count) => tracing::info!(count, "deleted store items past their ttl"),
                Err(error) => tracing::warn!(%error, "sweeping store items past their ttl failed"),
            }
            // Spend counts over a rolling day; two days of records are plenty.
            if let Err(error) = self
                .store
                .delete_spend_before(now.plus_secs(-2.0 * 86_400.0))
                .await
            {
                tracing::warn!(%error, "sweeping old spend records failed");
            }
            let keep = self.settings.run_events_retention;
            if keep.is_zero() {
                continue;
            }
            let cutoff = now.plus_secs(-keep.as_secs_f64());
            match self.store.delete_events_ended_before(cutoff).await {
                Ok(0) => {}
                Ok(pages) => tracing::info!(pages, "deleted stored events of runs ended long ago"),
                Err(error) => tracing::warn!(%error, "sweeping old run events failed"),
            }
        }
    }

    /// Tells the streams and waiters of a run given up after `max_attempts` why it ended: an
    /// `error` event after its stored ones, and the error as its result here.
    async fn end_abandoned(&self, run: &Run) {
        tracing::warn!(run_id = %run.run_id, attempts = self.settings.max_attempts,
            "run given up: its worker stopped before it finished, every attempt");
        let detail = crate::store::worker_lost(i64::from(self.settings.max_attempts));
        let last = self.store.last_event_id(run.run_id).await.ok().flatten();
        // After anything the dead worker may have sent (see `Runner::announce`).
        let lease_ms = self.settings.run_lease.as_millis() as i64;
        let id = crate::store::EventId {
            ms: Timestamp::now()
                .millis()
                .max(last.map_or(0, |l| l.ms + lease_ms)),
            seq: 0,
        };
        let event = crate::store::StoredEvent {
            run_id: run.run_id,
            thread_id: run.thread_id,
            id,
            event: "error".into(),
            data: detail.to_string().into(),
        };
        if let Err(error) = self.store.append_events(&[event]).await {
            tracing::warn!(%error, "could not store the error event of a run given up");
        }
        self.bus
            .close(run.run_id, Some(json!({"__error__": detail})));
    }

    /// The API opens a run's channel when it creates the run, before any worker has it. When a
    /// worker of another replica claims the run — or it is cancelled or deleted there before it
    /// starts — nothing here would ever close that channel: once a heartbeat, ask the store
    /// about all such runs in one statement and let go of those no longer pending. Their
    /// streams and waiters carry on through the store.
    async fn release_foreign_channels(self: Arc<Self>) {
        // Younger channels may belong to runs whose creation has not committed yet.
        let min_age = self.settings.heartbeat;
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.heartbeat) => {}
                () = self.shutdown.cancelled() => return,
            }
            let ids = self.bus.foreign_runs(min_age);
            if ids.is_empty() {
                continue;
            }
            match self.store.run_statuses(&ids).await {
                Ok(statuses) => {
                    let pending: HashSet<Uuid> = statuses
                        .into_iter()
                        .filter(|(_, status)| *status == RunStatus::Pending)
                        .map(|(id, _)| id)
                        .collect();
                    let gone: Vec<Uuid> =
                        ids.into_iter().filter(|id| !pending.contains(id)).collect();
                    self.bus.release_foreign(&gone);
                }
                Err(error) => tracing::warn!(%error, "checking runs announced here failed"),
            }
        }
    }

    /// Tells one idle worker to look for work now. A worker that finds some wakes the next one,
    /// so a burst of new runs is picked up without every idle worker querying for each run.
    /// (With no worker waiting, the wake-up is kept for the next one that waits.)
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Keeps worker `i` alive: a worker whose loop panics is logged and replaced.
    async fn supervise_worker(self: Arc<Self>, i: usize) {
        loop {
            let worker = self.clone().worker_loop();
            let task = tokio::spawn(worker.instrument(tracing::info_span!("worker", i)));
            match task.await {
                Ok(()) => return,
                Err(error) if error.is_panic() && !self.shutdown.is_cancelled() => {
                    tracing::error!(worker = i, "a worker panicked; starting a new one");
                }
                Err(error) => {
                    tracing::error!(worker = i, %error, "a worker stopped");
                    return;
                }
            }
        }
    }

    async fn worker_loop(self: Arc<Self>) {
        while !self.shutdown.is_cancelled() {
            let max_attempts = i64::from(self.settings.max_attempts);
            match self
                .store
                .claim_run(&self.worker_id, self.settings.run_lease, max_attempts)
                .await
            {
                Ok(Some(lease)) => {
                    // There may be more: hand the search on before starting this one.
                    self.wake();
                    self.execute_guarded(lease).await;
                    continue;
                }
                Ok(None) => {}
                // The database being away is logged once by whatever waits on it; every idle
                // worker saying so each poll would bury the log.
                Err(error) if error.is_transient() => {
                    tracing::debug!(%error, "claiming a run failed")
                }
                Err(error) => tracing::error!(%error, "claiming a run failed"),
            }
            // A wake-up sent since the claim was kept as a permit, so none is lost here.
            tokio::select! {
                () = self.wake.notified() => {}
                () = self.shutdown.cancelled() => {}
            }
        }
    }

    /// Executes a run in a task of its own so that a panic in it is logged and the run failed,
    /// while this worker goes on claiming runs.
    async fn execute_guarded(self: &Arc<Self>, lease: crate::store::Lease) {
        let run = lease.run.clone();
        let fence = lease.fence.clone();
        let task = tokio::spawn(self.clone().execute(lease));
        match task.await {
            Ok(()) => {}
            Err(error) if error.is_panic() => {
                tracing::error!(run_id = %run.run_id, thread_id = %run.thread_id,
                    "a run panicked; it is marked failed and its worker carries on");
                self.fail_panicked(&run, &fence).await;
            }
            Err(error) => tracing::error!(%error, run_id = %run.run_id, "a run's task stopped"),
        }
    }

    async fn renew_local_leases(&self) {
        let ids: Vec<Uuid> = lock(&self.active).keys().copied().collect();
        for run_id in ids {
            if let Err(error) = self
                .store
                .renew_lease(run_id, &self.worker_id, self.settings.run_lease)
                .await
            {
                tracing::warn!(%error, %run_id, "lease renewal before the sweep failed");
            }
        }
    }

    /// Applies cancellation to runs the store just marked: signals the ones executing here and
    /// closes the streams of pending ones, which ended without ever starting.
    pub async fn cancelled(&self, runs: &[Run], action: CancelAction) {
        let mut touched_threads = Vec::new();
        for run in runs {
            if run.status == RunStatus::Running {
                self.signal(run.run_id, action);
            } else {
                self.bus.close(run.run_id, Some(json!({})));
                touched_threads.push(run.thread_id);
            }
        }
        touched_threads.dedup();
        for thread_id in touched_threads {
            if let Err(error) = self.settle_thread(thread_id).await {
                tracing::warn!(%error, %thread_id, "could not update thread after cancelling");
            }
        }
    }

    /// Cancels a run executing in this process; other replicas see the store's flag.
    fn signal(&self, run_id: Uuid, action: CancelAction) {
        if let Some(active) = lock(&self.active).get(&run_id) {
            *lock(&active.action) = Some(action);
            active.cancel.cancel();
        }
    }

    /// Marks an idle thread idle again once nothing is in flight on it.
    async fn settle_thread(&self, thread_id: Uuid) -> Result<(), crate::store::StoreError> {
        if !self.store.inflight_runs(thread_id).await?.is_empty() {
            return Ok(());
        }
        let Some(thread) = self.store.get_thread(thread_id).await? else {
            return Ok(());
        };
        if thread.status == ThreadStatus::Busy {
            let summary = ThreadSummary {
                status: ThreadStatus::Idle,
                values: thread.values,
                error: thread.error,
                interrupts: thread.interrupts,
            };
            self.store
                .set_thread_summary(thread_id, &summary, Timestamp::now())
                .await?;
        }
        Ok(())
    }

    /// Runs currently executing in this process.
    pub fn active_runs(&self) -> usize {
        lock(&self.active).len()
    }
}
