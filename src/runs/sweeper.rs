//! The background loops every replica runs beside its workers: a periodic look for work, the
//! lease sweep (runs whose worker died), the retention sweep (expired threads, items, spend
//! and old events), and letting go of channels whose runs another replica took.

use super::{Runner, lock};
use crate::ids::RunId;
use crate::store::{Run, RunStatus};
use crate::time::Timestamp;
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

impl Runner {
    /// Runs this process was not told about (created by another replica, or scheduled with
    /// `after_seconds`) are found by one periodic look, not by every idle worker polling: with
    /// a thousand workers that was two thousand claim queries a second.
    pub(super) async fn poll_for_work(self: Arc<Self>) {
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
    pub(super) async fn sweep_expired_leases(self: Arc<Self>) {
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
    pub(super) async fn sweep_retention(self: Arc<Self>) {
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
            data: json!(detail).to_string().into(),
        };
        if let Err(error) = self.store.append_events(&[event]).await {
            tracing::warn!(%error, "could not store the error event of a run given up");
        }
        let result = super::ending::RunResult::Failed { error: detail };
        self.bus.close(run.run_id, Some(result.into_wire()));
    }

    /// The API opens a run's channel when it creates the run, before any worker has it. When a
    /// worker of another replica claims the run — or it is cancelled or deleted there before it
    /// starts — nothing here would ever close that channel: once a heartbeat, ask the store
    /// about all such runs in one statement and let go of those no longer pending. Their
    /// streams and waiters carry on through the store.
    pub(super) async fn release_foreign_channels(self: Arc<Self>) {
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
                    let pending: HashSet<RunId> = statuses
                        .into_iter()
                        .filter(|(_, status)| *status == RunStatus::Pending)
                        .map(|(id, _)| id)
                        .collect();
                    let gone: Vec<RunId> =
                        ids.into_iter().filter(|id| !pending.contains(id)).collect();
                    self.bus.release_foreign(&gone);
                }
                Err(error) => tracing::warn!(%error, "checking runs announced here failed"),
            }
        }
    }

    async fn renew_local_leases(&self) {
        let ids: Vec<RunId> = lock(&self.active).keys().copied().collect();
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
}
