//! Waiting for a run's end (`/wait`, `/join`, `cancel?wait=1`): the run's own result when a
//! worker of this process runs it, otherwise the store, read every `STORE_POLL` until the run
//! is over; newlines keep the connection alive meanwhile.

use super::super::AppState;
use super::super::error::ApiResult;
use crate::ids::RunId;
use crate::store::{Run, RunFailure, RunStatus};
use crate::stream::{RunChannel, STORE_POLL};
use axum::body::Body as HttpBody;
use bytes::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

/// A body that resolves with the run's final values once it has ended. While a worker of this
/// process runs it, that is the run's own result; otherwise — another replica claimed it, or it
/// was never live here — the store is read every 250 ms until the run is over. Newlines keep
/// the connection alive meanwhile.
pub(super) fn wait_body(
    state: &AppState,
    run_id: RunId,
    channel: Option<Arc<RunChannel>>,
    mut result: Option<watch::Receiver<Option<Option<Value>>>>,
) -> HttpBody {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let state = state.clone();
    tokio::spawn(async move {
        let heartbeat = state.settings.heartbeat;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        let mut poll = tokio::time::interval(STORE_POLL);
        let value = loop {
            if let Some(done) = local_result(&mut result) {
                break done;
            }
            let here = channel.as_ref().is_some_and(|c| c.is_executing_here());
            tokio::select! {
                biased;
                open = changed(&mut result) => if !open { result = None },
                _ = poll.tick(), if !here => {
                    if let Some(ended) = ended_result(&state, run_id).await {
                        // A result that arrived meanwhile is the run's own: prefer it.
                        break local_result(&mut result).unwrap_or(ended);
                    }
                }
                _ = tick.tick() => if tx.send(Ok(Bytes::from_static(b"\n"))).await.is_err() { return },
                // The run is not over: it goes on elsewhere. Ending the body with an error (the
                // connection is cut, no final chunk) makes the client retry; an empty 200 body
                // would read as a run that finished with no values.
                () = state.shutdown.cancelled() => {
                    let _ = tx.send(Err(std::io::Error::other("the server is shutting down"))).await;
                    return;
                }
            }
        };
        let _ = tx.send(Ok(Bytes::from(value.to_string()))).await;
    });
    HttpBody::from_stream(ReceiverStream::new(rx))
}

/// The run's result if this process's worker has handed it over.
pub(super) fn local_result(
    result: &mut Option<watch::Receiver<Option<Option<Value>>>>,
) -> Option<Value> {
    let done = result.as_mut()?.borrow_and_update().clone()?;
    Some(done.unwrap_or_else(|| {
        json!({"__error__": {"error": "InternalError", "message": "An internal error occurred"}})
    }))
}

/// Resolves when the local result changes: false once its sender is gone. Never without one.
pub(super) async fn changed(result: &mut Option<watch::Receiver<Option<Option<Value>>>>) -> bool {
    match result.as_mut() {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The final values of a run the store says has ended; `None` while it is in flight.
pub(super) async fn ended_result(state: &AppState, run_id: RunId) -> Option<Value> {
    match state.store.get_run(run_id).await {
        Ok(Some(run)) if run.status.is_inflight() => None,
        Ok(Some(run)) => match finished_result(state, &run).await {
            Ok(values) => Some(values),
            Err(error) => {
                tracing::warn!(?error, %run_id, "could not read the finished run's values");
                None
            }
        },
        // Deleted once it ended (stateless runs).
        Ok(None) => Some(json!({})),
        Err(error) => {
            tracing::warn!(%error, %run_id, "could not read the run");
            None
        }
    }
}

/// The result of a finished run, as `/join` returns it.
pub(super) async fn finished_result(state: &AppState, run: &Run) -> ApiResult<Value> {
    let thread = state.store.get_thread(run.thread_id).await?;
    let values = thread
        .as_ref()
        .and_then(|t| t.values.clone())
        .unwrap_or_else(|| json!({}));
    if run.status == RunStatus::Error {
        let error = thread.and_then(|t| t.error).unwrap_or_else(|| RunFailure {
            error: "Error".into(),
            message: "run failed".into(),
        });
        return Ok(json!({"__error__": error}));
    }
    Ok(values)
}

/// A body that resolves when the run ends (or at once when it already has).
pub(super) fn result_body(state: &AppState, run: &Run) -> HttpBody {
    let channel = state.bus.get(run.run_id);
    let result = channel.as_ref().map(|c| c.result());
    wait_body(state, run.run_id, channel, result)
}
