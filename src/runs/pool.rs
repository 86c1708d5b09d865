//! The worker pool: workers claim pending runs from the store (a bounded number at a time) and
//! execute each in a task of its own; cancellation reaches the runs executing here.

use super::{Runner, lock};
use crate::ids::{RunId, ThreadId};
use crate::store::{CancelAction, Run, RunStatus, ThreadStatus, ThreadSummary};
use crate::time::Timestamp;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Signals for a run executing in this process.
pub(super) struct Active {
    pub(super) cancel: CancellationToken,
    pub(super) action: Arc<Mutex<Option<CancelAction>>>,
}

impl Runner {
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
    fn signal(&self, run_id: RunId, action: CancelAction) {
        if let Some(active) = lock(&self.active).get(&run_id) {
            *lock(&active.action) = Some(action);
            active.cancel.cancel();
        }
    }

    /// Marks an idle thread idle again once nothing is in flight on it.
    async fn settle_thread(&self, thread_id: ThreadId) -> Result<(), crate::store::StoreError> {
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
