//! Executes one claimed run: publishes its events, keeps its lease alive, and records how it
//! ended (final status before the stream closes, as clients expect).

use super::ending::{Ending, RunResult, flush_or_log};
use super::pool::Active;
use super::{RunKwargs, Runner, lock, webhook};
use crate::graph::Spent;
use crate::graph::Start as GraphStart;
use crate::graph::interrupts::{self, Breakpoints, ResumeCommand};
use crate::graph::{
    EventKind, EventSink, Graph, GraphEvent, Invocation, Outcome, RunError, RunScope, invoke,
};
use crate::ids::RunId;
use crate::store::retry::patiently;
use crate::store::{
    CancelAction, EventId, Fence, JsonMap, Lease, LeaseState, Owner, Run, RunEnd, RunFailure,
    RunStatus, RunStore, StoreError, ThreadStatus, ThreadSummary,
};
use crate::stream::{Bus, Encoder, RunChannel};
use crate::telemetry::metrics;
use crate::time::Timestamp;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// The run's command and breakpoints, checked against the graph at creation; a row that no
/// longer parses (the graph changed) fails the run with the reason. An attempt that resumes
/// an earlier one does not apply the command again: it is in the checkpoints already.
fn human_input(
    kwargs: &RunKwargs,
    graph: &Graph,
    resumed: bool,
) -> Result<(Option<ResumeCommand>, Breakpoints), RunError> {
    let command = match &kwargs.command {
        Some(_) if resumed => None,
        Some(command) => {
            command.check(graph).map_err(RunError::Input)?;
            Some(command.clone())
        }
        None => None,
    };
    let breakpoints = Breakpoints {
        before: kwargs.interrupt_before.clone(),
        after: kwargs.interrupt_after.clone(),
    };
    breakpoints.check(graph).map_err(RunError::Input)?;
    Ok((command, breakpoints))
}

/// Where a claimed run's graph starts.
struct StartPoint {
    input: Option<Value>,
    start: GraphStart,
    /// The run already wrote checkpoints (an earlier attempt): it goes on from them.
    resumed: bool,
}

impl Runner {
    /// Executes a claimed run under its own root span: one trace per run, whichever request
    /// created it (runs outlive requests).
    pub(super) async fn execute(self: Arc<Self>, lease: Lease) {
        let Lease { run, fence, .. } = lease;
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
            .execute_decoded(run, fence, kwargs, corrupt)
            .instrument(span.clone())
            .await;
        span.record("status", status);
        metrics::run_finished(&graph_id, status, started.elapsed());
    }

