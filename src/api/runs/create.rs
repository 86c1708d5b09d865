//! Creating a run: the request body, what is checked before the store is touched, the run's
//! config (assistant's, then the request's, then the ids nodes read), and the insert with its
//! stream subscribed first.

use super::super::AppState;
use super::super::assistants::{resolve, settings_of};
use super::super::error::{ApiResult, AppError};
use super::super::params::check_recursion_limit;
use super::request::RunRequest;
use crate::graph::Graph;
use crate::graph::interrupts::{Breakpoints, NodeSet, ResumeCommand, ResumeError, check_resume};
use crate::ids::{CheckpointId, RunId, ThreadId};
use crate::runs::RunKwargs;
use crate::runs::keys::RunKeys;
use crate::runs::options::{IfNotExists, OnCompletion, OnDisconnect};
use crate::runs::webhook;
use crate::store::{
    Assistant, CancelAction, CronTick, JsonMap, MultitaskStrategy, Owner, Run, RunInsert,
    RunStatus, StoreError,
};
use crate::stream::bus::Subscription;
use crate::time::Timestamp;
use serde_json::{Value, json};
use tokio::sync::watch;

/// The `Idempotency-Key` header of a run request: a client that retries a request it did not
/// hear back from sends the same key, and no second (paid) run is started — the retry gets
/// 409 naming the first run, which it can join.
pub(in crate::api) struct IdempotencyKey(pub Option<String>);

impl IdempotencyKey {
    /// The key as stored, scoped to its owner: another owner's key neither collides with it
    /// nor names their run.
    fn scoped_to(self, owner: &Owner) -> Option<String> {
        self.0
            .map(|k| format!("{}:{}:{k}", owner.as_str().len(), owner.as_str()))
    }
}

/// Keys are opaque to us; a bound keeps the index small.
const MAX_KEY_LEN: usize = 255;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for IdempotencyKey {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(Self(None));
        };
        let key = value.to_str().ok().map(str::trim).unwrap_or_default();
        let visible = key.bytes().all(|b| b.is_ascii_graphic());
        if key.is_empty() || key.len() > MAX_KEY_LEN || !visible {
            return Err(AppError::Invalid(format!(
                "Idempotency-Key: expected 1 to {MAX_KEY_LEN} visible ASCII characters"
            )));
        }
        Ok(Self(Some(key.to_owned())))
    }
}

