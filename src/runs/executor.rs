//! Executes one claimed run: publishes its events, keeps its lease alive, and records how it
//! ended (final status before the stream closes, as clients expect).

use super::{Active, RunKwargs, Runner, lock};
use crate::graph::state::StateBuilder;
use crate::graph::{
    EventKind, EventSink, GraphEvent, Invocation, RunError, RunScope, Start, invoke,
};
use crate::store::{
    CancelAction, EventId, JsonMap, Lease, LeaseState, Run, RunEnd, RunStatus, StoreError,
    ThreadStatus, ThreadSummary,
};
use crate::stream::{Bus, Encoder, RunChannel, StreamModes};
use crate::telemetry::metrics;
use crate::time::Timestamp;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

/// Encodes graph events for the run's stream modes and publishes them.
struct RunSink {
    encoder: Mutex<Encoder>,
    channel: Arc<RunChannel>,
    bus: Bus,
}

impl EventSink for RunSink {
    fn wants(&self, ns: &str, kind: EventKind) -> bool {
        lock(&self.encoder).wants(ns, kind)
    }

    fn emit(&self, event: GraphEvent) {
        let frames = lock(&self.encoder).encode(event);
        if frames.is_empty() {
            return;
        }
        let thread_tx = self.bus.thread_sender(self.channel.thread_id);
        for (name, data) in frames {
            self.channel.publish(name, data, thread_tx.as_ref());
        }
    }
}

/// How the graph invocation ended, before it is written down.
enum Ending {
    Done(JsonMap),
    Cancelled(Option<CancelAction>),
    Failed(RunError),
}

impl Ending {
    /// The run's final status as metrics and traces name it (`left` when a shutdown stops the
    /// run and leaves it for another worker).
    fn label(&self, shutting_down: bool) -> &'static str {
        match self {
            Self::Done(_) => "success",
            Self::Failed(_) => "error",
            Self::Cancelled(Some(CancelAction::Rollback)) => "rolled_back",
            Self::Cancelled(_) if shutting_down => "left",
            Self::Cancelled(_) => "interrupted",
        }
    }
}

impl Runner {
    /// Executes a claimed run under its own root span: one trace per run, whichever request
    /// created it (runs outlive requests).
    pub(super) async fn execute(self: Arc<Self>, lease: Lease) {
        let run = lease.run;
        // A row that does not decode fails the run with the reason, never runs on defaults.
        let (kwargs, corrupt) = match RunKwargs::decode(&run.kwargs) {
            Ok(kwargs) => (kwargs, None),
            Err(error) => (RunKwargs::default(), Some(error)),
        };
        let graph_id = kwargs.graph_id().unwrap_or("unknown").to_owned();
        let span = tracing::info_span!(parent: None, "run", otel.name = %format!("run {graph_id}"),
            run_id = %run.run_id, thread_id = %run.thread_id, graph_id = %graph_id,
            status = tracing::field::Empty);
        let waited = Timestamp::now()
            .millis()
            .saturating_sub(run.created_at.millis());
        metrics::run_started(&graph_id, Duration::from_millis(waited.max(0) as u64));
        let started = Instant::now();
        let status = self
            .execute_decoded(run, kwargs, corrupt)
            .instrument(span.clone())
            .await;
        span.record("status", status);
        metrics::run_finished(&graph_id, status, started.elapsed());
    }

    /// Runs the graph and records the end; returns the status label for metrics and traces.
    async fn execute_decoded(
        self: Arc<Self>,
        run: Run,
        kwargs: RunKwargs,
        corrupt: Option<StoreError>,
    ) -> &'static str {
        let channel = self
            .bus
            .open_for_execution(run.run_id, run.thread_id, kwargs.resumable);
        let publish = |event: &str, data: Value| {
            let thread_tx = self.bus.thread_sender(run.thread_id);
            channel.publish(event.to_owned(), data.to_string(), thread_tx.as_ref());
        };
        // Runs created through this process's API already announced themselves.
        if channel.is_fresh() {
            publish("metadata", json!({"run_id": run.run_id, "attempt": 1}));
        }

        let cancel = CancellationToken::new();
        let action = Arc::new(Mutex::new(None));
        lock(&self.active).insert(
            run.run_id,
            Active {
                cancel: cancel.clone(),
                action: action.clone(),
            },
        );
        // Aborted on drop too, so a panicking run does not keep renewing its lease.
        let keeper = AbortOnDropHandle::new(tokio::spawn(self.clone().keep_lease(
            run.run_id,
            cancel.clone(),
            action.clone(),
        )));
        let ending = match corrupt {
            Some(error) => Ending::Failed(RunError::Store(error)),
            None => {
                self.invoke_graph(&run, &kwargs, &channel, cancel.clone())
                    .await
            }
        };
        drop(keeper);
        lock(&self.active).remove(&run.run_id);

