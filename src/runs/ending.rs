//! How a run ended, recorded: its status and the thread's new summary (values, error or
//! interrupts) in one store call, a rollback, and the values waiters get.

use super::{RunKwargs, Runner};
use crate::graph::RunError;
use crate::graph::interrupts::{self, Pause};
use crate::graph::state::StateBuilder;
use crate::store::retry::patiently;
use crate::store::{
    CancelAction, Fence, JsonMap, Run, RunEnd, RunStatus, StoreError, ThreadStatus, ThreadSummary,
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
    ) -> Result<Option<Value>, StoreError> {
        let result = match ending {
            Ending::Done(values) => {
                let summary = summary(ThreadStatus::Idle, Value::Object(values.clone()), None);
                let end = RunEnd::Finished(RunStatus::Success);
                self.finish(run, fence, end, Some(summary), channel).await?;
                Value::Object(values)
            }
            Ending::Paused {
                values,
                pause,
                by_task,
            } => {
                let mut summary = summary(
                    ThreadStatus::Interrupted,
                    Value::Object(values.clone()),
                    None,
                );
                summary.interrupts = by_task;
                let end = RunEnd::Finished(RunStatus::Interrupted);
                self.finish(run, fence, end, Some(summary), channel).await?;
                let mut result = values;
                if let Pause::Interrupts(_) = pause {
                    result.insert("__interrupt__".into(), pause.wire());
                }
                Value::Object(result)
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
    ) -> Result<Value, StoreError> {
        if let RunError::Store(e) = &error {
            tracing::error!(error = %e, "run failed on a storage error");
        }
        let (kind, message) = error.describe();
        let detail = json!({"error": kind, "message": message});
        channel.publish(
            "error".into(),
            detail.to_string(),
            self.bus.thread_sender(run.thread_id).as_ref(),
        );
        let values = self.head_values(run, kwargs).await?;
        // A run that failed before it answered anything (a resume that no longer matches)
        // leaves the thread's pause standing: it still waits for a person.
        let (rest, waiting) = self.at_rest(run).await?;
        let status = match rest {
            ThreadStatus::Interrupted if has_entries(&waiting) => ThreadStatus::Interrupted,
            _ => ThreadStatus::Error,
        };
        let mut summary = summary(status, values, Some(detail.clone()));
        summary.interrupts = waiting;
        self.finish(
            run,
            fence,
            RunEnd::Finished(RunStatus::Error),
            Some(summary),
            channel,
        )
        .await?;
        Ok(json!({"__error__": detail}))
    }

    async fn record_interrupt(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
    ) -> Result<Value, StoreError> {
        let (status, waiting) = self.at_rest(run).await?;
        let values = self.head_values(run, kwargs).await?;
        let mut summary = summary(status, values.clone(), None);
        summary.interrupts = waiting;
        self.finish(
            run,
            fence,
            RunEnd::Finished(RunStatus::Interrupted),
            Some(summary),
            channel,
        )
        .await?;
        Ok(values)
    }

    async fn record_rollback(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
    ) -> Result<Value, StoreError> {
        self.finish(run, fence, RunEnd::RolledBack, None, channel)
            .await?;
        let values = self.head_values(run, kwargs).await?;
        let busy = !self.store.inflight_runs(run.thread_id).await?.is_empty();
        let (rest, waiting) = self.at_rest(run).await?;
        let status = if busy { ThreadStatus::Busy } else { rest };
        let values_opt = if values.as_object().is_some_and(|m| m.is_empty()) {
            Value::Null
        } else {
            values.clone()
        };
        let mut s = summary(status, values_opt, None);
        s.interrupts = waiting;
        self.store
            .set_thread_summary(run.thread_id, &s, Timestamp::now())
            .await?;
        Ok(values)
    }

    /// How the thread rests at its head checkpoint: `interrupted` when nodes are pending (an
    /// interrupt, a breakpoint, a cancelled step), else `idle`; and its pending interrupts.
    async fn at_rest(&self, run: &Run) -> Result<(ThreadStatus, Value), StoreError> {
        let never = CancellationToken::new();
        let head = patiently(
            self.settings.store_patience,
            &never,
            "read the thread's head",
            || self.store.latest_checkpoint(run.thread_id, ""),
        )
        .await?;
        Ok(match head {
            Some(cp) if !cp.next.is_empty() => {
                (ThreadStatus::Interrupted, interrupts::by_task(&cp.tasks))
            }
            _ => (ThreadStatus::Idle, json!({})),
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

    /// The values at the thread's latest root checkpoint (`{}` when there is none).
    async fn head_values(&self, run: &Run, kwargs: &RunKwargs) -> Result<Value, StoreError> {
        let Some(graph) = kwargs.graph_id().and_then(|id| self.registry.get(id)) else {
            return Ok(json!({}));
        };
        let never = CancellationToken::new();
        let head = patiently(
            self.settings.store_patience,
            &never,
            "read the run's state",
            || self.store.latest_checkpoint(run.thread_id, ""),
        )
        .await?;
        let Some(head) = head else {
            return Ok(json!({}));
        };
        let mut builder = StateBuilder::new(&*self.store, &graph, run.thread_id);
        Ok(Value::Object(builder.values(&head).await?))
    }
}

fn has_entries(value: &Value) -> bool {
    value.as_object().is_some_and(|m| !m.is_empty())
}

pub(super) fn summary(status: ThreadStatus, values: Value, error: Option<Value>) -> ThreadSummary {
    ThreadSummary {
        status,
        values: Some(values).filter(|v| !v.is_null()),
        error,
        interrupts: json!({}),
    }
}

/// Writes the channel's unflushed frames to the store.
pub(super) async fn flush(
    store: &dyn crate::store::Store,
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
pub(super) async fn flush_or_log(store: &dyn crate::store::Store, channel: &RunChannel) {
    if let Err(error) = flush(store, channel).await {
        tracing::warn!(%error, "could not store run events; will retry");
    }
}
