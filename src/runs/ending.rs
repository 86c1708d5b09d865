//! How a run ended, recorded: its status and the thread's new summary (values, error or
//! interrupts) in one store call, a rollback, and the values waiters get.

use super::{RunKwargs, Runner};
use crate::graph::RunError;
use crate::graph::interrupts::{self, Pause};
use crate::graph::state::StateBuilder;
use crate::store::retry::patiently;
use crate::store::{
    CancelAction, Fence, JsonMap, Run, RunEnd, RunFailure, RunStatus, StoreError, ThreadStatus,
    ThreadSummary,
};
use crate::stream::RunChannel;
use crate::time::Timestamp;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How the graph invocation ended, before it is written down.
pub(super) enum Ending {
    Done(JsonMap),
    /// The graph waits for a person: an interrupt or a breakpoint.
    Paused {
        values: JsonMap,
        pause: Pause,
        /// The thread's `interrupts`: `{task_id: [...]}`.
        by_task: Value,
    },
    Cancelled(Option<CancelAction>),
    Failed(RunError),
    /// The process is shutting down: the run is handed back for another worker to resume.
    Left,
    /// Another worker holds the run now: nothing more is written by this one.
    Lost,
}

impl Ending {
    /// The run's final status as metrics and traces name it (`left` when a shutdown hands the
    /// run to another worker, `lost` when another worker took it over).
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Done(_) => "success",
            Self::Paused { .. } => "interrupted",
            Self::Failed(_) => "error",
            Self::Cancelled(Some(CancelAction::Rollback)) => "rolled_back",
            Self::Cancelled(_) => "interrupted",
            Self::Left => "left",
            Self::Lost => "lost",
        }
    }
}

/// What a run that ended here leaves for `/join` and `wait` callers and its webhook: the
/// values, or `{"__error__": {error, message}}`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub(super) enum RunResult {
    /// The state the run left (for a paused run, with `__interrupt__`: what it waits on).
    Values(JsonMap),
    Failed {
        #[serde(rename = "__error__")]
        error: RunFailure,
    },
}

impl RunResult {
    /// As waiters see it (the values are moved, not copied).
    pub(super) fn into_wire(self) -> Value {
        match self {
            Self::Values(values) => Value::Object(values),
            failed @ Self::Failed { .. } => json!(failed),
        }
    }
}

/// The thread's root head as a run leaves it: its values, and what it waits on.
struct Head {
    values: JsonMap,
    /// `interrupted` when nodes are pending (an interrupt, a breakpoint, a cancelled step),
    /// else `idle`.
    status: ThreadStatus,
    /// `{task_id: [...]}` of the pending interrupts (`{}` when none).
    interrupts: Value,
}

impl Head {
    /// The thread's summary with this status.
    fn summary(&self, status: ThreadStatus, error: Option<RunFailure>) -> ThreadSummary {
        ThreadSummary {
            status,
            values: Some(Value::Object(self.values.clone())),
            error,
            interrupts: self.interrupts.clone(),
        }
    }

    fn waits(&self) -> bool {
        self.interrupts.as_object().is_some_and(|m| !m.is_empty())
    }
}

impl Runner {
    /// Stores the run's end and the thread's new summary; returns the result for waiters, or
    /// `None` when the run is not over (handed back, or another worker holds it).
    pub(super) async fn record_end(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
        ending: Ending,
    ) -> Result<Option<RunResult>, StoreError> {
        let result = match ending {
            Ending::Done(values) => {
                let summary = ThreadSummary {
                    status: ThreadStatus::Idle,
                    values: Some(Value::Object(values.clone())),
                    error: None,
                    interrupts: json!({}),
                };
                let end = RunEnd::Finished(RunStatus::Success);
                self.finish(run, fence, end, Some(summary), channel).await?;
                RunResult::Values(values)
            }
            Ending::Paused {
                values,
                pause,
                by_task,
            } => {
                let summary = ThreadSummary {
                    status: ThreadStatus::Interrupted,
                    values: Some(Value::Object(values.clone())),
                    error: None,
                    interrupts: by_task,
                };
                let end = RunEnd::Finished(RunStatus::Interrupted);
                self.finish(run, fence, end, Some(summary), channel).await?;
                let mut result = values;
                if let Pause::Interrupts(_) = pause {
                    result.insert("__interrupt__".into(), pause.wire());
                }
                RunResult::Values(result)
            }
            Ending::Failed(error) => {
                self.record_failure(run, fence, kwargs, channel, error)
                    .await?
            }
            Ending::Cancelled(Some(CancelAction::Rollback)) => {
                self.record_rollback(run, fence, kwargs, channel).await?
            }
            Ending::Cancelled(_) => self.record_interrupt(run, fence, kwargs, channel).await?,
            Ending::Left => {
                // What was done is checkpointed; the stream so far is stored; the lease lapses
                // now, so another replica resumes the run without waiting.
                flush_or_log(&*self.store, channel).await;
                match self.store.release_lease(fence).await {
                    Ok(true) => tracing::info!("run handed back for another worker to resume"),
                    Ok(false) => tracing::info!("run already taken over by another worker"),
                    Err(error) => {
                        tracing::warn!(%error, "could not hand the run back; its lease will lapse")
                    }
                }
                return Ok(None);
            }
            Ending::Lost => {
                tracing::info!("another worker holds the run now; this one stops");
                return Ok(None);
            }
        };
        Ok(Some(result))
    }