    /// Runs the graph and records the end; returns the status label for metrics and traces.
    async fn execute_decoded(
        self: Arc<Self>,
        run: Run,
        fence: Fence,
        kwargs: RunKwargs,
        corrupt: Option<StoreError>,
    ) -> &'static str {
        let channel = self
            .bus
            .open_for_execution(run.run_id, run.thread_id, kwargs.resumable);
        // Registered before the first await: a cancellation that arrives while the run is
        // being prepared must find it (a client that saw "running" may cancel at once).
        let cancel = CancellationToken::new();
        let action = Arc::new(Mutex::new(None));
        let lost = Arc::new(AtomicBool::new(false));
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
            lost.clone(),
        )));
        let start = match corrupt {
            Some(error) => Err(RunError::Store(error)),
            None => self.start_point(&run, &kwargs).await,
        };
        let resumed = start.as_ref().is_ok_and(|s| s.resumed);
        self.announce(&run, &fence, &channel, resumed).await;
        let ending = match start {
            Err(error) => Ending::Failed(error),
            Ok(start) => {
                self.invoke_graph(&run, &fence, &kwargs, &channel, start, cancel.clone())
                    .await
            }
        };
        drop(keeper);
        lock(&self.active).remove(&run.run_id);
        self.keys.drop_keys(run.run_id);

        let ending = match ending {
            _ if lost.load(Ordering::Acquire) => Ending::Lost,
            Ending::Cancelled(_) => Ending::Cancelled(*lock(&action)),
            other => other,
        };
        let status = ending.label();
        let outcome = self
            .record_end(&run, &fence, &kwargs, &channel, ending)
            .await;
        let result = match outcome {
            Err(StoreError::LeaseLost(_)) | Ok(None) => {
                // Another worker goes on with the run (or will, once it is handed back):
                // streams and waiters here follow it through the store.
                self.bus.hand_over(run.run_id);
                return status;
            }
            Ok(Some(result)) => Some(result),
            Err(error) => {
                tracing::error!(%error, "could not record the end of a run");
                None
            }
        };
        self.after_end(&run, &kwargs, result).await;
        status
    }

    /// What follows an end recorded here: the webhook, a stateless run's thread deleted, and
    /// the stream closed with the result.
    async fn after_end(&self, run: &Run, kwargs: &RunKwargs, result: Option<RunResult>) {
        if let Some(url) = &kwargs.webhook {
            self.send_webhook(run.run_id, url, result.as_ref()).await;
        }
        // A stateless run's thread goes before the stream closes, so a client that saw the end
        // never finds the temporary thread.
        if kwargs.temporary
            && kwargs.delete_on_completion
            && let Err(error) = self.store.delete_thread(run.thread_id).await
        {
            tracing::warn!(%error, "could not delete a stateless run's thread");
        }
        self.bus.close(run.run_id, result.map(RunResult::into_wire));
    }

    /// Posts the finished run, with its final values, to its webhook (in the background).
    async fn send_webhook(&self, run_id: RunId, url: &str, result: Option<&RunResult>) {
        let run = match self.store.get_run(run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "webhook not sent: the finished run could not be read");
                return;
            }
        };
        let body = webhook::Body {
            run: &run,
            values: result,
            webhook_sent_at: Timestamp::now(),
        };
        let bytes = match serde_json::to_vec(&body) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(%error, "webhook not sent: the run could not be written as JSON");
                return;
            }
        };
        webhook::spawn_delivery(
            self.settings.webhooks.clone(),
            url.to_owned(),
            run_id,
            bytes,
        );
    }

    /// Where the graph starts: where an earlier attempt of this run left its checkpoints (the
    /// thread's newest root checkpoint is the run's own), else the run's input or checkpoint.
    async fn start_point(&self, run: &Run, kwargs: &RunKwargs) -> Result<StartPoint, RunError> {
        let never = CancellationToken::new();
        let head = patiently(
            self.settings.store_patience,
            &never,
            "find where the run is",
            || self.store.latest_checkpoint(run.thread_id, ""),
        )
        .await?;
        if head.is_some_and(|h| h.run_id == Some(run.run_id)) {
            // As a subgraph resumes: from the head, and a breakpoint the earlier attempt had
            // not reached yet still stops the run.
            return Ok(StartPoint {
                input: None,
                start: GraphStart::Resume,
                resumed: true,
            });
        }
        Ok(StartPoint {
            input: Some(kwargs.input.clone()).filter(|v| !v.is_null()),
            start: kwargs
                .checkpoint_id()
                .map_or(GraphStart::Head, GraphStart::From),
            resumed: false,
        })
    }

    /// The stream's first frame of this attempt. A resumed run's stream continues after what
    /// earlier attempts sent, so a client reconnecting with `Last-Event-ID` sees one stream.
    async fn announce(&self, run: &Run, fence: &Fence, channel: &RunChannel, resumed: bool) {
        if resumed {
            match self.store.last_event_id(run.run_id).await {
                // The dead worker may have sent frames it never stored, stamped by its own
                // clock up to when it stopped: at most about a lease after its last stored
                // frame. Jumping a lease ahead keeps every new id above any a client saw.
                Ok(Some(last)) => channel.continue_after(EventId {
                    ms: last.ms + self.settings.run_lease.as_millis() as i64,
                    seq: 0,
                }),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "could not read the run's stored events"),
            }
            tracing::info!(
                attempt = fence.attempt,
                "resuming the run from its checkpoints"
            );
        } else if !channel.is_fresh() {
            // Runs created through this process's API already announced themselves.
            return;
        }
        let data = json!({"run_id": run.run_id, "attempt": fence.attempt.max(1)});
        channel.publish(
            "metadata".into(),
            data.to_string(),
            self.bus.thread_sender(run.thread_id).as_ref(),
        );
    }

    /// Ends a run whose task panicked: its worker carries on, the run fails with the reason
    /// instead of waiting for its lease to lapse.
    pub(super) async fn fail_panicked(&self, run: &Run, fence: &Fence) {
        lock(&self.active).remove(&run.run_id);
        let failure = RunFailure {
            error: "InternalError".into(),
            message: "the run stopped on an internal error (a panic); see the server log".into(),
        };
        let summary = ThreadSummary {
            status: ThreadStatus::Error,
            values: None,
            error: Some(failure.clone()),
            interrupts: json!({}),
        };
        let end = RunEnd::Finished(RunStatus::Error);
        if let Err(error) = self
            .store
            .finish_run(run.run_id, Some(fence), &end, Some(&summary))
            .await
        {
            tracing::error!(%error, run_id = %run.run_id, "could not record a panicked run");
        }
        if let Some(channel) = self.bus.get(run.run_id) {
            channel.publish(
                "error".into(),
                json!(failure).to_string(),
                self.bus.thread_sender(run.thread_id).as_ref(),
            );
            flush_or_log(&*self.store, &channel).await;
        }
        let result = RunResult::Failed { error: failure };
        self.bus.close(run.run_id, Some(result.into_wire()));
    }

    /// Runs the graph from `from` to its end, a pause, or a stop (cancel, drain, deadline),
    /// recording the owner's spend as it goes.
    async fn invoke_graph(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
        from: StartPoint,
        cancel: CancellationToken,
    ) -> Ending {
        let Some(graph) = kwargs.graph_id().and_then(|id| self.registry.get(id)) else {
            let id = kwargs.graph_id().unwrap_or_default().to_owned();
            return Ending::Failed(RunError::Input(format!("graph '{id}' is not registered")));
        };
        let scope = match self.run_scope(run, fence, kwargs, channel, &graph, &cancel) {
            Ok(scope) => scope,
            Err(error) => return Ending::Failed(error),
        };
        let (command, breakpoints) = match human_input(kwargs, &graph, from.resumed) {
            Ok(parsed) => parsed,
            Err(error) => return Ending::Failed(error),
        };
        let inv = Invocation {
            graph: &graph,
            ns: String::new(),
            input: from.input,
            start: from.start,
            parents: JsonMap::new(),
            command,
            breakpoints,
        };
        let flusher = self.flush_periodically(channel.clone());
        let owner = self.run_owner(run).await;
        let spend = owner
            .clone()
            .map(|owner| self.record_spend_periodically(run.run_id, owner, scope.clone()));
        let mut result = self.within_limits(invoke(&scope, inv), &cancel).await;
        flusher.stop().await;
        drop(spend);
        // The thread's values and the run's result are what clients see.
        if let Ok(outcome) = &mut result {
            graph.channels.hide_in(&mut outcome.values);
        }
        if let Some(owner) = &owner {
            record_spend(&*self.store, run.run_id, owner, &scope).await;
        }
        if let Ok(outcome) = &result {
            self.mark_run(run.run_id, graph.run_marks(&outcome.values))
                .await;
        }
        self.ending(result, &cancel)
    }

    /// The run's scope: its stream sink, the ids it carries as metadata, its config (with the
    /// provider keys it brought, held apart until now), its lease and its cancellation.
    fn run_scope(
        &self,
        run: &Run,
        fence: &Fence,
        kwargs: &RunKwargs,
        channel: &Arc<RunChannel>,
        graph: &Graph,
        cancel: &CancellationToken,
    ) -> Result<Arc<RunScope>, RunError> {
        let modes = kwargs.stream_mode.clone();
        let sink = Arc::new(RunSink {
            encoder: Mutex::new(Encoder::new(modes, kwargs.subgraphs, kwargs.temporary)),
            channel: channel.clone(),
            bus: self.bus.clone(),
        });
        // Only the ids: the run's own metadata (up to the body limit) is stored once, on the run,
        // and is not copied into every checkpoint and every streamed token's metadata.
        let mut metadata: JsonMap = run
            .metadata
            .iter()
            .filter(|(k, _)| ["assistant_id", "cron_id"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        metadata.insert("graph_id".into(), json!(graph.id));
        let mut config = kwargs.config.clone();
        if kwargs.run_keys {
            let keys = self.keys.get(run.run_id).ok_or(RunError::KeysUnavailable)?;
            keys.put_into(&mut config);
        }
        let scope = RunScope::new(
            self.store.clone(),
            run.thread_id,
            Some(run.run_id),
            config,
            metadata,
            sink,
            cancel.clone(),
        )
        .leased(
            fence.clone(),
            self.shutdown.clone(),
            self.settings.store_patience,
        );
        Ok(Arc::new(scope))
    }

    /// Whose spend it is, read once: the record stays the owner's if the thread goes.
    async fn run_owner(&self, run: &Run) -> Option<Owner> {
        match self.store.get_thread(run.thread_id).await {
            Ok(Some(thread)) => Some(thread.owner),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%error, "could not read the run's owner; its spend goes unrecorded");
                None
            }
        }
    }

    /// The graph's result, unless a shutdown's drain timeout or the run's deadline comes first.
    /// On shutdown every graph of the run stops at its next step boundary (`drain`); a step that
    /// outlasts the drain timeout is cut off and redone by the next worker.
    async fn within_limits(
        &self,
        graph: impl std::future::Future<Output = Result<Outcome, RunError>>,
        cancel: &CancellationToken,
    ) -> Result<Outcome, RunError> {
        let deadline = async {
            self.shutdown.cancelled().await;
            tokio::time::sleep(self.settings.drain_timeout).await;
        };
        let overdue = async {
            match self.settings.run_limits.run_deadline {
                // Per attempt: a run resumed elsewhere gets the time again (attempts are
                // bounded by `max_attempts`).
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = graph => result,
            () = deadline => Err(RunError::Drained),
            () = overdue => {
                // Stop the graph's tasks too, not just stop waiting for them.
                cancel.cancel();
                let limit = self.settings.run_limits.run_deadline.unwrap_or_default();
                Err(RunError::Deadline(limit.as_secs()))
            }
        }
    }

    /// Puts what the graph marks in its final values (`Graph::run_marks`) on the run's
    /// metadata.
    async fn mark_run(&self, run_id: RunId, marks: JsonMap) {
        if marks.is_empty() {
            return;
        }
        if let Err(error) = self.store.merge_run_metadata(run_id, &marks).await {
            tracing::warn!(%error, "could not put the graph's marks on the run");
        }
    }

    /// How the run ended, from the graph's result and why it stopped.
    fn ending(&self, result: Result<Outcome, RunError>, cancel: &CancellationToken) -> Ending {
        match result {
            Ok(Outcome {
                values,
                pause: Some(pause),
                checkpoint,
            }) => Ending::Paused {
                values,
                pause,
                by_task: checkpoint.map_or_else(|| json!({}), |cp| interrupts::by_task(&cp.tasks)),
            },
            Ok(outcome) => Ending::Done(outcome.values),
            Err(RunError::Store(StoreError::LeaseLost(_))) => Ending::Lost,
            Err(_) if self.shutdown.is_cancelled() => Ending::Left,
            Err(RunError::Cancelled) => Ending::Cancelled(None),
            // Cancelled by its deadline, not by a client.
            Err(error @ RunError::Deadline(_)) => Ending::Failed(error),
            Err(error) if cancel.is_cancelled() => {
                tracing::debug!(%error, "run stopped after cancellation");
                Ending::Cancelled(None)
            }
            Err(error) => Ending::Failed(error),
        }
    }

    /// Records what the run has spent every `SPEND_EVERY` while it goes on, so the owner's
    /// daily spend counts a long run before it ends (and a crash loses at most one period).
    /// Stops when the returned token is cancelled.
    fn record_spend_periodically(
        &self,
        run_id: RunId,
        owner: Owner,
        scope: Arc<RunScope>,
    ) -> tokio_util::sync::DropGuard {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let store = self.store.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SPEND_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut recorded = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stopped.cancelled() => return,
                }
                let (tokens, _) = scope.local::<Spent>().get();
                if tokens != recorded {
                    record_spend(&*store, run_id, &owner, &scope).await;
                    recorded = tokens;
                }
            }
        });
        stop.drop_guard()
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
                flush_or_log(&*store, &channel).await;
            }
        });
        Flusher { stop, task }
    }

    /// Renews the lease until the run ends; cancels the run when asked to or when the lease
    /// was lost.
    async fn keep_lease(
        self: Arc<Self>,
        run_id: RunId,
        cancel: CancellationToken,
        action: Arc<Mutex<Option<CancelAction>>>,
        lost: Arc<AtomicBool>,
    ) {
        // The first renewal is at once: a cancellation asked for between the claim and the
        // run's registration here (or while no worker held a resumed run) is seen before the
        // run does any work.
        let every = self.settings.run_lease / 3;
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                tokio::time::sleep(every).await;
            }
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
                    lost.store(true, Ordering::Release);
                    cancel.cancel();
                    return;
                }
                Err(error) => tracing::warn!(%error, "lease renewal failed"),
            }
        }
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

/// How often a running run's spend is written down.
const SPEND_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Records (replaces) what the run spent in all its attempts, as its cost meter counts them,
/// under its owner, for per-owner spend limits.
async fn record_spend(store: &dyn RunStore, run_id: RunId, owner: &Owner, scope: &RunScope) {
    let (tokens, usd) = scope.local::<Spent>().get();
    if tokens == 0 {
        return;
    }
    if let Err(error) = store
        .record_spend(run_id, owner, tokens, usd, Timestamp::now())
        .await
    {
        tracing::warn!(%error, "could not record what the run spent");
    }
}