        let ending = match ending {
            Ending::Cancelled(_) => Ending::Cancelled(*lock(&action)),
            other => other,
        };
        let status = ending.label(self.shutdown.is_cancelled());
        let result = self.record_end(&run, &kwargs, &channel, ending).await;
        // A stateless run's thread goes before the stream closes, so a client that saw the end
        // never finds the temporary thread.
        if kwargs.temporary
            && kwargs.delete_on_completion
            && let Err(error) = self.store.delete_thread(run.thread_id).await
        {
            tracing::warn!(%error, "could not delete a stateless run's thread");
        }
        self.bus.close(run.run_id, result);
        if let Some(tx) = self.bus.thread_sender(run.thread_id) {
            let done = json!({"status": "run_done", "run_id": run.run_id});
            let id = EventId {
                ms: Timestamp::now().millis(),
                seq: 0,
            };
            let frame = crate::stream::Frame::new(
                id,
                run.run_id,
                "metadata".into(),
                done.to_string().into(),
            );
            let _ = tx.send(Arc::new(frame));
        }
        status
    }

    /// Ends a run whose task panicked: its worker carries on, the run fails with the reason
    /// instead of waiting for its lease to lapse.
    pub(super) async fn fail_panicked(&self, run: &Run) {
        lock(&self.active).remove(&run.run_id);
        let detail = json!({"error": "InternalError",
                            "message": "the run stopped on an internal error (a panic); see the server log"});
        let summary = summary(ThreadStatus::Error, Value::Null, Some(detail.clone()));
        let end = RunEnd::Finished(RunStatus::Error);
        if let Err(error) = self
            .store
            .finish_run(run.run_id, &end, Some(&summary))
            .await
        {
            tracing::error!(%error, run_id = %run.run_id, "could not record a panicked run");
        }
        if let Some(channel) = self.bus.get(run.run_id) {
            channel.publish(
                "error".into(),
                detail.to_string(),
                self.bus.thread_sender(run.thread_id).as_ref(),
            );
        }
        self.bus
            .close(run.run_id, Some(json!({"__error__": detail})));
    }

    async fn invoke_graph(
        &self,
        run: &Run,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
        cancel: CancellationToken,
    ) -> Ending {
        let Some(graph) = kwargs.graph_id().and_then(|id| self.registry.get(id)) else {
            let id = kwargs.graph_id().unwrap_or_default().to_owned();
            return Ending::Failed(RunError::Input(format!("graph '{id}' is not registered")));
        };
        let names: Vec<Value> = kwargs.stream_mode.iter().map(|m| json!(m)).collect();
        let modes = StreamModes::from_json(Some(&Value::Array(names)))
            .unwrap_or_else(|_| StreamModes::values_only());
        let sink = Arc::new(RunSink {
            encoder: Mutex::new(Encoder::new(modes, kwargs.subgraphs, kwargs.temporary)),
            channel: channel.clone(),
            bus: self.bus.clone(),
        });
        let mut metadata = run.metadata.clone();
        metadata.insert("graph_id".into(), json!(graph.id));
        let scope = Arc::new(RunScope::new(
            self.store.clone(),
            run.thread_id,
            run.run_id,
            kwargs.config.clone(),
            metadata,
            sink,
            cancel.clone(),
        ));
        let input = Some(kwargs.input.clone()).filter(|v| !v.is_null());
        let start = kwargs.checkpoint_id().map_or(Start::Head, Start::From);
        let inv = Invocation {
            graph: &graph,
            ns: String::new(),
            input,
            start,
            parents: JsonMap::new(),
        };
        let flusher = self.flush_periodically(channel.clone());
        let result = tokio::select! {
            result = invoke(&scope, inv) => result,
            () = self.shutdown.cancelled() => Err(RunError::Cancelled),
        };
        flusher.stop().await;
        match result {
            Ok(outcome) => Ending::Done(outcome.values),
            Err(RunError::Cancelled) => Ending::Cancelled(None),
            Err(error) if cancel.is_cancelled() => {
                tracing::debug!(%error, "run stopped after cancellation");
                Ending::Cancelled(None)
            }
            Err(error) => Ending::Failed(error),
        }
    }

    /// Writes resumable runs' frames to the store in batches while the run goes on.
    fn flush_periodically(&self, channel: Arc<RunChannel>) -> Flusher {
        let store = self.store.clone();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            if !channel.resumable {
                return;
            }
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stopped.cancelled() => return,
                }
                flush(&*store, &channel).await;
            }
        });
        Flusher { stop, task }
    }

    /// Renews the lease until the run ends; cancels the run when asked to or when the lease
    /// was lost.
    async fn keep_lease(
        self: Arc<Self>,
        run_id: uuid::Uuid,
        cancel: CancellationToken,
        action: Arc<Mutex<Option<CancelAction>>>,
    ) {
        let every = self.settings.run_lease / 3;
        loop {
            tokio::time::sleep(every).await;
            match self
                .store
                .renew_lease(run_id, &self.worker_id, self.settings.run_lease)
                .await
            {
                Ok(LeaseState::Held { cancel: None }) => {}
                Ok(LeaseState::Held { cancel: Some(a) }) => {
                    *lock(&action) = Some(a);
                    cancel.cancel();
                }
                Ok(LeaseState::Lost) => {
                    tracing::warn!("lost the lease; stopping the run");
                    cancel.cancel();
                }
                Err(error) => tracing::warn!(%error, "lease renewal failed"),
            }
        }
    }

    /// Stores the run's end and the thread's new summary; returns the result for waiters.
    async fn record_end(
        &self,
        run: &Run,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
        ending: Ending,
    ) -> Option<Value> {
        let outcome = match ending {
            Ending::Done(values) => {
                let summary = summary(ThreadStatus::Idle, Value::Object(values.clone()), None);
                self.finish(
                    run,
                    RunEnd::Finished(RunStatus::Success),
                    Some(summary),
                    channel,
                )
                .await
                .map(|()| Value::Object(values))
            }
            Ending::Failed(error) => self.record_failure(run, kwargs, channel, error).await,
            Ending::Cancelled(Some(CancelAction::Rollback)) => {
                self.record_rollback(run, kwargs, channel).await
            }
            Ending::Cancelled(_) if self.shutdown.is_cancelled() => {
                // Leave the run `running`: its lease expires and the last checkpoint is the
                // resume point; nothing more is written by this process.
                flush(&*self.store, channel).await;
                Ok(json!({}))
            }
            Ending::Cancelled(_) => self.record_interrupt(run, kwargs, channel).await,
        };
        match outcome {
            Ok(result) => Some(result),
            Err(error) => {
                tracing::error!(%error, "could not record the end of a run");
                None
            }
        }
    }

    async fn record_failure(
        &self,
        run: &Run,
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
        let summary = summary(ThreadStatus::Error, values, Some(detail.clone()));
        self.finish(
            run,
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
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
    ) -> Result<Value, StoreError> {
        let head = self.store.latest_checkpoint(run.thread_id, "").await?;
        let status = match &head {
            Some(cp) if !cp.next.is_empty() => ThreadStatus::Interrupted,
            _ => ThreadStatus::Idle,
        };
        let values = self.head_values(run, kwargs).await?;
        let summary = summary(status, values.clone(), None);
        self.finish(
            run,
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
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
    ) -> Result<Value, StoreError> {
        self.finish(run, RunEnd::RolledBack, None, channel).await?;
        let values = self.head_values(run, kwargs).await?;
        let busy = !self.store.inflight_runs(run.thread_id).await?.is_empty();
        let status = if busy {
            ThreadStatus::Busy
        } else {
            ThreadStatus::Idle
        };
        let values_opt = if values.as_object().is_some_and(|m| m.is_empty()) {
            Value::Null
        } else {
            values.clone()
        };
        let s = summary(status, values_opt, None);
        self.store
            .set_thread_summary(run.thread_id, &s, Timestamp::now())
            .await?;
        Ok(values)
    }

    async fn finish(
        &self,
        run: &Run,
        end: RunEnd,
        summary: Option<ThreadSummary>,
        channel: &Arc<RunChannel>,
    ) -> Result<(), StoreError> {
        flush(&*self.store, channel).await;
        self.store
            .finish_run(run.run_id, &end, summary.as_ref())
            .await
    }

    /// The values at the thread's latest root checkpoint (`{}` when there is none).
    async fn head_values(&self, run: &Run, kwargs: &RunKwargs) -> Result<Value, StoreError> {
        let Some(graph) = kwargs.graph_id().and_then(|id| self.registry.get(id)) else {
            return Ok(json!({}));
        };
        let Some(head) = self.store.latest_checkpoint(run.thread_id, "").await? else {
            return Ok(json!({}));
        };
        let mut builder = StateBuilder::new(&*self.store, &graph, run.thread_id);
        Ok(Value::Object(builder.values(&head).await?))
    }
}

fn summary(status: ThreadStatus, values: Value, error: Option<Value>) -> ThreadSummary {
    ThreadSummary {
        status,
        values: Some(values).filter(|v| !v.is_null()),
        error,
        interrupts: json!({}),
    }
}

/// The periodic flush of one run. Stopping it lets a flush in progress finish: aborted midway,
/// its page could be stored without the frames being marked as flushed, and the run's last
/// flush would store them a second time (the likely cause of 97 stored frames for 89 sent
/// in one benchmark scenario).
struct Flusher {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Flusher {
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Writes the channel's unflushed frames to the store.
async fn flush(store: &dyn crate::store::Store, channel: &RunChannel) {
    let frames = channel.unflushed();
    let Some(last) = frames.last().map(|f| f.id) else {
        return;
    };
    let events: Vec<_> = frames
        .iter()
        .map(|f| f.to_stored(channel.thread_id))
        .collect();
    match store.append_events(&events).await {
        Ok(()) => channel.mark_flushed(last),
        Err(error) => tracing::warn!(%error, "could not store run events; will retry"),
    }
}
