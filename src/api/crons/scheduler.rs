//! The loop that starts crons' runs. Every replica runs it; a tick's run is inserted in the
//! transaction that moves the cron to its next tick (compare and set on `next_run_date`), so
//! each tick starts exactly one run however many replicas see it due, and a replica that
//! crashes mid-tick leaves the tick due for the others.

use super::schedule::Schedule;
use crate::api::AppState;
use crate::api::error::{ApiResult, AppError};
use crate::api::runs::{RunRequest, Target, start_for_cron};
use crate::runs::options::OnCompletion;
use crate::store::{Cron, CronTick, StoreError};
use crate::time::Timestamp;
use serde_json::Value;
use std::time::Duration;

/// Ticks are whole minutes; polling every second starts a run within a second of its time.
const POLL: Duration = Duration::from_secs(1);
/// Crons started per poll (the rest wait for the next poll).
const BATCH: i64 = 100;

/// Runs until shutdown.
pub(crate) async fn run(state: AppState) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = state.shutdown.cancelled() => return,
        }
        let now = Timestamp::now();
        match state.store.due_crons(now, BATCH).await {
            Ok(due) => {
                for cron in due {
                    fire(&state, cron, now).await;
                }
            }
            Err(error) => tracing::warn!(%error, "looking for due crons failed"),
        }
    }
}

/// Starts the run of the cron's due tick and moves the cron on.
async fn fire(state: &AppState, cron: Cron, now: Timestamp) {
    let Some(due) = cron.next_run_date else {
        return;
    };
    // A tick missed while no replica was up fires once, late; the next is counted from now.
    let next = match Schedule::parse(&cron.schedule, cron.timezone.as_deref()) {
        Ok(schedule) => schedule.next_after(now.max(due), cron.end_time),
        Err(error) => {
            tracing::warn!(cron_id = %cron.cron_id, %error, "cron schedule unreadable; stopped");
            None
        }
    };
    let tick = CronTick {
        cron_id: cron.cron_id,
        due,
        next,
    };
    // A revoked owner's crons stay, but start nothing until the owner has a key again.
    if state.auth.is_revoked(&cron.owner) {
        tracing::warn!(cron_id = %cron.cron_id, "cron tick skipped: its owner's keys were revoked");
        if let Err(error) = state.store.skip_cron_tick(&tick).await {
            tracing::warn!(cron_id = %cron.cron_id, %error, "moving a cron past a skipped tick failed");
        }
        return;
    }
    let started = match run_request(&cron) {
        Ok((target, request)) => {
            start_for_cron(state, &cron.owner, target, request, tick.clone()).await
        }
        Err(error) => Err(error),
    };
    match started {
        Ok(run) => {
            tracing::info!(cron_id = %cron.cron_id, run_id = %run.run_id, "cron started a run")
        }
        // Another replica started this tick.
        Err(AppError::Store(StoreError::Conflict("cron tick"))) => {}
        Err(AppError::Store(error)) if error.is_transient() => {
            tracing::warn!(cron_id = %cron.cron_id, %error, "cron tick postponed: store unavailable");
        }
        Err(error) => {
            // The run cannot be created (its thread is busy under `reject`, its assistant
            // changed…): this tick is skipped, the next one tries again.
            tracing::warn!(cron_id = %cron.cron_id, error = %error, "cron tick skipped: its run could not start");
            if let Err(error) = state.store.skip_cron_tick(&tick).await {
                tracing::warn!(cron_id = %cron.cron_id, %error, "moving a cron past a failed tick failed");
            }
        }
    }
}

/// The run a tick creates: on the cron's thread, or stateless with the cron's choice of what
/// happens to the thread afterwards.
fn run_request(cron: &Cron) -> ApiResult<(Target, RunRequest)> {
    let mut request = RunRequest::from_json(Value::Object(cron.payload.clone()))?;
    let target = match cron.thread_id {
        Some(id) => Target::Thread(id),
        None => {
            let on_completion = cron.on_run_completed.as_deref().unwrap_or("delete");
            request.on_completion = Some(
                on_completion
                    .parse::<OnCompletion>()
                    .map_err(AppError::Invalid)?,
            );
            Target::Stateless
        }
    };
    Ok((target, request))
}