/// The input's values must fit the graph's state (`{"notes": 5}` would fail the run's first
/// step, after the run was accepted). Checked as written on a fresh state, so the thread's
/// history is not read here; keys the graph does not have are left to the run.
fn check_input(graph: &crate::graph::Graph, input: Option<&Value>) -> ApiResult<()> {
    let Some(Value::Object(input)) = input else {
        return Ok(());
    };
    if let Some(messages) = input.get("messages").and_then(Value::as_array) {
        crate::api::body_shape::check_messages(messages, "input.messages")?;
    }
    let known: JsonMap = input
        .iter()
        .filter(|(key, _)| graph.channels.get(key).is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let writes = graph
        .channels
        .prepare_update(known)
        .map_err(|e| AppError::Invalid(format!("input: {e}")))?;
    graph
        .check_writes(&JsonMap::new(), &writes)
        .map_err(|e| AppError::Invalid(format!("input: {e}")))
}

/// Where the run's thread comes from.
#[derive(Clone, Copy)]
pub(in crate::api) enum Target {
    Thread(ThreadId),
    Stateless,
}

/// The run's final values, handed over by the worker that executes it here.
type RunResult = watch::Receiver<Option<Option<Value>>>;

/// A run that was inserted, with its stream subscribed before anything could be published.
pub(super) struct Started {
    pub(super) run: Run,
    pub(super) subscription: Subscription,
    pub(super) result: RunResult,
    pub(super) resumable: bool,
    pub(super) cancel_on_disconnect: bool,
    pub(super) stateless: bool,
}

/// Builds the run's config: the assistant's (its `context` included), the request's, and the
/// ids nodes may read. The run's values beat the assistant's, which beat the defaults.
fn run_config(assistant: &Assistant, body: &RunRequest, ids: &JsonMap) -> ApiResult<Value> {
    let mut config = settings_of(&assistant.config, &assistant.context);
    let mut configurable = config
        .get("configurable")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let request = body.config.clone().unwrap_or_default();
    let request_configurable = request.configurable.unwrap_or_default();
    let context = body.context.clone().unwrap_or_default();
    if !request_configurable.is_empty() && !context.is_empty() {
        return Err(AppError::BadRequest(
            "Cannot specify both configurable and context. Prefer setting context alone.".into(),
        ));
    }
    config.extend(request.rest);
    configurable.extend(request_configurable);
    configurable.extend(context);
    configurable.extend(ids.clone());
    check_recursion_limit(&config)?;
    config.insert("configurable".into(), Value::Object(configurable));
    Ok(Value::Object(config))
}

/// Validates the request, inserts the run (applying its multitask strategy) and returns it with
/// its stream already subscribed.
pub(super) async fn start(
    state: &AppState,
    owner: &Owner,
    target: Target,
    body: RunRequest,
    key: IdempotencyKey,
) -> ApiResult<Started> {
    start_ticked(state, owner, target, body, key, None).await
}

/// What a thread the run creates is labelled with: the graph and assistant that made it.
fn thread_metadata(assistant: &Assistant) -> JsonMap {
    let mut metadata = JsonMap::new();
    metadata.insert("graph_id".into(), json!(assistant.graph_id));
    metadata.insert("assistant_id".into(), json!(assistant.assistant_id));
    metadata
}

/// `start`, for a cron's tick: the run is inserted only while the tick is still due.
pub(super) async fn start_ticked(
    state: &AppState,
    owner: &Owner,
    target: Target,
    body: RunRequest,
    key: IdempotencyKey,
    cron_tick: Option<CronTick>,
) -> ApiResult<Started> {
    let stateless = matches!(target, Target::Stateless);
    body.validate(stateless)?;
    check_target(state, owner, target).await?;
    // A cron's webhook was checked when the cron was saved, and delivery checks it again
    // before every attempt: no DNS lookup in the scheduler's loop, where one slow resolver
    // would hold back every owner's crons.
    if cron_tick.is_none() {
        check_webhook(state, &body).await?;
    }
    let assistant = resolve(state, &body.assistant_id, owner)
        .await
        .map_err(|e| match e {
            AppError::NotFound(_) => AppError::NotFound("Thread or assistant not found.".into()),
            other => other,
        })?;
    let thread_id = match target {
        Target::Thread(id) => id,
        Target::Stateless => ThreadId::new(),
    };
    let checkpoint_id = start_checkpoint(state, &body, thread_id).await?;
    let graph = registered(state, &assistant)?;
    let human = HumanInput::parse(&body, &assistant, &graph)?;
    if let Some(command) = &human.command {
        check_command(state, command, thread_id, checkpoint_id).await?;
    }
    let place = Placement {
        thread_id,
        stateless,
        checkpoint_id,
    };
    let (mut run, run_keys) = build_run(state, &body, human, &assistant, place)?;
    if let Some(tick) = &cron_tick {
        run.metadata.insert("cron_id".into(), json!(tick.cron_id));
    }
    let insert = RunInsert {
        run,
        owner: owner.clone(),
        thread_metadata: thread_metadata(&assistant),
        create_thread: stateless || body.if_not_exists() == IfNotExists::Create,
        idempotency_key: key.scoped_to(owner),
        cron_tick,
    };
    super::admission::admit(state, owner).await?;
    let resumable = body.resumable();
    // Held before the insert: a worker here may claim the run the moment it is committed.
    if let Some(keys) = run_keys {
        state.runner.keys.hold(insert.run.run_id, keys);
    }
    let inserted = insert_subscribed(state, &insert, body.strategy(), resumable).await;
    let (subscription, result) = inserted.inspect_err(|_| {
        state.runner.keys.drop_keys(insert.run.run_id);
    })?;
    Ok(Started {
        run: insert.run,
        subscription,
        result,
        resumable,
        cancel_on_disconnect: body.on_disconnect() == OnDisconnect::Cancel,
        stateless,
    })
}

/// The assistant's graph, which must be registered in this server.
fn registered(state: &AppState, assistant: &Assistant) -> ApiResult<std::sync::Arc<Graph>> {
    state.registry.get(&assistant.graph_id).ok_or_else(|| {
        AppError::NotFound(format!("Graph '{}' is not registered", assistant.graph_id))
    })
}

/// The thread a run names may not exist yet (`if_not_exists: create`), but if it does it must
/// be the caller's: another owner's thread is "not found". (The insert checks it again under
/// the thread's lock.)
async fn check_target(state: &AppState, owner: &Owner, target: Target) -> ApiResult<()> {
    match target {
        Target::Thread(id) => crate::api::lookups::not_anothers(state, id, owner).await,
        _ => Ok(()),
    }
}

/// A `webhook` must pass the outbound policy (and the server must be able to sign it).
async fn check_webhook(state: &AppState, body: &RunRequest) -> ApiResult<()> {
    if let Some(url) = &body.webhook {
        webhook::vet(url, &state.settings.webhooks)
            .await
            .map_err(|e| AppError::Invalid(format!("webhook: {e}")))?;
    }
    Ok(())
}

/// Checks a run request as `start` would, without creating anything (a cron's payload, when
/// the cron is saved). The assistant is the one the request names.
pub(super) async fn check(
    state: &AppState,
    owner: &Owner,
    target: Target,
    body: &RunRequest,
) -> ApiResult<Assistant> {
    let stateless = matches!(target, Target::Stateless);
    body.validate(stateless)?;
    check_target(state, owner, target).await?;
    check_webhook(state, body).await?;
    let assistant = resolve(state, &body.assistant_id, owner).await?;
    let graph = registered(state, &assistant)?;
    let human = HumanInput::parse(body, &assistant, &graph)?;
    let place = Placement {
        thread_id: ThreadId::new(),
        stateless,
        checkpoint_id: None,
    };
    let (_, run_keys) = build_run(state, body, human, &assistant, place)?;
    if run_keys.is_some() {
        return Err(AppError::Invalid(
            "config.configurable.apiKeys: a cron's run request is stored, and provider keys \
             never are; configure the keys on the server"
                .into(),
        ));
    }
    Ok(assistant)
}

/// The checkpoint the run starts from (`checkpoint_id`, or the one named in `checkpoint`),
/// which must exist on the thread.
async fn start_checkpoint(
    state: &AppState,
    body: &RunRequest,
    thread_id: ThreadId,
) -> ApiResult<Option<CheckpointId>> {
    let checkpoint_id = body.start_checkpoint();
    if let Some(cid) = checkpoint_id
        && state
            .store
            .get_checkpoint(thread_id, "", cid)
            .await?
            .is_none()
    {
        return Err(AppError::NotFound(format!(
            "Checkpoint {cid} not found on thread {thread_id}"
        )));
    }
    Ok(checkpoint_id)
}

/// A run's `command` and breakpoints, checked against the graph. Breakpoints come from the
/// request, else from the assistant's config (`interrupt_before` / `interrupt_after` keys).
struct HumanInput {
    command: Option<ResumeCommand>,
    breakpoints: Breakpoints,
}

impl HumanInput {
    fn parse(body: &RunRequest, assistant: &Assistant, graph: &Graph) -> ApiResult<Self> {
        if let Some(command) = &body.command {
            command.check(graph).map_err(AppError::Invalid)?;
        }
        let from_assistant = |key: &str| {
            let value = assistant.config.get(key).unwrap_or(&Value::Null);
            NodeSet::parse(value, graph, key).map_err(AppError::Invalid)
        };
        let breakpoints = Breakpoints {
            before: match &body.interrupt_before {
                Some(set) => Some(set.clone()),
                None => from_assistant("interrupt_before")?,
            },
            after: match &body.interrupt_after {
                Some(set) => Some(set.clone()),
                None => from_assistant("interrupt_after")?,
            },
        };
        breakpoints.check(graph).map_err(AppError::Invalid)?;
        Ok(Self {
            command: body.command.clone(),
            breakpoints,
        })
    }
}

/// A `resume` must answer something: checked against the checkpoint the run starts from when
/// the thread is idle (a run queued behind another is checked when it starts). A thread with
/// nothing to resume is a 409; an unknown or missing interrupt id a 422.
async fn check_command(
    state: &AppState,
    command: &ResumeCommand,
    thread_id: ThreadId,
    checkpoint_id: Option<CheckpointId>,
) -> ApiResult<()> {
    let Some(resume) = &command.resume else {
        return Ok(());
    };
    // A missing thread is the insert's to report (404, or created empty).
    if !command.goto.is_empty()
        || state.store.get_thread(thread_id).await?.is_none()
        || !state.store.inflight_runs(thread_id).await?.is_empty()
    {
        return Ok(());
    }
    let head = match checkpoint_id {
        Some(id) => state.store.get_checkpoint(thread_id, "", id).await?,
        None => state.store.latest_checkpoint(thread_id, "").await?,
    };
    let (next, tasks) = head.map(|h| (h.next, h.tasks)).unwrap_or_default();
    check_resume(resume, &next, &tasks).map_err(|e| match e {
        ResumeError::NotInterrupted => AppError::Conflict(e.to_string()),
        other => AppError::Invalid(other.to_string()),
    })
}

/// Where a run goes: its thread (a new temporary one when stateless) and the checkpoint it
/// starts from.
#[derive(Clone, Copy)]
struct Placement {
    thread_id: ThreadId,
    stateless: bool,
    checkpoint_id: Option<CheckpointId>,
}

impl Placement {
    /// The ids the run's nodes read from `configurable`.
    fn ids(&self, run_id: RunId, assistant: &Assistant) -> JsonMap {
        let mut ids = JsonMap::new();
        ids.insert("run_id".into(), json!(run_id));
        ids.insert("thread_id".into(), json!(self.thread_id));
        ids.insert("graph_id".into(), json!(assistant.graph_id));
        ids.insert("assistant_id".into(), json!(assistant.assistant_id));
        if let Some(cid) = self.checkpoint_id {
            ids.insert("checkpoint_id".into(), json!(cid));
            ids.insert("checkpoint_ns".into(), json!(""));
        }
        ids
    }
}

/// The pending run: its config (checked by the graph), metadata and stored parameters.
fn build_run(
    state: &AppState,
    body: &RunRequest,
    human: HumanInput,
    assistant: &Assistant,
    place: Placement,
) -> ApiResult<(Run, Option<RunKeys>)> {
    let run_id = RunId::new();
    let mut config = run_config(assistant, body, &place.ids(run_id, assistant))?;
    // Checked with the run's keys still in: a missing server key is fine when the run brings it.
    if let Some(graph) = state.registry.get(&assistant.graph_id) {
        graph.check_config(&config).map_err(AppError::Invalid)?;
        check_input(&graph, body.input.as_ref())?;
    }
    let run_keys = take_run_keys(&mut config, state.settings.allow_run_keys)?;
    let kwargs = RunKwargs {
        input: body.input.clone().unwrap_or(Value::Null),
        command: human.command,
        config,
        // Keys sent in `context` went into `configurable` and were taken out above.
        context: {
            let mut context = body.context.clone().unwrap_or_default();
            context.remove("apiKeys");
            context
        },
        stream_mode: body.modes(),
        interrupt_before: human.breakpoints.before,
        interrupt_after: human.breakpoints.after,
        webhook: body.webhook.clone(),
        // Only an empty list gets this far (see `validate`).
        feedback_keys: body.feedback_keys.as_ref().map(|_| Vec::new()),
        temporary: place.stateless,
        delete_on_completion: place.stateless && body.on_completion() == OnCompletion::Delete,
        subgraphs: body.stream_subgraphs.unwrap_or(false),
        resumable: body.resumable(),
        checkpoint_during: body.checkpoint_during.unwrap_or(true),
        durability: body.durability(),
        run_keys: run_keys.is_some(),
    };
    let now = Timestamp::now();
    let run = Run {
        run_id,
        thread_id: place.thread_id,
        assistant_id: assistant.assistant_id,
        created_at: now.plus_secs(body.after_seconds.unwrap_or(0.0)),
        updated_at: now,
        status: RunStatus::Pending,
        metadata: run_metadata(&kwargs.config, body, assistant)?,
        multitask_strategy: body.strategy(),
        kwargs: serde_json::to_value(&kwargs).map_err(|e| AppError::Internal(e.into()))?,
    };
    Ok((run, run_keys))
}

/// The run's metadata: its config's, then the request's, less the ids the server sets.
fn run_metadata(config: &Value, body: &RunRequest, assistant: &Assistant) -> ApiResult<JsonMap> {
    let mut metadata = match config.get("metadata") {
        None | Some(Value::Null) => JsonMap::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => {
            return Err(AppError::Invalid(
                "config.metadata must be an object".into(),
            ));
        }
    };
    metadata.extend(body.metadata.clone().unwrap_or_default());
    for reserved in ["thread_id", "assistant_id", "run_id", "cron_id"] {
        metadata.remove(reserved);
    }
    metadata.insert("assistant_id".into(), json!(assistant.assistant_id));
    Ok(metadata)
}

/// Takes `configurable.apiKeys` (provider keys a run brings, ODR's per-run keys) out of the
/// config, so they are never stored, echoed, checkpointed or logged: the run gets them from
/// memory. Refused unless the operator allows runs to bring keys.
fn take_run_keys(config: &mut Value, allowed: bool) -> ApiResult<Option<RunKeys>> {
    let Some(keys) = config
        .get_mut("configurable")
        .and_then(Value::as_object_mut)
        .and_then(|c| c.remove("apiKeys"))
    else {
        return Ok(None);
    };
    let Value::Object(map) = keys else {
        return Err(AppError::Invalid(
            "config.configurable.apiKeys must be an object of key names to keys".into(),
        ));
    };
    if map.values().any(|v| !v.is_string() && !v.is_null()) {
        return Err(AppError::Invalid(
            "config.configurable.apiKeys values must be strings".into(),
        ));
    }
    // Empty values are what a front end sends for keys the user left blank.
    let given: JsonMap = map
        .into_iter()
        .filter(|(_, v)| v.as_str().is_some_and(|k| !k.trim().is_empty()))
        .collect();
    if given.is_empty() {
        return Ok(None);
    }
    if !allowed {
        return Err(AppError::Invalid(
            "config.configurable.apiKeys: this server does not accept provider keys from runs \
             (its operator can allow it with [operator] allow_api_keys_from_config)"
                .into(),
        ));
    }
    Ok(Some(RunKeys::new(given.into_iter().filter_map(
        |(k, v)| match v {
            Value::String(key) => Some((k, key)),
            _ => None,
        },
    ))))
}

/// The insert, tried again when it lost to a concurrent transaction (see `retrying_conflicts`).
async fn insert_retrying(state: &AppState, insert: &RunInsert) -> Result<Vec<Run>, StoreError> {
    crate::store::retrying_conflicts("insert a run", || state.store.insert_run(insert)).await
}

/// Inserts the run with its stream subscribed first (a worker may start it the moment it is
/// committed), then applies the multitask strategy's cancellations and wakes a worker.
async fn insert_subscribed(
    state: &AppState,
    insert: &RunInsert,
    strategy: MultitaskStrategy,
    resumable: bool,
) -> ApiResult<(Subscription, RunResult)> {
    let (run_id, thread_id) = (insert.run.run_id, insert.run.thread_id);
    let channel = state.bus.open(run_id, thread_id, resumable);
    let subscription = channel.subscribe();
    let result = channel.result();
    // The first event goes out now, not when a worker claims the run: a queued run's client
    // learns its run id at once. The worker sees the channel is not fresh and does not repeat it.
    let thread_tx = state.bus.thread_sender(thread_id);
    let metadata = json!({"run_id": run_id, "attempt": 1});
    channel.publish("metadata".into(), metadata.to_string(), thread_tx.as_ref());
    let affected = match insert_retrying(state, insert).await {
        Ok(affected) => affected,
        Err(error) => {
            state.bus.close(run_id, None);
            return Err(match error {
                StoreError::NotFound(_) => {
                    AppError::NotFound("Thread or assistant not found.".into())
                }
                other => other.into(),
            });
        }
    };
    let action = match strategy {
        MultitaskStrategy::Rollback => CancelAction::Rollback,
        _ => CancelAction::Interrupt,
    };
    state.runner.cancelled(&affected, action).await;
    state.runner.wake();
    Ok((subscription, result))
}