    async fn record_failure(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
        error: RunError,
    ) -> Result<RunResult, StoreError> {
        if let RunError::Store(e) = &error {
            tracing::error!(error = %e, "run failed on a storage error");
        }
        let (kind, message) = error.describe();
        let failure = RunFailure {
            error: kind,
            message,
        };
        channel.publish(
            "error".into(),
            json!(failure).to_string(),
            self.bus.thread_sender(run.thread_id).as_ref(),
        );
        let head = self.head(run, kwargs).await?;
        // A run that failed before it answered anything (a resume that no longer matches)
        // leaves the thread's pause standing: it still waits for a person.
        let status = match head.status {
            ThreadStatus::Interrupted if head.waits() => ThreadStatus::Interrupted,
            _ => ThreadStatus::Error,
        };
        let summary = head.summary(status, Some(failure.clone()));
        let end = RunEnd::Finished(RunStatus::Error);
        self.finish(run, fence, end, Some(summary), channel).await?;
        Ok(RunResult::Failed { error: failure })
    }

    async fn record_interrupt(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
    ) -> Result<RunResult, StoreError> {
        let head = self.head(run, kwargs).await?;
        let summary = head.summary(head.status, None);
        let end = RunEnd::Finished(RunStatus::Interrupted);
        self.finish(run, fence, end, Some(summary), channel).await?;
        Ok(RunResult::Values(head.values))
    }

    async fn record_rollback(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
    ) -> Result<RunResult, StoreError> {
        self.finish(run, fence, RunEnd::RolledBack, None, channel)
            .await?;
        let head = self.head(run, kwargs).await?;
        let busy = !self.store.inflight_runs(run.thread_id).await?.is_empty();
        let status = if busy {
            ThreadStatus::Busy
        } else {
            head.status
        };
        let mut summary = head.summary(status, None);
        if head.values.is_empty() {
            // Rolled back to nothing: the thread shows no state, as before its first run.
            summary.values = None;
        }
        self.store
            .set_thread_summary(run.thread_id, &summary, Timestamp::now())
            .await?;
        Ok(RunResult::Values(head.values))
    }

    /// The thread's root head checkpoint as the run leaves it (no values when there is none,
    /// or the graph is not registered here).
    async fn head(&self, run: &Run, kwargs: &RunKwargs) -> Result<Head, StoreError> {
        let never = CancellationToken::new();
        let head = patiently(
            self.settings.store_patience,
            &never,
            "read the thread's head",
            || self.store.latest_checkpoint(run.thread_id, ""),
        )
        .await?;
        let Some(head) = head else {
            return Ok(Head {
                values: JsonMap::new(),
                status: ThreadStatus::Idle,
                interrupts: json!({}),
            });
        };
        let (status, interrupts) = if head.next.is_empty() {
            (ThreadStatus::Idle, json!({}))
        } else {
            (ThreadStatus::Interrupted, interrupts::by_task(&head.tasks))
        };
        let values = match kwargs.graph_id().and_then(|id| self.registry.get(id)) {
            Some(graph) => {
                let mut values = StateBuilder::new(&*self.store, &graph, run.thread_id)
                    .values(&head)
                    .await?;
                graph.channels.hide_in(&mut values);
                values
            }
            None => JsonMap::new(),
        };
        Ok(Head {
            values,
            status,
            interrupts,
        })
    }

    /// Writes the run's end under its fence, retrying while the database is away: a run whose
    /// report is checkpointed must not turn into an error because one write failed.
    async fn finish(
        &self,
        run: &Run,
        fence: &Fence,
        end: RunEnd,
        summary: Option<ThreadSummary>,
        channel: &Arc<RunChannel>,
    ) -> Result<(), StoreError> {
        let never = CancellationToken::new();
        let patience = self.settings.store_patience;
        if let Err(error) = patiently(patience, &never, "store the run's events", || {
            flush(&*self.store, channel)
        })
        .await
        {
            tracing::warn!(%error, "could not store the run's last events");
        }
        patiently(patience, &never, "record the end of the run", || {
            self.store
                .finish_run(run.run_id, Some(fence), &end, summary.as_ref())
        })
        .await
    }
}

/// Writes the channel's unflushed frames to the store.
pub(super) async fn flush(
    store: &dyn crate::store::EventLog,
    channel: &RunChannel,
) -> Result<(), StoreError> {
    let frames = channel.unflushed();
    let Some(last) = frames.last().map(|f| f.id) else {
        return Ok(());
    };
    let events: Vec<_> = frames
        .iter()
        .map(|f| f.to_stored(channel.thread_id))
        .collect();
    store.append_events(&events).await?;
    channel.mark_flushed(last);
    Ok(())
}

/// `flush` from a place that carries on regardless: the frames stay for the next flush.
pub(super) async fn flush_or_log(store: &dyn crate::store::EventLog, channel: &RunChannel) {
    if let Err(error) = flush(store, channel).await {
        tracing::warn!(%error, "could not store run events; will retry");
    }
}
